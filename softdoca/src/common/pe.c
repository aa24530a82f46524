/* Progress engine: completion queue, notification fd, generic tasks.
 *
 * The notification handle is an epoll set holding the pe's eventfd (signalled
 * when completions or events are queued) and the fds its ctxs watch
 * (sd_pe_watch: an rdma context's link sockets). A thread blocked on it is
 * woken straight by a link's input and reads it itself (clear_notification,
 * softdoca_pe_wait), instead of waiting for the engine thread to read it and
 * then signal the eventfd: one thread wake-up per completion instead of two. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define SD_PE_BATCH 128
#define SD_PE_SNAP 32
#define SD_PE_WAIT_EVS 16

static int pe_live(const struct doca_pe *pe)
{
	return pe && sd_handle_live_kind(pe, SD_H_PE);
}

#define CHECK_PE(pe) SD_CHECK_HANDLE(pe, pe_live)

static int pe_pending(struct doca_pe *pe);

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
	p->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (p->efd < 0 || p->epfd < 0 ||
	    epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->efd, &(struct epoll_event){.events = EPOLLIN, .data.u64 = 0}) != 0) {
		if (p->efd >= 0)
			close(p->efd);
		if (p->epfd >= 0)
			close(p->epfd);
		free(p);
		return DOCA_ERROR_OPERATING_SYSTEM;
	}
	pthread_mutex_init(&p->lock, NULL);
	atomic_init(&p->armed, 0);
	atomic_init(&p->wake_pending, 0);
	p->event_mode = DOCA_PE_EVENT_MODE_PROGRESS_SELECTIVE;
	if (sd_handle_add_kind(p, SD_H_PE) != 0) {
		close(p->efd);
		close(p->epfd);
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
	close(pe->epfd);
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

static void batch_task_done(struct doca_task *task);

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
		struct doca_ctx *outer = sd_cb_ctx;

		t->cq_next = NULL;
		t->in_flight = 0;
		atomic_fetch_sub(&ctx->inflight, 1);
		sd_cb_ctx = ctx;
		if (t->batch)
			batch_task_done(t); /* the batch's callback, once all its tasks are done */
		else
			t->ops->invoke(t, t->status == DOCA_SUCCESS);
		sd_cb_ctx = outer;
		t = next;
	}
	return n;
}

_Thread_local int sd_pe_phase = SD_PE_PHASE_ANY;
_Thread_local struct doca_ctx *sd_cb_ctx;

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
	*handle = pe->epfd;
	return DOCA_SUCCESS;
}

int sd_pe_watch(struct doca_pe *pe, int fd, uint64_t tag)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.u64 = tag};

	if (!pe || !tag)
		return -1;
	return epoll_ctl(pe->epfd, EPOLL_CTL_ADD, fd, &ev);
}

void sd_pe_unwatch(struct doca_pe *pe, int fd)
{
	if (pe && fd >= 0)
		epoll_ctl(pe->epfd, EPOLL_CTL_DEL, fd, NULL);
}

/* The watched fds among evs have input: their ctxs read it on this thread. */
static void pe_service(struct doca_pe *pe, const struct epoll_event *evs, int n)
{
	struct doca_ctx *stack[SD_PE_SNAP], **arr;
	uint64_t tags[SD_PE_WAIT_EVS];
	size_t nctx;
	int k = 0;

	for (int i = 0; i < n && k < SD_PE_WAIT_EVS; i++)
		if (evs[i].data.u64)
			tags[k++] = evs[i].data.u64;
	if (!k)
		return;
	arr = snapshot(pe, stack, &nctx);
	for (size_t i = 0; i < nctx; i++)
		if (sd_handle_live_kind(arr[i], SD_H_CTX) && arr[i]->pe == pe && arr[i]->ops->service)
			arr[i]->ops->service(arr[i], tags, k);
	if (arr != stack)
		free(arr);
}

/* The pe's thread is about to sleep: its ctxs hand back what it progressed itself. */
static void pe_sleeping(struct doca_pe *pe)
{
	struct doca_ctx *stack[SD_PE_SNAP], **arr;
	size_t nctx;

	arr = snapshot(pe, stack, &nctx);
	for (size_t i = 0; i < nctx; i++)
		if (sd_handle_live_kind(arr[i], SD_H_CTX) && arr[i]->pe == pe && arr[i]->ops->sleeping)
			arr[i]->ops->sleeping(arr[i]);
	if (arr != stack)
		free(arr);
}

