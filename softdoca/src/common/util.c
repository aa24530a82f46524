/* softdoca utilities: logging, randomness, CRC-32, clocks, instance id, and
 * the registry of live handles. */
#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- logging */
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static int log_level = 99; /* 99: silent */

static void log_init(void)
{
	const char *v = getenv("SOFTDOCA_LOG");
	if (!v || !*v)
		return;
	if (!strcasecmp(v, "debug"))
		log_level = SD_LOG_DEBUG;
	else if (!strcasecmp(v, "info"))
		log_level = SD_LOG_INFO;
	else if (!strcasecmp(v, "warn") || !strcasecmp(v, "warning"))
		log_level = SD_LOG_WARN;
	else if (!strcasecmp(v, "error"))
		log_level = SD_LOG_ERROR;
}

void sd_log(int level, const char *fmt, ...)
{
	static const char *const names[] = {"debug", "info", "warn", "error"};
	char line[512];
	va_list ap;

	pthread_once(&log_once, log_init);
	if (level < 0 || level > SD_LOG_ERROR)
		return;
	if (level < log_level && !sd_log_sdk_wanted())
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (sd_log_sdk(level, line))   /* doca_log SDK backends exist: they decide (log.c) */
		return;
	if (level < log_level)
		return;
	fprintf(stderr, "softdoca[%d] %s: %s\n", (int)getpid(), names[level], line);
}

/* ---------------------------------------------------------------- random */
int sd_random_bytes(void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = getrandom(p, len, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* ---------------------------------------------------------------- CRC-32 */
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
		crc_table[i] = c;
	}
}

uint32_t sd_crc32(const void *data, size_t len)
{
	const uint8_t *p = data;
	uint32_t c = 0xFFFFFFFFu;

	pthread_once(&crc_once, crc_init);
	for (size_t i = 0; i < len; i++)
		c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
	return c ^ 0xFFFFFFFFu;
}

/* ---------------------------------------------------------------- time, env */
uint64_t sd_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t sd_env_ms(const char *name, uint64_t dflt)
{
	const char *v = name ? getenv(name) : NULL;
	char *end = NULL;
	unsigned long long x;

	if (!v || !*v)
		return dflt;
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || !end || *end || v[0] == '-')
		return dflt;
	return (uint64_t)x;
}

/* ---------------------------------------------------------------- instance id */
static _Atomic uint64_t instance_id;
static pthread_once_t instance_once = PTHREAD_ONCE_INIT;

static void instance_renew(void)
{
	uint64_t v = 0;

	while (v == 0) {
		if (sd_random_bytes(&v, sizeof(v)) != 0)
			v = sd_now_ns() ^ ((uint64_t)getpid() << 32);
	}
	atomic_store(&instance_id, v);
}

static void instance_init(void)
{
	instance_renew();
	pthread_atfork(NULL, NULL, instance_renew);
}

uint64_t sd_instance_id(void)
{
	pthread_once(&instance_once, instance_init);
	return atomic_load(&instance_id);
}

/* ---------------------------------------------------------------- handles */
#define SD_HBUCKETS 1024

struct sd_hnode {
	const void *h;
	int kind;
	struct sd_hnode *next;
};

static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sd_hnode *handles[SD_HBUCKETS];
static pthread_once_t handles_once = PTHREAD_ONCE_INIT;

/* Keep the registry usable in a forked child: no thread may hold the lock
 * across fork. */
static void handles_prepare(void) { pthread_mutex_lock(&handles_lock); }
static void handles_after(void) { pthread_mutex_unlock(&handles_lock); }
static void handles_init(void) { pthread_atfork(handles_prepare, handles_after, handles_after); }

static size_t hbucket(const void *h)
{
	uint64_t x = (uint64_t)(uintptr_t)h;

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return (size_t)(x % SD_HBUCKETS);
}

int sd_handle_add_kind(void *h, int kind)
{
	struct sd_hnode *n;

	if (!h)
		return -1;
	n = malloc(sizeof(*n));
	if (!n)
		return -1;
	n->h = h;
	n->kind = kind;
	pthread_once(&handles_once, handles_init);
	pthread_mutex_lock(&handles_lock);
	n->next = handles[hbucket(h)];
	handles[hbucket(h)] = n;
	pthread_mutex_unlock(&handles_lock);
	return 0;
}

int sd_handle_add(void *h)
{
	return sd_handle_add_kind(h, SD_H_OTHER);
}

void sd_handle_del(void *h)
{
	struct sd_hnode **pp, *dead = NULL;

	if (!h)
		return;
	pthread_mutex_lock(&handles_lock);
	for (pp = &handles[hbucket(h)]; *pp; pp = &(*pp)->next) {
		if ((*pp)->h == h) {
			dead = *pp;
			*pp = dead->next;
			break;
		}
	}
	pthread_mutex_unlock(&handles_lock);
	free(dead);
}

int sd_handle_live_kind(const void *h, int kind)
{
	int live = 0;

	if (!h)
		return 0;
	pthread_mutex_lock(&handles_lock);
	for (struct sd_hnode *n = handles[hbucket(h)]; n; n = n->next) {
		if (n->h == h) {
			live = (kind == SD_H_ANY || n->kind == kind);
			break;
		}
	}
	pthread_mutex_unlock(&handles_lock);
	return live;
}

int sd_handle_live(const void *h)
{
	return sd_handle_live_kind(h, SD_H_ANY);
}
