/*
 * doca_argp: the program-facing argument parser (libdoca_argp).
 *
 * Program flags are registered as doca_argp_param objects (short and/or long
 * name, type, callback); doca_argp_start parses argv, calls each flag's
 * callback with a pointer to the parsed value and the program config, checks
 * mandatory flags, then calls the validation callback. Commands
 * (doca_argp_cmd) select a sub-tree of flags by a positional word. The DOCA
 * flags every program gets: -h/--help, -v/--version, -l/--log-level,
 * --sdk-log-level, -j/--json (flat JSON object: {"long-name": value, ...}).
 * Errors are reported through the registered logger callback or on stderr.
 */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#pragma GCC visibility push(default)
#include "decl/doca_log.h"
#include "decl/doca_argp.h"
#pragma GCC visibility pop

struct doca_argp_param {
	char *short_name, *long_name, *arguments, *description;
	doca_argp_param_cb_t cb;
	enum doca_argp_type type;
	int mandatory, cli_only, multi, singular, inherited, hidden;
	int registered, seen;
	struct doca_argp_param *next;
};

struct doca_argp_cmd {
	char *name, *description;
	doca_argp_cmd_cb_t cb;
	int hidden, registered;
	struct doca_argp_param *params;
	struct doca_argp_cmd *cmds, *next, *parent;
};

static struct {
	int initialized;
	char *program;
	void *config;
	struct doca_argp_cmd root;
	doca_argp_param_cb_t version_cb;
	doca_argp_validation_cb_t validation_cb;
	doca_argp_dev_open_cb_t dev_open_cb;
	void *dev_open_ctx;
	doca_argp_logger_cb_t logger_cb;
	doca_argp_dpdk_cb_t dpdk_cb;
	int log_level_set, log_level, sdk_level_set, sdk_level;
	int pedantic;
	struct doca_argp_cmd *selected;
} g;

