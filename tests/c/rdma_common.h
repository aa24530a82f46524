/*
 * Shared set-up of the C RDMA test programs (tests/test_c_programs.py), written
 * against the public DOCA API only, as a DOCA sample would be: device by name,
 * progress engine, mmap, buffer inventory, RDMA context with state callbacks,
 * tasks with completion callbacks; connections exchanged through descriptor
 * files (doca_rdma_export / doca_rdma_connect) or made by RDMA CM.
 */
#ifndef RDMA_COMMON_H_
#define RDMA_COMMON_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <doca_argp.h>
#include <doca_buf.h>
#include <doca_buf_inventory.h>
#include <doca_ctx.h>
#include <doca_dev.h>
#include <doca_error.h>
#include <doca_log.h>
#include <doca_mmap.h>
#include <doca_pe.h>
#include <doca_rdma.h>
#include <doca_types.h>

#define RT_MEM_SIZE 4096

struct rt_cfg {
	char device[64];     /* -d: ibdev or interface name */
	char role[16];       /* -r: requester | responder */
	char dir[512];       /* -f: directory for descriptor and sync files */
	bool use_cm;         /* -c: connect by RDMA CM instead of exported descriptors */
	char addr[64];       /* -a: responder address (RDMA CM) */
	int port;            /* -p: responder port (RDMA CM) */
	char message[256];   /* -m: the bytes to move */
};

struct rt;

/* Optional callbacks of a program written in the DOCA samples' style, which
 * does its work from the context's callbacks: running() from the RUNNING
 * state callback, established() from the connection-established callback.
 * Inside them rt->in_cb is set: the helpers then wait without progressing the
 * engine (no doca_pe_progress from inside a callback). */
struct rt_hooks {
	void (*running)(struct rt *rt);
	void (*established)(struct rt *rt);
};

struct rt {
	struct rt_cfg *cfg;
	const struct rt_hooks *hooks;
	bool in_cb;
	bool was_running;           /* the RUNNING state callback ran */
	void *app;                  /* the program's own state */
	bool responder;
	struct doca_dev *dev;
	struct doca_pe *pe;
	struct doca_mmap *mmap;
	struct doca_buf_inventory *inv;
	struct doca_rdma *rdma;
	struct doca_ctx *ctx;
	enum doca_ctx_states state;
	struct doca_rdma_connection *conn;
	bool connected, conn_failed;
	char *mem;
	struct doca_mmap *remote;
	int tasks_done;
	doca_error_t task_status;
};

/* Parse the command line (doca_argp) and create the log backends. */
doca_error_t rt_args(int argc, char **argv, struct rt_cfg *cfg);
/* Open everything; configure_tasks is called before the ctx starts. */
doca_error_t rt_open(struct rt *rt, struct rt_cfg *cfg, uint32_t mmap_perm, uint32_t rdma_perm,
		     doca_error_t (*configure_tasks)(struct rt *rt));
/* The same, with hooks (NULL: none); returns once the RUNNING callback ran. */
doca_error_t rt_open_with(struct rt *rt, struct rt_cfg *cfg, uint32_t mmap_perm, uint32_t rdma_perm,
			  doca_error_t (*configure_tasks)(struct rt *rt), const struct rt_hooks *hooks, void *app);
/* Progress until the ctx is IDLE (timeout_ms at most). */
doca_error_t rt_progress_until_idle(struct rt *rt, unsigned timeout_ms);
doca_error_t rt_connect(struct rt *rt);
/* Export our mmap to <dir>/<name>; import the peer's from <dir>/<name>. */
doca_error_t rt_export_mmap(struct rt *rt, const char *name);
doca_error_t rt_import_mmap(struct rt *rt, const char *name);
/* Submit and progress until rt->tasks_done reaches want (10 s at most). */
doca_error_t rt_submit(struct rt *rt, struct doca_task *task);
doca_error_t rt_wait_tasks(struct rt *rt, int want);
/* Sync files: create <dir>/<name>; wait for it while progressing the engine. */
doca_error_t rt_signal(struct rt *rt, const char *name);
doca_error_t rt_wait(struct rt *rt, const char *name);
void rt_close(struct rt *rt);
/* Receive tasks: configure them (callbacks record completions), and post one into addr[0..len). */
doca_error_t rt_receive_set_conf(struct rt *rt);
doca_error_t rt_post_receive(struct rt *rt, char *addr, size_t len, struct doca_rdma_task_receive **task);
void rt_free_receive(struct doca_rdma_task_receive *task);   /* the task and its buffer */
/* Record a completion: the task callbacks of each program call this. */
void rt_task_done(struct doca_task *task, union doca_data ctx_user_data, bool ok);

#endif
