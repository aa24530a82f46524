/*
 * The two-process suite of the per-provider tests (test_ucx_provider.c,
 * test_ofi_provider.c), over harness.h: one instance (S) with its callback
 * recorders, bounded progress (wait_for), the OOB connect, the target and its
 * commands, and the tests both run alike. The conformance test
 * (test_provider.c) has its own recorders (it checks the callbacks
 * themselves), so it includes harness.h alone.
 */
#ifndef SD_TESTS_PROVIDERS_HARNESS_SUITE_H
#define SD_TESTS_PROVIDERS_HARNESS_SUITE_H

#include "harness.h"

/* ================================================================ the two-process suite */
/*
 * One instance per process (S); a target (forked) serves commands over its
 * socketpair and holds 16 MiB of registered memory (read-only: its first 4 KiB
 * under a second key); the parent runs the tests against it.
 */
struct op { int done; doca_error_t st; };
struct rxrec { int kind, has_imm; uint32_t imm; size_t len; uint32_t crc; int data_ok; };
#define MAXRX 256
static struct st {
	struct sd_prov *p;
	int established, rejected, failed, disconnected, requests, answered;
	doca_error_t fail_status;
	char fail_why[200];
	char priv[256];
	size_t priv_len;
	struct sd_prov_conn *req_conn;
	char req_priv[256];
	size_t req_priv_len;
	struct rxrec rx[MAXRX];
	int nrx, nrx_done;
	int hold;                 /* answer HOLD while set */
	uint8_t *rxbuf;           /* placement buffer (large messages) */
	uint8_t *mem;             /* registered memory (write_imm visibility check) */
	int spin;                 /* --bench: progress without sleeping, as the transports' own benches do */
	int sink;                 /* count messages, keep none */
	long nsink;
	int verbose;              /* say each FAILED event on stderr */
	/* the test's, run inside conn_event after the counts */
	void (*on_event)(struct sd_prov_conn *c, const struct sd_prov_conn_event *ev);
} S;

static inline void cb_op_done(void *arg, void *op_ctx, doca_error_t st)
{
	struct op *o = op_ctx;

	(void)arg;
	o->done = 1;
	o->st = st;
}

/* write_imm test: immediate k writes wimm_len(k) bytes of seed k at wimm_off(k) */
static inline size_t wimm_len(uint32_t k) { return k % 3 == 0 ? (1u << 20) : 64u + k; }
static inline size_t wimm_off(uint32_t k) { return (8u << 20) + (size_t)(k / 4) * ((1u << 20) + 4096); }

static inline enum sd_prov_rx_answer cb_rx(void *arg, struct sd_prov_conn *c, void *cctx, const struct sd_prov_rx *rx,
					   struct sd_prov_iov *dst, int *ndst, void **rx_ctx)
{
	struct rxrec *r;

	(void)arg; (void)c; (void)cctx;
	if (S.sink) {
		S.nsink++;
		return SD_PROV_RX_TAKEN;
	}
	if (S.hold)
		return SD_PROV_RX_HOLD;
	if (S.nrx >= MAXRX)
		return SD_PROV_RX_TAKEN;
	r = &S.rx[S.nrx++];
	r->kind = rx->kind;
	r->has_imm = rx->has_imm;
	r->imm = rx->imm;
	r->len = rx->len;
	if (rx->kind == SD_PROV_RX_WRITE_IMM) {
		/* the written data must be visible now */
		r->data_ok = S.mem && matches(S.mem + wimm_off(rx->imm), wimm_len(rx->imm), rx->imm);
		S.nrx_done++;
		return SD_PROV_RX_TAKEN;
	}
	if (rx->data) {
		r->crc = sd_prov_crc32(rx->data, rx->len);
		r->data_ok = 1;
		S.nrx_done++;
		return SD_PROV_RX_TAKEN;
	}
	dst[0].addr = S.rxbuf;
	dst[0].len = 8u << 20;
	dst[0].mr = NULL;
	*ndst = 1;
	*rx_ctx = r;
	return SD_PROV_RX_PLACE;
}

static inline void cb_rx_done(void *arg, void *rx_ctx, doca_error_t st, size_t len)
{
	struct rxrec *r = rx_ctx;

	(void)arg;
	r->data_ok = st == DOCA_SUCCESS && len == r->len;
	r->crc = sd_prov_crc32(S.rxbuf, r->len);
	S.nrx_done++;
}

static inline void cb_conn_event(void *arg, struct sd_prov_conn *c, void *cctx, const struct sd_prov_conn_event *ev)
{
	(void)arg; (void)cctx;
	switch (ev->ev) {
	case SD_PROV_EV_ESTABLISHED: S.established++; break;
	case SD_PROV_EV_REJECTED: S.rejected++; break;
	case SD_PROV_EV_FAILED:
		S.failed++;
		S.fail_status = ev->status;
		snprintf(S.fail_why, sizeof(S.fail_why), "%s", ev->why ? ev->why : "");
		if (S.verbose)
			fprintf(stderr, "[%s] connection failed: %s (%s)\n", who, sd_prov_strerror(ev->status), S.fail_why);
		break;
	case SD_PROV_EV_DISCONNECTED: S.disconnected++; break;
	}
	if (S.on_event)
		S.on_event(c, ev);
	if (ev->priv_len && ev->priv_len < sizeof(S.priv)) {
		memcpy(S.priv, ev->priv, ev->priv_len);
		S.priv_len = ev->priv_len;
	}
}

