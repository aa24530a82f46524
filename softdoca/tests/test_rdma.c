/* test_rdma: DOCA RDMA over softdoca, in one process: two rdma contexts on
 * soft_lo, each with its own progress engine, connected out of band and via
 * RDMA CM. One line per check, a summary line, non-zero exit on failure.
 * Links against libsoftdoca; reads a few private fields through rdma.h. */
#include "check.h"
#include "rdma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

int sd_rdma_fail_reason_for_test(const struct doca_rdma_connection *c);
struct doca_dev *doca_rdma_get_dev_for_test(struct doca_rdma *r);

/* ------------------------------------------------------------------ state */
static struct doca_pe *pa, *pb;
static struct doca_rdma *A, *B;

static void progress_both(void)
{
	int did = doca_pe_progress(pa);

	did |= doca_pe_progress(pb);
	if (!did)
		usleep(50);
}

/* progress: 1 = both, 0 = only pa */
static int wait_done(struct done *d, int both, double timeout)
{
	double end = now_s() + timeout;

	while (!d->done && now_s() < end) {
		if (both)
			progress_both();
		else if (!doca_pe_progress(pa))
			sched_yield();
	}
	return d->done;
}

static int wait_flag(int *flag, double timeout)
{
	double end = now_s() + timeout;

	while (!*flag && now_s() < end)
		progress_both();
	return *flag;
}

