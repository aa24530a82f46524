/*
 * doca_sync_event: a 64-bit value that can be read, set, added to and waited
 * upon, locally and (once exported) by a remote peer over RDMA.
 *
 * Two ways to run one, as in DOCA: standalone (doca_sync_event_start /
 * _stop) or as a context (doca_sync_event_as_ctx, connected to a progress
 * engine and started with doca_ctx_start), which adds the asynchronous tasks
 * get, notify_set, notify_add, wait_eq and wait_neq. Configuration (locations,
 * value memory, task pools) is allowed only while neither is running.
 *
 * Locations: CPU publishers/subscribers and a remote-net publisher are
 * supported. DPA, GPU and remote PCI locations, the DPA/GPU handles and the
 * remote PCI export/import need that hardware: DOCA_ERROR_NOT_SUPPORTED, as
 * DOCA answers on a host without it.
 *
 * The value: 8 bytes, 8-byte aligned; softdoca's own by default, or the
 * caller's (doca_sync_event_set_addr / _set_doca_buf). Every local access is
 * an atomic (get: load, update_set: store, update_add: fetch-add). A remote
 * peer changes it through the RDMA engine or the same-host transport without
 * any local code running, so every wait polls the value:
 *  - doca_sync_event_wait_* spin on it (the _yield variants call sched_yield
 *    after each look; the plain ones spin for ~100 us first, then yield too,
 *    so that the engine thread can run on a small machine). No timeout, as in
 *    DOCA.
 *  - a wait_eq / wait_neq task is checked at submit, in every
 *    doca_pe_progress of its engine, and by one process-wide poller thread
 *    that watches every pending wait task: every 50 us during the first
 *    millisecond after a submit, then every 1 ms. When the poller sees the
 *    condition it completes the task, which signals the engine's notification
 *    fd, so an application blocked on that fd wakes up. The poller exits after
 *    one idle second and is restarted on demand.
 * A stop (doca_ctx_stop) fails pending wait tasks with
 * DOCA_ERROR_CONNECTION_ABORTED (as every softdoca context flushes its tasks).
 *
 * Remote net: see sync_event.h. The registration is made by
 * doca_sync_event_export_to_remote_net (it needs the event started and a
 * device, from a CPU publisher or subscriber location, and a remote-net
 * publisher declared: DOCA_ERROR_BAD_STATE otherwise) and revoked when the
 * event stops: peers' operations are then refused like those on a stopped
 * mmap.
 */
#include "sync_event.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SD_SE_MAGIC 0x53594e45u

enum { SE_LOC_CPU = 1, SE_LOC_REMOTE_NET = 2 };
enum { SE_T_GET = 0, SE_T_SET, SE_T_ADD, SE_T_WAIT_EQ, SE_T_WAIT_NEQ, SE_T_NUM };

struct doca_sync_event;

struct se_task {
	struct doca_task base;
	int type;
	int allocated;
	struct doca_sync_event *se;
	uint64_t *ptr;          /* get: result; notify_add: fetched value (may be NULL) */
	uint64_t val, mask;
	struct se_task *wnext;  /* pending wait tasks (poller list) */
};

struct doca_sync_event_task_get { struct se_task t; };
struct doca_sync_event_task_notify_set { struct se_task t; };
struct doca_sync_event_task_notify_add { struct se_task t; };
struct doca_sync_event_task_wait_eq { struct se_task t; };
struct doca_sync_event_task_wait_neq { struct se_task t; };

struct se_pool {
	uint32_t count, nfree;
	struct se_task *tasks;
	struct se_task **free;
};

struct se_conf {
	void (*ok)(void);
	void (*err)(void);
	struct se_pool *pool;
};

struct doca_sync_event {
	uint32_t magic;            /* keeps ctx at another address than the event (handle registry) */
	struct doca_ctx ctx;
	pthread_mutex_t lock;
	int started;               /* doca_sync_event_start */
	int ctx_mode;              /* doca_sync_event_as_ctx was called */
	uint32_t pub, sub;         /* SE_LOC_* */
	struct doca_dev *dev;      /* the CPU location's device (a reference) */
	uint64_t *value;
	uint64_t *own;             /* softdoca's value memory (NULL: the caller's) */
	struct doca_buf *ubuf;     /* doca_sync_event_set_doca_buf: a reference */
	struct doca_mmap *xmap;    /* remote-net registration of the value */
	uint8_t blob[SD_SE_BLOB_LEN];
	int exported;
	struct se_conf conf[SE_T_NUM];
};

static const struct sd_task_ops se_task_ops;

static int se_live(const struct doca_sync_event *se)
{
	return se && sd_handle_live_kind(se, SD_H_OTHER) && se->magic == SD_SE_MAGIC;
}

#define CHECK_SE(se) SD_CHECK_HANDLE(se, se_live)

/* Neither started standalone nor a running context (caller holds se->lock). */
static int configurable(const struct doca_sync_event *se)
{
	return !se->started && se->ctx.state == DOCA_CTX_STATE_IDLE;
}

/* The value may be used: started standalone or a context not IDLE. */
static int active(const struct doca_sync_event *se)
{
	return se->started || se->ctx.state != DOCA_CTX_STATE_IDLE;
}

static uint64_t load(const struct doca_sync_event *se)
{
	return __atomic_load_n(se->value, __ATOMIC_ACQUIRE);
}

/* ---------------------------------------------------------------- the poller */
static pthread_mutex_t pl_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pl_cond;
static pthread_once_t pl_once = PTHREAD_ONCE_INIT;
static struct se_task *pl_head;
static int pl_running;
static uint64_t pl_fast_until;     /* poll every 50 us until then (ns, monotonic) */

#define SE_POLL_FAST_NS 50000ull
#define SE_POLL_SLOW_NS 1000000ull
#define SE_POLL_FAST_FOR_NS 1000000ull
#define SE_POLL_IDLE_EXIT_NS 1000000000ull