/* Read what woke a waiter (or is waiting): the watched fds that are ready. */
static void pe_service_ready(struct doca_pe *pe)
{
	struct epoll_event evs[SD_PE_WAIT_EVS];
	int n = epoll_wait(pe->epfd, evs, SD_PE_WAIT_EVS, 0);

	if (n > 0)
		pe_service(pe, evs, n);
}

/* DOCA declares this for Windows only (an I/O completion port handed to the
 * engine) and documents DOCA_ERROR_NOT_SUPPORTED on other systems: softdoca
 * exports it with that answer; the Linux headers (and cdefs/) do not declare it. */
SD_EXPORT doca_error_t doca_pe_set_notification_handle(struct doca_pe *pe, doca_notification_handle_t handle,
						       union doca_data completion_key)
{
	(void)handle;
	(void)completion_key;
	CHECK_PE(pe);
	return DOCA_ERROR_NOT_SUPPORTED;
}

/* The waiter is awake: stop signalling, consume the eventfd's count. */
static void pe_disarm(struct doca_pe *pe)
{
	atomic_store(&pe->armed, 0);
	efd_drain(pe->efd);
}

SD_EXPORT doca_error_t doca_pe_clear_notification(struct doca_pe *pe, doca_notification_handle_t handle)
{
	CHECK_PE(pe);
	if (handle != pe->epfd)
		return DOCA_ERROR_INVALID_VALUE;
	pe_disarm(pe);
	pe_service_ready(pe);
	return DOCA_SUCCESS;
}

/* softdoca_ext.h: block until the pe has something for doca_pe_progress (or
 * softdoca_pe_kick, or timeout_ms; -1 waits without limit). The thread waits
 * in epoll_wait on the notification set itself, so a link's input wakes it
 * and not the engine thread, and it reads that input here, in C, before
 * returning (no interpreter lock or other caller code between the wake-up
 * and the read, so one-sided operations are served as promptly as by the
 * engine). Returns 1 when woken or when work was already pending, 0 after
 * timeout_ms, -1 for a bad handle. */
SD_EXPORT int softdoca_pe_wait(struct doca_pe *pe, int timeout_ms, int spin_us);
SD_EXPORT int softdoca_pe_wait(struct doca_pe *pe, int timeout_ms, int spin_us)
{
	struct epoll_event evs[SD_PE_WAIT_EVS];
	uint64_t max = spin_us > 0 ? (uint64_t)(spin_us > 10000 ? 10000 : spin_us) * 1000ull : 0;
	uint64_t t0 = 0, budget;
	int n = 0;

	if (!pe_live(pe))
		return -1;
	atomic_store(&pe->armed, 1);
	if (pe_pending(pe)) {
		atomic_store(&pe->armed, 0);
		return 1;
	}
	/* Adaptive spinning: a thread that goes to sleep on an idle CPU can take
	 * tens of microseconds to run again (much more on a VM), so while events
	 * keep arriving within spin_us of a wait, look for them without
	 * sleeping first; a wait that outlasts the window halves the next spin,
	 * one that ends within it restores the full window. */
	budget = pe->spin_ns < max ? pe->spin_ns : max;
	if (max && timeout_ms != 0) {
		t0 = sd_now_ns();
		while (budget) {
			n = epoll_wait(pe->epfd, evs, SD_PE_WAIT_EVS, 0);
			if (n != 0 || sd_now_ns() - t0 >= budget)
				break;
		}
	}
	if (n == 0) {
		if (timeout_ms != 0)
			pe_sleeping(pe);
		n = epoll_wait(pe->epfd, evs, SD_PE_WAIT_EVS, timeout_ms);
	}
	if (max && timeout_ms != 0)
		pe->spin_ns = n > 0 && sd_now_ns() - t0 <= max ? max : budget / 2;
	atomic_store(&pe->armed, 0);
	/* the eventfd is read only when it woke us: level-triggered, a count
	 * left in it (signalled after epoll_wait returned) wakes the next wait */
	for (int i = 0; i < n; i++) {
		if (!evs[i].data.u64) {
			efd_drain(pe->efd);
			break;
		}
	}
	if (n > 0)
		pe_service(pe, evs, n);
	else if (n < 0)
		pe_service_ready(pe); /* EINTR: a wake-up may have been taken from the engine */
	return n != 0;
}

/* softdoca_ext.h: wake a thread in softdoca_pe_wait (or make the next wait
 * return at once), from any thread; e.g. a worker that finished a job. */
