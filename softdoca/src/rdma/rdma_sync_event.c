/*
 * softdoca RDMA remote-net sync-event tasks: get, notify_set, notify_add.
 *
 * Each is an RDMA data operation on the 8-byte value a peer exported with
 * doca_sync_event_export_to_remote_net (see sync_event.h):
 *   get        RDMA read of the value into dst_buf (appended after its data;
 *              a list up to max_send_buf_list_len); result_len = 8.
 *   notify_set RDMA write of src_buf's data (a list, at most 8 bytes in all)
 *              to the value.
 *   notify_add atomic fetch-and-add of add_data; the value before the add is
 *              appended (8 bytes, host order) to result_buf (its head only).
 * So they take the same paths as read / write / atomic_fetch_add (TCP or the
 * same-host transport; atomics over TCP), with the same checks and error
 * statuses: the exporting side's rdma context must grant RDMA_READ (get),
 * RDMA_WRITE (notify_set) or RDMA_ATOMIC (notify_add) as for any remote
 * operation, and an event that stopped there is refused like a stopped mmap.
 *
 * Configuration, pools and submit errors follow the other rdma task types
 * (rdma_tasks.c): set_conf while IDLE (BAD_STATE otherwise), pools built at
 * ctx start, allocate_init needs RUNNING, NO_MEMORY when a pool is exhausted
 * or was never configured. An allocate_init without an event, or with one
 * that was destroyed, is INVALID_VALUE; a task references its event, whose
 * destroy returns DOCA_ERROR_IN_USE until the task is freed.
 *
 * The per-context state of these types lives in a side table keyed by the
 * doca_rdma (struct doca_rdma is not extended).
 */
#include "rdma_sync_event.h"
#include "sync_event.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RSE_GET = 0, RSE_SET, RSE_ADD, RSE_NUM };

static const enum sd_task_type rse_wire[RSE_NUM] = {SD_T_READ, SD_T_WRITE, SD_T_FETCH_ADD};

struct rse_ext;

struct rse_task {
	struct sd_rtask t;                       /* first: the engine sees an sd_rtask */
	int kind;
	struct doca_sync_event_remote_net *ev;
	struct rse_ext *ext;
};

struct doca_rdma_task_remote_net_sync_event_get { struct rse_task s; };
struct doca_rdma_task_remote_net_sync_event_notify_set { struct rse_task s; };
struct doca_rdma_task_remote_net_sync_event_notify_add { struct rse_task s; };

struct rse_pool {
	struct sd_pool p;                        /* what rtask_release uses: free stack, nfree */
	struct rse_task *tasks;
	struct rse_pool *next;                   /* retired */
};

struct rse_ext {
	struct doca_rdma *rdma;
	struct rse_ext *next;
	struct sd_task_conf conf[RSE_NUM];
	struct rse_pool *pool[RSE_NUM];
	struct rse_pool *retired;
};

static pthread_mutex_t ext_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rse_ext *exts;

static const struct sd_task_ops rse_ops;

/* The side-table entry of rdma (created when create is set). */
static struct rse_ext *ext_of(struct doca_rdma *rdma, int create)
{
	struct rse_ext *e;

	pthread_mutex_lock(&ext_lock);
	for (e = exts; e; e = e->next)
		if (e->rdma == rdma)
			break;
	if (!e && create) {
		e = calloc(1, sizeof(*e));
		if (e) {
			e->rdma = rdma;
			e->next = exts;
			exts = e;
		}
	}
	pthread_mutex_unlock(&ext_lock);
	return e;
}

static void rse_pool_free(struct rse_pool *p)
{
	if (!p)
		return;
	free(p->tasks);
	free(p->p.free);
	free(p->p.iovs);
	free(p);
}

static struct rse_pool *rse_pool_new(struct rse_ext *e, int kind, uint32_t count)
{
	struct doca_rdma *rdma = e->rdma;
	struct rse_pool *p = calloc(1, sizeof(*p));
	uint32_t cap = rdma->max_send_buf_list_len;

