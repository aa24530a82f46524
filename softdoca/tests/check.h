/* check.h: the harness shared by softdoca's C test programs (tests/test_*.c).
 * Plain C, no framework: every check prints one line, "ok   <what>" or
 * "FAIL (file:line) <what>", flushed at once (the tests fork and spawn peers);
 * main() ends with check_summary("<name>"), which prints "<name>: N passed,
 * M failed" (tests/test_softdoca_c.py parses it) and gives the exit status.
 * Each test program is a single translation unit, so the counters are static. */
#ifndef SOFTDOCA_TESTS_CHECK_H
#define SOFTDOCA_TESTS_CHECK_H

#include "internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static int passed, failed;

#define CHECK(cond, ...)                                            \
	do {                                                        \
		if (cond) {                                         \
			passed++;                                   \
			printf("ok   ");                            \
		} else {                                            \
			failed++;                                   \
			printf("FAIL (%s:%d) ", __FILE__, __LINE__); \
		}                                                   \
		printf(__VA_ARGS__);                                \
		printf("\n");                                       \
		fflush(stdout);                                     \
	} while (0)

#define RC(call, want) CHECK((call) == (want), "%s == %s", #call, #want)

/* The summary line; returns main()'s exit status (non-zero on any failure). */
static inline int check_summary(const char *name)
{
	printf("%s: %d passed, %d failed\n", name, passed, failed);
	return failed ? 1 : 0;
}

static inline double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A task's completion, as the tests' callbacks record it. */
struct done {
	int done;
	doca_error_t st;
};

/* Opens softdoca's loopback device soft_lo (checked: listing and opening);
 * NULL when there is none. The device list is destroyed before returning. */
static inline struct doca_dev *open_soft_lo(void)
{
	struct doca_devinfo **list = NULL;
	struct doca_dev *dev = NULL;
	uint32_t n = 0;
	char ib[DOCA_DEVINFO_IBDEV_NAME_SIZE];

	RC(doca_devinfo_create_list(&list, &n), DOCA_SUCCESS);
	for (uint32_t i = 0; i < n && !dev; i++)
		if (doca_devinfo_get_ibdev_name(list[i], ib, sizeof(ib)) == DOCA_SUCCESS && !strcmp(ib, "soft_lo"))
			RC(doca_dev_open(list[i], &dev), DOCA_SUCCESS);
	if (list)
		doca_devinfo_destroy_list(list);
	return dev;
}

#endif /* SOFTDOCA_TESTS_CHECK_H */
