/* Generic DOCA context: the state machine and its state-changed callbacks.
 * Transitions are recorded when they happen and reported to the user only
 * from doca_pe_progress. */
#include "internal.h"

#include <string.h>

static int ctx_live(const struct doca_ctx *ctx)
{
	return ctx && sd_handle_live_kind(ctx, SD_H_CTX);
}

#define CHECK_CTX(ctx) SD_CHECK_HANDLE(ctx, ctx_live)

doca_error_t sd_ctx_init(struct doca_ctx *ctx, const struct sd_ctx_ops *ops, void *impl)
{
	if (!ctx || !ops)
		return DOCA_ERROR_INVALID_VALUE;
	ctx->ops = ops;
	ctx->impl = impl;
	ctx->pe = NULL;
	ctx->state = DOCA_CTX_STATE_IDLE;
	ctx->user_data.u64 = 0;
	ctx->state_cb = NULL;
	atomic_init(&ctx->inflight, 0);
	ctx->stop_requested = 0;
	ctx->pe_next = NULL;
	ctx->pending_head = ctx->pending_count = 0;
	ctx->comp_vector = 0;
	if (sd_handle_add_kind(ctx, SD_H_CTX) != 0)
		return DOCA_ERROR_NO_MEMORY;
	return DOCA_SUCCESS;
}

void sd_ctx_fini(struct doca_ctx *ctx)
{
	struct doca_pe *pe;

	if (!ctx)
		return;
	pe = ctx->pe;
	if (pe && sd_handle_live_kind(pe, SD_H_PE)) {
		pthread_mutex_lock(&pe->lock);
		for (struct doca_ctx **pp = &pe->ctxs; *pp; pp = &(*pp)->pe_next) {
			if (*pp == ctx) {
				*pp = ctx->pe_next;
				break;
			}
		}
		/* drop undelivered completions of this ctx's tasks */
		struct doca_task **tp = &pe->cq_head;
		pe->cq_tail = NULL;
		while (*tp) {
			if ((*tp)->ctx == ctx) {
				*tp = (*tp)->cq_next;
			} else {
				pe->cq_tail = *tp;
				tp = &(*tp)->cq_next;
			}
		}
		pthread_mutex_unlock(&pe->lock);
	}
	ctx->pe = NULL;
	ctx->pe_next = NULL;
	sd_handle_del(ctx);
}

/* Caller holds ctx->pe->lock (or the ctx is not connected). */
static void queue_state_locked(struct doca_ctx *ctx, enum doca_ctx_states next)
{
	if (ctx->pending_count == SD_CTX_MAX_PENDING) {
		SD_WARN("ctx %p: too many unreported state changes, dropping the oldest", (void *)ctx);
		ctx->pending_head = (ctx->pending_head + 1) % SD_CTX_MAX_PENDING;
		ctx->pending_count--;
	}
	unsigned int slot = (ctx->pending_head + ctx->pending_count) % SD_CTX_MAX_PENDING;
	ctx->pending[slot].prev = (uint8_t)ctx->state;
	ctx->pending[slot].next = (uint8_t)next;
	ctx->pending_count++;
	ctx->state = next;
}

void sd_ctx_set_state(struct doca_ctx *ctx, enum doca_ctx_states next)
{
	struct doca_pe *pe = ctx->pe;

	if (!pe) {
		ctx->state = next;
		return;
	}
	pthread_mutex_lock(&pe->lock);
	queue_state_locked(ctx, next);
	pthread_mutex_unlock(&pe->lock);
	sd_pe_wake(pe);
}

/* Deliver queued state callbacks. Returns the number delivered, or -1 if the
 * ctx was destroyed or disconnected by a callback. */
static int deliver_states(struct doca_ctx *ctx, struct doca_pe *pe)
{
	int n = 0;

	for (;;) {
		uint8_t prev, next;

		pthread_mutex_lock(&pe->lock);
		if (ctx->pending_count == 0) {
			pthread_mutex_unlock(&pe->lock);
			return n;
		}
		prev = ctx->pending[ctx->pending_head].prev;
		next = ctx->pending[ctx->pending_head].next;
		ctx->pending_head = (ctx->pending_head + 1) % SD_CTX_MAX_PENDING;
		ctx->pending_count--;
		pthread_mutex_unlock(&pe->lock);
		n++;
		if (ctx->state_cb) {
			ctx->state_cb(ctx->user_data, ctx, (enum doca_ctx_states)prev,
				      (enum doca_ctx_states)next);
			if (!ctx_live(ctx) || ctx->pe != pe)
				return -1;
		}
	}
}