SD_EXPORT void softdoca_pe_kick(struct doca_pe *pe);
SD_EXPORT void softdoca_pe_kick(struct doca_pe *pe)
{
	if (!pe_live(pe))
		return;
	atomic_store(&pe->wake_pending, 1);
	efd_signal(pe->efd);
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
	pe_sleeping(pe);
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
	sd_pe_wake(pe); /* under the lock: doca_pe_destroy cannot free pe (or close its eventfd) meanwhile */
	pthread_mutex_unlock(&pe->lock);
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
	sd_pe_wake(pe); /* under the lock, as above */
	pthread_mutex_unlock(&pe->lock);
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

/* ---------------------------------------------------------------- task batches
 * N tasks of one ctx submitted as one unit, completed by one callback
 * (softdoca_ext.h: softdoca_task_batch_allocate). The batch's fields are
 * written by the submitting thread before its tasks go out and by
 * doca_pe_progress while they come back. */

static int batch_live(const struct doca_task_batch *b)
{
	return b && sd_handle_live_kind(b, SD_H_TASK_BATCH);
}

/* Called by deliver_completions for a task of a batch (ctx inflight already dropped). */
static void batch_task_done(struct doca_task *task)
{
	struct doca_task_batch *b = task->batch;
	softdoca_task_batch_completion_cb_t cb;
	union doca_data cud = {.u64 = 0};

	task->batch = NULL;
	b->status[task->batch_idx] = task->status;
	if (atomic_fetch_sub(&b->remaining, 1) != 1)
		return;
	b->result = DOCA_SUCCESS;
	for (uint16_t i = 0; i < b->num; i++) {
		if (b->status[i] != DOCA_SUCCESS) {
			b->result = b->status[i];
			break;
		}
	}
	b->in_flight = 0;
	if (sd_handle_live_kind(b->ctx, SD_H_CTX))
		cud = b->ctx->user_data;
	cb = b->result == DOCA_SUCCESS ? b->ok_cb : b->err_cb;
	/* the callback may free or resubmit the batch: nothing touches it after */
	cb(b, b->num, cud, b->user_data, b->tasks, b->status);
}

SD_EXPORT doca_error_t softdoca_task_batch_allocate(struct doca_ctx *ctx, uint16_t tasks_num,
						    union doca_data task_batch_user_data,
						    softdoca_task_batch_completion_cb_t success_cb,
						    softdoca_task_batch_completion_cb_t error_cb,
						    struct doca_task ***task_array, struct doca_task_batch **task_batch)
{
	struct doca_task_batch *b;

	if (!ctx || !success_cb || !error_cb || !task_array || !task_batch || tasks_num == 0 ||
	    tasks_num > SD_TASK_BATCH_MAX)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_handle_live_kind(ctx, SD_H_CTX))
		return DOCA_ERROR_BAD_STATE;
	if (!ctx->pe)
		return DOCA_ERROR_NOT_CONNECTED;
	if (ctx->state != DOCA_CTX_STATE_RUNNING)
		return DOCA_ERROR_BAD_STATE;
	b = calloc(1, sizeof(*b));
	if (!b)
		return DOCA_ERROR_NO_MEMORY;
	b->tasks = calloc(tasks_num, sizeof(*b->tasks));
	b->status = calloc(tasks_num, sizeof(*b->status));
	if (!b->tasks || !b->status || sd_handle_add_kind(b, SD_H_TASK_BATCH) != 0) {
		free(b->tasks);
		free(b->status);
		free(b);
		return DOCA_ERROR_NO_MEMORY;
	}
	b->ctx = ctx;
	b->num = tasks_num;
	b->user_data = task_batch_user_data;
	b->ok_cb = success_cb;
	b->err_cb = error_cb;
	b->result = DOCA_SUCCESS;
	atomic_init(&b->remaining, 0);
	*task_array = b->tasks;
	*task_batch = b;
	return DOCA_SUCCESS;
}

