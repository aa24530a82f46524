/* test_ctx_stop: doca_ctx_stop as DOCA programs use it, for every context type
 * softdoca implements (an rdma context and a sync event as a context):
 *   - stop of an idle context (never started, or already stopped) succeeds
 *     and changes nothing (doca_ctx.h lists no BAD_STATE for it);
 *   - the sample pattern: stop from the RUNNING state callback, progress
 *     until IDLE, stop again at teardown: DOCA_SUCCESS;
 *   - stop inside a task completion callback with nothing else in flight:
 *     DOCA_ERROR_IN_PROGRESS (STOPPING), IDLE once the callback has
 *     returned, every state callback delivered by doca_pe_progress;
 *   - stop of another context from that callback is not deferred.
 * One line per check, a summary line, non-zero exit on failure. */
#include "check.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define UD(p) ((union doca_data){.ptr = (p)})

static struct doca_dev *dev;
static int in_progress; /* set while this thread is inside doca_pe_progress */

static int progress(struct doca_pe *pe)
{
	int did;

	in_progress = 1;
	did = doca_pe_progress(pe);
	in_progress = 0;
	return did;
}

/* What a context's state callback saw. */
struct watch {
	struct doca_ctx *ctx;
	int n;                         /* callbacks */
	int outside;                   /* callbacks delivered outside doca_pe_progress */
	int bad_order;                 /* prev of a callback != next of the previous one */
	enum doca_ctx_states last;
	int stop_on_running;           /* call doca_ctx_stop from the RUNNING callback */
	doca_error_t stop_rc;          /* what that stop answered */
	enum doca_ctx_states stop_state; /* the state right after it */
};

static void state_cb(const union doca_data ud, struct doca_ctx *ctx, enum doca_ctx_states prev,
		     enum doca_ctx_states next)
{
	struct watch *w = ud.ptr;

	if (ctx != w->ctx)
		w->bad_order++;
	if (!in_progress)
		w->outside++;
	if (w->n && prev != w->last)
		w->bad_order++;
	w->n++;
	w->last = next;
	if (next == DOCA_CTX_STATE_RUNNING && w->stop_on_running) {
		w->stop_on_running = 0;
		w->stop_rc = doca_ctx_stop(ctx);
		doca_ctx_get_state(ctx, &w->stop_state);
	}
}

static void watch_ctx(struct watch *w, struct doca_ctx *ctx)
{
	memset(w, 0, sizeof(*w));
	w->ctx = ctx;
	w->last = DOCA_CTX_STATE_IDLE;
	RC(doca_ctx_set_user_data(ctx, UD(w)), DOCA_SUCCESS);
	RC(doca_ctx_set_state_changed_cb(ctx, state_cb), DOCA_SUCCESS);
}

static enum doca_ctx_states state_of(struct doca_ctx *ctx)
{
	enum doca_ctx_states st = (enum doca_ctx_states)-1;

	doca_ctx_get_state(ctx, &st);
	return st;
}

/* Progress pe (and pe2) until ctx is IDLE, 5 s at most. */
static int progress_until_idle(struct doca_pe *pe, struct doca_pe *pe2, struct doca_ctx *ctx)
{
	double end = now_s() + 5;

	while (state_of(ctx) != DOCA_CTX_STATE_IDLE && now_s() < end) {
		int did = progress(pe);

		if (pe2)
			did |= progress(pe2);
		if (!did)
			usleep(100);
	}
	return state_of(ctx) == DOCA_CTX_STATE_IDLE;
}

/* The checks shared by both context types on an idle, connected ctx:
 * stop when idle, then the sample pattern (stop from the RUNNING callback,
 * stop again at teardown). */