#define TASK_CB(name, type)                                                                    \
	static void name##_cb(struct type *task, union doca_data ud, union doca_data cud)       \
	{                                                                                      \
		struct done *d = ud.ptr;                                                       \
		(void)cud;                                                                     \
		d->st = doca_task_get_status(doca_rdma_##name##_as_task(task));               \
		d->done = 1;                                                                   \
	}

TASK_CB(task_receive, doca_rdma_task_receive)
TASK_CB(task_send, doca_rdma_task_send)
TASK_CB(task_send_imm, doca_rdma_task_send_imm)
TASK_CB(task_read, doca_rdma_task_read)
TASK_CB(task_write, doca_rdma_task_write)
TASK_CB(task_write_imm, doca_rdma_task_write_imm)
TASK_CB(task_atomic_cmp_swp, doca_rdma_task_atomic_cmp_swp)
TASK_CB(task_atomic_fetch_add, doca_rdma_task_atomic_fetch_add)

/* connection events, per ctx: [0] = A, [1] = B */
struct cev {
	int req, est, fail, disc;
	struct doca_rdma_connection *last_req, *last_est, *last_fail, *last_disc;
};
static struct cev ev[2];
static int accept_mode = 1; /* request callback: 1 accept, 0 reject */
static const char priv_msg[] = "hello-from-server";

static int side(union doca_data cud)
{
	return (int)cud.u64;
}

static void on_req(struct doca_rdma_connection *c, union doca_data cud)
{
	struct cev *e = &ev[side(cud)];

	e->req++;
	e->last_req = c;
	if (accept_mode == 1)
		doca_rdma_connection_accept(c, (void *)priv_msg, sizeof(priv_msg));
	else if (accept_mode == 0)
		doca_rdma_connection_reject(c);
}

static void on_est(struct doca_rdma_connection *c, union doca_data ud, union doca_data cud)
{
	(void)ud;
	ev[side(cud)].est++;
	ev[side(cud)].last_est = c;
}

static void on_fail(struct doca_rdma_connection *c, union doca_data ud, union doca_data cud)
{
	(void)ud;
	ev[side(cud)].fail++;
	ev[side(cud)].last_fail = c;
}

static void on_disc(struct doca_rdma_connection *c, union doca_data ud, union doca_data cud)
{
	(void)ud;
	ev[side(cud)].disc++;
	ev[side(cud)].last_disc = c;
}

static struct doca_rdma *make_rdma(struct doca_dev *dev, struct doca_pe *pe, int which)
{
	struct doca_rdma *r = NULL;
	uint32_t perms = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ | DOCA_ACCESS_FLAG_RDMA_WRITE |
			 DOCA_ACCESS_FLAG_RDMA_ATOMIC;
	uint32_t got = 0;
	uint16_t u16 = 0;
	uint8_t u8 = 0;

	RC(doca_rdma_create(dev, &r), DOCA_SUCCESS);
	RC(doca_rdma_get_permissions(r, &got), DOCA_SUCCESS);
	CHECK(got == DOCA_ACCESS_FLAG_LOCAL_READ_WRITE, "default permissions LOCAL_READ_WRITE");
	RC(doca_rdma_get_max_num_connections(r, &u16), DOCA_SUCCESS);
	CHECK(u16 == 1, "default max_num_connections 1");
	RC(doca_rdma_set_permissions(r, 0x10), DOCA_ERROR_INVALID_VALUE);
	RC(doca_rdma_set_permissions(r, perms), DOCA_SUCCESS);
	RC(doca_rdma_set_max_num_connections(r, 0), DOCA_ERROR_INVALID_VALUE);
	RC(doca_rdma_set_max_num_connections(r, 8), DOCA_SUCCESS);
	RC(doca_rdma_set_transport_type(r, DOCA_RDMA_TRANSPORT_TYPE_DC), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_rdma_set_rnr_retry_count(r, 8), DOCA_ERROR_INVALID_VALUE);
	RC(doca_rdma_set_rnr_retry_count(r, 1), DOCA_SUCCESS);
	RC(doca_rdma_get_rnr_retry_count(r, &u8), DOCA_SUCCESS);
	CHECK(u8 == 1, "rnr_retry_count 1");
	RC(doca_rdma_set_connection_request_timeout(r, 2000), DOCA_SUCCESS);
	RC(doca_rdma_set_send_queue_size(r, 100), DOCA_SUCCESS);
	RC(doca_rdma_get_send_queue_size(r, &got), DOCA_SUCCESS);
	CHECK(got == 128, "send queue size rounded to 128");
	RC(doca_rdma_set_max_send_buf_list_len(r, 4), DOCA_SUCCESS);
	RC(doca_rdma_task_receive_set_dst_buf_list_len(r, 4), DOCA_SUCCESS);
	RC(doca_rdma_set_connection_state_callbacks(r, on_req, on_est, on_fail, on_disc), DOCA_SUCCESS);
	RC(doca_rdma_task_receive_set_conf(r, task_receive_cb, task_receive_cb, 16), DOCA_SUCCESS);
	RC(doca_rdma_task_send_set_conf(r, task_send_cb, task_send_cb, 16), DOCA_SUCCESS);
	RC(doca_rdma_task_send_imm_set_conf(r, task_send_imm_cb, task_send_imm_cb, 16), DOCA_SUCCESS);
	RC(doca_rdma_task_read_set_conf(r, task_read_cb, task_read_cb, 16), DOCA_SUCCESS);
	RC(doca_rdma_task_write_set_conf(r, task_write_cb, task_write_cb, 16), DOCA_SUCCESS);
	RC(doca_rdma_task_write_imm_set_conf(r, task_write_imm_cb, task_write_imm_cb, 16), DOCA_SUCCESS);
	RC(doca_rdma_task_atomic_cmp_swp_set_conf(r, task_atomic_cmp_swp_cb, task_atomic_cmp_swp_cb, 16),
	   DOCA_SUCCESS);
	RC(doca_rdma_task_atomic_fetch_add_set_conf(r, task_atomic_fetch_add_cb, task_atomic_fetch_add_cb, 16),
	   DOCA_SUCCESS);
	RC(doca_ctx_set_user_data(doca_rdma_as_ctx(r), (union doca_data){.u64 = (uint64_t)which}), DOCA_SUCCESS);
	RC(doca_pe_connect_ctx(pe, doca_rdma_as_ctx(r)), DOCA_SUCCESS);
	return r;
}

/* ------------------------------------------------------------------ memory */
#define MEM (4u << 20)
static uint8_t *memA, *memB, *memBro;
static struct doca_mmap *mA, *mB, *mBro, *rB, *rBro, *rBbig, *rBkey;
static struct doca_buf_inventory *invA, *invB;

static struct doca_mmap *local_map(struct doca_dev *dev, void *mem, size_t len, uint32_t perms)
{
	struct doca_mmap *m = NULL;

	doca_mmap_create(&m);
	doca_mmap_set_memrange(m, mem, len);
	doca_mmap_set_permissions(m, perms);
	doca_mmap_add_dev(m, dev);
	RC(doca_mmap_start(m), DOCA_SUCCESS);
	return m;
}

static struct doca_mmap *remote_map(struct doca_dev *dev, struct doca_mmap *m, int forge)
{
	const void *desc = NULL;
	size_t len = 0;
	struct doca_mmap *r = NULL;
	static uint8_t copy[SD_MMAP_DESC_LEN + (64u << 10)]; /* under a provider its section follows the 82 bytes */

	RC(doca_mmap_export_rdma(m, dev, &desc, &len), DOCA_SUCCESS);
	CHECK(len >= SD_MMAP_DESC_LEN && len <= sizeof(copy), "the descriptor fits the copy");
	memcpy(copy, desc, len);
	if (forge == 1) /* length + 4 KiB: past the real map */
		sd_put_le64(copy + 32, sd_get_le64(copy + 32) + 4096);
	else if (forge == 2) /* wrong key */
		copy[44] ^= 0x5a;
	if (forge) { /* CRC-32 (IEEE), recomputed so that the descriptor parses */
		uint32_t c = 0xffffffffu;
		for (size_t i = 0; i < SD_MMAP_DESC_LEN - 4; i++) { /* over the 82 bytes (a provider's section keeps its own) */
			c ^= copy[i];
			for (int k = 0; k < 8; k++)
				c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
		}
		sd_put_le32(copy + SD_MMAP_DESC_LEN - 4, ~c);
	}
	RC(doca_mmap_create_from_export(NULL, copy, len, dev, &r), DOCA_SUCCESS);
	return r;
}

static struct doca_buf *buf(struct doca_buf_inventory *inv, struct doca_mmap *m, void *addr, size_t len,
			    size_t data_len)
{
	struct doca_buf *b = NULL;

	if (doca_buf_inventory_buf_get_by_args(inv, m, addr, len, addr, data_len, &b) != DOCA_SUCCESS)
		printf("buf_get_by_args failed\n");
	return b;
}

/* ------------------------------------------------------------------ tests */
static struct doca_rdma_connection *cA, *cB;

static void test_connect_oob(struct doca_rdma_connection **ca, struct doca_rdma_connection **cb, int check_bad)
{
	const void *da = NULL, *db = NULL;
	size_t la = 0, lb = 0;
	int est0 = ev[0].est, est1 = ev[1].est;
	uint8_t bad[SD_BLOB_LEN];
	uint32_t ida = 0, idb = 0;

	RC(doca_rdma_export(A, &da, &la, ca), DOCA_SUCCESS);
	RC(doca_rdma_export(B, &db, &lb, cb), DOCA_SUCCESS);
	CHECK(la == SD_BLOB_LEN && lb == SD_BLOB_LEN, "export blobs are %zu/%zu bytes", la, lb);
	if (check_bad) {
		memcpy(bad, db, lb);
		bad[20] ^= 1;
		RC(doca_rdma_connect(A, bad, lb, *ca), DOCA_ERROR_INVALID_VALUE);
		RC(doca_rdma_connect(A, db, lb - 1, *ca), DOCA_ERROR_INVALID_VALUE);
		RC(doca_rdma_connect(A, da, la, *ca), DOCA_ERROR_INVALID_VALUE);
		RC(doca_rdma_connect(B, db, lb, *ca), DOCA_ERROR_INVALID_VALUE);
	}
	RC(doca_rdma_connect(A, db, lb, *ca), DOCA_SUCCESS);
	RC(doca_rdma_connect(B, da, la, *cb), DOCA_SUCCESS);
	RC(doca_rdma_connect(B, da, la, *cb), DOCA_ERROR_BAD_STATE);
	{
		double end = now_s() + 5;
		while ((ev[0].est == est0 || ev[1].est == est1) && now_s() < end)
			progress_both();
	}
	CHECK(ev[0].est == est0 + 1 && ev[1].est == est1 + 1, "OOB connection established on both sides");
	doca_rdma_connection_get_id(*ca, &ida);
	doca_rdma_connection_get_id(*cb, &idb);
	CHECK(ev[0].last_est == *ca && ev[1].last_est == *cb, "established callbacks name the connections (ids %u/%u)",
	      ida, idb);
}

static void test_write(struct doca_dev *dev)
{
	struct doca_buf *src = buf(invA, mA, memA, 1u << 20, 1u << 20);
	struct doca_buf *dst = buf(invB, rB, memB, 1u << 20, 0);
	struct doca_rdma_task_write *t = NULL;
	struct done d = {0};
	double t0, t1;
	int progressed_b_before = 0;

	(void)dev;
	for (size_t i = 0; i < (1u << 20); i++)
		memA[i] = (uint8_t)(i * 7 + 3);
	memset(memB, 0, 1u << 20);
	RC(doca_rdma_task_write_allocate_init(A, cA, src, dst, (union doca_data){.ptr = &d}, &t), DOCA_SUCCESS);
	t0 = now_s();
	RC(doca_task_submit(doca_rdma_task_write_as_task(t)), DOCA_SUCCESS);
	CHECK(wait_done(&d, 0, 10) && d.st == DOCA_SUCCESS, "1 MiB write completed (target never progressed)");
	t1 = now_s();
	CHECK(memcmp(memA, memB, 1u << 20) == 0 && !progressed_b_before, "1 MiB write: bytes arrived");
	printf("info 1 MiB write (first): %.1f us\n", (t1 - t0) * 1e6);
	RC(doca_task_submit(doca_rdma_task_write_as_task(t)), DOCA_SUCCESS);
	RC(doca_task_submit(doca_rdma_task_write_as_task(t)), DOCA_ERROR_BAD_STATE);
	d.done = 0;
	wait_done(&d, 0, 10);
	{
		double best = 1e9, sum = 0;
		int n = 50, ok = 1;
		for (int i = 0; i < n && ok; i++) {
			double a = now_s();
			d.done = 0;
			ok = doca_task_submit(doca_rdma_task_write_as_task(t)) == DOCA_SUCCESS && wait_done(&d, 0, 10) &&
			     d.st == DOCA_SUCCESS;
			a = now_s() - a;
			sum += a;
			if (a < best)
				best = a;
		}
		CHECK(ok, "%d more 1 MiB writes", n);
		printf("info 1 MiB write: %.1f us average, %.1f us best (%.2f GB/s)\n", sum / n * 1e6, best * 1e6,
		       (1u << 20) / best / 1e9);
	}
	doca_task_free(doca_rdma_task_write_as_task(t));
	doca_buf_dec_refcount(src, NULL);
	doca_buf_dec_refcount(dst, NULL);

	/* 8-byte write round trips */
	src = buf(invA, mA, memA, 8, 8);
	dst = buf(invB, rB, memB + 8192, 8, 0);
	RC(doca_rdma_task_write_allocate_init(A, cA, src, dst, (union doca_data){.ptr = &d}, &t), DOCA_SUCCESS);
	{
		int n = 2000, ok = 1;
		t0 = now_s();
		for (int i = 0; i < n && ok; i++) {
			d.done = 0;
			memcpy(memA, &i, sizeof(i));
			ok = doca_task_submit(doca_rdma_task_write_as_task(t)) == DOCA_SUCCESS && wait_done(&d, 0, 5) &&
			     d.st == DOCA_SUCCESS && memcmp(memB + 8192, &i, sizeof(i)) == 0;
		}
		t1 = now_s();
		CHECK(ok, "%d 8-byte writes, each landed", n);
		printf("info 8-byte write round trip: %.1f us average\n", (t1 - t0) / n * 1e6);
	}
	doca_task_free(doca_rdma_task_write_as_task(t));
	doca_buf_dec_refcount(src, NULL);
	doca_buf_dec_refcount(dst, NULL);
}

static void test_read(void)
{
	struct doca_buf *src = buf(invA, rB, memB + (2u << 20), 65536, 65536);
	struct doca_buf *dst = buf(invA, mA, memA + (2u << 20), 131072, 0);
	struct doca_rdma_task_read *t = NULL;
	struct done d = {0};
	size_t dl = 0;

	for (size_t i = 0; i < 65536; i++)
		memB[(2u << 20) + i] = (uint8_t)(i * 13 + 1);
	RC(doca_rdma_task_read_allocate_init(A, cA, src, dst, (union doca_data){.ptr = &d}, &t), DOCA_SUCCESS);
	RC(doca_task_submit(doca_rdma_task_read_as_task(t)), DOCA_SUCCESS);
	CHECK(wait_done(&d, 0, 10) && d.st == DOCA_SUCCESS, "64 KiB read completed (target never progressed)");
	doca_buf_get_data_len(dst, &dl);
	CHECK(doca_rdma_task_read_get_result_len(t) == 65536 && dl == 65536, "read result len %u, dst data_len %zu",
	      doca_rdma_task_read_get_result_len(t), dl);
	CHECK(memcmp(memA + (2u << 20), memB + (2u << 20), 65536) == 0, "read: bytes match");
	doca_task_free(doca_rdma_task_read_as_task(t));
	doca_buf_dec_refcount(src, NULL);
	doca_buf_dec_refcount(dst, NULL);
}

static void test_send_recv(void)
{
	struct doca_buf *rbuf = buf(invB, mB, memB + (3u << 20), 8192, 0);
	struct doca_buf *s1 = buf(invA, mA, memA + (3u << 20), 1000, 1000);
	struct doca_buf *s2 = buf(invA, mA, memA + (3u << 20) + 4096, 2000, 2000);
	struct doca_rdma_task_receive *r = NULL;
	struct doca_rdma_task_send *s = NULL;
	struct doca_rdma_task_send_imm *si = NULL;
	struct doca_rdma_task_write_imm *wi = NULL;
	struct done dr = {0}, ds = {0};
	size_t dl = 0;
	doca_be32_t imm = htonl(0xdeadbeefu);

	for (int i = 0; i < 6096; i++)
		memA[(3u << 20) + i] = (uint8_t)(i ^ 0x55);
	RC(doca_buf_chain_list(s1, s2), DOCA_SUCCESS);
	RC(doca_rdma_task_receive_allocate_init(B, rbuf, (union doca_data){.ptr = &dr}, &r), DOCA_SUCCESS);
	RC(doca_task_submit(doca_rdma_task_receive_as_task(r)), DOCA_SUCCESS);
	RC(doca_rdma_task_send_allocate_init(A, cA, s1, (union doca_data){.ptr = &ds}, &s), DOCA_SUCCESS);
	RC(doca_task_submit(doca_rdma_task_send_as_task(s)), DOCA_SUCCESS);
	CHECK(wait_done(&ds, 1, 10) && ds.st == DOCA_SUCCESS, "send (2-buffer gather list) completed");
	CHECK(wait_done(&dr, 1, 10) && dr.st == DOCA_SUCCESS, "receive completed");
	doca_buf_get_data_len(rbuf, &dl);
	CHECK(doca_rdma_task_receive_get_result_opcode(r) == DOCA_RDMA_OPCODE_RECV_SEND &&
		      doca_rdma_task_receive_get_result_len(r) == 3000 && dl == 3000,
	      "receive: opcode RECV_SEND, len %u, data_len %zu", doca_rdma_task_receive_get_result_len(r), dl);
	CHECK(memcmp(memB + (3u << 20), memA + (3u << 20), 1000) == 0 &&
		      memcmp(memB + (3u << 20) + 1000, memA + (3u << 20) + 4096, 2000) == 0,
	      "receive: data matches the gathered source");
	CHECK(doca_rdma_task_receive_get_result_rdma_connection(r) == cB, "receive: connection is B's end");
	doca_task_free(doca_rdma_task_send_as_task(s));

	/* send_imm */
	doca_buf_reset_data_len(rbuf);
	dr.done = ds.done = 0;
	RC(doca_task_submit(doca_rdma_task_receive_as_task(r)), DOCA_SUCCESS);
	RC(doca_rdma_task_send_imm_allocate_init(A, cA, s2, imm, (union doca_data){.ptr = &ds}, &si), DOCA_SUCCESS);
	RC(doca_buf_unchain_list(s1, s2), DOCA_SUCCESS);
	RC(doca_task_submit(doca_rdma_task_send_imm_as_task(si)), DOCA_SUCCESS);
	CHECK(wait_done(&ds, 1, 10) && ds.st == DOCA_SUCCESS && wait_done(&dr, 1, 10) && dr.st == DOCA_SUCCESS,
	      "send_imm + receive completed");
	CHECK(doca_rdma_task_receive_get_result_opcode(r) == DOCA_RDMA_OPCODE_RECV_SEND_WITH_IMM &&
		      doca_rdma_task_receive_get_result_immediate_data(r) == imm &&
		      doca_rdma_task_receive_get_result_len(r) == 2000,
	      "receive: opcode SEND_WITH_IMM, immediate 0x%08x bit-exact, len 2000",
	      doca_rdma_task_receive_get_result_immediate_data(r));
	doca_task_free(doca_rdma_task_send_imm_as_task(si));

	/* write_imm */
	{
		struct doca_buf *wsrc = buf(invA, mA, memA + (3u << 20), 100, 100);
		struct doca_buf *wdst = buf(invA, rB, memB + (3u << 20) + 65536, 100, 0);
		doca_be32_t imm2 = htonl(0x01020304u);

		doca_buf_reset_data_len(rbuf);
		dr.done = ds.done = 0;
		memset(memB + (3u << 20) + 65536, 0, 100);
		RC(doca_task_submit(doca_rdma_task_receive_as_task(r)), DOCA_SUCCESS);
		RC(doca_rdma_task_write_imm_allocate_init(A, cA, wsrc, wdst, imm2, (union doca_data){.ptr = &ds}, &wi),
		   DOCA_SUCCESS);
		RC(doca_task_submit(doca_rdma_task_write_imm_as_task(wi)), DOCA_SUCCESS);
		CHECK(wait_done(&ds, 1, 10) && ds.st == DOCA_SUCCESS && wait_done(&dr, 1, 10) && dr.st == DOCA_SUCCESS,
		      "write_imm + receive completed");
		CHECK(doca_rdma_task_receive_get_result_opcode(r) == DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM &&
			      doca_rdma_task_receive_get_result_immediate_data(r) == imm2 &&
			      memcmp(memB + (3u << 20) + 65536, memA + (3u << 20), 100) == 0,
		      "receive: opcode WRITE_WITH_IMM, immediate bit-exact, data landed");
		doca_task_free(doca_rdma_task_write_imm_as_task(wi));
		doca_buf_dec_refcount(wsrc, NULL);
		doca_buf_dec_refcount(wdst, NULL);
	}

	/* receive too small */
	{
		struct doca_buf *small = buf(invB, mB, memB + (3u << 20), 16, 0);
		struct doca_rdma_task_receive *r2 = NULL;
		struct done d2 = {0};

		ds.done = 0;
		RC(doca_rdma_task_receive_allocate_init(B, small, (union doca_data){.ptr = &d2}, &r2), DOCA_SUCCESS);
		RC(doca_task_submit(doca_rdma_task_receive_as_task(r2)), DOCA_SUCCESS);
		RC(doca_rdma_task_send_allocate_init(A, cA, s1, (union doca_data){.ptr = &ds}, &s), DOCA_SUCCESS);
		RC(doca_task_submit(doca_rdma_task_send_as_task(s)), DOCA_SUCCESS);
		CHECK(wait_done(&ds, 1, 10) && ds.st == DOCA_ERROR_TOO_BIG && wait_done(&d2, 1, 10) &&
			      d2.st == DOCA_ERROR_TOO_BIG,
		      "send into a too small receive: TOO_BIG on both sides");
		doca_task_free(doca_rdma_task_send_as_task(s));
		doca_task_free(doca_rdma_task_receive_as_task(r2));
		doca_buf_dec_refcount(small, NULL);
	}
	doca_task_free(doca_rdma_task_receive_as_task(r));
	doca_buf_dec_refcount(rbuf, NULL);
	doca_buf_dec_refcount(s1, NULL);
	doca_buf_dec_refcount(s2, NULL);
}

static void test_atomics(void)
{
	uint64_t *target = (uint64_t *)(memB + 16384);
	struct doca_buf *dst = buf(invA, rB, target, 8, 0);
	struct doca_buf *mis = buf(invA, rB, memB + 16388, 8, 0);
	struct doca_buf *res = buf(invA, mA, memA + 16384, 64, 0);
	struct doca_rdma_task_atomic_cmp_swp *cs = NULL;
	struct doca_rdma_task_atomic_fetch_add *fa = NULL;
	struct done d = {0};
	uint64_t got;

	*target = 5;
	RC(doca_rdma_task_atomic_cmp_swp_allocate_init(A, cA, dst, res, 5, 9, (union doca_data){.ptr = &d}, &cs),
	   DOCA_SUCCESS);
	RC(doca_task_submit(doca_rdma_task_atomic_cmp_swp_as_task(cs)), DOCA_SUCCESS);
	CHECK(wait_done(&d, 0, 10) && d.st == DOCA_SUCCESS, "cmp_swp completed");
	memcpy(&got, memA + 16384, 8);
	CHECK(got == 5 && *target == 9, "cmp_swp success: old %llu, target now %llu", (unsigned long long)got,
	      (unsigned long long)*target);
	d.done = 0;
	doca_buf_reset_data_len(res);
	doca_rdma_task_atomic_cmp_swp_set_swap_data(cs, 11);
	RC(doca_task_submit(doca_rdma_task_atomic_cmp_swp_as_task(cs)), DOCA_SUCCESS);
	wait_done(&d, 0, 10);
	memcpy(&got, memA + 16384, 8);
	CHECK(d.st == DOCA_SUCCESS && got == 9 && *target == 9, "cmp_swp mismatch: old %llu, target unchanged",
	      (unsigned long long)got);
	d.done = 0;
	doca_buf_reset_data_len(res);
	RC(doca_rdma_task_atomic_fetch_add_allocate_init(A, cA, dst, res, 10, (union doca_data){.ptr = &d}, &fa),
	   DOCA_SUCCESS);
	RC(doca_task_submit(doca_rdma_task_atomic_fetch_add_as_task(fa)), DOCA_SUCCESS);
	wait_done(&d, 0, 10);
	memcpy(&got, memA + 16384, 8);
	CHECK(d.st == DOCA_SUCCESS && got == 9 && *target == 19, "fetch_add: old %llu, target now %llu",
	      (unsigned long long)got, (unsigned long long)*target);
	doca_rdma_task_atomic_fetch_add_set_dst_buf(fa, mis);
	doca_buf_reset_data_len(res);
	RC(doca_task_submit(doca_rdma_task_atomic_fetch_add_as_task(fa)), DOCA_ERROR_INVALID_VALUE);
	doca_task_free(doca_rdma_task_atomic_cmp_swp_as_task(cs));
	doca_task_free(doca_rdma_task_atomic_fetch_add_as_task(fa));
	doca_buf_dec_refcount(dst, NULL);
	doca_buf_dec_refcount(mis, NULL);
	doca_buf_dec_refcount(res, NULL);
}

static void remote_write_expect(struct doca_mmap *rm, void *raddr, size_t len, doca_error_t want, const char *what)
{
	struct doca_buf *src = buf(invA, mA, memA, len, len);
	struct doca_buf *dst = buf(invA, rm, raddr, len, 0);
	struct doca_rdma_task_write *t = NULL;
	struct done d = {0};

	if (!src || !dst) {
		CHECK(0, "%s: buffers", what);
		return;
	}
	memset(memA, 0xab, len);
	RC(doca_rdma_task_write_allocate_init(A, cA, src, dst, (union doca_data){.ptr = &d}, &t), DOCA_SUCCESS);
	RC(doca_task_submit(doca_rdma_task_write_as_task(t)), DOCA_SUCCESS);
	wait_done(&d, 0, 10);
	CHECK(d.done && d.st == want, "%s: status %s", what, doca_error_get_name(d.st));
	doca_task_free(doca_rdma_task_write_as_task(t));
	doca_buf_dec_refcount(src, NULL);
	doca_buf_dec_refcount(dst, NULL);
}

static uint16_t free_port(void);
const char *softdoca_task_get_error_detail(const struct doca_task *task);
const char *softdoca_rdma_connection_get_error_detail(const struct doca_rdma_connection *conn);
long softdoca_debug_live_objects(const char *kind);

static int has(const char *s, const char *sub)
{
	return s && strstr(s, sub) != NULL;
}

/* A remote access error is fatal for an RC connection: the refused task
 * fails NOT_PERMITTED with a detail naming the side and the cause, the task
 * queued behind it on the same connection is flushed, both ends get their
 * disconnect callback, and the target's connection records why. */
static void access_case(struct doca_mmap *rm, void *raddr, size_t len, const char *want, const char *what)
{
	struct doca_rdma_connection *a2 = NULL, *b2 = NULL;
	struct doca_buf *src = buf(invA, mA, memA, len, len);
	struct doca_buf *dst = buf(invA, rm, raddr, len, 0);
	struct doca_buf *src2 = buf(invA, mA, memA, 16, 16);
	struct doca_buf *dst2 = buf(invA, rB, memB + 4096, 16, 0);
	struct doca_rdma_task_write *t = NULL, *t2 = NULL;
	struct done d = {0}, d2 = {0};
	int disc0 = ev[0].disc, disc1 = ev[1].disc;
	const char *det, *det2, *why;
	double end;

	const void *da = NULL, *db = NULL;
	size_t la = 0, lb = 0;

	if (!src || !dst || !src2 || !dst2) {
		CHECK(0, "%s: buffers", what);
		return;
	}
	memset(memA, 0xab, len);
	/* both tasks wait for the connection (B has not connected yet), so they
	 * go out back to back: the second is certainly behind the refused one */
	RC(doca_rdma_export(A, &da, &la, &a2), DOCA_SUCCESS);
	RC(doca_rdma_export(B, &db, &lb, &b2), DOCA_SUCCESS);
	RC(doca_rdma_connect(A, db, lb, a2), DOCA_SUCCESS);
	RC(doca_rdma_task_write_allocate_init(A, a2, src, dst, (union doca_data){.ptr = &d}, &t), DOCA_SUCCESS);
	RC(doca_rdma_task_write_allocate_init(A, a2, src2, dst2, (union doca_data){.ptr = &d2}, &t2), DOCA_SUCCESS);
	RC(doca_task_submit(doca_rdma_task_write_as_task(t)), DOCA_SUCCESS);
	RC(doca_task_submit(doca_rdma_task_write_as_task(t2)), DOCA_SUCCESS);
	RC(doca_rdma_connect(B, da, la, b2), DOCA_SUCCESS);
	wait_done(&d, 1, 10);
	wait_done(&d2, 0, 10);
	det = softdoca_task_get_error_detail(doca_rdma_task_write_as_task(t));
	det2 = softdoca_task_get_error_detail(doca_rdma_task_write_as_task(t2));
	CHECK(d.done && d.st == DOCA_ERROR_NOT_PERMITTED, "%s: status %s", what, doca_error_get_name(d.st));
	CHECK(has(det, "target refused: ") && has(det, want), "%s: detail \"%s\"", what, det ? det : "(null)");
	CHECK(d2.done && d2.st == DOCA_ERROR_CONNECTION_RESET && has(det2, "flushed: remote access error"),
	      "%s: the task behind it flushed: %s \"%s\"", what, doca_error_get_name(d2.st), det2 ? det2 : "(null)");
	end = now_s() + 5;
	while ((ev[0].disc == disc0 || ev[1].disc == disc1) && now_s() < end)
		progress_both();
	why = softdoca_rdma_connection_get_error_detail(b2);
	CHECK(ev[0].disc == disc0 + 1 && ev[1].disc == disc1 + 1 && ev[1].last_disc == b2 &&
		      has(why, "remote access error") && has(why, want),
	      "%s: both ends disconnected; the target's connection says \"%s\"", what, why ? why : "(null)");
	RC(doca_task_submit(doca_rdma_task_write_as_task(t)), DOCA_ERROR_NOT_CONNECTED);
	det = softdoca_task_get_error_detail(doca_rdma_task_write_as_task(t));
	CHECK(has(det, "is closed: remote access error"), "%s: submit on the broken connection: \"%s\"", what,
	      det ? det : "(null)");
	doca_task_free(doca_rdma_task_write_as_task(t));
	doca_task_free(doca_rdma_task_write_as_task(t2));
	doca_buf_dec_refcount(src, NULL);
	doca_buf_dec_refcount(dst, NULL);
	doca_buf_dec_refcount(src2, NULL);
	doca_buf_dec_refcount(dst2, NULL);
}

static void test_access_errors(void)
{
	size_t i;
	int untouched = 1;
	char want[160];

	memset(memBro, 0x11, 4096);
	access_case(rBro, memBro, 64, "lacks RDMA_WRITE (has LOCAL_READ_WRITE|RDMA_READ); grant RDMA_WRITE on the target's MemoryMap",
		    "write to a map without RDMA_WRITE");
	for (i = 0; i < 4096; i++)
		untouched &= memBro[i] == 0x11;
	CHECK(untouched, "target bytes untouched");
	snprintf(want, sizeof(want), "remote range [0x%llx, +16) is outside mmap",
		 (unsigned long long)(uintptr_t)(memB + MEM - 8));
	access_case(rBbig, memB + MEM - 8, 16, want, "write past the end of the map");
	access_case(rBkey, memB, 16, "wrong access key", "write with a wrong key");
	remote_write_expect(rB, memB + 100, 16, DOCA_SUCCESS, "other connections unaffected by remote access errors");
	{
		/* a local buffer larger than the remote one: refused at submit, both lengths named */
		struct doca_buf *src = buf(invA, mA, memA, 8192, 8192);
		struct doca_buf *dst = buf(invA, rBro, memBro, 4096, 0);
		struct doca_rdma_task_write *t = NULL;
		const char *det;

		RC(doca_rdma_task_write_allocate_init(A, cA, src, dst, (union doca_data){.ptr = NULL}, &t), DOCA_SUCCESS);
		RC(doca_task_submit(doca_rdma_task_write_as_task(t)), DOCA_ERROR_INVALID_VALUE);
		det = softdoca_task_get_error_detail(doca_rdma_task_write_as_task(t));
		CHECK(has(det, "local buffer holds 8192 bytes but the remote buffer is 4096 bytes"),
		      "local buffer larger than the remote one: \"%s\"", det ? det : "(null)");
		doca_task_free(doca_rdma_task_write_as_task(t));
		doca_buf_dec_refcount(src, NULL);
		doca_buf_dec_refcount(dst, NULL);
	}
}

/* A sanitizer runtime in the process: built with it, or preloaded (e.g. the
 * plain build run from tools/test-sanitized.sh's pytest, LD_PRELOAD=libasan). */
extern void __asan_init(void) __attribute__((weak));
extern void __tsan_init(void) __attribute__((weak));
static int sanitizer_runtime(void)
{
	return &__asan_init != NULL || &__tsan_init != NULL;
}

/* RSS of this process in kB (VmRSS). */
static long rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/* Regression: every closed connection stayed allocated until the context was
 * destroyed (~0.66 kB per connect/close cycle on a long-running responder).
 * 2,000 RDMA CM connect/disconnect cycles: live objects return to baseline
 * (connections: at most SD_CONN_KEEP_CLOSED closed ones kept per context).
 * Under a provider (SOFTDOCA_PROVIDER): every provider connection closes with
 * its DOCA connection, also one in the middle of its wire-up (its peer's half
 * never got an address: every cycle here, on one side), so at most a few are
 * open after the cycles. Until 2026-12-07 the bridge deferred those by the
 * engine timeout: 300-1,000 open at once, their freed heap kept in RSS (ucx
 * over tcp +0.3-1.0 kB per cycle). ucx: its UCP endpoints return to baseline
 * within a flush's time (same-host endpoints,
 * which UCX refuses to force-close, stayed open for the worker's life: about
 * 15 kB per cycle under UCX_TLS=posix,cma, 1.3 kB under tcp). And a provider
 * connection that never got the peer's address (its DOCA connection ended
 * first: every cycle here, on one side) is closed with its DOCA connection:
 * deferred too, it stayed open for the engine timeout, so about 800-1,500 were
 * open at once (and their peers' half, waiting for them: ucx, a UCP endpoint
 * and 2 fds each; ofi over tcp, an endpoint with 512 kB of receive buffers),
 * and the freed heap of that peak stayed in RSS (ofi over tcp: 1-14 kB per
 * cycle after the deferred closes, ucx over tcp 0-0.3 kB). */
static void test_connect_close_cycles(void)
{
	uint16_t port = free_port();
	struct doca_rdma_addr *addr = NULL;
	long base_conn = softdoca_debug_live_objects("connection"), base_link = softdoca_debug_live_objects("link");
	long base_ev = softdoca_debug_live_objects("event"), base_ctrl = softdoca_debug_live_objects("ctrl_frame");
	long rss_warm = 0, rss_end, rss_loop, peak_conn = 0, open_end = -1;
	long base_eps = softdoca_debug_counter("provider:live_eps");
	long base_new = softdoca_debug_counter("provider:conns_new"), peak_new = base_new;
	long base_wedged = softdoca_debug_counter("provider:txe_wedged");
	int n = 2000, ok = 1, i;
	double t0 = now_s(), end;

	accept_mode = 1;
	RC(doca_rdma_start_listen_to_port(B, port), DOCA_SUCCESS);
	RC(doca_rdma_addr_create(DOCA_RDMA_ADDR_TYPE_IPv4, "127.0.0.1", port, &addr), DOCA_SUCCESS);
	for (i = 0; i < n && ok; i++) {
		int est0 = ev[0].est, est1 = ev[1].est, disc1 = ev[1].disc;
		long c;

		ok = doca_rdma_connect_to_addr(A, addr, (union doca_data){.u64 = 1000 + (uint64_t)i}) == DOCA_SUCCESS;
		end = now_s() + 5;
		while (ok && (ev[0].est == est0 || ev[1].est == est1) && now_s() < end)
			progress_both();
		ok = ok && ev[0].est == est0 + 1 && ev[1].est == est1 + 1;
		ok = ok && doca_rdma_connection_disconnect(ev[0].last_est) == DOCA_SUCCESS;
		end = now_s() + 5;
		while (ok && ev[1].disc == disc1 && now_s() < end)
			progress_both();
		ok = ok && ev[1].disc == disc1 + 1;
		c = softdoca_debug_live_objects("connection");
		if (c > peak_conn)
			peak_conn = c;
		if (base_new >= 0 && (c = softdoca_debug_counter("provider:conns_new")) > peak_new)
			peak_new = c;
		if (i == 499)
			rss_warm = rss_kb();
	}
	for (int k = 0; k < 20; k++)
		progress_both();
	usleep(20000);
	rss_loop = rss_kb();
	CHECK(ok, "%d RDMA CM connect/disconnect cycles (%.2f s)", i, now_s() - t0);
	if (base_new >= 0) { /* a provider: its connections closed with theirs, their endpoints after a flush */
		open_end = softdoca_debug_counter("provider:live_conns");
		CHECK(open_end >= 0 && open_end <= 8,
		      "provider connections close with their DOCA connections, in a wire-up too: %ld open after the "
		      "cycles", open_end);
		end = now_s() + 2;
		while (base_eps >= 0 && softdoca_debug_counter("provider:live_eps") > base_eps && now_s() < end) {
			progress_both();
			usleep(1000);
		}
	}
	if (base_new >= 0)
		CHECK(peak_new - base_new <= 2,
		      "provider connections that never got the peer's address closed with their DOCA connection: "
		      "at most %ld open after a cycle (baseline %ld)", peak_new, base_new);
	if (base_wedged >= 0) /* ofi RDM: a close in the set-up waits for its HELLO (ofi_conn.c, ofi_conn_step) */
		CHECK(softdoca_debug_counter("provider:txe_wedged") == base_wedged,
		      "no transmit endpoint wedged by connections closed in their set-up: %ld (baseline %ld)",
		      softdoca_debug_counter("provider:txe_wedged"), base_wedged);
	if (base_eps >= 0)
		CHECK(softdoca_debug_counter("provider:live_eps") <= base_eps,
		      "provider endpoints back to baseline: %ld (baseline %ld; ucx: %ld closes done after a flush)",
		      softdoca_debug_counter("provider:live_eps"), base_eps, softdoca_debug_counter("provider:ep_graceful"));
	rss_end = rss_kb();
	printf("info connect/close cycles: RSS %ld kB after 500, %ld kB after %d (%ld kB once the provider's endpoints "
	       "closed; %ld provider connections open after the cycles); live connections peak %ld (baseline %ld)\n",
	       rss_warm, rss_loop, n, rss_end, open_end, peak_conn, base_conn);
	CHECK(peak_conn - base_conn <= 2 * (long)SD_CONN_KEEP_CLOSED + 4,
	      "live connections stay bounded: baseline %ld, peak %ld (keeps %u closed per context)", base_conn,
	      peak_conn, SD_CONN_KEEP_CLOSED);
	CHECK(softdoca_debug_live_objects("link") == base_link && softdoca_debug_live_objects("event") == base_ev &&
		      softdoca_debug_live_objects("ctrl_frame") == base_ctrl,
	      "links %ld/%ld, events %ld/%ld, control frames %ld/%ld back to baseline",
	      softdoca_debug_live_objects("link"), base_link, softdoca_debug_live_objects("event"), base_ev,
	      softdoca_debug_live_objects("ctrl_frame"), base_ctrl);
	if (sanitizer_runtime()) /* freed memory sits in quarantine: RSS says nothing here */
		printf("info RSS after 500 cycles %ld kB, after %d %ld kB (sanitizer runtime: not checked)\n", rss_warm,
		       n, rss_end);
	else
		CHECK(rss_end - rss_warm < 256, "RSS after 500 cycles %ld kB, after %d %ld kB (%+.3f kB/cycle)", rss_warm,
		      n, rss_end, (double)(rss_end - rss_warm) / (n - 500));
	RC(doca_rdma_stop_listen_to_port(B, port), DOCA_SUCCESS);
	RC(doca_rdma_addr_destroy(addr), DOCA_SUCCESS);
}

static void test_rnr(void)
{
	struct doca_rdma_connection *a2 = NULL, *b2 = NULL;
	struct doca_buf *s = buf(invA, mA, memA, 64, 64);
	struct doca_rdma_task_send *t = NULL;
	struct done d = {0};
	int disc0 = ev[0].disc, disc1 = ev[1].disc;
	double t0;

	test_connect_oob(&a2, &b2, 0);
	RC(doca_rdma_task_send_allocate_init(A, a2, s, (union doca_data){.ptr = &d}, &t), DOCA_SUCCESS);
	t0 = now_s();
	RC(doca_task_submit(doca_rdma_task_send_as_task(t)), DOCA_SUCCESS);
	CHECK(wait_done(&d, 1, 10) && d.st == DOCA_ERROR_TIME_OUT, "send with no receive posted: %s after %.0f ms",
	      doca_error_get_name(d.st), (now_s() - t0) * 1e3);
	{
		double end = now_s() + 5;
		while ((ev[0].disc == disc0 || ev[1].disc == disc1) && now_s() < end)
			progress_both();
	}
	CHECK(ev[0].disc == disc0 + 1 && ev[1].disc == disc1 + 1 && ev[0].last_disc == a2 && ev[1].last_disc == b2,
	      "RNR retry exceeded broke the connection on both sides (disconnects %d/%d)", ev[0].disc - disc0,
	      ev[1].disc - disc1);
	RC(doca_task_submit(doca_rdma_task_send_as_task(t)), DOCA_ERROR_NOT_CONNECTED);
	doca_task_free(doca_rdma_task_send_as_task(t));
	doca_buf_dec_refcount(s, NULL);
}

static uint16_t free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t l = sizeof(a);
	uint16_t p;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	bind(fd, (struct sockaddr *)&a, sizeof(a));
	getsockname(fd, (struct sockaddr *)&a, &l);
	p = ntohs(a.sin_port);
	close(fd);
	return p;
}

