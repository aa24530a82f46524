struct doca_ctx;
struct doca_dev;
struct doca_devinfo;
struct doca_dpa;
struct doca_gpu;
struct doca_sync_event;
struct doca_sync_event_remote_net;
struct doca_dpa_sync_event;
struct doca_buf;

typedef uint64_t doca_dpa_dev_sync_event_t;
typedef uint64_t doca_dpa_dev_sync_event_remote_net_t;

struct doca_gpu_sync_event;

typedef uint64_t doca_gpu_dev_sync_event_t;
typedef uint64_t doca_gpu_dev_sync_event_remote_net_t;

struct doca_sync_event_task_get;
struct doca_sync_event_task_notify_set;
struct doca_sync_event_task_notify_add;
struct doca_sync_event_task_wait_eq;
struct doca_sync_event_task_wait_neq;

typedef void (*doca_sync_event_task_get_completion_cb_t)(struct doca_sync_event_task_get *task,
							 union doca_data task_user_data,
							 union doca_data ctx_user_data);

typedef void (*doca_sync_event_task_notify_set_completion_cb_t)(struct doca_sync_event_task_notify_set *task,
								union doca_data task_user_data,
								union doca_data ctx_user_data);

typedef void (*doca_sync_event_task_notify_add_completion_cb_t)(struct doca_sync_event_task_notify_add *task,
								union doca_data task_user_data,
								union doca_data ctx_user_data);

typedef void (*doca_sync_event_task_wait_eq_completion_cb_t)(struct doca_sync_event_task_wait_eq *task,
							     union doca_data task_user_data,
							     union doca_data ctx_user_data);

typedef void (*doca_sync_event_task_wait_neq_completion_cb_t)(struct doca_sync_event_task_wait_neq *task,
							      union doca_data task_user_data,
							      union doca_data ctx_user_data);

doca_error_t doca_sync_event_create(struct doca_sync_event **event);
doca_error_t doca_sync_event_create_from_export(struct doca_dev *dev,
						const uint8_t *data,
						size_t sz,
						struct doca_sync_event **event);
doca_error_t doca_sync_event_cap_is_create_from_export_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_remote_net_create_from_export(struct doca_dev *dev,
							   const uint8_t *data,
							   size_t sz,
							   struct doca_sync_event_remote_net **event);
doca_error_t doca_sync_event_cap_remote_net_is_create_from_export_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_destroy(struct doca_sync_event *event);
doca_error_t doca_sync_event_remote_net_destroy(struct doca_sync_event_remote_net *event);
doca_error_t doca_sync_event_add_publisher_location_cpu(struct doca_sync_event *event, struct doca_dev *dev);
doca_error_t doca_sync_event_add_publisher_location_dpa(struct doca_sync_event *event, struct doca_dpa *dpa);
doca_error_t doca_sync_event_add_publisher_location_gpu(struct doca_sync_event *event, struct doca_gpu *gpu);
doca_error_t doca_sync_event_add_publisher_location_remote_pci(struct doca_sync_event *event);
doca_error_t doca_sync_event_add_publisher_location_remote_net(struct doca_sync_event *event);
doca_error_t doca_sync_event_add_subscriber_location_cpu(struct doca_sync_event *event, struct doca_dev *dev);
doca_error_t doca_sync_event_add_subscriber_location_dpa(struct doca_sync_event *event, struct doca_dpa *dpa);
doca_error_t doca_sync_event_add_subscriber_location_gpu(struct doca_sync_event *event, struct doca_gpu *gpu);
doca_error_t doca_sync_event_add_subscriber_location_remote_pci(struct doca_sync_event *event);
doca_error_t doca_sync_event_set_addr(struct doca_sync_event *event, uint64_t *addr);
doca_error_t doca_sync_event_set_doca_buf(struct doca_sync_event *event, struct doca_buf *buf);
doca_error_t doca_sync_event_start(struct doca_sync_event *event);
doca_error_t doca_sync_event_stop(struct doca_sync_event *event);
struct doca_ctx *doca_sync_event_as_ctx(struct doca_sync_event *event);
doca_error_t doca_sync_event_cap_task_get_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_task_get_set_conf(struct doca_sync_event *event,
					       doca_sync_event_task_get_completion_cb_t completion_cb,
					       doca_sync_event_task_get_completion_cb_t error_cb,
					       uint32_t num_tasks);
