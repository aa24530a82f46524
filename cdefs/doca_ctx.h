enum doca_ctx_states {
	DOCA_CTX_STATE_IDLE = 0,
	DOCA_CTX_STATE_STARTING = 1,
	DOCA_CTX_STATE_RUNNING = 2,
	DOCA_CTX_STATE_STOPPING = 3,
};

typedef void (*doca_ctx_state_changed_callback_t)(const union doca_data user_data,
						  struct doca_ctx *ctx,
						  enum doca_ctx_states prev_state,
						  enum doca_ctx_states next_state);

doca_error_t doca_ctx_start(struct doca_ctx *ctx);
doca_error_t doca_ctx_stop(struct doca_ctx *ctx);
doca_error_t doca_ctx_get_num_inflight_tasks(const struct doca_ctx *ctx, size_t *num_inflight_tasks);
doca_error_t doca_ctx_set_user_data(struct doca_ctx *ctx, union doca_data user_data);
doca_error_t doca_ctx_get_user_data(const struct doca_ctx *ctx, union doca_data *user_data);
doca_error_t doca_ctx_set_state_changed_cb(struct doca_ctx *ctx, doca_ctx_state_changed_callback_t cb);
doca_error_t doca_ctx_get_state(const struct doca_ctx *ctx, enum doca_ctx_states *state);
void doca_ctx_flush_tasks(struct doca_ctx *ctx);