	if (rdma->recv_buf_list_len > cap)
		cap = rdma->recv_buf_list_len;
	if (!p)
		return NULL;
	p->p.count = count;
	p->tasks = calloc(count, sizeof(*p->tasks));
	p->p.free = calloc(count, sizeof(*p->p.free));
	p->p.iovs = calloc((size_t)count * cap, sizeof(*p->p.iovs));
	if (!p->tasks || !p->p.free || !p->p.iovs) {
		rse_pool_free(p);
		return NULL;
	}
	for (uint32_t i = 0; i < count; i++) {
		struct rse_task *s = &p->tasks[i];

		s->kind = kind;
		s->ext = e;
		s->t.type = rse_wire[kind];
		s->t.pool = &p->p;
		s->t.rdma = rdma;
		s->t.iov = &p->p.iovs[(size_t)i * cap];
		s->t.iov_cap = cap;
		p->p.free[count - 1 - i] = &s->t;
	}
	p->p.nfree = count;
	return p;
}

doca_error_t sd_rdma_se_pools_create(struct doca_rdma *rdma)
{
	struct rse_ext *e = ext_of(rdma, 0);
	struct rse_pool *fresh[RSE_NUM] = {0};

	if (!e)
		return DOCA_SUCCESS;
	for (int i = 0; i < RSE_NUM; i++) {
		if (!e->conf[i].set || !e->conf[i].num)
			continue;
		fresh[i] = rse_pool_new(e, i, e->conf[i].num);
		if (!fresh[i]) {
			for (int j = 0; j < i; j++)
				rse_pool_free(fresh[j]);
			return DOCA_ERROR_NO_MEMORY;
		}
	}
	pthread_mutex_lock(&rdma->pool_lock);
	for (int i = 0; i < RSE_NUM; i++) {
		struct rse_pool *old = e->pool[i];

		if (old && old->p.nfree == old->p.count) {
			rse_pool_free(old);
		} else if (old) { /* tasks still held by the application: keep until destroy */
			old->next = e->retired;
			e->retired = old;
		}
		e->pool[i] = fresh[i];
	}
	pthread_mutex_unlock(&rdma->pool_lock);
	return DOCA_SUCCESS;
}

void sd_rdma_se_destroy(struct doca_rdma *rdma)
{
	struct rse_ext *e = NULL, **pp;

	pthread_mutex_lock(&ext_lock);
	for (pp = &exts; *pp; pp = &(*pp)->next) {
		if ((*pp)->rdma == rdma) {
			e = *pp;
			*pp = e->next;
			break;
		}
	}
	pthread_mutex_unlock(&ext_lock);
	if (!e)
		return;
	for (int i = 0; i < RSE_NUM; i++) {
		struct rse_pool *p = e->pool[i];

		/* tasks the application never freed: drop their event references */
		for (uint32_t k = 0; p && k < p->p.count; k++)
			if (p->tasks[k].t.allocated)
				sd_se_remote_unref(p->tasks[k].ev);
		rse_pool_free(p);
	}
	while (e->retired) {
		struct rse_pool *p = e->retired;

		e->retired = p->next;
		for (uint32_t k = 0; k < p->p.count; k++)
			if (p->tasks[k].t.allocated)
				sd_se_remote_unref(p->tasks[k].ev);
		rse_pool_free(p);
	}
	free(e);
}

int sd_rdma_se_is_task(const struct doca_task *task)
{
	return task && task->ops == &rse_ops;
}

/* ---------------------------------------------------------------- task ops */
static doca_error_t rse_submit(struct doca_task *task)
{
	struct rse_task *s = (struct rse_task *)task;
	struct doca_sync_event_remote_net *ev = s->ev;

	s->t.detail[0] = 0;
	if (!ev || !sd_se_remote_live(ev)) {
		snprintf(s->t.detail, sizeof(s->t.detail), "no remote sync event (none set, or it was destroyed)");
		return DOCA_ERROR_INVALID_VALUE;
	}
	if (s->kind == RSE_GET)
		s->t.src = &ev->buf;
	else
		s->t.dst = &ev->buf;
	return sd_rtask_submit(task);
}