doca_error_t doca_sync_event_task_get_alloc_init(struct doca_sync_event *event,
						 uint64_t *ret_val_ptr,
						 union doca_data user_data,
						 struct doca_sync_event_task_get **task);
struct doca_task *doca_sync_event_task_get_as_doca_task(struct doca_sync_event_task_get *task);
void doca_sync_event_task_get_set_ret_val_ptr(struct doca_sync_event_task_get *task, uint64_t *ret_val_ptr);
uint64_t *doca_sync_event_task_get_get_ret_val_ptr(const struct doca_sync_event_task_get *task);
doca_error_t doca_sync_event_cap_task_notify_set_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_task_notify_set_set_conf(struct doca_sync_event *event,
						      doca_sync_event_task_notify_set_completion_cb_t completion_cb,
						      doca_sync_event_task_notify_set_completion_cb_t error_cb,
						      uint32_t num_tasks);
doca_error_t doca_sync_event_task_notify_set_alloc_init(struct doca_sync_event *event,
							uint64_t set_val,
							union doca_data user_data,
							struct doca_sync_event_task_notify_set **task);
struct doca_task *doca_sync_event_task_notify_set_as_doca_task(struct doca_sync_event_task_notify_set *task);
void doca_sync_event_task_notify_set_set_set_val(struct doca_sync_event_task_notify_set *task, uint64_t set_val);
uint64_t doca_sync_event_task_notify_set_get_set_val(const struct doca_sync_event_task_notify_set *task);
doca_error_t doca_sync_event_cap_task_notify_add_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_task_notify_add_set_conf(struct doca_sync_event *event,
						      doca_sync_event_task_notify_add_completion_cb_t completion_cb,
						      doca_sync_event_task_notify_add_completion_cb_t error_cb,
						      uint32_t num_tasks);
doca_error_t doca_sync_event_task_notify_add_alloc_init(struct doca_sync_event *event,
							uint64_t inc_val,
							uint64_t *fetched_val_ptr,
							union doca_data user_data,
							struct doca_sync_event_task_notify_add **task);
struct doca_task *doca_sync_event_task_notify_add_as_doca_task(struct doca_sync_event_task_notify_add *task);
void doca_sync_event_task_notify_add_set_inc_val(struct doca_sync_event_task_notify_add *task, uint64_t inc_val);
uint64_t doca_sync_event_task_notify_add_get_inc_val(const struct doca_sync_event_task_notify_add *task);
void doca_sync_event_task_notify_add_set_fetched_val_ptr(struct doca_sync_event_task_notify_add *task,
							 uint64_t *fetched_val_ptr);
uint64_t *doca_sync_event_task_notify_add_get_fetched_val_ptr(const struct doca_sync_event_task_notify_add *task);
doca_error_t doca_sync_event_cap_task_wait_eq_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_task_wait_eq_set_conf(struct doca_sync_event *event,
						   doca_sync_event_task_wait_eq_completion_cb_t completion_cb,
						   doca_sync_event_task_wait_eq_completion_cb_t error_cb,
						   uint32_t num_tasks);
doca_error_t doca_sync_event_task_wait_eq_alloc_init(struct doca_sync_event *event,
						     uint64_t wait_val,
						     uint64_t mask,
						     union doca_data user_data,
						     struct doca_sync_event_task_wait_eq **task);
