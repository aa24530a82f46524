/* test_sync_event: doca_sync_event over softdoca: local value operations and
 * waits, the sync event as a context (tasks, wait tasks that wake the
 * progress engine's notification fd), export to a remote peer and the RDMA
 * remote-net sync-event tasks between two rdma contexts of this process.
 * One line per check, a summary line, non-zero exit on failure. */
#include "check.h"
#include "rdma.h"
#include "sync_event.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *softdoca_transport_name(const struct doca_rdma_connection *conn);
const char *softdoca_task_get_error_detail(const struct doca_task *task);

#define ALL ((uint64_t)-1)
#define UD(p) ((union doca_data){.ptr = (p)})

#define SE_CB(name)                                                                                       \
	static void se_##name##_cb(struct doca_sync_event_task_##name *t, union doca_data ud, union doca_data cud) \
	{                                                                                                 \
		struct done *d = ud.ptr;                                                                  \
		(void)cud;                                                                                \
		d->st = doca_task_get_status(doca_sync_event_task_##name##_as_doca_task(t));             \
		d->done = 1;                                                                              \
	}

SE_CB(get)
SE_CB(notify_set)
SE_CB(notify_add)
SE_CB(wait_eq)
SE_CB(wait_neq)

#define RSE_CB(name)                                                                                      \
	static void rse_##name##_cb(struct doca_rdma_task_remote_net_sync_event_##name *t, union doca_data ud, \
				    union doca_data cud)                                                  \
	{                                                                                                 \
		struct done *d = ud.ptr;                                                                  \
		(void)cud;                                                                                \
		d->st = doca_task_get_status(doca_rdma_task_remote_net_sync_event_##name##_as_task(t));  \
		d->done = 1;                                                                              \
	}

RSE_CB(get)
RSE_CB(notify_set)
RSE_CB(notify_add)

static int wait_done2(struct doca_pe *p1, struct doca_pe *p2, struct done *d, double timeout)
{
	double end = now_s() + timeout;

	while (!d->done && now_s() < end) {
		int did = doca_pe_progress(p1);

		if (p2)
			did |= doca_pe_progress(p2);
		if (!did)
			usleep(50);
	}
	return d->done;
}

/* Block on pe's notification fd (no progress meanwhile) until readable, then
 * progress; returns seconds waited, or -1 on timeout. */
static double block_on_fd(struct doca_pe *pe, struct done *d, double timeout)
{
	doca_notification_handle_t fd = -1;
	double t0 = now_s(), end = t0 + timeout;

	doca_pe_get_notification_handle(pe, &fd);
	while (!d->done && now_s() < end) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};

		doca_pe_request_notification(pe);
		if (poll(&pfd, 1, (int)((end - now_s()) * 1000) + 1) > 0)
			doca_pe_clear_notification(pe, fd);
		while (doca_pe_progress(pe))
			;
	}
	return d->done ? now_s() - t0 : -1;
}

struct setter {
	struct doca_sync_event *se;
	uint64_t value;
	unsigned delay_us;
};

static void *setter_main(void *arg)
{
	struct setter *s = arg;

	usleep(s->delay_us);
	doca_sync_event_update_set(s->se, s->value);
	return NULL;
}

static struct doca_dev *dev;