int sd_ctx_progress_phase(struct doca_ctx *ctx, int run_ops)
{
	struct doca_pe *pe = ctx->pe;
	int n = 0, r;

	if (!pe)
		return 0;
	r = deliver_states(ctx, pe);
	if (r < 0)
		return 1;
	n += r;
	if (ctx->state == DOCA_CTX_STATE_STARTING && ctx->ops->start_done && ctx->ops->start_done(ctx)) {
		sd_ctx_set_state(ctx, DOCA_CTX_STATE_RUNNING);
		n++;
	}
	if (run_ops && ctx->ops->progress && ctx->state != DOCA_CTX_STATE_IDLE) {
		n += ctx->ops->progress(ctx);
		if (!ctx_live(ctx) || ctx->pe != pe)
			return n ? n : 1;
	}
	if (ctx->state == DOCA_CTX_STATE_STOPPING && atomic_load(&ctx->inflight) == 0) {
		sd_ctx_set_state(ctx, DOCA_CTX_STATE_IDLE);
		ctx->stop_requested = 0;
		if (ctx->ops->stopped)
			ctx->ops->stopped(ctx);
		n++;
	}
	r = deliver_states(ctx, pe);
	if (r > 0)
		n += r;
	else if (r < 0)
		n++;
	return n;
}

int sd_ctx_progress(struct doca_ctx *ctx)
{
	return ctx ? sd_ctx_progress_phase(ctx, 1) : 0;
}

SD_EXPORT doca_error_t doca_ctx_start(struct doca_ctx *ctx)
{
	doca_error_t rc;

	CHECK_CTX(ctx);
	/* doca_ctx.h: NOT_CONNECTED without a pe. A ctx that is not idle has no
	 * code in the header: BAD_STATE (docs/softdoca-contract.md). */
	if (ctx->state != DOCA_CTX_STATE_IDLE)
		return DOCA_ERROR_BAD_STATE;
	if (!ctx->pe)
		return DOCA_ERROR_NOT_CONNECTED;
	if (ctx->ops->start) {
		rc = ctx->ops->start(ctx);
		if (rc != DOCA_SUCCESS)
			return rc;
	}
	ctx->stop_requested = 0;
	sd_ctx_set_state(ctx, DOCA_CTX_STATE_STARTING);
	if (ctx->ops->start_done && !ctx->ops->start_done(ctx))
		return DOCA_ERROR_IN_PROGRESS;
	sd_ctx_set_state(ctx, DOCA_CTX_STATE_RUNNING);
	return DOCA_SUCCESS;
}

/* DOCA's doca_ctx_stop lists no BAD_STATE: stopping an idle ctx (never
 * started, or already stopped, e.g. from its RUNNING state callback) is a
 * no-op that succeeds, and teardown code relies on it. Called from one of
 * this ctx's task completion callbacks, the stop cannot finish while that
 * task is being retired: STOPPING and DOCA_ERROR_IN_PROGRESS, IDLE once the
 * callback has returned (sd_ctx_progress_phase, same doca_pe_progress). */
