/*
 * RDMA remote-net sync event, written the way the DOCA RDMA sync-event samples
 * are: the work is done from the context's callbacks, and the context is
 * stopped from them; teardown stops it again and accepts only DOCA_SUCCESS or
 * DOCA_ERROR_IN_PROGRESS.
 *
 * responder: a sync event with a remote-net publisher and a CPU subscriber,
 *   started, exported to <dir>/responder.event. From the RUNNING state
 *   callback (descriptor files) or the connection-established callback
 *   (RDMA CM): waits for the requester's value 1, sets 2, waits for 3, then
 *   stops its rdma context right there.
 * requester: imports the event; from the same callbacks it submits
 *   notify_set(1); each completion callback submits the next task: get until
 *   the value is 2, then notify_add(1) (which sees 2); the notify_add
 *   completion callback stops the context: DOCA_ERROR_IN_PROGRESS there, the
 *   context is IDLE after the callback.
 */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <doca_sync_event.h>

#include "rdma_common.h"

DOCA_LOG_REGISTER(RDMA_TEST::SYNC_EVENT);

#define SE_TIMEOUT_MS 15000

struct se_app {
	struct doca_sync_event *event;                  /* responder */
	struct doca_sync_event_remote_net *remote;      /* requester */
	struct doca_buf *set_buf, *get_buf, *add_buf;   /* requester */
	struct doca_rdma_task_remote_net_sync_event_get *get;
	doca_error_t result;                            /* DOCA_SUCCESS once the exchange is complete */
	uint64_t fetched;                               /* what notify_add saw */
	int gets;
	uint64_t deadline;                              /* for the gets */
	doca_error_t stop_in_cb;                        /* doca_ctx_stop inside the last completion callback */
};

static uint64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void stop_ctx(struct rt *rt, const char *where)
{
	doca_error_t rc = doca_ctx_stop(rt->ctx);

	if (rc != DOCA_SUCCESS && rc != DOCA_ERROR_IN_PROGRESS) {
		DOCA_LOG_ERR("doca_ctx_stop %s: %s", where, doca_error_get_descr(rc));
		((struct se_app *)rt->app)->result = rc;
	}
}

/* ---------------------------------------------------------------- responder */
/* Poll the event until it holds want (what doca_sync_event_wait_eq does, with a deadline). */
static doca_error_t wait_value(struct doca_sync_event *se, uint64_t want)
{
	uint64_t deadline = ms_now() + SE_TIMEOUT_MS, v = 0;
	doca_error_t rc;

	for (;;) {
		rc = doca_sync_event_get(se, &v);
		if (rc != DOCA_SUCCESS || v == want)
			return rc;
		if (ms_now() > deadline) {
			DOCA_LOG_ERR("timed out waiting for the sync event to reach %" PRIu64 " (it holds %" PRIu64 ")",
				     want, v);
			return DOCA_ERROR_TIME_OUT;
		}
		usleep(50);
	}
}

static void responder_serve(struct rt *rt)
{
	struct se_app *app = rt->app;
	doca_error_t rc = wait_value(app->event, 1);

	if (rc == DOCA_SUCCESS)
		rc = doca_sync_event_update_set(app->event, 2);
	if (rc == DOCA_SUCCESS)
		rc = wait_value(app->event, 3);
	if (rc == DOCA_SUCCESS)
		DOCA_LOG_INFO("responder: sync event reached 3");
	app->result = rc;
	stop_ctx(rt, "from the responder's callback");
}

static doca_error_t responder_event(struct rt *rt, struct se_app *app)
{
	const uint8_t *blob;
	size_t len;
	doca_error_t rc;
	char path[600], tmp[620];
	FILE *f;

	rc = doca_sync_event_create(&app->event);
	if (rc == DOCA_SUCCESS)
		rc = doca_sync_event_add_publisher_location_remote_net(app->event);
	if (rc == DOCA_SUCCESS)
		rc = doca_sync_event_add_subscriber_location_cpu(app->event, rt->dev);
	if (rc == DOCA_SUCCESS)
		rc = doca_sync_event_start(app->event);
	if (rc == DOCA_SUCCESS)
		rc = doca_sync_event_export_to_remote_net(app->event, &blob, &len);
	if (rc != DOCA_SUCCESS) {
		DOCA_LOG_ERR("sync event: %s", doca_error_get_descr(rc));
		return rc;
	}
	snprintf(path, sizeof(path), "%s/responder.event", rt->cfg->dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "wb");
	if (!f || fwrite(blob, 1, len, f) != len) {
		if (f)
			fclose(f);
		return DOCA_ERROR_IO_FAILED;
	}
	fclose(f);
	return rename(tmp, path) == 0 ? DOCA_SUCCESS : DOCA_ERROR_IO_FAILED;
}

