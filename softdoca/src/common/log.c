/*
 * doca_log: application and SDK log backends, levels, log sources (loggers).
 *
 * Levels are DOCA's: a lower number is more severe (CRIT 20 ... TRACE 70,
 * DISABLE 10). An application backend shows a message of level L when
 * upper <= L <= lower (defaults: global lower INFO, global upper CRIT), and
 * the message's source logger level admits it (L <= logger level, default
 * TRACE). An SDK backend shows softdoca's own messages (sd_log) when
 * L <= its SDK level (default INFO). With no application backend,
 * application messages go nowhere; with no SDK backend, SDK messages keep the
 * SOFTDOCA_LOG=... stderr behaviour of sd_log.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#pragma GCC visibility push(default)
#include "decl/doca_log.h"
#pragma GCC visibility pop

#define MAX_BACKENDS 32

enum { BK_FILE, BK_FD, BK_BUF, BK_SYSLOG };
enum { STD_NONE, STD_OUT, STD_ERR };

struct doca_log_backend {
	int kind;
	int sdk;               /* 1: SDK messages, 0: application messages */
	int standard;          /* STD_OUT / STD_ERR: created by doca_log_backend_create_standard */
	FILE *fp;
	int fd;
	char *buf;
	size_t cap;
	log_flush_callback handler;
	char *syslog_name;
	uint32_t lower, upper;
	int lower_strict, upper_strict;
	uint32_t sdk_level;
};

struct doca_logger {
	char name[DOCA_LOGGER_NAME_SIZE];
	int level;
	int id;
};

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct doca_log_backend *app_backends[MAX_BACKENDS];
static unsigned num_app;
static struct doca_log_backend *sdk_backends[MAX_BACKENDS];
static unsigned num_sdk;
static uint32_t global_lower = DOCA_LOG_LEVEL_INFO;
static uint32_t global_upper = DOCA_LOG_LEVEL_CRIT;
static uint32_t global_sdk = DOCA_LOG_LEVEL_INFO;
static struct doca_logger **loggers;
static unsigned num_loggers, cap_loggers;
static atomic_int have_sdk_backends;

static int valid_level(uint32_t level)
{
	return level >= DOCA_LOG_LEVEL_DISABLE && level <= DOCA_LOG_LEVEL_TRACE && level % 10 == 0;
}

static const char *level_tag(uint32_t level)
{
	switch (level) {
	case DOCA_LOG_LEVEL_CRIT: return "CRIT";
	case DOCA_LOG_LEVEL_ERROR: return "ERR";
	case DOCA_LOG_LEVEL_WARNING: return "WARN";
	case DOCA_LOG_LEVEL_INFO: return "INFO";
	case DOCA_LOG_LEVEL_DEBUG: return "DBG";
	default: return "TRC";
	}
}

/* ---------------------------------------------------------------- backends */
static doca_error_t add_backend(struct doca_log_backend *b, struct doca_log_backend **out)
{
	struct doca_log_backend **list = b->sdk ? sdk_backends : app_backends;
	unsigned *n = b->sdk ? &num_sdk : &num_app;

	pthread_mutex_lock(&log_lock);
	if (*n >= MAX_BACKENDS) {
		pthread_mutex_unlock(&log_lock);
		free(b->syslog_name);
		free(b);
		return DOCA_ERROR_NO_MEMORY;
	}
	b->lower = global_lower;
	b->upper = global_upper;
	b->sdk_level = global_sdk;
	list[(*n)++] = b;
	if (b->sdk)
		atomic_store(&have_sdk_backends, 1);
	pthread_mutex_unlock(&log_lock);
	if (out)
		*out = b;
	return DOCA_SUCCESS;
}