static void pl_prepare(void) { pthread_mutex_lock(&pl_lock); }
static void pl_parent(void) { pthread_mutex_unlock(&pl_lock); }
static void pl_child(void)
{
	/* the poller thread does not exist in the child; neither do its waits */
	pl_head = NULL;
	pl_running = 0;
	pthread_mutex_unlock(&pl_lock);
}

static void pl_init(void)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&pl_cond, &a);
	pthread_condattr_destroy(&a);
	pthread_atfork(pl_prepare, pl_parent, pl_child);
}

static int wait_met(const struct se_task *t)
{
	uint64_t v = load(t->se) & t->mask;

	return t->type == SE_T_WAIT_EQ ? v == t->val : v != t->val;
}

/* Unlink the pending waits of se (NULL: all) that are met (or all of se's
 * when take_all) into a list; caller holds pl_lock. */
static struct se_task *pl_take_locked(const struct doca_sync_event *se, int take_all)
{
	struct se_task *out = NULL, **pp = &pl_head;

	while (*pp) {
		struct se_task *t = *pp;

		if ((!se || t->se == se) && (take_all || wait_met(t))) {
			*pp = t->wnext;
			t->wnext = out;
			out = t;
		} else {
			pp = &t->wnext;
		}
	}
	return out;
}

static int complete_list(struct se_task *t, doca_error_t status)
{
	int n = 0;

	while (t) {
		struct se_task *next = t->wnext;

		t->wnext = NULL;
		sd_task_complete(&t->base, status);
		t = next;
		n++;
	}
	return n;
}

static void deadline_in(struct timespec *ts, uint64_t ns)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)(ns / 1000000000ull);
	ts->tv_nsec += (long)(ns % 1000000000ull);
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

static void *pl_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&pl_lock);
	for (;;) {
		struct se_task *done;
		struct timespec ts;

		if (!pl_head) {
			deadline_in(&ts, SE_POLL_IDLE_EXIT_NS);
			while (!pl_head) {
				if (pthread_cond_timedwait(&pl_cond, &pl_lock, &ts) == ETIMEDOUT)
					break;
			}
			if (!pl_head) {
				pl_running = 0;
				break;
			}
		}
		done = pl_take_locked(NULL, 0);
		if (done) {
			pthread_mutex_unlock(&pl_lock);
			complete_list(done, DOCA_SUCCESS);
			pthread_mutex_lock(&pl_lock);
		}
		if (pl_head) {
			deadline_in(&ts, sd_now_ns() < pl_fast_until ? SE_POLL_FAST_NS : SE_POLL_SLOW_NS);
			pthread_cond_timedwait(&pl_cond, &pl_lock, &ts);
		}
	}
	pthread_mutex_unlock(&pl_lock);
	return NULL;
}

/* Add a pending wait task; 0 on success. */
static int pl_add(struct se_task *t)
{
	int rc = 0;

	pthread_once(&pl_once, pl_init);
	pthread_mutex_lock(&pl_lock);
	if (!pl_running) {
		pthread_t th;
		pthread_attr_t a;

		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&th, &a, pl_main, NULL) != 0)
			rc = -1;
		else
			pl_running = 1;
		pthread_attr_destroy(&a);
	}
	if (rc == 0) {
		t->wnext = pl_head;
		pl_head = t;
		pl_fast_until = sd_now_ns() + SE_POLL_FAST_FOR_NS;
		pthread_cond_signal(&pl_cond);
	}
	pthread_mutex_unlock(&pl_lock);
	return rc;
}

/* Complete se's met waits now (doca_pe_progress); returns how many. */
static int pl_check(const struct doca_sync_event *se)
{
	struct se_task *done;

	pthread_once(&pl_once, pl_init);
	pthread_mutex_lock(&pl_lock);
	done = pl_head ? pl_take_locked(se, 0) : NULL;
	pthread_mutex_unlock(&pl_lock);
	return complete_list(done, DOCA_SUCCESS);
}

/* Fail every pending wait of se (stop / flush). */
static void pl_flush(const struct doca_sync_event *se, doca_error_t status)
{
	struct se_task *all;

	pthread_once(&pl_once, pl_init);
	pthread_mutex_lock(&pl_lock);
	all = pl_take_locked(se, 1);
	pthread_mutex_unlock(&pl_lock);
	complete_list(all, status);
}

/* ---------------------------------------------------------------- remote net registration */
static void unexport(struct doca_sync_event *se)
{
	if (se->xmap) {
		doca_error_t rc = doca_mmap_destroy(se->xmap); /* stops it: peers are refused from now on */

		if (rc != DOCA_SUCCESS)
			SD_WARN("sync event %p: releasing its remote-net registration failed: %s", (void *)se,
				doca_error_get_name(rc));
		se->xmap = NULL;
	}
	se->exported = 0;
}

/* ---------------------------------------------------------------- ctx ops */
static doca_error_t se_ctx_start(struct doca_ctx *ctx)
{
	struct doca_sync_event *se = ctx->impl;
	doca_error_t rc = DOCA_SUCCESS;

	pthread_mutex_lock(&se->lock);
	if (se->started)
		rc = DOCA_ERROR_BAD_STATE;
	pthread_mutex_unlock(&se->lock);
	return rc;
}

static void se_ctx_stop(struct doca_ctx *ctx)
{
	pl_flush(ctx->impl, DOCA_ERROR_CONNECTION_ABORTED);
}

static void se_ctx_stopped(struct doca_ctx *ctx)
{
	struct doca_sync_event *se = ctx->impl;

	pthread_mutex_lock(&se->lock);
	unexport(se);
	pthread_mutex_unlock(&se->lock);
}

static int se_ctx_progress(struct doca_ctx *ctx)
{
	return pl_check(ctx->impl);
}

static const struct sd_ctx_ops se_ctx_ops = {
	.name = "sync_event",
	.start = se_ctx_start,
	.start_done = NULL,
	.stop = se_ctx_stop,
	.stopped = se_ctx_stopped,
	.progress = se_ctx_progress,
	.flush = se_ctx_stop,
};

