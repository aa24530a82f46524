/* test_pe_batch: DOCA task batches (doca_task_batch_* of doca_pe.h) on
 * batches of RDMA writes made with softdoca_task_batch_allocate, between two
 * rdma contexts on soft_lo connected out of band; the target map is keyed
 * with doca_mmap_set_export_access_token. One line per check, a summary line,
 * non-zero exit on failure. Links against libsoftdoca. */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N 16          /* tasks per batch = the write task pool of A */
#define SLOT 4096     /* bytes per write */

static struct doca_pe *pa, *pb;
static struct doca_rdma *A, *B;
static int est;

static void progress_both(void)
{
	int did = doca_pe_progress(pa);

	did |= doca_pe_progress(pb);
	if (!did)
		usleep(50);
}

/* individual completion callbacks: must not run for tasks in a batch */
static int task_cbs;
static void write_cb(struct doca_rdma_task_write *t, union doca_data ud, union doca_data cud)
{
	(void)t, (void)ud, (void)cud;
	task_cbs++;
}

static void on_est(struct doca_rdma_connection *c, union doca_data ud, union doca_data cud)
{
	(void)c, (void)ud, (void)cud;
	est++;
}

static void on_other(struct doca_rdma_connection *c, union doca_data ud, union doca_data cud)
{
	(void)c, (void)ud, (void)cud;
}

/* what the batch callbacks saw */
struct seen {
	int ok, err;
	struct doca_task_batch *batch;
	uint16_t num;
	uint64_t cud, bud;
	struct doca_task **tasks;
	doca_error_t st[N];
	doca_error_t batch_status;
};
static struct seen seen;

static void record(struct doca_task_batch *b, uint16_t n, union doca_data cud, union doca_data bud,
		   struct doca_task **tasks, doca_error_t *st)
{
	seen.batch = b;
	seen.num = n;
	seen.cud = cud.u64;
	seen.bud = bud.u64;
	seen.tasks = tasks;
	for (uint16_t i = 0; i < n && i < N; i++)
		seen.st[i] = st[i];
	seen.batch_status = doca_task_batch_get_status(b);
}

static void batch_ok(struct doca_task_batch *b, uint16_t n, union doca_data cud, union doca_data bud,
		     struct doca_task **tasks, doca_error_t *st)
{
	seen.ok++;
	record(b, n, cud, bud, tasks, st);
}

static void batch_err(struct doca_task_batch *b, uint16_t n, union doca_data cud, union doca_data bud,
		      struct doca_task **tasks, doca_error_t *st)
{
	seen.err++;
	record(b, n, cud, bud, tasks, st);
}

static int wait_batch(int want_total, double timeout)
{
	double end = now_s() + timeout;

	while (seen.ok + seen.err < want_total && now_s() < end)
		progress_both();
	return seen.ok + seen.err >= want_total;
}

static struct doca_rdma *make_rdma(struct doca_dev *dev, struct doca_pe *pe, uint64_t which)
{
	struct doca_rdma *r = NULL;

	RC(doca_rdma_create(dev, &r), DOCA_SUCCESS);
	RC(doca_rdma_set_permissions(r, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_WRITE), DOCA_SUCCESS);
	RC(doca_rdma_set_connection_state_callbacks(r, NULL, on_est, on_other, on_other), DOCA_SUCCESS);
	RC(doca_rdma_task_write_set_conf(r, write_cb, write_cb, N), DOCA_SUCCESS);
	RC(doca_ctx_set_user_data(doca_rdma_as_ctx(r), (union doca_data){.u64 = which}), DOCA_SUCCESS);
	RC(doca_pe_connect_ctx(pe, doca_rdma_as_ctx(r)), DOCA_SUCCESS);
	/* configuration setters of DOCA 3.3 on an idle ctx */
	RC(doca_ctx_set_completion_vector(doca_rdma_as_ctx(r), 0), DOCA_SUCCESS);
	RC(doca_ctx_start(doca_rdma_as_ctx(r)), DOCA_SUCCESS);
	/* ... and on a running one */
	RC(doca_ctx_set_completion_vector(doca_rdma_as_ctx(r), 0), DOCA_ERROR_BAD_STATE);
	RC(doca_ctx_set_datapath_on_gpu(doca_rdma_as_ctx(r), (struct doca_gpu *)(void *)r), DOCA_ERROR_BAD_STATE);
	RC(doca_ctx_profiler_set_max_nranges(doca_rdma_as_ctx(r), 1), DOCA_ERROR_BAD_STATE);
	return r;
}