static doca_error_t create(int sdk, int kind, FILE *fp, int fd, char *buf, size_t cap, log_flush_callback handler,
			   const char *name, struct doca_log_backend **out)
{
	struct doca_log_backend *b;

	if (!out)
		return DOCA_ERROR_INVALID_VALUE;
	switch (kind) {
	case BK_FILE:
		if (!fp)
			return DOCA_ERROR_INVALID_VALUE;
		break;
	case BK_FD:
		if (fd < 0 || fcntl(fd, F_GETFD) < 0)
			return DOCA_ERROR_INVALID_VALUE;
		break;
	case BK_BUF:
		if (!buf || !cap || !handler)
			return DOCA_ERROR_INVALID_VALUE;
		break;
	default:
		if (!name)
			return DOCA_ERROR_INVALID_VALUE;
	}
	b = calloc(1, sizeof(*b));
	if (!b)
		return DOCA_ERROR_NO_MEMORY;
	b->kind = kind;
	b->sdk = sdk;
	b->fp = fp;
	b->fd = fd;
	b->buf = buf;
	b->cap = cap;
	b->handler = handler;
	if (kind == BK_SYSLOG) {
		b->syslog_name = strdup(name);
		if (!b->syslog_name) {
			free(b);
			return DOCA_ERROR_NO_MEMORY;
		}
	}
	return add_backend(b, out);
}

SD_EXPORT uint32_t doca_log_get_max_num_backends(void) { return MAX_BACKENDS; }
SD_EXPORT uint32_t doca_log_get_max_num_backends_sdk(void) { return MAX_BACKENDS; }

SD_EXPORT doca_error_t doca_log_backend_create_with_file(FILE *fptr, struct doca_log_backend **backend)
{
	return create(0, BK_FILE, fptr, -1, NULL, 0, NULL, NULL, backend);
}

SD_EXPORT doca_error_t doca_log_backend_create_with_fd(int fd, struct doca_log_backend **backend)
{
	return create(0, BK_FD, NULL, fd, NULL, 0, NULL, NULL, backend);
}

SD_EXPORT doca_error_t doca_log_backend_create_with_buf(char *buf, size_t capacity, log_flush_callback handler,
							struct doca_log_backend **backend)
{
	return create(0, BK_BUF, NULL, -1, buf, capacity, handler, NULL, backend);
}

SD_EXPORT doca_error_t doca_log_backend_create_with_syslog(const char *name, struct doca_log_backend **backend)
{
	return create(0, BK_SYSLOG, NULL, -1, NULL, 0, NULL, name, backend);
}

SD_EXPORT doca_error_t doca_log_backend_create_with_file_sdk(FILE *fptr, struct doca_log_backend **backend)
{
	return create(1, BK_FILE, fptr, -1, NULL, 0, NULL, NULL, backend);
}

SD_EXPORT doca_error_t doca_log_backend_create_with_fd_sdk(int fd, struct doca_log_backend **backend)
{
	return create(1, BK_FD, NULL, fd, NULL, 0, NULL, NULL, backend);
}

SD_EXPORT doca_error_t doca_log_backend_create_with_buf_sdk(char *buf, size_t capacity, log_flush_callback handler,
							    struct doca_log_backend **backend)
{
	return create(1, BK_BUF, NULL, -1, buf, capacity, handler, NULL, backend);
}

SD_EXPORT doca_error_t doca_log_backend_create_with_syslog_sdk(const char *name, struct doca_log_backend **backend)
{
	return create(1, BK_SYSLOG, NULL, -1, NULL, 0, NULL, name, backend);
}

SD_EXPORT doca_error_t doca_log_backend_create_standard(void)
{
	struct doca_log_backend *out, *err;
	doca_error_t rc;

	out = calloc(1, sizeof(*out));
	err = calloc(1, sizeof(*err));
	if (!out || !err) {
		free(out);
		free(err);
		return DOCA_ERROR_NO_MEMORY;
	}
	out->kind = err->kind = BK_FILE;
	out->standard = STD_OUT;
	err->standard = STD_ERR;
	out->fp = stdout;
	err->fp = stderr;
	rc = add_backend(out, NULL);
	if (rc != DOCA_SUCCESS) {
		free(err);
		return rc;
	}
	return add_backend(err, NULL);
}

