/*
 * softdoca RDMA context: create/destroy, configuration, capabilities and the
 * ctx operations (start/stop/progress) that plug doca_rdma into doca_ctx.
 *
 * Defaults: permissions LOCAL_READ_WRITE, transport RC, max_num_connections
 * 1, send/recv queue size 256, max_send_buf_list_len 1, receive dst list
 * length 1, MTU 1K, rnr_retry_count 7, GRH enabled, GID index 0, SL 0,
 * connection request timeout 5000 ms. Setters work only while the ctx is
 * IDLE (else DOCA_ERROR_BAD_STATE).
 *
 * RNR: rnr_retry_count n in 1..6 lets a send wait n x SOFTDOCA_RNR_STEP_MS
 * (default 100 ms) at the responder for a receive to be posted; 7 means
 * "retry until the transport timeout" (SOFTDOCA_TIMEOUT_MS); 0 fails at once.
 *
 * GID table (RoCE v2 style, derived from the device's addresses, stable
 * order): index 0 is the device's IPv6 address if it has one, followed by
 * the IPv4-mapped address ::ffff:a.b.c.d if it has an IPv4 address.
 *
 * Connection objects live until doca_rdma_destroy (callers may keep the
 * pointers after the ctx stopped); a stop closes them all.
 */
#include "rdma.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- handlers in Common */
/* Common (common/mmap.c) is below this layer: a map reaches the same-host
 * transport and, through the provider bridge, the provider only through the
 * handlers installed here when the library loads, before any map can start. */
static void xport_publish(const struct doca_mmap *m)
{
	struct sd_xregion r = {
		.id = m->id, .base = (uint64_t)(uintptr_t)m->addr, .len = m->len, .perms = m->permissions, .key = m->key};

	if (!m->remote)
		sd_xport_publish(&r);
}

static void xport_revoke(const struct doca_mmap *m)
{
	if (!m->remote)
		sd_xport_revoke(m->id);
}

static const struct sd_mmap_hooks rdma_mmap_hooks = {
	.xport_publish = xport_publish,
	.xport_revoke = xport_revoke,
	.prov_publish = sd_prov_mmap_publish,
	.prov_revoke = sd_prov_mmap_revoke,
	.prov_import = sd_prov_mmap_import,
};

__attribute__((constructor)) static void rdma_install_mmap_hooks(void)
{
	sd_mmap_set_hooks(&rdma_mmap_hooks);
}

static int ctx_idle(const struct doca_rdma *r)
{
	return r->ctx.state == DOCA_CTX_STATE_IDLE;
}

int sd_rdma_live(const struct doca_rdma *rdma)
{
	return rdma && sd_handle_live_kind(rdma, SD_H_OTHER) && rdma->magic == SD_RDMA_MAGIC;
}

#define CHECK_RDMA(r) SD_CHECK_HANDLE(r, sd_rdma_live)

#define CHECK_SET(r)                                   \
	do {                                           \
		CHECK_RDMA(r);                         \
		if (!ctx_idle(r))                      \
			return DOCA_ERROR_BAD_STATE;   \
	} while (0)

uint32_t sd_rnr_budget_ms(const struct doca_rdma *rdma)
{
	uint64_t step = sd_env_ms("SOFTDOCA_RNR_STEP_MS", 100);

	if (rdma->rnr == 0)
		return 0;
	if (rdma->rnr >= 7)
		return (uint32_t)(sd_eng_timeout_ns() / 1000000ull);
	return (uint32_t)(step * rdma->rnr);
}