/* Validate and submit; with nothing submitted on failure. */
static doca_error_t batch_submit(struct doca_task_batch *b)
{
	struct doca_ctx *ctx;
	doca_error_t rc = DOCA_SUCCESS;
	uint16_t i;

	if (!b)
		return DOCA_ERROR_INVALID_VALUE;
	if (!batch_live(b) || b->in_flight)
		return DOCA_ERROR_BAD_STATE;
	ctx = b->ctx;
	if (!sd_handle_live_kind(ctx, SD_H_CTX) || ctx->state != DOCA_CTX_STATE_RUNNING)
		return DOCA_ERROR_BAD_STATE;
	/* every slot: a distinct idle task of this ctx (batch marks catch duplicates) */
	for (i = 0; i < b->num; i++) {
		struct doca_task *t = b->tasks[i];

		if (!t || t->ctx != ctx || !t->ops || t->in_flight || t->batch) {
			while (i-- > 0)
				b->tasks[i]->batch = NULL;
			return DOCA_ERROR_INVALID_VALUE;
		}
		t->batch = b;
		t->batch_idx = i;
	}
	for (i = 0; i < b->num; i++)
		b->status[i] = DOCA_ERROR_IN_PROGRESS;
	b->result = DOCA_ERROR_IN_PROGRESS;
	b->in_flight = 1;
	atomic_store(&b->remaining, b->num);
	/* one unit: the doorbell rings with the last task */
	for (i = 0; i < b->num; i++) {
		sd_submit_flags = i + 1 == b->num ? DOCA_TASK_SUBMIT_FLAG_FLUSH : DOCA_TASK_SUBMIT_FLAG_NONE;
		rc = sd_task_submit(b->tasks[i]);
		if (rc != DOCA_SUCCESS)
			break;
	}
	sd_submit_flags = DOCA_TASK_SUBMIT_FLAG_FLUSH;
	if (rc == DOCA_SUCCESS)
		return DOCA_SUCCESS;
	if (i == 0) { /* nothing went out: the application keeps the batch */
		for (uint16_t j = 0; j < b->num; j++) {
			b->tasks[j]->batch = NULL;
			b->status[j] = DOCA_SUCCESS;
		}
		b->in_flight = 0;
		b->result = rc;
		return rc;
	}
	/* Tasks 0..i-1 are in flight: ring their doorbell, and complete the
	 * rest with the submit error through the pe, so that the batch's error
	 * callback reports them (the batch belongs to softdoca now). */
	if (ctx->ops->flush)
		ctx->ops->flush(ctx);
	for (uint16_t j = i; j < b->num; j++) {
		struct doca_task *t = b->tasks[j];

		atomic_fetch_add(&ctx->inflight, 1);
		t->in_flight = 1;
		sd_task_complete(t, rc);
	}
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_task_batch_submit(struct doca_task_batch *task_batch)
{
	return batch_submit(task_batch);
}

SD_EXPORT doca_error_t doca_task_batch_try_submit(struct doca_task_batch *task_batch)
{
	return batch_submit(task_batch);
}

/* Frees the batch and the tasks in it (they belong to the batch). */
SD_EXPORT void doca_task_batch_free(struct doca_task_batch *task_batch)
{
	struct doca_task_batch *b = task_batch;
	int ctx_live;

	if (!batch_live(b))
		return;
	ctx_live = sd_handle_live_kind(b->ctx, SD_H_CTX);
	if (b->in_flight && ctx_live) {
		SD_WARN("doca_task_batch_free on batch %p that is still in flight: ignored", (void *)b);
		return;
	}
	sd_handle_del(b);
	/* a destroyed ctx took its tasks with it */
	for (uint16_t i = 0; ctx_live && i < b->num; i++) {
		struct doca_task *t = b->tasks[i];
		int dup = 0;

		for (uint16_t j = 0; t && j < i && !dup; j++)
			dup = b->tasks[j] == t;
		if (!t || dup || t->ctx != b->ctx)
			continue;
		if (t->batch == b)
			t->batch = NULL;
		doca_task_free(t);
	}
	free(b->tasks);
	free(b->status);
	free(b);
}

SD_EXPORT doca_error_t doca_task_batch_get_status(const struct doca_task_batch *task_batch)
{
	if (!task_batch)
		return DOCA_ERROR_INVALID_VALUE;
	if (!batch_live(task_batch))
		return DOCA_ERROR_BAD_STATE;
	return task_batch->result;
}

SD_EXPORT void doca_task_batch_set_user_data(struct doca_task_batch *task_batch, union doca_data user_data)
{
	if (batch_live(task_batch))
		task_batch->user_data = user_data;
}

SD_EXPORT union doca_data doca_task_batch_get_user_data(const struct doca_task_batch *task_batch)
{
	union doca_data d = {.u64 = 0};

	return batch_live(task_batch) ? task_batch->user_data : d;
}

SD_EXPORT struct doca_ctx *doca_task_batch_get_ctx(const struct doca_task_batch *task_batch)
{
	return batch_live(task_batch) ? task_batch->ctx : NULL;
}

SD_EXPORT union doca_data doca_task_batch_get_ctx_user_data(const struct doca_task_batch *task_batch)
{
	union doca_data d = {.u64 = 0};

	if (batch_live(task_batch) && sd_handle_live_kind(task_batch->ctx, SD_H_CTX))
		d = task_batch->ctx->user_data;
	return d;
}

SD_EXPORT uint16_t doca_task_batch_get_tasks_num(struct doca_task_batch *task_batch)
{
	return batch_live(task_batch) ? task_batch->num : 0;
}