/* A port taken on the device's IPv4 address is refused even if its IPv6
 * address (::1 on lo) is free: the listener would miss IPv4 clients. */
static void test_listen_in_use(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t l = sizeof(a);
	uint16_t port;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 1) != 0) {
		CHECK(0, "listen_in_use: bind");
		close(fd);
		return;
	}
	getsockname(fd, (struct sockaddr *)&a, &l);
	port = ntohs(a.sin_port);
	RC(doca_rdma_start_listen_to_port(B, port), DOCA_ERROR_IN_USE);
	RC(doca_rdma_stop_listen_to_port(B, port), DOCA_ERROR_INVALID_VALUE); /* nothing left listening */
	close(fd);
	RC(doca_rdma_start_listen_to_port(B, port), DOCA_SUCCESS);
	RC(doca_rdma_start_listen_to_port(B, port), DOCA_ERROR_ALREADY_EXIST);
	RC(doca_rdma_stop_listen_to_port(B, port), DOCA_SUCCESS);
}

static void test_cm(void)
{
	uint16_t port = free_port(), closed = free_port();
	struct doca_rdma_addr *addr = NULL, *bad = NULL, *peer = NULL;
	struct cev e0 = ev[0], e1 = ev[1];
	struct doca_rdma_connection *c;
	enum doca_rdma_addr_type ty;
	const char *s = NULL;
	uint16_t p = 0;
	union doca_data ud;
	double t0;

	RC(doca_rdma_start_listen_to_port(B, 0), DOCA_ERROR_INVALID_VALUE);
	RC(doca_rdma_start_listen_to_port(B, port), DOCA_SUCCESS);
	RC(doca_rdma_start_listen_to_port(B, port), DOCA_ERROR_ALREADY_EXIST);
	RC(doca_rdma_addr_create(DOCA_RDMA_ADDR_TYPE_IPv4, "not-an-ip", port, &bad), DOCA_ERROR_INVALID_VALUE);
	RC(doca_rdma_addr_create(DOCA_RDMA_ADDR_TYPE_IPv4, "127.0.0.1", port, &addr), DOCA_SUCCESS);
	RC(doca_rdma_addr_get_params(addr, &ty, &s, &p), DOCA_SUCCESS);
	CHECK(ty == DOCA_RDMA_ADDR_TYPE_IPv4 && !strcmp(s, "127.0.0.1") && p == port, "addr params %s:%u", s, p);
	accept_mode = 1;
	RC(doca_rdma_connect_to_addr(A, addr, (union doca_data){.u64 = 77}), DOCA_SUCCESS);
	{
		double end = now_s() + 5;
		while ((ev[0].est == e0.est || ev[1].est == e1.est) && now_s() < end)
			progress_both();
	}
	CHECK(ev[1].req == e1.req + 1, "CM: request callback on the listener");
	CHECK(ev[0].est == e0.est + 1 && ev[1].est == e1.est + 1, "CM: established on both sides after accept");
	c = ev[0].last_est;
	doca_rdma_connection_get_user_data(c, &ud);
	CHECK(ud.u64 == 77, "CM: connection user data kept");
	CHECK(c->priv_len == sizeof(priv_msg) && !memcmp(c->priv, priv_msg, sizeof(priv_msg)),
	      "CM: accept private data delivered to the requester");
	RC(doca_rdma_connection_get_addr(ev[1].last_est, &peer), DOCA_SUCCESS);
	doca_rdma_addr_get_params(peer, &ty, &s, &p);
	CHECK(ty == DOCA_RDMA_ADDR_TYPE_IPv4 && !strcmp(s, "127.0.0.1"), "CM: server sees peer %s:%u", s, p);
	RC(doca_rdma_addr_destroy(peer), DOCA_ERROR_BAD_STATE);
	{
		struct doca_rdma_connection *save = cA;
		cA = c;
		remote_write_expect(rB, memB + 200, 32, DOCA_SUCCESS, "CM: write over the accepted connection");
		cA = save;
	}
	CHECK(memB[200] == 0xab && memB[231] == 0xab, "CM: write landed");
	RC(doca_rdma_connection_disconnect(c), DOCA_SUCCESS);
	{
		double end = now_s() + 5;
		while (ev[1].disc == e1.disc && now_s() < end)
			progress_both();
	}
	CHECK(ev[1].disc == e1.disc + 1 && ev[0].disc == e0.disc, "CM: disconnect reaches the peer only");

	/* reject */
	accept_mode = 0;
	RC(doca_rdma_connect_to_addr(A, addr, (union doca_data){.u64 = 78}), DOCA_SUCCESS);
	wait_flag(&ev[0].fail, 5);
	{
		double end = now_s() + 5;
		while (ev[0].fail == e0.fail && now_s() < end)
			progress_both();
	}
	CHECK(ev[0].fail == e0.fail + 1 && sd_rdma_fail_reason_for_test(ev[0].last_fail) == SD_FAIL_REJECTED,
	      "CM: reject -> failure callback on the requester (reason: rejected)");
	accept_mode = 1;
	RC(doca_rdma_stop_listen_to_port(B, port), DOCA_SUCCESS);
	RC(doca_rdma_stop_listen_to_port(B, port), DOCA_ERROR_INVALID_VALUE);

	/* nothing listening */
	RC(doca_rdma_addr_destroy(addr), DOCA_SUCCESS);
	RC(doca_rdma_addr_create(DOCA_RDMA_ADDR_TYPE_IPv4, "127.0.0.1", closed, &addr), DOCA_SUCCESS);
	t0 = now_s();
	RC(doca_rdma_connect_to_addr(A, addr, (union doca_data){.u64 = 79}), DOCA_SUCCESS);
	{
		double end = now_s() + 5;
		while (ev[0].fail == e0.fail + 1 && now_s() < end)
			progress_both();
	}
	CHECK(ev[0].fail == e0.fail + 2 && now_s() - t0 < 2.5,
	      "CM: connect to a closed port -> failure callback after %.1f ms", (now_s() - t0) * 1e3);
	RC(doca_rdma_addr_destroy(addr), DOCA_SUCCESS);
}


