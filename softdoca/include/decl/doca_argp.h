typedef doca_error_t (*doca_argp_param_cb_t)(void *, void *);

typedef doca_error_t (*doca_argp_cmd_cb_t)(void *);

typedef doca_error_t (*doca_argp_dpdk_cb_t)(int argc, char **argv);

typedef doca_error_t (*doca_argp_validation_cb_t)(void *);

typedef doca_error_t (*doca_argp_dev_open_cb_t)(struct doca_devinfo *devinfo, void *usr_ctx, struct doca_dev **dev);

typedef doca_error_t (*doca_argp_logger_cb_t)(enum doca_log_level level, const char *format, va_list args);

enum doca_argp_type {
	DOCA_ARGP_TYPE_UNKNOWN = 0,
	DOCA_ARGP_TYPE_STRING,
	DOCA_ARGP_TYPE_INT,
	DOCA_ARGP_TYPE_BOOLEAN,
	DOCA_ARGP_TYPE_DEVICE,
	DOCA_ARGP_TYPE_DEVICE_REP,
	DOCA_ARGP_TYPE_DOUBLE,
};

struct doca_argp_param;

struct doca_argp_cmd;

struct doca_argp_device_ctx {
	struct doca_dev *dev;
	const char *devargs;
};

struct doca_argp_device_rep_ctx {
	struct doca_argp_device_ctx dev_ctx;
	struct doca_dev_rep *dev_rep;
};

void doca_argp_usage(void);

doca_error_t doca_argp_init(const char *program_name, void *program_config);

doca_error_t doca_argp_register_param(struct doca_argp_param *input_param);

doca_error_t doca_argp_register_cmd(struct doca_argp_cmd *input_cmd);

doca_error_t doca_argp_register_version_callback(doca_argp_param_cb_t callback);

doca_error_t doca_argp_register_validation_callback(doca_argp_validation_cb_t callback);

doca_error_t doca_argp_register_dev_open_callback(doca_argp_dev_open_cb_t callback, void *usr_ctx);

doca_error_t doca_argp_register_logger_callback(doca_argp_logger_cb_t callback);

doca_error_t doca_argp_disable_logger_callback(void);

doca_error_t doca_argp_start(int argc, char **argv);

doca_error_t doca_argp_destroy(void);

void doca_argp_set_dpdk_program(doca_argp_dpdk_cb_t callback);

doca_error_t doca_argp_param_create(struct doca_argp_param **param);

void doca_argp_param_set_short_name(struct doca_argp_param *param, const char *name);

void doca_argp_param_set_long_name(struct doca_argp_param *param, const char *name);

void doca_argp_param_set_arguments(struct doca_argp_param *param, const char *arguments);

void doca_argp_param_set_description(struct doca_argp_param *param, const char *description);

void doca_argp_param_set_callback(struct doca_argp_param *param, doca_argp_param_cb_t callback);

void doca_argp_param_set_type(struct doca_argp_param *param, enum doca_argp_type type);

void doca_argp_param_set_mandatory(struct doca_argp_param *param);

void doca_argp_param_set_cli_only(struct doca_argp_param *param);

void doca_argp_param_set_multiplicity(struct doca_argp_param *param);

void doca_argp_param_set_singular(struct doca_argp_param *param);

void doca_argp_param_set_inherited(struct doca_argp_param *param);

void doca_argp_param_set_hidden(struct doca_argp_param *param);

doca_error_t doca_argp_param_destroy(struct doca_argp_param *param);

doca_error_t doca_argp_cmd_create(struct doca_argp_cmd **cmd);

void doca_argp_cmd_set_name(struct doca_argp_cmd *cmd, const char *name);

void doca_argp_cmd_set_description(struct doca_argp_cmd *cmd, const char *description);

void doca_argp_cmd_set_callback(struct doca_argp_cmd *cmd, doca_argp_cmd_cb_t callback);

void doca_argp_cmd_set_hidden(struct doca_argp_cmd *cmd);

doca_error_t doca_argp_cmd_register_param(struct doca_argp_cmd *cmd, struct doca_argp_param *input_param);

doca_error_t doca_argp_cmd_register_cmd(struct doca_argp_cmd *cmd, struct doca_argp_cmd *input_cmd);

doca_error_t doca_argp_cmd_destroy(struct doca_argp_cmd *cmd);

doca_error_t doca_argp_get_log_level(int *log_level);

doca_error_t doca_argp_get_sdk_log_level(int *log_level);

doca_error_t doca_argp_disable_pedantic_config_parsing(void);
