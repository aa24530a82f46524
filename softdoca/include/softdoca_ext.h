/*
 * softdoca extensions: functions that are not DOCA API, exported by softdoca's
 * libdoca_common under a softdoca_ prefix (docs/softdoca-contract.md,
 * "Extensions"). Real DOCA has none of them: look them up (dlsym, weak
 * references) when a program must also run on real DOCA.
 *
 * Inside softdoca this header is included after doca_all.h; as part of the
 * softdoca DOCA runtime (include/softdoca_ext.h) it includes DOCA's headers.
 */
#ifndef SOFTDOCA_EXT_H_
#define SOFTDOCA_EXT_H_

#include <stdint.h>

#ifndef SOFTDOCA_DOCA_ALL_H
#include <doca_error.h>
#include <doca_types.h>
#include <doca_pe.h>
#include <doca_ctx.h>
#include <doca_rdma.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- providers
 * SOFTDOCA_PROVIDER=native|auto|ucx picks what moves the bytes of one-sided
 * operations (docs/providers.md). softdoca_provider_name: the provider in use
 * ("native" when none other was asked for or could start). For a connection:
 * softdoca_transport_name: the native link's transport, "tcp" or "shm"
 * (same-host transport); softdoca_provider_transport: the provider's own
 * transports once its connection is up (e.g. "tcp", "rc_mlx5"), NULL when
 * none (the connection's operations then all take the native link). */
const char *softdoca_provider_name(void);
/* The providers this softdoca was built with, comma-separated ("native,ucx"). */
const char *softdoca_providers_built(void);
/* Two-sided messages this process sent through the provider (answered != 0:
 * those the peer acknowledged there); 0 when messages take the native link. */
unsigned long long softdoca_provider_messages(int answered);
const char *softdoca_transport_name(const struct doca_rdma_connection *conn);
const char *softdoca_provider_transport(const struct doca_rdma_connection *conn);

/* ---------------------------------------------------------------- task batches
 * DOCA's task batch API (doca_task_batch_submit/_try_submit/_free/_get_status/
 * _set_user_data/_get_user_data/_get_ctx/_get_ctx_user_data/_get_tasks_num)
 * works on batches that only DOCA ETH TXQ allocates; softdoca has no ETH, so
 * this allocator makes batches of any tasks of one context (e.g. RDMA writes).
 *
 * The batch has tasks_num slots (*task_array): fill each with a task allocated
 * from ctx before submitting. The tasks then belong to the batch:
 * doca_task_batch_free frees them (doca_task_free) with the batch; do not
 * submit or free them on their own while they are in it.
 *
 * doca_task_batch_submit / _try_submit validate the batch (every slot holds a
 * distinct, idle task of ctx, ctx RUNNING) and submit its tasks as one unit:
 * all but the last without DOCA_TASK_SUBMIT_FLAG_FLUSH, the last with it. The
 * tasks' own completion callbacks are not called: once every task of the batch
 * has completed, doca_pe_progress calls success_cb if all succeeded, else
 * error_cb, once, with each task's status (status_array[i] for task_array[i]).
 * doca_task_batch_get_status then returns DOCA_SUCCESS or the status of the
 * first failed slot. If a task fails to submit after earlier ones went out,
 * the batch still returns DOCA_SUCCESS (it is in flight) and that task and
 * the ones after it complete with the submit error.
 *
 * Returns DOCA_ERROR_INVALID_VALUE (ctx, task_array, task_batch or a callback
 * NULL; tasks_num 0 or over 128), DOCA_ERROR_BAD_STATE (ctx destroyed or not
 * RUNNING), DOCA_ERROR_NOT_CONNECTED (ctx without a progress engine),
 * DOCA_ERROR_NO_MEMORY.
 */
typedef void (*softdoca_task_batch_completion_cb_t)(struct doca_task_batch *task_batch,
						    uint16_t tasks_num,
						    union doca_data ctx_user_data,
						    union doca_data task_batch_user_data,
						    struct doca_task **task_array,
						    doca_error_t *status_array);

doca_error_t softdoca_task_batch_allocate(struct doca_ctx *ctx,
					  uint16_t tasks_num,
					  union doca_data task_batch_user_data,
					  softdoca_task_batch_completion_cb_t success_cb,
					  softdoca_task_batch_completion_cb_t error_cb,
					  struct doca_task ***task_array,
					  struct doca_task_batch **task_batch);

/* ---------------------------------------------------------------- waiting */
/*
 * Block until pe has something for doca_pe_progress, softdoca_pe_kick is
 * called, or timeout_ms passes (-1: no limit). With spin_us > 0 (at most
 * 10000) it first looks for events without sleeping, for up to spin_us,
 * adaptively: the window halves after each wait that outlasts it and comes
 * back whole after one that ends within it. The calling thread waits on
 * the pe's notification set itself, so the input of its connections wakes it
 * directly (not the engine thread, then it), and reads that input before
 * returning. The same steps as request_notification / waiting on the handle /
 * clear_notification, minus one thread wake-up per completion. Returns 1 when
 * woken (or work was pending), 0 after timeout_ms, -1 for a bad handle.
 */
int softdoca_pe_wait(struct doca_pe *pe, int timeout_ms, int spin_us);
/* Wake a thread in softdoca_pe_wait (or make the next one return at once),
 * from any thread. */
void softdoca_pe_kick(struct doca_pe *pe);

/* ---------------------------------------------------------------- diagnostics */
/* 0 none, 1 rejected by the peer, 2 timed out, 3 refused, 4 lost; -1 bad handle. */
int softdoca_rdma_connection_get_fail_reason(const struct doca_rdma_connection *conn);
/* The private data of a CM accept (requester side); 0, or -1 on a bad handle. */
int softdoca_rdma_connection_get_private_data(const struct doca_rdma_connection *conn,
					      const uint8_t **data,
					      uint8_t *len);
/* Why a task failed, naming the side and the cause; NULL if none. */
const char *softdoca_task_get_error_detail(const struct doca_task *task);
/* Why a connection broke or failed to establish; NULL if unknown. */
const char *softdoca_rdma_connection_get_error_detail(const struct doca_rdma_connection *conn);
/* Live softdoca objects of a kind ("connection", "link", "event", "listener",
 * "ctrl_frame"); -1 for an unknown kind. */
long softdoca_debug_live_objects(const char *kind);
/* A counter of softdoca's internals ("engine_provider_progress": the engine
 * thread's progress calls of the provider in use); -1 for an unknown name. */
long softdoca_debug_counter(const char *name);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SOFTDOCA_EXT_H_ */
