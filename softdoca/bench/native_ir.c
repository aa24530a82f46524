/*
 * Instruction count per operation of softdoca's native data plane, for
 * `make bench-native-ir` (callgrind; docs/native-provider-plan.md, stage S0).
 *
 * One process, two rdma contexts on soft_lo (each with its own progress
 * engine), connected out of band over the native link; the transport is
 * SOFTDOCA_TRANSPORT's (shm: the same-host transport, tcp: the native TCP
 * link; the program checks that the connection got it). Then N 8-byte
 * writes from A into B's memory, BATCH submitted at a time (each to its own
 * 8-byte slot), each batch waited for before the next: A's engine is
 * progressed, and when it has nothing to do the program sleeps on its
 * notification handle (epoll), so that waiting costs no instructions of
 * its own. B's engine is never progressed (one-sided writes are served by
 * the engine thread).
 *
 * Under callgrind (--instr-atstart=no) only the loop is instrumented:
 * CALLGRIND_START_INSTRUMENTATION after the connection and one warm-up
 * batch, CALLGRIND_STOP_INSTRUMENTATION after the last completion. Callgrind
 * counts every thread of the process, so the total covers both sides of
 * each write: the requester's submit and completion (application thread),
 * and on tcp the engine thread's work too (the target's read of the request,
 * its memcpy and its response; the requester's send when the engine does it)
 * plus the kernel entry stubs of the system calls (not the kernel itself).
 * bench/native_ir.py divides the total by N.
 *
 *   native_ir [N [BATCH [MEM]]]     (defaults 20000, 50, private)
 * MEM: the target's memory, "private" (aligned_alloc: the same-host
 * transport copies with process_vm_writev) or "memfd" (a shared mapping of
 * a memfd sealed against shrinking: it maps the file and copies with
 * memcpy, rdma_xport.c "Shared mappings"). Prints one line:
 * "native_ir transport=<t> mem=<m> n=<N> batch=<B> ok" (exit 0), or why it
 * failed (exit 1).
 */
#define _GNU_SOURCE
#include "internal.h"
#include "softdoca_ext.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else /* without valgrind's headers the program runs, uninstrumented */
#define CALLGRIND_START_INSTRUMENTATION do { } while (0)
#define CALLGRIND_STOP_INSTRUMENTATION do { } while (0)
#endif

#define MAX_BATCH 1024
#define SLOT 64 /* bytes between two writes' targets */

static int completed, failed;

static void write_cb(struct doca_rdma_task_write *t, union doca_data ud, union doca_data cud)
{
	(void)t;
	(void)ud;
	(void)cud;
	completed++;
}

static void write_err_cb(struct doca_rdma_task_write *t, union doca_data ud, union doca_data cud)
{
	(void)ud;
	(void)cud;
	fprintf(stderr, "native_ir: write failed: %s\n",
		doca_error_get_name(doca_task_get_status(doca_rdma_task_write_as_task(t))));
	completed++;
	failed++;
}

static int conn_est[2];

static void on_est(struct doca_rdma_connection *c, union doca_data ud, union doca_data cud)
{
	(void)c;
	(void)ud;
	conn_est[cud.u64]++;
}

static void on_fail(struct doca_rdma_connection *c, union doca_data ud, union doca_data cud)
{
	(void)c;
	(void)ud;
	(void)cud;
	fprintf(stderr, "native_ir: connection failed\n");
	exit(1);
}

static void on_disc(struct doca_rdma_connection *c, union doca_data ud, union doca_data cud)
{
	(void)c;
	(void)ud;
	(void)cud;
}