static inline void cb_conn_request(void *arg, struct sd_prov_listener *l, void *lctx, struct sd_prov_conn *c,
				   const void *priv, size_t priv_len, const struct sockaddr *peer, socklen_t plen)
{
	(void)arg; (void)l; (void)lctx; (void)peer; (void)plen;
	S.requests++;
	S.req_conn = c;
	S.req_priv_len = priv_len < sizeof(S.req_priv) ? priv_len : 0;
	memcpy(S.req_priv, priv, S.req_priv_len);
}

static const struct sd_prov_cbs CBS = {
	.op_done = cb_op_done, .rx = cb_rx, .rx_done = cb_rx_done, .conn_event = cb_conn_event,
	.conn_request = cb_conn_request,
};

/* S's instance; a failure ends the process. */
static inline void open_prov(uint32_t timeout_ms)
{
	struct sd_prov_open_params prm = { .cbs = &CBS, .timeout_ms = timeout_ms };
	struct sd_prov_why why = {{0}};
	doca_error_t e = P->open(&prm, &S.p, &why);

	if (e) {
		fprintf(stderr, "[%s] open: %s: %s\n", who, sd_prov_strerror(e), why.msg);
		exit(1);
	}
}

/* Blocking progress with the fd (and another fd to watch), bounded. Returns
 * 1 when cond became true, 0 on timeout, 2 when extra_fd is readable. */
static inline int wait_for(int (*cond)(void *), void *arg, int extra_fd, uint64_t timeout_ms)
{
	uint64_t end = now_ms() + timeout_ms;
	int efd = -1;

	P->get_fd(S.p, &efd);
	for (;;) {
		int sleep_ms = -1;
		struct pollfd pf[2] = { { .fd = efd, .events = POLLIN }, { .fd = extra_fd, .events = POLLIN } };
		uint64_t now;

		P->progress(S.p);
		if (cond && cond(arg))
			return 1;
		now = now_ms();
		if (now >= end)
			return 0;
		if (S.spin) {
			if (extra_fd >= 0 && poll(&pf[1], 1, 0) == 1 && (pf[1].revents & (POLLIN | POLLHUP)))
				return 2;
			continue;
		}
		if (P->arm(S.p, &sleep_ms) != DOCA_SUCCESS)
			continue;
		if (sleep_ms < 0 || (uint64_t)sleep_ms > end - now)
			sleep_ms = (int)(end - now);
		if (sleep_ms > 50)
			sleep_ms = 50;
		poll(pf, extra_fd >= 0 ? 2 : 1, sleep_ms);
		if (extra_fd >= 0 && (pf[1].revents & (POLLIN | POLLHUP)))
			return 2;
	}
}
static inline int c_op(void *a) { return ((struct op *)a)->done; }
static inline int c_rx(void *a) { return S.nrx_done >= *(int *)a; }

/* Wait (bounded) while *v stays at v0: e.g. until an event count moves. */
static inline void wait_change(const int *v, int v0, uint64_t ms)
{
	for (uint64_t end = now_ms() + ms; *v == v0 && now_ms() < end;)
		wait_for(NULL, NULL, -1, 10);
}

static inline size_t mrecv(int fd, void *b, size_t cap)
{
	return mrecv_fd(fd, b, cap, 0);
}

/* A new connection whose address blob is swapped with the peer's (first: ours goes first). */
static inline struct sd_prov_conn *oob_swap(int sock, int first, uint8_t *peer, size_t cap, size_t *plen)
{
	struct sd_prov_conn *c;
	void *blob;
	size_t len;

	EXPECT_OK(P->conn_create(S.p, NULL, &c), "conn_create");
	EXPECT_OK(P->conn_export(c, &blob, &len), "conn_export");
	if (first) {
		msend(sock, blob, len);
		*plen = mrecv(sock, peer, cap);
	} else {
		*plen = mrecv(sock, peer, cap);
		msend(sock, blob, len);
	}
	free(blob);
	return c;
}

/* OOB connect: the two sides swap address blobs; established within 10 s. */
static inline struct sd_prov_conn *oob_connect(int sock, int first)
{
	uint8_t peer[4096];
	size_t plen;
	struct sd_prov_conn *c = oob_swap(sock, first, peer, sizeof(peer), &plen);
	struct sd_prov_why why = {{0}};
	int est0 = S.established;
	doca_error_t e;

	e = P->conn_connect(c, peer, plen, &why);
	CHECK(e == DOCA_SUCCESS, "conn_connect: %s %s", sd_prov_strerror(e), why.msg);
	wait_change(&S.established, est0, 10000); /* progress at least every 10 ms meanwhile */
	CHECK(S.established > est0, "OOB connection not established");
	return c;
}