/* ---------------------------------------------------------------- events */
void sd_rdma_queue_event(struct doca_rdma *rdma, enum sd_event_type type, struct doca_rdma_connection *conn)
{
	struct sd_event *ev = calloc(1, sizeof(*ev));

	if (!ev) {
		SD_ERR("rdma: out of memory, connection event %d lost", (int)type);
		return;
	}
	ev->type = type;
	ev->conn = conn;
	/* completions made before this event reach the pe first (causal order) */
	sd_eng_flush_completions();
	atomic_fetch_add(&conn->ev_pending, 1); /* keeps conn allocated until delivered */
	SD_LIVE_INC(SD_LIVE_EVENT);
	pthread_mutex_lock(&rdma->ev_lock);
	if (rdma->ev_tail)
		rdma->ev_tail->next = ev;
	else
		rdma->ev_head = ev;
	rdma->ev_tail = ev;
	pthread_mutex_unlock(&rdma->ev_lock);
	sd_pe_wake(rdma->ctx.pe);
}

static void events_clear(struct doca_rdma *rdma)
{
	struct sd_event *ev;

	pthread_mutex_lock(&rdma->ev_lock);
	ev = rdma->ev_head;
	rdma->ev_head = rdma->ev_tail = NULL;
	pthread_mutex_unlock(&rdma->ev_lock);
	while (ev) {
		struct sd_event *nx = ev->next;
		atomic_fetch_sub(&ev->conn->ev_pending, 1);
		SD_LIVE_DEC(SD_LIVE_EVENT);
		free(ev);
		ev = nx;
	}
}

static void rdma_service(struct doca_ctx *ctx, const uint64_t *tags, int ntags)
{
	sd_eng_service(&((struct doca_rdma *)ctx->impl)->lg, tags, ntags);
}

static void rdma_sleeping(struct doca_ctx *ctx)
{
	(void)ctx;
	if (sd_prov_asked()) /* only a provider is ever left to a polling thread */
		sd_eng_app_sleeps();
}

static int rdma_progress(struct doca_ctx *ctx)
{
	struct doca_rdma *rdma = ctx->impl;
	int n = 0;

	if (sd_pe_phase != SD_PE_PHASE_AFTER && atomic_load_explicit(&ctx->inflight, memory_order_relaxed) != 0)
		sd_eng_poll(&rdma->lg);
	for (;;) {
		struct sd_event *ev;
		struct doca_rdma_connection *c;
		union doca_data cud;

		/* checked before the leaf lock (pe->lock is never taken under ev_lock) */
		int defer_end = sd_pe_phase == SD_PE_PHASE_BEFORE || (ctx->pe && sd_pe_has_completions(ctx->pe));

		pthread_mutex_lock(&rdma->ev_lock);
		ev = rdma->ev_head;
		if (ev && defer_end && (ev->type == SD_EV_FAILURE || ev->type == SD_EV_DISCONNECT))
			ev = NULL; /* after the completions that arrived before it (even during this call) */
		if (ev) {
			rdma->ev_head = ev->next;
			if (!rdma->ev_head)
				rdma->ev_tail = NULL;
		}
		pthread_mutex_unlock(&rdma->ev_lock);
		if (!ev)
			break;
		c = ev->conn;
		cud = c->user_data;
		n++;
		switch (ev->type) {
		case SD_EV_REQUEST:
			if (rdma->request_cb)
				rdma->request_cb(c, ctx->user_data);
			else /* nobody to ask: refuse */
				doca_rdma_connection_reject(c);
			break;
		case SD_EV_ESTABLISHED:
			if (rdma->established_cb)
				rdma->established_cb(c, cud, ctx->user_data);
			break;
		case SD_EV_FAILURE:
			if (rdma->failure_cb)
				rdma->failure_cb(c, cud, ctx->user_data);
			break;
		case SD_EV_DISCONNECT:
			if (rdma->disconnect_cb)
				rdma->disconnect_cb(c, cud, ctx->user_data);
			break;
		}
		atomic_fetch_sub(&c->ev_pending, 1); /* after the callback: c may go now */
		SD_LIVE_DEC(SD_LIVE_EVENT);
		free(ev);
	}
	return n;
}

/* ---------------------------------------------------------------- ctx ops */
/* The engine lets go of rdma: its links, connections and listeners close
 * (tasks fail with status), then its posted receives fail. Engine lock held. */