static void idle_and_sample_pattern(const char *what, struct doca_pe *pe, struct doca_ctx *ctx, struct watch *w)
{
	RC(doca_ctx_stop(ctx), DOCA_SUCCESS);
	CHECK(state_of(ctx) == DOCA_CTX_STATE_IDLE && w->n == 0, "%s: stop of a never-started ctx: IDLE, no callback",
	      what);
	progress(pe);
	CHECK(w->n == 0, "%s: and nothing to deliver", what);

	w->stop_on_running = 1;
	RC(doca_ctx_start(ctx), DOCA_SUCCESS);
	CHECK(w->n == 0, "%s: no callback from doca_ctx_start itself", what);
	CHECK(progress_until_idle(pe, NULL, ctx), "%s: stop from the RUNNING callback reaches IDLE", what);
	CHECK(w->stop_rc == DOCA_SUCCESS || w->stop_rc == DOCA_ERROR_IN_PROGRESS,
	      "%s: stop from the RUNNING callback answered %s", what, doca_error_get_name(w->stop_rc));
	CHECK(w->stop_state == DOCA_CTX_STATE_IDLE || w->stop_state == DOCA_CTX_STATE_STOPPING,
	      "%s: state after that stop: %d", what, (int)w->stop_state);
	while (progress(pe))
		;
	CHECK(w->n == 4 && w->last == DOCA_CTX_STATE_IDLE && !w->bad_order && !w->outside,
	      "%s: IDLE->STARTING->RUNNING->STOPPING->IDLE, in order, inside progress (%d callbacks)", what, w->n);
	/* teardown stops again, as the samples do */
	RC(doca_ctx_stop(ctx), DOCA_SUCCESS);
	CHECK(state_of(ctx) == DOCA_CTX_STATE_IDLE, "%s: still IDLE", what);
	progress(pe);
	CHECK(w->n == 4, "%s: the second stop queued no callback", what);
	RC(doca_ctx_stop(ctx), DOCA_SUCCESS);
	/* and it can start again */
	RC(doca_ctx_start(ctx), DOCA_SUCCESS);
	CHECK(state_of(ctx) == DOCA_CTX_STATE_RUNNING, "%s: restarted", what);
	while (progress(pe))
		;
}

/* ------------------------------------------------------------------ sync event context */
struct stopper {
	struct doca_ctx *stop;     /* the ctx to stop from the completion callback */
	int calls;
	doca_error_t rc;           /* what doca_ctx_stop answered there */
	enum doca_ctx_states state; /* the state right after it */
	size_t inflight;           /* doca_ctx_get_num_inflight_tasks there */
	int free_task;             /* free the completing task first (as the samples do) */
};

static void stop_in_callback(struct doca_task *task, union doca_data ud)
{
	struct stopper *s = ud.ptr;

	s->calls++;
	if (s->free_task)
		doca_task_free(task);
	s->rc = doca_ctx_stop(s->stop);
	doca_ctx_get_state(s->stop, &s->state);
	doca_ctx_get_num_inflight_tasks(s->stop, &s->inflight);
}

static void se_set_cb(struct doca_sync_event_task_notify_set *t, union doca_data ud, union doca_data cud)
{
	(void)cud;
	stop_in_callback(doca_sync_event_task_notify_set_as_doca_task(t), ud);
}