static int app_backend_known(const struct doca_log_backend *b)
{
	for (unsigned i = 0; i < num_app; i++)
		if (app_backends[i] == b)
			return 1;
	return 0;
}

static int sdk_backend_known(const struct doca_log_backend *b)
{
	for (unsigned i = 0; i < num_sdk; i++)
		if (sdk_backends[i] == b)
			return 1;
	return 0;
}

static doca_error_t set_limit(struct doca_log_backend *backend, uint32_t level, int upper)
{
	doca_error_t rc = DOCA_SUCCESS;

	if (!backend || !valid_level(level))
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&log_lock);
	if (!app_backend_known(backend))
		rc = DOCA_ERROR_INVALID_VALUE;
	else if (backend->standard || (upper ? backend->upper_strict : backend->lower_strict))
		rc = DOCA_ERROR_NOT_PERMITTED;
	else if (upper)
		backend->upper = level;
	else
		backend->lower = level;
	pthread_mutex_unlock(&log_lock);
	return rc;
}

SD_EXPORT doca_error_t doca_log_backend_set_level_lower_limit(struct doca_log_backend *backend, uint32_t level)
{
	return set_limit(backend, level, 0);
}

SD_EXPORT doca_error_t doca_log_backend_set_level_upper_limit(struct doca_log_backend *backend, uint32_t upper_limit)
{
	return set_limit(backend, upper_limit, 1);
}

SD_EXPORT doca_error_t doca_log_backend_set_level_lower_limit_strict(struct doca_log_backend *backend)
{
	if (backend) {
		pthread_mutex_lock(&log_lock);
		backend->lower_strict = 1;
		pthread_mutex_unlock(&log_lock);
	}
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_log_backend_set_level_upper_limit_strict(struct doca_log_backend *backend)
{
	if (backend) {
		pthread_mutex_lock(&log_lock);
		backend->upper_strict = 1;
		pthread_mutex_unlock(&log_lock);
	}
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_log_level_set_global_lower_limit(uint32_t level)
{
	if (!valid_level(level))
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&log_lock);
	global_lower = level;
	for (unsigned i = 0; i < num_app; i++)
		if (!app_backends[i]->lower_strict)
			app_backends[i]->lower = level;
	pthread_mutex_unlock(&log_lock);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_log_level_set_global_upper_limit(uint32_t upper_limit)
{
	if (!valid_level(upper_limit))
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&log_lock);
	global_upper = upper_limit;
	for (unsigned i = 0; i < num_app; i++)
		if (!app_backends[i]->upper_strict)
			app_backends[i]->upper = upper_limit;
	pthread_mutex_unlock(&log_lock);
	return DOCA_SUCCESS;
}

static uint32_t locked_get(const uint32_t *v)
{
	uint32_t x;

	pthread_mutex_lock(&log_lock);
	x = *v;
	pthread_mutex_unlock(&log_lock);
	return x;
}

SD_EXPORT uint32_t doca_log_level_get_global_lower_limit(void)
{
	return locked_get(&global_lower);
}

SD_EXPORT uint32_t doca_log_level_get_global_upper_limit(void)
{
	return locked_get(&global_upper);
}

SD_EXPORT doca_error_t doca_log_backend_set_sdk_level(struct doca_log_backend *backend, uint32_t level)
{
	doca_error_t rc = DOCA_SUCCESS;

	if (!backend || !valid_level(level))
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&log_lock);
	if (!sdk_backend_known(backend))
		rc = app_backend_known(backend) ? DOCA_ERROR_NOT_PERMITTED : DOCA_ERROR_INVALID_VALUE;
	else
		backend->sdk_level = level;
	pthread_mutex_unlock(&log_lock);
	return rc;
}

SD_EXPORT doca_error_t doca_log_level_set_global_sdk_limit(uint32_t level)
{
	if (!valid_level(level))
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&log_lock);
	global_sdk = level;
	for (unsigned i = 0; i < num_sdk; i++)
		sdk_backends[i]->sdk_level = level;
	pthread_mutex_unlock(&log_lock);
	return DOCA_SUCCESS;
}

