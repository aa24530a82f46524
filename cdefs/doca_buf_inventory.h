doca_error_t doca_buf_inventory_create(size_t num_elements, struct doca_buf_inventory **inventory);
doca_error_t doca_buf_inventory_destroy(struct doca_buf_inventory *inventory);
doca_error_t doca_buf_inventory_start(struct doca_buf_inventory *inventory);
doca_error_t doca_buf_inventory_stop(struct doca_buf_inventory *inventory);
doca_error_t doca_buf_inventory_buf_get_by_args(struct doca_buf_inventory *inventory,
						struct doca_mmap *mmap,
						void *addr,
						size_t len,
						void *data,
						size_t data_len,
						struct doca_buf **buf);
doca_error_t doca_buf_inventory_buf_reuse_by_args(struct doca_buf *buf,
						  void *addr,
						  size_t len,
						  void *data,
						  size_t data_len);
doca_error_t doca_buf_inventory_buf_dup(struct doca_buf_inventory *inventory,
					const struct doca_buf *src_buf,
					struct doca_buf **dst_buf);
doca_error_t doca_buf_inventory_set_user_data(struct doca_buf_inventory *inventory, union doca_data user_data);
doca_error_t doca_buf_inventory_get_num_elements(const struct doca_buf_inventory *inventory, uint32_t *num_of_elements);
doca_error_t doca_buf_inventory_get_num_free_elements(const struct doca_buf_inventory *inventory,
						      uint32_t *num_of_free_elements);
doca_error_t doca_buf_inventory_get_user_data(const struct doca_buf_inventory *inventory, union doca_data *user_data);
doca_error_t doca_buf_inventory_expand(struct doca_buf_inventory *inventory, uint32_t num_elements);
