/* Shared set-up of the C RDMA test programs (see rdma_common.h). */
#include "rdma_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

DOCA_LOG_REGISTER(RDMA_TEST::COMMON);

static struct doca_log_backend *sdk_log;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------- argp */
static doca_error_t copy_str(char *dst, size_t cap, const char *src, const char *what)
{
	if (strlen(src) >= cap) {
		DOCA_LOG_ERR("%s too long", what);
		return DOCA_ERROR_INVALID_VALUE;
	}
	strcpy(dst, src);
	return DOCA_SUCCESS;
}

static doca_error_t device_cb(void *param, void *config)
{
	return copy_str(((struct rt_cfg *)config)->device, sizeof(((struct rt_cfg *)config)->device), param, "device");
}

static doca_error_t role_cb(void *param, void *config)
{
	struct rt_cfg *cfg = config;

	if (strcmp(param, "requester") && strcmp(param, "responder")) {
		DOCA_LOG_ERR("role must be requester or responder, not %s", (const char *)param);
		return DOCA_ERROR_INVALID_VALUE;
	}
	return copy_str(cfg->role, sizeof(cfg->role), param, "role");
}

static doca_error_t dir_cb(void *param, void *config)
{
	return copy_str(((struct rt_cfg *)config)->dir, sizeof(((struct rt_cfg *)config)->dir), param, "dir");
}

static doca_error_t cm_cb(void *param, void *config)
{
	((struct rt_cfg *)config)->use_cm = *(bool *)param;
	return DOCA_SUCCESS;
}

static doca_error_t addr_cb(void *param, void *config)
{
	return copy_str(((struct rt_cfg *)config)->addr, sizeof(((struct rt_cfg *)config)->addr), param, "address");
}

static doca_error_t port_cb(void *param, void *config)
{
	int port = *(int *)param;

	if (port <= 0 || port > 65535)
		return DOCA_ERROR_INVALID_VALUE;
	((struct rt_cfg *)config)->port = port;
	return DOCA_SUCCESS;
}

static doca_error_t message_cb(void *param, void *config)
{
	return copy_str(((struct rt_cfg *)config)->message, sizeof(((struct rt_cfg *)config)->message), param,
			"message");
}

static doca_error_t validate_cb(void *config)
{
	struct rt_cfg *cfg = config;

	if (cfg->use_cm && !strcmp(cfg->role, "requester") && !cfg->addr[0]) {
		DOCA_LOG_ERR("the requester needs -a/--server-addr with RDMA CM");
		return DOCA_ERROR_INVALID_VALUE;
	}
	return DOCA_SUCCESS;
}

static doca_error_t add_param(const char *s, const char *l, const char *args, const char *descr,
			      enum doca_argp_type type, doca_argp_param_cb_t cb, bool mandatory)
{
	struct doca_argp_param *p;
	doca_error_t rc = doca_argp_param_create(&p);

	if (rc != DOCA_SUCCESS)
		return rc;
	doca_argp_param_set_short_name(p, s);
	doca_argp_param_set_long_name(p, l);
	if (args)
		doca_argp_param_set_arguments(p, args);
	doca_argp_param_set_description(p, descr);
	doca_argp_param_set_callback(p, cb);
	doca_argp_param_set_type(p, type);
	if (mandatory)
		doca_argp_param_set_mandatory(p);
	return doca_argp_register_param(p);
}