/* ---------------------------------------------------------------- create / destroy */
static void pool_free(struct se_pool *p)
{
	if (!p)
		return;
	free(p->tasks);
	free(p->free);
	free(p);
}

static void drop_value_source(struct doca_sync_event *se)
{
	if (se->ubuf) {
		doca_buf_dec_refcount(se->ubuf, NULL);
		se->ubuf = NULL;
	}
}

SD_EXPORT doca_error_t doca_sync_event_create(struct doca_sync_event **event)
{
	struct doca_sync_event *se;
	void *mem = NULL;

	if (!event)
		return DOCA_ERROR_INVALID_VALUE;
	se = calloc(1, sizeof(*se));
	if (!se)
		return DOCA_ERROR_NO_MEMORY;
	if (posix_memalign(&mem, 64, 64) != 0) {
		free(se);
		return DOCA_ERROR_NO_MEMORY;
	}
	memset(mem, 0, 64);
	se->magic = SD_SE_MAGIC;
	se->own = se->value = mem;
	pthread_mutex_init(&se->lock, NULL);
	if (sd_ctx_init(&se->ctx, &se_ctx_ops, se) != DOCA_SUCCESS) {
		pthread_mutex_destroy(&se->lock);
		free(mem);
		free(se);
		return DOCA_ERROR_NO_MEMORY;
	}
	if (sd_handle_add_kind(se, SD_H_OTHER) != 0) {
		sd_ctx_fini(&se->ctx);
		pthread_mutex_destroy(&se->lock);
		free(mem);
		free(se);
		return DOCA_ERROR_NO_MEMORY;
	}
	*event = se;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_sync_event_destroy(struct doca_sync_event *event)
{
	struct doca_sync_event *se = event;

	CHECK_SE(se);
	pthread_mutex_lock(&se->lock);
	if (se->ctx.state != DOCA_CTX_STATE_IDLE) {
		pthread_mutex_unlock(&se->lock);
		return DOCA_ERROR_BAD_STATE;    /* a running context: doca_ctx_stop first */
	}
	se->started = 0;                        /* a started event is stopped implicitly */
	unexport(se);
	drop_value_source(se);
	sd_handle_del(se);
	pthread_mutex_unlock(&se->lock);
	sd_ctx_fini(&se->ctx);
	for (int i = 0; i < SE_T_NUM; i++)
		pool_free(se->conf[i].pool);
	if (se->dev)
		atomic_fetch_sub(&se->dev->refs, 1);
	pthread_mutex_destroy(&se->lock);
	se->magic = 0;
	free(se->own);
	free(se);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_sync_event_create_from_export(struct doca_dev *dev, const uint8_t *data, size_t sz,
							  struct doca_sync_event **event)
{
	if (!dev || !data || !sz || !event)
		return DOCA_ERROR_INVALID_VALUE;
	return DOCA_ERROR_NOT_SUPPORTED;        /* a remote PCI (DPU) import: no PCIe peer in softdoca */
}

/* ---------------------------------------------------------------- locations */
static doca_error_t add_location(struct doca_sync_event *se, uint32_t *where, uint32_t bit, struct doca_dev *dev)
{
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_SE(se);
	if (dev && !sd_handle_live_kind(dev, SD_H_DEV))
		return DOCA_ERROR_BAD_STATE;
	pthread_mutex_lock(&se->lock);
	if (!configurable(se)) {
		rc = DOCA_ERROR_BAD_STATE;
	} else {
		*where |= bit;
		if (dev && !se->dev) {
			se->dev = dev;
			atomic_fetch_add(&dev->refs, 1);
		}
	}
	pthread_mutex_unlock(&se->lock);
	return rc;
}

SD_EXPORT doca_error_t doca_sync_event_add_publisher_location_cpu(struct doca_sync_event *event, struct doca_dev *dev)
{
	if (!event || !dev)
		return DOCA_ERROR_INVALID_VALUE;
	return add_location(event, &event->pub, SE_LOC_CPU, dev);
}

SD_EXPORT doca_error_t doca_sync_event_add_subscriber_location_cpu(struct doca_sync_event *event,
								   struct doca_dev *dev)
{
	if (!event || !dev)
		return DOCA_ERROR_INVALID_VALUE;
	return add_location(event, &event->sub, SE_LOC_CPU, dev);
}

SD_EXPORT doca_error_t doca_sync_event_add_publisher_location_remote_net(struct doca_sync_event *event)
{
	if (!event)
		return DOCA_ERROR_INVALID_VALUE;
	return add_location(event, &event->pub, SE_LOC_REMOTE_NET, NULL);
}

/* DPA / GPU / remote PCI: hardware softdoca does not have. */
#define NO_HW_LOCATION(fn, type)                                                     \
	SD_EXPORT doca_error_t fn(struct doca_sync_event *event, type *unit)         \
	{                                                                            \
		if (!event || !unit)                                                 \
			return DOCA_ERROR_INVALID_VALUE;                             \
		return se_live(event) ? DOCA_ERROR_NOT_SUPPORTED : DOCA_ERROR_BAD_STATE; \
	}

NO_HW_LOCATION(doca_sync_event_add_publisher_location_dpa, struct doca_dpa)
NO_HW_LOCATION(doca_sync_event_add_publisher_location_gpu, struct doca_gpu)
NO_HW_LOCATION(doca_sync_event_add_subscriber_location_dpa, struct doca_dpa)
NO_HW_LOCATION(doca_sync_event_add_subscriber_location_gpu, struct doca_gpu)

SD_EXPORT doca_error_t doca_sync_event_add_publisher_location_remote_pci(struct doca_sync_event *event)
{
	if (!event)
		return DOCA_ERROR_INVALID_VALUE;
	return se_live(event) ? DOCA_ERROR_NOT_SUPPORTED : DOCA_ERROR_BAD_STATE;
}

SD_EXPORT doca_error_t doca_sync_event_add_subscriber_location_remote_pci(struct doca_sync_event *event)
{
	if (!event)
		return DOCA_ERROR_INVALID_VALUE;
	return se_live(event) ? DOCA_ERROR_NOT_SUPPORTED : DOCA_ERROR_BAD_STATE;
}

/* ---------------------------------------------------------------- value memory */
SD_EXPORT doca_error_t doca_sync_event_set_addr(struct doca_sync_event *event, uint64_t *addr)
{
	struct doca_sync_event *se = event;
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_SE(se);
	if (!addr || (uintptr_t)addr % 8 != 0)   /* atomics need 8-byte alignment */
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&se->lock);
	if (!configurable(se)) {
		rc = DOCA_ERROR_BAD_STATE;
	} else {
		drop_value_source(se);
		se->value = addr;
	}
	pthread_mutex_unlock(&se->lock);
	return rc;
}

SD_EXPORT doca_error_t doca_sync_event_set_doca_buf(struct doca_sync_event *event, struct doca_buf *buf)
{
	const uint32_t need = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ |
			      DOCA_ACCESS_FLAG_RDMA_WRITE | DOCA_ACCESS_FLAG_RDMA_ATOMIC;
	struct doca_sync_event *se = event;
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_SE(se);
	if (!buf || !buf->in_use || !buf->mmap || buf->next || buf->in_tail)
		return DOCA_ERROR_INVALID_VALUE;       /* no buffer lists */
	if (buf->mmap->remote || (buf->mmap->permissions & need) != need || buf->data_len != 8)
		return DOCA_ERROR_NOT_PERMITTED;
	if ((uintptr_t)buf->data % 8 != 0)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&se->lock);
	if (!configurable(se)) {
		rc = DOCA_ERROR_BAD_STATE;
	} else {
		rc = doca_buf_inc_refcount(buf, NULL);
		if (rc == DOCA_SUCCESS) {
			drop_value_source(se);
			se->ubuf = buf;
			se->value = (uint64_t *)(void *)buf->data;
		}
	}
	pthread_mutex_unlock(&se->lock);
	return rc;
}