SD_EXPORT uint32_t doca_log_level_get_global_sdk_limit(void)
{
	return locked_get(&global_sdk);
}

/* ---------------------------------------------------------------- output */
static int syslog_priority(uint32_t level)
{
	switch (level) {
	case DOCA_LOG_LEVEL_CRIT: return LOG_CRIT;
	case DOCA_LOG_LEVEL_ERROR: return LOG_ERR;
	case DOCA_LOG_LEVEL_WARNING: return LOG_WARNING;
	case DOCA_LOG_LEVEL_INFO: return LOG_INFO;
	default: return LOG_DEBUG;
	}
}

/* Emit one formatted record (ending in '\n') to b; log_lock held. */
static void emit(struct doca_log_backend *b, uint32_t level, const char *rec, size_t len)
{
	switch (b->kind) {
	case BK_FILE:
		fwrite(rec, 1, len, b->fp);
		fflush(b->fp);
		break;
	case BK_FD: {
		size_t off = 0;

		while (off < len) {
			ssize_t n = write(b->fd, rec + off, len - off);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			off += (size_t)n;
		}
		break;
	}
	case BK_BUF:
		if (len + 1 <= b->cap) {
			memcpy(b->buf, rec, len);
			b->buf[len] = '\0';
			b->handler(b->buf);
		}
		break;
	default:
		openlog(b->syslog_name, LOG_PID, LOG_USER);
		syslog(syslog_priority(level), "%.*s", (int)(len ? len - 1 : 0), rec);
		break;
	}
}

static int app_shows(const struct doca_log_backend *b, uint32_t level)
{
	uint32_t lower = b->lower, upper = b->upper;

	if (b->standard == STD_OUT) {
		lower = global_lower;
		upper = DOCA_LOG_LEVEL_INFO;
	} else if (b->standard == STD_ERR) {
		lower = global_lower < DOCA_LOG_LEVEL_WARNING ? global_lower : DOCA_LOG_LEVEL_WARNING;
		upper = global_upper;
	}
	return level >= upper && level <= lower;
}

/* "[HH:MM:SS:usec][pid][DOCA][LVL][file:line][func] message\n" in *out (malloc'd when long). */
static size_t format_record(char *stack, size_t stack_len, char **out, uint32_t level, const char *fname, int line,
			    const char *func, const char *fmt, va_list ap)
{
	struct timeval tv;
	struct tm tm;
	char head[512];
	const char *base = fname ? strrchr(fname, '/') : NULL;
	int hl, ml;
	va_list ap2;

	gettimeofday(&tv, NULL);
	localtime_r(&tv.tv_sec, &tm);
	base = base ? base + 1 : (fname ? fname : "?");
	hl = snprintf(head, sizeof(head), "[%02d:%02d:%02d:%06ld][%d][DOCA][%s][%s:%d][%s] ", tm.tm_hour, tm.tm_min,
		      tm.tm_sec, (long)tv.tv_usec, (int)getpid(), level_tag(level), base, line, func ? func : "?");
	if (hl < 0)
		hl = 0;
	if ((size_t)hl >= sizeof(head))
		hl = sizeof(head) - 1;
	va_copy(ap2, ap);
	ml = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (ml < 0)
		ml = 0;
	size_t total = (size_t)hl + (size_t)ml + 1;
	char *dst = stack;

	if (total + 1 > stack_len) {
		dst = malloc(total + 1);
		if (!dst) {
			*out = NULL;
			return 0;
		}
	}
	memcpy(dst, head, (size_t)hl);
	vsnprintf(dst + hl, (size_t)ml + 1, fmt, ap);
	dst[total - 1] = '\n';
	dst[total] = '\0';
	*out = dst;
	return total;
}