static void test_sync_event_ctx(void)
{
	struct doca_pe *pe = NULL;
	struct doca_sync_event *se = NULL, *other = NULL;
	struct doca_sync_event_task_notify_set *t = NULL;
	struct doca_ctx *ctx;
	struct watch w, wo;
	struct stopper s;
	uint64_t v = 0;

	RC(doca_pe_create(&pe), DOCA_SUCCESS);
	RC(doca_sync_event_create(&se), DOCA_SUCCESS);
	RC(doca_sync_event_add_publisher_location_cpu(se, dev), DOCA_SUCCESS);
	RC(doca_sync_event_add_subscriber_location_cpu(se, dev), DOCA_SUCCESS);
	RC(doca_sync_event_task_notify_set_set_conf(se, se_set_cb, se_set_cb, 4), DOCA_SUCCESS);
	ctx = doca_sync_event_as_ctx(se);
	CHECK(ctx != NULL, "sync event as ctx");
	RC(doca_ctx_stop(ctx), DOCA_SUCCESS); /* not even connected to a pe */
	RC(doca_ctx_start(ctx), DOCA_ERROR_NOT_CONNECTED); /* doca_ctx.h: no pe */
	RC(doca_pe_connect_ctx(pe, ctx), DOCA_SUCCESS);
	watch_ctx(&w, ctx);
	idle_and_sample_pattern("sync event", pe, ctx, &w);

	/* stop inside the completion callback of the only task in flight */
	memset(&s, 0, sizeof(s));
	s.stop = ctx;
	s.free_task = 1;
	w.n = 0;
	RC(doca_sync_event_task_notify_set_alloc_init(se, 42, UD(&s), &t), DOCA_SUCCESS);
	RC(doca_task_submit(doca_sync_event_task_notify_set_as_doca_task(t)), DOCA_SUCCESS);
	CHECK(progress_until_idle(pe, NULL, ctx), "sync event: IDLE after a stop inside the completion callback");
	while (progress(pe))
		;
	CHECK(s.calls == 1, "sync event: the completion callback ran once");
	RC(s.rc, DOCA_ERROR_IN_PROGRESS);
	CHECK(s.state == DOCA_CTX_STATE_STOPPING, "sync event: STOPPING inside the callback (%d)", (int)s.state);
	CHECK(s.inflight == 0, "sync event: nothing else in flight");
	CHECK(w.n == 2 && w.last == DOCA_CTX_STATE_IDLE && !w.bad_order && !w.outside,
	      "sync event: RUNNING->STOPPING->IDLE delivered by progress (%d callbacks)", w.n);
	RC(doca_ctx_stop(ctx), DOCA_SUCCESS);
	/* the value was set (the task completed before the stop) */
	RC(doca_ctx_start(ctx), DOCA_SUCCESS);
	RC(doca_sync_event_get(se, &v), DOCA_SUCCESS);
	CHECK(v == 42, "sync event: value 42 (%llu)", (unsigned long long)v);

	/* stopping another, idle-of-tasks ctx from the callback is not deferred */
	RC(doca_sync_event_create(&other), DOCA_SUCCESS);
	RC(doca_sync_event_add_publisher_location_cpu(other, dev), DOCA_SUCCESS);
	RC(doca_sync_event_add_subscriber_location_cpu(other, dev), DOCA_SUCCESS);
	RC(doca_pe_connect_ctx(pe, doca_sync_event_as_ctx(other)), DOCA_SUCCESS);
	watch_ctx(&wo, doca_sync_event_as_ctx(other));
	RC(doca_ctx_start(doca_sync_event_as_ctx(other)), DOCA_SUCCESS);
	while (progress(pe))
		;
	memset(&s, 0, sizeof(s));
	s.stop = doca_sync_event_as_ctx(other);
	s.free_task = 1;
	RC(doca_sync_event_task_notify_set_alloc_init(se, 43, UD(&s), &t), DOCA_SUCCESS);
	RC(doca_task_submit(doca_sync_event_task_notify_set_as_doca_task(t)), DOCA_SUCCESS);
	for (double end = now_s() + 5; !s.calls && now_s() < end;)
		progress(pe);
	RC(s.rc, DOCA_SUCCESS);
	CHECK(s.state == DOCA_CTX_STATE_IDLE, "another ctx stopped from the callback: IDLE at once");
	CHECK(state_of(ctx) == DOCA_CTX_STATE_RUNNING, "the callback's own ctx still RUNNING");
	RC(doca_ctx_stop(ctx), DOCA_SUCCESS);
	while (progress(pe))
		;
	RC(doca_sync_event_destroy(other), DOCA_SUCCESS);
	RC(doca_sync_event_destroy(se), DOCA_SUCCESS);
	RC(doca_pe_destroy(pe), DOCA_SUCCESS);
}

/* ------------------------------------------------------------------ rdma context */
static int established;