static void rse_invoke(struct doca_task *task, int success)
{
	struct rse_task *s = (struct rse_task *)task;
	struct sd_task_conf *c = &s->ext->conf[s->kind];
	sd_fnptr cb = success ? c->ok_cb : c->err_cb;
	union doca_data ud = task->user_data, cud = s->t.rdma->ctx.user_data;

	if (!cb)
		return;
	switch (s->kind) {
	case RSE_GET:
		((doca_rdma_task_remote_net_sync_event_get_completion_cb_t)cb)(
			(struct doca_rdma_task_remote_net_sync_event_get *)s, ud, cud);
		break;
	case RSE_SET:
		((doca_rdma_task_remote_net_sync_event_notify_set_completion_cb_t)cb)(
			(struct doca_rdma_task_remote_net_sync_event_notify_set *)s, ud, cud);
		break;
	case RSE_ADD:
		((doca_rdma_task_remote_net_sync_event_notify_add_completion_cb_t)cb)(
			(struct doca_rdma_task_remote_net_sync_event_notify_add *)s, ud, cud);
		break;
	default:
		break;
	}
}

static void rse_release(struct doca_task *task)
{
	struct rse_task *s = (struct rse_task *)task;

	if (s->t.allocated) {
		sd_se_remote_unref(s->ev);
		s->ev = NULL;
	}
	sd_rtask_release(task);
}

static const struct sd_task_ops rse_ops = {
	.name = "rdma_remote_net_sync_event",
	.submit = rse_submit,
	.invoke = rse_invoke,
	.release = rse_release,
};

static doca_error_t rse_set_conf(struct doca_rdma *rdma, int kind, sd_fnptr ok, sd_fnptr err, uint32_t num)
{
	struct rse_ext *e;

	if (!rdma || !ok || !err || num == 0 || num > 4 * SD_RDMA_MAX_QUEUE)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_rdma_live(rdma))
		return DOCA_ERROR_BAD_STATE;
	if (rdma->ctx.state != DOCA_CTX_STATE_IDLE)
		return DOCA_ERROR_BAD_STATE;
	e = ext_of(rdma, 1);
	if (!e)
		return DOCA_ERROR_NO_MEMORY;
	e->conf[kind].ok_cb = ok;
	e->conf[kind].err_cb = err;
	e->conf[kind].num = num;
	e->conf[kind].set = 1;
	return DOCA_SUCCESS;
}

static doca_error_t rse_alloc(struct doca_rdma *rdma, int kind, struct doca_rdma_connection *conn,
			      struct doca_sync_event_remote_net *ev, union doca_data ud, struct rse_task **out)
{
	struct rse_ext *e;
	struct sd_rtask *t = NULL;

	if (!rdma || !out || !ev)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_rdma_live(rdma))
		return DOCA_ERROR_BAD_STATE;
	if (!sd_se_remote_live(ev))
		return DOCA_ERROR_INVALID_VALUE;
	if (rdma->ctx.state != DOCA_CTX_STATE_RUNNING)
		return DOCA_ERROR_BAD_STATE;
	e = ext_of(rdma, 0);
	if (!e)
		return DOCA_ERROR_NO_MEMORY;            /* never configured */
	pthread_mutex_lock(&rdma->pool_lock);
	if (e->pool[kind] && e->pool[kind]->p.nfree) {
		struct sd_pool *p = &e->pool[kind]->p;

		t = p->free[--p->nfree];
		t->allocated = 1;
	}
	pthread_mutex_unlock(&rdma->pool_lock);
	if (!t)
		return DOCA_ERROR_NO_MEMORY;
	sd_rtask_reset(t, rdma, conn, ud);
	t->base.ops = &rse_ops;
	((struct rse_task *)t)->ev = ev;
	sd_se_remote_ref(ev);
	*out = (struct rse_task *)t;
	return DOCA_SUCCESS;
}

static void rse_set_event(struct rse_task *s, const struct doca_sync_event_remote_net *ev)
{
	struct doca_sync_event_remote_net *nev = (struct doca_sync_event_remote_net *)ev;

	if (s->ev == nev)
		return;
	sd_se_remote_ref(nev);
	sd_se_remote_unref(s->ev);
	s->ev = nev;
}

static void rse_set_conn(struct rse_task *s, struct doca_rdma_connection *c)
{
	if (s->t.conn != c) {
		sd_conn_ref(c);
		sd_conn_unref(s->t.conn);
		s->t.conn = c;
	}
}

/* ---------------------------------------------------------------- capabilities */
#define RSE_CAP(fn)                                                   \
	SD_EXPORT doca_error_t fn(const struct doca_devinfo *devinfo) \
	{                                                             \
		return devinfo ? DOCA_SUCCESS : DOCA_ERROR_INVALID_VALUE; \
	}