struct doca_task *doca_sync_event_task_wait_eq_as_doca_task(struct doca_sync_event_task_wait_eq *task);
void doca_sync_event_task_wait_eq_set_wait_val(struct doca_sync_event_task_wait_eq *task, uint64_t wait_val);
uint64_t doca_sync_event_task_wait_eq_get_wait_val(const struct doca_sync_event_task_wait_eq *task);
void doca_sync_event_task_wait_eq_set_mask(struct doca_sync_event_task_wait_eq *task, uint64_t mask);
uint64_t doca_sync_event_task_wait_eq_get_mask(const struct doca_sync_event_task_wait_eq *task);
doca_error_t doca_sync_event_cap_task_wait_neq_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_task_wait_neq_set_conf(struct doca_sync_event *event,
						    doca_sync_event_task_wait_neq_completion_cb_t completion_cb,
						    doca_sync_event_task_wait_neq_completion_cb_t error_cb,
						    uint32_t num_tasks);
doca_error_t doca_sync_event_task_wait_neq_alloc_init(struct doca_sync_event *event,
						      uint64_t wait_val,
						      uint64_t mask,
						      union doca_data user_data,
						      struct doca_sync_event_task_wait_neq **task);
struct doca_task *doca_sync_event_task_wait_neq_as_doca_task(struct doca_sync_event_task_wait_neq *task);
void doca_sync_event_task_wait_neq_set_wait_val(struct doca_sync_event_task_wait_neq *task, uint64_t wait_val);
uint64_t doca_sync_event_task_wait_neq_get_wait_val(const struct doca_sync_event_task_wait_neq *task);
void doca_sync_event_task_wait_neq_set_mask(struct doca_sync_event_task_wait_neq *task, uint64_t mask);
uint64_t doca_sync_event_task_wait_neq_get_mask(const struct doca_sync_event_task_wait_neq *task);
doca_error_t doca_sync_event_export_to_remote_pci(struct doca_sync_event *event,
						  struct doca_dev *dev,
						  const uint8_t **data,
						  size_t *sz);
doca_error_t doca_sync_event_cap_is_export_to_remote_pci_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_get_dpa_handle(struct doca_sync_event *event,
					    struct doca_dpa *dpa,
					    doca_dpa_dev_sync_event_t *dpa_dev_se_handle);
doca_error_t doca_sync_event_cap_is_export_to_dpa_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_get_gpu_handle(struct doca_sync_event *event,
					    struct doca_gpu *gpu,
					    doca_gpu_dev_sync_event_t **gpu_dev_se);
doca_error_t doca_sync_event_cap_is_export_to_gpu_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_export_to_remote_net(struct doca_sync_event *event, const uint8_t **data, size_t *sz);
doca_error_t doca_sync_event_cap_is_export_to_remote_net_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_remote_net_get_dpa_handle(struct doca_sync_event_remote_net *event,
						       struct doca_dpa *dpa,
						       doca_dpa_dev_sync_event_remote_net_t *dpa_remote_event);
doca_error_t doca_sync_event_cap_remote_net_is_export_to_dpa_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_remote_net_get_gpu_handle(struct doca_sync_event_remote_net *event,
						       struct doca_gpu *gpu,
						       doca_gpu_dev_sync_event_remote_net_t *gpu_remote_event);
doca_error_t doca_sync_event_cap_remote_net_is_export_to_gpu_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_get(struct doca_sync_event *event, uint64_t *value);
doca_error_t doca_sync_event_update_add(struct doca_sync_event *event, uint64_t value, uint64_t *fetched);
doca_error_t doca_sync_event_update_set(struct doca_sync_event *event, uint64_t value);
doca_error_t doca_sync_event_wait_gt(struct doca_sync_event *event, uint64_t value, uint64_t mask);
doca_error_t doca_sync_event_wait_gt_yield(struct doca_sync_event *event, uint64_t value, uint64_t mask);
doca_error_t doca_sync_event_wait_eq(struct doca_sync_event *event, uint64_t value, uint64_t mask);
doca_error_t doca_sync_event_wait_eq_yield(struct doca_sync_event *event, uint64_t value, uint64_t mask);
doca_error_t doca_sync_event_wait_neq(struct doca_sync_event *event, uint64_t value, uint64_t mask);
doca_error_t doca_sync_event_wait_neq_yield(struct doca_sync_event *event, uint64_t value, uint64_t mask);