SD_EXPORT doca_error_t doca_log(uint32_t level, int source, const char *fname, int line, const char *func,
				const char *format, ...)
{
	char stack[1024], *rec;
	size_t len;
	va_list ap;

	if (level < DOCA_LOG_LEVEL_CRIT || !valid_level(level) || !format)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&log_lock);
	if (source < 0 || (unsigned)source >= num_loggers) {
		pthread_mutex_unlock(&log_lock);
		return DOCA_ERROR_INVALID_VALUE;
	}
	if ((int)level > loggers[source]->level) {
		pthread_mutex_unlock(&log_lock);
		return DOCA_SUCCESS;
	}
	int any = 0;

	for (unsigned i = 0; i < num_app && !any; i++)
		any = app_shows(app_backends[i], level);
	if (!any) {
		pthread_mutex_unlock(&log_lock);
		return DOCA_SUCCESS;
	}
	va_start(ap, format);
	len = format_record(stack, sizeof(stack), &rec, level, fname, line, func, format, ap);
	va_end(ap);
	if (!rec) {
		pthread_mutex_unlock(&log_lock);
		return DOCA_ERROR_NO_MEMORY;
	}
	for (unsigned i = 0; i < num_app; i++)
		if (app_shows(app_backends[i], level))
			emit(app_backends[i], level, rec, len);
	pthread_mutex_unlock(&log_lock);
	if (rec != stack)
		free(rec);
	return DOCA_SUCCESS;
}

/* SDK messages (softdoca's sd_log): 1 when at least one SDK backend exists. */
int sd_log_sdk(int sd_level, const char *msg)
{
	static const uint32_t map[] = {DOCA_LOG_LEVEL_DEBUG, DOCA_LOG_LEVEL_INFO, DOCA_LOG_LEVEL_WARNING,
				       DOCA_LOG_LEVEL_ERROR};
	uint32_t level;
	char stack[1024], *rec = NULL;
	size_t len = 0;

	if (!atomic_load(&have_sdk_backends))
		return 0;
	level = map[sd_level < 0 ? 0 : sd_level > 3 ? 3 : sd_level];
	pthread_mutex_lock(&log_lock);
	for (unsigned i = 0; i < num_sdk; i++) {
		if (level > sdk_backends[i]->sdk_level)
			continue;
		if (!rec) {
			struct timeval tv;
			struct tm tm;
			int n;

			gettimeofday(&tv, NULL);
			localtime_r(&tv.tv_sec, &tm);
			n = snprintf(stack, sizeof(stack), "[%02d:%02d:%02d:%06ld][%d][DOCA][%s][softdoca] %s\n",
				     tm.tm_hour, tm.tm_min, tm.tm_sec, (long)tv.tv_usec, (int)getpid(), level_tag(level),
				     msg);
			if (n < 0)
				break;
			len = (size_t)n < sizeof(stack) ? (size_t)n : sizeof(stack) - 1;
			if ((size_t)n >= sizeof(stack))
				stack[len - 1] = '\n';
			rec = stack;
		}
		emit(sdk_backends[i], level, rec, len);
	}
	pthread_mutex_unlock(&log_lock);
	return 1;
}