RSE_CAP(doca_rdma_cap_task_remote_net_sync_event_get_is_supported)
RSE_CAP(doca_rdma_cap_task_remote_net_sync_event_notify_set_is_supported)
RSE_CAP(doca_rdma_cap_task_remote_net_sync_event_notify_add_is_supported)

/* ---------------------------------------------------------------- common per-type API */
#define RSE_COMMON(name, KIND)                                                                             \
	SD_EXPORT doca_error_t doca_rdma_task_remote_net_sync_event_##name##_set_conf(                       \
		struct doca_rdma *rdma, doca_rdma_task_remote_net_sync_event_##name##_completion_cb_t ok,    \
		doca_rdma_task_remote_net_sync_event_##name##_completion_cb_t err, uint32_t num_tasks)       \
	{                                                                                                  \
		return rse_set_conf(rdma, KIND, (sd_fnptr)ok, (sd_fnptr)err, num_tasks);                   \
	}                                                                                                  \
	SD_EXPORT struct doca_task *doca_rdma_task_remote_net_sync_event_##name##_as_task(                   \
		struct doca_rdma_task_remote_net_sync_event_##name *task)                                    \
	{                                                                                                  \
		return task ? &task->s.t.base : NULL;                                                      \
	}                                                                                                  \
	SD_EXPORT void doca_rdma_task_remote_net_sync_event_##name##_set_rdma_connection(                    \
		struct doca_rdma_task_remote_net_sync_event_##name *task, struct doca_rdma_connection *c)    \
	{                                                                                                  \
		if (task)                                                                                  \
			rse_set_conn(&task->s, c);                                                         \
	}                                                                                                  \
	SD_EXPORT const struct doca_rdma_connection *                                                      \
	doca_rdma_task_remote_net_sync_event_##name##_get_rdma_connection(                                 \
		const struct doca_rdma_task_remote_net_sync_event_##name *task)                              \
	{                                                                                                  \
		return task ? task->s.t.conn : NULL;                                                       \
	}

RSE_COMMON(get, RSE_GET)
RSE_COMMON(notify_set, RSE_SET)
RSE_COMMON(notify_add, RSE_ADD)

/* ---------------------------------------------------------------- get */
SD_EXPORT doca_error_t doca_rdma_task_remote_net_sync_event_get_allocate_init(
	struct doca_rdma *rdma, struct doca_rdma_connection *rdma_connection,
	const struct doca_sync_event_remote_net *event, struct doca_buf *dst_buf, union doca_data user_data,
	struct doca_rdma_task_remote_net_sync_event_get **task)
{
	struct rse_task *s;
	doca_error_t rc = rse_alloc(rdma, RSE_GET, rdma_connection, (struct doca_sync_event_remote_net *)event,
				    user_data, task ? &s : NULL);

	if (rc == DOCA_SUCCESS) {
		s->t.dst = dst_buf;
		*task = (struct doca_rdma_task_remote_net_sync_event_get *)s;
	}
	return rc;
}

SD_EXPORT void doca_rdma_task_remote_net_sync_event_get_set_sync_event(
	struct doca_rdma_task_remote_net_sync_event_get *task, const struct doca_sync_event_remote_net *event)
{
	if (task)
		rse_set_event(&task->s, event);
}

SD_EXPORT const struct doca_sync_event_remote_net *doca_rdma_task_remote_net_sync_event_get_get_sync_event(
	const struct doca_rdma_task_remote_net_sync_event_get *task)
{
	return task ? task->s.ev : NULL;
}

SD_EXPORT void doca_rdma_task_remote_net_sync_event_get_set_dst_buf(
	struct doca_rdma_task_remote_net_sync_event_get *task, struct doca_buf *dst_buf)
{
	if (task)
		task->s.t.dst = dst_buf;
}

SD_EXPORT struct doca_buf *doca_rdma_task_remote_net_sync_event_get_get_dst_buf(
	const struct doca_rdma_task_remote_net_sync_event_get *task)
{
	return task ? task->s.t.dst : NULL;
}

SD_EXPORT uint32_t doca_rdma_task_remote_net_sync_event_get_get_result_len(
	const struct doca_rdma_task_remote_net_sync_event_get *task)
{
	return task ? task->s.t.res_len : 0;
}

