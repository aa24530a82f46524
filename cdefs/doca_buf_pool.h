struct doca_mmap;
struct doca_buf;
struct doca_buf_pool;

doca_error_t doca_buf_pool_create(size_t num_elements,
				  size_t element_size,
				  const struct doca_mmap *mmap,
				  struct doca_buf_pool **buf_pool);
doca_error_t doca_buf_pool_destroy(struct doca_buf_pool *buf_pool);
doca_error_t doca_buf_pool_start(struct doca_buf_pool *buf_pool);
doca_error_t doca_buf_pool_stop(struct doca_buf_pool *buf_pool);
doca_error_t doca_buf_pool_buf_alloc(struct doca_buf_pool *buf_pool, struct doca_buf **buf);
doca_error_t doca_buf_pool_set_user_data(struct doca_buf_pool *buf_pool, union doca_data user_data);
doca_error_t doca_buf_pool_set_element_alignment(struct doca_buf_pool *buf_pool, size_t element_alignment);
doca_error_t doca_buf_pool_get_num_elements(const struct doca_buf_pool *buf_pool, uint32_t *num_of_elements);
doca_error_t doca_buf_pool_get_num_free_elements(const struct doca_buf_pool *buf_pool, uint32_t *num_of_free_elements);
doca_error_t doca_buf_pool_get_user_data(const struct doca_buf_pool *buf_pool, union doca_data *user_data);
doca_error_t doca_buf_pool_get_element_alignment(const struct doca_buf_pool *buf_pool, size_t *element_alignment);