SD_EXPORT doca_error_t doca_ctx_stop(struct doca_ctx *ctx)
{
	CHECK_CTX(ctx);
	if (ctx->state == DOCA_CTX_STATE_IDLE)
		return DOCA_SUCCESS;
	if (ctx->state == DOCA_CTX_STATE_STOPPING)
		return DOCA_ERROR_IN_PROGRESS;
	ctx->stop_requested = 1;
	sd_ctx_set_state(ctx, DOCA_CTX_STATE_STOPPING);
	if (ctx->ops->stop)
		ctx->ops->stop(ctx);
	if (atomic_load(&ctx->inflight) != 0 || sd_cb_ctx == ctx)
		return DOCA_ERROR_IN_PROGRESS;
	sd_ctx_set_state(ctx, DOCA_CTX_STATE_IDLE);
	ctx->stop_requested = 0;
	if (ctx->ops->stopped)
		ctx->ops->stopped(ctx);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_ctx_get_num_inflight_tasks(const struct doca_ctx *ctx, size_t *num_inflight_tasks)
{
	CHECK_CTX(ctx);
	if (!num_inflight_tasks)
		return DOCA_ERROR_INVALID_VALUE;
	*num_inflight_tasks = atomic_load(&((struct doca_ctx *)ctx)->inflight);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_ctx_set_user_data(struct doca_ctx *ctx, union doca_data user_data)
{
	CHECK_CTX(ctx);
	ctx->user_data = user_data;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_ctx_get_user_data(const struct doca_ctx *ctx, union doca_data *user_data)
{
	CHECK_CTX(ctx);
	if (!user_data)
		return DOCA_ERROR_INVALID_VALUE;
	*user_data = ctx->user_data;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_ctx_set_state_changed_cb(struct doca_ctx *ctx, doca_ctx_state_changed_callback_t cb)
{
	CHECK_CTX(ctx);
	if (ctx->state != DOCA_CTX_STATE_IDLE)
		return DOCA_ERROR_BAD_STATE;
	ctx->state_cb = cb;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_ctx_get_state(const struct doca_ctx *ctx, enum doca_ctx_states *state)
{
	CHECK_CTX(ctx);
	if (!state)
		return DOCA_ERROR_INVALID_VALUE;
	*state = ctx->state;
	return DOCA_SUCCESS;
}

SD_EXPORT void doca_ctx_flush_tasks(struct doca_ctx *ctx)
{
	if (!ctx_live(ctx))
		return;
	if (ctx->ops->flush)
		ctx->ops->flush(ctx);
}

/* ---------------------------------------------------------------- DOCA 3.3 additions */

/* Validation shared by the setters below: DOCA allows them on an idle ctx only. */
static doca_error_t idle_ctx(const struct doca_ctx *ctx)
{
	CHECK_CTX(ctx);
	return ctx->state == DOCA_CTX_STATE_IDLE ? DOCA_SUCCESS : DOCA_ERROR_BAD_STATE;
}

/* No GPU data path in softdoca (no DOCA GPUNetIO). */
SD_EXPORT doca_error_t doca_ctx_set_datapath_on_gpu(struct doca_ctx *ctx, struct doca_gpu *gpu_dev)
{
	doca_error_t rc;

	if (!gpu_dev)
		return DOCA_ERROR_INVALID_VALUE;
	rc = idle_ctx(ctx);
	return rc != DOCA_SUCCESS ? rc : DOCA_ERROR_NOT_SUPPORTED;
}

/* No DPA in softdoca. */
SD_EXPORT doca_error_t doca_ctx_set_datapath_on_dpa(struct doca_ctx *ctx, struct doca_dpa *dpa_dev)
{
	doca_error_t rc;

	if (!dpa_dev)
		return DOCA_ERROR_INVALID_VALUE;
	rc = idle_ctx(ctx);
	return rc != DOCA_SUCCESS ? rc : DOCA_ERROR_NOT_SUPPORTED;
}

/* A soft device has SD_NUM_COMP_VECTORS completion vectors (one engine thread
 * completes every task): valid vectors are 0 .. SD_NUM_COMP_VECTORS - 1. */
SD_EXPORT doca_error_t doca_ctx_set_completion_vector(struct doca_ctx *ctx, uint32_t comp_vector)
{
	doca_error_t rc = idle_ctx(ctx);

	if (rc != DOCA_SUCCESS)
		return rc;
	if (comp_vector >= SD_NUM_COMP_VECTORS)
		return DOCA_ERROR_INVALID_VALUE;
	ctx->comp_vector = comp_vector;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_ctx_cap_get_num_completion_vectors(const struct doca_devinfo *devinfo,
							       uint32_t *num_comp_vectors)
{
	if (!devinfo || !num_comp_vectors)
		return DOCA_ERROR_INVALID_VALUE;
	*num_comp_vectors = SD_NUM_COMP_VECTORS;
	return DOCA_SUCCESS;
}

/* NVTX range profiling: softdoca is built without NVTX (DOCA: NOT_SUPPORTED
 * when profiling is not enabled). */
SD_EXPORT doca_error_t doca_ctx_profiler_set_max_nranges(struct doca_ctx *ctx, uint8_t num_ranges)
{
	doca_error_t rc = idle_ctx(ctx);

	if (rc != DOCA_SUCCESS)
		return rc;
	if (num_ranges == 0)
		return DOCA_ERROR_INVALID_VALUE;
	return DOCA_ERROR_NOT_SUPPORTED;
}
