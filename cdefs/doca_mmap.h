typedef uint32_t doca_dpa_dev_mmap_t;
typedef void(doca_mmap_memrange_free_cb_t)(void *addr, size_t len, void *cookie);

doca_error_t doca_mmap_create(struct doca_mmap **mmap);
doca_error_t doca_mmap_destroy(struct doca_mmap *mmap);
doca_error_t doca_mmap_start(struct doca_mmap *mmap);
doca_error_t doca_mmap_stop(struct doca_mmap *mmap);
doca_error_t doca_mmap_add_dev(struct doca_mmap *mmap, struct doca_dev *dev);
doca_error_t doca_mmap_rm_dev(struct doca_mmap *mmap, struct doca_dev *dev);
doca_error_t doca_mmap_export_pci(struct doca_mmap *mmap,
				  const struct doca_dev *dev,
				  const void **export_desc,
				  size_t *export_desc_len);
doca_error_t doca_mmap_export_rdma(struct doca_mmap *mmap,
				   const struct doca_dev *dev,
				   const void **export_desc,
				   size_t *export_desc_len);
doca_error_t doca_mmap_dev_get_dpa_handle(struct doca_mmap *mmap,
					  const struct doca_dev *dev,
					  doca_dpa_dev_mmap_t *dpa_mmap_handle);
doca_error_t doca_mmap_create_from_export(const union doca_data *user_data,
					  const void *export_desc,
					  size_t export_desc_len,
					  struct doca_dev *dev,
					  struct doca_mmap **mmap);
doca_error_t doca_mmap_set_memrange(struct doca_mmap *mmap, void *addr, size_t len);
doca_error_t doca_mmap_set_dmabuf_memrange(struct doca_mmap *mmap,
					   int dmabuf_fd,
					   void *addr,
					   size_t dmabuf_offset,
					   size_t len);
doca_error_t doca_mmap_set_dpa_memrange(struct doca_mmap *mmap, struct doca_dpa *dpa, uint64_t dpa_addr, size_t len);
doca_error_t doca_mmap_get_memrange(const struct doca_mmap *mmap, void **addr, size_t *len);
doca_error_t doca_mmap_set_free_cb(struct doca_mmap *mmap, doca_mmap_memrange_free_cb_t *free_cb, void *opaque);
doca_error_t doca_mmap_get_user_data(const struct doca_mmap *mmap, union doca_data *user_data);
doca_error_t doca_mmap_get_max_num_devices(const struct doca_mmap *mmap, uint32_t *max_num_devices);
doca_error_t doca_mmap_get_mkey(const struct doca_mmap *mmap, const struct doca_dev *dev, uint32_t *mkey);
doca_error_t doca_mmap_get_num_bufs(const struct doca_mmap *mmap, uint32_t *num_bufs);
doca_error_t doca_mmap_get_exported(const struct doca_mmap *mmap, uint8_t *exported);
doca_error_t doca_mmap_get_from_export(const struct doca_mmap *mmap, uint8_t *from_export);
doca_error_t doca_mmap_set_max_num_devices(struct doca_mmap *mmap, uint32_t max_num_devices);
doca_error_t doca_mmap_set_permissions(struct doca_mmap *mmap, uint32_t access_mask);
doca_error_t doca_mmap_set_user_data(struct doca_mmap *mmap, union doca_data user_data);
doca_error_t doca_mmap_set_export_access_token(struct doca_mmap *mmap,
					       const struct doca_dev *dev,
					       const uint8_t *token,
					       size_t token_sz);
doca_error_t doca_mmap_cap_is_export_pci_supported(const struct doca_devinfo *devinfo, uint8_t *mmap_export);
doca_error_t doca_mmap_cap_is_create_from_export_pci_supported(const struct doca_devinfo *devinfo,
							       uint8_t *from_export);
doca_error_t doca_mmap_cap_get_max_export_access_token_size(const struct doca_devinfo *devinfo, size_t *max_sz);
doca_error_t doca_mmap_enable_thread_safety(struct doca_mmap *mmap);