static void argp_log(enum doca_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void argp_log(enum doca_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (g.logger_cb) {
		g.logger_cb(level, fmt, ap);
	} else {
		fprintf(stderr, "%s: ", g.program ? g.program : "doca_argp");
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
	}
	va_end(ap);
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

static void param_free(struct doca_argp_param *p)
{
	free(p->short_name);
	free(p->long_name);
	free(p->arguments);
	free(p->description);
	free(p);
}

static void cmd_free(struct doca_argp_cmd *c)
{
	struct doca_argp_param *p, *pn;
	struct doca_argp_cmd *k, *kn;

	for (p = c->params; p; p = pn) {
		pn = p->next;
		param_free(p);
	}
	for (k = c->cmds; k; k = kn) {
		kn = k->next;
		cmd_free(k);
	}
	free(c->name);
	free(c->description);
	if (c != &g.root)
		free(c);
}

/* ---------------------------------------------------------------- params */
SD_EXPORT doca_error_t doca_argp_param_create(struct doca_argp_param **param)
{
	if (!param)
		return DOCA_ERROR_INVALID_VALUE;
	if (!g.initialized)
		return DOCA_ERROR_BAD_STATE;
	*param = calloc(1, sizeof(**param));
	return *param ? DOCA_SUCCESS : DOCA_ERROR_NO_MEMORY;
}

#define SETSTR(field)                                  \
	do {                                           \
		if (!param)                            \
			return;                        \
		free(param->field);                    \
		param->field = dup_or_null(value);     \
	} while (0)

SD_EXPORT void doca_argp_param_set_short_name(struct doca_argp_param *param, const char *name)
{
	const char *value = name;

	SETSTR(short_name);
}

SD_EXPORT void doca_argp_param_set_long_name(struct doca_argp_param *param, const char *name)
{
	const char *value = name;

	SETSTR(long_name);
}

SD_EXPORT void doca_argp_param_set_arguments(struct doca_argp_param *param, const char *arguments)
{
	const char *value = arguments;

	SETSTR(arguments);
}

SD_EXPORT void doca_argp_param_set_description(struct doca_argp_param *param, const char *description)
{
	const char *value = description;

	SETSTR(description);
}

SD_EXPORT void doca_argp_param_set_callback(struct doca_argp_param *param, doca_argp_param_cb_t callback)
{
	if (param)
		param->cb = callback;
}

SD_EXPORT void doca_argp_param_set_type(struct doca_argp_param *param, enum doca_argp_type type)
{
	if (param)
		param->type = type;
}

SD_EXPORT void doca_argp_param_set_mandatory(struct doca_argp_param *param) { if (param) param->mandatory = 1; }
SD_EXPORT void doca_argp_param_set_cli_only(struct doca_argp_param *param) { if (param) param->cli_only = 1; }
SD_EXPORT void doca_argp_param_set_multiplicity(struct doca_argp_param *param) { if (param) param->multi = 1; }
SD_EXPORT void doca_argp_param_set_singular(struct doca_argp_param *param) { if (param) param->singular = 1; }
SD_EXPORT void doca_argp_param_set_inherited(struct doca_argp_param *param) { if (param) param->inherited = 1; }
SD_EXPORT void doca_argp_param_set_hidden(struct doca_argp_param *param) { if (param) param->hidden = 1; }

SD_EXPORT doca_error_t doca_argp_param_destroy(struct doca_argp_param *param)
{
	if (!param)
		return DOCA_ERROR_INVALID_VALUE;
	if (param->registered)
		return DOCA_ERROR_BAD_STATE;
	param_free(param);
	return DOCA_SUCCESS;
}

static const char *const builtin_short[] = {"h", "v", "l", "j", NULL};
static const char *const builtin_long[] = {"help", "version", "log-level", "sdk-log-level", "json", NULL};

static int name_in(const char *name, const char *const *list)
{
	for (; name && *list; list++)
		if (!strcmp(name, *list))
			return 1;
	return 0;
}

static struct doca_argp_param *find_in(struct doca_argp_param *list, const char *name, int is_long)
{
	for (; list; list = list->next) {
		const char *n = is_long ? list->long_name : list->short_name;

		if (n && !strcmp(n, name))
			return list;
	}
	return NULL;
}

static doca_error_t add_param(struct doca_argp_cmd *cmd, struct doca_argp_param *p)
{
	struct doca_argp_param **tail;

	if (!p)
		return DOCA_ERROR_INVALID_VALUE;
	if (p->registered)
		return DOCA_ERROR_BAD_STATE;
	if ((!p->short_name && !p->long_name) || !p->description || !p->cb || p->type == DOCA_ARGP_TYPE_UNKNOWN ||
	    p->type > DOCA_ARGP_TYPE_DOUBLE) {
		argp_log(DOCA_LOG_LEVEL_ERROR, "flag %s%s: a name, a description, a callback and a type are needed",
			 p->long_name ? "--" : "-", p->long_name ? p->long_name : (p->short_name ? p->short_name : "?"));
		param_free(p);
		return DOCA_ERROR_INITIALIZATION;
	}
	if (name_in(p->short_name, builtin_short) || name_in(p->long_name, builtin_long) ||
	    (p->short_name && find_in(cmd->params, p->short_name, 0)) ||
	    (p->long_name && find_in(cmd->params, p->long_name, 1))) {
		argp_log(DOCA_LOG_LEVEL_ERROR, "flag %s%s is already registered", p->long_name ? "--" : "-",
			 p->long_name ? p->long_name : p->short_name);
		param_free(p);
		return DOCA_ERROR_INVALID_VALUE;
	}
	if (!p->long_name)
		p->cli_only = 1;
	p->registered = 1;
	for (tail = &cmd->params; *tail; tail = &(*tail)->next)
		;
	*tail = p;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_argp_register_param(struct doca_argp_param *input_param)
{
	if (!g.initialized) {
		if (input_param && !input_param->registered)
			param_free(input_param);
		return DOCA_ERROR_BAD_STATE;
	}
	return add_param(&g.root, input_param);
}

/* ---------------------------------------------------------------- commands */
SD_EXPORT doca_error_t doca_argp_cmd_create(struct doca_argp_cmd **cmd)
{
	if (!cmd)
		return DOCA_ERROR_INVALID_VALUE;
	if (!g.initialized)
		return DOCA_ERROR_BAD_STATE;
	*cmd = calloc(1, sizeof(**cmd));
	return *cmd ? DOCA_SUCCESS : DOCA_ERROR_NO_MEMORY;
}

SD_EXPORT void doca_argp_cmd_set_name(struct doca_argp_cmd *cmd, const char *name)
{
	if (cmd) {
		free(cmd->name);
		cmd->name = dup_or_null(name);
	}
}

SD_EXPORT void doca_argp_cmd_set_description(struct doca_argp_cmd *cmd, const char *description)
{
	if (cmd) {
		free(cmd->description);
		cmd->description = dup_or_null(description);
	}
}

SD_EXPORT void doca_argp_cmd_set_callback(struct doca_argp_cmd *cmd, doca_argp_cmd_cb_t callback)
{
	if (cmd)
		cmd->cb = callback;
}

SD_EXPORT void doca_argp_cmd_set_hidden(struct doca_argp_cmd *cmd)
{
	if (cmd)
		cmd->hidden = 1;
}

SD_EXPORT doca_error_t doca_argp_cmd_register_param(struct doca_argp_cmd *cmd, struct doca_argp_param *input_param)
{
	if (!cmd || !input_param)
		return DOCA_ERROR_INVALID_VALUE;
	return add_param(cmd, input_param);
}

static doca_error_t add_cmd(struct doca_argp_cmd *parent, struct doca_argp_cmd *c)
{
	struct doca_argp_cmd **tail;

	if (!c)
		return DOCA_ERROR_INVALID_VALUE;
	if (c->registered)
		return DOCA_ERROR_BAD_STATE;
	if (!c->name || !c->description) {
		cmd_free(c);
		return DOCA_ERROR_INITIALIZATION;
	}
	for (tail = &parent->cmds; *tail; tail = &(*tail)->next)
		if (!strcmp((*tail)->name, c->name)) {
			cmd_free(c);
			return DOCA_ERROR_INVALID_VALUE;
		}
	c->registered = 1;
	c->parent = parent;
	*tail = c;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_argp_cmd_register_cmd(struct doca_argp_cmd *cmd, struct doca_argp_cmd *input_cmd)
{
	if (!cmd)
		return DOCA_ERROR_INVALID_VALUE;
	return add_cmd(cmd, input_cmd);
}

SD_EXPORT doca_error_t doca_argp_register_cmd(struct doca_argp_cmd *input_cmd)
{
	if (!g.initialized) {
		if (input_cmd && !input_cmd->registered)
			cmd_free(input_cmd);
		return DOCA_ERROR_BAD_STATE;
	}
	return add_cmd(&g.root, input_cmd);
}

SD_EXPORT doca_error_t doca_argp_cmd_destroy(struct doca_argp_cmd *cmd)
{
	if (!cmd)
		return DOCA_ERROR_INVALID_VALUE;
	if (cmd->registered)
		return DOCA_ERROR_BAD_STATE;
	cmd_free(cmd);
	return DOCA_SUCCESS;
}

/* ---------------------------------------------------------------- module */
SD_EXPORT doca_error_t doca_argp_init(const char *program_name, void *program_config)
{
	if (g.initialized)
		return DOCA_ERROR_BAD_STATE;
	memset(&g, 0, sizeof(g));
	if (program_name) {
		g.program = strdup(program_name);
		if (!g.program)
			return DOCA_ERROR_NO_MEMORY;
	}
	g.config = program_config;
	g.pedantic = 1;
	g.initialized = 1;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_argp_destroy(void)
{
	if (!g.initialized)
		return DOCA_ERROR_BAD_STATE;
	cmd_free(&g.root);
	free(g.program);
	memset(&g, 0, sizeof(g));
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_argp_register_version_callback(doca_argp_param_cb_t callback)
{
	if (!g.initialized)
		return DOCA_ERROR_BAD_STATE;
	if (!callback)
		return DOCA_ERROR_INVALID_VALUE;
	g.version_cb = callback;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_argp_register_validation_callback(doca_argp_validation_cb_t callback)
{
	if (!g.initialized)
		return DOCA_ERROR_BAD_STATE;
	if (!callback)
		return DOCA_ERROR_INVALID_VALUE;
	g.validation_cb = callback;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_argp_register_dev_open_callback(doca_argp_dev_open_cb_t callback, void *usr_ctx)
{
	if (!g.initialized)
		return DOCA_ERROR_BAD_STATE;
	if (!callback)
		return DOCA_ERROR_INVALID_VALUE;
	g.dev_open_cb = callback;
	g.dev_open_ctx = usr_ctx;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_argp_register_logger_callback(doca_argp_logger_cb_t callback)
{
	if (!g.initialized)
		return DOCA_ERROR_BAD_STATE;
	if (!callback)
		return DOCA_ERROR_INVALID_VALUE;
	if (g.logger_cb)
		return DOCA_ERROR_ALREADY_EXIST;
	g.logger_cb = callback;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_argp_disable_logger_callback(void)
{
	if (!g.initialized || !g.logger_cb)
		return DOCA_ERROR_BAD_STATE;
	g.logger_cb = NULL;
	return DOCA_SUCCESS;
}

SD_EXPORT void doca_argp_set_dpdk_program(doca_argp_dpdk_cb_t callback)
{
	if (g.initialized)
		g.dpdk_cb = callback;
}

SD_EXPORT doca_error_t doca_argp_disable_pedantic_config_parsing(void)
{
	if (!g.initialized)
		return DOCA_ERROR_BAD_STATE;
	g.pedantic = 0;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_argp_get_log_level(int *log_level)
{
	if (!log_level)
		return DOCA_ERROR_INVALID_VALUE;
	*log_level = g.log_level_set ? g.log_level : (int)doca_log_level_get_global_lower_limit();
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_argp_get_sdk_log_level(int *log_level)
{
	if (!log_level)
		return DOCA_ERROR_INVALID_VALUE;
	*log_level = g.sdk_level_set ? g.sdk_level : (int)doca_log_level_get_global_sdk_limit();
	return DOCA_SUCCESS;
}

/* ---------------------------------------------------------------- usage */
static const char *type_arg(const struct doca_argp_param *p)
{
	if (p->arguments)
		return p->arguments;
	switch (p->type) {
	case DOCA_ARGP_TYPE_STRING: return "<str>";
	case DOCA_ARGP_TYPE_INT: return "<num>";
	case DOCA_ARGP_TYPE_DOUBLE: return "<num>";
	case DOCA_ARGP_TYPE_DEVICE: return "<device>";
	case DOCA_ARGP_TYPE_DEVICE_REP: return "<device rep>";
	default: return "";
	}
}

static void usage_line(const char *sname, const char *lname, const char *args, const char *descr, int mandatory)
{
	char left[128];

	snprintf(left, sizeof(left), "%s%s%s%s%s%s%s", sname ? "-" : "", sname ? sname : "",
		 sname && lname ? ", " : "", lname ? "--" : "", lname ? lname : "", args && *args ? " " : "",
		 args ? args : "");
	printf("  %-40s %s%s\n", left, descr ? descr : "", mandatory ? " (mandatory)" : "");
}

static void usage_params(const struct doca_argp_param *p)
{
	for (; p; p = p->next)
		if (!p->hidden)
			usage_line(p->short_name, p->long_name, type_arg(p), p->description, p->mandatory);
}

SD_EXPORT void doca_argp_usage(void)
{
	const struct doca_argp_cmd *cmd = g.selected ? g.selected : &g.root;

	printf("Usage: %s%s%s [DOCA Flags] [Program Flags]\n\n", g.program ? g.program : "program",
	       g.root.cmds && !g.selected ? " [Command]" : "", "");
	printf("DOCA Flags:\n");
	usage_line("h", "help", "", "Print a help synopsis", 0);
	usage_line("v", "version", "", "Print program version information", 0);
	usage_line("l", "log-level", "",
		   "Set the (numeric) log level for the program <10=DISABLE, 20=CRITICAL, 30=ERROR, 40=WARNING, "
		   "50=INFO, 60=DEBUG, 70=TRACE>",
		   0);
	usage_line(NULL, "sdk-log-level", "",
		   "Set the SDK (numeric) log level for the program <10=DISABLE, 20=CRITICAL, 30=ERROR, "
		   "40=WARNING, 50=INFO, 60=DEBUG, 70=TRACE>",
		   0);
	usage_line("j", "json", "<path>", "Parse all command flags from an input json file", 0);
	if (cmd->cmds) {
		printf("\nCommands:\n");
		for (const struct doca_argp_cmd *c = cmd->cmds; c; c = c->next)
			if (!c->hidden)
				printf("  %-40s %s\n", c->name, c->description);
	}
	if (cmd->params || (cmd != &g.root && g.root.params)) {
		printf("\nProgram Flags:\n");
		for (const struct doca_argp_cmd *c = cmd; c; c = c->parent)
			usage_params(c->params);
	}
	fflush(stdout);
}

/* ---------------------------------------------------------------- parsing */
static int parse_level(const char *s, int *out)
{
	static const struct { const char *name; int level; } names[] = {
		{"disable", 10}, {"crit", 20}, {"critical", 20}, {"error", 30}, {"err", 30}, {"warning", 40},
		{"warn", 40}, {"info", 50}, {"debug", 60}, {"dbg", 60}, {"trace", 70}};
	char *end;
	long v;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcasecmp(s, names[i].name)) {
			*out = names[i].level;
			return 0;
		}
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 10 || v > 70 || v % 10)
		return -1;
	*out = (int)v;
	return 0;
}

/* Find the flag `name` visible from cmd: its own, then inherited ones up the chain (root's always). */
static struct doca_argp_param *lookup(struct doca_argp_cmd *cmd, const char *name, int is_long)
{
	for (struct doca_argp_cmd *c = cmd; c; c = c->parent) {
		struct doca_argp_param *p = find_in(c->params, name, is_long);

		if (p && (c == cmd || c == &g.root || p->inherited))
			return p;
	}
	return NULL;
}

static doca_error_t open_device(const char *value, struct doca_argp_device_ctx *out)
{
	struct doca_devinfo **list;
	uint32_t n;
	doca_error_t rc;
	char name[64], *comma;

	snprintf(name, sizeof(name), "%s", value);
	comma = strchr(name, ',');
	if (comma)
		*comma = '\0';
	out->devargs = comma ? value + (comma - name) + 1 : NULL;
	rc = doca_devinfo_create_list(&list, &n);
	if (rc != DOCA_SUCCESS)
		return rc;
	rc = DOCA_ERROR_NOT_FOUND;
	for (uint32_t i = 0; i < n; i++) {
		char ib[DOCA_DEVINFO_IBDEV_NAME_SIZE] = "", ifn[DOCA_DEVINFO_IFACE_NAME_SIZE] = "";
		uint8_t same_pci = 0;

		doca_devinfo_get_ibdev_name(list[i], ib, sizeof(ib));
		doca_devinfo_get_iface_name(list[i], ifn, sizeof(ifn));
		doca_devinfo_is_equal_pci_addr(list[i], name, &same_pci);
		if (strcmp(ib, name) && strcmp(ifn, name) && !same_pci)
			continue;
		if (g.dev_open_cb)
			rc = g.dev_open_cb(list[i], g.dev_open_ctx, &out->dev);
		else
			rc = doca_dev_open(list[i], &out->dev);
		break;
	}
	doca_devinfo_destroy_list(list);
	return rc;
}

static doca_error_t apply(struct doca_argp_param *p, const char *shown, const char *value)
{
	union {
		int i;
		double d;
		bool b;
		struct doca_argp_device_ctx dev;
	} v;
	void *arg = &v;
	char *end;
	doca_error_t rc;

	if (p->seen && !p->multi) {
		argp_log(DOCA_LOG_LEVEL_ERROR, "flag %s was given more than once", shown);
		return DOCA_ERROR_INVALID_VALUE;
	}
	p->seen++;
	memset(&v, 0, sizeof(v));
	switch (p->type) {
	case DOCA_ARGP_TYPE_BOOLEAN:
		v.b = !value || !strcasecmp(value, "true") || !strcmp(value, "1");
		if (value && !v.b && strcasecmp(value, "false") && strcmp(value, "0")) {
			argp_log(DOCA_LOG_LEVEL_ERROR, "flag %s: %s is not a boolean", shown, value);
			return DOCA_ERROR_INVALID_VALUE;
		}
		break;
	case DOCA_ARGP_TYPE_INT: {
		long l;

		errno = 0;
		l = strtol(value, &end, 0);
		if (errno || end == value || *end || l < -2147483647L - 1 || l > 2147483647L) {
			argp_log(DOCA_LOG_LEVEL_ERROR, "flag %s: %s is not an integer", shown, value);
			return DOCA_ERROR_INVALID_VALUE;
		}
		v.i = (int)l;
		break;
	}
	case DOCA_ARGP_TYPE_DOUBLE:
		errno = 0;
		v.d = strtod(value, &end);
		if (errno || end == value || *end) {
			argp_log(DOCA_LOG_LEVEL_ERROR, "flag %s: %s is not a number", shown, value);
			return DOCA_ERROR_INVALID_VALUE;
		}
		break;
	case DOCA_ARGP_TYPE_STRING:
		arg = (void *)value;
		break;
	case DOCA_ARGP_TYPE_DEVICE:
		rc = open_device(value, &v.dev);
		if (rc != DOCA_SUCCESS) {
			argp_log(DOCA_LOG_LEVEL_ERROR, "flag %s: cannot open device %s: %s", shown, value,
				 doca_error_get_descr(rc));
			return rc;
		}
		break;
	default:
		argp_log(DOCA_LOG_LEVEL_ERROR, "flag %s: device representors are not supported by softdoca", shown);
		return DOCA_ERROR_NOT_SUPPORTED;
	}
	rc = p->cb(arg, g.config);
	if (rc != DOCA_SUCCESS)
		argp_log(DOCA_LOG_LEVEL_ERROR, "flag %s: the program refused the value (%s)", shown,
			 doca_error_get_name(rc));
	return rc;
}

static void finish_and_exit(void)
{
	doca_argp_destroy();
	exit(EXIT_SUCCESS);
}

static doca_error_t print_version(void)
{
	if (g.version_cb)
		return g.version_cb(NULL, g.config);
	printf("DOCA SDK     Version (Compilation): %s\n", "3.3.0");
	printf("DOCA Runtime Version (Runtime):     %s\n", doca_version_runtime());
	fflush(stdout);
	finish_and_exit();
	return DOCA_SUCCESS;
}

static doca_error_t set_log_level(const char *value, int sdk)
{
	int level;

	if (parse_level(value, &level) != 0) {
		argp_log(DOCA_LOG_LEVEL_ERROR, "invalid log level %s (10..70, in steps of 10)", value);
		return DOCA_ERROR_INVALID_VALUE;
	}
	if (sdk) {
		g.sdk_level_set = 1;
		g.sdk_level = level;
		return doca_log_level_set_global_sdk_limit((uint32_t)level);
	}
	g.log_level_set = 1;
	g.log_level = level;
	return doca_log_level_set_global_lower_limit((uint32_t)level);
}

static doca_error_t parse_json_file(const char *path, struct doca_argp_cmd *cmd);

/* One flag occurrence: name (without dashes), its value (may be NULL), argv cursor for a separate value. */
static doca_error_t handle_flag(struct doca_argp_cmd *cmd, const char *tok, int argc, char **argv, int *i,
				int *flags_seen, int *singular_seen)
{
	int is_long = tok[1] == '-';
	const char *name = tok + (is_long ? 2 : 1);
	char buf[256];
	const char *eq = strchr(name, '='), *value = NULL;
	struct doca_argp_param *p;

	if (eq) {
		snprintf(buf, sizeof(buf), "%.*s", (int)(eq - name), name);
		name = buf;
		value = eq + 1;
	}
	if ((!is_long && !strcmp(name, "h")) || (is_long && !strcmp(name, "help"))) {
		doca_argp_usage();
		finish_and_exit();
	}
	if ((!is_long && !strcmp(name, "v")) || (is_long && !strcmp(name, "version")))
		return print_version();
	int builtin_value = (!is_long && (!strcmp(name, "l") || !strcmp(name, "j"))) ||
			    (is_long && (!strcmp(name, "log-level") || !strcmp(name, "sdk-log-level") ||
					 !strcmp(name, "json")));
	p = builtin_value ? NULL : lookup(cmd, name, is_long);
	if (!builtin_value && !p) {
		argp_log(DOCA_LOG_LEVEL_ERROR, "unknown flag %s", tok);
		doca_argp_usage();
		return DOCA_ERROR_NOT_SUPPORTED;
	}
	if (!value && (builtin_value || p->type != DOCA_ARGP_TYPE_BOOLEAN)) {
		if (*i + 1 >= argc) {
			argp_log(DOCA_LOG_LEVEL_ERROR, "flag %s needs a value", tok);
			return DOCA_ERROR_INVALID_VALUE;
		}
		value = argv[++*i];
	}
	if (builtin_value) {
		if (!strcmp(name, "j") || !strcmp(name, "json"))
			return parse_json_file(value, cmd);
		return set_log_level(value, !strcmp(name, "sdk-log-level"));
	}
	(*flags_seen)++;
	if (p->singular)
		(*singular_seen)++;
	return apply(p, tok, value);
}

static doca_error_t check_mandatory(struct doca_argp_cmd *cmd)
{
	for (struct doca_argp_cmd *c = cmd; c; c = c->parent)
		for (struct doca_argp_param *p = c->params; p; p = p->next)
			if (p->mandatory && !p->seen && (c == cmd || c == &g.root || p->inherited)) {
				argp_log(DOCA_LOG_LEVEL_ERROR, "missing mandatory flag %s%s",
					 p->long_name ? "--" : "-", p->long_name ? p->long_name : p->short_name);
				return DOCA_ERROR_INVALID_VALUE;
			}
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_argp_start(int argc, char **argv)
{
	struct doca_argp_cmd *cmd = &g.root;
	int flags_seen = 0, singular_seen = 0;
	doca_error_t rc;

	if (!g.initialized)
		return DOCA_ERROR_BAD_STATE;
	if (argc < 0 || (argc > 0 && !argv))
		return DOCA_ERROR_INVALID_VALUE;
	if (!g.program && argc > 0 && argv[0]) {
		const char *slash = strrchr(argv[0], '/');

		g.program = strdup(slash ? slash + 1 : argv[0]);
		if (!g.program)
			return DOCA_ERROR_NO_MEMORY;
	}
	for (int i = 1; i < argc; i++) {
		const char *tok = argv[i];

		if (tok[0] == '-' && tok[1] == '-' && tok[2] == '\0') {
			if (g.dpdk_cb)
				return g.dpdk_cb(argc - i, argv + i);
			argp_log(DOCA_LOG_LEVEL_ERROR, "unexpected \"--\" (not a DPDK program)");
			return DOCA_ERROR_NOT_SUPPORTED;
		}
		if (tok[0] == '-' && tok[1] != '\0') {
			rc = handle_flag(cmd, tok, argc, argv, &i, &flags_seen, &singular_seen);
			if (rc != DOCA_SUCCESS)
				return rc;
			continue;
		}
		struct doca_argp_cmd *c;

		for (c = cmd->cmds; c && strcmp(c->name, tok); c = c->next)
			;
		if (!c) {
			argp_log(DOCA_LOG_LEVEL_ERROR, "unexpected argument \"%s\"", tok);
			doca_argp_usage();
			return DOCA_ERROR_NOT_SUPPORTED;
		}
		cmd = c;
		g.selected = c;
		if (c->cb) {
			rc = c->cb(g.config);
			if (rc != DOCA_SUCCESS)
				return rc;
		}
	}
	if (singular_seen && flags_seen > 1) {
		argp_log(DOCA_LOG_LEVEL_ERROR, "a singular flag must be given alone");
		return DOCA_ERROR_INVALID_VALUE;
	}
	rc = check_mandatory(cmd);
	if (rc != DOCA_SUCCESS) {
		doca_argp_usage();
		return rc;
	}
	if (g.validation_cb) {
		rc = g.validation_cb(g.config);
		if (rc != DOCA_SUCCESS)
			argp_log(DOCA_LOG_LEVEL_ERROR, "the program's validation failed: %s", doca_error_get_descr(rc));
	}
	return rc;
}

/* ---------------------------------------------------------------- JSON (-j) */
/* A flat JSON object {"long-name": value, ...}; values: strings, numbers,
 * true/false, or arrays of those (flags with multiplicity). Nested objects
 * are refused. Unknown keys: DOCA_ERROR_NOT_SUPPORTED unless pedantic
 * parsing was disabled. */
struct jp {
	const char *s;
	size_t pos, len;
};

static void jp_ws(struct jp *j)
{
	while (j->pos < j->len && isspace((unsigned char)j->s[j->pos]))
		j->pos++;
}

static int jp_string(struct jp *j, char *out, size_t cap)
{
	size_t n = 0;

	if (j->pos >= j->len || j->s[j->pos] != '"')
		return -1;
	j->pos++;
	while (j->pos < j->len && j->s[j->pos] != '"') {
		char c = j->s[j->pos++];

		if (c == '\\' && j->pos < j->len) {
			c = j->s[j->pos++];
			c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
		}
		if (n + 1 >= cap)
			return -1;
		out[n++] = c;
	}
	if (j->pos >= j->len)
		return -1;
	j->pos++;
	out[n] = '\0';
	return 0;
}

/* A scalar as text (string contents, or the literal of a number / true / false). */
static int jp_scalar(struct jp *j, char *out, size_t cap)
{
	size_t start, n;

	jp_ws(j);
	if (j->pos < j->len && j->s[j->pos] == '"')
		return jp_string(j, out, cap);
	start = j->pos;
	while (j->pos < j->len && (isalnum((unsigned char)j->s[j->pos]) || strchr("+-.", j->s[j->pos])))
		j->pos++;
	n = j->pos - start;
	if (!n || n + 1 > cap)
		return -1;
	memcpy(out, j->s + start, n);
	out[n] = '\0';
	return 0;
}

static doca_error_t json_value(struct jp *j, struct doca_argp_cmd *cmd, const char *key)
{
	char val[4096], shown[300];
	struct doca_argp_param *p = lookup(cmd, key, 1);
	int array;

	snprintf(shown, sizeof(shown), "\"%s\" (json)", key);
	if (!strcmp(key, "log-level") || !strcmp(key, "sdk-log-level")) {
		if (jp_scalar(j, val, sizeof(val)))
			return DOCA_ERROR_INVALID_VALUE;
		return set_log_level(val, !strcmp(key, "sdk-log-level"));
	}
	if (p && p->cli_only)
		p = NULL;
	jp_ws(j);
	array = j->pos < j->len && j->s[j->pos] == '[';
	if (array)
		j->pos++;
	for (;;) {
		jp_ws(j);
		if (array && j->pos < j->len && j->s[j->pos] == ']') {
			j->pos++;
			break;
		}
		if (jp_scalar(j, val, sizeof(val)))
			return DOCA_ERROR_INVALID_VALUE;
		if (p) {
			doca_error_t rc = apply(p, shown, val);

			if (rc != DOCA_SUCCESS)
				return rc;
		} else if (g.pedantic) {
			argp_log(DOCA_LOG_LEVEL_ERROR, "unknown flag \"%s\" in the json file", key);
			return DOCA_ERROR_NOT_SUPPORTED;
		}
		if (!array)
			break;
		jp_ws(j);
		if (j->pos < j->len && j->s[j->pos] == ',')
			j->pos++;
	}
	return DOCA_SUCCESS;
}

static doca_error_t parse_json_file(const char *path, struct doca_argp_cmd *cmd)
{
	FILE *f = fopen(path, "rb");
	char *text = NULL, key[256];
	long size;
	struct jp j;
	doca_error_t rc = DOCA_ERROR_IO_FAILED;

	if (!f) {
		argp_log(DOCA_LOG_LEVEL_ERROR, "cannot open json file %s: %s", path, strerror(errno));
		return DOCA_ERROR_IO_FAILED;
	}
	if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
		text = malloc((size_t)size + 1);
		if (text && fread(text, 1, (size_t)size, f) == (size_t)size) {
			text[size] = '\0';
			rc = DOCA_SUCCESS;
		}
	}
	fclose(f);
	if (rc != DOCA_SUCCESS) {
		free(text);
		return rc;
	}
	j.s = text;
	j.pos = 0;
	j.len = strlen(text);
	jp_ws(&j);
	if (j.pos >= j.len || text[j.pos++] != '{') {
		rc = DOCA_ERROR_IO_FAILED;
		goto bad;
	}
	for (;;) {
		jp_ws(&j);
		if (j.pos < j.len && text[j.pos] == '}')
			break;
		if (jp_string(&j, key, sizeof(key))) {
			rc = DOCA_ERROR_IO_FAILED;
			goto bad;
		}
		jp_ws(&j);
		if (j.pos >= j.len || text[j.pos++] != ':') {
			rc = DOCA_ERROR_IO_FAILED;
			goto bad;
		}
		rc = json_value(&j, cmd, key);
		if (rc != DOCA_SUCCESS)
			goto out;
		jp_ws(&j);
		if (j.pos < j.len && text[j.pos] == ',')
			j.pos++;
	}
	rc = DOCA_SUCCESS;
	goto out;
bad:
	argp_log(DOCA_LOG_LEVEL_ERROR, "malformed json file %s (a flat object of flags is expected)", path);
out:
	free(text);
	return rc;
}
