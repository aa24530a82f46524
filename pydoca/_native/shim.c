/*
 * pydoca's C shims, compiled into the cffi module pydoca._native._doca_cffi.
 *
 * DOCA passes union doca_data by value, which libffi cannot express: these
 * shims receive DOCA's callbacks and forward plain integers to the three
 * extern "Python" handlers of pydoca/_native/callbacks.py.
 *
 * Task batches: a task whose user data carries PYDOCA_BATCH_TAG belongs to a
 * pydoca_batch; its completion is recorded here (status, counters), the task
 * freed, and Python is not called at all. pydoca_rdma_batch_submit allocates
 * and submits a run of tasks in one call, ringing the doorbell once (submit_ex
 * without FLUSH for all but the last that goes in, where the runtime has
 * submit_ex).
 *
 * Task rings: a task whose user data carries PYDOCA_RING_TAG is a ring slot's
 * receive or send; its completion is written to the ring's entries and the
 * task freed (the slot is posted again with a fresh task from the pool).
 *
 * A task in flight holds a reference on each of its buffers (doca_buf's
 * refcount), taken where the task is allocated and dropped once it completed
 * or was refused: a Buffer closed under a task goes back to its inventory only
 * then, never while the runtime may still move its bytes. Here for the tasks
 * this file allocates (PYDOCA_REF_TAG marks the single ones; batch and ring
 * slots keep theirs), in pydoca.ctx.Task for those Python allocates.
 */
#include "doca_all.h"
#include "shim_types.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define PYDOCA_BATCH_TAG (1ULL << 63)
#define PYDOCA_RING_TAG (1ULL << 62)
#define PYDOCA_DONE_TAG (1ULL << 61)
#define PYDOCA_REF_TAG (1ULL << 60)

static void _pydoca_task_done(struct doca_task *task, uint64_t task_ud, int success);
static void _pydoca_ctx_state(uint64_t ctx_ud, struct doca_ctx *ctx, int prev, int next);
static void _pydoca_conn_event(int kind, struct doca_rdma_connection *conn, uint64_t conn_ud, uint64_t ctx_ud);

/* In DOCA 2.9 already; weak since the batches, which fall back to doca_task_submit.
 * The functions added after 2.9 are made weak by _build.py (versions.OPTIONAL),
 * which appends their #pragma weak lines and the pydoca_optional_* table to this file. */
#pragma weak doca_task_submit_ex
#pragma weak doca_rdma_connection_get_user_data

/* softdoca's extension (absent on real DOCA): why a task failed, in words. */
const char *softdoca_task_get_error_detail(const struct doca_task *task);
#pragma weak softdoca_task_get_error_detail

static void pydoca_state_shim(const union doca_data ud, struct doca_ctx *ctx,
			      enum doca_ctx_states prev, enum doca_ctx_states next)
{
	_pydoca_ctx_state(ud.u64, ctx, (int)prev, (int)next);
}

doca_error_t pydoca_ctx_set_state_cb(struct doca_ctx *ctx)
{
	return doca_ctx_set_state_changed_cb(ctx, pydoca_state_shim);
}

uint64_t pydoca_task_get_user_data(const struct doca_task *task)
{
	return doca_task_get_user_data(task).u64;
}

static void pydoca_conn_request(struct doca_rdma_connection *c, union doca_data cu)
{ _pydoca_conn_event(0, c, 0, cu.u64); }
static void pydoca_conn_established(struct doca_rdma_connection *c, union doca_data u, union doca_data cu)
{ _pydoca_conn_event(1, c, u.u64, cu.u64); }
static void pydoca_conn_failure(struct doca_rdma_connection *c, union doca_data u, union doca_data cu)
{ _pydoca_conn_event(2, c, u.u64, cu.u64); }
static void pydoca_conn_disconnect(struct doca_rdma_connection *c, union doca_data u, union doca_data cu)
{ _pydoca_conn_event(3, c, u.u64, cu.u64); }

doca_error_t pydoca_rdma_set_conn_cbs(struct doca_rdma *rdma)
{
	return doca_rdma_set_connection_state_callbacks(rdma, pydoca_conn_request, pydoca_conn_established,
							pydoca_conn_failure, pydoca_conn_disconnect);
}

enum { PYDOCA_RING_RECEIVE = 0, PYDOCA_RING_SEND = 1 };