static void responder_running(struct rt *rt)
{
	struct se_app *app = rt->app;
	doca_error_t rc = responder_event(rt, app);

	if (rc == DOCA_SUCCESS && rt->cfg->use_cm) {
		/* the rest happens in the connection-established callback */
		rc = doca_rdma_start_listen_to_port(rt->rdma, (uint16_t)rt->cfg->port);
		if (rc == DOCA_SUCCESS)
			rc = rt_signal(rt, "listening");
		if (rc == DOCA_SUCCESS)
			return;
	}
	if (rc == DOCA_SUCCESS)
		rc = rt_connect(rt);
	if (rc != DOCA_SUCCESS) {
		app->result = rc;
		stop_ctx(rt, "after a failed set-up");
		return;
	}
	responder_serve(rt);
}

static void responder_established(struct rt *rt)
{
	DOCA_LOG_INFO("connected by RDMA CM");
	responder_serve(rt);
}

/* ---------------------------------------------------------------- requester */
static void requester_fail(struct rt *rt, doca_error_t rc, const char *what)
{
	DOCA_LOG_ERR("%s: %s", what, doca_error_get_descr(rc));
	((struct se_app *)rt->app)->result = rc;
	stop_ctx(rt, "after a failure");
}

static void submit_get(struct rt *rt)
{
	struct se_app *app = rt->app;
	doca_error_t rc;

	doca_buf_reset_data_len(app->get_buf);
	rc = doca_task_submit(doca_rdma_task_remote_net_sync_event_get_as_task(app->get));
	if (rc != DOCA_SUCCESS)
		requester_fail(rt, rc, "submit get");
}

static void set_done(struct doca_rdma_task_remote_net_sync_event_notify_set *task, union doca_data task_ud,
		     union doca_data ctx_ud)
{
	struct rt *rt = ctx_ud.ptr;
	struct se_app *app = rt->app;
	union doca_data ud = {.u64 = 0};
	doca_error_t rc;

	(void)task_ud;
	doca_task_free(doca_rdma_task_remote_net_sync_event_notify_set_as_task(task));
	rc = doca_rdma_task_remote_net_sync_event_get_allocate_init(rt->rdma, rt->conn, app->remote, app->get_buf, ud,
								     &app->get);
	if (rc != DOCA_SUCCESS) {
		requester_fail(rt, rc, "get allocate");
		return;
	}
	submit_get(rt);
}

static void get_done(struct doca_rdma_task_remote_net_sync_event_get *task, union doca_data task_ud,
		     union doca_data ctx_ud)
{
	struct rt *rt = ctx_ud.ptr;
	struct se_app *app = rt->app;
	struct doca_rdma_task_remote_net_sync_event_notify_add *add;
	union doca_data ud = {.u64 = 0};
	uint64_t value;
	void *data;
	doca_error_t rc;

	(void)task_ud;
	doca_buf_get_data(app->get_buf, &data);
	memcpy(&value, data, sizeof(value));
	app->gets++;
	if (value != 2) {
		if (ms_now() > app->deadline) {
			requester_fail(rt, DOCA_ERROR_TIME_OUT, "the responder never set 2");
			return;
		}
		submit_get(rt);
		return;
	}
	doca_task_free(doca_rdma_task_remote_net_sync_event_get_as_task(task));
	app->get = NULL;
	DOCA_LOG_INFO("requester: read 2 after %d gets", app->gets);
	rc = doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(rt->rdma, rt->conn, app->remote, app->add_buf, 1,
									    ud, &add);
	if (rc == DOCA_SUCCESS)
		rc = doca_task_submit(doca_rdma_task_remote_net_sync_event_notify_add_as_task(add));
	if (rc != DOCA_SUCCESS)
		requester_fail(rt, rc, "notify_add");
}

static void add_done(struct doca_rdma_task_remote_net_sync_event_notify_add *task, union doca_data task_ud,
		     union doca_data ctx_ud)
{
	struct rt *rt = ctx_ud.ptr;
	struct se_app *app = rt->app;
	void *data;