/* ---------------------------------------------------------------- start / stop / ctx */
SD_EXPORT doca_error_t doca_sync_event_start(struct doca_sync_event *event)
{
	struct doca_sync_event *se = event;
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_SE(se);
	pthread_mutex_lock(&se->lock);
	if (!configurable(se))
		rc = DOCA_ERROR_BAD_STATE;      /* started, or running as a context */
	else
		se->started = 1;
	pthread_mutex_unlock(&se->lock);
	return rc;
}

SD_EXPORT doca_error_t doca_sync_event_stop(struct doca_sync_event *event)
{
	struct doca_sync_event *se = event;
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_SE(se);
	pthread_mutex_lock(&se->lock);
	if (!se->started) {
		rc = DOCA_ERROR_BAD_STATE;
	} else {
		unexport(se);
		se->started = 0;
	}
	pthread_mutex_unlock(&se->lock);
	return rc;
}

SD_EXPORT struct doca_ctx *doca_sync_event_as_ctx(struct doca_sync_event *event)
{
	struct doca_sync_event *se = event;
	struct doca_ctx *ctx = NULL;

	if (!se_live(se))
		return NULL;
	pthread_mutex_lock(&se->lock);
	if (!se->started) {             /* a standalone-started event is no context */
		se->ctx_mode = 1;
		ctx = &se->ctx;
	}
	pthread_mutex_unlock(&se->lock);
	return ctx;
}

/* ---------------------------------------------------------------- capabilities */
#define CAP(fn, answer)                                                       \
	SD_EXPORT doca_error_t fn(const struct doca_devinfo *devinfo)         \
	{                                                                     \
		return devinfo ? (answer) : DOCA_ERROR_INVALID_VALUE;         \
	}

CAP(doca_sync_event_cap_is_create_from_export_supported, DOCA_ERROR_NOT_SUPPORTED)
CAP(doca_sync_event_cap_remote_net_is_create_from_export_supported, DOCA_SUCCESS)
CAP(doca_sync_event_cap_task_get_is_supported, DOCA_SUCCESS)
CAP(doca_sync_event_cap_task_notify_set_is_supported, DOCA_SUCCESS)
CAP(doca_sync_event_cap_task_notify_add_is_supported, DOCA_SUCCESS)
CAP(doca_sync_event_cap_task_wait_eq_is_supported, DOCA_SUCCESS)
CAP(doca_sync_event_cap_task_wait_neq_is_supported, DOCA_SUCCESS)
CAP(doca_sync_event_cap_is_export_to_remote_pci_supported, DOCA_ERROR_NOT_SUPPORTED)
CAP(doca_sync_event_cap_is_export_to_dpa_supported, DOCA_ERROR_NOT_SUPPORTED)
CAP(doca_sync_event_cap_is_export_to_gpu_supported, DOCA_ERROR_NOT_SUPPORTED)
CAP(doca_sync_event_cap_is_export_to_remote_net_supported, DOCA_SUCCESS)
CAP(doca_sync_event_cap_remote_net_is_export_to_dpa_supported, DOCA_ERROR_NOT_SUPPORTED)
CAP(doca_sync_event_cap_remote_net_is_export_to_gpu_supported, DOCA_ERROR_NOT_SUPPORTED)

/* ---------------------------------------------------------------- exports */
SD_EXPORT doca_error_t doca_sync_event_export_to_remote_pci(struct doca_sync_event *event, struct doca_dev *dev,
							    const uint8_t **data, size_t *sz)
{
	if (!event || !dev || !data || !sz)
		return DOCA_ERROR_INVALID_VALUE;
	return DOCA_ERROR_NOT_SUPPORTED;
}