doca_error_t rt_args(int argc, char **argv, struct rt_cfg *cfg)
{
	doca_error_t rc;

	memset(cfg, 0, sizeof(*cfg));
	strcpy(cfg->device, "lo");
	strcpy(cfg->message, "hello from a DOCA C program");
	cfg->port = 18515;
	rc = doca_log_backend_create_standard();
	if (rc != DOCA_SUCCESS)
		return rc;
	rc = doca_log_backend_create_with_file_sdk(stderr, &sdk_log);
	if (rc != DOCA_SUCCESS)
		return rc;
	rc = doca_log_backend_set_sdk_level(sdk_log, DOCA_LOG_LEVEL_WARNING);
	if (rc != DOCA_SUCCESS)
		return rc;
	rc = doca_argp_init(NULL, cfg);
	if (rc != DOCA_SUCCESS)
		return rc;
	if ((rc = add_param("d", "device", "<name>", "device (ibdev or interface name)", DOCA_ARGP_TYPE_STRING,
			    device_cb, false)) != DOCA_SUCCESS ||
	    (rc = add_param("r", "role", "<role>", "requester or responder", DOCA_ARGP_TYPE_STRING, role_cb, true)) !=
		    DOCA_SUCCESS ||
	    (rc = add_param("f", "files", "<dir>", "directory for descriptor files", DOCA_ARGP_TYPE_STRING, dir_cb,
			    true)) != DOCA_SUCCESS ||
	    (rc = add_param("c", "use-rdma-cm", NULL, "connect by RDMA CM", DOCA_ARGP_TYPE_BOOLEAN, cm_cb, false)) !=
		    DOCA_SUCCESS ||
	    (rc = add_param("a", "server-addr", "<ip>", "responder address (RDMA CM)", DOCA_ARGP_TYPE_STRING, addr_cb,
			    false)) != DOCA_SUCCESS ||
	    (rc = add_param("p", "port", "<port>", "responder port (RDMA CM)", DOCA_ARGP_TYPE_INT, port_cb, false)) !=
		    DOCA_SUCCESS ||
	    (rc = add_param("m", "message", "<text>", "the bytes to move", DOCA_ARGP_TYPE_STRING, message_cb,
			    false)) != DOCA_SUCCESS)
		goto out;
	rc = doca_argp_register_validation_callback(validate_cb);
	if (rc != DOCA_SUCCESS)
		goto out;
	rc = doca_argp_start(argc, argv);
out:
	doca_argp_destroy();
	return rc;
}

/* ---------------------------------------------------------------- files */
static void path_of(const struct rt *rt, const char *name, char *out, size_t cap)
{
	snprintf(out, cap, "%s/%s", rt->cfg->dir, name);
}

static doca_error_t write_file(const struct rt *rt, const char *name, const void *data, size_t len)
{
	char path[600], tmp[620];
	FILE *f;

	path_of(rt, name, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "wb");
	if (!f || fwrite(data, 1, len, f) != len) {
		if (f)
			fclose(f);
		DOCA_LOG_ERR("cannot write %s: %s", tmp, strerror(errno));
		return DOCA_ERROR_IO_FAILED;
	}
	fclose(f);
	if (rename(tmp, path) != 0)
		return DOCA_ERROR_IO_FAILED;
	return DOCA_SUCCESS;
}

/* Wait (progressing the engine) until <dir>/<name> exists, then read it (malloc'd). */
static doca_error_t read_file(struct rt *rt, const char *name, char **data, size_t *len)
{
	char path[600];
	uint64_t deadline = now_ms() + 15000;
	FILE *f;

	path_of(rt, name, path, sizeof(path));
	while (access(path, R_OK) != 0) {
		if (now_ms() > deadline) {
			DOCA_LOG_ERR("timed out waiting for %s", path);
			return DOCA_ERROR_TIME_OUT;
		}
		if (rt->pe && !rt->in_cb)
			doca_pe_progress(rt->pe);
		usleep(1000);
	}
	f = fopen(path, "rb");
	if (!f)
		return DOCA_ERROR_IO_FAILED;
	fseek(f, 0, SEEK_END);
	*len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	*data = malloc(*len + 1);
	if (!*data || fread(*data, 1, *len, f) != *len) {
		fclose(f);
		free(*data);
		return DOCA_ERROR_IO_FAILED;
	}
	fclose(f);
	return DOCA_SUCCESS;
}

doca_error_t rt_signal(struct rt *rt, const char *name)
{
	return write_file(rt, name, "1", 1);
}

doca_error_t rt_wait(struct rt *rt, const char *name)
{
	char *data = NULL;
	size_t len;
	doca_error_t rc = read_file(rt, name, &data, &len);

	free(data);
	return rc;
}

/* ---------------------------------------------------------------- device */
static doca_error_t open_device_by_name(const char *name, struct doca_dev **dev)
{
	struct doca_devinfo **list;
	uint32_t n;
	doca_error_t rc = doca_devinfo_create_list(&list, &n);

	if (rc != DOCA_SUCCESS)
		return rc;
	rc = DOCA_ERROR_NOT_FOUND;
	for (uint32_t i = 0; i < n; i++) {
		char ib[DOCA_DEVINFO_IBDEV_NAME_SIZE] = "", iface[DOCA_DEVINFO_IFACE_NAME_SIZE] = "";

		doca_devinfo_get_ibdev_name(list[i], ib, sizeof(ib));
		doca_devinfo_get_iface_name(list[i], iface, sizeof(iface));
		if (strcmp(ib, name) && strcmp(iface, name))
			continue;
		if (doca_rdma_cap_task_write_is_supported(list[i]) != DOCA_SUCCESS)
			continue;
		rc = doca_dev_open(list[i], dev);
		break;
	}
	doca_devinfo_destroy_list(list);
	return rc;
}