/* What a submit returned, else its completion within 10 s. */
static inline doca_error_t run_op(struct op *o, doca_error_t submit_rc)
{
	if (submit_rc)
		return submit_rc;
	if (wait_for(c_op, o, -1, 10000) != 1)
		return DOCA_ERROR_TIME_OUT;
	return o->st;
}

/* ---------------------------------------------------------------- the target (child) */
/* The commands every target serves; a test's own start at CMD_OWN. */
enum { CMD_CHECK = 1, CMD_RXLOG, CMD_RESUME, CMD_HOLD, CMD_QUIT, CMD_SET64, CMD_LISTEN, CMD_CM_ANSWER, CMD_OWN };
struct msg { uint32_t cmd; uint32_t seed; uint64_t off, len, val; char text[64]; };
#define TMEM (16u << 20)

static struct {
	struct sd_prov_conn *c;           /* the connection to the parent */
	struct sd_prov_mr *mr, *mr_ro;    /* all of S.mem; its first 4 KiB read-only (NULL once deregistered) */
	struct sd_prov_listener *l;
	/* the test's: a command from CMD_OWN on (m: the message, its answer up to the hook), then what to
	 * release after the main connection closed */
	void (*cmd)(int sock, struct msg *m);
	void (*end)(void);
} T;

static inline void cmd(int sock, struct msg *m)
{
	msend(sock, m, sizeof(*m));
}

static inline void __attribute__((noreturn)) target(int sock)
{
	void *blob, *blob_ro;
	size_t blen, blen_ro;

	prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a parent that failed */
	who = "target";
	open_prov(3000);
	S.mem = aligned_alloc(4096, TMEM);
	S.rxbuf = malloc(8u << 20);
	memset(S.mem, 0, TMEM);
	T.c = oob_connect(sock, 0);
	EXPECT_OK(P->reg_mem(S.p, S.mem, TMEM, DOCA_ACCESS_FLAG_RDMA_READ | DOCA_ACCESS_FLAG_RDMA_WRITE |
					       DOCA_ACCESS_FLAG_RDMA_ATOMIC | DOCA_ACCESS_FLAG_LOCAL_READ_WRITE,
			     &T.mr, &blob, &blen), "reg_mem");
	msend(sock, blob, blen);
	/* a read-only registration of the first 4 KiB */
	EXPECT_OK(P->reg_mem(S.p, S.mem, 4096, DOCA_ACCESS_FLAG_RDMA_READ, &T.mr_ro, &blob_ro, &blen_ro), "reg_mem ro");
	msend(sock, blob_ro, blen_ro);
	free(blob);
	free(blob_ro);
	for (;;) {
		struct msg m;

		if (wait_for(NULL, NULL, sock, 60000) != 2)
			break;
		if (mrecv(sock, &m, sizeof(m)) != sizeof(m) || m.cmd == CMD_QUIT)
			break;
		switch (m.cmd) {
		case CMD_CHECK: {
			uint64_t ok = m.off + m.len <= TMEM && matches(S.mem + m.off, m.len, m.seed);

			msend(sock, &ok, sizeof(ok));
			break;
		}
		case CMD_SET64:
			memcpy(S.mem + m.off, &m.val, 8);
			msend(sock, &m, sizeof(m));
			break;
		case CMD_HOLD:
			S.hold = 1;
			msend(sock, &m, sizeof(m));
			break;
		case CMD_RESUME:
			S.hold = 0;
			P->rx_resume(T.c);
			msend(sock, &m, sizeof(m));
			break;
		case CMD_RXLOG: { /* wait (bounded) until m.len messages are complete, then send the log */
			int n = (int)m.len;

			wait_for(c_rx, &n, -1, 10000);
			msend(sock, &S.nrx_done, sizeof(int));
			msend(sock, S.rx, sizeof(S.rx[0]) * (size_t)S.nrx);
			break;
		}
		case CMD_LISTEN: {
			struct sd_prov_why why = {{0}};
			doca_error_t e;

			m.val = listen_loopback(S.p, NULL, &T.l, &e, &why);
			CHECK(e == DOCA_SUCCESS, "listen: %s %s", sd_prov_strerror(e), why.msg);
			msend(sock, &m, sizeof(m));
			break;
		}
		case CMD_CM_ANSWER: {
			/* wait for a request, then accept or reject with private data (the
			 * request may have arrived already: counted against those answered) */
			int want = ++S.answered;

			wait_for(NULL, NULL, -1, 0); /* progress once */
			for (uint64_t end = now_ms() + 10000; S.requests < want && now_ms() < end;)
				wait_for(NULL, NULL, -1, 10);
			m.val = 0;
			if (S.requests >= want) {
				CHECK(S.req_priv_len == strlen(m.text + 32) && !memcmp(S.req_priv, m.text + 32, S.req_priv_len),
				      "CM request private data");
				if (m.seed)
					EXPECT_OK(P->accept(S.req_conn, m.text, strlen(m.text)), "accept");
				else
					EXPECT_OK(P->reject(S.req_conn, m.text, strlen(m.text)), "reject");
				m.val = 1;
			}
			msend(sock, &m, sizeof(m));
			break;
		}
		default:
			if (T.cmd)
				T.cmd(sock, &m);
		}
	}
	if (T.l)
		P->listener_close(T.l);
	P->conn_close(T.c);
	if (T.end)
		T.end();
	EXPECT_OK(P->dereg_mem(S.p, T.mr), "dereg");
	if (T.mr_ro)
		EXPECT_OK(P->dereg_mem(S.p, T.mr_ro), "dereg ro");
	EXPECT_OK(P->close(S.p), "close");
	free(S.mem);
	free(S.rxbuf);
	_exit(fails ? 1 : 0);
}