static void on_est(struct doca_rdma_connection *c, union doca_data ud, union doca_data cud)
{
	(void)c, (void)ud, (void)cud;
	established++;
}

static void write_cb(struct doca_rdma_task_write *t, union doca_data ud, union doca_data cud)
{
	(void)cud;
	stop_in_callback(doca_rdma_task_write_as_task(t), ud);
}

static struct doca_rdma *make_rdma(struct doca_pe *pe, struct watch *w)
{
	struct doca_rdma *r = NULL;

	RC(doca_rdma_create(dev, &r), DOCA_SUCCESS);
	RC(doca_ctx_stop(doca_rdma_as_ctx(r)), DOCA_SUCCESS); /* not connected to a pe yet */
	RC(doca_ctx_start(doca_rdma_as_ctx(r)), DOCA_ERROR_NOT_CONNECTED);
	RC(doca_rdma_set_connection_state_callbacks(r, NULL, on_est, NULL, NULL), DOCA_SUCCESS);
	RC(doca_rdma_set_permissions(r, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_WRITE), DOCA_SUCCESS);
	RC(doca_rdma_task_write_set_conf(r, write_cb, write_cb, 4), DOCA_SUCCESS);
	RC(doca_pe_connect_ctx(pe, doca_rdma_as_ctx(r)), DOCA_SUCCESS);
	watch_ctx(w, doca_rdma_as_ctx(r));
	return r;
}