/* ---------------------------------------------------------------- callbacks */
static void state_changed_cb(const union doca_data user_data, struct doca_ctx *ctx, enum doca_ctx_states prev,
			     enum doca_ctx_states next)
{
	struct rt *rt = user_data.ptr;

	(void)ctx;
	(void)prev;
	rt->state = next;
	DOCA_LOG_DBG("ctx state %d -> %d", (int)prev, (int)next);
	if (next == DOCA_CTX_STATE_RUNNING) {
		rt->was_running = true;
		if (rt->hooks && rt->hooks->running) {
			rt->in_cb = true;
			rt->hooks->running(rt);
			rt->in_cb = false;
		}
	}
}

static void conn_request_cb(struct doca_rdma_connection *conn, union doca_data ctx_user_data)
{
	struct rt *rt = ctx_user_data.ptr;
	doca_error_t rc = doca_rdma_connection_accept(conn, NULL, 0);

	if (rc != DOCA_SUCCESS) {
		DOCA_LOG_ERR("accept failed: %s", doca_error_get_descr(rc));
		rt->conn_failed = true;
		return;
	}
	rt->conn = conn;
}

static void conn_established_cb(struct doca_rdma_connection *conn, union doca_data conn_user_data,
				union doca_data ctx_user_data)
{
	struct rt *rt = ctx_user_data.ptr;

	(void)conn_user_data;
	rt->conn = conn;
	rt->connected = true;
	if (rt->hooks && rt->hooks->established) {
		rt->in_cb = true;
		rt->hooks->established(rt);
		rt->in_cb = false;
	}
}

static void conn_failure_cb(struct doca_rdma_connection *conn, union doca_data conn_user_data,
			    union doca_data ctx_user_data)
{
	struct rt *rt = ctx_user_data.ptr;

	(void)conn;
	(void)conn_user_data;
	rt->conn_failed = true;
}

static void disconnect_cb(struct doca_rdma_connection *conn, union doca_data conn_user_data,
			  union doca_data ctx_user_data)
{
	struct rt *rt = ctx_user_data.ptr;

	(void)conn;
	(void)conn_user_data;
	rt->connected = false;
}

void rt_task_done(struct doca_task *task, union doca_data ctx_user_data, bool ok)
{
	struct rt *rt = ctx_user_data.ptr;

	rt->task_status = ok ? DOCA_SUCCESS : doca_task_get_status(task);
	if (!ok)
		DOCA_LOG_ERR("task failed: %s", doca_error_get_descr(rt->task_status));
	rt->tasks_done++;
}

static void receive_ok(struct doca_rdma_task_receive *task, union doca_data task_ud, union doca_data ctx_ud)
{
	(void)task_ud;
	rt_task_done(doca_rdma_task_receive_as_task(task), ctx_ud, true);
}

static void receive_err(struct doca_rdma_task_receive *task, union doca_data task_ud, union doca_data ctx_ud)
{
	(void)task_ud;
	rt_task_done(doca_rdma_task_receive_as_task(task), ctx_ud, false);
}

doca_error_t rt_receive_set_conf(struct rt *rt)
{
	return doca_rdma_task_receive_set_conf(rt->rdma, receive_ok, receive_err, 4);
}

doca_error_t rt_post_receive(struct rt *rt, char *addr, size_t len, struct doca_rdma_task_receive **task)
{
	struct doca_buf *dst = NULL;
	union doca_data ud = {.u64 = 0};
	doca_error_t rc = doca_buf_inventory_buf_get_by_addr(rt->inv, rt->mmap, addr, len, &dst);

	if (rc == DOCA_SUCCESS)
		rc = doca_rdma_task_receive_allocate_init(rt->rdma, dst, ud, task);
	if (rc != DOCA_SUCCESS)
		return rc;
	return doca_task_submit(doca_rdma_task_receive_as_task(*task));
}