static void rdma_detach_locked(struct doca_rdma *rdma, doca_error_t status)
{
	sd_eng_detach_locked(&rdma->lg, status);
	while (rdma->rq_head) {
		struct sd_rtask *t = rdma->rq_head;

		rdma->rq_head = t->qnext;
		sd_eng_complete(&t->base, status);
	}
	rdma->rq_tail = NULL;
}

static doca_error_t rdma_start(struct doca_ctx *ctx)
{
	struct doca_rdma *rdma = ctx->impl;
	doca_error_t rc;

	if (rdma->transport != DOCA_RDMA_TRANSPORT_TYPE_RC)
		return DOCA_ERROR_NOT_SUPPORTED;
	if (rdma->gid_index >= sd_rdma_gid_table(&rdma->dev->info, NULL, 0))
		return DOCA_ERROR_BAD_CONFIG;
	rc = sd_rdma_pools_create(rdma);
	if (rc != DOCA_SUCCESS)
		return rc;
	events_clear(rdma);
	rc = sd_eng_attach(&rdma->lg);
	if (rc != DOCA_SUCCESS)
		return rc;
	sd_eng_lock();
	rc = sd_prov_rdma_start(); /* SOFTDOCA_PROVIDER: one asked for that cannot start fails the start */
	if (rc != DOCA_SUCCESS)
		rdma_detach_locked(rdma, DOCA_ERROR_CONNECTION_ABORTED);
	sd_eng_unlock();
	return rc;
}

static void rdma_stop(struct doca_ctx *ctx)
{
	struct doca_rdma *rdma = ctx->impl;

	sd_eng_lock();
	rdma_detach_locked(rdma, DOCA_ERROR_CONNECTION_ABORTED);
	sd_eng_unlock();
	events_clear(rdma);
}

static void rdma_stopped(struct doca_ctx *ctx)
{
	events_clear(ctx->impl);
}

static void rdma_flush(struct doca_ctx *ctx)
{
	struct doca_rdma *rdma = ctx->impl;

	sd_eng_lock();
	while (rdma->rq_head) {
		struct sd_rtask *t = rdma->rq_head;
		rdma->rq_head = t->qnext;
		t->qnext = NULL;
		sd_rtask_complete(t, DOCA_ERROR_CONNECTION_ABORTED);
	}
	rdma->rq_tail = NULL;
	for (struct doca_rdma_connection *c = rdma->conns; c; c = c->next)
		sd_conn_fail_waiting(c, DOCA_ERROR_CONNECTION_ABORTED);
	sd_eng_unlock();
}

static const struct sd_ctx_ops rdma_ctx_ops = {
	.name = "rdma",
	.start = rdma_start,
	.start_done = NULL,
	.stop = rdma_stop,
	.stopped = rdma_stopped,
	.progress = rdma_progress,
	.flush = rdma_flush,
	.service = rdma_service,
	.sleeping = rdma_sleeping,
};