SD_EXPORT doca_error_t doca_sync_event_get_dpa_handle(struct doca_sync_event *event, struct doca_dpa *dpa,
						      doca_dpa_dev_sync_event_t *dpa_dev_se_handle)
{
	if (!event || !dpa || !dpa_dev_se_handle)
		return DOCA_ERROR_INVALID_VALUE;
	return DOCA_ERROR_NOT_SUPPORTED;
}

SD_EXPORT doca_error_t doca_sync_event_get_gpu_handle(struct doca_sync_event *event, struct doca_gpu *gpu,
						      doca_gpu_dev_sync_event_t **gpu_dev_se)
{
	if (!event || !gpu || !gpu_dev_se)
		return DOCA_ERROR_INVALID_VALUE;
	return DOCA_ERROR_NOT_SUPPORTED;
}

SD_EXPORT doca_error_t doca_sync_event_remote_net_get_dpa_handle(struct doca_sync_event_remote_net *event,
								 struct doca_dpa *dpa,
								 doca_dpa_dev_sync_event_remote_net_t *dpa_remote_event)
{
	if (!event || !dpa || !dpa_remote_event)
		return DOCA_ERROR_INVALID_VALUE;
	return DOCA_ERROR_NOT_SUPPORTED;
}

SD_EXPORT doca_error_t doca_sync_event_remote_net_get_gpu_handle(struct doca_sync_event_remote_net *event,
								 struct doca_gpu *gpu,
								 doca_gpu_dev_sync_event_remote_net_t *gpu_remote_event)
{
	if (!event || !gpu || !gpu_remote_event)
		return DOCA_ERROR_INVALID_VALUE;
	return DOCA_ERROR_NOT_SUPPORTED;
}

/* Register the value for remote access (caller holds se->lock). */
static doca_error_t register_value(struct doca_sync_event *se)
{
	const uint32_t perms = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ |
			       DOCA_ACCESS_FLAG_RDMA_WRITE | DOCA_ACCESS_FLAG_RDMA_ATOMIC;
	struct doca_mmap *m = NULL;
	doca_error_t rc;

	rc = doca_mmap_create(&m);
	if (rc != DOCA_SUCCESS)
		return rc;
	rc = doca_mmap_set_memrange(m, se->value, sizeof(uint64_t));
	if (rc == DOCA_SUCCESS)
		rc = doca_mmap_set_permissions(m, perms);
	if (rc == DOCA_SUCCESS)
		rc = doca_mmap_add_dev(m, se->dev);
	if (rc == DOCA_SUCCESS)
		rc = doca_mmap_start(m);
	if (rc != DOCA_SUCCESS) {
		doca_mmap_destroy(m);
		return rc;
	}
	se->xmap = m;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_sync_event_export_to_remote_net(struct doca_sync_event *event, const uint8_t **data,
							    size_t *sz)
{
	struct doca_sync_event *se = event;
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_SE(se);
	if (!data || !sz)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&se->lock);
	if (!active(se) || !(se->pub & SE_LOC_REMOTE_NET) || !se->dev || !sd_handle_live_kind(se->dev, SD_H_DEV)) {
		rc = DOCA_ERROR_BAD_STATE;      /* not started / no remote-net publisher / no CPU location device */
		goto out;
	}
	if (!se->exported) {
		const void *desc = NULL;
		size_t len = 0;
		uint8_t *p = se->blob;

		if (!se->xmap)
			rc = register_value(se);
		if (rc == DOCA_SUCCESS)
			rc = doca_mmap_export_rdma(se->xmap, se->dev, &desc, &len);
		if (rc != DOCA_SUCCESS)
			goto out;
		if (len < SD_MMAP_DESC_LEN) { /* a provider's key may follow (SOFTDOCA_PROVIDER): the native part serves */
			rc = DOCA_ERROR_UNEXPECTED;
			goto out;
		}
		sd_put_le32(p, SD_SE_BLOB_MAGIC);
		sd_put_le16(p + 4, SD_SE_BLOB_VERSION);
		sd_put_le16(p + 6, SD_SE_BLOB_LEN);
		memcpy(p + 8, desc, SD_MMAP_DESC_LEN);
		sd_put_le32(p + 8 + SD_MMAP_DESC_LEN, sd_crc32(p, 8 + SD_MMAP_DESC_LEN));
		se->exported = 1;
	}
	*data = se->blob;
	*sz = SD_SE_BLOB_LEN;
out:
	pthread_mutex_unlock(&se->lock);
	return rc;
}

/* ---------------------------------------------------------------- remote net handle */
int sd_se_remote_live(const struct doca_sync_event_remote_net *ev)
{
	return ev && sd_handle_live_kind(ev, SD_H_OTHER) && ev->magic == SD_SE_REMOTE_MAGIC;
}

void sd_se_remote_ref(struct doca_sync_event_remote_net *ev)
{
	if (ev)
		atomic_fetch_add(&ev->task_refs, 1);
}

void sd_se_remote_unref(struct doca_sync_event_remote_net *ev)
{
	if (ev)
		atomic_fetch_sub(&ev->task_refs, 1);
}

SD_EXPORT doca_error_t doca_sync_event_remote_net_create_from_export(struct doca_dev *dev, const uint8_t *data,
								     size_t sz,
								     struct doca_sync_event_remote_net **event)
{
	struct doca_sync_event_remote_net *ev;
	struct doca_mmap *m = NULL;
	doca_error_t rc;