/* A reference on a and b (b may be NULL) for a task in flight; none taken on failure. */
doca_error_t pydoca_hold(struct doca_buf *a, struct doca_buf *b)
{
	doca_error_t rc = doca_buf_inc_refcount(a, NULL);

	if (rc == DOCA_SUCCESS && b) {
		rc = doca_buf_inc_refcount(b, NULL);
		if (rc != DOCA_SUCCESS)
			doca_buf_dec_refcount(a, NULL);
	}
	return rc;
}

/* Drop what pydoca_hold took (NULLs are skipped). */
void pydoca_unhold(struct doca_buf *a, struct doca_buf *b)
{
	if (a)
		doca_buf_dec_refcount(a, NULL);
	if (b)
		doca_buf_dec_refcount(b, NULL);
}

/* The buffers slot s holds (a batch task's references, or the buffers a range batch took) are dropped. */
static void pydoca_slot_release(struct pydoca_batch_slot *s)
{
	pydoca_unhold(s->a, s->b);
	s->a = s->b = NULL;
}

/* A ring task completed: record it as the ring's next entry and free it. */
static int pydoca_ring_done(struct doca_task *task, uint64_t ud, int success)
{
	struct pydoca_ring_slot *slot = (struct pydoca_ring_slot *)(uintptr_t)(ud & ~PYDOCA_RING_TAG);
	struct pydoca_ring *r = slot->ring;
	struct pydoca_ring_entry *e = &r->entries[r->head % r->n];

	e->slot = slot->index;
	e->status = 0;
	if (!success) {
		doca_error_t st = doca_task_get_status(task);

		e->status = st != DOCA_SUCCESS ? (int32_t)st : (int32_t)DOCA_ERROR_UNKNOWN; /* failed is never 0 */
	}
	e->length = e->opcode = e->imm = 0;
	e->conn_ud = 0;
	if (success && r->kind == PYDOCA_RING_RECEIVE) {
		struct doca_rdma_task_receive *t = slot->recv;
		const struct doca_rdma_connection *c = t ? doca_rdma_task_receive_get_result_rdma_connection(t) : NULL;
		union doca_data d;

		if (t) {
			e->length = doca_rdma_task_receive_get_result_len(t);
			e->opcode = (uint32_t)doca_rdma_task_receive_get_result_opcode(t);
			if (e->opcode != DOCA_RDMA_OPCODE_RECV_SEND)
				e->imm = doca_rdma_task_receive_get_result_immediate_data(t);
		}
		if (c && doca_rdma_connection_get_user_data && doca_rdma_connection_get_user_data(c, &d) == DOCA_SUCCESS)
			e->conn_ud = d.u64;
	}
	r->failed += success ? 0 : 1;
	slot->recv = NULL;
	slot->posted = 0;
	r->posted--;
	r->head++;
	doca_task_free(task);
	pydoca_unhold(slot->buf, NULL);
	return 1;
}

/*
 * Single tasks (pydoca_rdma_submit_fast): a task whose user data carries
 * PYDOCA_DONE_TAG and that succeeded is recorded here, in the completing
 * thread's list (its Python key), and freed: no Python call per completion.
 * The thread that progressed drains the list right after doca_pe_progress
 * returns (pydoca_done_take), and before any Python callback runs on it (a
 * failed task, or one that found the list full, still goes through
 * _pydoca_task_done, which drains first), so Python sees completions in order.
 * Per thread: a progress engine is progressed by the thread that calls
 * doca_pe_progress, which runs the callbacks, so no lock is needed.
 */
#define PYDOCA_DONE_MAX 512
static __thread uint64_t pydoca_done_ids[PYDOCA_DONE_MAX];
static __thread uint32_t pydoca_done_n;

/*
 * Watched tasks: a task given a done callback while in flight (pydoca_done_watch)
 * completes through _pydoca_task_done as any task, so its callbacks run inside
 * DOCA's completion callback, the task still allocated (what a callback that
 * stops its context sees). Few at a time (the requester's transfers): a small
 * array under a mutex, looked at only while it holds any.
 */
static pthread_mutex_t pydoca_watch_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t *pydoca_watched;
static uint32_t pydoca_nwatched, pydoca_capwatched;

