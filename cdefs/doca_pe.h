enum doca_task_batch_max_tasks_number {
	DOCA_TASK_BATCH_MAX_TASKS_NUMBER_16 = 0,
	DOCA_TASK_BATCH_MAX_TASKS_NUMBER_32 = 1,
	DOCA_TASK_BATCH_MAX_TASKS_NUMBER_64 = 2,
	DOCA_TASK_BATCH_MAX_TASKS_NUMBER_128 = 3,
};

enum doca_event_batch_events_number {
	DOCA_EVENT_BATCH_EVENTS_NUMBER_1 = 0,
	DOCA_EVENT_BATCH_EVENTS_NUMBER_2 = 1,
	DOCA_EVENT_BATCH_EVENTS_NUMBER_4 = 2,
	DOCA_EVENT_BATCH_EVENTS_NUMBER_8 = 3,
	DOCA_EVENT_BATCH_EVENTS_NUMBER_16 = 4,
	DOCA_EVENT_BATCH_EVENTS_NUMBER_32 = 5,
	DOCA_EVENT_BATCH_EVENTS_NUMBER_64 = 6,
	DOCA_EVENT_BATCH_EVENTS_NUMBER_128 = 7,
};

enum doca_task_submit_flag {
	DOCA_TASK_SUBMIT_FLAG_NONE = 0,
	DOCA_TASK_SUBMIT_FLAG_FLUSH = 1,
	DOCA_TASK_SUBMIT_FLAG_OPTIMIZE_REPORTS = 2,
	DOCA_TASK_SUBMIT_FLAG_RANGE_PROFILING_REQUESTED = 4,
	DOCA_TASK_SUBMIT_FLAG_RANGE_PROFILING_PROCESSED = 8,
};

enum doca_pe_event_mode {
	DOCA_PE_EVENT_MODE_PROGRESS_SELECTIVE = 0,
	DOCA_PE_EVENT_MODE_PROGRESS_ALL = 1,
};

typedef void (*doca_task_completion_cb_t)(struct doca_task *task,
					  union doca_data task_user_data,
					  union doca_data ctx_user_data);

doca_error_t doca_pe_create(struct doca_pe **pe);
doca_error_t doca_pe_destroy(struct doca_pe *pe);
uint8_t doca_pe_progress(struct doca_pe *pe);
doca_error_t doca_pe_get_notification_handle(const struct doca_pe *pe, doca_notification_handle_t *handle);
doca_error_t doca_pe_clear_notification(struct doca_pe *pe, doca_notification_handle_t handle);
doca_error_t doca_pe_request_notification(struct doca_pe *pe);
doca_error_t doca_pe_get_num_inflight_tasks(const struct doca_pe *pe, size_t *num_inflight_tasks);
doca_error_t doca_task_submit(struct doca_task *task);
doca_error_t doca_task_submit_ex(struct doca_task *task, uint32_t flags);
doca_error_t doca_task_batch_submit(struct doca_task_batch *task_batch);
doca_error_t doca_task_try_submit(struct doca_task *task);
doca_error_t doca_task_batch_try_submit(struct doca_task_batch *task_batch);
void doca_task_free(struct doca_task *task);
void doca_task_batch_free(struct doca_task_batch *task_batch);
doca_error_t doca_task_get_status(const struct doca_task *task);
doca_error_t doca_task_batch_get_status(const struct doca_task_batch *task_batch);
void doca_task_set_user_data(struct doca_task *task, union doca_data user_data);
void doca_task_batch_set_user_data(struct doca_task_batch *task_batch, union doca_data user_data);
union doca_data doca_task_get_user_data(const struct doca_task *task);
union doca_data doca_task_batch_get_user_data(const struct doca_task_batch *task_batch);
struct doca_ctx *doca_task_get_ctx(const struct doca_task *task);
struct doca_ctx *doca_task_batch_get_ctx(const struct doca_task_batch *task_batch);
union doca_data doca_task_batch_get_ctx_user_data(const struct doca_task_batch *task_batch);
uint16_t doca_task_batch_get_tasks_num(struct doca_task_batch *task_batch);
doca_error_t doca_pe_connect_ctx(struct doca_pe *pe, struct doca_ctx *ctx);
doca_error_t doca_pe_set_event_mode(struct doca_pe *pe, enum doca_pe_event_mode event_mode);