/* ---------------------------------------------------------------- notify_set */
SD_EXPORT doca_error_t doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(
	struct doca_rdma *rdma, struct doca_rdma_connection *rdma_connection, struct doca_sync_event_remote_net *event,
	const struct doca_buf *src_buf, union doca_data user_data,
	struct doca_rdma_task_remote_net_sync_event_notify_set **task)
{
	struct rse_task *s;
	doca_error_t rc = rse_alloc(rdma, RSE_SET, rdma_connection, event, user_data, task ? &s : NULL);

	if (rc == DOCA_SUCCESS) {
		s->t.src = (struct doca_buf *)src_buf;
		*task = (struct doca_rdma_task_remote_net_sync_event_notify_set *)s;
	}
	return rc;
}

SD_EXPORT void doca_rdma_task_remote_net_sync_event_notify_set_set_sync_event(
	struct doca_rdma_task_remote_net_sync_event_notify_set *task, struct doca_sync_event_remote_net *event)
{
	if (task)
		rse_set_event(&task->s, event);
}

SD_EXPORT struct doca_sync_event_remote_net *doca_rdma_task_remote_net_sync_event_notify_set_get_sync_event(
	const struct doca_rdma_task_remote_net_sync_event_notify_set *task)
{
	return task ? task->s.ev : NULL;
}

SD_EXPORT void doca_rdma_task_remote_net_sync_event_notify_set_set_src_buf(
	struct doca_rdma_task_remote_net_sync_event_notify_set *task, const struct doca_buf *src_buf)
{
	if (task)
		task->s.t.src = (struct doca_buf *)src_buf;
}

SD_EXPORT const struct doca_buf *doca_rdma_task_remote_net_sync_event_notify_set_get_src_buf(
	const struct doca_rdma_task_remote_net_sync_event_notify_set *task)
{
	return task ? task->s.t.src : NULL;
}

/* ---------------------------------------------------------------- notify_add */
SD_EXPORT doca_error_t doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(
	struct doca_rdma *rdma, struct doca_rdma_connection *rdma_connection, struct doca_sync_event_remote_net *event,
	struct doca_buf *result_buf, uint64_t add_data, union doca_data user_data,
	struct doca_rdma_task_remote_net_sync_event_notify_add **task)
{
	struct rse_task *s;
	doca_error_t rc = rse_alloc(rdma, RSE_ADD, rdma_connection, event, user_data, task ? &s : NULL);

	if (rc == DOCA_SUCCESS) {
		s->t.result = result_buf;
		s->t.arg0 = add_data;
		*task = (struct doca_rdma_task_remote_net_sync_event_notify_add *)s;
	}
	return rc;
}

SD_EXPORT void doca_rdma_task_remote_net_sync_event_notify_add_set_sync_event(
	struct doca_rdma_task_remote_net_sync_event_notify_add *task, struct doca_sync_event_remote_net *event)
{
	if (task)
		rse_set_event(&task->s, event);
}

SD_EXPORT struct doca_sync_event_remote_net *doca_rdma_task_remote_net_sync_event_notify_add_get_sync_event(
	const struct doca_rdma_task_remote_net_sync_event_notify_add *task)
{
	return task ? task->s.ev : NULL;
}

SD_EXPORT void doca_rdma_task_remote_net_sync_event_notify_add_set_result_buf(
	struct doca_rdma_task_remote_net_sync_event_notify_add *task, struct doca_buf *result_buf)
{
	if (task)
		task->s.t.result = result_buf;
}

SD_EXPORT struct doca_buf *doca_rdma_task_remote_net_sync_event_notify_add_get_result_buf(
	const struct doca_rdma_task_remote_net_sync_event_notify_add *task)
{
	return task ? task->s.t.result : NULL;
}

SD_EXPORT void doca_rdma_task_remote_net_sync_event_notify_add_set_add_data(
	struct doca_rdma_task_remote_net_sync_event_notify_add *task, uint64_t add_data)
{
	if (task)
		task->s.t.arg0 = add_data;
}

SD_EXPORT uint64_t doca_rdma_task_remote_net_sync_event_notify_add_get_add_data(
	const struct doca_rdma_task_remote_net_sync_event_notify_add *task)
{
	return task ? task->s.t.arg0 : 0;
}