/* ------------------------------------------------------------------ local, standalone */
static void test_local(void)
{
	struct doca_sync_event *se = NULL, *se2 = NULL;
	struct doca_devinfo *di = doca_dev_as_devinfo(dev);
	uint64_t v = 0, fetched = 0;
	uint64_t *mine = aligned_alloc(64, 64);
	const uint8_t *blob = NULL;
	size_t blen = 0;
	pthread_t th;
	struct setter s;
	double t0;

	RC(doca_sync_event_create(NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_sync_event_create(&se), DOCA_SUCCESS);
	RC(doca_sync_event_add_publisher_location_cpu(se, NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_sync_event_add_publisher_location_cpu(se, dev), DOCA_SUCCESS);
	RC(doca_sync_event_add_subscriber_location_cpu(se, dev), DOCA_SUCCESS);
	RC(doca_sync_event_add_publisher_location_dpa(se, (struct doca_dpa *)(uintptr_t)0x1000),
	   DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_sync_event_add_publisher_location_gpu(se, (struct doca_gpu *)(uintptr_t)0x1000),
	   DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_sync_event_add_subscriber_location_dpa(se, (struct doca_dpa *)(uintptr_t)0x1000),
	   DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_sync_event_add_subscriber_location_gpu(se, (struct doca_gpu *)(uintptr_t)0x1000),
	   DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_sync_event_add_publisher_location_dpa(se, NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_sync_event_add_publisher_location_remote_pci(se), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_sync_event_add_subscriber_location_remote_pci(se), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_sync_event_add_publisher_location_remote_pci(NULL), DOCA_ERROR_INVALID_VALUE);

	/* capabilities */
	RC(doca_sync_event_cap_is_export_to_remote_net_supported(di), DOCA_SUCCESS);
	RC(doca_sync_event_cap_remote_net_is_create_from_export_supported(di), DOCA_SUCCESS);
	RC(doca_sync_event_cap_task_get_is_supported(di), DOCA_SUCCESS);
	RC(doca_sync_event_cap_task_notify_set_is_supported(di), DOCA_SUCCESS);
	RC(doca_sync_event_cap_task_notify_add_is_supported(di), DOCA_SUCCESS);
	RC(doca_sync_event_cap_task_wait_eq_is_supported(di), DOCA_SUCCESS);
	RC(doca_sync_event_cap_task_wait_neq_is_supported(di), DOCA_SUCCESS);
	RC(doca_sync_event_cap_is_create_from_export_supported(di), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_sync_event_cap_is_export_to_remote_pci_supported(di), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_sync_event_cap_is_export_to_dpa_supported(di), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_sync_event_cap_is_export_to_gpu_supported(di), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_sync_event_cap_remote_net_is_export_to_dpa_supported(di), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_sync_event_cap_remote_net_is_export_to_gpu_supported(di), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_sync_event_cap_task_get_is_supported(NULL), DOCA_ERROR_INVALID_VALUE);

	/* value memory: the caller's */
	RC(doca_sync_event_get(se, &v), DOCA_ERROR_BAD_STATE);          /* not started */
	RC(doca_sync_event_set_addr(se, NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_sync_event_set_addr(se, (uint64_t *)(void *)((uint8_t *)mine + 4)), DOCA_ERROR_INVALID_VALUE);
	*mine = 77;
	RC(doca_sync_event_set_addr(se, mine), DOCA_SUCCESS);
	RC(doca_sync_event_stop(se), DOCA_ERROR_BAD_STATE);
	RC(doca_sync_event_start(se), DOCA_SUCCESS);
	RC(doca_sync_event_start(se), DOCA_ERROR_BAD_STATE);
	CHECK(doca_sync_event_as_ctx(se) == NULL, "a started event is no context");
	RC(doca_sync_event_set_addr(se, mine), DOCA_ERROR_BAD_STATE);
	RC(doca_sync_event_add_subscriber_location_cpu(se, dev), DOCA_ERROR_BAD_STATE);
	RC(doca_sync_event_get(se, NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_sync_event_get(se, &v), DOCA_SUCCESS);
	CHECK(v == 77, "get reads the caller's memory (%llu)", (unsigned long long)v);
	RC(doca_sync_event_update_set(se, 5), DOCA_SUCCESS);
	CHECK(*mine == 5, "update_set writes the caller's memory");
	RC(doca_sync_event_update_add(se, 3, NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_sync_event_update_add(se, 3, &fetched), DOCA_SUCCESS);
	RC(doca_sync_event_get(se, &v), DOCA_SUCCESS);
	CHECK(fetched == 5 && v == 8, "update_add: fetched %llu, value %llu", (unsigned long long)fetched,
	      (unsigned long long)v);
	RC(doca_sync_event_wait_gt(se, 7, ALL), DOCA_SUCCESS);
	RC(doca_sync_event_wait_gt_yield(se, 7, ALL), DOCA_SUCCESS);
	RC(doca_sync_event_wait_eq(se, 8, ALL), DOCA_SUCCESS);
	RC(doca_sync_event_wait_eq_yield(se, 8, ALL), DOCA_SUCCESS);
	RC(doca_sync_event_wait_neq(se, 9, ALL), DOCA_SUCCESS);
	RC(doca_sync_event_wait_neq_yield(se, 9, ALL), DOCA_SUCCESS);
	RC(doca_sync_event_update_set(se, 0x1234), DOCA_SUCCESS);
	RC(doca_sync_event_wait_eq(se, 0x34, 0xff), DOCA_SUCCESS);      /* masked */
	RC(doca_sync_event_wait_gt(se, 0x11, 0xff00), DOCA_SUCCESS);    /* 0x1200 > 0x11 */

	/* waits that need another thread */
	RC(doca_sync_event_update_set(se, 0), DOCA_SUCCESS);
	s = (struct setter){se, 100, 20000};
	t0 = now_s();
	pthread_create(&th, NULL, setter_main, &s);
	RC(doca_sync_event_wait_gt(se, 99, ALL), DOCA_SUCCESS);
	CHECK(now_s() - t0 >= 0.015, "wait_gt returned after the other thread's update (%.3f s)", now_s() - t0);
	pthread_join(th, NULL);
	s = (struct setter){se, 200, 20000};
	pthread_create(&th, NULL, setter_main, &s);
	RC(doca_sync_event_wait_eq_yield(se, 200, ALL), DOCA_SUCCESS);
	pthread_join(th, NULL);
	s = (struct setter){se, 201, 20000};
	pthread_create(&th, NULL, setter_main, &s);
	RC(doca_sync_event_wait_neq(se, 200, ALL), DOCA_SUCCESS);
	pthread_join(th, NULL);
	RC(doca_sync_event_get(se, &v), DOCA_SUCCESS);
	CHECK(v == 201, "value 201 after the waits");

	/* exports softdoca cannot make */
	RC(doca_sync_event_export_to_remote_pci(se, dev, &blob, &blen), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_sync_event_export_to_remote_pci(se, dev, NULL, &blen), DOCA_ERROR_INVALID_VALUE);
	{
		doca_dpa_dev_sync_event_t h = 0;
		doca_gpu_dev_sync_event_t *g = NULL;

		RC(doca_sync_event_get_dpa_handle(se, (struct doca_dpa *)(uintptr_t)0x1000, &h), DOCA_ERROR_NOT_SUPPORTED);
		RC(doca_sync_event_get_gpu_handle(se, (struct doca_gpu *)(uintptr_t)0x1000, &g), DOCA_ERROR_NOT_SUPPORTED);
		RC(doca_sync_event_get_dpa_handle(se, NULL, &h), DOCA_ERROR_INVALID_VALUE);
	}
	RC(doca_sync_event_create_from_export(dev, (const uint8_t *)"x", 1, &se2), DOCA_ERROR_NOT_SUPPORTED);
	/* remote net export needs the remote-net publisher */
	RC(doca_sync_event_export_to_remote_net(se, &blob, &blen), DOCA_ERROR_BAD_STATE);
	RC(doca_sync_event_stop(se), DOCA_SUCCESS);
	RC(doca_sync_event_get(se, &v), DOCA_ERROR_BAD_STATE);
	RC(doca_sync_event_destroy(se), DOCA_SUCCESS);
	RC(doca_sync_event_destroy(se), DOCA_ERROR_BAD_STATE);
	RC(doca_sync_event_get(se, &v), DOCA_ERROR_BAD_STATE);
	free(mine);

	/* default memory; a started event is destroyed (stopped implicitly) */
	RC(doca_sync_event_create(&se), DOCA_SUCCESS);
	RC(doca_sync_event_start(se), DOCA_SUCCESS);
	RC(doca_sync_event_get(se, &v), DOCA_SUCCESS);
	CHECK(v == 0, "a new event's own value is 0");
	RC(doca_sync_event_destroy(se), DOCA_SUCCESS);
}

/* set_doca_buf: the value in a buffer of the application's mmap */
static void test_doca_buf(void)
{
	struct doca_sync_event *se = NULL;
	struct doca_mmap *m = NULL, *weak = NULL;
	struct doca_buf_inventory *inv = NULL;
	struct doca_buf *b = NULL, *b4 = NULL, *bw = NULL;
	uint64_t *mem = aligned_alloc(64, 64);
	uint16_t rc16 = 0;
	uint64_t v = 0;
	const uint32_t all = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ |
			     DOCA_ACCESS_FLAG_RDMA_WRITE | DOCA_ACCESS_FLAG_RDMA_ATOMIC;

	memset(mem, 0, 64);
	mem[1] = 4242;
	doca_mmap_create(&m);
	doca_mmap_set_memrange(m, mem, 64);
	doca_mmap_set_permissions(m, all);
	doca_mmap_add_dev(m, dev);
	RC(doca_mmap_start(m), DOCA_SUCCESS);
	doca_mmap_create(&weak);
	doca_mmap_set_memrange(weak, mem, 64);
	doca_mmap_set_permissions(weak, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_WRITE);
	doca_mmap_add_dev(weak, dev);
	RC(doca_mmap_start(weak), DOCA_SUCCESS);
	doca_buf_inventory_create(8, &inv);
	doca_buf_inventory_start(inv);
	RC(doca_buf_inventory_buf_get_by_args(inv, m, mem, 64, mem + 1, 8, &b), DOCA_SUCCESS);
	RC(doca_buf_inventory_buf_get_by_args(inv, m, mem, 64, mem + 1, 4, &b4), DOCA_SUCCESS);
	RC(doca_buf_inventory_buf_get_by_args(inv, weak, mem, 64, mem + 1, 8, &bw), DOCA_SUCCESS);
	RC(doca_sync_event_create(&se), DOCA_SUCCESS);
	RC(doca_sync_event_set_doca_buf(se, NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_sync_event_set_doca_buf(se, b4), DOCA_ERROR_NOT_PERMITTED);   /* data is not 8 bytes */
	RC(doca_sync_event_set_doca_buf(se, bw), DOCA_ERROR_NOT_PERMITTED);   /* no RDMA_READ / ATOMIC */
	RC(doca_sync_event_set_doca_buf(se, b), DOCA_SUCCESS);
	doca_buf_get_refcount(b, &rc16);
	CHECK(rc16 == 2, "the event holds a reference on its buffer (refcount %u)", rc16);
	RC(doca_sync_event_start(se), DOCA_SUCCESS);
	RC(doca_sync_event_get(se, &v), DOCA_SUCCESS);
	CHECK(v == 4242, "the value lives in the buffer's data (%llu)", (unsigned long long)v);
	RC(doca_sync_event_update_add(se, 1, &v), DOCA_SUCCESS);
	CHECK(mem[1] == 4243, "update_add changed the buffer's memory");
	RC(doca_sync_event_destroy(se), DOCA_SUCCESS);
	doca_buf_get_refcount(b, &rc16);
	CHECK(rc16 == 1, "destroy dropped the event's reference");
	doca_buf_dec_refcount(b, NULL);
	doca_buf_dec_refcount(b4, NULL);
	doca_buf_dec_refcount(bw, NULL);
	doca_buf_inventory_stop(inv);
	doca_buf_inventory_destroy(inv);
	RC(doca_mmap_destroy(m), DOCA_SUCCESS);
	RC(doca_mmap_destroy(weak), DOCA_SUCCESS);
	free(mem);
}

/* ------------------------------------------------------------------ as a context */
static struct doca_sync_event *ctx_event(struct doca_pe *pe, int remote_net)
{
	struct doca_sync_event *se = NULL;

	RC(doca_sync_event_create(&se), DOCA_SUCCESS);
	if (remote_net)
		RC(doca_sync_event_add_publisher_location_remote_net(se), DOCA_SUCCESS);
	RC(doca_sync_event_add_subscriber_location_cpu(se, dev), DOCA_SUCCESS);
	RC(doca_sync_event_task_get_set_conf(se, se_get_cb, se_get_cb, 4), DOCA_SUCCESS);
	RC(doca_sync_event_task_notify_set_set_conf(se, se_notify_set_cb, se_notify_set_cb, 4), DOCA_SUCCESS);
	RC(doca_sync_event_task_notify_add_set_conf(se, se_notify_add_cb, se_notify_add_cb, 4), DOCA_SUCCESS);
	RC(doca_sync_event_task_wait_eq_set_conf(se, se_wait_eq_cb, se_wait_eq_cb, 4), DOCA_SUCCESS);
	RC(doca_sync_event_task_wait_neq_set_conf(se, se_wait_neq_cb, se_wait_neq_cb, 4), DOCA_SUCCESS);
	CHECK(doca_sync_event_as_ctx(se) != NULL, "as_ctx");
	RC(doca_pe_connect_ctx(pe, doca_sync_event_as_ctx(se)), DOCA_SUCCESS);
	return se;
}

static void test_ctx(void)
{
	struct doca_pe *pe = NULL;
	struct doca_sync_event *se;
	struct doca_ctx *ctx;
	struct doca_sync_event_task_get *tg = NULL;
	struct doca_sync_event_task_notify_set *ts = NULL;
	struct doca_sync_event_task_notify_add *ta = NULL;
	struct doca_sync_event_task_wait_eq *te = NULL, *te2 = NULL;
	struct doca_sync_event_task_wait_neq *tn = NULL;
	struct done d = {0}, d2 = {0};
	uint64_t got = 0, fetched = 0;
	enum doca_ctx_states st;
	pthread_t th;
	struct setter s;
	double waited;

	RC(doca_pe_create(&pe), DOCA_SUCCESS);
	se = ctx_event(pe, 0);
	ctx = doca_sync_event_as_ctx(se);
	RC(doca_sync_event_task_get_alloc_init(se, &got, UD(&d), &tg), DOCA_ERROR_BAD_STATE); /* not running */
	RC(doca_ctx_start(ctx), DOCA_SUCCESS);
	RC(doca_ctx_get_state(ctx, &st), DOCA_SUCCESS);
	CHECK(st == DOCA_CTX_STATE_RUNNING, "sync event context RUNNING");
	RC(doca_sync_event_start(se), DOCA_ERROR_BAD_STATE);
	RC(doca_sync_event_task_get_set_conf(se, se_get_cb, se_get_cb, 4), DOCA_ERROR_NOT_PERMITTED);
	RC(doca_sync_event_destroy(se), DOCA_ERROR_BAD_STATE);

	/* notify_set, notify_add, get */
	RC(doca_sync_event_task_notify_set_alloc_init(se, 100, UD(&d), &ts), DOCA_SUCCESS);
	CHECK(doca_sync_event_task_notify_set_get_set_val(ts) == 100, "set_val 100");
	doca_sync_event_task_notify_set_set_set_val(ts, 1000);
	CHECK(doca_sync_event_task_notify_set_get_set_val(ts) == 1000, "set_val 1000");
	RC(doca_task_submit(doca_sync_event_task_notify_set_as_doca_task(ts)), DOCA_SUCCESS);
	CHECK(wait_done2(pe, NULL, &d, 5) && d.st == DOCA_SUCCESS, "notify_set completed");
	doca_task_free(doca_sync_event_task_notify_set_as_doca_task(ts));
	d = (struct done){0};
	RC(doca_sync_event_task_notify_add_alloc_init(se, 5, NULL, UD(&d), &ta), DOCA_SUCCESS);
	doca_sync_event_task_notify_add_set_fetched_val_ptr(ta, &fetched);
	CHECK(doca_sync_event_task_notify_add_get_fetched_val_ptr(ta) == &fetched &&
		      doca_sync_event_task_notify_add_get_inc_val(ta) == 5, "notify_add getters");
	RC(doca_task_submit(doca_sync_event_task_notify_add_as_doca_task(ta)), DOCA_SUCCESS);
	CHECK(wait_done2(pe, NULL, &d, 5) && d.st == DOCA_SUCCESS && fetched == 1000,
	      "notify_add completed, fetched %llu", (unsigned long long)fetched);
	doca_task_free(doca_sync_event_task_notify_add_as_doca_task(ta));
	d = (struct done){0};
	RC(doca_sync_event_task_get_alloc_init(se, NULL, UD(&d), &tg), DOCA_SUCCESS);
	RC(doca_task_submit(doca_sync_event_task_get_as_doca_task(tg)), DOCA_ERROR_INVALID_VALUE); /* no pointer */
	doca_sync_event_task_get_set_ret_val_ptr(tg, &got);
	CHECK(doca_sync_event_task_get_get_ret_val_ptr(tg) == &got, "ret_val_ptr set");
	RC(doca_task_submit(doca_sync_event_task_get_as_doca_task(tg)), DOCA_SUCCESS);
	CHECK(wait_done2(pe, NULL, &d, 5) && d.st == DOCA_SUCCESS && got == 1005, "get task: %llu",
	      (unsigned long long)got);
	doca_task_free(doca_sync_event_task_get_as_doca_task(tg));

	/* wait_eq already met: completes at once */
	d = (struct done){0};
	RC(doca_sync_event_task_wait_eq_alloc_init(se, 1005, ALL, UD(&d), &te), DOCA_SUCCESS);
	RC(doca_task_submit(doca_sync_event_task_wait_eq_as_doca_task(te)), DOCA_SUCCESS);
	CHECK(wait_done2(pe, NULL, &d, 5) && d.st == DOCA_SUCCESS, "wait_eq met at submit");
	/* bad masks */
	doca_sync_event_task_wait_eq_set_mask(te, 0x00ff00ff);
	RC(doca_task_submit(doca_sync_event_task_wait_eq_as_doca_task(te)), DOCA_ERROR_INVALID_VALUE);
	doca_sync_event_task_wait_eq_set_mask(te, 0xffffff);
	RC(doca_task_submit(doca_sync_event_task_wait_eq_as_doca_task(te)), DOCA_ERROR_INVALID_VALUE);
	doca_sync_event_task_wait_eq_set_mask(te, 0xffff0000ull);
	CHECK(doca_sync_event_task_wait_eq_get_mask(te) == 0xffff0000ull, "mask getter");

	/* wait_eq pending; another thread sets the value; the app sleeps on the fd */
	d = (struct done){0};
	doca_sync_event_task_wait_eq_set_mask(te, ALL);
	doca_sync_event_task_wait_eq_set_wait_val(te, 7777);
	CHECK(doca_sync_event_task_wait_eq_get_wait_val(te) == 7777, "wait_val getter");
	RC(doca_task_submit(doca_sync_event_task_wait_eq_as_doca_task(te)), DOCA_SUCCESS);
	doca_pe_progress(pe);
	CHECK(!d.done, "wait_eq(7777) pending");
	s = (struct setter){se, 7777, 50000};
	pthread_create(&th, NULL, setter_main, &s);
	waited = block_on_fd(pe, &d, 5);
	pthread_join(th, NULL);
	CHECK(d.done && d.st == DOCA_SUCCESS && waited >= 0.04,
	      "wait_eq completed through the notification fd after %.3f s", waited);

	/* wait_neq with a 1-byte mask */
	RC(doca_sync_event_task_wait_neq_alloc_init(se, 7777 & 0xff, 0xff, UD(&d2), &tn), DOCA_SUCCESS);
	CHECK(doca_sync_event_task_wait_neq_get_mask(tn) == 0xff && doca_sync_event_task_wait_neq_get_wait_val(tn) ==
		      (7777 & 0xff), "wait_neq getters");
	doca_sync_event_task_wait_neq_set_wait_val(tn, 7777 & 0xff);
	doca_sync_event_task_wait_neq_set_mask(tn, 0xff);
	RC(doca_task_submit(doca_sync_event_task_wait_neq_as_doca_task(tn)), DOCA_SUCCESS);
	doca_pe_progress(pe);
	CHECK(!d2.done, "wait_neq pending");
	RC(doca_sync_event_update_set(se, 7777 + 256), DOCA_SUCCESS);  /* low byte unchanged */
	usleep(5000);
	doca_pe_progress(pe);
	CHECK(!d2.done, "wait_neq ignores the bits outside its mask");
	RC(doca_sync_event_update_set(se, 7778), DOCA_SUCCESS);
	CHECK(wait_done2(pe, NULL, &d2, 5) && d2.st == DOCA_SUCCESS, "wait_neq completed");

	/* a pending wait is flushed by stop */
	d = (struct done){0};
	RC(doca_sync_event_task_wait_eq_alloc_init(se, 1, ALL, UD(&d), &te2), DOCA_SUCCESS);
	RC(doca_task_submit(doca_sync_event_task_wait_eq_as_doca_task(te2)), DOCA_SUCCESS);
	RC(doca_ctx_stop(ctx), DOCA_ERROR_IN_PROGRESS);
	CHECK(wait_done2(pe, NULL, &d, 5) && d.st == DOCA_ERROR_CONNECTION_ABORTED, "stop flushed the pending wait");
	doca_pe_progress(pe);
	RC(doca_ctx_get_state(ctx, &st), DOCA_SUCCESS);
	CHECK(st == DOCA_CTX_STATE_IDLE, "sync event context IDLE after stop");
	doca_task_free(doca_sync_event_task_wait_eq_as_doca_task(te));
	doca_task_free(doca_sync_event_task_wait_eq_as_doca_task(te2));
	doca_task_free(doca_sync_event_task_wait_neq_as_doca_task(tn));
	RC(doca_sync_event_destroy(se), DOCA_SUCCESS);
	RC(doca_pe_destroy(pe), DOCA_SUCCESS);
}

/* ------------------------------------------------------------------ remote net over RDMA */
static int established; /* connection-established callbacks (both sides) */

static void on_est(struct doca_rdma_connection *c, union doca_data ud, union doca_data cud)
{
	(void)c, (void)ud, (void)cud;
	established++;
}

static struct doca_rdma *make_rdma(struct doca_pe *pe, uint32_t perms, int se_tasks)
{
	struct doca_rdma *r = NULL;

	RC(doca_rdma_create(dev, &r), DOCA_SUCCESS);
	RC(doca_rdma_set_connection_state_callbacks(r, NULL, on_est, NULL, NULL), DOCA_SUCCESS);
	RC(doca_rdma_set_permissions(r, perms), DOCA_SUCCESS);
	RC(doca_rdma_set_max_num_connections(r, 4), DOCA_SUCCESS);
	if (se_tasks) {
		RC(doca_rdma_task_remote_net_sync_event_get_set_conf(r, rse_get_cb, rse_get_cb, 0),
		   DOCA_ERROR_INVALID_VALUE);
		RC(doca_rdma_task_remote_net_sync_event_get_set_conf(r, rse_get_cb, rse_get_cb, 4), DOCA_SUCCESS);
		RC(doca_rdma_task_remote_net_sync_event_notify_set_set_conf(r, rse_notify_set_cb, rse_notify_set_cb, 4),
		   DOCA_SUCCESS);
		RC(doca_rdma_task_remote_net_sync_event_notify_add_set_conf(r, rse_notify_add_cb, rse_notify_add_cb, 4),
		   DOCA_SUCCESS);
	}
	RC(doca_pe_connect_ctx(pe, doca_rdma_as_ctx(r)), DOCA_SUCCESS);
	RC(doca_ctx_start(doca_rdma_as_ctx(r)), DOCA_SUCCESS);
	return r;
}

static void connect_pair(struct doca_pe *pa, struct doca_pe *pb, struct doca_rdma *a, struct doca_rdma *b,
			 struct doca_rdma_connection **ca, struct doca_rdma_connection **cb)
{
	const void *da = NULL, *db = NULL;
	size_t la = 0, lb = 0;
	double end = now_s() + 5;
	int want = established + 2;

	RC(doca_rdma_export(a, &da, &la, ca), DOCA_SUCCESS);
	RC(doca_rdma_export(b, &db, &lb, cb), DOCA_SUCCESS);
	RC(doca_rdma_connect(a, db, lb, *ca), DOCA_SUCCESS);
	RC(doca_rdma_connect(b, da, la, *cb), DOCA_SUCCESS);
	while (now_s() < end && established < want) {
		doca_pe_progress(pa);
		doca_pe_progress(pb);
		usleep(100);
	}
	CHECK(established == want, "rdma contexts connected (both established callbacks)");
}

/* Undoes make_rdma and connect_pair: stops both rdma contexts, progressing
 * both engines until they are idle (at most 5 s), then destroys the contexts
 * and their progress engines. */
static void disconnect_pair(struct doca_pe *pa, struct doca_pe *pb, struct doca_rdma *A, struct doca_rdma *B)
{
	enum doca_ctx_states sa = DOCA_CTX_STATE_RUNNING, sb = DOCA_CTX_STATE_RUNNING;
	double end;

	doca_ctx_stop(doca_rdma_as_ctx(A));
	doca_ctx_stop(doca_rdma_as_ctx(B));
	end = now_s() + 5;
	while (now_s() < end && (sa != DOCA_CTX_STATE_IDLE || sb != DOCA_CTX_STATE_IDLE)) {
		doca_pe_progress(pa);
		doca_pe_progress(pb);
		doca_ctx_get_state(doca_rdma_as_ctx(A), &sa);
		doca_ctx_get_state(doca_rdma_as_ctx(B), &sb);
	}
	RC(doca_rdma_destroy(A), DOCA_SUCCESS);
	RC(doca_rdma_destroy(B), DOCA_SUCCESS);
	RC(doca_pe_destroy(pa), DOCA_SUCCESS);
	RC(doca_pe_destroy(pb), DOCA_SUCCESS);
}

static void test_remote(void)
{
	const uint32_t rw = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ | DOCA_ACCESS_FLAG_RDMA_WRITE;
	struct doca_pe *pa = NULL, *pb = NULL;
	struct doca_rdma *A, *B;
	struct doca_rdma_connection *ca = NULL, *cb = NULL;
	struct doca_sync_event *se;
	struct doca_sync_event_remote_net *rse = NULL, *bad = NULL;
	const uint8_t *blob = NULL;
	size_t blen = 0;
	uint8_t copy[SD_SE_BLOB_LEN];
	uint64_t *lmem = aligned_alloc(4096, 4096), v = 0;
	struct doca_mmap *lm = NULL;
	struct doca_buf_inventory *inv = NULL;
	struct doca_buf *src = NULL, *dst = NULL, *res = NULL, *dst2 = NULL;
	struct doca_rdma_task_remote_net_sync_event_get *tg = NULL;
	struct doca_rdma_task_remote_net_sync_event_notify_set *ts = NULL;
	struct doca_rdma_task_remote_net_sync_event_notify_add *ta = NULL;
	struct doca_sync_event_task_wait_eq *we = NULL;
	struct done d = {0}, dw = {0};
	double waited;
	size_t n = 0;

	RC(doca_pe_create(&pa), DOCA_SUCCESS);
	RC(doca_pe_create(&pb), DOCA_SUCCESS);
	/* A: exports its sync event; grants read, write and atomics on its rdma context */
	A = make_rdma(pa, rw | DOCA_ACCESS_FLAG_RDMA_ATOMIC, 0);
	B = make_rdma(pb, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE, 1);
	RC(doca_rdma_cap_task_remote_net_sync_event_get_is_supported(doca_dev_as_devinfo(dev)), DOCA_SUCCESS);
	RC(doca_rdma_cap_task_remote_net_sync_event_notify_set_is_supported(doca_dev_as_devinfo(dev)), DOCA_SUCCESS);
	RC(doca_rdma_cap_task_remote_net_sync_event_notify_add_is_supported(doca_dev_as_devinfo(dev)), DOCA_SUCCESS);
	RC(doca_rdma_cap_task_remote_net_sync_event_get_is_supported(NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_rdma_task_remote_net_sync_event_get_set_conf(B, rse_get_cb, rse_get_cb, 4), DOCA_ERROR_BAD_STATE);
	connect_pair(pa, pb, A, B, &ca, &cb);

	se = ctx_event(pa, 1);
	RC(doca_sync_event_export_to_remote_net(se, &blob, &blen), DOCA_ERROR_BAD_STATE); /* not running */
	RC(doca_ctx_start(doca_sync_event_as_ctx(se)), DOCA_SUCCESS);
	RC(doca_sync_event_export_to_remote_net(se, NULL, &blen), DOCA_ERROR_INVALID_VALUE);
	RC(doca_sync_event_export_to_remote_net(se, &blob, &blen), DOCA_SUCCESS);
	CHECK(blen == SD_SE_BLOB_LEN && sd_get_le32(blob) == SD_SE_BLOB_MAGIC, "export blob: %zu bytes, magic SDSE",
	      blen);
	memcpy(copy, blob, blen);

	/* B imports it (strict parse) */
	RC(doca_sync_event_remote_net_create_from_export(dev, copy, blen - 1, &bad), DOCA_ERROR_INVALID_VALUE);
	copy[20] ^= 1;
	RC(doca_sync_event_remote_net_create_from_export(dev, copy, blen, &bad), DOCA_ERROR_INVALID_VALUE);
	copy[20] ^= 1;
	RC(doca_sync_event_remote_net_create_from_export(NULL, copy, blen, &bad), DOCA_ERROR_INVALID_VALUE);
	RC(doca_sync_event_remote_net_create_from_export(dev, copy, blen, &rse), DOCA_SUCCESS);
	{
		doca_dpa_dev_sync_event_remote_net_t h = 0;
		doca_gpu_dev_sync_event_remote_net_t g = 0;

		RC(doca_sync_event_remote_net_get_dpa_handle(rse, (struct doca_dpa *)(uintptr_t)0x1000, &h),
		   DOCA_ERROR_NOT_SUPPORTED);
		RC(doca_sync_event_remote_net_get_gpu_handle(rse, (struct doca_gpu *)(uintptr_t)0x1000, &g),
		   DOCA_ERROR_NOT_SUPPORTED);
	}

	/* B's local buffers */
	memset(lmem, 0, 4096);
	doca_mmap_create(&lm);
	doca_mmap_set_memrange(lm, lmem, 4096);
	doca_mmap_set_permissions(lm, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE);
	doca_mmap_add_dev(lm, dev);
	RC(doca_mmap_start(lm), DOCA_SUCCESS);
	doca_buf_inventory_create(8, &inv);
	doca_buf_inventory_start(inv);
	lmem[0] = 0x1111;
	RC(doca_buf_inventory_buf_get_by_args(inv, lm, lmem, 8, lmem, 8, &src), DOCA_SUCCESS);
	RC(doca_buf_inventory_buf_get_by_args(inv, lm, lmem + 8, 64, lmem + 8, 0, &dst), DOCA_SUCCESS);
	RC(doca_buf_inventory_buf_get_by_args(inv, lm, lmem + 16, 64, lmem + 16, 0, &res), DOCA_SUCCESS);
	RC(doca_buf_inventory_buf_get_by_args(inv, lm, lmem + 32, 4, lmem + 32, 0, &dst2), DOCA_SUCCESS);

	/* A waits (wait_eq task, app asleep on its fd) while B notify_sets over RDMA */
	RC(doca_sync_event_task_wait_eq_alloc_init(se, 0x1111, ALL, UD(&dw), &we), DOCA_SUCCESS);
	RC(doca_task_submit(doca_sync_event_task_wait_eq_as_doca_task(we)), DOCA_SUCCESS);
	RC(doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(B, cb, NULL, src, UD(&d), &ts),
	   DOCA_ERROR_INVALID_VALUE);
	RC(doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(B, cb, rse, src, UD(&d), &ts), DOCA_SUCCESS);
	CHECK(doca_rdma_task_remote_net_sync_event_notify_set_get_sync_event(ts) == rse &&
		      doca_rdma_task_remote_net_sync_event_notify_set_get_src_buf(ts) == src &&
		      doca_rdma_task_remote_net_sync_event_notify_set_get_rdma_connection(ts) == cb,
	      "notify_set getters");
	RC(doca_sync_event_remote_net_destroy(rse), DOCA_ERROR_IN_USE);  /* a task names it */
	RC(doca_task_submit(doca_rdma_task_remote_net_sync_event_notify_set_as_task(ts)), DOCA_SUCCESS);
	CHECK(wait_done2(pb, NULL, &d, 5) && d.st == DOCA_SUCCESS, "notify_set over RDMA completed (%s)",
	      softdoca_transport_name(cb));
	waited = block_on_fd(pa, &dw, 5);
	CHECK(dw.done && dw.st == DOCA_SUCCESS, "A's wait_eq(0x1111) task woke A's fd (%.3f s)", waited);
	RC(doca_sync_event_get(se, &v), DOCA_SUCCESS);
	CHECK(v == 0x1111, "A's value is 0x%llx", (unsigned long long)v);

	/* notify_add: the value before the add lands in the result buffer */
	d = (struct done){0};
	RC(doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(B, cb, rse, res, 5, UD(&d), &ta),
	   DOCA_SUCCESS);
	doca_rdma_task_remote_net_sync_event_notify_add_set_add_data(ta, 6);
	CHECK(doca_rdma_task_remote_net_sync_event_notify_add_get_add_data(ta) == 6 &&
		      doca_rdma_task_remote_net_sync_event_notify_add_get_result_buf(ta) == res &&
		      doca_rdma_task_remote_net_sync_event_notify_add_get_sync_event(ta) == rse,
	      "notify_add getters");
	RC(doca_task_submit(doca_rdma_task_remote_net_sync_event_notify_add_as_task(ta)), DOCA_SUCCESS);
	CHECK(wait_done2(pb, pa, &d, 5) && d.st == DOCA_SUCCESS, "notify_add over RDMA completed");
	doca_buf_get_data_len(res, &n);
	CHECK(n == 8 && lmem[16] == 0x1111, "notify_add result: %zu bytes, old value 0x%llx", n,
	      (unsigned long long)lmem[16]);
	RC(doca_sync_event_get(se, &v), DOCA_SUCCESS);
	CHECK(v == 0x1117, "A's value after the add: 0x%llx", (unsigned long long)v);

	/* A updates locally; B reads it with get */
	RC(doca_sync_event_update_set(se, 0xabcdef), DOCA_SUCCESS);
	d = (struct done){0};
	RC(doca_rdma_task_remote_net_sync_event_get_allocate_init(B, cb, rse, dst2, UD(&d), &tg), DOCA_SUCCESS);
	RC(doca_task_submit(doca_rdma_task_remote_net_sync_event_get_as_task(tg)), DOCA_ERROR_INVALID_VALUE);
	doca_rdma_task_remote_net_sync_event_get_set_dst_buf(tg, dst);
	CHECK(doca_rdma_task_remote_net_sync_event_get_get_dst_buf(tg) == dst &&
		      doca_rdma_task_remote_net_sync_event_get_get_sync_event(tg) == rse &&
		      doca_rdma_task_remote_net_sync_event_get_get_rdma_connection(tg) == cb,
	      "get getters (a 4-byte destination was refused at submit)");
	RC(doca_task_submit(doca_rdma_task_remote_net_sync_event_get_as_task(tg)), DOCA_SUCCESS);
	CHECK(wait_done2(pb, pa, &d, 5) && d.st == DOCA_SUCCESS, "get over RDMA completed");
	doca_buf_get_data_len(dst, &n);
	CHECK(n == 8 && lmem[8] == 0xabcdef && doca_rdma_task_remote_net_sync_event_get_get_result_len(tg) == 8,
	      "get read 0x%llx (%zu bytes, result_len %u)", (unsigned long long)lmem[8], n,
	      doca_rdma_task_remote_net_sync_event_get_get_result_len(tg));
	/* resubmit the same task after a reset, as the DOCA sample does */
	doca_buf_reset_data_len(dst);
	RC(doca_sync_event_update_add(se, 1, &v), DOCA_SUCCESS);
	d = (struct done){0};
	RC(doca_task_submit(doca_rdma_task_remote_net_sync_event_get_as_task(tg)), DOCA_SUCCESS);
	CHECK(wait_done2(pb, pa, &d, 5) && d.st == DOCA_SUCCESS && lmem[8] == 0xabcdf0, "get again: 0x%llx",
	      (unsigned long long)lmem[8]);

	/* set_sync_event / set_rdma_connection keep their references right */
	doca_rdma_task_remote_net_sync_event_get_set_sync_event(tg, rse);
	doca_rdma_task_remote_net_sync_event_get_set_rdma_connection(tg, cb);
	doca_task_free(doca_rdma_task_remote_net_sync_event_get_as_task(tg));
	doca_task_free(doca_rdma_task_remote_net_sync_event_notify_set_as_task(ts));
	RC(doca_sync_event_remote_net_destroy(rse), DOCA_ERROR_IN_USE);
	doca_task_free(doca_rdma_task_remote_net_sync_event_notify_add_as_task(ta));

	/* the event stops: B's next get is refused like a stopped mmap */
	doca_task_free(doca_sync_event_task_wait_eq_as_doca_task(we));
	RC(doca_ctx_stop(doca_sync_event_as_ctx(se)), DOCA_SUCCESS);
	d = (struct done){0};
	doca_buf_reset_data_len(dst);
	RC(doca_rdma_task_remote_net_sync_event_get_allocate_init(B, cb, rse, dst, UD(&d), &tg), DOCA_SUCCESS);
	RC(doca_task_submit(doca_rdma_task_remote_net_sync_event_get_as_task(tg)), DOCA_SUCCESS);
	CHECK(wait_done2(pb, pa, &d, 5) && d.st == DOCA_ERROR_NOT_PERMITTED,
	      "get after the event stopped: %s (%s)", doca_error_get_name(d.st),
	      softdoca_task_get_error_detail(doca_rdma_task_remote_net_sync_event_get_as_task(tg)));
	doca_task_free(doca_rdma_task_remote_net_sync_event_get_as_task(tg));
	RC(doca_sync_event_remote_net_destroy(rse), DOCA_SUCCESS);
	RC(doca_sync_event_remote_net_destroy(rse), DOCA_ERROR_BAD_STATE);
	RC(doca_sync_event_destroy(se), DOCA_SUCCESS);

	/* cleanup */
	doca_buf_dec_refcount(src, NULL);
	doca_buf_dec_refcount(dst, NULL);
	doca_buf_dec_refcount(res, NULL);
	doca_buf_dec_refcount(dst2, NULL);
	doca_buf_inventory_stop(inv);
	doca_buf_inventory_destroy(inv);
	RC(doca_mmap_destroy(lm), DOCA_SUCCESS);
	disconnect_pair(pa, pb, A, B);
	free(lmem);
}

/* the exporting side's rdma context lacks RDMA_ATOMIC: notify_add is refused */
static void test_remote_no_atomic(void)
{
	const uint32_t rw = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ | DOCA_ACCESS_FLAG_RDMA_WRITE;
	struct doca_pe *pa = NULL, *pb = NULL;
	struct doca_rdma *A, *B;
	struct doca_rdma_connection *ca = NULL, *cb = NULL;
	struct doca_sync_event *se = NULL;
	struct doca_sync_event_remote_net *rse = NULL;
	const uint8_t *blob = NULL;
	size_t blen = 0;
	uint64_t *lmem = aligned_alloc(64, 64), v = 0;
	struct doca_mmap *lm = NULL;
	struct doca_buf_inventory *inv = NULL;
	struct doca_buf *res = NULL;
	struct doca_rdma_task_remote_net_sync_event_notify_add *ta = NULL;
	struct done d = {0};

	RC(doca_pe_create(&pa), DOCA_SUCCESS);
	RC(doca_pe_create(&pb), DOCA_SUCCESS);
	A = make_rdma(pa, rw, 0);
	B = make_rdma(pb, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE, 1);
	connect_pair(pa, pb, A, B, &ca, &cb);
	/* standalone event, as the DOCA sample sets one up */
	RC(doca_sync_event_create(&se), DOCA_SUCCESS);
	RC(doca_sync_event_add_publisher_location_remote_net(se), DOCA_SUCCESS);
	RC(doca_sync_event_add_subscriber_location_cpu(se, dev), DOCA_SUCCESS);
	RC(doca_sync_event_start(se), DOCA_SUCCESS);
	RC(doca_sync_event_export_to_remote_net(se, &blob, &blen), DOCA_SUCCESS);
	RC(doca_sync_event_remote_net_create_from_export(dev, blob, blen, &rse), DOCA_SUCCESS);
	memset(lmem, 0, 64);
	doca_mmap_create(&lm);
	doca_mmap_set_memrange(lm, lmem, 64);
	doca_mmap_add_dev(lm, dev);
	RC(doca_mmap_start(lm), DOCA_SUCCESS);
	doca_buf_inventory_create(2, &inv);
	doca_buf_inventory_start(inv);
	RC(doca_buf_inventory_buf_get_by_args(inv, lm, lmem, 64, lmem, 0, &res), DOCA_SUCCESS);
	RC(doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(B, cb, rse, res, 1, UD(&d), &ta),
	   DOCA_SUCCESS);
	RC(doca_task_submit(doca_rdma_task_remote_net_sync_event_notify_add_as_task(ta)), DOCA_SUCCESS);
	CHECK(wait_done2(pb, pa, &d, 5) && d.st == DOCA_ERROR_NOT_PERMITTED, "notify_add refused: %s (%s)",
	      doca_error_get_name(d.st),
	      softdoca_task_get_error_detail(doca_rdma_task_remote_net_sync_event_notify_add_as_task(ta)));
	RC(doca_sync_event_get(se, &v), DOCA_SUCCESS);
	CHECK(v == 0, "the value is unchanged");
	doca_task_free(doca_rdma_task_remote_net_sync_event_notify_add_as_task(ta));
	RC(doca_sync_event_remote_net_destroy(rse), DOCA_SUCCESS);
	RC(doca_sync_event_stop(se), DOCA_SUCCESS);
	RC(doca_sync_event_destroy(se), DOCA_SUCCESS);
	doca_buf_dec_refcount(res, NULL);
	doca_buf_inventory_stop(inv);
	doca_buf_inventory_destroy(inv);
	RC(doca_mmap_destroy(lm), DOCA_SUCCESS);
	disconnect_pair(pa, pb, A, B);
	free(lmem);
}

int main(void)
{
	setenv("SOFTDOCA_TIMEOUT_MS", "1500", 1);
	setvbuf(stdout, NULL, _IOLBF, 0);
	dev = open_soft_lo();
	CHECK(dev != NULL, "opened soft_lo");
	if (!dev)
		return 1;
	test_local();
	test_doca_buf();
	test_ctx();
	test_remote();
	test_remote_no_atomic();
	RC(doca_dev_close(dev), DOCA_SUCCESS);
	return check_summary("test_sync_event");
}