static void test_rdma_ctx(void)
{
	struct doca_pe *pa = NULL, *pb = NULL;
	struct doca_rdma *A, *B;
	struct doca_rdma_connection *ca = NULL, *cb = NULL;
	struct doca_ctx *ctxa, *ctxb;
	struct doca_mmap *lm = NULL, *rm = NULL, *imp = NULL;
	struct doca_buf_inventory *inv = NULL;
	struct doca_buf *src = NULL, *dst = NULL;
	struct doca_rdma_task_write *t = NULL;
	const void *da = NULL, *db = NULL, *desc = NULL;
	size_t la = 0, lb = 0, dlen = 0;
	char *lmem = calloc(1, 4096), *rmem = calloc(1, 4096);
	struct watch wa, wb;
	struct stopper s;
	doca_error_t rc;
	double end;

	RC(doca_pe_create(&pa), DOCA_SUCCESS);
	RC(doca_pe_create(&pb), DOCA_SUCCESS);
	A = make_rdma(pa, &wa);
	B = make_rdma(pb, &wb);
	ctxa = doca_rdma_as_ctx(A);
	ctxb = doca_rdma_as_ctx(B);
	idle_and_sample_pattern("rdma", pa, ctxa, &wa);
	RC(doca_ctx_start(ctxb), DOCA_SUCCESS);

	/* connect A and B, register memory on both sides */
	RC(doca_rdma_export(A, &da, &la, &ca), DOCA_SUCCESS);
	RC(doca_rdma_export(B, &db, &lb, &cb), DOCA_SUCCESS);
	RC(doca_rdma_connect(A, db, lb, ca), DOCA_SUCCESS);
	RC(doca_rdma_connect(B, da, la, cb), DOCA_SUCCESS);
	for (end = now_s() + 5; established < 2 && now_s() < end;) {
		progress(pa);
		progress(pb);
		usleep(100);
	}
	CHECK(established == 2, "rdma: connected");
	RC(doca_mmap_create(&lm), DOCA_SUCCESS);
	RC(doca_mmap_set_memrange(lm, lmem, 4096), DOCA_SUCCESS);
	RC(doca_mmap_add_dev(lm, dev), DOCA_SUCCESS);
	RC(doca_mmap_start(lm), DOCA_SUCCESS);
	RC(doca_mmap_create(&rm), DOCA_SUCCESS);
	RC(doca_mmap_set_memrange(rm, rmem, 4096), DOCA_SUCCESS);
	RC(doca_mmap_set_permissions(rm, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_WRITE), DOCA_SUCCESS);
	RC(doca_mmap_add_dev(rm, dev), DOCA_SUCCESS);
	RC(doca_mmap_start(rm), DOCA_SUCCESS);
	RC(doca_mmap_export_rdma(rm, dev, &desc, &dlen), DOCA_SUCCESS);
	RC(doca_mmap_create_from_export(NULL, desc, dlen, dev, &imp), DOCA_SUCCESS);
	RC(doca_buf_inventory_create(4, &inv), DOCA_SUCCESS);
	RC(doca_buf_inventory_start(inv), DOCA_SUCCESS);
	strcpy(lmem, "stopped from its own completion");
	RC(doca_buf_inventory_buf_get_by_args(inv, lm, lmem, 32, lmem, 32, &src), DOCA_SUCCESS);
	RC(doca_buf_inventory_buf_get_by_args(inv, imp, rmem, 4096, rmem, 0, &dst), DOCA_SUCCESS);

	/* a write, the only task in flight; its callback frees it and stops A */
	memset(&s, 0, sizeof(s));
	s.stop = ctxa;
	s.free_task = 1;
	wa.n = 0;
	RC(doca_rdma_task_write_allocate_init(A, ca, src, dst, UD(&s), &t), DOCA_SUCCESS);
	RC(doca_task_submit(doca_rdma_task_write_as_task(t)), DOCA_SUCCESS);
	CHECK(progress_until_idle(pa, pb, ctxa), "rdma: IDLE after a stop inside the completion callback");
	while (progress(pa))
		;
	CHECK(s.calls == 1, "rdma: the completion callback ran once");
	RC(s.rc, DOCA_ERROR_IN_PROGRESS);
	CHECK(s.state == DOCA_CTX_STATE_STOPPING, "rdma: STOPPING inside the callback (%d)", (int)s.state);
	CHECK(s.inflight == 0, "rdma: nothing else in flight");
	CHECK(wa.n == 2 && wa.last == DOCA_CTX_STATE_IDLE && !wa.bad_order && !wa.outside,
	      "rdma: RUNNING->STOPPING->IDLE delivered by progress (%d callbacks)", wa.n);
	CHECK(!strcmp(rmem, "stopped from its own completion"), "rdma: the write landed");
	RC(doca_ctx_stop(ctxa), DOCA_SUCCESS); /* teardown's stop */

	RC(doca_buf_dec_refcount(src, NULL), DOCA_SUCCESS);
	RC(doca_buf_dec_refcount(dst, NULL), DOCA_SUCCESS);
	rc = doca_ctx_stop(ctxb);
	CHECK(rc == DOCA_SUCCESS || rc == DOCA_ERROR_IN_PROGRESS, "rdma: stop B: %s", doca_error_get_name(rc));
	CHECK(progress_until_idle(pb, NULL, ctxb), "rdma: B idle");
	RC(doca_ctx_stop(ctxb), DOCA_SUCCESS);
	RC(doca_rdma_destroy(A), DOCA_SUCCESS);
	RC(doca_rdma_destroy(B), DOCA_SUCCESS);
	RC(doca_buf_inventory_destroy(inv), DOCA_SUCCESS);
	RC(doca_mmap_destroy(imp), DOCA_SUCCESS);
	RC(doca_mmap_destroy(rm), DOCA_SUCCESS);
	RC(doca_mmap_destroy(lm), DOCA_SUCCESS);
	RC(doca_pe_destroy(pa), DOCA_SUCCESS);
	RC(doca_pe_destroy(pb), DOCA_SUCCESS);
	free(lmem);
	free(rmem);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	dev = open_soft_lo();
	CHECK(dev != NULL, "opened soft_lo");
	if (!dev)
		return 1;
	test_sync_event_ctx();
	test_rdma_ctx();
	RC(doca_dev_close(dev), DOCA_SUCCESS);
	return check_summary("test_ctx_stop");
}
