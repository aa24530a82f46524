enum doca_log_level {
	DOCA_LOG_LEVEL_DISABLE = 10,
	DOCA_LOG_LEVEL_CRIT = 20,
	DOCA_LOG_LEVEL_ERROR = 30,
	DOCA_LOG_LEVEL_WARNING = 40,
	DOCA_LOG_LEVEL_INFO = 50,
	DOCA_LOG_LEVEL_DEBUG = 60,
	DOCA_LOG_LEVEL_TRACE = 70,
};

struct doca_log_backend;

doca_error_t doca_log_backend_set_sdk_level(struct doca_log_backend *backend, uint32_t level);

doca_error_t doca_log_backend_create_with_fd_sdk(int fd, struct doca_log_backend **backend);

doca_error_t doca_log_level_set_global_sdk_limit(uint32_t level);

uint32_t doca_log_level_get_global_sdk_limit(void);