/* ---------------------------------------------------------------- create / destroy */
SD_EXPORT doca_error_t doca_rdma_create(struct doca_dev *dev, struct doca_rdma **out)
{
	struct doca_rdma *r;

	if (!dev || !out)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_handle_live_kind(dev, SD_H_DEV))
		return DOCA_ERROR_BAD_STATE;
	r = calloc(1, sizeof(*r));
	if (!r)
		return DOCA_ERROR_NO_MEMORY;
	r->magic = SD_RDMA_MAGIC;
	r->dev = dev;
	r->permissions = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE;
	r->transport = DOCA_RDMA_TRANSPORT_TYPE_RC;
	r->max_conns = 1;
	r->sq_size = 256;
	r->rq_size = 256;
	r->max_send_buf_list_len = 1;
	r->recv_buf_list_len = 1;
	r->mtu = DOCA_MTU_SIZE_1K_BYTES;
	r->rnr = 7;
	r->grh = 1;
	r->timeout_ms = 5000;
	pthread_mutex_init(&r->pool_lock, NULL);
	pthread_mutex_init(&r->ev_lock, NULL);
	if (sd_ctx_init(&r->ctx, &rdma_ctx_ops, r) != DOCA_SUCCESS) {
		pthread_mutex_destroy(&r->pool_lock);
		pthread_mutex_destroy(&r->ev_lock);
		free(r);
		return DOCA_ERROR_NO_MEMORY;
	}
	if (sd_handle_add_kind(r, SD_H_OTHER) != 0) {
		sd_ctx_fini(&r->ctx);
		pthread_mutex_destroy(&r->pool_lock);
		pthread_mutex_destroy(&r->ev_lock);
		free(r);
		return DOCA_ERROR_NO_MEMORY;
	}
	atomic_fetch_add(&dev->refs, 1);
	sd_eng_rdma_created();
	*out = r;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_destroy(struct doca_rdma *rdma)
{
	CHECK_RDMA(rdma);
	if (!ctx_idle(rdma))
		return DOCA_ERROR_BAD_STATE;
	sd_handle_del(rdma);
	sd_ctx_fini(&rdma->ctx);
	sd_eng_lock();
	sd_conn_free_all(rdma);
	sd_eng_unlock();
	events_clear(rdma);
	sd_rdma_pools_destroy(rdma);
	atomic_fetch_sub(&rdma->dev->refs, 1);
	pthread_mutex_destroy(&rdma->pool_lock);
	pthread_mutex_destroy(&rdma->ev_lock);
	rdma->magic = 0;
	free(rdma);
	sd_eng_rdma_destroyed();
	return DOCA_SUCCESS;
}

SD_EXPORT struct doca_ctx *doca_rdma_as_ctx(struct doca_rdma *rdma)
{
	if (!sd_rdma_live(rdma))
		return NULL;
	return &rdma->ctx;
}

/* ---------------------------------------------------------------- GIDs & caps */
uint32_t sd_rdma_gid_table(const struct doca_devinfo *info, struct doca_rdma_gid *out, uint32_t max)
{
	uint32_t n = 0;

	if (info->has_ipv6) {
		if (out && n < max)
			memcpy(out[n].raw, info->ipv6, 16);
		n++;
	}
	if (info->has_ipv4) {
		if (out && n < max) {
			memset(out[n].raw, 0, 16);
			out[n].raw[10] = 0xff;
			out[n].raw[11] = 0xff;
			memcpy(out[n].raw + 12, info->ipv4, 4);
		}
		n++;
	}
	return n;
}

#define CAP_U32(fn, val)                                                                     \
	SD_EXPORT doca_error_t fn(const struct doca_devinfo *devinfo, uint32_t *out)        \
	{                                                                                    \
		if (!devinfo || !out)                                                        \
			return DOCA_ERROR_INVALID_VALUE;                                     \
		*out = (val);                                                                \
		return DOCA_SUCCESS;                                                         \
	}

CAP_U32(doca_rdma_cap_get_max_recv_queue_size, SD_RDMA_MAX_QUEUE)
CAP_U32(doca_rdma_cap_get_max_send_queue_size, SD_RDMA_MAX_QUEUE)
CAP_U32(doca_rdma_cap_get_max_send_buf_list_len, SD_RDMA_MAX_BUF_LIST)
CAP_U32(doca_rdma_cap_get_max_message_size, SD_RDMA_MAX_MSG)
CAP_U32(doca_rdma_cap_get_gid_table_size, sd_rdma_gid_table(devinfo, NULL, 0))