/* ---------------------------------------------------------------- tests both providers run */
/* Writes and reads of 8 B .. 4 MiB (a two-entry scatter); with six, those of 4 KiB and up
 * again as a six-entry gather (over the iov_limit of some transports). */
static inline void test_rma(int sock, struct sd_prov_conn *c, struct sd_prov_rkey *rk, uint64_t base, int six)
{
	static const size_t sizes[] = { 8, 64, 4096, 65536, 1u << 20, 4u << 20 };
	uint8_t *src = malloc(4u << 20), *dst = malloc(4u << 20);

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i];
		uint64_t off = 4096 * (i + 1);
		struct op w = {0}, r = {0};
		struct sd_prov_iov iv = { src, n, NULL }, rv[2] = { { dst, n / 2, NULL }, { dst + n / 2, n - n / 2, NULL } };
		struct msg m = { .cmd = CMD_CHECK, .seed = (uint32_t)(i + 11), .off = off, .len = n };
		uint64_t ok = 0;
		doca_error_t e;

		fill(src, n, (uint32_t)(i + 11));
		e = run_op(&w, P->write(c, &iv, 1, rk, base + off, &w));
		CHECK(e == DOCA_SUCCESS, "write %zu B: %s", n, sd_prov_strerror(e));
		/* the bytes are at the target once the write completed */
		cmd(sock, &m);
		mrecv(sock, &ok, sizeof(ok));
		CHECK(ok == 1, "target memory after a %zu B write", n);
		memset(dst, 0, n);
		e = run_op(&r, P->read(c, rv, 2, rk, base + off, &r));
		CHECK(e == DOCA_SUCCESS && matches(dst, n, (uint32_t)(i + 11)), "read back %zu B: %s", n,
		      sd_prov_strerror(e));
		if (six && n >= 4096) {
			struct sd_prov_iov v6[6];
			struct op w6 = {0};
			size_t piece = n / 6, at = 0;

			fill(src, n, (uint32_t)(i + 111));
			m.seed = (uint32_t)(i + 111);
			for (int k = 0; k < 6; k++) {
				v6[k].addr = src + at;
				v6[k].len = k == 5 ? n - at : piece;
				v6[k].mr = NULL;
				at += v6[k].len;
			}
			e = run_op(&w6, P->write(c, v6, 6, rk, base + off, &w6));
			CHECK(e == DOCA_SUCCESS, "write %zu B in 6 pieces: %s", n, sd_prov_strerror(e));
			cmd(sock, &m);
			mrecv(sock, &ok, sizeof(ok));
			CHECK(ok == 1, "target memory after a %zu B write in 6 pieces", n);
		}
	}
	free(src);
	free(dst);
}

static inline void test_atomics(int sock, struct sd_prov_conn *c, struct sd_prov_rkey *rk, uint64_t base)
{
	struct msg m = { .cmd = CMD_SET64, .off = 0, .val = 40 };
	uint64_t res = 0;
	struct op o = {0};

	cmd(sock, &m);
	mrecv(sock, &m, sizeof(m));
	EXPECT_OK(run_op(&o, P->atomic_fadd(c, rk, base, 2, &res, &o)), "fadd");
	CHECK(res == 40, "fadd old value %llu", (unsigned long long)res);
	memset(&o, 0, sizeof(o));
	EXPECT_OK(run_op(&o, P->atomic_fadd(c, rk, base, 100, &res, &o)), "fadd 2");
	CHECK(res == 42, "fadd old value %llu", (unsigned long long)res);
	memset(&o, 0, sizeof(o));
	EXPECT_OK(run_op(&o, P->atomic_cswap(c, rk, base, 142, 7, &res, &o)), "cswap hit");
	CHECK(res == 142, "cswap (hit) old value %llu", (unsigned long long)res);
	memset(&o, 0, sizeof(o));
	EXPECT_OK(run_op(&o, P->atomic_cswap(c, rk, base, 142, 9, &res, &o)), "cswap miss");
	CHECK(res == 7, "cswap (miss) old value %llu", (unsigned long long)res);
	memset(&o, 0, sizeof(o));
	CHECK(P->atomic_fadd(c, rk, base + 4, 1, &res, &o) == DOCA_ERROR_INVALID_VALUE, "unaligned atomic refused");
}