/* ---------------------------------------------------------------- sources / loggers */
SD_EXPORT doca_error_t doca_log_register_source(const char *source_name, int *source)
{
	struct doca_logger *lg;

	if (!source_name || !source)
		return DOCA_ERROR_INVALID_VALUE;
	lg = calloc(1, sizeof(*lg));
	if (!lg)
		return DOCA_ERROR_NO_MEMORY;
	snprintf(lg->name, sizeof(lg->name), "%s", source_name);
	lg->level = DOCA_LOG_LEVEL_TRACE;
	pthread_mutex_lock(&log_lock);
	if (num_loggers == cap_loggers) {
		unsigned ncap = cap_loggers ? cap_loggers * 2 : 16;
		struct doca_logger **n = realloc(loggers, ncap * sizeof(*n));

		if (!n) {
			pthread_mutex_unlock(&log_lock);
			free(lg);
			return DOCA_ERROR_NO_MEMORY;
		}
		loggers = n;
		cap_loggers = ncap;
	}
	lg->id = (int)num_loggers;
	loggers[num_loggers++] = lg;
	*source = lg->id;
	pthread_mutex_unlock(&log_lock);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_log_unregister_source(int source)
{
	(void)source;
	return DOCA_SUCCESS;
}

/* Depth of a name in the "::" hierarchy ("a" 1, "a::b" 2). */
static unsigned name_depth(const char *name)
{
	unsigned d = 1;

	for (const char *p = strstr(name, "::"); p; p = strstr(p + 2, "::"))
		d++;
	return d;
}

static int known_logger(const struct doca_logger *lg)
{
	for (unsigned i = 0; i < num_loggers; i++)
		if (loggers[i] == lg)
			return 1;
	return 0;
}

/* Whether lg is a descendant of root (NULL: of the top) within depth (0: any). */
static int descends(const struct doca_logger *lg, const struct doca_logger *root, unsigned depth)
{
	unsigned base = 0;

	if (root) {
		size_t n = strlen(root->name);

		if (lg == root || strncmp(lg->name, root->name, n) != 0 || strncmp(lg->name + n, "::", 2) != 0)
			return 0;
		base = name_depth(root->name);
	}
	return depth == 0 || name_depth(lg->name) - base <= depth;
}

SD_EXPORT doca_error_t doca_logger_create_list(const struct doca_logger *logger, uint8_t depth,
					       struct doca_logger ***logger_list, uint32_t *nb_loggers)
{
	struct doca_logger **list;
	uint32_t n = 0;

	if (!logger_list || !nb_loggers)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&log_lock);
	if (logger && !known_logger(logger)) {
		pthread_mutex_unlock(&log_lock);
		return DOCA_ERROR_NOT_FOUND;
	}
	list = calloc(num_loggers + 1, sizeof(*list));
	if (!list) {
		pthread_mutex_unlock(&log_lock);
		return DOCA_ERROR_NO_MEMORY;
	}
	for (unsigned i = 0; i < num_loggers; i++)
		if (descends(loggers[i], logger, depth))
			list[n++] = loggers[i];
	pthread_mutex_unlock(&log_lock);
	*logger_list = list;
	*nb_loggers = n;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_logger_destroy_list(struct doca_logger **logger_list)
{
	if (!logger_list)
		return DOCA_ERROR_INVALID_VALUE;
	free(logger_list);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_logger_set_level(struct doca_logger *logger, int level, uint8_t propagate)
{
	if (level < 0 || !valid_level((uint32_t)level) || (!logger && !propagate))
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&log_lock);
	if (logger && !known_logger(logger)) {
		pthread_mutex_unlock(&log_lock);
		return DOCA_ERROR_NOT_FOUND;
	}
	if (logger)
		logger->level = level;
	if (propagate)
		for (unsigned i = 0; i < num_loggers; i++)
			if (descends(loggers[i], logger, 0))
				loggers[i]->level = level;
	pthread_mutex_unlock(&log_lock);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_logger_get_level(const struct doca_logger *logger, int *level)
{
	doca_error_t rc = DOCA_SUCCESS;

	if (!logger || !level)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&log_lock);
	if (!known_logger(logger))
		rc = DOCA_ERROR_NOT_FOUND;
	else
		*level = logger->level;
	pthread_mutex_unlock(&log_lock);
	return rc;
}

SD_EXPORT doca_error_t doca_logger_get_name(const struct doca_logger *logger, char name[DOCA_LOGGER_NAME_SIZE])
{
	if (!logger || !name)
		return DOCA_ERROR_INVALID_VALUE;
	snprintf(name, DOCA_LOGGER_NAME_SIZE, "%s", logger->name);
	return DOCA_SUCCESS;
}

SD_EXPORT struct doca_logger *doca_logger_find_by_name(struct doca_logger **logger_list, const char *name)
{
	if (!logger_list || !name)
		return NULL;
	for (; *logger_list; logger_list++)
		if (!strcmp((*logger_list)->name, name))
			return *logger_list;
	return NULL;
}

int sd_log_sdk_wanted(void)
{
	return atomic_load(&have_sdk_backends);
}