/* Allocate a batch of n writes src[i*SLOT] -> dst[i*SLOT] (dst_len per write). */
static struct doca_task_batch *write_batch(struct doca_rdma_connection *conn, struct doca_buf_inventory *inv,
					   struct doca_mmap *lm, uint8_t *src, struct doca_mmap *rm, uint8_t *dst,
					   uint16_t n, size_t bad_slot_dst_len, int bad_slot)
{
	struct doca_task_batch *b = NULL;
	struct doca_task **slots = NULL;

	RC(softdoca_task_batch_allocate(doca_rdma_as_ctx(A), n, (union doca_data){.u64 = 0xb0b}, batch_ok, batch_err,
					&slots, &b),
	   DOCA_SUCCESS);
	if (!b)
		return NULL;
	for (uint16_t i = 0; i < n; i++) {
		struct doca_buf *s = NULL, *d = NULL;
		struct doca_rdma_task_write *t = NULL;
		size_t dl = (int)i == bad_slot ? bad_slot_dst_len : SLOT;

		doca_buf_inventory_buf_get_by_args(inv, lm, src + i * SLOT, SLOT, src + i * SLOT, SLOT, &s);
		doca_buf_inventory_buf_get_by_args(inv, rm, dst + i * SLOT, dl, dst + i * SLOT, 0, &d);
		if (doca_rdma_task_write_allocate_init(A, conn, s, d, (union doca_data){.u64 = i}, &t) != DOCA_SUCCESS)
			printf("write_allocate_init %u failed\n", i);
		slots[i] = doca_rdma_task_write_as_task(t);
	}
	return b;
}

/* Free a batch (and so its tasks), then the bufs of its writes. */
static void free_batch(struct doca_task_batch *b)
{
	uint16_t n = doca_task_batch_get_tasks_num(b);
	struct doca_buf *bufs[2 * N];
	int nb = 0;

	for (uint16_t i = 0; i < n; i++) {
		struct doca_rdma_task_write *t = (struct doca_rdma_task_write *)b->tasks[i];

		bufs[nb++] = (struct doca_buf *)doca_rdma_task_write_get_src_buf(t);
		bufs[nb++] = doca_rdma_task_write_get_dst_buf(t);
	}
	doca_task_batch_free(b);
	for (int i = 0; i < nb; i++)
		doca_buf_dec_refcount(bufs[i], NULL);
}