	(void)task_ud;
	doca_buf_get_data(app->add_buf, &data);
	memcpy(&app->fetched, data, sizeof(app->fetched));
	doca_task_free(doca_rdma_task_remote_net_sync_event_notify_add_as_task(task));
	DOCA_LOG_INFO("requester: notify_add saw %" PRIu64, app->fetched);
	app->result = app->fetched == 2 ? DOCA_SUCCESS : DOCA_ERROR_UNEXPECTED;
	/* nothing else in flight: DOCA answers IN_PROGRESS here, the stop ends after this callback */
	app->stop_in_cb = doca_ctx_stop(rt->ctx);
	if (app->stop_in_cb != DOCA_ERROR_IN_PROGRESS) {
		DOCA_LOG_ERR("doca_ctx_stop in the completion callback: %s (expected DOCA_ERROR_IN_PROGRESS)",
			     doca_error_get_descr(app->stop_in_cb));
		app->result = DOCA_ERROR_UNEXPECTED;
	}
}

#define TASK_ERR(name, type)                                                                              \
	static void name##_err(struct type *task, union doca_data task_ud, union doca_data ctx_ud)         \
	{                                                                                                 \
		(void)task_ud;                                                                            \
		requester_fail(ctx_ud.ptr, doca_task_get_status(type##_as_task(task)), #name " task failed"); \
		doca_task_free(type##_as_task(task));                                                     \
		if ((void *)task == (void *)((struct se_app *)((struct rt *)ctx_ud.ptr)->app)->get)      \
			((struct se_app *)((struct rt *)ctx_ud.ptr)->app)->get = NULL;                    \
	}

TASK_ERR(set, doca_rdma_task_remote_net_sync_event_notify_set)
TASK_ERR(get, doca_rdma_task_remote_net_sync_event_get)
TASK_ERR(add, doca_rdma_task_remote_net_sync_event_notify_add)

static doca_error_t requester_configure(struct rt *rt)
{
	doca_error_t rc = doca_rdma_task_remote_net_sync_event_notify_set_set_conf(rt->rdma, set_done, set_err, 2);

	if (rc == DOCA_SUCCESS)
		rc = doca_rdma_task_remote_net_sync_event_get_set_conf(rt->rdma, get_done, get_err, 2);
	if (rc == DOCA_SUCCESS)
		rc = doca_rdma_task_remote_net_sync_event_notify_add_set_conf(rt->rdma, add_done, add_err, 2);
	return rc;
}

static doca_error_t no_tasks(struct rt *rt)
{
	(void)rt;
	return DOCA_SUCCESS;
}

static void requester_start(struct rt *rt)
{
	struct se_app *app = rt->app;
	struct doca_rdma_task_remote_net_sync_event_notify_set *set;
	union doca_data ud = {.u64 = 0};
	doca_error_t rc;

	*(uint64_t *)rt->mem = 1;
	app->deadline = ms_now() + SE_TIMEOUT_MS;
	rc = doca_buf_inventory_buf_get_by_data(rt->inv, rt->mmap, rt->mem, 8, &app->set_buf);
	if (rc == DOCA_SUCCESS)
		rc = doca_buf_inventory_buf_get_by_addr(rt->inv, rt->mmap, rt->mem + 64, 8, &app->get_buf);
	if (rc == DOCA_SUCCESS)
		rc = doca_buf_inventory_buf_get_by_addr(rt->inv, rt->mmap, rt->mem + 128, 8, &app->add_buf);
	if (rc == DOCA_SUCCESS)
		rc = doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(rt->rdma, rt->conn, app->remote,
										    app->set_buf, ud, &set);
	if (rc == DOCA_SUCCESS)
		rc = doca_task_submit(doca_rdma_task_remote_net_sync_event_notify_set_as_task(set));
	if (rc != DOCA_SUCCESS)
		requester_fail(rt, rc, "notify_set");
}

static doca_error_t requester_import(struct rt *rt, struct se_app *app)
{
	char path[600];
	uint8_t blob[512];
	size_t len;
	FILE *f;
	doca_error_t rc = rt_wait(rt, "responder.event");

	if (rc != DOCA_SUCCESS)
		return rc;
	snprintf(path, sizeof(path), "%s/responder.event", rt->cfg->dir);
	f = fopen(path, "rb");
	if (!f)
		return DOCA_ERROR_IO_FAILED;
	len = fread(blob, 1, sizeof(blob), f);
	fclose(f);
	rc = doca_sync_event_remote_net_create_from_export(rt->dev, blob, len, &app->remote);
	if (rc != DOCA_SUCCESS)
		DOCA_LOG_ERR("doca_sync_event_remote_net_create_from_export: %s", doca_error_get_descr(rc));
	return rc;
}

static void requester_running(struct rt *rt)
{
	struct se_app *app = rt->app;
	doca_error_t rc = requester_import(rt, app);

	if (rc == DOCA_SUCCESS && rt->cfg->use_cm) {
		struct doca_rdma_addr *addr = NULL;
		union doca_data conn_data = {.u64 = 1};

		rc = rt_wait(rt, "listening");
		if (rc == DOCA_SUCCESS)
			rc = doca_rdma_addr_create(DOCA_RDMA_ADDR_TYPE_IPv4, rt->cfg->addr, (uint16_t)rt->cfg->port, &addr);
		if (rc == DOCA_SUCCESS) {
			rc = doca_rdma_connect_to_addr(rt->rdma, addr, conn_data);
			doca_rdma_addr_destroy(addr);
		}
		if (rc == DOCA_SUCCESS)
			return; /* requester_start runs from the connection-established callback */
	}
	if (rc == DOCA_SUCCESS)
		rc = rt_connect(rt);
	if (rc != DOCA_SUCCESS) {
		requester_fail(rt, rc, "set-up");
		return;
	}
	requester_start(rt);
}

static void requester_established(struct rt *rt)
{
	DOCA_LOG_INFO("connected by RDMA CM");
	requester_start(rt);
}

/* ---------------------------------------------------------------- main */
int main(int argc, char **argv)
{
	static const struct rt_hooks responder_hooks = {.running = responder_running,
							.established = responder_established};
	static const struct rt_hooks requester_hooks = {.running = requester_running,
							.established = requester_established};
	const uint32_t perm = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ |
			      DOCA_ACCESS_FLAG_RDMA_WRITE | DOCA_ACCESS_FLAG_RDMA_ATOMIC;
	struct se_app app;
	struct rt_cfg cfg;
	struct rt rt;
	doca_error_t rc = rt_args(argc, argv, &cfg), stop;
	bool responder = !strcmp(cfg.role, "responder");

	if (rc != DOCA_SUCCESS)
		return 2;
	memset(&app, 0, sizeof(app));
	app.result = DOCA_ERROR_IN_PROGRESS;
	app.stop_in_cb = DOCA_ERROR_UNKNOWN;
	rc = rt_open_with(&rt, &cfg, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE, perm, responder ? no_tasks : requester_configure,
			  responder ? &responder_hooks : &requester_hooks, &app);
	/* the callbacks do the work and stop the context: progress until it is IDLE */
	if (rc == DOCA_SUCCESS)
		rc = rt_progress_until_idle(&rt, SE_TIMEOUT_MS + 5000);
	if (rc == DOCA_SUCCESS)
		rc = app.result;
	if (rc == DOCA_SUCCESS && !responder && app.stop_in_cb != DOCA_ERROR_IN_PROGRESS)
		rc = DOCA_ERROR_UNEXPECTED;
	/* teardown stops the context again, as the samples do */
	if (rt.ctx) {
		stop = doca_ctx_stop(rt.ctx);
		if (stop != DOCA_SUCCESS && stop != DOCA_ERROR_IN_PROGRESS) {
			DOCA_LOG_ERR("Failed to stop RDMA context: %s", doca_error_get_descr(stop));
			if (rc == DOCA_SUCCESS)
				rc = stop;
		}
	}
	if (rc == DOCA_SUCCESS)
		DOCA_LOG_INFO("%s: context stopped twice, sync event exchange complete", cfg.role);
	if (app.get)
		doca_task_free(doca_rdma_task_remote_net_sync_event_get_as_task(app.get));
	if (app.set_buf)
		doca_buf_dec_refcount(app.set_buf, NULL);
	if (app.get_buf)
		doca_buf_dec_refcount(app.get_buf, NULL);
	if (app.add_buf)
		doca_buf_dec_refcount(app.add_buf, NULL);
	rt_close(&rt);
	if (app.remote)
		doca_sync_event_remote_net_destroy(app.remote);
	if (app.event) {
		doca_sync_event_stop(app.event);
		doca_sync_event_destroy(app.event);
	}
	if (rc != DOCA_SUCCESS) {
		DOCA_LOG_ERR("%s failed: %s", cfg.role, doca_error_get_descr(rc));
		return 1;
	}
	return 0;
}