int pydoca_done_watch(uint64_t key)
{
	int rc = 0;

	pthread_mutex_lock(&pydoca_watch_mu);
	if (pydoca_nwatched == pydoca_capwatched) {
		uint32_t cap = pydoca_capwatched ? 2 * pydoca_capwatched : 16;
		uint64_t *tab = realloc(pydoca_watched, cap * sizeof(*tab));

		if (!tab)
			rc = -1;
		else
			pydoca_watched = tab, pydoca_capwatched = cap;
	}
	if (rc == 0) {
		pydoca_watched[pydoca_nwatched] = key;
		__atomic_store_n(&pydoca_nwatched, pydoca_nwatched + 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&pydoca_watch_mu);
	return rc;
}

int pydoca_done_unwatch(uint64_t key)
{
	int found = 0;

	if (!__atomic_load_n(&pydoca_nwatched, __ATOMIC_ACQUIRE))
		return 0;
	pthread_mutex_lock(&pydoca_watch_mu);
	for (uint32_t i = 0; i < pydoca_nwatched; i++) {
		if (pydoca_watched[i] == key) {
			pydoca_watched[i] = pydoca_watched[pydoca_nwatched - 1];
			__atomic_store_n(&pydoca_nwatched, pydoca_nwatched - 1, __ATOMIC_RELEASE);
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&pydoca_watch_mu);
	return found;
}

static int pydoca_done_record(struct doca_task *task, uint64_t ud, int success)
{
	uint64_t key = ud & ~PYDOCA_DONE_TAG;

	if (pydoca_done_unwatch(key) || !success || pydoca_done_n >= PYDOCA_DONE_MAX)
		return 0;
	pydoca_done_ids[pydoca_done_n++] = key;
	doca_task_free(task);
	return 1;
}

struct pydoca_done_view pydoca_done_take(void)
{
	struct pydoca_done_view v;

	v.ids = pydoca_done_ids;
	v.n = pydoca_done_n;
	pydoca_done_n = 0;
	return v;
}

/* A batch task completed: record it in its batch and free it; 0 when the task is not a batch task. */
static int pydoca_batch_done(struct doca_task *task, uint64_t ud, int success)
{
	struct pydoca_batch_slot *slot;
	struct pydoca_batch *b;

	if (ud & PYDOCA_RING_TAG)
		return pydoca_ring_done(task, ud, success);
	if (ud & PYDOCA_DONE_TAG)
		return pydoca_done_record(task, ud, success);
	if (!(ud & PYDOCA_BATCH_TAG))
		return 0;
	slot = (struct pydoca_batch_slot *)(uintptr_t)(ud & ~PYDOCA_BATCH_TAG);
	b = slot->batch;
	b->status[slot->index] = success ? 0 : (int32_t)doca_task_get_status(task);
	if (!success && b->failed == 0 && softdoca_task_get_error_detail) {
		const char *why = softdoca_task_get_error_detail(task);
		if (why)
			snprintf(b->first_error, sizeof(b->first_error), "%s", why);
	}
	b->failed += success ? 0 : 1;
	doca_task_free(task);
	pydoca_slot_release(slot);
	b->done++;
	return 1;
}

/*
 * The buffers a single task of this file holds (PYDOCA_REF_TAG), dropped as it
 * completes, before Python hears of it (a done callback may close the Buffers
 * and their inventory at once): the kinds of pydoca_batch_alloc; the other
 * types never carry the tag.
 */
struct pydoca_held {
	struct doca_buf *a, *b;
};

#define PYDOCA_HELD_2(T)                                                                                \
static struct pydoca_held pydoca_held_##T(const struct doca_rdma_task_##T *t)                           \
{ struct pydoca_held h = {(struct doca_buf *)doca_rdma_task_##T##_get_src_buf(t),                       \
			  doca_rdma_task_##T##_get_dst_buf(t)}; return h; }
#define PYDOCA_HELD_1(T)                                                                                \
static struct pydoca_held pydoca_held_##T(const struct doca_rdma_task_##T *t)                           \
{ struct pydoca_held h = {(struct doca_buf *)doca_rdma_task_##T##_get_src_buf(t), NULL}; return h; }
#define PYDOCA_HELD_0(T)                                                                                \
static struct pydoca_held pydoca_held_##T(const struct doca_rdma_task_##T *t)                           \
{ struct pydoca_held h = {NULL, NULL}; (void)t; return h; }
PYDOCA_HELD_2(write)
PYDOCA_HELD_2(read)
PYDOCA_HELD_2(write_imm)
PYDOCA_HELD_1(send)
PYDOCA_HELD_1(send_imm)
PYDOCA_HELD_0(receive)
PYDOCA_HELD_0(atomic_cmp_swp)
PYDOCA_HELD_0(atomic_fetch_add)
PYDOCA_HELD_0(remote_net_sync_event_get)
PYDOCA_HELD_0(remote_net_sync_event_notify_set)
PYDOCA_HELD_0(remote_net_sync_event_notify_add)

#define PYDOCA_TASK_SHIM(T)                                                                             \
static void pydoca_##T##_done(struct doca_rdma_task_##T *t, uint64_t ud, int success)                  \
{                                                                                                       \
	struct doca_task *task = doca_rdma_task_##T##_as_task(t);                                         \
	if (ud & PYDOCA_REF_TAG) {                                                                      \
		struct pydoca_held h = pydoca_held_##T(t);                                              \
		ud &= ~PYDOCA_REF_TAG;                                                                  \
		pydoca_unhold(h.a, h.b);                                                                \
	}                                                                                               \
	if (!pydoca_batch_done(task, ud, success))                                                      \
		_pydoca_task_done(task, ud, success);                                                   \
}                                                                                                       \
static void pydoca_##T##_ok(struct doca_rdma_task_##T *t, union doca_data u, union doca_data cu)        \
{ (void)cu; pydoca_##T##_done(t, u.u64, 1); }                                                           \
static void pydoca_##T##_err(struct doca_rdma_task_##T *t, union doca_data u, union doca_data cu)       \
{ (void)cu; pydoca_##T##_done(t, u.u64, 0); }                                                           \
doca_error_t pydoca_rdma_task_##T##_set_conf(struct doca_rdma *rdma, uint32_t num_tasks)                 \
{ return doca_rdma_task_##T##_set_conf(rdma, pydoca_##T##_ok, pydoca_##T##_err, num_tasks); }

/* one PYDOCA_TASK_SHIM(type) per task_types.TASK_TYPES: generated by _build.py, inserted here */
PYDOCA_TASK_SHIMS

enum { PYDOCA_B_WRITE = 0, PYDOCA_B_READ = 1, PYDOCA_B_SEND = 2, PYDOCA_B_WRITE_IMM = 3, PYDOCA_B_SEND_IMM = 4 };

static doca_error_t pydoca_batch_alloc(struct doca_rdma *rdma, int kind, struct doca_rdma_connection *conn,
				       struct doca_buf *a, struct doca_buf *b, uint32_t imm, union doca_data ud,
				       struct doca_task **out)
{
	doca_error_t rc = DOCA_ERROR_INVALID_VALUE;
	switch (kind) {
	case PYDOCA_B_WRITE: {
		struct doca_rdma_task_write *t;
		rc = doca_rdma_task_write_allocate_init(rdma, conn, a, b, ud, &t);
		if (rc == DOCA_SUCCESS)
			*out = doca_rdma_task_write_as_task(t);
		break;
	}
	case PYDOCA_B_READ: {
		struct doca_rdma_task_read *t;
		rc = doca_rdma_task_read_allocate_init(rdma, conn, a, b, ud, &t);
		if (rc == DOCA_SUCCESS)
			*out = doca_rdma_task_read_as_task(t);
		break;
	}
	case PYDOCA_B_SEND: {
		struct doca_rdma_task_send *t;
		rc = doca_rdma_task_send_allocate_init(rdma, conn, a, ud, &t);
		if (rc == DOCA_SUCCESS)
			*out = doca_rdma_task_send_as_task(t);
		break;
	}
	case PYDOCA_B_WRITE_IMM: {
		struct doca_rdma_task_write_imm *t;
		rc = doca_rdma_task_write_imm_allocate_init(rdma, conn, a, b, imm, ud, &t);
		if (rc == DOCA_SUCCESS)
			*out = doca_rdma_task_write_imm_as_task(t);
		break;
	}
	case PYDOCA_B_SEND_IMM: {
		struct doca_rdma_task_send_imm *t;
		rc = doca_rdma_task_send_imm_allocate_init(rdma, conn, a, imm, ud, &t);
		if (rc == DOCA_SUCCESS)
			*out = doca_rdma_task_send_imm_as_task(t);
		break;
	}
	default:
		break;
	}
	return rc;
}

/*
 * One task of kind (PYDOCA_B_*) allocated with user data ud and submitted, in
 * one call from Python. Allocation failure: *out NULL. Submit failure: the
 * task is left in *out, not freed, so the caller can read why and free it.
 */
doca_error_t pydoca_rdma_submit_one(struct doca_rdma *rdma, int kind, struct doca_rdma_connection *conn,
				    struct doca_buf *a, struct doca_buf *b, uint32_t imm, uint64_t ud,
				    struct doca_task **out)
{
	union doca_data data;
	doca_error_t rc;

	data.u64 = ud | PYDOCA_REF_TAG;
	*out = NULL;
	rc = pydoca_hold(a, b);
	if (rc != DOCA_SUCCESS)
		return rc;
	rc = pydoca_batch_alloc(rdma, kind, conn, a, b, imm, data, out);
	if (rc != DOCA_SUCCESS) {
		*out = NULL;
		pydoca_unhold(a, b);
		return rc;
	}
	rc = doca_task_submit(*out);
	if (rc != DOCA_SUCCESS)
		pydoca_unhold(a, b);
	return rc;
}

/*
 * A single task (write, send, write_imm, send_imm) whose success is recorded in
 * C (pydoca_done_take), allocated and submitted in one call, with no out
 * pointer: a task the runtime refused is kept for the calling thread, which
 * reads why and frees it with pydoca_refused_take (*_task NULL when the
 * allocation itself failed). Thread-safe: both are per thread.
 */
static __thread struct doca_task *pydoca_refused;

doca_error_t pydoca_rdma_submit_fast(struct doca_rdma *rdma, int kind, struct doca_rdma_connection *conn,
				     struct doca_buf *a, struct doca_buf *b, uint32_t imm, uint64_t key)
{
	struct doca_task *task = NULL;
	union doca_data data;
	doca_error_t rc;

	data.u64 = key | PYDOCA_DONE_TAG | PYDOCA_REF_TAG;
	pydoca_refused = NULL;
	rc = pydoca_hold(a, b);
	if (rc != DOCA_SUCCESS)
		return rc;
	rc = pydoca_batch_alloc(rdma, kind, conn, a, b, imm, data, &task);
	if (rc != DOCA_SUCCESS) {
		pydoca_unhold(a, b);
		return rc;
	}
	rc = doca_task_submit(task);
	if (rc != DOCA_SUCCESS) {
		pydoca_unhold(a, b);
		pydoca_refused = task;
	}
	return rc;
}

struct doca_task *pydoca_refused_take(void)
{
	struct doca_task *t = pydoca_refused;

	pydoca_refused = NULL;
	return t;
}

/*
 * Allocate and submit tasks [first, first+count) of a batch (a[i], b[i], imm[i]
 * per task; b or imm may be NULL where the kind needs none). Stops at the first
 * failure and returns it; batch->submitted counts what went in.
 *
 * The doorbell rings with the last task that goes in, wherever the run stops:
 * each task is held until the next one is allocated, then submitted without
 * FLUSH; the held one goes with FLUSH when the run ends, the task pool being
 * full included (a run cut short by the pool would otherwise leave its tasks
 * unflushed, which a runtime may hold until a later flush that never comes).
 */
static doca_error_t pydoca_batch_go(struct doca_task *task, int flush)
{
	if (doca_task_submit_ex)
		return doca_task_submit_ex(task, flush ? DOCA_TASK_SUBMIT_FLAG_FLUSH : DOCA_TASK_SUBMIT_FLAG_NONE);
	return doca_task_submit(task);
}

/* A run of a batch: the task allocated last is held until the next one is (or the run ends). */
struct pydoca_run {
	struct pydoca_batch *batch;
	struct pydoca_batch_slot *slots;
	struct doca_task *held;
	uint32_t held_i;
	int ranges;    /* a range batch: a task that did not go in gives its buffers back now (they are taken again
			* if it is submitted later); a batch of buffers keeps its references until the task is submitted
			* again or refused (TaskBatch._refuse) */
};

/* Task i of the run did not go in: its slot's buffers go back where the run took them. */
static void pydoca_run_drop(struct pydoca_run *r, uint32_t i)
{
	if (r->ranges)
		pydoca_slot_release(&r->slots[i]);
}

/* Submit the held task (flush: it is the run's last); on failure it is freed (pydoca_run_drop for its buffers). */
static doca_error_t pydoca_run_go(struct pydoca_run *r, int flush)
{
	struct doca_task *t = r->held;
	doca_error_t rc;

	if (!t)
		return DOCA_SUCCESS;
	r->held = NULL;
	rc = pydoca_batch_go(t, flush);
	if (rc != DOCA_SUCCESS) {
		doca_task_free(t);
		pydoca_run_drop(r, r->held_i);
		return rc;
	}
	r->batch->submitted++;
	return DOCA_SUCCESS;
}

/* Task i was allocated: the held one goes (without FLUSH) and i is held. On failure i is freed too
 * (pydoca_run_drop) and the run is over. */
static doca_error_t pydoca_run_next(struct pydoca_run *r, struct doca_task *task, uint32_t i)
{
	doca_error_t rc = pydoca_run_go(r, 0);

	if (rc != DOCA_SUCCESS) {
		doca_task_free(task);
		pydoca_run_drop(r, i);
		return rc;
	}
	r->held = task;
	r->held_i = i;
	return DOCA_SUCCESS;
}

/* The run stopped with rc (DOCA_SUCCESS: it is complete): the held task goes with the doorbell; its own failure
 * is what the caller hears. */
static doca_error_t pydoca_run_end(struct pydoca_run *r, doca_error_t rc)
{
	doca_error_t st = pydoca_run_go(r, 1);

	return st != DOCA_SUCCESS ? st : rc;
}

/* Slots [first, first+count) will not run (refused): what they hold is dropped. */
void pydoca_batch_release(struct pydoca_batch_slot *slots, uint32_t first, uint32_t count)
{
	uint32_t i;

	for (i = first; i < first + count; i++)
		pydoca_slot_release(&slots[i]);
}

/*
 * A batch of buffers (not ranges) holds a reference on each of its buffers from
 * its submit until each task completed or was refused (pydoca_batch_release):
 * a Buffer closed meanwhile, even one whose task the pool has not taken yet,
 * keeps its descriptor until then. On failure nothing is held.
 */
doca_error_t pydoca_batch_hold(struct doca_buf **a, struct doca_buf **b, struct pydoca_batch_slot *slots, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++) {
		doca_error_t rc = pydoca_hold(a[i], b ? b[i] : NULL);

		if (rc != DOCA_SUCCESS) {
			pydoca_batch_release(slots, 0, i);
			return rc;
		}
		slots[i].a = a[i];
		slots[i].b = b ? b[i] : NULL;
	}
	return DOCA_SUCCESS;
}

doca_error_t pydoca_rdma_batch_submit(struct doca_rdma *rdma, int kind, struct doca_rdma_connection *conn,
				      struct doca_buf **a, struct doca_buf **b, const uint32_t *imm,
				      struct pydoca_batch *batch, struct pydoca_batch_slot *slots,
				      uint32_t first, uint32_t count)
{
	struct pydoca_run run = {.batch = batch, .slots = slots};
	doca_error_t rc = DOCA_SUCCESS;
	uint32_t i;

	for (i = first; i < first + count && i < batch->n; i++) {
		struct doca_task *task = NULL;
		union doca_data ud;

		slots[i].batch = batch;
		slots[i].index = i;
		ud.u64 = (uint64_t)(uintptr_t)&slots[i] | PYDOCA_BATCH_TAG;
		rc = pydoca_batch_alloc(rdma, kind, conn, a[i], b ? b[i] : NULL, imm ? imm[i] : 0, ud, &task);
		if (rc != DOCA_SUCCESS)
			break;     /* the slot keeps its buffers: a later run (or the refusal of the rest) settles it */
		rc = pydoca_run_next(&run, task, i);
		if (rc != DOCA_SUCCESS)
			return rc;
	}
	return pydoca_run_end(&run, rc);
}

/*
 * A range batch: tasks [first, first+count) move len[i] bytes between local
 * map offset loff[i] and remote map offset roff[i] (kind WRITE: local to
 * remote; READ: remote to local). The buffers are taken from ``inv`` here and
 * given back when each task completes, so no buffer object exists in Python.
 * Submitted as pydoca_rdma_batch_submit does (the doorbell with the last).
 */
doca_error_t pydoca_rdma_batch_submit_ranges(struct doca_rdma *rdma, int kind, struct doca_rdma_connection *conn,
					     struct doca_buf_inventory *inv, struct doca_mmap *lmap, const uint64_t *loff,
					     struct doca_mmap *rmap, const uint64_t *roff, const uint64_t *len,
					     struct pydoca_batch *batch, struct pydoca_batch_slot *slots,
					     uint32_t first, uint32_t count)
{
	void *lbase = NULL, *rbase = NULL;
	size_t llen = 0, rlen = 0;
	struct pydoca_run run = {.batch = batch, .slots = slots, .ranges = 1};
	doca_error_t rc;
	uint32_t i;

	if (kind != PYDOCA_B_WRITE && kind != PYDOCA_B_READ)
		return DOCA_ERROR_INVALID_VALUE;
	rc = doca_mmap_get_memrange(lmap, &lbase, &llen);
	if (rc == DOCA_SUCCESS)
		rc = doca_mmap_get_memrange(rmap, &rbase, &rlen);
	if (rc != DOCA_SUCCESS)
		return rc;
	for (i = first; i < first + count && i < batch->n; i++) {
		struct doca_buf *local = NULL, *remote = NULL;
		struct doca_task *task = NULL;
		union doca_data ud;
		uint8_t *la = (uint8_t *)lbase + loff[i], *ra = (uint8_t *)rbase + roff[i];
		int write = kind == PYDOCA_B_WRITE;

		if (len[i] == 0 || loff[i] > llen || len[i] > llen - loff[i] || roff[i] > rlen || len[i] > rlen - roff[i]) {
			rc = DOCA_ERROR_INVALID_VALUE;
			break;
		}
		rc = doca_buf_inventory_buf_get_by_args(inv, lmap, la, len[i], la, write ? len[i] : 0, &local);
		if (rc != DOCA_SUCCESS)
			break;
		rc = doca_buf_inventory_buf_get_by_args(inv, rmap, ra, len[i], ra, write ? 0 : len[i], &remote);
		if (rc != DOCA_SUCCESS) {
			doca_buf_dec_refcount(local, NULL);
			break;
		}
		slots[i].batch = batch;
		slots[i].index = i;
		slots[i].a = local;
		slots[i].b = remote;
		ud.u64 = (uint64_t)(uintptr_t)&slots[i] | PYDOCA_BATCH_TAG;
		rc = pydoca_batch_alloc(rdma, kind, conn, write ? local : remote, write ? remote : local, 0, ud, &task);
		if (rc != DOCA_SUCCESS) {
			pydoca_slot_release(&slots[i]);
			break;
		}
		rc = pydoca_run_next(&run, task, i);
		if (rc != DOCA_SUCCESS)
			return rc;
	}
	return pydoca_run_end(&run, rc);
}

/*
 * Post ring slot ``slot``: a receive into its (emptied) buffer, or a send of
 * its first ``length`` bytes on ``conn``. On failure nothing is in flight.
 */
doca_error_t pydoca_ring_post(struct doca_rdma *rdma, struct pydoca_ring *ring, uint32_t slot,
			      struct doca_rdma_connection *conn, uint32_t length)
{
	struct pydoca_ring_slot *s;
	struct doca_task *task = NULL;
	union doca_data ud;
	doca_error_t rc;

	/* every posted task writes one entry: completions not taken yet plus tasks in flight never exceed n */
	if (slot >= ring->n || ring->slots[slot].posted || ring->head - ring->tail + ring->posted >= ring->n)
		return DOCA_ERROR_BAD_STATE;
	s = &ring->slots[slot];
	ud.u64 = (uint64_t)(uintptr_t)s | PYDOCA_RING_TAG;
	rc = pydoca_hold(s->buf, NULL);
	if (rc != DOCA_SUCCESS)
		return rc;
	if (ring->kind == PYDOCA_RING_RECEIVE) {
		struct doca_rdma_task_receive *t;

		rc = doca_buf_reset_data_len(s->buf);
		if (rc == DOCA_SUCCESS)
			rc = doca_rdma_task_receive_allocate_init(rdma, s->buf, ud, &t);
		if (rc == DOCA_SUCCESS) {
			task = doca_rdma_task_receive_as_task(t);
			s->recv = t;
		}
	} else {
		rc = doca_buf_set_data_len(s->buf, length);
		if (rc == DOCA_SUCCESS)
			rc = pydoca_batch_alloc(rdma, PYDOCA_B_SEND, conn, s->buf, NULL, 0, ud, &task);
	}
	if (rc != DOCA_SUCCESS) {
		s->recv = NULL;
		pydoca_unhold(s->buf, NULL);
		return rc;
	}
	s->posted = 1;
	ring->posted++;
	rc = doca_task_submit(task);
	if (rc != DOCA_SUCCESS) {
		s->posted = 0;
		s->recv = NULL;
		ring->posted--;
		doca_task_free(task);
		pydoca_unhold(s->buf, NULL);
	}
	return rc;
}

/*
 * Handler hand-off (pydoca.peer.workers): the serving thread counts jobs in,
 * workers count them out. Both sides wait and signal here, with the
 * interpreter lock released (cffi drops it for the call): a worker is woken
 * only once the serving thread has let go of the lock (it signals on its way
 * into its own wait), and a worker wakes the serving thread only from here,
 * after it let go of the lock itself. Each hand-off then costs one thread
 * wake-up each way instead of two (the woken thread no longer sleeps again,
 * on the lock).
 *
 * After fork() the child has the parent's copy but none of its workers (and
 * maybe a lock held by one): every call there returns at once, and freeing it
 * leaks it rather than destroying a condition variable others waited on.
 */
struct pydoca_handoff {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t jobs;
	int closed;
	int notify_fd;                   /* written once per finished job, when there is no kick */
	void (*kick)(void *);            /* softdoca_pe_kick */
	void *pe;
	pid_t pid;                       /* the process that made it (see fork above) */
};

static int handoff_foreign(const struct pydoca_handoff *h)
{
	return h->pid != getpid();
}

struct pydoca_handoff *pydoca_handoff_new(void)
{
	struct pydoca_handoff *h = calloc(1, sizeof(*h));
	pthread_condattr_t attr;

	if (!h)
		return NULL;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&h->cond, &attr);
	pthread_condattr_destroy(&attr);
	pthread_mutex_init(&h->lock, NULL);
	h->notify_fd = -1;
	h->pid = getpid();
	return h;
}

void pydoca_handoff_free(struct pydoca_handoff *h)
{
	if (!h || handoff_foreign(h))
		return;
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

void pydoca_handoff_set_notify(struct pydoca_handoff *h, uintptr_t kick, uintptr_t pe, int notify_fd)
{
	if (handoff_foreign(h))
		return;
	pthread_mutex_lock(&h->lock);
	if (!h->closed) {                /* once closed, nothing is notified again */
		h->kick = (void (*)(void *))kick;
		h->pe = (void *)pe;
		h->notify_fd = notify_fd;
	}
	pthread_mutex_unlock(&h->lock);
}

void pydoca_handoff_close(struct pydoca_handoff *h)
{
	if (handoff_foreign(h))
		return;
	pthread_mutex_lock(&h->lock);
	h->closed = 1;
	h->kick = NULL;                  /* nobody is notified once this returns: the engine and fd may go */
	h->pe = NULL;
	h->notify_fd = -1;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
}

/* Under the lock: close() cannot pull the engine or the fd from under it. */
static void handoff_notify_locked(struct pydoca_handoff *h)
{
	if (h->kick) {
		h->kick(h->pe);
	} else if (h->notify_fd >= 0) {
		char zero = 0;
		ssize_t w = write(h->notify_fd, &zero, 1);   /* a full pipe: its reader drains it anyway */
		(void)w;
	}
}

void pydoca_handoff_notify(struct pydoca_handoff *h)
{
	if (handoff_foreign(h))
		return;
	pthread_mutex_lock(&h->lock);
	handoff_notify_locked(h);
	pthread_mutex_unlock(&h->lock);
}

int pydoca_handoff_take(struct pydoca_handoff *h, int finished, int timeout_ms)
{
	struct timespec until;
	int rc = 0;

	if (handoff_foreign(h))
		return -1;
	if (timeout_ms < 0)
		timeout_ms = 0;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&h->lock);
	if (finished)
		handoff_notify_locked(h);
	while (!h->jobs && !h->closed && rc == 0)
		rc = pthread_cond_timedwait(&h->cond, &h->lock, &until);
	if (h->jobs) {
		h->jobs--;
		rc = 1;
	} else {
		rc = h->closed ? -1 : 0;
	}
	pthread_mutex_unlock(&h->lock);
	return rc;
}

int pydoca_handoff_post_wait(struct pydoca_handoff *h, uint32_t n, uintptr_t wait, uintptr_t pe, int timeout_ms,
			     int spin_us)
{
	if (n && !handoff_foreign(h)) {
		pthread_mutex_lock(&h->lock);
		h->jobs += n;
		if (n == 1)
			pthread_cond_signal(&h->cond);
		else
			pthread_cond_broadcast(&h->cond);
		pthread_mutex_unlock(&h->lock);
	}
	if (!wait)
		return 0;
	return ((int (*)(void *, int, int))wait)((void *)pe, timeout_ms, spin_us);
}