int main(void)
{
	struct doca_dev *dev;
	struct doca_rdma_connection *ca = NULL, *cb = NULL;
	struct doca_mmap *ma = NULL, *mb = NULL, *rb = NULL;
	struct doca_buf_inventory *inv = NULL;
	struct doca_task_batch *b = NULL, *b2 = NULL;
	struct doca_task **slots = NULL;
	const void *da, *db, *desc;
	size_t la, lb, dlen;
	uint8_t *src = calloc(N, SLOT), *dst = calloc(N, SLOT);
	static const uint8_t token[] = "batch-token";

	dev = open_soft_lo();
	if (!dev || !src || !dst)
		return 1;
	RC(doca_pe_create(&pa), DOCA_SUCCESS);
	RC(doca_pe_create(&pb), DOCA_SUCCESS);
	A = make_rdma(dev, pa, 0xa);
	B = make_rdma(dev, pb, 0xb);
	RC(doca_rdma_export(A, &da, &la, &ca), DOCA_SUCCESS);
	RC(doca_rdma_export(B, &db, &lb, &cb), DOCA_SUCCESS);
	RC(doca_rdma_connect(A, db, lb, ca), DOCA_SUCCESS);
	RC(doca_rdma_connect(B, da, la, cb), DOCA_SUCCESS);
	for (double end = now_s() + 10; est < 2 && now_s() < end;)
		progress_both();
	CHECK(est == 2, "connected");

	/* memory: A's source, B's target keyed with an access token */
	doca_mmap_create(&ma);
	doca_mmap_set_memrange(ma, src, N * SLOT);
	doca_mmap_add_dev(ma, dev);
	RC(doca_mmap_start(ma), DOCA_SUCCESS);
	doca_mmap_create(&mb);
	doca_mmap_set_memrange(mb, dst, N * SLOT);
	doca_mmap_set_permissions(mb, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_WRITE);
	doca_mmap_add_dev(mb, dev);
	RC(doca_mmap_set_export_access_token(mb, dev, token, sizeof(token)), DOCA_SUCCESS);
	RC(doca_mmap_start(mb), DOCA_SUCCESS);
	RC(doca_mmap_export_rdma(mb, dev, &desc, &dlen), DOCA_SUCCESS);
	CHECK(!memcmp((const uint8_t *)desc + 44, token, sizeof(token)), "descriptor key is the token");
	RC(doca_mmap_create_from_export(NULL, desc, dlen, dev, &rb), DOCA_SUCCESS);
	RC(doca_buf_inventory_create(4 * N, &inv), DOCA_SUCCESS);
	RC(doca_buf_inventory_start(inv), DOCA_SUCCESS);

	/* allocation checks */
	RC(softdoca_task_batch_allocate(doca_rdma_as_ctx(A), 0, (union doca_data){0}, batch_ok, batch_err, &slots, &b),
	   DOCA_ERROR_INVALID_VALUE);
	RC(softdoca_task_batch_allocate(doca_rdma_as_ctx(A), 129, (union doca_data){0}, batch_ok, batch_err, &slots,
					&b),
	   DOCA_ERROR_INVALID_VALUE);
	RC(softdoca_task_batch_allocate(doca_rdma_as_ctx(A), 4, (union doca_data){0}, batch_ok, NULL, &slots, &b),
	   DOCA_ERROR_INVALID_VALUE);
	RC(softdoca_task_batch_allocate(NULL, 4, (union doca_data){0}, batch_ok, batch_err, &slots, &b),
	   DOCA_ERROR_INVALID_VALUE);
	RC(softdoca_task_batch_allocate(doca_rdma_as_ctx(A), 4, (union doca_data){0}, batch_ok, batch_err, NULL, &b),
	   DOCA_ERROR_INVALID_VALUE);

	/* validation: empty slot, a task of another ctx, the same task twice */
	RC(softdoca_task_batch_allocate(doca_rdma_as_ctx(A), 3, (union doca_data){.u64 = 1}, batch_ok, batch_err,
					&slots, &b2),
	   DOCA_SUCCESS);
	CHECK(doca_task_batch_get_tasks_num(b2) == 3, "3 slots");
	RC(doca_task_batch_submit(b2), DOCA_ERROR_INVALID_VALUE);
	{
		struct doca_rdma_task_write *tw = NULL, *tb = NULL;
		struct doca_buf *s = NULL, *d = NULL;

		doca_buf_inventory_buf_get_by_args(inv, ma, src, SLOT, src, SLOT, &s);
		doca_buf_inventory_buf_get_by_args(inv, rb, dst, SLOT, dst, 0, &d);
		RC(doca_rdma_task_write_allocate_init(A, ca, s, d, (union doca_data){0}, &tw), DOCA_SUCCESS);
		RC(doca_rdma_task_write_allocate_init(B, cb, s, d, (union doca_data){0}, &tb), DOCA_SUCCESS);
		slots[0] = slots[1] = slots[2] = doca_rdma_task_write_as_task(tw);
		RC(doca_task_batch_try_submit(b2), DOCA_ERROR_INVALID_VALUE); /* duplicate */
		slots[1] = doca_rdma_task_write_as_task(tb);
		RC(doca_task_batch_submit(b2), DOCA_ERROR_INVALID_VALUE); /* B's task in A's batch */
		CHECK(doca_rdma_task_write_as_task(tw)->batch == NULL && doca_rdma_task_write_as_task(tb)->batch == NULL,
		      "failed validation leaves no task marked");
		doca_task_free(doca_rdma_task_write_as_task(tb));
		slots[1] = slots[2] = NULL;
		doca_task_batch_free(b2); /* frees tw (slot 0) */
		RC(doca_task_batch_get_status(b2), DOCA_ERROR_BAD_STATE);
		doca_buf_dec_refcount(s, NULL);
		doca_buf_dec_refcount(d, NULL);
	}

	/* a batch of N writes: one callback, none per task, bytes landed */
	for (size_t i = 0; i < (size_t)N * SLOT; i++)
		src[i] = (uint8_t)(i * 13 + 5);
	b = write_batch(ca, inv, ma, src, rb, dst, N, SLOT, -1);
	CHECK(b && doca_task_batch_get_tasks_num(b) == N, "batch of %d", N);
	CHECK(doca_task_batch_get_ctx(b) == doca_rdma_as_ctx(A), "batch ctx is A");
	CHECK(doca_task_batch_get_ctx_user_data(b).u64 == 0xa, "batch ctx user data");
	CHECK(doca_task_batch_get_user_data(b).u64 == 0xb0b, "batch user data from allocate");
	doca_task_batch_set_user_data(b, (union doca_data){.u64 = 0xcafe});
	CHECK(doca_task_batch_get_user_data(b).u64 == 0xcafe, "batch user data set");
	RC(doca_task_batch_get_status(b), DOCA_SUCCESS);
	RC(doca_task_batch_submit(b), DOCA_SUCCESS);
	RC(doca_task_batch_get_status(b), DOCA_ERROR_IN_PROGRESS);
	RC(doca_task_batch_submit(b), DOCA_ERROR_BAD_STATE);
	doca_task_batch_free(b); /* in flight: ignored */
	CHECK(doca_task_batch_get_tasks_num(b) == N, "free of a batch in flight is ignored");
	CHECK(wait_batch(1, 10), "batch completed");
	CHECK(seen.ok == 1 && seen.err == 0 && task_cbs == 0, "one success callback, no task callbacks (%d/%d/%d)",
	      seen.ok, seen.err, task_cbs);
	CHECK(seen.batch == b && seen.num == N && seen.cud == 0xa && seen.bud == 0xcafe, "callback arguments");
	{
		int all = 1;

		for (int i = 0; i < N; i++)
			all &= seen.st[i] == DOCA_SUCCESS;
		CHECK(all && seen.batch_status == DOCA_SUCCESS, "every status DOCA_SUCCESS");
	}
	CHECK(memcmp(src, dst, (size_t)N * SLOT) == 0, "%d x %d bytes landed in the token-keyed map", N, SLOT);
	RC(doca_task_batch_get_status(b), DOCA_SUCCESS);

	/* resubmit the same batch (new bytes) */
	for (size_t i = 0; i < (size_t)N * SLOT; i++)
		src[i] = (uint8_t)(i * 3 + 1);
	RC(doca_task_batch_try_submit(b), DOCA_SUCCESS);
	CHECK(wait_batch(2, 10) && seen.ok == 2 && task_cbs == 0, "resubmitted batch completed");
	CHECK(memcmp(src, dst, (size_t)N * SLOT) == 0, "second round landed");
	free_batch(b);
	RC(doca_task_batch_get_status(b), DOCA_ERROR_BAD_STATE);
	{
		/* the batch freed its N tasks: the pool of N has room for N again */
		struct doca_rdma_task_write *t[N];
		struct doca_buf *s = NULL, *d = NULL;
		int ok = 1;

		doca_buf_inventory_buf_get_by_args(inv, ma, src, SLOT, src, SLOT, &s);
		doca_buf_inventory_buf_get_by_args(inv, rb, dst, SLOT, dst, 0, &d);
		for (int i = 0; i < N; i++)
			ok &= doca_rdma_task_write_allocate_init(A, ca, s, d, (union doca_data){0}, &t[i]) == DOCA_SUCCESS;
		CHECK(ok, "doca_task_batch_free returned its %d tasks to the pool", N);
		for (int i = 0; i < N && ok; i++)
			doca_task_free(doca_rdma_task_write_as_task(t[i]));
		doca_buf_dec_refcount(s, NULL);
		doca_buf_dec_refcount(d, NULL);
	}

	/* a task that fails to submit (destination too small) at slot 2 of 4:
	 * slots 0-1 go out, 2-3 complete with its error, error callback */
	memset(&seen, 0, sizeof(seen));
	memset(dst, 0, (size_t)N * SLOT);
	b = write_batch(ca, inv, ma, src, rb, dst, 4, SLOT / 2, 2);
	RC(doca_task_batch_submit(b), DOCA_SUCCESS);
	CHECK(wait_batch(1, 10) && seen.err == 1 && seen.ok == 0, "error callback once");
	CHECK(seen.st[0] == DOCA_SUCCESS && seen.st[1] == DOCA_SUCCESS && seen.st[2] == DOCA_ERROR_INVALID_VALUE &&
		      seen.st[3] == DOCA_ERROR_INVALID_VALUE,
	      "statuses %s %s %s %s", doca_error_get_name(seen.st[0]), doca_error_get_name(seen.st[1]),
	      doca_error_get_name(seen.st[2]), doca_error_get_name(seen.st[3]));
	RC(doca_task_batch_get_status(b), DOCA_ERROR_INVALID_VALUE);
	CHECK(memcmp(src, dst, 2 * SLOT) == 0, "slots 0-1 landed");
	free_batch(b);

	/* failing at slot 0: nothing goes out, the application keeps the batch */
	memset(&seen, 0, sizeof(seen));
	b = write_batch(ca, inv, ma, src, rb, dst, 2, SLOT / 2, 0);
	RC(doca_task_batch_submit(b), DOCA_ERROR_INVALID_VALUE);
	RC(doca_task_batch_get_status(b), DOCA_ERROR_INVALID_VALUE);
	for (int i = 0; i < 20; i++)
		progress_both();
	CHECK(seen.ok + seen.err == 0, "no callback for a batch that was not submitted");
	free_batch(b);

	/* the ctx stops with a batch in flight: its tasks are flushed, error callback */
	memset(&seen, 0, sizeof(seen));
	b = write_batch(ca, inv, ma, src, rb, dst, 4, SLOT, -1);
	RC(doca_task_batch_submit(b), DOCA_SUCCESS);
	{
		doca_error_t st = doca_ctx_stop(doca_rdma_as_ctx(A));
		enum doca_ctx_states s = DOCA_CTX_STATE_RUNNING;

		CHECK(st == DOCA_SUCCESS || st == DOCA_ERROR_IN_PROGRESS, "ctx stop: %s", doca_error_get_name(st));
		CHECK(wait_batch(1, 10), "batch completed across the stop");
		for (double end = now_s() + 10; s != DOCA_CTX_STATE_IDLE && now_s() < end;) {
			progress_both();
			doca_ctx_get_state(doca_rdma_as_ctx(A), &s);
		}
		CHECK(s == DOCA_CTX_STATE_IDLE, "A idle");
		CHECK(seen.ok + seen.err == 1 && task_cbs == 0, "one batch callback (%s)", seen.ok ? "ok" : "error");
	}
	free_batch(b);

	RC(doca_buf_inventory_destroy(inv), DOCA_SUCCESS);
	RC(doca_mmap_destroy(rb), DOCA_SUCCESS);
	RC(doca_mmap_destroy(ma), DOCA_SUCCESS);
	RC(doca_mmap_destroy(mb), DOCA_SUCCESS);
	{
		doca_error_t st = doca_ctx_stop(doca_rdma_as_ctx(B));
		enum doca_ctx_states s = DOCA_CTX_STATE_RUNNING;

		(void)st;
		for (double end = now_s() + 10; s != DOCA_CTX_STATE_IDLE && now_s() < end;) {
			progress_both();
			doca_ctx_get_state(doca_rdma_as_ctx(B), &s);
		}
	}
	RC(doca_rdma_destroy(A), DOCA_SUCCESS);
	RC(doca_rdma_destroy(B), DOCA_SUCCESS);
	RC(doca_pe_destroy(pa), DOCA_SUCCESS);
	RC(doca_pe_destroy(pb), DOCA_SUCCESS);
	RC(doca_dev_close(dev), DOCA_SUCCESS);
	free(src);
	free(dst);
	return check_summary("test_pe_batch");
}