	if (!dev || !data || !event)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_handle_live_kind(dev, SD_H_DEV))
		return DOCA_ERROR_BAD_STATE;
	if (sz != SD_SE_BLOB_LEN || sd_get_le32(data) != SD_SE_BLOB_MAGIC ||
	    sd_get_le16(data + 4) != SD_SE_BLOB_VERSION || sd_get_le16(data + 6) != SD_SE_BLOB_LEN ||
	    sd_get_le32(data + 8 + SD_MMAP_DESC_LEN) != sd_crc32(data, 8 + SD_MMAP_DESC_LEN))
		return DOCA_ERROR_INVALID_VALUE;
	rc = doca_mmap_create_from_export(NULL, data + 8, SD_MMAP_DESC_LEN, dev, &m);
	if (rc != DOCA_SUCCESS)
		return rc;
	if (m->len != sizeof(uint64_t) || (uintptr_t)m->addr % 8 != 0) {
		doca_mmap_destroy(m);
		return DOCA_ERROR_INVALID_VALUE;
	}
	ev = calloc(1, sizeof(*ev));
	if (!ev) {
		doca_mmap_destroy(m);
		return DOCA_ERROR_NO_MEMORY;
	}
	ev->magic = SD_SE_REMOTE_MAGIC;
	ev->dev = dev;
	ev->map = m;
	ev->buf.mmap = m;
	ev->buf.head = ev->buf.data = m->addr;
	ev->buf.len = ev->buf.data_len = sizeof(uint64_t);
	ev->buf.last = &ev->buf;
	ev->buf.list_len = 1;
	ev->buf.in_use = 1;
	atomic_init(&ev->buf.refcount, 1);
	atomic_init(&ev->task_refs, 0);
	if (sd_handle_add_kind(ev, SD_H_OTHER) != 0) {
		doca_mmap_destroy(m);
		free(ev);
		return DOCA_ERROR_NO_MEMORY;
	}
	atomic_fetch_add(&dev->refs, 1);
	*event = ev;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_sync_event_remote_net_destroy(struct doca_sync_event_remote_net *event)
{
	if (!event)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_se_remote_live(event))
		return DOCA_ERROR_BAD_STATE;
	if (atomic_load(&event->task_refs) > 0)
		return DOCA_ERROR_IN_USE;       /* rdma tasks still name it: free them first */
	sd_handle_del(event);
	doca_mmap_destroy(event->map);
	atomic_fetch_sub(&event->dev->refs, 1);
	event->magic = 0;
	free(event);
	return DOCA_SUCCESS;
}

/* ---------------------------------------------------------------- host-side value operations */
static doca_error_t value_check(const struct doca_sync_event *se)
{
	if (!se)
		return DOCA_ERROR_INVALID_VALUE;
	if (!se_live(se))
		return DOCA_ERROR_BAD_STATE;
	return active(se) ? DOCA_SUCCESS : DOCA_ERROR_BAD_STATE;
}