void rt_free_receive(struct doca_rdma_task_receive *task)
{
	struct doca_buf *dst = doca_rdma_task_receive_get_dst_buf(task);

	doca_task_free(doca_rdma_task_receive_as_task(task));
	doca_buf_dec_refcount(dst, NULL);
}

/* ---------------------------------------------------------------- set-up */
doca_error_t rt_open(struct rt *rt, struct rt_cfg *cfg, uint32_t mmap_perm, uint32_t rdma_perm,
		     doca_error_t (*configure_tasks)(struct rt *rt))
{
	return rt_open_with(rt, cfg, mmap_perm, rdma_perm, configure_tasks, NULL, NULL);
}

doca_error_t rt_progress_until_idle(struct rt *rt, unsigned timeout_ms)
{
	uint64_t deadline = now_ms() + timeout_ms;

	while (rt->state != DOCA_CTX_STATE_IDLE) {
		if (now_ms() > deadline) {
			DOCA_LOG_ERR("timed out waiting for the context to stop");
			return DOCA_ERROR_TIME_OUT;
		}
		if (!doca_pe_progress(rt->pe))
			usleep(100);
	}
	return DOCA_SUCCESS;
}

doca_error_t rt_open_with(struct rt *rt, struct rt_cfg *cfg, uint32_t mmap_perm, uint32_t rdma_perm,
			  doca_error_t (*configure_tasks)(struct rt *rt), const struct rt_hooks *hooks, void *app)
{
	union doca_data data = {.ptr = rt};
	doca_error_t rc;
	uint64_t deadline;

	memset(rt, 0, sizeof(*rt));
	rt->cfg = cfg;
	rt->hooks = hooks;
	rt->app = app;
	rt->responder = !strcmp(cfg->role, "responder");
	rt->mem = aligned_alloc(64, RT_MEM_SIZE);
	if (!rt->mem)
		return DOCA_ERROR_NO_MEMORY;
	memset(rt->mem, 0, RT_MEM_SIZE);
#define TRY(call)                                                                                       \
	do {                                                                                            \
		rc = (call);                                                                            \
		if (rc != DOCA_SUCCESS) {                                                               \
			DOCA_LOG_ERR("%s: %s", #call, doca_error_get_descr(rc));                        \
			return rc;                                                                      \
		}                                                                                       \
	} while (0)
	TRY(open_device_by_name(cfg->device, &rt->dev));
	TRY(doca_pe_create(&rt->pe));
	TRY(doca_mmap_create(&rt->mmap));
	TRY(doca_mmap_set_memrange(rt->mmap, rt->mem, RT_MEM_SIZE));
	TRY(doca_mmap_set_permissions(rt->mmap, mmap_perm));
	TRY(doca_mmap_add_dev(rt->mmap, rt->dev));
	TRY(doca_mmap_start(rt->mmap));
	TRY(doca_buf_inventory_create(8, &rt->inv));
	TRY(doca_buf_inventory_start(rt->inv));
	TRY(doca_rdma_create(rt->dev, &rt->rdma));
	rt->ctx = doca_rdma_as_ctx(rt->rdma);
	TRY(doca_rdma_set_permissions(rt->rdma, rdma_perm));
	TRY(configure_tasks(rt));
	if (cfg->use_cm)
		TRY(doca_rdma_set_connection_state_callbacks(rt->rdma, conn_request_cb, conn_established_cb,
							     conn_failure_cb, disconnect_cb));
	TRY(doca_ctx_set_user_data(rt->ctx, data));
	TRY(doca_ctx_set_state_changed_cb(rt->ctx, state_changed_cb));
	TRY(doca_pe_connect_ctx(rt->pe, rt->ctx));
	TRY(doca_ctx_start(rt->ctx));
	deadline = now_ms() + 5000;
	while (!rt->was_running) {
		if (now_ms() > deadline)
			return DOCA_ERROR_TIME_OUT;
		doca_pe_progress(rt->pe);
	}
	return DOCA_SUCCESS;
}

doca_error_t rt_connect(struct rt *rt)
{
	struct rt_cfg *cfg = rt->cfg;
	doca_error_t rc;
	uint64_t deadline = now_ms() + 15000;

	if (!cfg->use_cm) {
		const void *details;
		size_t len;
		char *peer;
		size_t peer_len;

		TRY(doca_rdma_export(rt->rdma, &details, &len, &rt->conn));
		TRY(write_file(rt, rt->responder ? "responder.conn" : "requester.conn", details, len));
		TRY(read_file(rt, rt->responder ? "requester.conn" : "responder.conn", &peer, &peer_len));
		rc = doca_rdma_connect(rt->rdma, peer, peer_len, rt->conn);
		free(peer);
		if (rc != DOCA_SUCCESS) {
			DOCA_LOG_ERR("doca_rdma_connect: %s", doca_error_get_descr(rc));
			return rc;
		}
		rt->connected = true;
		return DOCA_SUCCESS;
	}
	if (rt->responder) {
		TRY(doca_rdma_start_listen_to_port(rt->rdma, (uint16_t)cfg->port));
		TRY(rt_signal(rt, "listening"));
	} else {
		struct doca_rdma_addr *addr;
		union doca_data conn_data = {.u64 = 1};

		TRY(rt_wait(rt, "listening"));
		TRY(doca_rdma_addr_create(DOCA_RDMA_ADDR_TYPE_IPv4, cfg->addr, (uint16_t)cfg->port, &addr));
		rc = doca_rdma_connect_to_addr(rt->rdma, addr, conn_data);
		doca_rdma_addr_destroy(addr);
		if (rc != DOCA_SUCCESS) {
			DOCA_LOG_ERR("doca_rdma_connect_to_addr: %s", doca_error_get_descr(rc));
			return rc;
		}
	}
	while (!rt->connected) {
		if (rt->conn_failed || now_ms() > deadline) {
			DOCA_LOG_ERR("connection failed");
			return DOCA_ERROR_CONNECTION_ABORTED;
		}
		doca_pe_progress(rt->pe);
		usleep(100);
	}
	DOCA_LOG_INFO("connected by RDMA CM");
	return DOCA_SUCCESS;
}

doca_error_t rt_export_mmap(struct rt *rt, const char *name)
{
	const void *desc;
	size_t len;
	doca_error_t rc;

	TRY(doca_mmap_export_rdma(rt->mmap, rt->dev, &desc, &len));
	return write_file(rt, name, desc, len);
}

doca_error_t rt_import_mmap(struct rt *rt, const char *name)
{
	char *desc;
	size_t len;
	doca_error_t rc;

	TRY(read_file(rt, name, &desc, &len));
	rc = doca_mmap_create_from_export(NULL, desc, len, rt->dev, &rt->remote);
	free(desc);
	if (rc != DOCA_SUCCESS)
		DOCA_LOG_ERR("doca_mmap_create_from_export: %s", doca_error_get_descr(rc));
	return rc;
}

doca_error_t rt_wait_tasks(struct rt *rt, int want)
{
	uint64_t deadline = now_ms() + 10000;

	while (rt->tasks_done < want) {
		if (now_ms() > deadline) {
			DOCA_LOG_ERR("timed out waiting for a task");
			return DOCA_ERROR_TIME_OUT;
		}
		if (!doca_pe_progress(rt->pe))
			usleep(50);
	}
	return rt->task_status;
}

doca_error_t rt_submit(struct rt *rt, struct doca_task *task)
{
	int want = rt->tasks_done + 1;
	doca_error_t rc = doca_task_submit(task);

	if (rc != DOCA_SUCCESS) {
		DOCA_LOG_ERR("doca_task_submit: %s", doca_error_get_descr(rc));
		return rc;
	}
	return rt_wait_tasks(rt, want);
}

void rt_close(struct rt *rt)
{
	uint64_t deadline = now_ms() + 5000;

	if (rt->ctx && rt->state != DOCA_CTX_STATE_IDLE) {
		if (doca_ctx_stop(rt->ctx) == DOCA_ERROR_IN_PROGRESS)
			while (rt->state != DOCA_CTX_STATE_IDLE && now_ms() < deadline)
				doca_pe_progress(rt->pe);
		doca_pe_progress(rt->pe);
	}
	if (rt->rdma)
		doca_rdma_destroy(rt->rdma);
	if (rt->remote)
		doca_mmap_destroy(rt->remote);      /* destroy stops a started mmap (DOCA semantics) */
	if (rt->inv)
		doca_buf_inventory_destroy(rt->inv); /* likewise for a started inventory */
	if (rt->mmap)
		doca_mmap_destroy(rt->mmap);
	if (rt->pe)
		doca_pe_destroy(rt->pe);
	if (rt->dev)
		doca_dev_close(rt->dev);
	free(rt->mem);
}