static void test_rnr_park_deliver(void)
{
	struct doca_buf *rbuf = buf(invB, mB, memB + (3u << 20), 4096, 0);
	struct doca_buf *s = buf(invA, mA, memA, 512, 512);
	struct doca_rdma_task_receive *r = NULL;
	struct doca_rdma_task_send *t = NULL;
	struct done dr = {0}, ds = {0};

	memset(memA, 0x3c, 512);
	RC(doca_rdma_task_send_allocate_init(A, cA, s, (union doca_data){.ptr = &ds}, &t), DOCA_SUCCESS);
	RC(doca_task_submit(doca_rdma_task_send_as_task(t)), DOCA_SUCCESS);
	usleep(20000); /* the message waits at the responder (RNR budget 100 ms) */
	CHECK(!ds.done, "send waits while no receive is posted");
	RC(doca_rdma_task_receive_allocate_init(B, rbuf, (union doca_data){.ptr = &dr}, &r), DOCA_SUCCESS);
	RC(doca_task_submit(doca_rdma_task_receive_as_task(r)), DOCA_SUCCESS);
	CHECK(wait_done(&ds, 1, 5) && ds.st == DOCA_SUCCESS && wait_done(&dr, 1, 5) && dr.st == DOCA_SUCCESS &&
		      doca_rdma_task_receive_get_result_len(r) == 512 && memB[(3u << 20) + 511] == 0x3c,
	      "receive posted within the RNR budget gets the held message");
	doca_task_free(doca_rdma_task_send_as_task(t));
	doca_task_free(doca_rdma_task_receive_as_task(r));
	doca_buf_dec_refcount(rbuf, NULL);
	doca_buf_dec_refcount(s, NULL);
}