SD_EXPORT doca_error_t doca_sync_event_get(struct doca_sync_event *event, uint64_t *value)
{
	doca_error_t rc = value_check(event);

	if (rc != DOCA_SUCCESS)
		return rc;
	if (!value)
		return DOCA_ERROR_INVALID_VALUE;
	*value = load(event);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_sync_event_update_add(struct doca_sync_event *event, uint64_t value, uint64_t *fetched)
{
	doca_error_t rc = value_check(event);
	uint64_t old;

	if (rc != DOCA_SUCCESS)
		return rc;
	if (!fetched)
		return DOCA_ERROR_INVALID_VALUE;
	old = __atomic_fetch_add(event->value, value, __ATOMIC_ACQ_REL);
	*fetched = old;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_sync_event_update_set(struct doca_sync_event *event, uint64_t value)
{
	doca_error_t rc = value_check(event);

	if (rc != DOCA_SUCCESS)
		return rc;
	__atomic_store_n(event->value, value, __ATOMIC_RELEASE);
	return DOCA_SUCCESS;
}

enum { SE_GT = 0, SE_EQ, SE_NEQ };

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

#define SE_SPIN_NS 100000ull

static doca_error_t host_wait(struct doca_sync_event *se, int op, uint64_t value, uint64_t mask, int yield)
{
	doca_error_t rc = value_check(se);
	uint64_t start = 0;
	unsigned n = 0;

	if (rc != DOCA_SUCCESS)
		return rc;
	for (;;) {
		uint64_t v = load(se) & mask;

		if ((op == SE_GT && v > value) || (op == SE_EQ && v == value) || (op == SE_NEQ && v != value))
			return DOCA_SUCCESS;
		if (yield) {
			sched_yield();
			continue;
		}
		cpu_relax();
		if ((++n & 255) == 0) {         /* spin ~100 us, then let other threads run too */
			uint64_t now = sd_now_ns();

			if (!start)
				start = now;
			else if (now - start > SE_SPIN_NS)
				sched_yield();
		}
	}
}

SD_EXPORT doca_error_t doca_sync_event_wait_gt(struct doca_sync_event *event, uint64_t value, uint64_t mask)
{
	return host_wait(event, SE_GT, value, mask, 0);
}

SD_EXPORT doca_error_t doca_sync_event_wait_gt_yield(struct doca_sync_event *event, uint64_t value, uint64_t mask)
{
	return host_wait(event, SE_GT, value, mask, 1);
}

SD_EXPORT doca_error_t doca_sync_event_wait_eq(struct doca_sync_event *event, uint64_t value, uint64_t mask)
{
	return host_wait(event, SE_EQ, value, mask, 0);
}

SD_EXPORT doca_error_t doca_sync_event_wait_eq_yield(struct doca_sync_event *event, uint64_t value, uint64_t mask)
{
	return host_wait(event, SE_EQ, value, mask, 1);
}

SD_EXPORT doca_error_t doca_sync_event_wait_neq(struct doca_sync_event *event, uint64_t value, uint64_t mask)
{
	return host_wait(event, SE_NEQ, value, mask, 0);
}

SD_EXPORT doca_error_t doca_sync_event_wait_neq_yield(struct doca_sync_event *event, uint64_t value, uint64_t mask)
{
	return host_wait(event, SE_NEQ, value, mask, 1);
}

/* ---------------------------------------------------------------- tasks */
static doca_error_t task_set_conf(struct doca_sync_event *se, int type, void (*ok)(void), void (*err)(void),
				  uint32_t num)
{
	struct se_pool *p, *old;
	doca_error_t rc = DOCA_SUCCESS;

	if (!se || !ok || !err || num == 0 || num > (1u << 20))
		return DOCA_ERROR_INVALID_VALUE;
	if (!se_live(se))
		return DOCA_ERROR_BAD_STATE;
	p = calloc(1, sizeof(*p));
	if (p) {
		p->count = p->nfree = num;
		p->tasks = calloc(num, sizeof(*p->tasks));
		p->free = calloc(num, sizeof(*p->free));
	}
	if (!p || !p->tasks || !p->free) {
		pool_free(p);
		return DOCA_ERROR_NO_MEMORY;
	}
	for (uint32_t i = 0; i < num; i++) {
		struct se_task *t = &p->tasks[i];

		t->type = type;
		t->se = se;
		p->free[num - 1 - i] = t;
	}
	pthread_mutex_lock(&se->lock);
	old = se->conf[type].pool;
	if (!configurable(se)) {
		rc = DOCA_ERROR_NOT_PERMITTED;  /* as doca_sync_event.h documents */
	} else if (old && old->nfree != old->count) {
		rc = DOCA_ERROR_IN_USE;         /* tasks of the old pool not freed */
	} else {
		se->conf[type].ok = ok;
		se->conf[type].err = err;
		se->conf[type].pool = p;
		p = old;
	}
	pthread_mutex_unlock(&se->lock);
	pool_free(p);
	return rc;
}

static doca_error_t task_alloc(struct doca_sync_event *se, int type, union doca_data ud, struct se_task **out)
{
	struct se_pool *p;
	struct se_task *t = NULL;
	doca_error_t rc = DOCA_SUCCESS;

	if (!se || !out)
		return DOCA_ERROR_INVALID_VALUE;
	if (!se_live(se))
		return DOCA_ERROR_BAD_STATE;
	pthread_mutex_lock(&se->lock);
	p = se->conf[type].pool;
	if (se->ctx.state != DOCA_CTX_STATE_RUNNING)
		rc = DOCA_ERROR_BAD_STATE;
	else if (!p || !p->nfree)
		rc = DOCA_ERROR_NO_MEMORY;
	else
		t = p->free[--p->nfree];
	pthread_mutex_unlock(&se->lock);
	if (rc != DOCA_SUCCESS)
		return rc;
	memset(&t->base, 0, sizeof(t->base));
	t->base.ops = &se_task_ops;
	t->base.ctx = &se->ctx;
	t->base.user_data = ud;
	t->allocated = 1;
	t->ptr = NULL;
	t->val = t->mask = 0;
	t->wnext = NULL;
	*out = t;
	return DOCA_SUCCESS;
}

/* A wait mask: 0, 1, 2, 4 or 8 consecutive 0xff bytes. */
static int mask_ok(uint64_t mask)
{
	int first = -1, n = 0;

	for (int i = 0; i < 8; i++) {
		uint8_t b = (uint8_t)(mask >> (8 * i));

		if (b == 0xff) {
			if (first < 0)
				first = i;
			else if (i != first + n)
				return 0;
			n++;
		} else if (b != 0) {
			return 0;
		}
	}
	return n == 0 || n == 1 || n == 2 || n == 4 || n == 8;
}

static doca_error_t se_task_submit(struct doca_task *task)
{
	struct se_task *t = (struct se_task *)task;
	struct doca_sync_event *se = t->se;
	uint64_t old;

	switch (t->type) {
	case SE_T_GET:
		if (!t->ptr)
			return DOCA_ERROR_INVALID_VALUE;
		*t->ptr = load(se);
		break;
	case SE_T_SET:
		__atomic_store_n(se->value, t->val, __ATOMIC_RELEASE);
		break;
	case SE_T_ADD:
		old = __atomic_fetch_add(se->value, t->val, __ATOMIC_ACQ_REL);
		if (t->ptr)
			*t->ptr = old;
		break;
	case SE_T_WAIT_EQ:
	case SE_T_WAIT_NEQ:
		if (!mask_ok(t->mask))
			return DOCA_ERROR_INVALID_VALUE;
		if (wait_met(t))
			break;
		return pl_add(t) == 0 ? DOCA_SUCCESS : DOCA_ERROR_OPERATING_SYSTEM;
	default:
		return DOCA_ERROR_INVALID_VALUE;
	}
	sd_task_complete(task, DOCA_SUCCESS);
	return DOCA_SUCCESS;
}

static void se_task_invoke(struct doca_task *task, int success)
{
	struct se_task *t = (struct se_task *)task;
	struct se_conf *c = &t->se->conf[t->type];
	void (*cb)(void) = success ? c->ok : c->err;
	union doca_data ud = task->user_data, cud = t->se->ctx.user_data;

	if (!cb)
		return;
	switch (t->type) {
	case SE_T_GET:
		((doca_sync_event_task_get_completion_cb_t)cb)((struct doca_sync_event_task_get *)t, ud, cud);
		break;
	case SE_T_SET:
		((doca_sync_event_task_notify_set_completion_cb_t)cb)((struct doca_sync_event_task_notify_set *)t, ud,
								       cud);
		break;
	case SE_T_ADD:
		((doca_sync_event_task_notify_add_completion_cb_t)cb)((struct doca_sync_event_task_notify_add *)t, ud,
								       cud);
		break;
	case SE_T_WAIT_EQ:
		((doca_sync_event_task_wait_eq_completion_cb_t)cb)((struct doca_sync_event_task_wait_eq *)t, ud, cud);
		break;
	case SE_T_WAIT_NEQ:
		((doca_sync_event_task_wait_neq_completion_cb_t)cb)((struct doca_sync_event_task_wait_neq *)t, ud,
								     cud);
		break;
	default:
		break;
	}
}

static void se_task_release(struct doca_task *task)
{
	struct se_task *t = (struct se_task *)task;
	struct doca_sync_event *se = t->se;
	struct se_pool *p;

	pthread_mutex_lock(&se->lock);
	p = se->conf[t->type].pool;
	if (t->allocated && p && t >= p->tasks && t < p->tasks + p->count) {
		t->allocated = 0;
		p->free[p->nfree++] = t;
	}
	pthread_mutex_unlock(&se->lock);
}

static const struct sd_task_ops se_task_ops = {
	.name = "sync_event",
	.submit = se_task_submit,
	.invoke = se_task_invoke,
	.release = se_task_release,
};

/* The public per-type task API. */
#define TASK_COMMON(name, TYPE)                                                                             \
	SD_EXPORT doca_error_t doca_sync_event_task_##name##_set_conf(                                       \
		struct doca_sync_event *event, doca_sync_event_task_##name##_completion_cb_t completion_cb,  \
		doca_sync_event_task_##name##_completion_cb_t error_cb, uint32_t num_tasks)                  \
	{                                                                                                   \
		return task_set_conf(event, TYPE, (void (*)(void))completion_cb, (void (*)(void))error_cb,  \
				     num_tasks);                                                            \
	}                                                                                                   \
	SD_EXPORT struct doca_task *doca_sync_event_task_##name##_as_doca_task(                              \
		struct doca_sync_event_task_##name *task)                                                    \
	{                                                                                                   \
		return task ? &task->t.base : NULL;                                                         \
	}

#define TASK_U64(name, what, field)                                                                         \
	SD_EXPORT void doca_sync_event_task_##name##_set_##what(struct doca_sync_event_task_##name *task,    \
							       uint64_t v)                                  \
	{                                                                                                   \
		if (task)                                                                                   \
			task->t.field = v;                                                                  \
	}                                                                                                   \
	SD_EXPORT uint64_t doca_sync_event_task_##name##_get_##what(const struct doca_sync_event_task_##name *task) \
	{                                                                                                   \
		return task ? task->t.field : 0;                                                            \
	}

#define TASK_PTR(name, what)                                                                                \
	SD_EXPORT void doca_sync_event_task_##name##_set_##what(struct doca_sync_event_task_##name *task,    \
							       uint64_t *p)                                 \
	{                                                                                                   \
		if (task)                                                                                   \
			task->t.ptr = p;                                                                    \
	}                                                                                                   \
	SD_EXPORT uint64_t *doca_sync_event_task_##name##_get_##what(const struct doca_sync_event_task_##name *task) \
	{                                                                                                   \
		return task ? task->t.ptr : NULL;                                                           \
	}