static inline void test_messages(int sock, struct sd_prov_conn *c, struct sd_prov_rkey *rk, uint64_t base)
{
	enum { N = 24 };
	static uint8_t buf[N][1u << 20];
	struct op ops[N];
	struct msg m = { .cmd = CMD_HOLD };
	int nrx = 0;
	struct rxrec rx[MAXRX];
	size_t len[N];

	/* the first messages arrive while the target has no receive posted (HOLD) */
	if (!getenv("NOHOLD")) {
		cmd(sock, &m);
		mrecv(sock, &m, sizeof(m));
	}
	memset(ops, 0, sizeof(ops));
	for (int k = 0; k < N; k++) {
		struct sd_prov_iov iv = { buf[k], 0, NULL };
		uint32_t imm = 1000u + (uint32_t)k;
		doca_error_t e;

		if (k % 4 == 3) { /* write with immediate */
			len[k] = wimm_len((uint32_t)k);
			fill(buf[k], len[k], (uint32_t)k);
			iv.len = len[k];
			e = P->write_imm(c, &iv, 1, rk, base + wimm_off((uint32_t)k), (uint32_t)k, &ops[k]);
		} else {
			len[k] = k % 5 == 0 ? (1u << 20) - (size_t)k : (size_t)(k * 37 % 1000);
			fill(buf[k], len[k], (uint32_t)k + 500);
			iv.len = len[k];
			e = P->send(c, &iv, 1, k % 2 ? &imm : NULL, &ops[k]);
		}
		CHECK(e == DOCA_SUCCESS, "submit message %d: %s", k, sd_prov_strerror(e));
		if (k == 5) { /* let some arrive and be held, then resume */
			wait_for(NULL, NULL, -1, 100);
			m.cmd = CMD_RESUME;
			cmd(sock, &m);
			mrecv(sock, &m, sizeof(m));
		}
	}
	for (int k = 0; k < N; k++) {
		int r = wait_for(c_op, &ops[k], -1, 10000);

		CHECK(r == 1 && ops[k].st == DOCA_SUCCESS, "message %d completion: %s", k,
		      r == 1 ? sd_prov_strerror(ops[k].st) : "timeout");
	}
	m.cmd = CMD_RXLOG;
	m.len = N;
	cmd(sock, &m);
	mrecv(sock, &nrx, sizeof(nrx));
	mrecv(sock, rx, sizeof(rx));
	CHECK(nrx == N, "target received %d of %d messages", nrx, N);
	for (int k = 0; k < N && k < nrx; k++) {
		if (k % 4 == 3) {
			CHECK(rx[k].kind == SD_PROV_RX_WRITE_IMM && rx[k].imm == (uint32_t)k && rx[k].data_ok,
			      "write-with-immediate %d: kind %d imm %u, data visible at the receive: %d", k, rx[k].kind,
			      rx[k].imm, rx[k].data_ok);
		} else {
			uint8_t tmp[1u << 20];

			fill(tmp, len[k], (uint32_t)k + 500);
			CHECK(rx[k].kind == SD_PROV_RX_SEND && rx[k].len == len[k] && rx[k].data_ok &&
			      rx[k].crc == sd_prov_crc32(tmp, len[k]), "send %d: in order, intact (len %zu / %zu)", k,
			      rx[k].len, len[k]);
			CHECK(rx[k].has_imm == (k % 2) && (!rx[k].has_imm || rx[k].imm == 1000u + (uint32_t)k),
			      "send %d immediate", k);
		}
	}
}