/* ------------------------------------------------------------------ frame boundaries
 * Regression (link_on_readable): the payload readv must stop at the end of
 * the current frame even when the destination (a posted receive, a read's
 * local buffer) is larger than the payload and the next frame is already in
 * the socket. Before the fix, a receive swallowed the frames behind its
 * message. Every destination is filled with a sentinel first, so a byte
 * written past a message's end shows even where the lengths come out right.
 * Round 0 queues everything before the connection is up: the engine thread
 * then writes all the frames in one flush before it reads any of them, so all
 * of them sit in the socket together (deterministic). Round 1 submits on the
 * established connection from this thread, back to back, no progress between. */
#define FB_N 32
#define FB_RBUF 8192
#define FB_SMAX 128
#define FB_RLEN 100
#define FB_SENT 0xee

struct fb {
	struct doca_rdma *a, *b;
	struct doca_rdma_connection *ca, *cb;
	struct doca_buf_inventory *inv;
	struct doca_buf *rb[FB_N], *sb[FB_N], *rd_src, *rd_dst, *fa_dst, *fa_res, *w_src, *w_dst;
	struct doca_rdma_task_receive *rt[FB_N];
	struct doca_rdma_task_send *st[FB_N];
	struct doca_rdma_task_read *rd;
	struct doca_rdma_task_atomic_fetch_add *fa;
	struct doca_rdma_task_write *w;
	struct done dr[FB_N], ds[FB_N], drd, dfa, dw;
	uint8_t *rmem, *smem, *rd_local, *rd_remote, *w_remote, *w_local, *fa_local;
	uint64_t *fa_target;
};

static size_t fb_len(int i)
{
	return 1 + (size_t)((i * 37) % 100); /* 32 different lengths in 1..100 */
}

static uint8_t fb_byte(int round, int i, size_t k)
{
	return (uint8_t)(round * 101 + i * 29 + k * 7 + 1);
}

static struct doca_rdma *fb_rdma(struct doca_dev *dev, struct doca_pe *pe, int which)
{
	struct doca_rdma *r = NULL;
	uint32_t perms = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ | DOCA_ACCESS_FLAG_RDMA_WRITE |
			 DOCA_ACCESS_FLAG_RDMA_ATOMIC;
	uint32_t n = 2 * FB_N;

	RC(doca_rdma_create(dev, &r), DOCA_SUCCESS);
	if (!r)
		return NULL;
	doca_rdma_set_permissions(r, perms);
	doca_rdma_set_connection_state_callbacks(r, on_req, on_est, on_fail, on_disc);
	doca_rdma_task_receive_set_conf(r, task_receive_cb, task_receive_cb, n);
	doca_rdma_task_send_set_conf(r, task_send_cb, task_send_cb, n);
	doca_rdma_task_read_set_conf(r, task_read_cb, task_read_cb, 4);
	doca_rdma_task_write_set_conf(r, task_write_cb, task_write_cb, 4);
	doca_rdma_task_atomic_fetch_add_set_conf(r, task_atomic_fetch_add_cb, task_atomic_fetch_add_cb, 4);
	doca_ctx_set_user_data(doca_rdma_as_ctx(r), (union doca_data){.u64 = (uint64_t)which});
	doca_pe_connect_ctx(pe, doca_rdma_as_ctx(r));
	RC(doca_ctx_start(doca_rdma_as_ctx(r)), DOCA_SUCCESS);
	return r;
}

/* Posts FB_N receives on b, then submits FB_N sends, a read into a buffer
 * larger than the read, a fetch_add and a write on a, back to back. With da
 * (a's details), b's doca_rdma_connect completes the connection only after
 * all of them were submitted. */
static int fb_submit(struct fb *f, int round, const void *da, size_t la)
{
	int ok = 1;

	for (int i = 0; i < FB_N; i++) {
		memset(f->rmem + (size_t)i * FB_RBUF, FB_SENT, FB_RBUF);
		doca_buf_reset_data_len(f->rb[i]);
		f->dr[i] = (struct done){0};
		f->ds[i] = (struct done){0};
		for (size_t k = 0; k < fb_len(i); k++)
			f->smem[(size_t)i * FB_SMAX + k] = fb_byte(round, i, k);
	}
	memset(f->rd_local, FB_SENT, FB_RBUF);
	doca_buf_reset_data_len(f->rd_dst);
	doca_buf_reset_data_len(f->fa_res);
	for (size_t k = 0; k < FB_RLEN; k++)
		f->rd_remote[k] = fb_byte(round + 7, 99, k);
	memset(f->w_local, 0x40 + round, 64);
	memset(f->w_remote, 0, 64);
	*f->fa_target = 1000;
	f->drd = f->dfa = f->dw = (struct done){0};

	for (int i = 0; i < FB_N; i++)
		ok &= doca_task_submit(doca_rdma_task_receive_as_task(f->rt[i])) == DOCA_SUCCESS;
	for (int i = 0; i < FB_N; i++)
		ok &= doca_task_submit(doca_rdma_task_send_as_task(f->st[i])) == DOCA_SUCCESS;
	ok &= doca_task_submit(doca_rdma_task_read_as_task(f->rd)) == DOCA_SUCCESS;
	ok &= doca_task_submit(doca_rdma_task_atomic_fetch_add_as_task(f->fa)) == DOCA_SUCCESS;
	ok &= doca_task_submit(doca_rdma_task_write_as_task(f->w)) == DOCA_SUCCESS;
	if (da)
		ok &= doca_rdma_connect(f->b, da, la, f->cb) == DOCA_SUCCESS;
	return ok;
}

static int fb_all_done(struct fb *f)
{
	for (int i = 0; i < FB_N; i++)
		if (!f->dr[i].done || !f->ds[i].done)
			return 0;
	return f->drd.done && f->dfa.done && f->dw.done;
}

static void fb_check(struct fb *f, int round, const char *how, struct cev *e0, struct cev *e1)
{
	double end = now_s() + 5;
	int sent_ok = 1, recv_ok = 1, order_ok = 1, tail_ok = 1, nok = 0;
	size_t dl = 0;
	uint64_t old = 0;

	/* bounded: stops early once a connection of this test failed or closed */
	while (!fb_all_done(f) && now_s() < end && ev[0].fail == e0->fail && ev[0].disc == e0->disc &&
	       ev[1].fail == e1->fail && ev[1].disc == e1->disc)
		progress_both();
	for (int i = 0; i < FB_N; i++) {
		const uint8_t *got = f->rmem + (size_t)i * FB_RBUF;
		size_t want = fb_len(i);

		if (!f->ds[i].done || f->ds[i].st != DOCA_SUCCESS)
			sent_ok = 0;
		if (!f->dr[i].done || f->dr[i].st != DOCA_SUCCESS) {
			recv_ok = 0;
			continue;
		}
		nok++;
		doca_buf_get_data_len(f->rb[i], &dl);
		if (doca_rdma_task_receive_get_result_len(f->rt[i]) != want || dl != want ||
		    memcmp(got, f->smem + (size_t)i * FB_SMAX, want) != 0) {
			if (order_ok)
				printf("info %s: receive %d: len %u, data_len %zu, want %zu\n", how, i,
				       doca_rdma_task_receive_get_result_len(f->rt[i]), dl, want);
			order_ok = 0;
		}
		for (size_t k = want; k < FB_RBUF; k++)
			if (got[k] != FB_SENT) {
				if (tail_ok)
					printf("info %s: receive %d: byte %zu past its %zu-byte message written\n", how,
					       i, k, want);
				tail_ok = 0;
				break;
			}
	}
	CHECK(sent_ok, "%s: %d short sends back to back completed", how, FB_N);
	CHECK(recv_ok, "%s: %d receives of %d KiB completed (%d ok)", how, FB_N, FB_RBUF / 1024, nok);
	CHECK(order_ok, "%s: every receive holds exactly its own message (lengths 1..100, in order)", how);
	CHECK(tail_ok, "%s: no receive buffer written past its message", how);

	doca_buf_get_data_len(f->rd_dst, &dl);
	CHECK(f->drd.done && f->drd.st == DOCA_SUCCESS && doca_rdma_task_read_get_result_len(f->rd) == FB_RLEN &&
		      dl == FB_RLEN && memcmp(f->rd_local, f->rd_remote, FB_RLEN) == 0,
	      "%s: %d-byte read into an %d KiB buffer: result len %u, data_len %zu, bytes match", how, FB_RLEN,
	      FB_RBUF / 1024, doca_rdma_task_read_get_result_len(f->rd), dl);
	tail_ok = 1;
	for (size_t k = FB_RLEN; k < FB_RBUF; k++)
		tail_ok &= f->rd_local[k] == FB_SENT;
	CHECK(tail_ok, "%s: read buffer untouched past the read length", how);
	memcpy(&old, f->fa_local, 8);
	CHECK(f->dfa.done && f->dfa.st == DOCA_SUCCESS && old == 1000 && *f->fa_target == 1000 + 5 + (uint64_t)round,
	      "%s: fetch_add right behind the read: old %llu, target %llu", how, (unsigned long long)old,
	      (unsigned long long)*f->fa_target);
	CHECK(f->dw.done && f->dw.st == DOCA_SUCCESS && f->w_remote[0] == 0x40 + round && f->w_remote[63] == 0x40 + round,
	      "%s: write behind them landed", how);
	CHECK(f->ca->state == SDC_ESTABLISHED && f->cb->state == SDC_ESTABLISHED && ev[0].fail == e0->fail &&
		      ev[0].disc == e0->disc && ev[1].fail == e1->fail && ev[1].disc == e1->disc,
	      "%s: connection still up on both sides", how);
}

static void test_frame_boundaries(struct doca_dev *dev)
{
	struct fb *f = calloc(1, sizeof(*f));
	struct cev e0 = ev[0], e1 = ev[1];
	const void *da = NULL, *db = NULL;
	size_t la = 0, lb = 0;
	int ok = 1;
	double end;
	enum doca_ctx_states sa, sb;

	f->rmem = memB + (3u << 20) + (1u << 19); /* FB_N x 8 KiB receive buffers */
	f->rd_remote = memB + (3u << 20) + (3u << 18);
	f->fa_target = (uint64_t *)(f->rd_remote + 4096);
	f->w_remote = f->rd_remote + 8192;
	f->smem = memA + (3u << 20) + (1u << 19); /* FB_N x 128-byte messages */
	f->rd_local = f->smem + 65536;
	f->fa_local = f->rd_local + FB_RBUF;
	f->w_local = f->fa_local + 64;

	f->a = fb_rdma(dev, pa, 0);
	f->b = fb_rdma(dev, pb, 1);
	RC(doca_buf_inventory_create(2 * FB_N + 8, &f->inv), DOCA_SUCCESS);
	RC(doca_buf_inventory_start(f->inv), DOCA_SUCCESS);
	for (int i = 0; i < FB_N; i++) {
		f->rb[i] = buf(f->inv, mB, f->rmem + (size_t)i * FB_RBUF, FB_RBUF, 0);
		f->sb[i] = buf(f->inv, mA, f->smem + (size_t)i * FB_SMAX, FB_SMAX, fb_len(i));
	}
	f->rd_src = buf(f->inv, rB, f->rd_remote, FB_RLEN, FB_RLEN);
	f->rd_dst = buf(f->inv, mA, f->rd_local, FB_RBUF, 0);
	f->fa_dst = buf(f->inv, rB, f->fa_target, 8, 0);
	f->fa_res = buf(f->inv, mA, f->fa_local, 64, 0);
	f->w_src = buf(f->inv, mA, f->w_local, 64, 64);
	f->w_dst = buf(f->inv, rB, f->w_remote, 64, 0);

	RC(doca_rdma_export(f->a, &da, &la, &f->ca), DOCA_SUCCESS);
	RC(doca_rdma_export(f->b, &db, &lb, &f->cb), DOCA_SUCCESS);
	for (int i = 0; i < FB_N; i++) {
		ok &= doca_rdma_task_receive_allocate_init(f->b, f->rb[i], (union doca_data){.ptr = &f->dr[i]},
							   &f->rt[i]) == DOCA_SUCCESS;
		ok &= doca_rdma_task_send_allocate_init(f->a, f->ca, f->sb[i], (union doca_data){.ptr = &f->ds[i]},
							&f->st[i]) == DOCA_SUCCESS;
	}
	ok &= doca_rdma_task_read_allocate_init(f->a, f->ca, f->rd_src, f->rd_dst, (union doca_data){.ptr = &f->drd},
						&f->rd) == DOCA_SUCCESS;
	ok &= doca_rdma_task_atomic_fetch_add_allocate_init(f->a, f->ca, f->fa_dst, f->fa_res, 5,
							    (union doca_data){.ptr = &f->dfa}, &f->fa) == DOCA_SUCCESS;
	ok &= doca_rdma_task_write_allocate_init(f->a, f->ca, f->w_src, f->w_dst, (union doca_data){.ptr = &f->dw},
						 &f->w) == DOCA_SUCCESS;
	CHECK(ok, "frame boundaries: %d receive + %d send tasks, read, fetch_add, write allocated", FB_N, FB_N);

	/* round 0: all submitted while the connection is still being set up */
	RC(doca_rdma_connect(f->a, db, lb, f->ca), DOCA_SUCCESS);
	CHECK(fb_submit(f, 0, da, la), "queued before the connection is up: all submitted, then the peer connects");
	fb_check(f, 0, "queued", &e0, &e1);

	/* round 1: on the established connection, from this thread, no progress in between */
	doca_rdma_task_atomic_fetch_add_set_add_data(f->fa, 6);
	CHECK(fb_submit(f, 1, NULL, 0), "established: all submitted back to back");
	fb_check(f, 1, "established", &e0, &e1);

	/* teardown; bounded, and complete even when the checks above failed */
	doca_rdma_connection_disconnect(f->ca);
	doca_ctx_stop(doca_rdma_as_ctx(f->a));
	doca_ctx_stop(doca_rdma_as_ctx(f->b));
	end = now_s() + 5;
	do {
		progress_both();
		doca_ctx_get_state(doca_rdma_as_ctx(f->a), &sa);
		doca_ctx_get_state(doca_rdma_as_ctx(f->b), &sb);
	} while ((sa != DOCA_CTX_STATE_IDLE || sb != DOCA_CTX_STATE_IDLE) && now_s() < end);
	CHECK(sa == DOCA_CTX_STATE_IDLE && sb == DOCA_CTX_STATE_IDLE, "frame boundaries: both contexts stopped");
	for (int i = 0; i < FB_N; i++) {
		doca_task_free(doca_rdma_task_receive_as_task(f->rt[i]));
		doca_task_free(doca_rdma_task_send_as_task(f->st[i]));
		doca_buf_dec_refcount(f->rb[i], NULL);
		doca_buf_dec_refcount(f->sb[i], NULL);
	}
	doca_task_free(doca_rdma_task_read_as_task(f->rd));
	doca_task_free(doca_rdma_task_atomic_fetch_add_as_task(f->fa));
	doca_task_free(doca_rdma_task_write_as_task(f->w));
	doca_buf_dec_refcount(f->rd_src, NULL);
	doca_buf_dec_refcount(f->rd_dst, NULL);
	doca_buf_dec_refcount(f->fa_dst, NULL);
	doca_buf_dec_refcount(f->fa_res, NULL);
	doca_buf_dec_refcount(f->w_src, NULL);
	doca_buf_dec_refcount(f->w_dst, NULL);
	RC(doca_buf_inventory_stop(f->inv), DOCA_SUCCESS);
	doca_buf_inventory_destroy(f->inv);
	RC(doca_rdma_destroy(f->a), DOCA_SUCCESS);
	RC(doca_rdma_destroy(f->b), DOCA_SUCCESS);
	free(f);
}