SD_EXPORT doca_error_t doca_rdma_cap_get_gid(const struct doca_devinfo *devinfo, uint32_t start_index,
					     uint32_t num_entries, struct doca_rdma_gid *gid_array)
{
	struct doca_rdma_gid tab[2];
	uint32_t n;

	if (!devinfo || !gid_array || num_entries == 0)
		return DOCA_ERROR_INVALID_VALUE;
	n = sd_rdma_gid_table(devinfo, tab, 2);
	if (start_index >= n || num_entries > n - start_index)
		return DOCA_ERROR_INVALID_VALUE;
	memcpy(gid_array, tab + start_index, num_entries * sizeof(*gid_array));
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_cap_transport_type_is_supported(const struct doca_devinfo *devinfo,
								 enum doca_rdma_transport_type type)
{
	if (!devinfo)
		return DOCA_ERROR_INVALID_VALUE;
	if (type == DOCA_RDMA_TRANSPORT_TYPE_RC)
		return DOCA_SUCCESS;
	if (type == DOCA_RDMA_TRANSPORT_TYPE_DC)
		return DOCA_ERROR_NOT_SUPPORTED;
	return DOCA_ERROR_INVALID_VALUE;
}

SD_EXPORT doca_error_t doca_rdma_cap_task_receive_get_max_dst_buf_list_len(const struct doca_devinfo *devinfo,
									   enum doca_rdma_transport_type type,
									   uint32_t *max_buf_list_len)
{
	if (!devinfo || !max_buf_list_len)
		return DOCA_ERROR_INVALID_VALUE;
	if (type != DOCA_RDMA_TRANSPORT_TYPE_RC)
		return type == DOCA_RDMA_TRANSPORT_TYPE_DC ? DOCA_ERROR_NOT_SUPPORTED : DOCA_ERROR_INVALID_VALUE;
	*max_buf_list_len = SD_RDMA_MAX_BUF_LIST;
	return DOCA_SUCCESS;
}

#define CAP_TASK(fn)                                                  \
	SD_EXPORT doca_error_t fn(const struct doca_devinfo *devinfo) \
	{                                                             \
		return devinfo ? DOCA_SUCCESS : DOCA_ERROR_INVALID_VALUE; \
	}

CAP_TASK(doca_rdma_cap_task_receive_is_supported)
CAP_TASK(doca_rdma_cap_task_send_is_supported)
CAP_TASK(doca_rdma_cap_task_send_imm_is_supported)
CAP_TASK(doca_rdma_cap_task_read_is_supported)
CAP_TASK(doca_rdma_cap_task_write_is_supported)
CAP_TASK(doca_rdma_cap_task_write_imm_is_supported)
CAP_TASK(doca_rdma_cap_task_atomic_cmp_swp_is_supported)
CAP_TASK(doca_rdma_cap_task_atomic_fetch_add_is_supported)

/* ---------------------------------------------------------------- setters */
static uint32_t pow2_up(uint32_t v)
{
	uint32_t p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

SD_EXPORT doca_error_t doca_rdma_set_send_queue_size(struct doca_rdma *rdma, uint32_t size)
{
	CHECK_SET(rdma);
	if (size == 0)
		return DOCA_ERROR_INVALID_VALUE;
	if (size > SD_RDMA_MAX_QUEUE)
		return DOCA_ERROR_NOT_SUPPORTED;
	rdma->sq_size = pow2_up(size);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_set_recv_queue_size(struct doca_rdma *rdma, uint32_t size)
{
	CHECK_SET(rdma);
	if (size == 0)
		return DOCA_ERROR_INVALID_VALUE;
	if (size > SD_RDMA_MAX_QUEUE)
		return DOCA_ERROR_NOT_SUPPORTED;
	rdma->rq_size = pow2_up(size);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_set_max_send_buf_list_len(struct doca_rdma *rdma, uint32_t len)
{
	CHECK_SET(rdma);
	if (len == 0 || len > SD_RDMA_MAX_BUF_LIST)
		return DOCA_ERROR_INVALID_VALUE;
	rdma->max_send_buf_list_len = len;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_task_receive_set_dst_buf_list_len(struct doca_rdma *rdma, uint32_t len)
{
	CHECK_SET(rdma);
	if (len == 0 || len > SD_RDMA_MAX_BUF_LIST)
		return DOCA_ERROR_INVALID_VALUE;
	rdma->recv_buf_list_len = len;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_set_transport_type(struct doca_rdma *rdma, enum doca_rdma_transport_type type)
{
	CHECK_SET(rdma);
	if (type == DOCA_RDMA_TRANSPORT_TYPE_DC)
		return DOCA_ERROR_NOT_SUPPORTED;
	if (type != DOCA_RDMA_TRANSPORT_TYPE_RC)
		return DOCA_ERROR_INVALID_VALUE;
	rdma->transport = type;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_set_mtu(struct doca_rdma *rdma, enum doca_mtu_size mtu)
{
	CHECK_SET(rdma);
	if (mtu == DOCA_MTU_SIZE_RAW_ETHERNET)
		return DOCA_ERROR_NOT_SUPPORTED;
	if ((unsigned)mtu > DOCA_MTU_SIZE_4K_BYTES)
		return DOCA_ERROR_INVALID_VALUE;
	rdma->mtu = mtu;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_set_permissions(struct doca_rdma *rdma, uint32_t perms)
{
	const uint32_t ok = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ |
			    DOCA_ACCESS_FLAG_RDMA_WRITE | DOCA_ACCESS_FLAG_RDMA_ATOMIC;

	CHECK_SET(rdma);
	if (perms & ~ok)
		return DOCA_ERROR_INVALID_VALUE;
	rdma->permissions = perms;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_set_grh_enabled(struct doca_rdma *rdma, uint8_t grh)
{
	CHECK_SET(rdma);
	if (grh > 1)
		return DOCA_ERROR_INVALID_VALUE;
	rdma->grh = grh;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_set_gid_index(struct doca_rdma *rdma, uint32_t idx)
{
	CHECK_SET(rdma);
	if (idx >= sd_rdma_gid_table(&rdma->dev->info, NULL, 0))
		return DOCA_ERROR_INVALID_VALUE;
	rdma->gid_index = idx;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_set_sl(struct doca_rdma *rdma, uint32_t sl)
{
	CHECK_SET(rdma);
	if (sl > 15)
		return DOCA_ERROR_INVALID_VALUE;
	rdma->sl = sl;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_set_connection_request_timeout(struct doca_rdma *rdma, uint16_t timeout)
{
	CHECK_SET(rdma);
	if (timeout == 0)
		return DOCA_ERROR_INVALID_VALUE;
	rdma->timeout_ms = timeout;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_set_max_num_connections(struct doca_rdma *rdma, uint16_t n)
{
	CHECK_SET(rdma);
	if (n == 0)
		return DOCA_ERROR_INVALID_VALUE;
	rdma->max_conns = n;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_set_rnr_retry_count(struct doca_rdma *rdma, uint8_t n)
{
	CHECK_SET(rdma);
	if (n > 7)
		return DOCA_ERROR_INVALID_VALUE;
	rdma->rnr = n;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_set_connection_state_callbacks(struct doca_rdma *rdma,
								doca_rdma_connection_request_cb_t req,
								doca_rdma_connection_established_cb_t est,
								doca_rdma_connection_failure_cb_t fail,
								doca_rdma_connection_disconnection_cb_t disc)
{
	CHECK_SET(rdma);
	rdma->request_cb = req;
	rdma->established_cb = est;
	rdma->failure_cb = fail;
	rdma->disconnect_cb = disc;
	return DOCA_SUCCESS;
}

/* ---------------------------------------------------------------- getters */
#define GETTER(fn, type, field)                                   \
	SD_EXPORT doca_error_t fn(const struct doca_rdma *rdma, type *out) \
	{                                                         \
		if (!rdma || !out)                                \
			return DOCA_ERROR_INVALID_VALUE;          \
		if (!sd_rdma_live(rdma))                          \
			return DOCA_ERROR_BAD_STATE;              \
		*out = rdma->field;                               \
		return DOCA_SUCCESS;                              \
	}

GETTER(doca_rdma_get_send_queue_size, uint32_t, sq_size)
GETTER(doca_rdma_get_recv_queue_size, uint32_t, rq_size)
GETTER(doca_rdma_get_max_send_buf_list_len, uint32_t, max_send_buf_list_len)
GETTER(doca_rdma_task_receive_get_dst_buf_list_len, uint32_t, recv_buf_list_len)
GETTER(doca_rdma_get_transport_type, enum doca_rdma_transport_type, transport)
GETTER(doca_rdma_get_mtu, enum doca_mtu_size, mtu)
GETTER(doca_rdma_get_grh_enabled, uint8_t, grh)
GETTER(doca_rdma_get_gid_index, uint32_t, gid_index)
GETTER(doca_rdma_get_sl, uint32_t, sl)
GETTER(doca_rdma_get_connection_request_timeout, uint16_t, timeout_ms)
GETTER(doca_rdma_get_rnr_retry_count, uint8_t, rnr)

SD_EXPORT doca_error_t doca_rdma_get_permissions(struct doca_rdma *rdma, uint32_t *out)
{
	if (!rdma || !out)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_rdma_live(rdma))
		return DOCA_ERROR_BAD_STATE;
	*out = rdma->permissions;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_get_max_num_connections(struct doca_rdma *rdma, uint16_t *out)
{
	if (!rdma || !out)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_rdma_live(rdma))
		return DOCA_ERROR_BAD_STATE;
	*out = rdma->max_conns;
	return DOCA_SUCCESS;
}

/* ---------------------------------------------------------------- hardware-only (docs/softdoca-contract.md) */
/* A DOCA RDMA on a host without DPA, GPU or the kernel's RDMA CM: the bridge
 * takes a librdmacm cm_id (there is none), the DPA and GPU datapaths do not
 * exist. Arguments are checked first, as DOCA does. */
static doca_error_t hw_only(const struct doca_rdma *rdma, const void *arg)
{
	if (!arg)
		return DOCA_ERROR_INVALID_VALUE;
	CHECK_RDMA(rdma);
	return DOCA_ERROR_NOT_SUPPORTED;
}

SD_EXPORT doca_error_t doca_rdma_bridge_prepare_connection(struct doca_rdma *rdma, struct rdma_cm_id *cm_id,
							   struct doca_rdma_connection **rdma_connection)
{
	if (!rdma_connection)
		return DOCA_ERROR_INVALID_VALUE;
	return hw_only(rdma, cm_id);
}

SD_EXPORT doca_error_t doca_rdma_bridge_accept(struct doca_rdma *rdma, void *private_data, uint8_t private_data_len,
					       struct doca_rdma_connection *rdma_connection)
{
	if (private_data_len && !private_data)
		return DOCA_ERROR_INVALID_VALUE;
	return hw_only(rdma, rdma_connection);
}

SD_EXPORT doca_error_t doca_rdma_bridge_established(struct doca_rdma *rdma, struct doca_rdma_connection *rdma_connection)
{
	return hw_only(rdma, rdma_connection);
}

SD_EXPORT doca_error_t doca_rdma_get_dpa_handle(struct doca_rdma *rdma, doca_dpa_dev_rdma_t *dpa_rdma)
{
	return hw_only(rdma, dpa_rdma);
}

SD_EXPORT doca_error_t doca_rdma_get_gpu_handle(struct doca_rdma *rdma, struct doca_gpu_dev_rdma **gpu_rdma)
{
	return hw_only(rdma, gpu_rdma);
}

SD_EXPORT doca_error_t doca_rdma_dpa_completion_attach(struct doca_rdma *rdma, struct doca_dpa_completion *dpa_comp)
{
	return hw_only(rdma, dpa_comp);
}