static inline void test_bad_input(struct sd_prov_conn *c, const uint8_t *rkblob, size_t rklen, const uint8_t *roblob,
				  size_t rolen, uint64_t base)
{
	uint8_t b[4096];
	struct sd_prov_rkey *rk = NULL;
	struct sd_prov_why why;
	doca_error_t e;
	uint8_t src[64];
	struct sd_prov_iov iv = { src, sizeof(src), NULL };
	struct op o = {0};
	char self[SD_PROV_NAME_LEN + 3];

	snprintf(self, sizeof(self), "'%s'", P->name);
	memcpy(b, rkblob, rklen);
	memset(&why, 0, sizeof(why));
	e = P->rkey_import(S.p, b, rklen - 1, &rk, NULL, NULL, NULL, &why);
	CHECK(e == DOCA_ERROR_INVALID_VALUE, "truncated rkey blob: %s (%s)", sd_prov_strerror(e), why.msg);
	e = P->rkey_import(S.p, b, 10, &rk, NULL, NULL, NULL, &why);
	CHECK(e == DOCA_ERROR_INVALID_VALUE, "10-byte rkey blob: %s", sd_prov_strerror(e));
	b[rklen - 3] ^= 0x5a; /* a forged key byte */
	e = P->rkey_import(S.p, b, rklen, &rk, NULL, NULL, NULL, &why);
	CHECK(e == DOCA_ERROR_INVALID_VALUE, "forged rkey blob: %s (%s)", sd_prov_strerror(e), why.msg);
	memcpy(b, rkblob, rklen);
	b[40] ^= 0xff; /* widen the length (resealed: a deliberate forgery of the range) */
	sd_prov_blob_seal(b, (uint32_t)rklen);
	memset(&why, 0, sizeof(why));
	e = P->rkey_import(S.p, b, rklen, &rk, NULL, NULL, NULL, &why);
	if (e == DOCA_SUCCESS) /* accepted as a range: the owner's target still has the true one (see report) */
		P->rkey_release(S.p, rk);
	memcpy(b, rkblob, rklen);
	memset(b + 8, 0, SD_PROV_NAME_LEN);
	memcpy(b + 8, "native", 6);
	sd_prov_blob_seal(b, (uint32_t)rklen);
	memset(&why, 0, sizeof(why));
	e = P->rkey_import(S.p, b, rklen, &rk, NULL, NULL, NULL, &why);
	CHECK(e == DOCA_ERROR_NOT_SUPPORTED && strstr(why.msg, "'native'") && strstr(why.msg, self),
	      "blob of another provider: %s (%s)", sd_prov_strerror(e), why.msg);
	memcpy(b, rkblob, rklen);
	b[4] = 9;
	sd_prov_blob_seal(b, (uint32_t)rklen);
	e = P->rkey_import(S.p, b, rklen, &rk, NULL, NULL, NULL, &why);
	CHECK(e == DOCA_ERROR_UNSUPPORTED_VERSION, "other format version: %s", sd_prov_strerror(e));
	/* an rkey blob where an address blob is expected */
	{
		struct sd_prov_conn *c2;

		EXPECT_OK(P->conn_create(S.p, NULL, &c2), "conn_create");
		e = P->conn_connect(c2, rkblob, rklen, &why);
		CHECK(e == DOCA_ERROR_INVALID_VALUE, "rkey blob as an address: %s", sd_prov_strerror(e));
		P->conn_close(c2);
	}
	/* bounds and rights */
	{
		struct sd_prov_rkey *ro;
		uint64_t rb, rl;
		uint32_t acc;

		EXPECT_OK(P->rkey_import(S.p, roblob, rolen, &ro, &rb, &rl, &acc, &why), "import ro");
		CHECK(rl == 4096 && acc == DOCA_ACCESS_FLAG_RDMA_READ, "ro key range/access");
		e = P->write(c, &iv, 1, ro, base, &o);
		CHECK(e == DOCA_ERROR_NOT_PERMITTED, "write through a read-only key: %s", sd_prov_strerror(e));
		e = P->read(c, &iv, 1, ro, base + 4096 - 32, &o);
		CHECK(e == DOCA_ERROR_NOT_PERMITTED, "read past the range: %s", sd_prov_strerror(e));
		e = P->read(c, &iv, 1, ro, base + 4096 - 64, &o);
		CHECK(run_op(&o, e) == DOCA_SUCCESS, "read at the end of the range: %s", sd_prov_strerror(e));
		P->rkey_release(S.p, ro);
	}
}

/* The client-server mode: accept and reject with private data, and a connect to nobody, bounded. */
/* The target's answer to the next CM request: accept (with answer as its private data) or reject (the same),
 * after checking the request carried expect. */
static inline void cm_answer(int sock, int accept, const char *answer, const char *expect)
{
	struct msg m;

	memset(&m, 0, sizeof(m));
	m.cmd = CMD_CM_ANSWER;
	m.seed = (uint32_t)accept;
	snprintf(m.text, 32, "%s", answer);
	snprintf(m.text + 32, sizeof(m.text) - 32, "%s", expect);
	cmd(sock, &m);
}

static inline void test_cm(int sock)
{
	struct msg m = { .cmd = CMD_LISTEN };
	struct sockaddr_in in;
	struct sd_prov_conn *c = NULL;
	struct sd_prov_why why = {{0}};
	doca_error_t e;
	int est0 = S.established, rej0 = S.rejected, fail0 = S.failed;
	uint64_t t0;

	cmd(sock, &m);
	mrecv(sock, &m, sizeof(m));
	CHECK(m.val != 0, "target listening");
	loopback(&in, (uint16_t)m.val);
	/* accept */
	e = P->connect_addr(S.p, (struct sockaddr *)&in, sizeof(in), "hello", 5, NULL, &c, &why);
	CHECK(e == DOCA_SUCCESS, "connect_addr: %s %s", sd_prov_strerror(e), why.msg);
	cm_answer(sock, 1, "welcome", "hello");
	wait_for(NULL, NULL, -1, 0); /* progress once */
	wait_change(&S.established, est0, 10000);
	mrecv(sock, &m, sizeof(m));
	CHECK(m.val == 1, "target saw the request");
	CHECK(S.established == est0 + 1 && S.priv_len == 7 && !memcmp(S.priv, "welcome", 7),
	      "CM accept with private data (established %d, priv %.*s)", S.established - est0, (int)S.priv_len, S.priv);
	if (c) {
		struct op o = {0};
		struct sd_prov_iov iv = { "ping", 4, NULL };

		EXPECT_OK(run_op(&o, P->send(c, &iv, 1, NULL, &o)), "send over a CM connection");
		P->conn_close(c);
	}
	/* reject */
	c = NULL;
	e = P->connect_addr(S.p, (struct sockaddr *)&in, sizeof(in), "reject me", 9, NULL, &c, &why);
	CHECK(e == DOCA_SUCCESS, "connect_addr 2: %s", sd_prov_strerror(e));
	cm_answer(sock, 0, "nope", "reject me");
	wait_change(&S.rejected, rej0, 10000);
	mrecv(sock, &m, sizeof(m));
	CHECK(S.rejected == rej0 + 1 && S.priv_len == 4 && !memcmp(S.priv, "nope", 4), "CM reject with private data");
	if (c)
		P->conn_close(c);
	/* nobody listening: fails, bounded */
	in.sin_port = htons(1); /* privileged, closed */
	c = NULL;
	t0 = now_ms();
	e = P->connect_addr(S.p, (struct sockaddr *)&in, sizeof(in), NULL, 0, NULL, &c, &why);
	if (e == DOCA_SUCCESS) {
		wait_change(&S.failed, fail0, 10000);
		CHECK(S.failed == fail0 + 1, "connect to a closed port failed (events %d)", S.failed - fail0);
		P->conn_close(c);
	}
	CHECK(now_ms() - t0 < 8000, "connect to a closed port took %llu ms", (unsigned long long)(now_ms() - t0));
}

