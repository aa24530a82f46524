/* Progress engine: completion queue, notification eventfd, generic tasks. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define SD_PE_BATCH 128
#define SD_PE_SNAP 32

static int pe_live(const struct doca_pe *pe)
{
	return pe && sd_handle_live_kind(pe, SD_H_PE);
}

#define CHECK_PE(pe)                               \
	do {                                       \
		if (!(pe))                         \
			return DOCA_ERROR_INVALID_VALUE; \
		if (!pe_live(pe))                  \
			return DOCA_ERROR_BAD_STATE; \
	} while (0)

static void efd_signal(int efd)
{
	uint64_t one = 1;
	ssize_t r;

	do {
		r = write(efd, &one, sizeof(one));
	} while (r < 0 && errno == EINTR);
	/* EAGAIN: counter saturated, the fd is readable anyway */
}

static void efd_drain(int efd)
{
	uint64_t v;
	ssize_t r;

	do {
		r = read(efd, &v, sizeof(v));
	} while (r < 0 && errno == EINTR);
}

void sd_pe_wake(struct doca_pe *pe)
{
	if (!pe)
		return;
	atomic_store(&pe->wake_pending, 1);
	if (atomic_load(&pe->armed))
		efd_signal(pe->efd);
}

SD_EXPORT doca_error_t doca_pe_create(struct doca_pe **pe)
{
	struct doca_pe *p;

	if (!pe)
		return DOCA_ERROR_INVALID_VALUE;
	p = calloc(1, sizeof(*p));
	if (!p)
		return DOCA_ERROR_NO_MEMORY;
	p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (p->efd < 0) {
		free(p);
		return DOCA_ERROR_OPERATING_SYSTEM;
	}
	pthread_mutex_init(&p->lock, NULL);
	atomic_init(&p->armed, 0);
	atomic_init(&p->wake_pending, 0);
	p->event_mode = DOCA_PE_EVENT_MODE_PROGRESS_SELECTIVE;
	if (sd_handle_add_kind(p, SD_H_PE) != 0) {
		close(p->efd);
		pthread_mutex_destroy(&p->lock);
		free(p);
		return DOCA_ERROR_NO_MEMORY;
	}
	*pe = p;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_pe_destroy(struct doca_pe *pe)
{
	CHECK_PE(pe);
	pthread_mutex_lock(&pe->lock);
	if (pe->ctxs) {
		pthread_mutex_unlock(&pe->lock);
		return DOCA_ERROR_IN_USE;
	}
	pe->destroyed = 1;
	sd_handle_del(pe);
	pthread_mutex_unlock(&pe->lock);
	close(pe->efd);
	pthread_mutex_destroy(&pe->lock);
	free(pe);
	return DOCA_SUCCESS;
}

/* Snapshot the connected ctxs; *heap set if the array must be freed. */
static struct doca_ctx **snapshot(struct doca_pe *pe, struct doca_ctx **stack, size_t *n)
{
	struct doca_ctx **arr = stack;
	size_t cnt = 0, i = 0;

	pthread_mutex_lock(&pe->lock);
	for (struct doca_ctx *c = pe->ctxs; c; c = c->pe_next)
		cnt++;
	if (cnt > SD_PE_SNAP) {
		arr = malloc(cnt * sizeof(*arr));
		if (!arr) {
			arr = stack;
			cnt = SD_PE_SNAP;
		}
	}
	for (struct doca_ctx *c = pe->ctxs; c && i < cnt; c = c->pe_next)
		arr[i++] = c;
	pthread_mutex_unlock(&pe->lock);
	*n = i;
	return arr;
}

/* Run one ctx phase over all connected ctxs. Returns events, -1 if pe died. */
static int ctx_pass(struct doca_pe *pe, int run_ops)
{
	struct doca_ctx *stack[SD_PE_SNAP], **arr;
	size_t n;
	int did = 0;

	arr = snapshot(pe, stack, &n);
	for (size_t i = 0; i < n; i++) {
		if (!sd_handle_live_kind(arr[i], SD_H_CTX) || arr[i]->pe != pe)
			continue;
		did += sd_ctx_progress_phase(arr[i], run_ops);
		if (!pe_live(pe)) {
			did = -1;
			break;
		}
	}
	if (arr != stack)
		free(arr);
	return did;
}

static int deliver_completions(struct doca_pe *pe)
{
	struct doca_task *batch, *t, *last = NULL;
	int n = 0;

	pthread_mutex_lock(&pe->lock);
	batch = pe->cq_head;
	for (t = batch; t && n < SD_PE_BATCH; t = t->cq_next) {
		last = t;
		n++;
	}
	if (last) {
		pe->cq_head = last->cq_next;
		if (!pe->cq_head)
			pe->cq_tail = NULL;
		else
			atomic_store(&pe->wake_pending, 1); /* more left for the next call */
		last->cq_next = NULL;
	}
	pthread_mutex_unlock(&pe->lock);

	for (t = batch; t;) {
		struct doca_task *next = t->cq_next;
		struct doca_ctx *ctx = t->ctx;
		t->cq_next = NULL;
		t->in_flight = 0;
		atomic_fetch_sub(&ctx->inflight, 1);
		t->ops->invoke(t, t->status == DOCA_SUCCESS);
		t = next;
	}
	return n;
}

_Thread_local int sd_pe_phase = SD_PE_PHASE_ANY;

int sd_pe_has_completions(struct doca_pe *pe)
{
	int pending;

	pthread_mutex_lock(&pe->lock);
	pending = pe->cq_head != NULL;
	pthread_mutex_unlock(&pe->lock);
	if (pending)
		atomic_store(&pe->wake_pending, 1); /* the next doca_pe_progress delivers them, then the event */
	return pending;
}

SD_EXPORT uint8_t doca_pe_progress(struct doca_pe *pe)
{
	int did = 0, r;

	if (!pe_live(pe))
		return 0;
	atomic_store(&pe->wake_pending, 0);
	/* Causal order: events that open a path (requests, establishment) come
	 * before the completions they enable; events that end one (failure,
	 * disconnect) come after the completions that arrived before them. */
	sd_pe_phase = SD_PE_PHASE_BEFORE;
	r = ctx_pass(pe, 1);
	if (r < 0) {
		sd_pe_phase = SD_PE_PHASE_ANY;
		return 1;
	}
	did += r;
	r = deliver_completions(pe);
	did += r;
	if (!pe_live(pe)) {
		sd_pe_phase = SD_PE_PHASE_ANY;
		return 1;
	}
	sd_pe_phase = SD_PE_PHASE_AFTER;
	r = ctx_pass(pe, 1);
	sd_pe_phase = SD_PE_PHASE_ANY;
	if (r != 0)
		did = 1;
	return did > 0;
}

SD_EXPORT doca_error_t doca_pe_get_notification_handle(const struct doca_pe *pe, doca_notification_handle_t *handle)
{
	CHECK_PE(pe);
	if (!handle)
		return DOCA_ERROR_INVALID_VALUE;
	*handle = pe->efd;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_pe_clear_notification(struct doca_pe *pe, doca_notification_handle_t handle)
{
	CHECK_PE(pe);
	if (handle != pe->efd)
		return DOCA_ERROR_INVALID_VALUE;
	atomic_store(&pe->armed, 0);
	efd_drain(pe->efd);
	return DOCA_SUCCESS;
}

/* Anything waiting for doca_pe_progress? */
static int pe_pending(struct doca_pe *pe)
{
	int pending = atomic_load(&pe->wake_pending);

	pthread_mutex_lock(&pe->lock);
	if (pe->cq_head)
		pending = 1;
	for (struct doca_ctx *c = pe->ctxs; c && !pending; c = c->pe_next) {
		if (c->pending_count || (c->state == DOCA_CTX_STATE_STOPPING && atomic_load(&c->inflight) == 0))
			pending = 1;
	}
	pthread_mutex_unlock(&pe->lock);
	return pending;
}

SD_EXPORT doca_error_t doca_pe_request_notification(struct doca_pe *pe)
{
	CHECK_PE(pe);
	if (pe->event_mode == DOCA_PE_EVENT_MODE_PROGRESS_ALL)
		efd_drain(pe->efd);
	/* arm first, then look: a completion racing with us signals either way */
	atomic_store(&pe->armed, 1);
	if (pe_pending(pe))
		efd_signal(pe->efd);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_pe_get_num_inflight_tasks(const struct doca_pe *pe, size_t *num_inflight_tasks)
{
	struct doca_pe *p = (struct doca_pe *)pe;
	size_t n = 0;

	CHECK_PE(pe);
	if (!num_inflight_tasks)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&p->lock);
	for (struct doca_ctx *c = p->ctxs; c; c = c->pe_next)
		n += atomic_load(&c->inflight);
	pthread_mutex_unlock(&p->lock);
	*num_inflight_tasks = n;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_pe_connect_ctx(struct doca_pe *pe, struct doca_ctx *ctx)
{
	CHECK_PE(pe);
	if (!ctx)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_handle_live_kind(ctx, SD_H_CTX))
		return DOCA_ERROR_BAD_STATE;
	if (ctx->pe || ctx->state != DOCA_CTX_STATE_IDLE)
		return DOCA_ERROR_BAD_STATE;
	pthread_mutex_lock(&pe->lock);
	ctx->pe = pe;
	ctx->pe_next = pe->ctxs;
	pe->ctxs = ctx;
	pthread_mutex_unlock(&pe->lock);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_pe_set_event_mode(struct doca_pe *pe, enum doca_pe_event_mode event_mode)
{
	CHECK_PE(pe);
	if (event_mode != DOCA_PE_EVENT_MODE_PROGRESS_SELECTIVE && event_mode != DOCA_PE_EVENT_MODE_PROGRESS_ALL)
		return DOCA_ERROR_INVALID_VALUE;
	pe->event_mode = event_mode;
	return DOCA_SUCCESS;
}

/* ---------------------------------------------------------------- tasks */
void sd_task_complete(struct doca_task *task, doca_error_t status)
{
	struct doca_pe *pe;

	if (!task || !task->ctx)
		return;
	pe = task->ctx->pe;
	if (!pe) {
		SD_ERR("task %p completed on a ctx without a progress engine", (void *)task);
		return;
	}
	pthread_mutex_lock(&pe->lock);
	task->status = status;
	task->cq_next = NULL;
	if (pe->cq_tail)
		pe->cq_tail->cq_next = task;
	else
		pe->cq_head = task;
	pe->cq_tail = task;
	pthread_mutex_unlock(&pe->lock);
	sd_pe_wake(pe);
}

void sd_task_complete_list(struct doca_pe *pe, struct doca_task *head, struct doca_task *tail)
{
	if (!pe || !head)
		return;
	pthread_mutex_lock(&pe->lock);
	tail->cq_next = NULL;
	if (pe->cq_tail)
		pe->cq_tail->cq_next = head;
	else
		pe->cq_head = head;
	pe->cq_tail = tail;
	pthread_mutex_unlock(&pe->lock);
	sd_pe_wake(pe);
}

_Thread_local uint32_t sd_submit_flags = DOCA_TASK_SUBMIT_FLAG_FLUSH;

doca_error_t sd_task_submit(struct doca_task *task)
{
	struct doca_ctx *ctx;
	doca_error_t rc;

	if (!task || !task->ctx || !task->ops)
		return DOCA_ERROR_INVALID_VALUE;
	ctx = task->ctx;
	if (!sd_handle_live_kind(ctx, SD_H_CTX) || ctx->state != DOCA_CTX_STATE_RUNNING)
		return DOCA_ERROR_BAD_STATE;
	if (task->in_flight)
		return DOCA_ERROR_BAD_STATE;
	if (!task->ops->submit)
		return DOCA_ERROR_NOT_SUPPORTED;
	/* count first: the completion may race in from the engine thread */
	atomic_fetch_add(&ctx->inflight, 1);
	task->in_flight = 1;
	task->status = DOCA_SUCCESS;
	rc = task->ops->submit(task);
	if (rc != DOCA_SUCCESS) {
		task->in_flight = 0;
		atomic_fetch_sub(&ctx->inflight, 1);
	}
	return rc;
}

SD_EXPORT doca_error_t doca_task_submit(struct doca_task *task)
{
	return sd_task_submit(task);
}

SD_EXPORT doca_error_t doca_task_submit_ex(struct doca_task *task, uint32_t flags)
{
	doca_error_t rc;

	if (flags & ~0xFu)
		return DOCA_ERROR_INVALID_VALUE;
	sd_submit_flags = flags;
	rc = sd_task_submit(task);
	sd_submit_flags = DOCA_TASK_SUBMIT_FLAG_FLUSH;
	return rc;
}

SD_EXPORT doca_error_t doca_task_try_submit(struct doca_task *task)
{
	return sd_task_submit(task);
}

SD_EXPORT void doca_task_free(struct doca_task *task)
{
	if (!task || !task->ops)
		return;
	if (task->in_flight) {
		SD_WARN("doca_task_free on task %p that is still in flight: ignored", (void *)task);
		return;
	}
	if (task->ops->release)
		task->ops->release(task);
}

SD_EXPORT doca_error_t doca_task_get_status(const struct doca_task *task)
{
	if (!task)
		return DOCA_ERROR_INVALID_VALUE;
	return task->status;
}

SD_EXPORT void doca_task_set_user_data(struct doca_task *task, union doca_data user_data)
{
	if (task)
		task->user_data = user_data;
}

SD_EXPORT union doca_data doca_task_get_user_data(const struct doca_task *task)
{
	union doca_data d = {.u64 = 0};

	return task ? task->user_data : d;
}

SD_EXPORT struct doca_ctx *doca_task_get_ctx(const struct doca_task *task)
{
	return task ? task->ctx : NULL;
}