#define TRY(call)                                                                                    \
	do {                                                                                         \
		doca_error_t rc_ = (call);                                                           \
		if (rc_ != DOCA_SUCCESS) {                                                           \
			fprintf(stderr, "native_ir: %s: %s\n", #call, doca_error_get_name(rc_));     \
			exit(1);                                                                     \
		}                                                                                    \
	} while (0)

static struct doca_rdma *make_rdma(struct doca_dev *dev, struct doca_pe *pe, uint64_t which, uint32_t ntasks)
{
	struct doca_rdma *r = NULL;

	TRY(doca_rdma_create(dev, &r));
	TRY(doca_rdma_set_permissions(r, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_WRITE));
	TRY(doca_rdma_set_send_queue_size(r, MAX_BATCH));
	TRY(doca_rdma_set_connection_state_callbacks(r, NULL, on_est, on_fail, on_disc));
	TRY(doca_rdma_task_write_set_conf(r, write_cb, write_err_cb, ntasks));
	TRY(doca_ctx_set_user_data(doca_rdma_as_ctx(r), (union doca_data){.u64 = which}));
	TRY(doca_pe_connect_ctx(pe, doca_rdma_as_ctx(r)));
	TRY(doca_ctx_start(doca_rdma_as_ctx(r)));
	return r;
}

static struct doca_mmap *local_map(struct doca_dev *dev, void *mem, size_t len, uint32_t perms)
{
	struct doca_mmap *m = NULL;

	TRY(doca_mmap_create(&m));
	TRY(doca_mmap_set_memrange(m, mem, len));
	TRY(doca_mmap_set_permissions(m, perms));
	TRY(doca_mmap_add_dev(m, dev));
	TRY(doca_mmap_start(m));
	return m;
}

/* len bytes of a memfd sealed against shrinking, mapped shared (what pydoca.shared_memory allocates). */
static uint8_t *memfd_alloc(size_t len)
{
	int fd = memfd_create("native_ir", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	void *p;

	if (fd < 0 || ftruncate(fd, (off_t)len) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
		perror("native_ir: memfd");
		exit(1);
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		perror("native_ir: mmap");
		exit(1);
	}
	return p; /* fd stays open: softdoca finds the file through /proc/self/maps and /proc/self/fd */
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Progress pe until *count reaches want; asleep on its notification handle when idle. 0, or -1 past 60 s. */
static int wait_count(struct doca_pe *pe, int ep, int *count, int want)
{
	double end = now_s() + 60;

	while (*count < want) {
		struct epoll_event e;
		doca_notification_handle_t h;

		if (doca_pe_progress(pe))
			continue;
		if (now_s() > end)
			return -1;
		if (doca_pe_request_notification(pe) != DOCA_SUCCESS)
			continue;
		if (doca_pe_progress(pe) == 0) /* nothing arrived between the last look and the request */
			(void)epoll_wait(ep, &e, 1, 100);
		if (doca_pe_get_notification_handle(pe, &h) == DOCA_SUCCESS)
			(void)doca_pe_clear_notification(pe, h);
	}
	return 0;
}

static struct doca_dev *open_lo(void)
{
	struct doca_devinfo **list = NULL;
	struct doca_dev *dev = NULL;
	uint32_t n = 0;
	char ib[DOCA_DEVINFO_IBDEV_NAME_SIZE];

	TRY(doca_devinfo_create_list(&list, &n));
	for (uint32_t i = 0; i < n && !dev; i++)
		if (doca_devinfo_get_ibdev_name(list[i], ib, sizeof(ib)) == DOCA_SUCCESS && !strcmp(ib, "soft_lo"))
			TRY(doca_dev_open(list[i], &dev));
	doca_devinfo_destroy_list(list);
	if (!dev) {
		fprintf(stderr, "native_ir: no soft_lo device\n");
		exit(1);
	}
	return dev;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 20000, batch = argc > 2 ? atoi(argv[2]) : 50;
	const char *memkind = argc > 3 ? argv[3] : "private";
	const char *want = getenv("SOFTDOCA_TRANSPORT");
	struct doca_dev *dev;
	struct doca_pe *pa = NULL, *pb = NULL;
	struct doca_rdma *A, *B;
	struct doca_rdma_connection *ca = NULL, *cb = NULL;
	struct doca_mmap *ma, *mb, *rb = NULL;
	struct doca_buf_inventory *inv = NULL;
	struct doca_rdma_task_write *tasks[MAX_BATCH];
	struct doca_buf *srcs[MAX_BATCH], *dsts[MAX_BATCH];
	const void *da = NULL, *db = NULL, *desc = NULL;
	size_t la = 0, lb = 0, dl = 0;
	size_t len = (size_t)MAX_BATCH * SLOT;
	uint8_t *mem_a = aligned_alloc(4096, len), *mem_b;
	doca_notification_handle_t h;
	struct epoll_event ev = {.events = EPOLLIN};
	int ep = epoll_create1(EPOLL_CLOEXEC);
	double end;

	if (n <= 0 || batch <= 0 || batch > MAX_BATCH || n % batch || !want || (strcmp(want, "shm") && strcmp(want, "tcp")) ||
	    (strcmp(memkind, "private") && strcmp(memkind, "memfd"))) {
		fprintf(stderr, "usage: SOFTDOCA_TRANSPORT=shm|tcp native_ir [N [BATCH [private|memfd]]] "
			"(BATCH <= %d divides N)\n", MAX_BATCH);
		return 1;
	}
	mem_b = !strcmp(memkind, "memfd") ? memfd_alloc(len) : aligned_alloc(4096, len);
	setenv("SOFTDOCA_TIMEOUT_MS", "600000", 1); /* no keepalive PINGs inside the measured loop */
	memset(mem_a, 0x5a, len);
	memset(mem_b, 0, len);
	dev = open_lo();
	TRY(doca_pe_create(&pa));
	TRY(doca_pe_create(&pb));
	A = make_rdma(dev, pa, 0, (uint32_t)batch);
	B = make_rdma(dev, pb, 1, (uint32_t)batch);
	ma = local_map(dev, mem_a, len, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE);
	mb = local_map(dev, mem_b, len, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_WRITE);
	TRY(doca_mmap_export_rdma(mb, dev, &desc, &dl));
	TRY(doca_mmap_create_from_export(NULL, desc, dl, dev, &rb));

	TRY(doca_rdma_export(A, &da, &la, &ca));
	TRY(doca_rdma_export(B, &db, &lb, &cb));
	TRY(doca_rdma_connect(A, db, lb, ca));
	TRY(doca_rdma_connect(B, da, la, cb));
	end = now_s() + 20;
	while ((!conn_est[0] || !conn_est[1]) && now_s() < end) {
		if (!(doca_pe_progress(pa) | doca_pe_progress(pb)))
			usleep(100);
	}
	if (!conn_est[0] || !conn_est[1]) {
		fprintf(stderr, "native_ir: not connected within 20 s\n");
		return 1;
	}
	if (strcmp(softdoca_transport_name(ca), want) != 0) {
		fprintf(stderr, "native_ir: transport %s, not %s\n", softdoca_transport_name(ca), want);
		return 1;
	}

	TRY(doca_buf_inventory_create((uint32_t)(2 * batch), &inv));
	TRY(doca_buf_inventory_start(inv));
	for (int i = 0; i < batch; i++) {
		TRY(doca_buf_inventory_buf_get_by_args(inv, ma, mem_a + (size_t)i * SLOT, 8, mem_a + (size_t)i * SLOT, 8,
							&srcs[i]));
		TRY(doca_buf_inventory_buf_get_by_args(inv, rb, mem_b + (size_t)i * SLOT, 8, mem_b + (size_t)i * SLOT, 0,
							&dsts[i]));
		TRY(doca_rdma_task_write_allocate_init(A, ca, srcs[i], dsts[i], (union doca_data){.u64 = 0}, &tasks[i]));
	}
	TRY(doca_pe_get_notification_handle(pa, &h));
	ev.data.fd = (int)h;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, (int)h, &ev) != 0) {
		perror("native_ir: epoll_ctl");
		return 1;
	}

	for (int round = -1; round < n / batch; round++) { /* round -1: the warm-up, not measured */
		if (round == 0)
			CALLGRIND_START_INSTRUMENTATION;
		completed = 0;
		for (int i = 0; i < batch; i++)
			TRY(doca_task_submit(doca_rdma_task_write_as_task(tasks[i])));
		if (wait_count(pa, ep, &completed, batch) != 0) {
			fprintf(stderr, "native_ir: a batch did not complete within 60 s\n");
			return 1;
		}
	}
	CALLGRIND_STOP_INSTRUMENTATION;
	for (int i = 0; i < batch; i++)
		if (memcmp(mem_b + (size_t)i * SLOT, mem_a, 8) != 0)
			failed++;
	if (failed) {
		fprintf(stderr, "native_ir: %d writes failed or did not land\n", failed);
		return 1;
	}

	for (int i = 0; i < batch; i++) {
		doca_task_free(doca_rdma_task_write_as_task(tasks[i]));
		doca_buf_dec_refcount(srcs[i], NULL);
		doca_buf_dec_refcount(dsts[i], NULL);
	}
	/* best effort: the figures are taken */
	doca_buf_inventory_stop(inv);
	doca_buf_inventory_destroy(inv);
	doca_rdma_connection_disconnect(ca);
	doca_ctx_stop(doca_rdma_as_ctx(A));
	doca_ctx_stop(doca_rdma_as_ctx(B));
	doca_rdma_destroy(A);
	doca_rdma_destroy(B);
	doca_mmap_destroy(rb);
	doca_mmap_stop(ma);
	doca_mmap_stop(mb);
	doca_mmap_destroy(ma);
	doca_mmap_destroy(mb);
	doca_pe_destroy(pa);
	doca_pe_destroy(pb);
	doca_dev_close(dev);
	close(ep);
	free(mem_a);
	if (!strcmp(memkind, "memfd"))
		munmap(mem_b, len);
	else
		free(mem_b);
	printf("native_ir transport=%s mem=%s n=%d batch=%d ok\n", want, memkind, n, batch);
	return 0;
}