/* An address whose process is gone. Children that must not inherit an open
 * instance are forked first; this one waits for the parent's go. */
static inline void __attribute__((noreturn)) ghost(int sock)
{
	struct sd_prov_conn *cc;
	void *b;
	size_t l;

	child_begin(sock, "ghost");
	open_prov(1000);
	P->conn_create(S.p, NULL, &cc);
	P->conn_export(cc, &b, &l);
	msend(sock, b, l);
	_exit(0); /* dies without closing anything */
}

static inline void test_dead_address(int sock, pid_t pid)
{
	uint8_t blob[4096];
	size_t len;
	struct sd_prov_conn *c;
	struct sd_prov_why why = {{0}};
	doca_error_t e;
	int fail0 = S.failed;
	uint64_t t0;

	if (write(sock, "g", 1) != 1)
		exit(1);
	len = mrecv(sock, blob, sizeof(blob));
	waitpid(pid, NULL, 0);
	close(sock);
	EXPECT_OK(P->conn_create(S.p, NULL, &c), "conn_create");
	t0 = now_ms();
	e = P->conn_connect(c, blob, len, &why);
	if (e == DOCA_SUCCESS) {
		wait_change(&S.failed, fail0, 15000);
		CHECK(S.failed == fail0 + 1, "connect to a dead worker failed (events %d)", S.failed - fail0);
	}
	CHECK(now_ms() - t0 < 8000, "dead address: took %llu ms", (unsigned long long)(now_ms() - t0));
	printf("  dead address: %s after %llu ms (%s)\n", e ? "refused at connect" : "failed",
	       (unsigned long long)(now_ms() - t0), e ? why.msg : sd_prov_strerror(S.fail_status));
	P->conn_close(c);
	P->progress(S.p);
}

/* The peer killed while many writes are in flight. */
static inline void __attribute__((noreturn)) victim(int sock)
{
	struct sd_prov_mr *mr;
	void *b;
	size_t l;
	uint8_t *mem = malloc(4u << 20);

	child_begin(sock, "victim");
	open_prov(3000);
	(void)oob_connect(sock, 0);
	P->reg_mem(S.p, mem, 4u << 20, DOCA_ACCESS_FLAG_RDMA_WRITE, &mr, &b, &l);
	msend(sock, b, l);
	for (;;)
		wait_for(NULL, NULL, -1, 1000); /* serve until killed */
}

static inline void test_peer_killed(int sock, pid_t pid)
{
	enum { NW = 64 };
	struct op ops[NW];
	uint8_t *src = malloc(4u << 20);
	uint8_t blob[4096];
	size_t blen;
	struct sd_prov_rkey *rk;
	struct sd_prov_conn *c;
	int fail0, done = 0, errs = 0;
	uint64_t base, t0;

	if (write(sock, "g", 1) != 1)
		exit(1);
	c = oob_connect(sock, 1);
	blen = mrecv(sock, blob, sizeof(blob));
	EXPECT_OK(P->rkey_import(S.p, blob, blen, &rk, NULL, NULL, NULL, NULL), "import");
	fail0 = S.failed;
	memset(ops, 0, sizeof(ops));
	memcpy(&base, blob + 32, 8); /* little-endian host */
	for (int k = 0; k < NW; k++) {
		struct sd_prov_iov iv = { src, 4u << 20, NULL };
		doca_error_t e = P->write(c, &iv, 1, rk, base, &ops[k]);

		if (e) {
			ops[k].done = 1;
			ops[k].st = e;
		}
		if (k == 4) {
			P->progress(S.p);
			kill(pid, SIGKILL);
		}
	}
	t0 = now_ms();
	for (uint64_t end = now_ms() + 15000; now_ms() < end;) {
		done = 0;
		for (int k = 0; k < NW; k++)
			done += ops[k].done;
		if (done == NW && S.failed > fail0)
			break;
		wait_for(NULL, NULL, -1, 10);
	}
	for (int k = 0; k < NW; k++)
		errs += ops[k].done && ops[k].st != DOCA_SUCCESS;
	printf("  peer killed: %d/%d writes reported (%d failed), connection %s, after %llu ms\n", done, NW, errs,
	       S.failed > fail0 ? sd_prov_strerror(S.fail_status) : "not failed", (unsigned long long)(now_ms() - t0));
	CHECK(done == NW, "every outstanding write reported (%d of %d)", done, NW);
	CHECK(errs > 0 && S.failed > fail0, "the writes after the kill failed and the connection failed");
	CHECK(now_ms() - t0 < 12000, "bounded: %llu ms", (unsigned long long)(now_ms() - t0));
	waitpid(pid, NULL, 0);
	P->rkey_release(S.p, rk);
	P->conn_close(c);
	P->progress(S.p);
	close(sock);
	free(src);
}