TASK_COMMON(get, SE_T_GET)
TASK_PTR(get, ret_val_ptr)
TASK_COMMON(notify_set, SE_T_SET)
TASK_U64(notify_set, set_val, val)
TASK_COMMON(notify_add, SE_T_ADD)
TASK_U64(notify_add, inc_val, val)
TASK_PTR(notify_add, fetched_val_ptr)
TASK_COMMON(wait_eq, SE_T_WAIT_EQ)
TASK_U64(wait_eq, wait_val, val)
TASK_U64(wait_eq, mask, mask)
TASK_COMMON(wait_neq, SE_T_WAIT_NEQ)
TASK_U64(wait_neq, wait_val, val)
TASK_U64(wait_neq, mask, mask)

SD_EXPORT doca_error_t doca_sync_event_task_get_alloc_init(struct doca_sync_event *event, uint64_t *ret_val_ptr,
							   union doca_data user_data,
							   struct doca_sync_event_task_get **task)
{
	struct se_task *t;
	doca_error_t rc = task_alloc(event, SE_T_GET, user_data, task ? &t : NULL);

	if (rc == DOCA_SUCCESS) {
		t->ptr = ret_val_ptr;
		*task = (struct doca_sync_event_task_get *)t;
	}
	return rc;
}

SD_EXPORT doca_error_t doca_sync_event_task_notify_set_alloc_init(struct doca_sync_event *event, uint64_t set_val,
								  union doca_data user_data,
								  struct doca_sync_event_task_notify_set **task)
{
	struct se_task *t;
	doca_error_t rc = task_alloc(event, SE_T_SET, user_data, task ? &t : NULL);

	if (rc == DOCA_SUCCESS) {
		t->val = set_val;
		*task = (struct doca_sync_event_task_notify_set *)t;
	}
	return rc;
}

SD_EXPORT doca_error_t doca_sync_event_task_notify_add_alloc_init(struct doca_sync_event *event, uint64_t inc_val,
								  uint64_t *fetched_val_ptr, union doca_data user_data,
								  struct doca_sync_event_task_notify_add **task)
{
	struct se_task *t;
	doca_error_t rc = task_alloc(event, SE_T_ADD, user_data, task ? &t : NULL);

	if (rc == DOCA_SUCCESS) {
		t->val = inc_val;
		t->ptr = fetched_val_ptr;
		*task = (struct doca_sync_event_task_notify_add *)t;
	}
	return rc;
}

SD_EXPORT doca_error_t doca_sync_event_task_wait_eq_alloc_init(struct doca_sync_event *event, uint64_t wait_val,
							       uint64_t mask, union doca_data user_data,
							       struct doca_sync_event_task_wait_eq **task)
{
	struct se_task *t;
	doca_error_t rc = task_alloc(event, SE_T_WAIT_EQ, user_data, task ? &t : NULL);

	if (rc == DOCA_SUCCESS) {
		t->val = wait_val;
		t->mask = mask;
		*task = (struct doca_sync_event_task_wait_eq *)t;
	}
	return rc;
}

SD_EXPORT doca_error_t doca_sync_event_task_wait_neq_alloc_init(struct doca_sync_event *event, uint64_t wait_val,
								uint64_t mask, union doca_data user_data,
								struct doca_sync_event_task_wait_neq **task)
{
	struct se_task *t;
	doca_error_t rc = task_alloc(event, SE_T_WAIT_NEQ, user_data, task ? &t : NULL);

	if (rc == DOCA_SUCCESS) {
		t->val = wait_val;
		t->mask = mask;
		*task = (struct doca_sync_event_task_wait_neq *)t;
	}
	return rc;
}
