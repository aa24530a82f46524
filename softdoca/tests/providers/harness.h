/*
 * The harness of the provider tests (tests/providers/), header only: each
 * test is one translation unit and uses what it needs of it.
 *
 * For every test (test_provider.c, the conformance test, included):
 *   CHECK / EXPECT_OK and their counters, the clocks, the byte pattern, the
 *   socketpair messages, a child forked on a socketpair, a loopback listener.
 * The two-process suite of the per-provider tests is in harness_suite.h.
 */
#ifndef SD_TESTS_PROVIDERS_HARNESS_H
#define SD_TESTS_PROVIDERS_HARNESS_H

#include "providers/provider.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <arpa/inet.h>

static const struct sd_provider_ops *P;
static int fails;                   /* failed checks of this process */
static long checks;                 /* checks this process evaluated */
static const char *who = "parent";  /* this process's part, on its FAIL lines */
static const char *rule;            /* the conformance rule under test (FAIL lines); NULL: none */

/* ---------------------------------------------------------------- checks */
static inline void __attribute__((format(printf, 4, 5)))
check_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
	va_list ap;

	if (rule)
		fprintf(stderr, "[%s] FAIL rule '%s' (%s:%d): %s: ", who, rule, file, line, cond);
	else
		fprintf(stderr, "[%s] FAIL %s:%d: %s: ", who, file, line, cond);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	fails++;
}

/* The message's arguments are evaluated only when the check fails. */
#define CHECK(c, ...)                                                          \
	do {                                                                   \
		checks++;                                                      \
		if (!(c))                                                      \
			check_fail(__FILE__, __LINE__, #c, __VA_ARGS__);       \
	} while (0)
#define EXPECT_OK(e, what) CHECK((e) == DOCA_SUCCESS, "%s: %s", what, sd_prov_strerror(e))

/* The last line but one of a test: what this process checked. */
static inline void checks_summary(const char *prog)
{
	printf("%s: %ld checks, %d failed\n", prog, checks, fails);
}

/* ---------------------------------------------------------------- clocks */
static inline uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* ---------------------------------------------------------------- byte pattern */
/* Byte i of pattern seed; a test may shift every byte (the conformance test's is 1 up). */
#ifndef HARNESS_PAT_BIAS
#define HARNESS_PAT_BIAS 0u
#endif
static inline uint8_t pat(uint32_t seed, size_t i)
{
	return (uint8_t)(seed * 131u + i * 7u + (i >> 8) + HARNESS_PAT_BIAS);
}

static inline void fill(uint8_t *b, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = pat(seed, i);
}

static inline int matches(const uint8_t *b, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != pat(seed, i))
			return 0;
	return 1;
}

/* ---------------------------------------------------------------- socketpair messages */
/* A message: its length (4 bytes, host order), then its bytes. A broken pipe ends the process. */
static inline void msend(int fd, const void *b, size_t n)
{
	uint32_t l = (uint32_t)n;

	if (write(fd, &l, 4) != 4 || (n && write(fd, b, n) != (ssize_t)n)) {
		fprintf(stderr, "[%s] msend: %s\n", who, strerror(errno));
		exit(1);
	}
}

static inline void __attribute__((noreturn)) mrecv_gone(void)
{
	if (rule)
		fprintf(stderr, "[%s] FAIL rule '%s': mrecv: the peer is gone or silent for 30 s\n", who, rule);
	else
		fprintf(stderr, "[%s] mrecv: the peer is gone or silent for 30 s\n", who);
	exit(1);
}

/* One message into b (at most cap bytes), fd waited for up to 30 s unless the
 * caller saw it readable (ready); a peer gone or silent ends the process. */
static inline size_t mrecv_fd(int fd, void *b, size_t cap, int ready)
{
	uint32_t l;
	size_t got = 0;
	struct pollfd pf = { .fd = fd, .events = POLLIN };

	if ((!ready && poll(&pf, 1, 30000) != 1) || read(fd, &l, 4) != 4 || l > cap)
		mrecv_gone();
	while (got < l) {
		ssize_t k;

		if (poll(&pf, 1, 30000) != 1 || (k = read(fd, (char *)b + got, l - got)) <= 0)
			exit(1);
		got += (size_t)k;
	}
	return l;
}

/* ---------------------------------------------------------------- processes */
/* Fork a child that runs child() on its end of a new socketpair (child does
 * not return); ours in *sock. -1: no socketpair or no fork. */
/* A child forked before the parent opened its instance: named on its FAIL
 * lines, killed with its parent, and waiting for the parent's go (a byte on
 * sock); a parent that closed sock without one ends it. */
static inline void child_begin(int sock, const char *name)
{
	char go;

	prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a parent that failed */
	who = name;
	if (read(sock, &go, 1) != 1)
		_exit(0);
}

static inline pid_t spawn(void (*child)(int sock), int *sock)
{
	int sv[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return -1;
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		child(sv[1]);
		_exit(0);
	}
	close(sv[1]);
	*sock = pid > 0 ? sv[0] : -1;
	if (pid < 0)
		close(sv[0]);
	return pid;
}

/* ---------------------------------------------------------------- addresses */
static inline void loopback(struct sockaddr_in *in, uint16_t port)
{
	memset(in, 0, sizeof(*in));
	in->sin_family = AF_INET;
	in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	in->sin_port = htons(port);
}

/* listen() on 127.0.0.1, a port the system picks: the port, 0 where it failed (*e, why say why). */
static inline uint16_t listen_loopback(struct sd_prov *p, void *lctx, struct sd_prov_listener **l, doca_error_t *e,
				       struct sd_prov_why *why)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *in = (struct sockaddr_in *)&ss;
	socklen_t sl = sizeof(*in);

	memset(&ss, 0, sizeof(ss));
	loopback(in, 0);
	*e = P->listen(p, &ss, &sl, lctx, l, why);
	return *e ? 0 : ntohs(in->sin_port);
}


#endif /* SD_TESTS_PROVIDERS_HARNESS_H */
