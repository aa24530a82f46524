#define DOCA_LOGGER_NAME_SIZE 256

struct doca_logger;

typedef void (*log_flush_callback)(char *buf);

uint32_t doca_log_get_max_num_backends(void);

doca_error_t doca_log_backend_set_level_lower_limit(struct doca_log_backend *backend, uint32_t level);

doca_error_t doca_log_backend_set_level_upper_limit(struct doca_log_backend *backend, uint32_t upper_limit);

doca_error_t doca_log_backend_set_level_lower_limit_strict(struct doca_log_backend *backend);

doca_error_t doca_log_backend_set_level_upper_limit_strict(struct doca_log_backend *backend);

doca_error_t doca_log_level_set_global_lower_limit(uint32_t level);

doca_error_t doca_log_level_set_global_upper_limit(uint32_t upper_limit);

uint32_t doca_log_level_get_global_lower_limit(void);

uint32_t doca_log_level_get_global_upper_limit(void);

doca_error_t doca_log_register_source(const char *source_name, int *source);

doca_error_t doca_log_unregister_source(int source);

doca_error_t doca_logger_create_list(const struct doca_logger *logger,
				     uint8_t depth,
				     struct doca_logger ***logger_list,
				     uint32_t *nb_loggers);

doca_error_t doca_logger_destroy_list(struct doca_logger **logger_list);

doca_error_t doca_logger_set_level(struct doca_logger *logger, int level, uint8_t propagate);

doca_error_t doca_logger_get_level(const struct doca_logger *logger, int *level);

doca_error_t doca_logger_get_name(const struct doca_logger *logger, char name[DOCA_LOGGER_NAME_SIZE]);

struct doca_logger *doca_logger_find_by_name(struct doca_logger **logger_list, const char *name);

doca_error_t doca_log_backend_create_with_file(FILE *fptr, struct doca_log_backend **backend);

doca_error_t doca_log_backend_create_with_fd(int fd, struct doca_log_backend **backend);

doca_error_t doca_log_backend_create_with_buf(char *buf,
					      size_t capacity,
					      log_flush_callback handler,
					      struct doca_log_backend **backend);

doca_error_t doca_log_backend_create_with_syslog(const char *name, struct doca_log_backend **backend);

uint32_t doca_log_get_max_num_backends_sdk(void);

doca_error_t doca_log_backend_create_with_file_sdk(FILE *fptr, struct doca_log_backend **backend);

doca_error_t doca_log_backend_create_with_buf_sdk(char *buf,
						  size_t capacity,
						  log_flush_callback handler,
						  struct doca_log_backend **backend);

doca_error_t doca_log_backend_create_with_syslog_sdk(const char *name, struct doca_log_backend **backend);

doca_error_t doca_log_backend_create_standard(void);

doca_error_t doca_log(uint32_t level, int source, const char *fname, int line, const char *func, const char *format, ...)
	__attribute__((format(printf, 6, 7)));

#define DOCA_LOG(level, format, ...) doca_log(level, log_source, __FILE__, __LINE__, __func__, format, ##__VA_ARGS__)

#define DOCA_LOG_CRIT(format, ...) DOCA_LOG(DOCA_LOG_LEVEL_CRIT, format, ##__VA_ARGS__)

#define DOCA_LOG_ERR(format, ...) DOCA_LOG(DOCA_LOG_LEVEL_ERROR, format, ##__VA_ARGS__)

#define DOCA_LOG_WARN(format, ...) DOCA_LOG(DOCA_LOG_LEVEL_WARNING, format, ##__VA_ARGS__)

#define DOCA_LOG_INFO(format, ...) DOCA_LOG(DOCA_LOG_LEVEL_INFO, format, ##__VA_ARGS__)

#define DOCA_LOG_DBG(format, ...) DOCA_LOG(DOCA_LOG_LEVEL_DEBUG, format, ##__VA_ARGS__)

#ifdef DOCA_LOGGING_ALLOW_TRACE
#define DOCA_LOG_TRC(format, ...) DOCA_LOG(DOCA_LOG_LEVEL_TRACE, format, ##__VA_ARGS__)
#else
#define DOCA_LOG_TRC(format, ...) \
	do { \
	} while (0)
#endif

#define DOCA_LOG_REGISTER(source) \
	static int log_source; \
	static void __attribute__((constructor(101), used)) doca_log_source_ctor_(void) \
	{ \
		doca_log_register_source(#source, &log_source); \
	}