/* ---------------------------------------------------------------- bench */
static inline int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* 8 B write latency and 1 MiB write bandwidth, medians of 3 rounds; mr: the source's
 * registration (NULL: unregistered). */
static inline void bench(struct sd_prov_conn *c, struct sd_prov_rkey *rk, uint64_t base, uint8_t *src,
			 struct sd_prov_mr *mr)
{
	enum { ROUNDS = 3, LAT_N = 5000, BW_N = 512, WIN = 16 };
	double lat[ROUNDS], bw[ROUNDS];
	char tr[64];

	for (int r = 0; r < ROUNDS; r++) {
		struct sd_prov_iov iv = { src, 8, mr };
		double t0 = now_us();

		for (int i = -500; i < LAT_N; i++) {
			struct op o = {0};

			if (i == 0)
				t0 = now_us();
			if (P->write(c, &iv, 1, rk, base, &o))
				exit(1);
			while (!o.done)
				P->progress(S.p);
		}
		lat[r] = (now_us() - t0) / LAT_N;
	}
	for (int r = 0; r < ROUNDS; r++) {
		struct op o[WIN];
		struct sd_prov_iov iv = { src, 1u << 20, mr };
		int issued = 0, completed = 0;
		double t0 = now_us();

		memset(o, 0, sizeof(o));
		while (completed < BW_N) {
			for (int k = 0; k < WIN; k++) {
				if (issued < BW_N && (issued < WIN ? 1 : o[k].done)) {
					if (issued >= WIN)
						completed++;
					memset(&o[k], 0, sizeof(o[k]));
					if (P->write(c, &iv, 1, rk, base, &o[k]))
						exit(1);
					issued++;
				}
			}
			P->progress(S.p);
			if (issued == BW_N) {
				int d = 0;

				for (int k = 0; k < WIN; k++)
					d += o[k].done;
				if (d == WIN)
					completed = BW_N;
			}
		}
		bw[r] = (double)BW_N * (1 << 20) / (now_us() - t0); /* bytes/us = MB/s */
	}
	qsort(lat, ROUNDS, sizeof(double), cmp_d);
	qsort(bw, ROUNDS, sizeof(double), cmp_d);
	P->conn_transport(c, tr, sizeof(tr));
	printf("BENCH transport=%s write8_us_median=%.3f (min %.3f max %.3f) write1M_MBps_median=%.1f (min %.1f max %.1f)\n",
	       tr, lat[1], lat[0], lat[2], bw[1], bw[0], bw[2]);
}

/* ---------------------------------------------------------------- the run */
/* The parent's side of the target: connected, its two keys' blobs received (rk: the
 * main one imported, at base), the caps of this side. */
static inline struct sd_prov_conn *target_connect(int sock, uint8_t *rkblob, size_t *rklen, uint8_t *roblob,
						  size_t *rolen, struct sd_prov_rkey **rk, uint64_t *base,
						  struct sd_prov_caps *caps)
{
	struct sd_prov_conn *c = oob_connect(sock, 1);
	struct sd_prov_why why = {{0}};
	uint64_t rlen;
	uint32_t acc;

	*rklen = mrecv(sock, rkblob, 4096);
	*rolen = mrecv(sock, roblob, 4096);
	EXPECT_OK(P->rkey_import(S.p, rkblob, *rklen, rk, base, &rlen, &acc, &why), "rkey_import");
	P->query_caps(S.p, caps);
	CHECK(caps->transport[0] != 0, "caps name the transport in use");
	return c;
}

/* Quit the target and wait (bounded) for its side to close: its exit status checked. */
static inline void target_quit(int sock, pid_t pid)
{
	struct msg m = { .cmd = CMD_QUIT };
	int status = 0;

	cmd(sock, &m);
	/* the target closes its side: we see the disconnect */
	for (uint64_t end = now_ms() + 5000; !S.disconnected && !S.failed && now_ms() < end;)
		wait_for(NULL, NULL, -1, 10);
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "target exit status %d", status);
}

#endif /* SD_TESTS_PROVIDERS_HARNESS_SUITE_H */