/* The wire header, encoded independently of the library (layout in rdma.h). */
static void t_hdr_encode(const struct sd_hdr *h, uint8_t *o)
{
	memset(o, 0, SD_HDR_LEN);
	sd_put_le32(o, SD_WIRE_MAGIC);
	o[4] = SD_WIRE_VERSION;
	o[5] = h->opcode;
	sd_put_le64(o + 8, h->req_id);
	sd_put_le32(o + 16, h->payload_len);
	memcpy(o + 20, h->imm, 4);
	sd_put_le32(o + 24, h->status);
	sd_put_le32(o + 28, h->budget_ms);
	sd_put_le64(o + 32, h->instance);
	sd_put_le64(o + 40, h->map_id);
	sd_put_le64(o + 48, h->raddr);
	sd_put_le64(o + 56, h->rlen);
	memcpy(o + 64, h->key, SD_KEY_LEN);
	sd_put_le64(o + 80, h->arg0);
	sd_put_le64(o + 88, h->arg1);
}

static int t_hdr_decode(const uint8_t *in, struct sd_hdr *h)
{
	memset(h, 0, sizeof(*h));
	h->opcode = in[5];
	h->payload_len = sd_get_le32(in + 16);
	return sd_get_le32(in) == SD_WIRE_MAGIC && in[4] == SD_WIRE_VERSION ? 0 : -1;
}

