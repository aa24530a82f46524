doca_error_t doca_mmap_create(struct doca_mmap **mmap);
doca_error_t doca_mmap_destroy(struct doca_mmap *mmap);
doca_error_t doca_mmap_start(struct doca_mmap *mmap);
doca_error_t doca_mmap_stop(struct doca_mmap *mmap);
doca_error_t doca_mmap_add_dev(struct doca_mmap *mmap, struct doca_dev *dev);
doca_error_t doca_mmap_rm_dev(struct doca_mmap *mmap, struct doca_dev *dev);
doca_error_t doca_mmap_export_rdma(struct doca_mmap *mmap,
				   const struct doca_dev *dev,
				   const void **export_desc,
				   size_t *export_desc_len);
doca_error_t doca_mmap_create_from_export(const union doca_data *user_data,
					  const void *export_desc,
					  size_t export_desc_len,
					  struct doca_dev *dev,
					  struct doca_mmap **mmap);
doca_error_t doca_mmap_set_memrange(struct doca_mmap *mmap, void *addr, size_t len);
doca_error_t doca_mmap_get_memrange(const struct doca_mmap *mmap, void **addr, size_t *len);
doca_error_t doca_mmap_get_user_data(const struct doca_mmap *mmap, union doca_data *user_data);
doca_error_t doca_mmap_set_max_num_devices(struct doca_mmap *mmap, uint32_t max_num_devices);
doca_error_t doca_mmap_set_permissions(struct doca_mmap *mmap, uint32_t access_mask);
doca_error_t doca_mmap_set_user_data(struct doca_mmap *mmap, union doca_data user_data);