static int raw_connect(uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	struct timeval tv = {.tv_sec = 2};

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static void raw_frame(int fd, uint8_t op, uint32_t plen, const void *payload, struct sd_hdr *h)
{
	uint8_t b[SD_HDR_LEN];
	ssize_t r;

	h->opcode = op;
	h->payload_len = plen;
	t_hdr_encode(h, b);
	r = send(fd, b, sizeof(b), MSG_NOSIGNAL);
	if (plen && r > 0)
		r = send(fd, payload, plen, MSG_NOSIGNAL);
	(void)r;
}

/* What a peer's CM_REQ / HELLO header says in raddr about the provider it
 * uses (rdma_conn.c, prov_offer; encoded independently of the library, as
 * t_hdr_encode): 0 for native, else "PROV" in the high half and a hash of the
 * provider's name in the low half. A process with SOFTDOCA_PROVIDER set
 * refuses a handshake that offers another provider (native included). */
static uint64_t t_prov_offer(const char *n)
{
	uint32_t id = 0;

	if (!strcmp(n, "native"))
		return 0;
	for (; *n; n++)
		id = id * 31u + (uint8_t)*n;
	return (0x50524f56ull << 32) | (id ? id : 1);
}

/* Garbage and hostile frames on listeners and on an established link: the
 * engine closes those links and nothing else. */
static void test_garbage(void)
{
	uint16_t port = free_port(), oob_port;
	struct sockaddr_in oa;
	socklen_t ol = sizeof(oa);
	uint8_t junk[512], hdr[SD_HDR_LEN], tmp[512];
	struct sd_hdr h;
	uint64_t inst, map_id;
	const void *desc = NULL;
	size_t dlen = 0;
	int fd, req0 = ev[1].req, est0 = ev[1].est, got_accept = 0;

	srand(1234);
	doca_mmap_export_rdma(mB, doca_rdma_get_dev_for_test(B), &desc, &dlen);
	inst = sd_get_le64((const uint8_t *)desc + 8);
	map_id = sd_get_le64((const uint8_t *)desc + 16);
	RC(doca_rdma_start_listen_to_port(B, port), DOCA_SUCCESS);
	getsockname(B->oob->ep.fd, (struct sockaddr *)&oa, &ol);
	oob_port = ntohs(oa.sin_port);
	for (int i = 0; i < 60; i++) {
		size_t n = 1 + (size_t)(rand() % (int)sizeof(junk));
		for (size_t k = 0; k < n; k++)
			junk[k] = (uint8_t)rand();
		if (i % 3 == 1 && n >= 8) { /* right magic and version, random rest */
			sd_put_le32(junk, SD_WIRE_MAGIC);
			junk[4] = SD_WIRE_VERSION;
		}
		fd = raw_connect(i % 2 ? port : oob_port);
		if (fd >= 0) {
			ssize_t r = send(fd, junk, n, MSG_NOSIGNAL);
			(void)r;
			close(fd);
		}
	}
	/* HELLO with an unknown token, CM_REQ with a payload too long */
	fd = raw_connect(oob_port);
	memset(&h, 0, sizeof(h));
	raw_frame(fd, SD_OP_HELLO, SD_HELLO_LEN, junk, &h);
	close(fd);
	fd = raw_connect(port);
	memset(&h, 0, sizeof(h));
	raw_frame(fd, SD_OP_CM_REQ, 200, junk, &h);
	close(fd);

	/* With a provider (SOFTDOCA_PROVIDER), a raw client that speaks the native
	 * wire's handshake as it is (raddr 0: "I use native") is refused: both
	 * sides must use the same provider (rdma_conn.c, prov_check). The link
	 * closes without a request event or an answer. */
	if (strcmp(softdoca_provider_name(), "native") != 0) {
		double end = now_s() + 5;
		ssize_t r;

		fd = raw_connect(port);
		memset(&h, 0, sizeof(h));
		raw_frame(fd, SD_OP_CM_REQ, SD_CMREQ_LEN, junk, &h);
		while ((r = recv(fd, hdr, sizeof(hdr), MSG_DONTWAIT)) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
		       now_s() < end)
			progress_both();
		CHECK(r == 0 && ev[1].req == req0,
		      "raw client offering native to a process using %s: refused (link closed, recv %zd, requests %d -> %d)",
		      softdoca_provider_name(), r, req0, ev[1].req);
		close(fd);
	}

	/* a real CM handshake by hand, then hostile data frames; the request
	 * offers the provider this process uses, as a real peer's does */
	fd = raw_connect(port);
	memset(&h, 0, sizeof(h));
	h.raddr = t_prov_offer(softdoca_provider_name());
	raw_frame(fd, SD_OP_CM_REQ, SD_CMREQ_LEN, junk, &h);
	{
		double end = now_s() + 5;
		while (ev[1].req == req0 && now_s() < end)
			progress_both();
	}
	if (recv(fd, hdr, sizeof(hdr), MSG_WAITALL) == (ssize_t)sizeof(hdr) && t_hdr_decode(hdr, &h) == 0 &&
	    h.opcode == SD_OP_CM_ACCEPT && recv(fd, tmp, h.payload_len, MSG_WAITALL) == (ssize_t)h.payload_len)
		got_accept = 1;
	CHECK(got_accept, "raw client: CM request accepted");
	memset(&h, 0, sizeof(h));
	raw_frame(fd, SD_OP_CM_RTU, 0, NULL, &h);
	for (int i = 0; i < 300; i++) {
		static const uint8_t ops[] = {SD_OP_WRITE, SD_OP_WRITE_IMM, SD_OP_READ, SD_OP_CMP_SWP,
					      SD_OP_FETCH_ADD, SD_OP_PING, SD_OP_SEND, SD_OP_PONG};
		uint32_t plen;

		memset(&h, 0, sizeof(h));
		h.req_id = (uint64_t)i;
		h.instance = rand() % 4 ? inst : (uint64_t)rand();
		h.map_id = rand() % 4 ? map_id : (uint64_t)rand();
		for (int k = 0; k < SD_KEY_LEN; k++)
			h.key[k] = (uint8_t)rand(); /* never the right key: memory stays intact */
		h.raddr = (uint64_t)(uintptr_t)memB + (uint64_t)(rand() % (int)(MEM + 8192)) - 4096;
		h.rlen = (uint64_t)(rand() % 4096);
		h.budget_ms = (uint32_t)(rand() % 3);
		plen = (uint32_t)(rand() % 64);
		uint8_t op = ops[rand() % (int)sizeof(ops)];
		if (op != SD_OP_WRITE && op != SD_OP_WRITE_IMM && op != SD_OP_SEND)
			plen = 0;
		raw_frame(fd, op, plen, junk, &h);
	}
	memset(&h, 0, sizeof(h));
	raw_frame(fd, SD_OP_RESP, 0, NULL, &h); /* unexpected response: link closes */
	for (int i = 0; i < 200; i++)
		progress_both();
	close(fd);
	(void)est0;
	remote_write_expect(rB, memB + 300, 64, DOCA_SUCCESS, "after garbage: established connection unaffected");
	RC(doca_rdma_stop_listen_to_port(B, port), DOCA_SUCCESS);
}

/* ------------------------------------------------------------------ peer process */
static int child_main(void)
{
	struct doca_devinfo **list = NULL;
	struct doca_dev *dev = NULL;
	struct doca_pe *pe = NULL;
	struct doca_rdma *r = NULL;
	struct doca_rdma_connection *c = NULL;
	struct doca_mmap *m;
	uint8_t pblob[SD_BLOB_LEN], out[SD_MMAP_DESC_LEN + SD_BLOB_LEN];
	const void *d = NULL, *b = NULL;
	size_t dl = 0, bl = 0;
	uint32_t n = 0;
	char ib[DOCA_DEVINFO_IBDEV_NAME_SIZE];
	void *mem = aligned_alloc(4096, 1u << 20);
	uint32_t perms = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ | DOCA_ACCESS_FLAG_RDMA_WRITE;

	doca_devinfo_create_list(&list, &n);
	for (uint32_t i = 0; i < n; i++)
		if (doca_devinfo_get_ibdev_name(list[i], ib, sizeof(ib)) == DOCA_SUCCESS && !strcmp(ib, "soft_lo"))
			doca_dev_open(list[i], &dev);
	doca_pe_create(&pe);
	doca_rdma_create(dev, &r);
	doca_rdma_set_permissions(r, perms);
	doca_pe_connect_ctx(pe, doca_rdma_as_ctx(r));
	if (doca_ctx_start(doca_rdma_as_ctx(r)) != DOCA_SUCCESS)
		return 2;
	doca_mmap_create(&m);
	doca_mmap_set_memrange(m, mem, 1u << 20);
	doca_mmap_set_permissions(m, perms);
	doca_mmap_add_dev(m, dev);
	doca_mmap_start(m);
	doca_mmap_export_rdma(m, dev, &d, &dl);
	if (read(0, pblob, sizeof(pblob)) != (ssize_t)sizeof(pblob))
		return 3;
	doca_rdma_export(r, &b, &bl, &c);
	memcpy(out, d, SD_MMAP_DESC_LEN);
	memcpy(out + SD_MMAP_DESC_LEN, b, SD_BLOB_LEN);
	if (write(1, out, sizeof(out)) != (ssize_t)sizeof(out))
		return 4;
	doca_rdma_connect(r, pblob, sizeof(pblob), c);
	for (;;) { /* until killed, or the parent goes away */
		struct pollfd p = {.fd = 0, .events = POLLIN};
		doca_pe_progress(pe);
		if (poll(&p, 1, 2) > 0)
			return 0;
	}
}

struct peer {
	pid_t pid;
	int to, from;
	struct doca_rdma_connection *conn;
	struct doca_mmap *rmap;
};

static const char *peer_transport = "tcp"; /* SOFTDOCA_TRANSPORT of the next peer process */
static int spawn_peer_(struct peer *p);
static int spawn_peer(struct doca_dev *dev, struct peer *p)
{
	(void)dev;
	return spawn_peer_(p);
}

static int spawn_peer_(struct peer *p)
{
	int p1[2], p2[2];
	const void *blob = NULL;
	size_t bl = 0;
	uint8_t in[SD_MMAP_DESC_LEN + SD_BLOB_LEN];
	int est0 = ev[0].est;
	struct pollfd pf;

	memset(p, 0, sizeof(*p));
	if (pipe(p1) || pipe(p2))
		return -1;
	if (doca_rdma_export(A, &blob, &bl, &p->conn) != DOCA_SUCCESS)
		return -1;
	p->pid = fork();
	if (p->pid == 0) {
		dup2(p1[0], 0);
		dup2(p2[1], 1);
		close(p1[0]);
		close(p1[1]);
		close(p2[0]);
		close(p2[1]);
		setenv("SOFTDOCA_TRANSPORT", peer_transport, 1);
		execl("/proc/self/exe", "test_rdma", "child", (char *)NULL);
		_exit(127);
	}
	close(p1[0]);
	close(p2[1]);
	p->to = p1[1];
	p->from = p2[0];
	if (write(p->to, blob, bl) != (ssize_t)bl)
		return -1;
	pf.fd = p->from;
	pf.events = POLLIN;
	if (poll(&pf, 1, 10000) <= 0 || read(p->from, in, sizeof(in)) != (ssize_t)sizeof(in))
		return -1;
	if (doca_rdma_connect(A, in + SD_MMAP_DESC_LEN, SD_BLOB_LEN, p->conn) != DOCA_SUCCESS)
		return -1;
	{
		double end = now_s() + 5;
		while (ev[0].est == est0 && now_s() < end)
			progress_both();
	}
	if (ev[0].last_est != p->conn)
		return -1;
	if (doca_mmap_create_from_export(NULL, in, SD_MMAP_DESC_LEN, doca_rdma_get_dev_for_test(A), &p->rmap) !=
	    DOCA_SUCCESS)
		return -1;
	return 0;
}

static void reap_peer(struct peer *p)
{
	kill(p->pid, SIGKILL);
	waitpid(p->pid, NULL, 0);
	close(p->to);
	close(p->from);
	doca_mmap_destroy(p->rmap);
}

static void test_peer_death(struct doca_dev *dev)
{
	struct peer p;
	struct doca_rdma_connection *save = cA;
	double t0, T = 1.5;
	struct doca_buf *src, *dst;
	struct doca_rdma_task_write *t = NULL;
	struct done d = {0};
	int disc0;

	/* silent peer (SIGSTOP): outstanding work fails after SOFTDOCA_TIMEOUT_MS */
	CHECK(spawn_peer(dev, &p) == 0, "peer process connected (pid %d)", (int)p.pid);
	if (!p.rmap)
		return;
	cA = p.conn;
	remote_write_expect(p.rmap, p.rmap->addr, 4096, DOCA_SUCCESS, "write into another process");
	disc0 = ev[0].disc;
	kill(p.pid, SIGSTOP);
	waitpid(p.pid, NULL, WUNTRACED); /* really stopped */
	src = buf(invA, mA, memA, 4096, 4096);
	dst = buf(invA, p.rmap, p.rmap->addr, 4096, 0);
	RC(doca_rdma_task_write_allocate_init(A, cA, src, dst, (union doca_data){.ptr = &d}, &t), DOCA_SUCCESS);
	t0 = now_s();
	RC(doca_task_submit(doca_rdma_task_write_as_task(t)), DOCA_SUCCESS);
	wait_done(&d, 1, T + 5);
	CHECK(d.done && d.st == DOCA_ERROR_CONNECTION_RESET && now_s() - t0 < T + 1.0 && now_s() - t0 > T * 0.7,
	      "stopped peer: write fails with %s after %.0f ms", doca_error_get_name(d.st), (now_s() - t0) * 1e3);
	{
		double end = now_s() + 2;
		while (ev[0].disc == disc0 && now_s() < end)
			progress_both();
	}
	CHECK(ev[0].disc == disc0 + 1 && ev[0].last_disc == p.conn, "stopped peer: disconnect callback");
	doca_buf_dec_refcount(dst, NULL);
	dst = NULL;
	reap_peer(&p);

	/* killed peer: fails at once */
	d.done = 0;
	CHECK(spawn_peer(dev, &p) == 0, "second peer process connected (pid %d)", (int)p.pid);
	if (p.rmap) {
		doca_rdma_task_write_set_rdma_connection(t, p.conn);
		dst = buf(invA, p.rmap, p.rmap->addr, 4096, 0);
		doca_rdma_task_write_set_dst_buf(t, dst);
		kill(p.pid, SIGSTOP);
		waitpid(p.pid, NULL, WUNTRACED);
		RC(doca_task_submit(doca_rdma_task_write_as_task(t)), DOCA_SUCCESS);
		usleep(20000);
		t0 = now_s();
		kill(p.pid, SIGKILL);
		waitpid(p.pid, NULL, 0);
		wait_done(&d, 1, T + 5);
		CHECK(d.done && d.st == DOCA_ERROR_CONNECTION_RESET && now_s() - t0 < 0.5,
		      "killed peer: write fails with %s after %.0f ms", doca_error_get_name(d.st),
		      (now_s() - t0) * 1e3);
		{
			double end = now_s() + 2;
			while (ev[0].last_disc != p.conn && now_s() < end)
				progress_both();
		}
		CHECK(ev[0].last_disc == p.conn, "killed peer: disconnect callback");
	}
	doca_task_free(doca_rdma_task_write_as_task(t));
	doca_buf_dec_refcount(src, NULL);
	if (dst)
		doca_buf_dec_refcount(dst, NULL);
	if (p.rmap)
		reap_peer(&p);
	cA = save;
}

const char *softdoca_transport_name(const struct doca_rdma_connection *conn);

/* Same-host transport with another process: chosen automatically; the
 * target's checks hold (bounds, key, permissions, a stopped mmap refused at
 * once, over the TCP path that says why); a stopped target is still served
 * (as by a NIC), a killed one fails the write at once. SOFTDOCA_TRANSPORT=tcp
 * on one side keeps the connection on TCP. */
static void reap_peer_wait(struct peer *p)
{
	double end;

	reap_peer(p);
	end = now_s() + 3;
	while (ev[0].last_disc != p->conn && now_s() < end)
		progress_both();
}

static void test_shm_peer(struct doca_dev *dev)
{
	struct peer p;
	struct doca_rdma_connection *save = cA;
	const char *want = getenv("SOFTDOCA_TRANSPORT") && !strcmp(getenv("SOFTDOCA_TRANSPORT"), "tcp") ? "tcp" : "shm";
	double t0;

	peer_transport = "tcp";
	CHECK(spawn_peer(dev, &p) == 0, "tcp peer process connected (pid %d)", (int)p.pid);
	if (p.rmap) {
		cA = p.conn;
		CHECK(!strcmp(softdoca_transport_name(p.conn), "tcp"), "peer with SOFTDOCA_TRANSPORT=tcp: transport %s",
		      softdoca_transport_name(p.conn));
		remote_write_expect(p.rmap, p.rmap->addr, 64, DOCA_SUCCESS, "write into a tcp peer");
		reap_peer_wait(&p);
	}
	peer_transport = "auto";
	CHECK(spawn_peer(dev, &p) == 0, "auto peer process connected (pid %d)", (int)p.pid);
	if (!p.rmap) {
		cA = save;
		return;
	}
	cA = p.conn;
	CHECK(!strcmp(softdoca_transport_name(p.conn), want), "same-host peer: transport %s (want %s)",
	      softdoca_transport_name(p.conn), want);
	remote_write_expect(p.rmap, p.rmap->addr, 4096, DOCA_SUCCESS, "shm: write into another process");
	remote_write_expect(p.rmap, (uint8_t *)p.rmap->addr + (1u << 20) - 64, 64, DOCA_SUCCESS, "shm: write at the end");
	kill(p.pid, SIGSTOP);
	waitpid(p.pid, NULL, WUNTRACED);
	t0 = now_s();
	remote_write_expect(p.rmap, p.rmap->addr, 64, !strcmp(want, "shm") ? DOCA_SUCCESS : DOCA_ERROR_CONNECTION_RESET,
			    "shm: a stopped target is still served (a NIC would), tcp: it times out");
	kill(p.pid, SIGCONT);
	if (!strcmp(want, "shm")) {
		CHECK(now_s() - t0 < 0.5, "shm: write into a stopped process took %.0f ms", (now_s() - t0) * 1e3);
		/* out of bounds: refused by the target over TCP, the connection breaks */
		{
			struct doca_buf *src = buf(invA, mA, memA, 64, 64);
			struct doca_buf *dst = buf(invA, p.rmap, (uint8_t *)p.rmap->addr + (1u << 20) - 32, 32, 0);
			struct doca_rdma_task_write *t = NULL;
			struct done d = {0};

			/* the remote buffer says 32 bytes: a 64-byte write is refused at submit */
			RC(doca_rdma_task_write_allocate_init(A, cA, src, dst, (union doca_data){.ptr = &d}, &t),
			   DOCA_SUCCESS);
			RC(doca_task_submit(doca_rdma_task_write_as_task(t)), DOCA_ERROR_INVALID_VALUE);
			doca_task_free(doca_rdma_task_write_as_task(t));
			doca_buf_dec_refcount(src, NULL);
			doca_buf_dec_refcount(dst, NULL);
		}
	}
	reap_peer_wait(&p);
	/* killed peer: the next write fails at once */
	CHECK(spawn_peer(dev, &p) == 0, "third peer process connected (pid %d)", (int)p.pid);
	if (p.rmap) {
		cA = p.conn;
		kill(p.pid, SIGKILL);
		waitpid(p.pid, NULL, 0);
		t0 = now_s();
		{
			struct doca_buf *src = buf(invA, mA, memA, 64, 64);
			struct doca_buf *dst = buf(invA, p.rmap, p.rmap->addr, 64, 0);
			struct doca_rdma_task_write *t = NULL;
			struct done d = {0};
			doca_error_t rc;

			RC(doca_rdma_task_write_allocate_init(A, cA, src, dst, (union doca_data){.ptr = &d}, &t),
			   DOCA_SUCCESS);
			rc = doca_task_submit(doca_rdma_task_write_as_task(t));
			if (rc == DOCA_SUCCESS)
				wait_done(&d, 0, 10);
			CHECK((rc == DOCA_ERROR_NOT_CONNECTED || (d.done && d.st == DOCA_ERROR_CONNECTION_RESET)) &&
				      now_s() - t0 < 1.0,
			      "killed peer: write fails (submit %s, status %s) after %.0f ms", doca_error_get_name(rc),
			      doca_error_get_name(d.st), (now_s() - t0) * 1e3);
			doca_task_free(doca_rdma_task_write_as_task(t));
			doca_buf_dec_refcount(src, NULL);
			doca_buf_dec_refcount(dst, NULL);
		}
		reap_peer_wait(&p);
	}
	peer_transport = "tcp";
	cA = save;
}

/* Limits: connection count, task pools, tasks queued before the link is up,
 * a CM request nobody answers. */
static void test_limits(struct doca_dev *dev)
{
	struct doca_rdma *C = NULL;
	struct doca_rdma_connection *c1 = NULL, *c2 = NULL, *a3 = NULL, *b3 = NULL;
	struct doca_rdma_task_write *w[3] = {0};
	struct doca_rdma_task_read *rd = NULL;
	struct doca_rdma_addr *addr = NULL;
	const void *d = NULL;
	size_t l = 0;
	uint16_t port = free_port();

	RC(doca_rdma_create(dev, &C), DOCA_SUCCESS);
	RC(doca_rdma_task_write_set_conf(C, task_write_cb, task_write_cb, 2), DOCA_SUCCESS);
	RC(doca_pe_connect_ctx(pa, doca_rdma_as_ctx(C)), DOCA_SUCCESS);
	RC(doca_ctx_start(doca_rdma_as_ctx(C)), DOCA_SUCCESS);
	RC(doca_rdma_task_write_set_conf(C, task_write_cb, task_write_cb, 4), DOCA_ERROR_BAD_STATE);
	RC(doca_rdma_export(C, &d, &l, &c1), DOCA_SUCCESS);
	RC(doca_rdma_export(C, &d, &l, &c2), DOCA_ERROR_FULL);
	RC(doca_rdma_addr_create(DOCA_RDMA_ADDR_TYPE_IPv4, "127.0.0.1", port, &addr), DOCA_SUCCESS);
	RC(doca_rdma_connect_to_addr(C, addr, (union doca_data){.u64 = 0}), DOCA_ERROR_FULL);
	RC(doca_rdma_task_write_allocate_init(C, c1, NULL, NULL, (union doca_data){.u64 = 0}, &w[0]), DOCA_SUCCESS);
	RC(doca_rdma_task_write_allocate_init(C, c1, NULL, NULL, (union doca_data){.u64 = 0}, &w[1]), DOCA_SUCCESS);
	RC(doca_rdma_task_write_allocate_init(C, c1, NULL, NULL, (union doca_data){.u64 = 0}, &w[2]),
	   DOCA_ERROR_NO_MEMORY);
	RC(doca_rdma_task_read_allocate_init(C, c1, NULL, NULL, (union doca_data){.u64 = 0}, &rd), DOCA_ERROR_NO_MEMORY);
	RC(doca_task_submit(doca_rdma_task_write_as_task(w[0])), DOCA_ERROR_NOT_CONNECTED);
	doca_task_free(doca_rdma_task_write_as_task(w[1]));
	RC(doca_rdma_task_write_allocate_init(C, c1, NULL, NULL, (union doca_data){.u64 = 0}, &w[2]), DOCA_SUCCESS);
	doca_task_free(doca_rdma_task_write_as_task(w[0]));
	doca_task_free(doca_rdma_task_write_as_task(w[2]));
	RC(doca_ctx_stop(doca_rdma_as_ctx(C)), DOCA_SUCCESS);
	RC(doca_rdma_destroy(C), DOCA_SUCCESS);

	/* a write submitted right after connect, before any progress: queued, then sent */
	{
		const void *da = NULL, *db = NULL;
		size_t la = 0, lb = 0;
		struct doca_buf *src = buf(invA, mA, memA, 256, 256);
		struct doca_buf *dst = buf(invA, rB, memB + 4096, 256, 0);
		struct doca_rdma_task_write *t = NULL;
		struct done dd = {0};

		memset(memA, 0x77, 256);
		RC(doca_rdma_export(A, &da, &la, &a3), DOCA_SUCCESS);
		RC(doca_rdma_export(B, &db, &lb, &b3), DOCA_SUCCESS);
		RC(doca_rdma_task_write_allocate_init(A, a3, src, dst, (union doca_data){.ptr = &dd}, &t), DOCA_SUCCESS);
		RC(doca_task_submit(doca_rdma_task_write_as_task(t)), DOCA_ERROR_NOT_CONNECTED);
		RC(doca_rdma_connect(A, db, lb, a3), DOCA_SUCCESS);
		RC(doca_task_submit(doca_rdma_task_write_as_task(t)), DOCA_SUCCESS);
		RC(doca_rdma_connect(B, da, la, b3), DOCA_SUCCESS);
		CHECK(wait_done(&dd, 1, 5) && dd.st == DOCA_SUCCESS && memB[4096 + 255] == 0x77,
		      "write submitted before the connection was up: delivered once it is");
		doca_task_free(doca_rdma_task_write_as_task(t));
		doca_buf_dec_refcount(src, NULL);
		doca_buf_dec_refcount(dst, NULL);
		RC(doca_rdma_connection_disconnect(a3), DOCA_SUCCESS);
		RC(doca_rdma_connection_disconnect(a3), DOCA_SUCCESS);
	}

	/* CM request that nobody answers: the requester fails after its timeout */
	{
		int fail0 = ev[0].fail, bfail0 = ev[1].fail;
		double t0 = now_s(), end;

		accept_mode = 2;
		RC(doca_rdma_start_listen_to_port(B, port), DOCA_SUCCESS);
		RC(doca_rdma_connect_to_addr(A, addr, (union doca_data){.u64 = 80}), DOCA_SUCCESS);
		end = now_s() + 6;
		while ((ev[0].fail == fail0 || ev[1].fail == bfail0) && now_s() < end)
			progress_both();
		CHECK(ev[0].fail == fail0 + 1 && now_s() - t0 > 1.8 && now_s() - t0 < 3.5 &&
			      sd_rdma_fail_reason_for_test(ev[0].last_fail) == SD_FAIL_TIMEOUT,
		      "CM: unanswered request -> requester failure after %.0f ms (timeout 2000 ms)",
		      (now_s() - t0) * 1e3);
		CHECK(ev[1].fail == bfail0 + 1, "CM: the listener's pending request fails too");
		RC(doca_rdma_connection_accept(ev[1].last_fail, NULL, 0), DOCA_ERROR_CONNECTION_ABORTED);
		RC(doca_rdma_stop_listen_to_port(B, port), DOCA_SUCCESS);
		accept_mode = 1;
	}
	RC(doca_rdma_addr_destroy(addr), DOCA_SUCCESS);
}

static void test_stop(void)
{
	struct doca_buf *rbuf = buf(invB, mB, memB, 64, 0);
	struct doca_rdma_task_receive *r = NULL;
	struct done d = {0};
	enum doca_ctx_states st;
	double end;

	RC(doca_rdma_task_receive_allocate_init(B, rbuf, (union doca_data){.ptr = &d}, &r), DOCA_SUCCESS);
	RC(doca_task_submit(doca_rdma_task_receive_as_task(r)), DOCA_SUCCESS);
	RC(doca_rdma_destroy(B), DOCA_ERROR_BAD_STATE);
	RC(doca_rdma_set_rnr_retry_count(B, 2), DOCA_ERROR_BAD_STATE);
	RC(doca_ctx_stop(doca_rdma_as_ctx(B)), DOCA_ERROR_IN_PROGRESS);
	CHECK(wait_done(&d, 1, 5) && d.st == DOCA_ERROR_CONNECTION_ABORTED, "stop: posted receive -> %s",
	      doca_error_get_name(d.st));
	end = now_s() + 5;
	do {
		progress_both();
		doca_ctx_get_state(doca_rdma_as_ctx(B), &st);
	} while (st != DOCA_CTX_STATE_IDLE && now_s() < end);
	CHECK(st == DOCA_CTX_STATE_IDLE, "stop: ctx reached IDLE");
	end = now_s() + 5;
	while (ev[0].last_disc != cA && now_s() < end)
		progress_both();
	CHECK(ev[0].last_disc == cA, "stop: the peer's connection got its disconnect callback");
	doca_task_free(doca_rdma_task_receive_as_task(r));
	doca_buf_dec_refcount(rbuf, NULL);
	RC(doca_ctx_stop(doca_rdma_as_ctx(A)), DOCA_SUCCESS);
	for (int i = 0; i < 10; i++)
		progress_both();
}

/* reads the private failure reason (see rdma.h) */
int sd_rdma_fail_reason_for_test(const struct doca_rdma_connection *c)
{
	return c ? (int)c->fail_reason : -1;
}

struct doca_dev *doca_rdma_get_dev_for_test(struct doca_rdma *r)
{
	return r->dev;
}

int main(int argc, char **argv)
{
	struct doca_dev *dev;
	uint32_t gsz = 0;
	struct doca_rdma_gid gids[4];
	uint32_t perms = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ | DOCA_ACCESS_FLAG_RDMA_WRITE |
			 DOCA_ACCESS_FLAG_RDMA_ATOMIC;
	int mapped = 0;

	setenv("SOFTDOCA_TIMEOUT_MS", "1500", 1);
	if (argc > 1 && !strcmp(argv[1], "child"))
		return child_main();
	setvbuf(stdout, NULL, _IOLBF, 0);
	dev = open_soft_lo();
	CHECK(dev != NULL, "opened soft_lo");
	if (!dev)
		return 1;
	RC(doca_rdma_cap_get_gid_table_size(doca_dev_as_devinfo(dev), &gsz), DOCA_SUCCESS);
	CHECK(gsz >= 1 && gsz <= 4, "gid table size %u", gsz);
	RC(doca_rdma_cap_get_gid(doca_dev_as_devinfo(dev), 0, gsz, gids), DOCA_SUCCESS);
	RC(doca_rdma_cap_get_gid(doca_dev_as_devinfo(dev), 0, gsz + 1, gids), DOCA_ERROR_INVALID_VALUE);
	for (uint32_t i = 0; i < gsz; i++)
		if (gids[i].raw[10] == 0xff && gids[i].raw[11] == 0xff && gids[i].raw[12] == 127)
			mapped = 1;
	CHECK(mapped, "gid table holds ::ffff:127.0.0.1");
	RC(doca_rdma_cap_transport_type_is_supported(doca_dev_as_devinfo(dev), DOCA_RDMA_TRANSPORT_TYPE_DC),
	   DOCA_ERROR_NOT_SUPPORTED);

	RC(doca_pe_create(&pa), DOCA_SUCCESS);
	RC(doca_pe_create(&pb), DOCA_SUCCESS);
	A = make_rdma(dev, pa, 0);
	B = make_rdma(dev, pb, 1);
	{
		struct doca_rdma_task_write *t = NULL;
		const void *d = NULL;
		size_t l = 0;
		struct doca_rdma_connection *c = NULL;
		RC(doca_rdma_task_write_allocate_init(A, NULL, NULL, NULL, (union doca_data){.u64 = 0}, &t),
		   DOCA_ERROR_BAD_STATE);
		RC(doca_rdma_export(A, &d, &l, &c), DOCA_ERROR_BAD_STATE);
	}
	RC(doca_ctx_start(doca_rdma_as_ctx(A)), DOCA_SUCCESS);
	RC(doca_ctx_start(doca_rdma_as_ctx(B)), DOCA_SUCCESS);
	RC(doca_rdma_set_permissions(A, perms), DOCA_ERROR_BAD_STATE);

	memA = aligned_alloc(4096, MEM);
	memB = aligned_alloc(4096, MEM);
	memBro = aligned_alloc(4096, 4096);
	mA = local_map(dev, memA, MEM, perms);
	mB = local_map(dev, memB, MEM, perms);
	mBro = local_map(dev, memBro, 4096, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ);
	rB = remote_map(dev, mB, 0);
	rBro = remote_map(dev, mBro, 0);
	rBbig = remote_map(dev, mB, 1);
	rBkey = remote_map(dev, mB, 2);
	RC(doca_buf_inventory_create(64, &invA), DOCA_SUCCESS);
	RC(doca_buf_inventory_create(64, &invB), DOCA_SUCCESS);
	RC(doca_buf_inventory_start(invA), DOCA_SUCCESS);
	RC(doca_buf_inventory_start(invB), DOCA_SUCCESS);

	test_connect_oob(&cA, &cB, 1);
	{
		const char *tr = getenv("SOFTDOCA_TRANSPORT");
		const char *want = tr && !strcmp(tr, "tcp") ? "tcp" : "shm";

		CHECK(!strcmp(softdoca_transport_name(cA), want) && !strcmp(softdoca_transport_name(cB), want),
		      "in-process connection: transport %s / %s (want %s)", softdoca_transport_name(cA),
		      softdoca_transport_name(cB), want);
	}
	test_write(dev);
	test_read();
	test_send_recv();
	test_frame_boundaries(dev);
	test_atomics();
	test_access_errors();
	test_rnr_park_deliver();
	test_garbage();
	test_peer_death(dev);
	test_shm_peer(dev);
	test_rnr();
	test_listen_in_use();
	test_cm();
	test_connect_close_cycles();
	test_limits(dev);
	test_stop();

	RC(doca_buf_inventory_stop(invA), DOCA_SUCCESS);
	RC(doca_buf_inventory_stop(invB), DOCA_SUCCESS);
	doca_buf_inventory_destroy(invA);
	doca_buf_inventory_destroy(invB);
	RC(doca_mmap_destroy(rB), DOCA_SUCCESS);
	RC(doca_mmap_destroy(rBro), DOCA_SUCCESS);
	RC(doca_mmap_destroy(rBbig), DOCA_SUCCESS);
	RC(doca_mmap_destroy(rBkey), DOCA_SUCCESS);
	RC(doca_mmap_stop(mA), DOCA_SUCCESS);
	RC(doca_mmap_stop(mB), DOCA_SUCCESS);
	RC(doca_mmap_stop(mBro), DOCA_SUCCESS);
	RC(doca_mmap_destroy(mA), DOCA_SUCCESS);
	RC(doca_mmap_destroy(mB), DOCA_SUCCESS);
	RC(doca_mmap_destroy(mBro), DOCA_SUCCESS);
	RC(doca_rdma_destroy(A), DOCA_SUCCESS);
	RC(doca_rdma_destroy(B), DOCA_SUCCESS);
	RC(doca_rdma_destroy(B), DOCA_ERROR_BAD_STATE);
	RC(doca_pe_destroy(pa), DOCA_SUCCESS);
	RC(doca_pe_destroy(pb), DOCA_SUCCESS);
	RC(doca_dev_close(dev), DOCA_SUCCESS);
	free(memA);
	free(memB);
	free(memBro);
	return check_summary("test_rdma");
}
