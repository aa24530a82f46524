/*
 * Provider conformance: the contract written in src/providers/provider.h,
 * rule by rule, checked the same way for every provider.
 *
 *   test_provider <name>       ucx, ofi (later native): looked up with sd_provider_find
 *
 * Two processes (fork: this one, the initiator, and a target), blobs and
 * commands over a socketpair; two more children for the failure cases (an
 * address whose process is gone, a peer killed mid-transfer). Every wait is
 * bounded in time and count. Each check is named after the rule of the header
 * it tests ("rule ..." lines); a rule runs for every provider, and only where
 * the header itself lets providers differ (caps flags, enforce bits) do the
 * caps gate a check: the run prints what it skipped and why.
 *
 * Exit 0: every rule held; 1: some did not (FAIL lines on stderr); 77: the
 * provider is not built here, or its probe says it cannot start (skip).
 */
#define _GNU_SOURCE
#define HARNESS_PAT_BIAS 1u /* this test's pattern: one up from the others' */
#include "harness.h"

static const char *NAME;
#define ES(e) sd_prov_strerror(e)

static uint32_t pat_crc(size_t n, uint32_t seed)
{
	uint8_t *t = malloc(n ? n : 1);
	uint32_t c;

	fill(t, n, seed);
	c = sd_prov_crc32(t, n);
	free(t);
	return c;
}

/* ================================================================ instances */
struct inst {
	struct sd_prov *p;
	const char *name;
	uint32_t timeout_ms;
	int in_prog;   /* inside progress() of this instance */
	int fd;        /* get_fd's, -1 without SD_PROV_CAP_FD */
	uint32_t flags;
	int arm_bad;
	struct sd_prov_cbs cbs;
};
static struct inst I_main, I_short, I_scratch;
static long cb_outside; /* callbacks run outside progress() of their instance */
static struct sd_prov_caps CAPS;

static int prog(struct inst *in)
{
	int n;

	in->in_prog++;
	n = P->progress(in->p);
	in->in_prog--;
	CHECK(n >= 0, "progress() returned %d", n);
	return n;
}

static struct inst *cb_inst(void *arg, const char *cb)
{
	struct inst *in = arg;

	if (in != &I_main && in != &I_short && in != &I_scratch) {
		CHECK(0, "%s: the callback's arg is not the cbs.arg given to open()", cb);
		return NULL;
	}
	if (!in->in_prog) {
		cb_outside++;
		CHECK(0, "%s ran outside progress() of its instance (callbacks run only inside progress())", cb);
	}
	return in;
}

/* ================================================================ operations */
/* Every op gets one of these as its op_ctx: op_done must come exactly once for
 * an accepted op, never for a refused one. */
#define OP_MAGIC 0x0b5e55edu
#define NOPS 4096
struct op {
	uint32_t magic;
	int accepted, refused, done;
	doca_error_t st, submit_rc;
	uint64_t seq;
	struct inst *in;
	uint64_t result; /* atomics */
};
static struct op OPS[NOPS];
static int nops;
static uint64_t done_seq;

static struct op *op_new(struct inst *in)
{
	struct op *o;

	if (nops >= NOPS) {
		fprintf(stderr, "[%s] out of op slots\n", who);
		exit(1);
	}
	o = &OPS[nops++];
	memset(o, 0, sizeof(*o));
	o->magic = OP_MAGIC;
	o->in = in;
	return o;
}
/* What a submit returned: accepted (one op_done follows) or refused (none). */
static doca_error_t sub(struct op *o, doca_error_t rc)
{
	o->submit_rc = rc;
	if (rc)
		o->refused = 1;
	else
		o->accepted = 1;
	return rc;
}

static void cb_op_done(void *arg, void *op_ctx, doca_error_t st)
{
	struct op *o = op_ctx;

	cb_inst(arg, "op_done");
	if (!(o >= OPS && o < OPS + NOPS && o->magic == OP_MAGIC)) {
		CHECK(0, "op_done with an op_ctx that was never given to a submit (%p)", op_ctx);
		return;
	}
	CHECK(o->in == arg, "op_done of an op of another instance");
	CHECK(!o->refused, "op_done (%s) for an op whose submit returned %s: an op that returns an error reports "
	      "nothing", ES(st), ES(o->submit_rc));
	CHECK(o->done == 0, "a second op_done for one op (first %s, now %s)", ES(o->st), ES(st));
	o->done++;
	o->st = st;
	o->seq = ++done_seq;
}

/* ================================================================ connections */
#define MAXRX 96
enum { A_NONE = -1, A_TAKEN = SD_PROV_RX_TAKEN, A_PLACE = SD_PROV_RX_PLACE };
struct rxrec {
	int32_t kind, has_imm;
	uint32_t imm;
	uint32_t crc;
	uint64_t len, got;
	int32_t answer, done, st, vis, had_data, pad;
};
enum rxmode { M_TAKE = 0, M_PLACE_ALL = 1, M_PLACE_SHORT = 2 };

#define CX_MAGIC 0xc0cc7e47u
struct cctx {
	uint32_t magic;
	int id;
	struct inst *in;
	struct sd_prov_conn *c;
	int closed;            /* conn_close called (or rejected): no conn_event / rx after */
	int est, rej, failed, disc, nev, terminal;
	doca_error_t fail_status;
	int fail_reason;
	char why[200];
	uint64_t ev_ms;
	uint8_t priv[256];
	size_t priv_len;
	/* received messages, in order */
	struct rxrec log[MAXRX];
	int nlog, ndone, disc_at;
	/* PLACE answers: where each message was to go (several may await their rx_done, which comes in order) */
	struct { struct sd_prov_iov dst[3]; int n; uint8_t *buf; } pl[MAXRX];
	/* the answer per message index: from sched_at[i] on, sched_mode[i] */
	int sched_at[16], sched_mode[16], nsched;
	/* HOLD at these message indexes (then rx_resume 100 ms later, by the tick) */
	int hold_at[4], nhold, holds_done, holding, reoffer, offers_held, bad_reoffer;
	uint64_t held_ms;
	struct rxrec held;
};
#define NCX 48
static struct cctx CX[NCX];
static int ncx;

static struct cctx *cx_new(struct inst *in)
{
	struct cctx *x;

	if (ncx >= NCX) {
		fprintf(stderr, "[%s] out of connection slots\n", who);
		exit(1);
	}
	x = &CX[ncx];
	memset(x, 0, sizeof(*x));
	x->magic = CX_MAGIC;
	x->id = ncx++;
	x->in = in;
	x->disc_at = -1;
	return x;
}

static struct cctx *cb_cx(void *arg, struct sd_prov_conn *c, void *cctx, const char *cb)
{
	struct cctx *x = cctx;

	if (!(x >= CX && x < CX + NCX && x->magic == CX_MAGIC)) {
		CHECK(0, "%s: the conn_ctx given back is not the one given to the connection (%p)", cb, cctx);
		return NULL;
	}
	CHECK(x->in == arg, "%s: a connection of another instance", cb);
	CHECK(!x->c || x->c == c, "%s: the connection handle is not the one created", cb);
	CHECK(!x->closed, "%s for connection %d after conn_close / reject returned", cb, x->id);
	return x;
}

static void cb_conn_event(void *arg, struct sd_prov_conn *c, void *cctx, const struct sd_prov_conn_event *ev)
{
	struct cctx *x;

	cb_inst(arg, "conn_event");
	x = cb_cx(arg, c, cctx, "conn_event");
	if (!x)
		return;
	CHECK(!x->terminal, "conn_event %d on connection %d after its terminal event", ev->ev, x->id);
	CHECK(ev->priv_len <= SD_PROV_MAX_PRIV && (!ev->priv_len || ev->priv), "event private data %zu B",
	      ev->priv_len);
	x->nev++;
	x->ev_ms = now_ms();
	if (ev->priv_len && ev->priv_len <= sizeof(x->priv)) {
		memcpy(x->priv, ev->priv, ev->priv_len);
		x->priv_len = ev->priv_len;
	}
	switch (ev->ev) {
	case SD_PROV_EV_ESTABLISHED:
		x->est++;
		CHECK(x->est == 1, "ESTABLISHED %d times on connection %d", x->est, x->id);
		break;
	case SD_PROV_EV_REJECTED:
		x->rej++;
		x->terminal = 1;
		break;
	case SD_PROV_EV_FAILED:
		x->failed++;
		x->terminal = 1;
		x->fail_status = ev->status;
		x->fail_reason = ev->reason;
		snprintf(x->why, sizeof(x->why), "%s", ev->why ? ev->why : "");
		CHECK(ev->status == DOCA_ERROR_CONNECTION_RESET || ev->status == DOCA_ERROR_TIME_OUT ||
		      ev->status == DOCA_ERROR_CONNECTION_ABORTED,
		      "FAILED with status %s (the header: CONNECTION_RESET, TIME_OUT or CONNECTION_ABORTED)",
		      ES(ev->status));
		CHECK(ev->reason == SD_PROV_FAIL_TIMEOUT || ev->reason == SD_PROV_FAIL_REFUSED ||
		      ev->reason == SD_PROV_FAIL_LOST, "FAILED with reason %d", ev->reason);
		CHECK((ev->reason == SD_PROV_FAIL_LOST) == (ev->status == DOCA_ERROR_CONNECTION_RESET) &&
			      (ev->reason == SD_PROV_FAIL_TIMEOUT) == (ev->status == DOCA_ERROR_TIME_OUT) &&
			      (ev->reason == SD_PROV_FAIL_REFUSED) == (ev->status == DOCA_ERROR_CONNECTION_ABORTED),
		      "FAILED pairs status and reason (the header: LOST / CONNECTION_RESET, TIMEOUT / TIME_OUT, "
		      "REFUSED / CONNECTION_ABORTED): %s with reason %d", ES(ev->status), ev->reason);
		break;
	case SD_PROV_EV_DISCONNECTED:
		x->disc++;
		x->terminal = 1;
		x->disc_at = x->nlog;
		break;
	default:
		CHECK(0, "unknown conn_event %d", ev->ev);
	}
}

/* CM server side: requests wait here for the target's CMD_CM_ANSWER */
static int LISTENER_TAG;
static struct {
	struct sd_prov_conn *c;
	uint8_t priv[256];
	size_t priv_len;
	int family;
} REQ[8];
static int nreq, nreq_taken;

static void cb_conn_request(void *arg, struct sd_prov_listener *l, void *lctx, struct sd_prov_conn *c,
			    const void *priv, size_t priv_len, const struct sockaddr *peer, socklen_t plen)
{
	(void)l;
	cb_inst(arg, "conn_request");
	CHECK(lctx == &LISTENER_TAG, "conn_request: listener_ctx is not the ctx given to listen()");
	CHECK(c != NULL, "conn_request without a connection");
	CHECK(priv_len <= SD_PROV_MAX_PRIV && (!priv_len || priv), "request private data %zu B", priv_len);
	if (nreq < 8) {
		REQ[nreq].c = c;
		REQ[nreq].priv_len = priv_len <= sizeof(REQ[0].priv) ? priv_len : 0;
		memcpy(REQ[nreq].priv, priv, REQ[nreq].priv_len);
		REQ[nreq].family = peer && plen ? peer->sa_family : -1;
		nreq++;
	}
}

/* ---------------------------------------------------------------- rx */
/* the target's memory and what must be visible in it when message `at` is offered */
static uint8_t *TM;
#define TMEM (16u << 20)
static struct { int conn, at; uint64_t off, len; uint32_t seed; } EXP[64];
static int nexp;

static int mode_for(struct cctx *x, int idx)
{
	int m = M_TAKE;

	for (int i = 0; i < x->nsched; i++)
		if (x->sched_at[i] <= idx)
			m = x->sched_mode[i];
	return m;
}

static void rec_ident(struct rxrec *r, const struct sd_prov_rx *rx)
{
	memset(r, 0, sizeof(*r));
	r->kind = rx->kind;
	r->has_imm = rx->has_imm;
	r->imm = rx->imm;
	r->len = rx->len;
	r->had_data = rx->data != NULL;
	r->crc = rx->data ? sd_prov_crc32(rx->data, rx->len) : 0;
	r->answer = A_NONE;
	r->vis = -1;
}

static enum sd_prov_rx_answer cb_rx(void *arg, struct sd_prov_conn *c, void *cctx, const struct sd_prov_rx *rx,
				    struct sd_prov_iov *dst, int *ndst, void **rx_ctx)
{
	struct cctx *x;
	struct rxrec id, *r;
	int idx, mode, cap;

	cb_inst(arg, "rx");
	x = cb_cx(arg, c, cctx, "rx");
	if (!x)
		return SD_PROV_RX_TAKEN;
	CHECK(!x->terminal, "rx on connection %d after its terminal event", x->id);
	CHECK(rx->kind == SD_PROV_RX_SEND || rx->kind == SD_PROV_RX_WRITE_IMM, "rx kind %d", rx->kind);
	cap = *ndst;
	CHECK(cap >= 1, "rx offers room for %d dst entries", cap);
	rec_ident(&id, rx);
	if (x->holding) { /* HOLD keeps it and every later message until rx_resume */
		x->offers_held++;
		return SD_PROV_RX_HOLD;
	}
	idx = x->nlog;
	if (x->reoffer) { /* the held message, offered again after rx_resume */
		x->reoffer = 0;
		if (id.kind != x->held.kind || id.len != x->held.len || id.has_imm != x->held.has_imm ||
		    id.imm != x->held.imm || (id.had_data && x->held.had_data && id.crc != x->held.crc))
			x->bad_reoffer++;
	} else if (x->holds_done < x->nhold && idx == x->hold_at[x->holds_done]) {
		x->holding = 1;
		x->held = id;
		x->held_ms = now_ms();
		return SD_PROV_RX_HOLD;
	}
	if (x->nlog >= MAXRX)
		return SD_PROV_RX_TAKEN;
	r = &x->log[x->nlog++];
	*r = id;
	for (int i = 0; i < nexp; i++) /* what must be visible at the target now */
		if (EXP[i].conn == x->id && EXP[i].at == idx && TM) {
			int ok = EXP[i].off + EXP[i].len <= TMEM && matches(TM + EXP[i].off, EXP[i].len, EXP[i].seed);
			r->vis = r->vis == 0 ? 0 : ok;
		}
	mode = mode_for(x, idx);
	if (mode == M_TAKE && (rx->data || rx->kind == SD_PROV_RX_WRITE_IMM)) {
		r->answer = A_TAKEN;
		r->done = 1;
		x->ndone++;
		return SD_PROV_RX_TAKEN;
	}
	/* PLACE: into several entries with gaps (M_PLACE_SHORT: one byte less room than the payload) */
	{
		size_t L = rx->len, room = mode == M_PLACE_SHORT && L ? L - 1 : L + 8;
		int n = mode == M_TAKE || room < 48 ? 1 : (mode == M_PLACE_SHORT ? 2 : 3);
		size_t at = 0, left = room;
		uint8_t *buf = malloc(room + 256);

		if (n > cap)
			n = cap;
		x->pl[idx].buf = buf;
		for (int i = 0; i < n; i++) {
			size_t k = i == n - 1 ? left : room / (size_t)n;

			x->pl[idx].dst[i] = (struct sd_prov_iov){ buf + at, k, NULL };
			dst[i] = x->pl[idx].dst[i];
			at += k + 64;
			left -= k;
		}
		x->pl[idx].n = n;
		*ndst = n;
	}
	r->answer = A_PLACE;
	*rx_ctx = r;
	return SD_PROV_RX_PLACE;
}

static void cb_rx_done(void *arg, void *rx_ctx, doca_error_t st, size_t len)
{
	struct rxrec *r = rx_ctx;
	struct cctx *x = NULL;
	int idx;

	cb_inst(arg, "rx_done");
	for (int i = 0; i < ncx && !x; i++)
		if (r >= CX[i].log && r < CX[i].log + MAXRX)
			x = &CX[i];
	if (!x) {
		CHECK(0, "rx_done with an rx_ctx never given to a PLACE answer (%p)", rx_ctx);
		return;
	}
	CHECK(r->answer == A_PLACE && !r->done, "rx_done for a message not awaiting it (answer %d, done %d)",
	      r->answer, r->done);
	idx = (int)(r - x->log);
	for (int i = 0; i < idx; i++) /* in order per connection */
		if (x->log[i].answer == A_PLACE && !x->log[i].done) {
			CHECK(0, "rx_done of message %d on connection %d before message %d's", idx, x->id, i);
			break;
		}
	r->done = 1;
	r->st = st;
	r->got = len;
	if (st == DOCA_SUCCESS) { /* gather what was placed */
		uint8_t *g = malloc(r->len ? r->len : 1);
		size_t off = 0;

		for (int i = 0; i < x->pl[idx].n && off < r->len; i++) {
			size_t k = x->pl[idx].dst[i].len < r->len - off ? x->pl[idx].dst[i].len : r->len - off;

			memcpy(g + off, x->pl[idx].dst[i].addr, k);
			off += k;
		}
		r->crc = sd_prov_crc32(g, r->len);
		free(g);
	}
	free(x->pl[idx].buf);
	x->pl[idx].buf = NULL;
	x->ndone++;
}

static const struct sd_prov_cbs CBS = {
	.op_done = cb_op_done, .rx = cb_rx, .rx_done = cb_rx_done, .conn_event = cb_conn_event,
	.conn_request = cb_conn_request,
};

static void inst_open(struct inst *in, const char *name, uint32_t timeout_ms)
{
	struct sd_prov_open_params prm;
	struct sd_prov_why why = {{0}};
	struct sd_prov_caps caps;
	doca_error_t e;

	memset(in, 0, sizeof(*in));
	in->cbs = CBS;
	in->cbs.arg = in;
	memset(&prm, 0, sizeof(prm));
	prm.cbs = &in->cbs;
	prm.timeout_ms = timeout_ms;
	in->name = name;
	in->timeout_ms = timeout_ms;
	in->fd = -1;
	e = P->open(&prm, &in->p, &why);
	if (e) {
		fprintf(stderr, "[%s] FAIL open (%s instance): %s: %s\n", who, name, ES(e), why.msg);
		exit(1);
	}
	P->query_caps(in->p, &caps);
	in->flags = caps.flags;
	if ((caps.flags & SD_PROV_CAP_FD) && P->get_fd(in->p, &in->fd) != DOCA_SUCCESS)
		in->fd = -1;
}

/* ---------------------------------------------------------------- waiting */
static void (*tick)(void); /* the target's: resumes held messages */

/* Progress in (sleeping on its fd where it has one) until cond, for at most ms.
 * 1: cond became true; 0: timed out; 2: extra_fd readable. */
static int wait_until(struct inst *in, int (*cond)(void *), void *arg, uint64_t ms, int extra_fd)
{
	uint64_t end = now_ms() + ms;

	for (;;) {
		struct pollfd pf[2] = { { .fd = extra_fd, .events = POLLIN }, { .fd = in->fd, .events = POLLIN } };
		int sleep_ms = -1;
		uint64_t now;

		prog(in);
		if (tick)
			tick();
		if (cond && cond(arg))
			return 1;
		now = now_ms();
		if (now >= end)
			return 0;
		if (extra_fd >= 0 && poll(pf, 1, 0) == 1)
			return 2;
		if (in->fd >= 0) {
			doca_error_t e = P->arm(in->p, &sleep_ms);

			if (e == DOCA_ERROR_AGAIN)
				continue;
			if (e != DOCA_SUCCESS && !in->arm_bad++)
				CHECK(0, "arm() returned %s (DOCA_SUCCESS or DOCA_ERROR_AGAIN)", ES(e));
			if (sleep_ms < 0 || sleep_ms > 10)
				sleep_ms = 10;
			if ((uint64_t)sleep_ms > end - now)
				sleep_ms = (int)(end - now);
			if (extra_fd >= 0)
				poll(pf, 2, sleep_ms);
			else
				poll(&pf[1], 1, sleep_ms);
		} else {
			poll(pf, extra_fd >= 0 ? 1 : 0, 1);
		}
		if (extra_fd >= 0 && (pf[0].revents & (POLLIN | POLLHUP)))
			return 2;
	}
}
static void pump(struct inst *in, uint64_t ms) { wait_until(in, NULL, NULL, ms, -1); }
static int c_op(void *a) { return ((struct op *)a)->done || ((struct op *)a)->refused; }

static doca_error_t wait_op(struct op *o, uint64_t ms)
{
	if (o->refused)
		return o->submit_rc;
	if (wait_until(o->in, c_op, o, ms, -1) != 1)
		return DOCA_ERROR_TIME_OUT;
	return o->st;
}
struct opset { struct op **o; int n; };
static int c_ops(void *a)
{
	struct opset *s = a;

	for (int i = 0; i < s->n; i++)
		if (!c_op(s->o[i]))
			return 0;
	return 1;
}
static int wait_ops(struct op **o, int n, uint64_t ms)
{
	struct opset s = { o, n };

	return n ? wait_until(o[0]->in, c_ops, &s, ms, -1) == 1 : 1;
}

/* ---------------------------------------------------------------- socketpair */
/* Receive one message, progressing in (if any) meanwhile: the peer may need us to. */
static size_t mrecv(struct inst *in, int fd, void *b, size_t cap)
{
	int prog_in = in && in->p;

	if (prog_in && wait_until(in, NULL, NULL, 30000, fd) != 2)
		mrecv_gone();
	return mrecv_fd(fd, b, cap, prog_in);
}

enum cmd {
	CMD_CHECK = 1, CMD_FILL, CMD_SET64, CMD_GET64, CMD_EXPECT, CMD_SCHED, CMD_HOLDS, CMD_RXLOG, CMD_NEWCONN,
	CMD_CONNSTATE, CMD_CLOSE, CMD_LISTEN, CMD_CM_ANSWER, CMD_SEND, CMD_REG_EXTRA, CMD_DEREG_EXTRA, CMD_ARMWAIT,
	CMD_FAILS, CMD_RULE, CMD_QUIT,
};
struct msg {
	uint32_t cmd, id, seed, n;
	uint64_t off, len, val, val2, val3;
	uint32_t plen[2];
	uint8_t priv[2][256];
};

/* ---------------------------------------------------------------- OOB connect */
static int c_settled(void *a) { struct cctx *x = a; return x->est || x->terminal; }

static struct sd_prov_conn *oob_connect(struct inst *in, int sock, int first, struct cctx *x)
{
	struct sd_prov_conn *c = NULL;
	struct sd_prov_why why = {{0}};
	void *blob = NULL;
	size_t len = 0, plen, bl;
	const uint8_t *body;
	uint8_t peer[8192];
	doca_error_t e;

	e = P->conn_create(in->p, x, &c);
	EXPECT_OK(e, "conn_create");
	if (e)
		exit(1);
	x->c = c;
	e = P->conn_export(c, &blob, &len);
	EXPECT_OK(e, "conn_export");
	CHECK(e || sd_prov_blob_check(blob, len, NAME, SD_PROV_BLOB_ADDR, &body, &bl, &why) == DOCA_SUCCESS,
	      "an exported address blob carries the common header naming '%s': %s", NAME, why.msg);
	if (first) {
		msend(sock, blob, len);
		plen = mrecv(in, sock, peer, sizeof(peer));
	} else {
		plen = mrecv(in, sock, peer, sizeof(peer));
		msend(sock, blob, len);
	}
	free(blob);
	e = P->conn_connect(c, peer, plen, &why);
	CHECK(e == DOCA_SUCCESS, "conn_connect: %s %s", ES(e), why.msg);
	wait_until(in, c_settled, x, in->timeout_ms + 5000, -1);
	return c;
}

/* ================================================================ the target */
static struct cctx *TC[NCX]; /* the target's connections by id (0: the main one) */

static void target_tick(void)
{
	for (int i = 0; i < ncx; i++) {
		struct cctx *x = &CX[i];

		if (x->holding && now_ms() - x->held_ms >= 100 && !x->closed) {
			x->holding = 0;
			x->holds_done++;
			x->reoffer = 1;
			P->rx_resume(x->c); /* outside progress: the held message comes in a later progress() */
		}
	}
}

static int c_rxlog(void *a)
{
	struct msg *m = a;
	struct cctx *x = TC[m->id];

	return x->ndone >= (int)m->n && !x->holding && !x->reoffer;
}
static int c_state(void *a)
{
	struct msg *m = a;
	struct cctx *x = TC[m->id];

	return m->n == 1 ? x->est || x->terminal : x->terminal;
}
static int c_req(void *a) { (void)a; return nreq > nreq_taken; }

static void target(int sock)
{
	struct inst *in = &I_main;
	struct sd_prov_mr *mr, *mr_ro, *mr_x = NULL;
	struct sd_prov_listener *l = NULL;
	void *blob;
	size_t blen;
	uint8_t *extra = aligned_alloc(4096, 65536);
	struct msg m;

	who = "target";
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	alarm(240);
	inst_open(in, "target", 5000);
	tick = target_tick;
	TM = aligned_alloc(4096, TMEM);
	memset(TM, 0, TMEM);
	memset(extra, 0, 65536);
	TC[0] = cx_new(in);
	oob_connect(in, sock, 0, TC[0]);
	EXPECT_OK(P->reg_mem(in->p, TM, TMEM, DOCA_ACCESS_FLAG_RDMA_READ | DOCA_ACCESS_FLAG_RDMA_WRITE |
			     DOCA_ACCESS_FLAG_RDMA_ATOMIC | DOCA_ACCESS_FLAG_LOCAL_READ_WRITE, &mr, &blob, &blen), "reg_mem");
	msend(sock, blob, blen);
	free(blob);
	EXPECT_OK(P->reg_mem(in->p, TM, 4096, DOCA_ACCESS_FLAG_RDMA_READ, &mr_ro, &blob, &blen), "reg_mem ro");
	msend(sock, blob, blen);
	free(blob);
	memset(&m, 0, sizeof(m));
	m.val = (uint64_t)(uintptr_t)TM;
	msend(sock, &m, sizeof(m));
	for (;;) {
		if (wait_until(in, NULL, NULL, 120000, sock) != 2)
			break;
		if (mrecv(in, sock, &m, sizeof(m)) != sizeof(m) || m.cmd == CMD_QUIT)
			break;
		switch (m.cmd) {
		case CMD_CHECK:
			m.val = m.off + m.len <= TMEM && matches(TM + m.off, m.len, m.seed);
			break;
		case CMD_FILL:
			if (m.off + m.len <= TMEM)
				fill(TM + m.off, m.len, m.seed);
			break;
		case CMD_SET64:
			memcpy(TM + m.off, &m.val, 8);
			break;
		case CMD_GET64:
			memcpy(&m.val, TM + m.off, 8);
			break;
		case CMD_EXPECT:
			if (nexp < 64) {
				EXP[nexp].conn = (int)m.id;
				EXP[nexp].at = (int)m.n;
				EXP[nexp].off = m.off;
				EXP[nexp].len = m.len;
				EXP[nexp].seed = m.seed;
				nexp++;
			}
			break;
		case CMD_SCHED: {
			struct cctx *x = TC[m.id];

			if (x->nsched < 16) {
				x->sched_at[x->nsched] = (int)m.n;
				x->sched_mode[x->nsched++] = (int)m.val;
			}
			break;
		}
		case CMD_HOLDS: {
			struct cctx *x = TC[m.id];

			x->nhold = (int)(m.n < 4 ? m.n : 4);
			x->holds_done = 0;
			memcpy(x->hold_at, m.priv[0], sizeof(x->hold_at));
			break;
		}
		case CMD_RXLOG: { /* wait (bounded) until n messages are done, then send the log */
			struct cctx *x = TC[m.id];

			wait_until(in, c_rxlog, &m, 10000, -1);
			m.n = (uint32_t)x->nlog;
			m.val = (uint64_t)x->ndone;
			m.off = (uint64_t)x->offers_held;
			m.len = (uint64_t)x->bad_reoffer;
			m.val2 = (uint64_t)x->holds_done;
			msend(sock, &m, sizeof(m));
			msend(sock, x->log, sizeof(x->log[0]) * (size_t)x->nlog);
			continue;
		}
		case CMD_NEWCONN: {
			struct cctx *x = cx_new(in);

			TC[x->id] = x;
			m.id = (uint32_t)x->id;
			msend(sock, &m, sizeof(m));
			oob_connect(in, sock, 0, x);
			continue;
		}
		case CMD_CONNSTATE: { /* n 1: wait until settled, 2: until its terminal event */
			struct cctx *x = TC[m.id];

			if (x)
				wait_until(in, c_state, &m, m.val ? m.val : 10000, -1);
			m.val = x ? (uint64_t)x->est : 0;
			m.val2 = x ? (uint64_t)x->disc : 0;
			m.val3 = x ? (uint64_t)x->failed : 0;
			m.off = x ? (uint64_t)(int64_t)x->disc_at : 0;
			m.len = x ? (uint64_t)x->nlog : 0;
			m.seed = x ? (uint32_t)x->nev : 0;
			break;
		}
		case CMD_CLOSE: {
			struct cctx *x = TC[m.id];

			x->closed = 1;
			P->conn_close(x->c);
			break;
		}
		case CMD_LISTEN: {
			struct sd_prov_why why = {{0}};
			doca_error_t e;

			m.val = listen_loopback(in->p, &LISTENER_TAG, &l, &e, &why);
			m.n = (uint32_t)e;
			snprintf((char *)m.priv[0], sizeof(m.priv[0]), "%s", why.msg);
			break;
		}
		case CMD_CM_ANSWER: { /* the next request: check its private data, accept (seed 1) or reject */
			m.val = 0;
			if (wait_until(in, c_req, NULL, 5000, -1) == 1) {
				int k = nreq_taken++;
				struct cctx *x = cx_new(in);
				doca_error_t e;

				TC[x->id] = x;
				x->c = REQ[k].c;
				P->conn_set_ctx(REQ[k].c, x);
				CHECK(REQ[k].priv_len == m.plen[1] && !memcmp(REQ[k].priv, m.priv[1], m.plen[1]),
				      "conn_request carries the client's private data (%zu B, expected %u)",
				      REQ[k].priv_len, m.plen[1]);
				if (m.seed) {
					e = P->accept(REQ[k].c, m.priv[0], m.plen[0]);
					EXPECT_OK(e, "accept");
				} else {
					x->closed = 1; /* gone when reject returns: no event */
					e = P->reject(REQ[k].c, m.priv[0], m.plen[0]);
					EXPECT_OK(e, "reject");
				}
				m.val = 1;
				m.id = (uint32_t)x->id;
				m.val2 = (uint64_t)REQ[k].family;
			}
			break;
		}
		case CMD_SEND: {
			struct cctx *x = TC[m.id];
			uint8_t *b = malloc(m.len ? m.len : 1);
			struct sd_prov_iov iv = { b, m.len, NULL };
			struct op *o = op_new(in);

			fill(b, m.len, m.seed);
			m.val = wait_op(o, sub(o, P->send(x->c, &iv, 1, NULL, o)) ? 0 : 10000);
			free(b);
			break;
		}
		case CMD_REG_EXTRA: {
			void *b = NULL;
			size_t bl = 0;
			doca_error_t e = P->reg_mem(in->p, extra, 65536, DOCA_ACCESS_FLAG_RDMA_READ |
						    DOCA_ACCESS_FLAG_RDMA_WRITE, &mr_x, &b, &bl);

			EXPECT_OK(e, "reg_mem extra");
			msend(sock, b, e ? 0 : bl);
			free(b);
			continue;
		}
		case CMD_DEREG_EXTRA:
			m.n = mr_x ? (uint32_t)P->dereg_mem(in->p, mr_x) : 0;
			mr_x = NULL;
			m.val = extra[0] == 0 && extra[100] == 0;
			break;
		case CMD_ARMWAIT: { /* arm, tell the initiator, sleep on the fd; report what woke it */
			int ms = -1, k = 0;
			doca_error_t e = DOCA_ERROR_AGAIN;
			struct pollfd pf = { .fd = in->fd, .events = POLLIN };
			uint64_t t0;

			pump(in, 20);
			for (; k < 2000 && (e = P->arm(in->p, &ms)) == DOCA_ERROR_AGAIN; k++)
				prog(in);
			m.n = (uint32_t)e;
			m.val = (uint64_t)(int64_t)ms;
			msend(sock, &m, sizeof(m));
			if (e)
				continue;
			t0 = now_ms();
			m.val2 = (uint64_t)poll(&pf, 1, ms < 0 || ms > 3000 ? 3000 : ms);
			m.val3 = now_ms() - t0;
			break;
		}
		case CMD_FAILS:
			m.val = (uint64_t)fails;
			break;
		case CMD_RULE: { /* the initiator's rule, for this side's FAIL lines */
			static char name[256];

			snprintf(name, sizeof(name), "%s", (char *)m.priv[0]);
			rule = name;
			break;
		}
		}
		msend(sock, &m, sizeof(m));
	}
	/* quit: close everything; what was sent reaches the peers before the process leaves */
	if (l)
		P->listener_close(l);
	for (int i = 0; i < ncx; i++)
		if (TC[i] && !TC[i]->closed) {
			TC[i]->closed = 1;
			P->conn_close(TC[i]->c);
		}
	for (uint64_t end = now_ms() + 10000; P->closing(in->p) > 0 && now_ms() < end;)
		pump(in, 5);
	CHECK(P->closing(in->p) == 0, "closing() still %d after 10 s", P->closing(in->p));
	EXPECT_OK(P->dereg_mem(in->p, mr), "dereg_mem");
	EXPECT_OK(P->dereg_mem(in->p, mr_ro), "dereg_mem ro");
	if (mr_x)
		P->dereg_mem(in->p, mr_x);
	EXPECT_OK(P->close(in->p), "close");
	CHECK(cb_outside == 0, "%ld callbacks outside progress()", cb_outside);
	_exit(fails ? 1 : 0);
}

/* ================================================================ the initiator */
static int S_sock;
static struct sd_prov_rkey *RK, *RK_RO;
static uint64_t TBASE;
static uint8_t RKBLOB[8192], ROBLOB[8192];
static size_t RKLEN, ROLEN;

static void tcmd(struct msg *m)
{
	msend(S_sock, m, sizeof(*m));
	if (m->cmd != CMD_NEWCONN && m->cmd != CMD_REG_EXTRA)
		mrecv(&I_main, S_sock, m, sizeof(*m));
}
static int t_check(uint64_t off, uint64_t len, uint32_t seed)
{
	struct msg m = { .cmd = CMD_CHECK, .off = off, .len = len, .seed = seed };

	tcmd(&m);
	return (int)m.val;
}
static void t_fill(uint64_t off, uint64_t len, uint32_t seed)
{
	struct msg m = { .cmd = CMD_FILL, .off = off, .len = len, .seed = seed };

	tcmd(&m);
}
static uint64_t t_get64(uint64_t off)
{
	struct msg m = { .cmd = CMD_GET64, .off = off };

	tcmd(&m);
	return m.val;
}
static void t_set64(uint64_t off, uint64_t v)
{
	struct msg m = { .cmd = CMD_SET64, .off = off, .val = v };

	tcmd(&m);
}
static int t_fails(void)
{
	struct msg m = { .cmd = CMD_FAILS };

	tcmd(&m);
	return (int)m.val;
}

/* ---------------------------------------------------------------- rules: bookkeeping */
static int rule_fails0, rule_tfails0, rules_ok, rules_failed, rules_skipped, target_alive;
static uint64_t rule_t0;
static char skipped[2048];

static void rule_end(void)
{
	int tf = target_alive ? t_fails() : rule_tfails0;
	int bad = fails - rule_fails0 + tf - rule_tfails0;

	if (!strcmp(rule, "setup"))
		return;
	printf("  %-4s %s (%llu ms)\n", bad ? "FAIL" : "ok", rule, (unsigned long long)(now_ms() - rule_t0));
	if (bad)
		rules_failed++;
	else
		rules_ok++;
	rule_tfails0 = tf;
	rule = "setup";
}
static void rule_begin(const char *name)
{
	rule_end();
	rule = name;
	if (target_alive) {
		struct msg m = { .cmd = CMD_RULE };

		snprintf((char *)m.priv[0], sizeof(m.priv[0]), "%s", name);
		tcmd(&m);
	}
	rule_fails0 = fails;
	rule_t0 = now_ms();
}
/* A rule (or a part of one) the header lets this provider leave out: say so. */
static void skip(const char *what, const char *why)
{
	printf("  skip %s: %s\n", what, why);
	rules_skipped++;
	snprintf(skipped + strlen(skipped), sizeof(skipped) - strlen(skipped), "%s%s", skipped[0] ? ", " : "", what);
}

/* ---------------------------------------------------------------- buffers */
/* Local buffers: an arena registered once (iov.mr) and used both with and
 * without its registration; pieces of an iov list lie apart (gaps of 64 B). */
#define ARENA (24u << 20)
static uint8_t *AR;
static size_t ar_off;
static struct sd_prov_mr *AR_MR;
static uint64_t t_off; /* bump allocator in the target's memory (4 KiB..16 MiB) */

static void bufs_reset(void)
{
	ar_off = 0;
	t_off = 4096;
}
static uint64_t toff(size_t len)
{
	uint64_t o = t_off;

	t_off = (t_off + len + 4095) & ~4095ull;
	if (t_off > TMEM) {
		fprintf(stderr, "[%s] test bug: target memory exhausted in '%s'\n", who, rule);
		exit(1);
	}
	return o;
}
/* An iov list of niov pieces holding pattern seed (len bytes), apart in the arena. */
static int iov_build(struct sd_prov_iov *iov, int niov, size_t len, uint32_t seed, int use_mr, int fill_it)
{
	size_t at = 0;

	if (niov > (int)len)
		niov = len ? (int)len : 1;
	for (int i = 0; i < niov; i++) {
		size_t k = i == niov - 1 ? len - at : len / (size_t)niov;

		if (ar_off + k + 64 > ARENA) {
			fprintf(stderr, "[%s] test bug: arena exhausted in '%s'\n", who, rule);
			exit(1);
		}
		iov[i].addr = AR + ar_off;
		iov[i].len = k;
		iov[i].mr = use_mr ? AR_MR : NULL;
		if (fill_it)
			for (size_t j = 0; j < k; j++)
				AR[ar_off + j] = pat(seed, at + j);
		else
			memset(AR + ar_off, 0, k);
		ar_off += (k + 64 + 63) & ~(size_t)63;
		at += k;
	}
	return niov;
}
static int iov_matches(const struct sd_prov_iov *iov, int niov, uint32_t seed)
{
	size_t at = 0;

	for (int i = 0; i < niov; i++)
		for (size_t j = 0; j < iov[i].len; j++, at++)
			if (((uint8_t *)iov[i].addr)[j] != pat(seed, at))
				return 0;
	return 1;
}

/* ---------------------------------------------------------------- messages on the main connection */
struct xmsg { int kind, has_imm; uint32_t imm; uint64_t len; uint32_t crc; int vis, short_room; struct op *o; };
/* A connection to the target and what was sent on it. The main one carries most rules; a rule that may
 * break its connection (or leave it unusable when a provider misses a rule) gets a lane of its own. */
struct lane {
	struct sd_prov_conn *c;
	struct cctx *x;
	uint32_t tid; /* the target's id of its side */
	int nx;
	struct xmsg X[MAXRX];
};
static struct lane L_main, *L = &L_main;
#define MC (L->c)
#define MX (L->x)
#define X (L->X)
#define nx (L->nx)

static void lane_open(struct lane *ln)
{
	struct msg m = { .cmd = CMD_NEWCONN };

	msend(S_sock, &m, sizeof(m));
	mrecv(&I_main, S_sock, &m, sizeof(m));
	memset(ln, 0, sizeof(*ln));
	ln->tid = m.id;
	ln->x = cx_new(&I_main);
	ln->c = oob_connect(&I_main, S_sock, 1, ln->x);
	CHECK(ln->x->est == 1, "a new connection: ESTABLISHED %d (FAILED %d: %s)", ln->x->est, ln->x->failed, ln->x->why);
	L = ln;
}
static void lane_close(struct lane *ln)
{
	ln->x->closed = 1;
	P->conn_close(ln->c);
	L = &L_main;
}

static void t_expect(int at, uint64_t off, uint64_t len, uint32_t seed)
{
	struct msg m = { .cmd = CMD_EXPECT, .id = L->tid, .n = (uint32_t)at, .off = off, .len = len, .seed = seed };

	tcmd(&m);
	X[at].vis = 1;
}
static void t_sched(int at, int mode)
{
	struct msg m = { .cmd = CMD_SCHED, .id = L->tid, .n = (uint32_t)at, .val = (uint64_t)mode };

	tcmd(&m);
}
static uint32_t imm_of(int k)
{
	const uint8_t b[4] = { (uint8_t)(0xa0 + k), 0x01, (uint8_t)(0x7e - k), 0xfe }; /* raw, memory order */
	uint32_t v;

	memcpy(&v, b, 4);
	return v;
}
static struct op *send_msg(size_t len, int niov, int with_imm, uint32_t seed)
{
	struct sd_prov_iov iov[16];
	uint32_t imm = imm_of(nx);
	struct op *o = op_new(&I_main);
	struct xmsg *xm = &X[nx++];
	doca_error_t e;

	niov = iov_build(iov, niov, len, seed, nx % 2, 1);
	e = sub(o, P->send(MC, iov, niov, with_imm ? &imm : NULL, o));
	CHECK(e == DOCA_SUCCESS, "send %zu B in %d pieces: %s", len, niov, ES(e));
	xm->kind = SD_PROV_RX_SEND;
	xm->short_room = 0;
	xm->has_imm = with_imm;
	xm->imm = imm;
	xm->len = len;
	xm->crc = pat_crc(len, seed);
	xm->o = o;
	return o;
}
static struct op *wimm_msg(uint64_t off, size_t len, int niov, uint32_t seed)
{
	struct sd_prov_iov iov[16];
	uint32_t imm = imm_of(nx);
	struct op *o = op_new(&I_main);
	int at = nx;
	doca_error_t e;

	t_expect(at, off, len, seed); /* its own data is visible when the receive completes */
	nx++;
	niov = iov_build(iov, niov, len, seed, 1, 1);
	e = sub(o, P->write_imm(MC, iov, niov, RK, TBASE + off, imm, o));
	CHECK(e == DOCA_SUCCESS, "write_imm %zu B: %s", len, ES(e));
	X[at].kind = SD_PROV_RX_WRITE_IMM;
	X[at].has_imm = 1;
	X[at].imm = imm;
	X[at].len = 0;
	X[at].o = o;
	return o;
}

/* The target's log of the main connection: messages [from, nx) as sent. */
static int verify_log(int from, const char *what)
{
	static struct rxrec log[MAXRX];
	struct msg m = { .cmd = CMD_RXLOG, .id = L->tid, .n = (uint32_t)nx };
	int n;

	tcmd(&m);
	n = (int)m.n;
	mrecv(&I_main, S_sock, log, sizeof(log));
	CHECK(n == nx && (int)m.val == nx, "%s: the target got %d messages (%d done), %d were sent", what, n,
	      (int)m.val, nx);
	CHECK(m.off == 0, "%s: %llu offers while a message was held (HOLD keeps every later one until rx_resume)",
	      what, (unsigned long long)m.off);
	CHECK(m.len == 0, "%s: a message offered again after rx_resume was not the held one", what);
	for (int i = from; i < nx && i < n; i++) {
		struct rxrec *r = &log[i];
		struct xmsg *xm = &X[i];

		CHECK(r->kind == xm->kind, "%s: message %d: kind %d, expected %d (in submission order)", what, i,
		      r->kind, xm->kind);
		CHECK(!!r->has_imm == xm->has_imm && (!xm->has_imm || !memcmp(&r->imm, &xm->imm, 4)),
		      "%s: message %d: immediate %d/%08x, expected %d/%08x (raw bytes, memory order)", what, i,
		      r->has_imm, r->imm, xm->has_imm, xm->imm);
		CHECK(r->len == xm->len, "%s: message %d: len %llu, expected %llu", what, i, (unsigned long long)r->len,
		      (unsigned long long)xm->len);
		if (xm->vis)
			CHECK(r->vis == 1, "%s: message %d: the writes before it (and a write-with-immediate's own data) "
			      "not visible at the target when it was offered", what, i);
		if (xm->short_room) {
			CHECK(r->answer == A_PLACE && r->done && r->st == DOCA_ERROR_TOO_BIG,
			      "%s: message %d: PLACE with room < len: rx_done %s (done %d), expected DOCA_ERROR_TOO_BIG",
			      what, i, r->done ? ES(r->st) : "not called", r->done);
			continue;
		}
		if (r->answer == A_PLACE)
			CHECK(r->done && r->st == DOCA_SUCCESS && r->got == r->len, "%s: message %d: PLACE answered, "
			      "rx_done %s len %llu (done %d)", what, i, ES(r->st), (unsigned long long)r->got, r->done);
		if (xm->kind == SD_PROV_RX_SEND)
			CHECK(r->crc == xm->crc, "%s: message %d (%llu B): payload differs", what, i,
			      (unsigned long long)xm->len);
	}
	return (int)m.val2;
}

/* ================================================================ the rules */
static void rule_ops_table(void)
{
	rule_begin("ops table: name, abi, every op present but the optional live and counter");
	CHECK(P->name && !strcmp(P->name, NAME), "ops->name '%s'", P->name);
	CHECK(P->abi == SD_PROV_ABI, "abi %u", P->abi);
#define NEED(f) CHECK(P->f != NULL, "ops->" #f " is NULL")
	NEED(probe); NEED(open); NEED(close); NEED(query_caps); NEED(progress); NEED(get_fd); NEED(arm); NEED(reg_mem);
	NEED(dereg_mem); NEED(rkey_import); NEED(rkey_release); NEED(conn_create); NEED(conn_export); NEED(conn_connect);
	NEED(listen); NEED(listener_close); NEED(accept); NEED(reject); NEED(connect_addr); NEED(conn_set_ctx);
	NEED(conn_transport); NEED(conn_close); NEED(closing); NEED(write); NEED(read); NEED(atomic_fadd);
	NEED(atomic_cswap); NEED(send); NEED(write_imm); NEED(flush); NEED(rx_resume);
#undef NEED
}

static void rule_open_close(void)
{
	struct inst *in = &I_scratch;
	struct sd_prov_caps caps;
	struct sd_prov_mr *mr = NULL, *mr2 = NULL;
	struct sd_prov_conn *c = NULL;
	struct cctx *x;
	uint8_t *buf = aligned_alloc(4096, 65536);
	void *blob = NULL;
	size_t blen = 0, bl;
	const uint8_t *body;
	doca_error_t e;

	rule_begin("open/close: close with a registration left -> DOCA_ERROR_IN_USE, nothing freed");
	inst_open(in, "scratch", 2000);
	P->query_caps(in->p, &caps);
	CHECK(!strcmp(caps.name, NAME), "caps.name '%s'", caps.name);
	e = P->reg_mem(in->p, buf, 65536, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ |
		       DOCA_ACCESS_FLAG_RDMA_WRITE, &mr, &blob, &blen);
	EXPECT_OK(e, "reg_mem");
	CHECK(e || sd_prov_blob_check(blob, blen, NAME, SD_PROV_BLOB_RKEY, &body, &bl, NULL) == DOCA_SUCCESS,
	      "an rkey blob carries the common header naming '%s'", NAME);
	x = cx_new(in);
	EXPECT_OK(P->conn_create(in->p, x, &c), "conn_create");
	x->c = c;
	e = P->close(in->p);
	CHECK(e == DOCA_ERROR_IN_USE, "close with a registration left: %s", ES(e));
	if (e == DOCA_SUCCESS) {
		skip("open/close: the rest (the instance is gone)", "close did not refuse");
		free(blob);
		free(buf);
		return;
	}
	/* nothing freed: the instance, its registration and its connection are all still usable */
	prog(in);
	P->query_caps(in->p, &caps);
	CHECK(!strcmp(caps.name, NAME), "caps after a refused close");
	{
		void *b2 = NULL;
		size_t l2 = 0;

		EXPECT_OK(P->conn_export(c, &b2, &l2), "conn_export after a refused close");
		free(b2);
	}
	free(blob);
	EXPECT_OK(P->reg_mem(in->p, buf + 4096, 4096, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE, &mr2, &blob, &blen),
		  "reg_mem after a refused close");
	free(blob);
	blob = NULL;
	EXPECT_OK(P->dereg_mem(in->p, mr2), "dereg_mem");
	EXPECT_OK(P->dereg_mem(in->p, mr), "dereg_mem of the registration the refused close left");
	/* a connection left open: close fails it without callbacks and frees it */
	e = P->close(in->p);
	CHECK(e == DOCA_SUCCESS, "close once the registrations are gone (a connection left open): %s", ES(e));
	x->closed = 1;
	in->p = NULL;
	free(buf);
}

/* caps.transport as open reported it: "", or the fabric fixed at open (provider.h) */
static char TRANSPORT_AT_OPEN[sizeof(((struct sd_prov_caps *)0)->transport)];

static void rule_caps_before(void)
{
	struct sd_prov_caps *k = &CAPS;

	rule_begin("query_caps: name, limits; transport \"\" before the first connection, or the fabric fixed at open");
	P->query_caps(I_main.p, k);
	memcpy(TRANSPORT_AT_OPEN, k->transport, sizeof(TRANSPORT_AT_OPEN));
	CHECK(!strcmp(k->name, NAME), "caps.name '%s'", k->name);
	CHECK(k->version[0] != 0, "caps.version empty");
	if (k->transport[0])
		printf("  transport named at open: '%s' (checked unchanged once connected)\n", k->transport);
	CHECK(k->max_msg >= (2u << 20), "caps.max_msg %llu (this test sends 1 MiB + 13)",
	      (unsigned long long)k->max_msg);
	CHECK(k->max_iov >= 1, "caps.max_iov %u", k->max_iov);
	CHECK(k->max_priv <= SD_PROV_MAX_PRIV, "caps.max_priv %u > %u", k->max_priv, SD_PROV_MAX_PRIV);
	CHECK(!(k->flags & SD_PROV_CAP_CM) || k->max_priv >= 1, "CM without private data (max_priv 0)");
	CHECK(k->thread_mode <= 1, "caps.thread_mode %u", k->thread_mode);
	CHECK(k->flags & SD_PROV_CAP_OOB, "no SD_PROV_CAP_OOB: this test connects OOB");
	printf("  provider %s %s, flags 0x%x (atomics %s, write-with-immediate %s, CM %s, fd %s, requester checks %s, "
	       "polled %s), enforce 0x%x, max_iov %u, max_priv %u\n", k->name, k->version, k->flags,
	       k->flags & SD_PROV_CAP_ATOMIC_NATIVE ? "native" : "emulated",
	       k->flags & SD_PROV_CAP_REMOTE_CQ_DATA ? "native" : "emulated", k->flags & SD_PROV_CAP_CM ? "yes" : "no",
	       k->flags & SD_PROV_CAP_FD ? "yes" : "no", k->flags & SD_PROV_CAP_CHECK_REQUESTER ? "yes" : "no",
	       k->flags & SD_PROV_CAP_POLLED ? "yes" : "no", k->enforce, k->max_iov, k->max_priv);
	if (P->counter)
		CHECK(P->counter(I_main.p, "no such counter, surely") == -1, "counter(unknown name) is not -1");
	else
		skip("counter(unknown) == -1", "ops->counter is NULL (optional)");
}

#define REMOTE_BITS (DOCA_ACCESS_FLAG_RDMA_READ | DOCA_ACCESS_FLAG_RDMA_WRITE | DOCA_ACCESS_FLAG_RDMA_ATOMIC)
static void rule_connect(void)
{
	struct msg m = { .cmd = CMD_CONNSTATE, .id = 0, .n = 1 };
	struct sd_prov_caps k;
	char tr[128] = "";
	struct sd_prov_why why = {{0}};
	uint64_t rlen = 0;
	uint32_t acc = 0;
	uint64_t taddr;
	doca_error_t e;

	rule_begin("OOB connect: ESTABLISHED on both sides (each exactly once, nothing else)");
	MX = cx_new(&I_main);
	MC = oob_connect(&I_main, S_sock, 1, MX);
	CHECK(MX->est == 1 && MX->nev == 1, "initiator: %d ESTABLISHED in %d events (failed %d: %s)", MX->est,
	      MX->nev, MX->failed, MX->why);
	RKLEN = mrecv(&I_main, S_sock, RKBLOB, sizeof(RKBLOB));
	ROLEN = mrecv(&I_main, S_sock, ROBLOB, sizeof(ROBLOB));
	mrecv(&I_main, S_sock, &m, sizeof(m));
	taddr = m.val; /* where the target registered its memory */
	m.cmd = CMD_CONNSTATE;
	m.id = 0;
	m.n = 1;
	m.val = 0;
	tcmd(&m);
	CHECK(m.val == 1 && m.val3 == 0 && m.seed == 1, "target: %llu ESTABLISHED, %llu FAILED, %u events",
	      (unsigned long long)m.val, (unsigned long long)m.val3, m.seed);

	rule_begin("query_caps / conn_transport: transport named once connected");
	P->query_caps(I_main.p, &k);
	CHECK(k.transport[0] != 0, "caps.transport empty after a connection");
	CHECK(!TRANSPORT_AT_OPEN[0] || !strcmp(TRANSPORT_AT_OPEN, k.transport),
	      "caps.transport named at open ('%s') changed once connected ('%s')", TRANSPORT_AT_OPEN, k.transport);
	P->conn_transport(MC, tr, sizeof(tr));
	CHECK(tr[0] != 0, "conn_transport empty");
	printf("  transport: caps '%s', connection '%s'\n", k.transport, tr);
	CAPS.flags = k.flags; /* may depend on the transports in use */
	CAPS.enforce = k.enforce;

	rule_begin("rkey_import: base, length and access as registered");
	e = P->rkey_import(I_main.p, RKBLOB, RKLEN, &RK, &TBASE, &rlen, &acc, &why);
	EXPECT_OK(e, why.msg);
	if (e)
		exit(1);
	/* reg_mem registers [addr, addr+len): the blob grants that range (raddr: the target's addresses) */
	CHECK(TBASE == taddr, "base 0x%llx, registered at 0x%llx", (unsigned long long)TBASE, (unsigned long long)taddr);
	CHECK(rlen == TMEM, "length %llu, registered %u", (unsigned long long)rlen, TMEM);
	CHECK((acc & REMOTE_BITS) == REMOTE_BITS, "access 0x%x, registered 0x%x", acc, REMOTE_BITS);
	{
		uint64_t b = 0;

		e = P->rkey_import(I_main.p, ROBLOB, ROLEN, &RK_RO, &b, &rlen, &acc, &why);
		EXPECT_OK(e, why.msg);
		CHECK(b == TBASE && rlen == 4096 && (acc & REMOTE_BITS) == DOCA_ACCESS_FLAG_RDMA_READ,
		      "read-only key: base %s, length %llu, access 0x%x", b == TBASE ? "ok" : "differs",
		      (unsigned long long)rlen, acc);
	}
}

/* Blobs: every kind of bad blob is refused with the error the header names, never a crash. */
static void rule_blobs(void)
{
	static uint8_t b[8192];
	struct sd_prov_why why;
	struct sd_prov_conn *sc = NULL;
	struct cctx *sx = cx_new(&I_main);
	void *ab = NULL;
	size_t al = 0;
	const char *other = strcmp(NAME, "native") ? "native" : "ucx";
	struct sd_prov_rkey *rk = NULL;
	doca_error_t e;
	int bad;

	EXPECT_OK(P->conn_create(I_main.p, sx, &sc), "conn_create");
	sx->c = sc;
	EXPECT_OK(P->conn_export(sc, &ab, &al), "conn_export");
	if (!ab || al > sizeof(b) || RKLEN > sizeof(b))
		exit(1);
#define IMPORT(blob, len) (rk = NULL, memset(&why, 0, sizeof(why)), \
	e = P->rkey_import(I_main.p, blob, len, &rk, NULL, NULL, NULL, &why), (e == DOCA_SUCCESS ? P->rkey_release(I_main.p, rk) : (void)0), e)
#define CONNECT(blob, len) (memset(&why, 0, sizeof(why)), P->conn_connect(sc, blob, len, &why))
	for (int kind = 0; kind < 2; kind++) {
		const uint8_t *good = kind ? ab : RKBLOB;
		size_t len = kind ? al : RKLEN;
		const char *k = kind ? "address blob (conn_connect)" : "rkey blob (rkey_import)";

		rule_begin(kind ? "blobs: address blob of another provider -> NOT_SUPPORTED naming both"
				: "blobs: rkey blob of another provider -> NOT_SUPPORTED naming both");
		for (int w = 0; w < 2; w++) {
			const char *nm = w ? "zzprov" : other;

			memcpy(b, good, len);
			memset(b + 8, 0, SD_PROV_NAME_LEN);
			memcpy(b + 8, nm, strlen(nm));
			sd_prov_blob_seal(b, (uint32_t)len);
			e = kind ? CONNECT(b, len) : IMPORT(b, len);
			CHECK(e == DOCA_ERROR_NOT_SUPPORTED && strstr(why.msg, nm) && strstr(why.msg, NAME),
			      "%s of provider '%s': %s (%s)", k, nm, ES(e), why.msg);
		}
		rule_begin(kind ? "blobs: address blob truncated / corrupted crc / malformed -> INVALID_VALUE"
				: "blobs: rkey blob truncated / corrupted crc / malformed -> INVALID_VALUE");
		e = kind ? CONNECT(good, len - 1) : IMPORT(good, len - 1);
		CHECK(e == DOCA_ERROR_INVALID_VALUE, "%s truncated by 1 byte: %s (%s)", k, ES(e), why.msg);
		e = kind ? CONNECT(NULL, 0) : IMPORT(NULL, 0);
		CHECK(e == DOCA_ERROR_INVALID_VALUE, "%s NULL, 0 bytes: %s", k, ES(e));
		memcpy(b, good, len);
		b[len - 3] ^= 0x5a;
		e = kind ? CONNECT(b, len) : IMPORT(b, len);
		CHECK(e == DOCA_ERROR_INVALID_VALUE, "%s with a corrupted byte (crc mismatch): %s (%s)", k, ES(e), why.msg);
		/* the other kind of blob */
		e = kind ? CONNECT(RKBLOB, RKLEN) : IMPORT(ab, al);
		CHECK(e == DOCA_ERROR_INVALID_VALUE, "%s given a blob of the other kind: %s (%s)", k, ES(e), why.msg);
		/* every truncation, every byte flipped (not resealed): refused */
		bad = 0;
		for (size_t n = 0; n < len; n++) {
			e = kind ? CONNECT(good, n) : IMPORT(good, n);
			if (e != DOCA_ERROR_INVALID_VALUE && !bad++)
				CHECK(0, "%s truncated to %zu of %zu bytes: %s (%s)", k, n, len, ES(e), why.msg);
		}
		for (size_t i = 0; i < len; i++) {
			memcpy(b, good, len);
			b[i] ^= (uint8_t)(1u << (i % 8));
			e = kind ? CONNECT(b, len) : IMPORT(b, len);
			if ((e == DOCA_SUCCESS || (e != DOCA_ERROR_INVALID_VALUE && e != DOCA_ERROR_NOT_SUPPORTED &&
						   e != DOCA_ERROR_UNSUPPORTED_VERSION)) && !bad++)
				CHECK(0, "%s with byte %zu flipped: %s (%s)", k, i, ES(e), why.msg);
		}
		/* the body cut short, the header made consistent and resealed: malformed */
		for (size_t cut = 1; cut + SD_PROV_BLOB_HDR_LEN <= len; cut++) {
			uint32_t nl = (uint32_t)(len - cut);

			memcpy(b, good, nl);
			for (int i = 0; i < 4; i++)
				b[24 + i] = (uint8_t)(nl >> (8 * i));
			sd_prov_blob_seal(b, nl);
			e = kind ? CONNECT(b, nl) : IMPORT(b, nl);
			if (e != DOCA_ERROR_INVALID_VALUE && !bad++)
				CHECK(0, "%s with its body cut by %zu bytes (header fixed up, resealed): %s (%s)", k, cut,
				      ES(e), why.msg);
		}
		rule_begin(kind ? "blobs: address blob of another format version -> UNSUPPORTED_VERSION"
				: "blobs: rkey blob of another format version -> UNSUPPORTED_VERSION");
		for (int v = 0; v < 3; v++) {
			uint16_t ver = v == 0 ? 0 : v == 1 ? SD_PROV_BLOB_VERSION + 1 : 0xffff;

			memcpy(b, good, len);
			b[4] = (uint8_t)ver;
			b[5] = (uint8_t)(ver >> 8);
			sd_prov_blob_seal(b, (uint32_t)len);
			e = kind ? CONNECT(b, len) : IMPORT(b, len);
			CHECK(e == DOCA_ERROR_UNSUPPORTED_VERSION, "%s of format version %u: %s (%s)", k, ver, ES(e),
			      why.msg);
		}
	}
#undef IMPORT
#undef CONNECT
	/* the connection every bad blob was refused on: nothing happened to it */
	pump(&I_main, 20);
	CHECK(sx->nev == 0, "events (%d) on a connection whose conn_connect only ever failed", sx->nev);
	sx->closed = 1;
	P->conn_close(sc);
	free(ab);
}

static void rule_rma(void)
{
	static const size_t sizes[] = { 1, 8, 4097, 65536 + 7, (1u << 20) + 13 };
	int niovs[3] = { 1, 3, (int)(CAPS.max_iov < 16 ? CAPS.max_iov : 16) };

	rule_begin("write / read: multi-entry iov lists, bytes verified at the target and the initiator");
	for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
		for (int v = 0; v < 3; v++) {
			size_t n = sizes[si];
			int niov = niovs[v];
			uint32_t seed = (uint32_t)(si * 10 + (size_t)v + 1);
			struct sd_prov_iov iov[16];
			struct op *w = op_new(&I_main), *r = op_new(&I_main);
			uint64_t off;
			doca_error_t e;

			bufs_reset();
			off = toff(n);
			niov = iov_build(iov, niov, n, seed, (v + (int)si) % 2, 1);
			e = wait_op(w, sub(w, P->write(MC, iov, niov, RK, TBASE + off, w)) ? 0 : 10000);
			CHECK(e == DOCA_SUCCESS, "write %zu B in %d pieces: %s", n, niov, ES(e));
			CHECK(t_check(off, n, seed), "target memory after a %zu B write in %d pieces", n, niov);
			/* the target writes its own pattern; read it back into another list */
			t_fill(off, n, seed + 1000);
			niov = iov_build(iov, niovs[2 - v], n, 0, (v + (int)si + 1) % 2, 0);
			e = wait_op(r, sub(r, P->read(MC, iov, niov, RK, TBASE + off, r)) ? 0 : 10000);
			CHECK(e == DOCA_SUCCESS && iov_matches(iov, niov, seed + 1000), "read %zu B into %d pieces: %s%s",
			      n, niov, ES(e), e ? "" : " (bytes differ)");
		}
}

static void rule_atomics(void)
{
	uint64_t off = 64;
	struct op *o;
	doca_error_t e;

	rule_begin("atomics: fetch-add and compare-swap return the old value and update the target");
	t_set64(off, 40);
	o = op_new(&I_main);
	e = wait_op(o, sub(o, P->atomic_fadd(MC, RK, TBASE + off, 2, &o->result, o)) ? 0 : 10000);
	CHECK(e == DOCA_SUCCESS && o->result == 40, "fadd +2 on 40: %s, old %llu", ES(e), (unsigned long long)o->result);
	CHECK(t_get64(off) == 42, "target word after fadd: %llu", (unsigned long long)t_get64(off));
	o = op_new(&I_main);
	e = wait_op(o, sub(o, P->atomic_cswap(MC, RK, TBASE + off, 42, 7, &o->result, o)) ? 0 : 10000);
	CHECK(e == DOCA_SUCCESS && o->result == 42, "cswap 42->7 (hit): %s, old %llu", ES(e),
	      (unsigned long long)o->result);
	CHECK(t_get64(off) == 7, "target word after a cswap hit: %llu", (unsigned long long)t_get64(off));
	o = op_new(&I_main);
	e = wait_op(o, sub(o, P->atomic_cswap(MC, RK, TBASE + off, 42, 9, &o->result, o)) ? 0 : 10000);
	CHECK(e == DOCA_SUCCESS && o->result == 7, "cswap 42->9 (miss): %s, old %llu", ES(e),
	      (unsigned long long)o->result);
	CHECK(t_get64(off) == 7, "target word after a cswap miss: %llu", (unsigned long long)t_get64(off));
	t_set64(off + 8, UINT64_MAX - 1);
	o = op_new(&I_main);
	e = wait_op(o, sub(o, P->atomic_fadd(MC, RK, TBASE + off + 8, 3, &o->result, o)) ? 0 : 10000);
	CHECK(e == DOCA_SUCCESS && o->result == UINT64_MAX - 1, "fadd wrapping: %s, old %llu", ES(e),
	      (unsigned long long)o->result);
	CHECK(t_get64(off + 8) == 1, "target word after a wrapping fadd: %llu", (unsigned long long)t_get64(off + 8));
}

/* Submits that must be refused: nothing reported, nothing changed at the target. */
static void rule_refused(void)
{
	struct op *o[8];
	int n = 0;
	uint8_t src[64];
	struct sd_prov_iov iv = { src, sizeof(src), NULL };
	struct sd_prov_iov many[17];
	uint64_t off;
	doca_error_t e;

	rule_begin("an op that returns an error reports no completion and changes nothing remote");
	bufs_reset();
	off = toff(8192);
	t_fill(off, 8192, 77);
	t_set64(1024, 5);
	memset(src, 0xee, sizeof(src));
	o[n] = op_new(&I_main);
	e = sub(o[n], P->atomic_fadd(MC, RK, TBASE + 1024 + 4, 1, &o[n]->result, o[n]));
	CHECK(e != DOCA_SUCCESS, "fadd at an address not 8-byte aligned accepted");
	n++;
	o[n] = op_new(&I_main);
	e = sub(o[n], P->atomic_cswap(MC, RK, TBASE + 1024 + 1, 5, 6, &o[n]->result, o[n]));
	CHECK(e != DOCA_SUCCESS, "cswap at an address not 8-byte aligned accepted");
	n++;
	if (CAPS.max_iov < 17) {
		for (uint32_t i = 0; i <= CAPS.max_iov; i++)
			many[i] = (struct sd_prov_iov){ src + (i % 64), 1, NULL };
		o[n] = op_new(&I_main);
		e = sub(o[n], P->write(MC, many, (int)CAPS.max_iov + 1, RK, TBASE + off, o[n]));
		CHECK(e != DOCA_SUCCESS, "a write of max_iov + 1 = %u entries accepted", CAPS.max_iov + 1);
		n++;
	}
	if (CAPS.flags & SD_PROV_CAP_CHECK_REQUESTER) {
		o[n] = op_new(&I_main);
		e = sub(o[n], P->write(MC, &iv, 1, RK_RO, TBASE, o[n]));
		CHECK(e != DOCA_SUCCESS, "CHECK_REQUESTER: a write through a read-only key accepted");
		n++;
		o[n] = op_new(&I_main);
		e = sub(o[n], P->read(MC, &iv, 1, RK_RO, TBASE + 4096 - 32, o[n]));
		CHECK(e != DOCA_SUCCESS, "CHECK_REQUESTER: a read past the key's range accepted");
		n++;
		o[n] = op_new(&I_main);
		e = sub(o[n], P->write(MC, &iv, 1, RK, TBASE + TMEM - 8, o[n]));
		CHECK(e != DOCA_SUCCESS, "CHECK_REQUESTER: a write past the registration accepted");
		n++;
	} else {
		skip("refused: requester-side bounds and access", "no SD_PROV_CAP_CHECK_REQUESTER");
	}
	pump(&I_main, 100);
	for (int i = 0; i < n; i++)
		CHECK(!o[i]->refused || o[i]->done == 0, "refused op %d reported a completion", i);
	/* accepted by mistake: let them finish so the rest of the run is not disturbed */
	for (int i = 0; i < n; i++)
		if (o[i]->accepted)
			wait_op(o[i], 10000);
	CHECK(t_check(off, 8192, 77), "a refused write changed the target's memory");
	CHECK(t_get64(1024) == 5, "a refused atomic changed the target's word (%llu)", (unsigned long long)t_get64(1024));
}

static void rule_messages(void)
{
	static const size_t lens[] = { 1, 100, 4096, 65536, (1u << 20) + 5, 17, 3000, 0 };
	struct op *ops[32];
	int n = 0, from = nx;

	rule_begin("send / send-with-immediate / write-with-immediate: delivered in submission order, intact; "
		   "imm raw bytes in memory order; write_imm data visible at its rx, no payload");
	bufs_reset();
	for (int k = 0; k < (int)(sizeof(lens) / sizeof(lens[0])); k++) {
		ops[n++] = send_msg(lens[k], 1 + k % 3, k % 2, (uint32_t)(300 + k));
		if (k % 3 == 2) {
			size_t wl = k == 5 ? (1u << 20) + 3 : 64 + (size_t)k;

			ops[n++] = wimm_msg(toff(wl), wl, 1 + k % 2, (uint32_t)(400 + k));
		}
	}
	CHECK(wait_ops(ops, n, 15000), "message ops not complete after 15 s");
	for (int i = 0; i < n; i++)
		CHECK(ops[i]->st == DOCA_SUCCESS, "message op %d: %s", i, ES(ops[i]->st));
	verify_log(from, "messages");
}

/* "a send / ... / read / atomic is executed at the target after every write submitted before it" */
static void rule_order(void)
{
	static const size_t wl[] = { 1u << 20, 8, 65536, 3, 256u << 10, 4096, (1u << 20) + 13, 100 };
	enum { N = 8 };
	struct op *all[64];
	int na = 0, from = nx, at;
	uint64_t off[N];
	struct sd_prov_iov iov[16];
	int niov;

	rule_begin("order: a send after N writes is delivered with all N writes visible");
	bufs_reset();
	at = nx;
	for (int k = 0; k < N; k++) {
		off[k] = toff(wl[k]);
		t_expect(at, off[k], wl[k], (uint32_t)(500 + k));
	}
	for (int k = 0; k < N; k++) {
		struct op *w = op_new(&I_main);

		niov = iov_build(iov, 1 + k % 3, wl[k], (uint32_t)(500 + k), k % 2, 1);
		EXPECT_OK(sub(w, P->write(MC, iov, niov, RK, TBASE + off[k], w)), "write");
		all[na++] = w;
	}
	all[na++] = send_msg(33, 1, 1, 599);
	CHECK(wait_ops(all, na, 15000), "ops not complete after 15 s");
	verify_log(from, "a send after writes");

	rule_begin("order: a write-with-immediate after N writes: all N and its own data visible at its rx");
	bufs_reset();
	na = 0;
	from = at = nx;
	for (int k = 0; k < N; k++) {
		off[k] = toff(wl[k]);
		t_expect(at, off[k], wl[k], (uint32_t)(600 + k));
	}
	for (int k = 0; k < N; k++) {
		struct op *w = op_new(&I_main);

		niov = iov_build(iov, 1 + k % 3, wl[k], (uint32_t)(600 + k), k % 2, 1);
		EXPECT_OK(sub(w, P->write(MC, iov, niov, RK, TBASE + off[k], w)), "write");
		all[na++] = w;
	}
	all[na++] = wimm_msg(toff(4096), 4096, 2, 699);
	CHECK(wait_ops(all, na, 15000), "ops not complete after 15 s");
	verify_log(from, "a write-with-immediate after writes");

	rule_begin("order: reads and atomics submitted right behind writes see them");
	bufs_reset();
	na = 0;
	{
		struct sd_prov_iov riov[N][4];
		int rn[N];
		struct op *r[N], *fa, *cs;
		uint64_t woff = toff(64);
		uint64_t v = 1000;
		struct sd_prov_iov wv;

		for (int k = 0; k < N; k++) {
			struct op *w = op_new(&I_main);

			off[k] = toff(wl[k]);
			niov = iov_build(iov, 1 + k % 3, wl[k], (uint32_t)(700 + k), k % 2, 1);
			EXPECT_OK(sub(w, P->write(MC, iov, niov, RK, TBASE + off[k], w)), "write");
			all[na++] = w;
		}
		for (int k = 0; k < N; k++) {
			r[k] = op_new(&I_main);
			rn[k] = iov_build(riov[k], 2, wl[k], 0, 1, 0);
			EXPECT_OK(sub(r[k], P->read(MC, riov[k], rn[k], RK, TBASE + off[k], r[k])), "read");
			all[na++] = r[k];
		}
		/* an atomic right behind a write of the same word */
		memcpy(AR + ar_off, &v, 8);
		wv = (struct sd_prov_iov){ AR + ar_off, 8, NULL };
		ar_off += 64;
		all[na] = op_new(&I_main);
		EXPECT_OK(sub(all[na], P->write(MC, &wv, 1, RK, TBASE + woff, all[na])), "write");
		na++;
		fa = op_new(&I_main);
		EXPECT_OK(sub(fa, P->atomic_fadd(MC, RK, TBASE + woff, 1, &fa->result, fa)), "fadd");
		all[na++] = fa;
		cs = op_new(&I_main);
		EXPECT_OK(sub(cs, P->atomic_cswap(MC, RK, TBASE + woff, 1001, 5, &cs->result, cs)), "cswap");
		all[na++] = cs;
		CHECK(wait_ops(all, na, 15000), "ops not complete after 15 s");
		for (int k = 0; k < N; k++)
			CHECK(r[k]->st == DOCA_SUCCESS && iov_matches(riov[k], rn[k], (uint32_t)(700 + k)),
			      "a read right behind the writes did not see write %d (%zu B): %s", k, wl[k], ES(r[k]->st));
		CHECK(fa->st == DOCA_SUCCESS && fa->result == 1000, "fadd behind a write of its word: old %llu (%s)",
		      (unsigned long long)fa->result, ES(fa->st));
		CHECK(cs->st == DOCA_SUCCESS && cs->result == 1001, "cswap behind the fadd: old %llu (%s)",
		      (unsigned long long)cs->result, ES(cs->st));
		CHECK(t_get64(woff) == 5, "the word after write, fadd, cswap: %llu", (unsigned long long)t_get64(woff));
	}
}

static void rule_flush(void)
{
	enum { N = 6 };
	struct op *w[N + 1], *f;
	uint64_t off[N];
	size_t len[N] = { 1u << 20, 1u << 20, 8, 1u << 20, 65536, 1u << 20 };
	struct sd_prov_iov iov[16];
	int niov, later = 0;
	doca_error_t e;

	rule_begin("flush: completes after everything submitted before it (complete at the target)");
	bufs_reset();
	for (int k = 0; k < N; k++) {
		w[k] = op_new(&I_main);
		off[k] = toff(len[k]);
		niov = iov_build(iov, 1 + k % 2, len[k], (uint32_t)(800 + k), k % 2, 1);
		EXPECT_OK(sub(w[k], P->write(MC, iov, niov, RK, TBASE + off[k], w[k])), "write");
	}
	w[N] = send_msg(2000, 2, 0, 899);
	f = op_new(&I_main);
	e = wait_op(f, sub(f, P->flush(MC, f)) ? 0 : 15000);
	CHECK(e == DOCA_SUCCESS, "flush: %s", ES(e));
	for (int k = 0; k <= N; k++)
		later += !w[k]->done || w[k]->seq > f->seq;
	CHECK(later == 0, "flush reported before %d of the %d ops submitted before it", later, N + 1);
	for (int k = 0; k < N; k++)
		CHECK(t_check(off[k], len[k], (uint32_t)(800 + k)), "write %d not at the target when the flush completed",
		      k);
	wait_ops(w, N + 1, 10000);
	verify_log(nx - 1, "the send before the flush");
}

static void rule_hold(void)
{
	struct msg m = { .cmd = CMD_HOLDS, .id = L->tid, .n = 2 };
	int hold_at[4] = { nx, nx + 3, 0, 0 };
	struct op *ops[16];
	int n = 0, from = nx, holds;

	rule_begin("HOLD, then rx_resume: the held message and every later one offered again, in order; nothing "
		   "offered while held");
	bufs_reset();
	memcpy(m.priv[0], hold_at, sizeof(hold_at));
	tcmd(&m);
	ops[n++] = send_msg(50, 1, 1, 901);
	ops[n++] = send_msg((1u << 20) + 7, 2, 0, 902);
	ops[n++] = wimm_msg(toff(5000), 5000, 1, 903);
	ops[n++] = send_msg(200, 3, 1, 904);   /* held again */
	ops[n++] = send_msg((1u << 20) + 1, 1, 1, 905);
	ops[n++] = send_msg(7, 1, 0, 906);
	holds = verify_log(from, "held messages");
	CHECK(holds == 2, "the target held %d of 2 times", holds);
	CHECK(wait_ops(ops, n, 10000), "message ops not complete after 10 s");
	for (int i = 0; i < n; i++)
		CHECK(ops[i]->st == DOCA_SUCCESS, "message op %d: %s", i, ES(ops[i]->st));
}

static void rule_place(void)
{
	struct op *ops[16];
	int n = 0, from = nx;
	struct lane ln;

	rule_begin("PLACE: the payload lands in a multi-entry dst, rx_done once per answer, in order");
	bufs_reset();
	t_sched(nx, M_PLACE_ALL);
	ops[n++] = send_msg(1000, 2, 0, 1001);
	ops[n++] = send_msg((1u << 20) + 5, 3, 1, 1002);
	ops[n++] = send_msg(64, 1, 1, 1003);
	ops[n++] = send_msg(0, 1, 0, 1004);
	t_sched(nx, M_TAKE);
	CHECK(wait_ops(ops, n, 10000), "ops not complete after 10 s");
	verify_log(from, "PLACE");

	rule_begin("PLACE on a write-with-immediate (no payload): rx_done is still called (for every PLACE answer)");
	lane_open(&ln);
	n = 0;
	t_sched(0, M_PLACE_ALL);
	ops[n++] = wimm_msg(toff(128), 128, 1, 1005);
	ops[n++] = send_msg(10, 1, 0, 1006);
	CHECK(wait_ops(ops, n, 10000), "ops not complete after 10 s");
	verify_log(0, "PLACE on a write-with-immediate");
	lane_close(&ln);

	/* the header: "total room >= rx->len, else the message is dropped with rx_done(..., TOO_BIG)"; it says
	 * nothing of the sender's status nor of the connection afterwards: each on a connection of its own */
	for (int big = 0; big < 2; big++) {
		struct op *after;

		rule_begin(big ? "PLACE with room < len (a large message): rx_done(DOCA_ERROR_TOO_BIG), one op_done at the sender"
			       : "PLACE with room < len (a small message): rx_done(DOCA_ERROR_TOO_BIG), one op_done at the sender");
		lane_open(&ln);
		t_sched(0, M_PLACE_SHORT);
		t_sched(1, M_TAKE);
		ops[0] = send_msg(big ? (1u << 20) + 9 : 1000, 2, big, (uint32_t)(1011 + big));
		X[0].short_room = 1;
		CHECK(wait_ops(ops, 1, 10000), "the sender's op not complete after 10 s (exactly one op_done)");
		verify_log(0, "PLACE with too little room");
		/* not the header's: how each provider goes on (reported) */
		after = op_new(&I_main);
		{
			struct sd_prov_iov iv = { AR, 16, NULL };
			doca_error_t e = sub(after, P->send(MC, &iv, 1, NULL, after));

			if (!e)
				e = wait_op(after, 5000);
			printf("  dropped %s message: the sender's op %s; a send after it: %s\n", big ? "large" : "small",
			       ES(ops[0]->st), ES(e));
		}
		lane_close(&ln);
	}
}

static void rule_fd(void)
{
	struct msg m = { .cmd = CMD_ARMWAIT };
	struct op *o;
	int from = nx;

	if (!(CAPS.flags & SD_PROV_CAP_FD)) {
		skip("get_fd / arm: a peer's message wakes an armed instance", "no SD_PROV_CAP_FD");
		return;
	}
	rule_begin((CAPS.flags & SD_PROV_CAP_POLLED) ? "arm: the sleep bounded (SD_PROV_CAP_POLLED)"
						     : "get_fd / arm: a peer's message makes an armed instance's fd readable");
	bufs_reset();
	msend(S_sock, &m, sizeof(m));
	mrecv(&I_main, S_sock, &m, sizeof(m)); /* armed */
	CHECK(m.n == DOCA_SUCCESS, "the target's arm() never returned DOCA_SUCCESS (%s)", ES((doca_error_t)m.n));
	if (m.n) {
		return;
	}
	if (CAPS.flags & SD_PROV_CAP_POLLED)
		CHECK((int64_t)m.val >= 0, "POLLED: arm() gave no bound on the sleep (%lld)", (long long)(int64_t)m.val);
	pump(&I_main, 30);
	o = send_msg(40, 1, 0, 1101);
	mrecv(&I_main, S_sock, &m, sizeof(m));
	printf("  the target slept %llu ms on its fd (poll %lld, arm bound %lld ms)\n", (unsigned long long)m.val3,
	       (long long)(int64_t)m.val2, (long long)(int64_t)m.val);
	if (!(CAPS.flags & SD_PROV_CAP_POLLED))
		CHECK((int64_t)m.val2 == 1 && m.val3 < 2500, "the fd did not become readable for a peer's message "
		      "(poll %lld after %llu ms)", (long long)(int64_t)m.val2, (unsigned long long)m.val3);
	wait_op(o, 10000);
	verify_log(from, "the message that woke the target");
}

static int c_cx_est(void *a) { struct cctx *x = a; return x->est || x->terminal; }
static int c_cx_term(void *a) { struct cctx *x = a; return x->terminal; }

static void rule_cm(void)
{
	struct msg m = { .cmd = CMD_LISTEN };
	struct sockaddr_in sin;
	struct sd_prov_why why = {{0}};
	struct sd_prov_conn *c = NULL;
	struct cctx *x;
	uint32_t mp = CAPS.max_priv;
	uint8_t cpriv[256], spriv[256];
	doca_error_t e;
	int sid;

	if (!(CAPS.flags & SD_PROV_CAP_CM)) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(struct sockaddr_in);
		struct sd_prov_listener *l = NULL;

		rule_begin("CM without SD_PROV_CAP_CM: listen and connect_addr refused");
		memset(&ss, 0, sizeof(ss));
		ss.ss_family = AF_INET;
		x = cx_new(&I_main);
		e = P->listen(I_main.p, &ss, &sl, &LISTENER_TAG, &l, &why);
		CHECK(e != DOCA_SUCCESS, "listen accepted without SD_PROV_CAP_CM");
		if (!e)
			P->listener_close(l);
		e = P->connect_addr(I_main.p, (struct sockaddr *)&ss, sl, NULL, 0, x, &c, &why);
		CHECK(e != DOCA_SUCCESS, "connect_addr accepted without SD_PROV_CAP_CM");
		if (!e) {
			x->closed = 1;
			P->conn_close(c);
		}
		skip("CM listen / connect_addr / accept / reject", "no SD_PROV_CAP_CM");
		return;
	}
	for (uint32_t i = 0; i < 256; i++) {
		cpriv[i] = (uint8_t)(i * 3 + 1);
		spriv[i] = (uint8_t)(255 - i);
	}
	rule_begin("CM: listen (port written back), connect_addr / accept with private data both ways, data flows");
	tcmd(&m);
	CHECK(m.n == DOCA_SUCCESS && m.val != 0, "listen on 127.0.0.1:0: %s, port %llu (%s)", ES((doca_error_t)m.n),
	      (unsigned long long)m.val, (char *)m.priv[0]);
	if (m.n)
		return;
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sin.sin_port = htons((uint16_t)m.val);
	x = cx_new(&I_main);
	e = P->connect_addr(I_main.p, (struct sockaddr *)&sin, sizeof(sin), cpriv, mp, x, &c, &why);
	CHECK(e == DOCA_SUCCESS, "connect_addr with %u B of private data: %s %s", mp, ES(e), why.msg);
	if (e)
		return;
	x->c = c;
	if (wait_until(&I_main, c_cx_term, x, 300, -1) == 1) {
		CHECK(0, "the client's connection ended before the server answered: FAILED %d %s", x->failed, x->why);
		x->closed = 1;
		P->conn_close(c);
		return;
	}
	memset(&m, 0, sizeof(m));
	m.cmd = CMD_CM_ANSWER;
	m.seed = 1;
	m.plen[0] = mp;
	memcpy(m.priv[0], spriv, mp);
	m.plen[1] = mp;
	memcpy(m.priv[1], cpriv, mp);
	tcmd(&m);
	CHECK(m.val == 1, "the target got no conn_request within 5 s");
	sid = (int)m.id;
	if (m.val)
		CHECK(m.val2 == AF_INET, "conn_request's peer address family %lld", (long long)(int64_t)m.val2);
	wait_until(&I_main, c_cx_est, x, 10000, -1);
	CHECK(x->est == 1 && x->priv_len == mp && !memcmp(x->priv, spriv, mp),
	      "client ESTABLISHED %d with the acceptor's %u B of private data (got %zu B%s; failed %d %s)", x->est, mp,
	      x->priv_len, x->priv_len == mp && memcmp(x->priv, spriv, mp) ? ", different" : "", x->failed, x->why);
	m.cmd = CMD_CONNSTATE;
	m.id = (uint32_t)sid;
	m.n = 1;
	m.val = 0;
	tcmd(&m);
	CHECK(m.val == 1 && m.val3 == 0, "server ESTABLISHED %llu, FAILED %llu", (unsigned long long)m.val,
	      (unsigned long long)m.val3);
	if (x->est) {
		uint8_t b[300];
		struct sd_prov_iov iv = { b, sizeof(b), NULL };
		struct op *o = op_new(&I_main);
		struct rxrec log[MAXRX];

		fill(b, sizeof(b), 1201);
		e = wait_op(o, sub(o, P->send(c, &iv, 1, NULL, o)) ? 0 : 10000);
		CHECK(e == DOCA_SUCCESS, "a send client -> server: %s", ES(e));
		memset(&m, 0, sizeof(m));
		m.cmd = CMD_RXLOG;
		m.id = (uint32_t)sid;
		m.n = 1;
		tcmd(&m);
		mrecv(&I_main, S_sock, log, sizeof(log));
		CHECK(m.n == 1 && log[0].len == sizeof(b) && log[0].crc == pat_crc(sizeof(b), 1201),
		      "the server got %u messages", m.n);
		memset(&m, 0, sizeof(m));
		m.cmd = CMD_SEND;
		m.id = (uint32_t)sid;
		m.len = 5000;
		m.seed = 1202;
		tcmd(&m);
		CHECK(m.val == DOCA_SUCCESS, "a send server -> client: %s", ES((doca_error_t)m.val));
		for (uint64_t end = now_ms() + 5000; x->ndone < 1 && now_ms() < end;)
			pump(&I_main, 5);
		CHECK(x->nlog == 1 && x->log[0].len == 5000 && x->log[0].crc == pat_crc(5000, 1202),
		      "the client got %d messages", x->nlog);
	}
	rule_begin("CM: conn_close on one side -> DISCONNECTED on the other");
	x->closed = 1;
	P->conn_close(c);
	memset(&m, 0, sizeof(m));
	m.cmd = CMD_CONNSTATE;
	m.id = (uint32_t)sid;
	m.n = 2;
	tcmd(&m);
	CHECK(m.val2 == 1 && m.val3 == 0, "server after the client's close: DISCONNECTED %llu, FAILED %llu",
	      (unsigned long long)m.val2, (unsigned long long)m.val3);

	rule_begin("CM: reject -> the client gets REJECTED with the server's private data");
	x = cx_new(&I_main);
	c = NULL;
	e = P->connect_addr(I_main.p, (struct sockaddr *)&sin, sizeof(sin), "reject me", 9, x, &c, &why);
	CHECK(e == DOCA_SUCCESS, "connect_addr: %s %s", ES(e), why.msg);
	if (e)
		return;
	x->c = c;
	if (wait_until(&I_main, c_cx_term, x, 300, -1) == 1) {
		CHECK(0, "the client's connection ended before the server answered: FAILED %d %s", x->failed, x->why);
		x->closed = 1;
		P->conn_close(c);
		return;
	}
	memset(&m, 0, sizeof(m));
	m.cmd = CMD_CM_ANSWER;
	m.seed = 0;
	m.plen[0] = 4;
	memcpy(m.priv[0], "nope", 4);
	m.plen[1] = 9;
	memcpy(m.priv[1], "reject me", 9);
	tcmd(&m);
	CHECK(m.val == 1, "the target got no conn_request within 5 s");
	wait_until(&I_main, c_cx_term, x, 10000, -1);
	CHECK(x->rej == 1 && x->est == 0 && x->priv_len == 4 && !memcmp(x->priv, "nope", 4),
	      "client: REJECTED %d, ESTABLISHED %d, private data %zu B (failed %d: %s)", x->rej, x->est, x->priv_len,
	      x->failed, x->why);
	x->closed = 1;
	P->conn_close(c);
	pump(&I_main, 50); /* the server's connection: gone, no event (checked at the target) */
}

static void rule_revoke(void)
{
	struct msg m = { .cmd = CMD_NEWCONN };
	struct cctx *x;
	struct sd_prov_conn *c;
	uint8_t blob[8192], dst[64];
	size_t bl;
	struct sd_prov_rkey *rk = NULL;
	uint64_t base = 0;
	struct sd_prov_iov dv = { dst, sizeof(dst), NULL };
	struct op *o;
	doca_error_t e;
	uint64_t t0;

	if (!(CAPS.enforce & SD_PROV_ENF_REVOKE)) {
		skip("enforce REVOKE: after dereg_mem old keys are refused by the target", "no SD_PROV_ENF_REVOKE");
	} else {
		rule_begin("enforce REVOKE: after dereg_mem at the target, a read through the old key fails");
		msend(S_sock, &m, sizeof(m));
		mrecv(&I_main, S_sock, &m, sizeof(m));
		x = cx_new(&I_short);
		c = oob_connect(&I_short, S_sock, 1, x);
		memset(&m, 0, sizeof(m));
		m.cmd = CMD_REG_EXTRA;
		msend(S_sock, &m, sizeof(m));
		bl = mrecv(&I_main, S_sock, blob, sizeof(blob));
		e = P->rkey_import(I_short.p, blob, bl, &rk, &base, NULL, NULL, NULL);
		EXPECT_OK(e, "rkey_import");
		if (!e && x->est) {
			o = op_new(&I_short);
			EXPECT_OK(wait_op(o, sub(o, P->read(c, &dv, 1, rk, base, o)) ? 0 : 10000), "read before dereg_mem");
			memset(&m, 0, sizeof(m));
			m.cmd = CMD_DEREG_EXTRA;
			tcmd(&m);
			EXPECT_OK((doca_error_t)m.n, "the target's dereg_mem");
			o = op_new(&I_short);
			t0 = now_ms();
			e = wait_op(o, sub(o, P->read(c, &dv, 1, rk, base, o)) ? 0 : I_short.timeout_ms + 5000);
			printf("  a read through a revoked key: %s after %llu ms\n", ES(e),
			       (unsigned long long)(now_ms() - t0));
			CHECK(e != DOCA_SUCCESS && e != DOCA_ERROR_TIME_OUT, "a read after dereg_mem at the target: %s", ES(e));
		}
		if (rk)
			P->rkey_release(I_short.p, rk);
		x->closed = 1;
		P->conn_close(c);
	}
	if (CAPS.flags & SD_PROV_CAP_CHECK_REQUESTER)
		skip("enforce ACCESS / BOUNDS at the target", "SD_PROV_CAP_CHECK_REQUESTER refuses first (a test needs a "
		     "forged, provider-specific blob)");
	else if (!(CAPS.enforce & (SD_PROV_ENF_ACCESS | SD_PROV_ENF_BOUNDS)))
		skip("enforce ACCESS / BOUNDS", "neither the requester nor the target checks: the DOCA layer must");
	else
		skip("enforce ACCESS / BOUNDS at the target", "not written yet for requesters that do not check");
}

/* conn_close by the target: DISCONNECTED here (and nothing after). */
static void rule_peer_close(void)
{
	struct msg m = { .cmd = CMD_NEWCONN };
	struct cctx *x;
	int tid;

	rule_begin("conn_close -> the peer gets DISCONNECTED (its last message first)");
	msend(S_sock, &m, sizeof(m));
	mrecv(&I_main, S_sock, &m, sizeof(m));
	tid = (int)m.id;
	x = cx_new(&I_main);
	oob_connect(&I_main, S_sock, 1, x);
	CHECK(x->est == 1, "connection not established");
	memset(&m, 0, sizeof(m));
	m.cmd = CMD_SEND;
	m.id = (uint32_t)tid;
	m.len = 777;
	m.seed = 1301;
	msend(S_sock, &m, sizeof(m)); /* the target waits for its op; we must progress meanwhile */
	mrecv(&I_main, S_sock, &m, sizeof(m));
	memset(&m, 0, sizeof(m));
	m.cmd = CMD_CLOSE;
	m.id = (uint32_t)tid;
	tcmd(&m);
	wait_until(&I_main, c_cx_term, x, I_main.timeout_ms + 3000, -1);
	CHECK(x->disc == 1 && x->failed == 0, "after the peer's conn_close: DISCONNECTED %d, FAILED %d (%s)", x->disc,
	      x->failed, x->why);
	CHECK(x->nlog == 1 && x->disc_at == 1, "the message sent before the close arrived before DISCONNECTED "
	      "(%d messages, DISCONNECTED after %d)", x->nlog, x->disc_at);
	pump(&I_main, 30);
	x->closed = 1;
	P->conn_close(x->c); /* a connection the peer closed is still closed by its owner */
}

/* conn_close with ops outstanding: each completes once; the peer gets what was sent, then DISCONNECTED. */
static void rule_close_outstanding(void)
{
	struct op *ops[16];
	int n = 0, from = nx;
	struct sd_prov_iov iov[16];
	int niov;
	struct msg m;

	rule_begin("conn_close with ops outstanding: one op_done each; the peer gets what was sent, then "
		   "DISCONNECTED; closing() reaches 0");
	bufs_reset();
	for (int k = 0; k < 4; k++) {
		struct op *w = op_new(&I_main);

		niov = iov_build(iov, 2, 1u << 20, (uint32_t)(1400 + k), 1, 1);
		EXPECT_OK(sub(w, P->write(MC, iov, niov, RK, TBASE + toff(1u << 20), w)), "write");
		ops[n++] = w;
	}
	ops[n++] = send_msg(123, 1, 1, 1410);
	ops[n++] = send_msg((1u << 20) + 17, 1, 0, 1411);
	MX->closed = 1;
	P->conn_close(MC);
	{
		uint64_t t0 = now_ms(), tops = 0, tcl = 0;

		for (uint64_t end = t0 + I_main.timeout_ms + 5000; now_ms() < end && (!tops || !tcl);) {
			pump(&I_main, 5);
			if (!tops && c_ops(&(struct opset){ ops, n }))
				tops = now_ms() - t0 + 1;
			if (!tcl && P->closing(I_main.p) == 0)
				tcl = now_ms() - t0 + 1;
		}
		printf("  after conn_close: its ops done within %llu ms, closing() 0 within %llu ms\n",
		       (unsigned long long)tops, (unsigned long long)tcl);
	}
	for (int i = 0; i < n; i++)
		CHECK(!ops[i]->accepted || ops[i]->done == 1, "op %d outstanding at conn_close: %d op_done", i,
		      ops[i]->done);
	CHECK(P->closing(I_main.p) == 0, "closing() still %d after timeout_ms + 5 s", P->closing(I_main.p));
	printf("  ops outstanding at conn_close: writes %s %s %s %s, sends %s %s\n", ES(ops[0]->st), ES(ops[1]->st),
	       ES(ops[2]->st), ES(ops[3]->st), ES(ops[4]->st), ES(ops[5]->st));
	memset(&m, 0, sizeof(m));
	m.cmd = CMD_CONNSTATE;
	m.id = 0;
	m.n = 2;
	tcmd(&m);
	CHECK(m.val2 == 1 && m.val3 == 0, "the target after our conn_close: DISCONNECTED %llu, FAILED %llu",
	      (unsigned long long)m.val2, (unsigned long long)m.val3);
	{
		/* every send that completed with success reached the target before its DISCONNECTED */
		int delivered = (int)m.len - from, need = 0;

		for (int i = n - 2; i < n; i++)
			need = ops[i]->st == DOCA_SUCCESS ? i - (n - 2) + 1 : need;
		CHECK(delivered >= need && (int64_t)m.off == (int64_t)m.len,
		      "the target got %d of the sends (%d succeeded), DISCONNECTED after %lld messages", delivered, need,
		      (long long)(int64_t)m.off);
		nx = (int)m.len; /* what arrived is the log (checked below for what succeeded) */
		if (need)
			verify_log(from, "sends before conn_close");
	}
}

static void ghost(int sock)
{
	struct sd_prov_conn *c;
	struct cctx *x;
	void *b = NULL;
	size_t l = 0;

	child_begin(sock, "ghost");
	inst_open(&I_main, "ghost", 2000);
	x = cx_new(&I_main);
	P->conn_create(I_main.p, x, &c);
	P->conn_export(c, &b, &l);
	msend(sock, b, l);
	_exit(0); /* gone without closing anything */
}

static void rule_dead_address(int sock, pid_t pid)
{
	uint8_t blob[8192];
	size_t len;
	struct sd_prov_conn *c = NULL;
	struct cctx *x = cx_new(&I_short);
	struct sd_prov_why why = {{0}};
	doca_error_t e;
	uint64_t t0, took;

	rule_begin("a connection to an address whose process is gone: FAILED within timeout_ms (or refused at once)");
	if (write(sock, "g", 1) != 1)
		exit(1);
	len = mrecv(NULL, sock, blob, sizeof(blob));
	waitpid(pid, NULL, 0);
	close(sock);
	EXPECT_OK(P->conn_create(I_short.p, x, &c), "conn_create");
	x->c = c;
	t0 = now_ms();
	e = P->conn_connect(c, blob, len, &why);
	if (e == DOCA_SUCCESS)
		wait_until(&I_short, c_cx_term, x, I_short.timeout_ms + 5000, -1);
	took = now_ms() - t0;
	printf("  dead address: %s after %llu ms (%s)\n", e ? "refused at conn_connect" : x->failed ? "FAILED" : "nothing",
	       (unsigned long long)took, e ? why.msg : x->why);
	if (e == DOCA_SUCCESS) {
		CHECK(x->failed == 1 && x->est == 0, "FAILED %d, ESTABLISHED %d", x->failed, x->est);
		CHECK(took <= I_short.timeout_ms + 1500, "FAILED after %llu ms, timeout_ms %u", (unsigned long long)took,
		      I_short.timeout_ms);
	} else {
		pump(&I_short, 20);
		CHECK(x->nev == 0, "events after a conn_connect that returned an error");
	}
	x->closed = 1;
	P->conn_close(c);
}

static void victim(int sock)
{
	struct sd_prov_mr *mr;
	struct cctx *x;
	void *b = NULL;
	size_t l = 0;
	uint8_t *mem = aligned_alloc(4096, 4u << 20);

	child_begin(sock, "victim");
	inst_open(&I_main, "victim", 2000);
	x = cx_new(&I_main);
	oob_connect(&I_main, sock, 0, x);
	P->reg_mem(I_main.p, mem, 4u << 20, DOCA_ACCESS_FLAG_RDMA_WRITE | DOCA_ACCESS_FLAG_RDMA_READ |
		   DOCA_ACCESS_FLAG_RDMA_ATOMIC, &mr, &b, &l);
	msend(sock, b, l);
	for (int i = 0; i < 600; i++) /* serve until killed (at most a minute) */
		pump(&I_main, 100);
	_exit(0);
}

static void rule_peer_killed(int sock, pid_t pid)
{
	enum { NW = 24 };
	struct op *ops[NW + 8];
	int n = 0, after = 0, bad_after = 0, errs = 0;
	uint8_t blob[8192];
	size_t bl;
	struct sd_prov_rkey *rk = NULL;
	struct sd_prov_conn *c;
	struct cctx *x = cx_new(&I_short);
	uint64_t base = 0, t0, took;
	uint8_t *src = malloc(1u << 20);
	struct sd_prov_iov iv = { src, 1u << 20, NULL }, sv = { src, 100, NULL };

	rule_begin("peer killed mid-transfer: every outstanding op completes with an error, FAILED within "
		   "timeout_ms, nothing hangs");
	memset(src, 0x3c, 1u << 20);
	if (write(sock, "g", 1) != 1)
		exit(1);
	c = oob_connect(&I_short, sock, 1, x);
	bl = mrecv(&I_short, sock, blob, sizeof(blob));
	EXPECT_OK(P->rkey_import(I_short.p, blob, bl, &rk, &base, NULL, NULL, NULL), "rkey_import");
	if (!rk || !x->est) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return;
	}
	for (int k = 0; k < NW; k++) {
		ops[n] = op_new(&I_short);
		sub(ops[n], P->write(c, &iv, 1, rk, base + (uint64_t)(k % 4) * (1u << 20), ops[n]));
		n++;
		if (k == 3) {
			prog(&I_short);
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0); /* dead before anything more is submitted */
			after = n;
		}
	}
	ops[n] = op_new(&I_short);
	sub(ops[n], P->send(c, &sv, 1, NULL, ops[n]));
	n++;
	ops[n] = op_new(&I_short);
	sub(ops[n], P->read(c, &sv, 1, rk, base, ops[n]));
	n++;
	ops[n] = op_new(&I_short);
	sub(ops[n], P->atomic_fadd(c, rk, base, 1, &ops[n]->result, ops[n]));
	n++;
	ops[n] = op_new(&I_short);
	sub(ops[n], P->flush(c, ops[n]));
	n++;
	t0 = now_ms();
	for (uint64_t end = t0 + I_short.timeout_ms + 8000; now_ms() < end && !(c_ops(&(struct opset){ ops, n }) &&
										 x->terminal);)
		pump(&I_short, 5);
	took = now_ms() - t0;
	for (int i = 0; i < n; i++) {
		errs += ops[i]->refused || (ops[i]->done && ops[i]->st != DOCA_SUCCESS);
		if (i >= after)
			bad_after += !ops[i]->refused && !(ops[i]->done && ops[i]->st != DOCA_SUCCESS);
	}
	printf("  peer killed: %d ops, %d failed or refused; connection %s (%s) after %llu ms\n", n, errs,
	       x->failed ? "FAILED" : x->disc ? "DISCONNECTED" : "still up", x->why, (unsigned long long)took);
	CHECK(c_ops(&(struct opset){ ops, n }), "ops still outstanding %llu ms after the kill",
	      (unsigned long long)took);
	CHECK(bad_after == 0, "%d ops submitted after the peer died did not fail", bad_after);
	CHECK(x->failed || x->disc, "no FAILED / DISCONNECTED event");
	CHECK(took <= I_short.timeout_ms + 1500, "%llu ms, timeout_ms %u", (unsigned long long)took, I_short.timeout_ms);
	/* a failed connection refuses new ops or fails them */
	{
		struct op *o = op_new(&I_short);
		doca_error_t e = sub(o, P->write(c, &iv, 1, rk, base, o));

		if (!e)
			e = wait_op(o, 5000);
		CHECK(e != DOCA_SUCCESS && e != DOCA_ERROR_TIME_OUT, "a write on the failed connection: %s", ES(e));
	}
	P->rkey_release(I_short.p, rk);
	x->closed = 1;
	P->conn_close(c);
	for (uint64_t end = now_ms() + I_short.timeout_ms + 2000; P->closing(I_short.p) > 0 && now_ms() < end;)
		pump(&I_short, 5);
	CHECK(P->closing(I_short.p) == 0, "closing() %d after the dead peer's connection was closed",
	      P->closing(I_short.p));
	free(src);
}

static void rule_cm_nobody(void)
{
	struct sockaddr_in sin;
	struct sd_prov_conn *c = NULL;
	struct cctx *x = cx_new(&I_short);
	struct sd_prov_why why = {{0}};
	doca_error_t e;
	uint64_t t0, took;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	socklen_t sl = sizeof(sin);

	if (!(CAPS.flags & SD_PROV_CAP_CM))
		return;
	rule_begin("CM: connect_addr where nobody listens: FAILED within timeout_ms (or refused at once)");
	/* a port that was free a moment ago */
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sin, sizeof(sin)) || getsockname(fd, (struct sockaddr *)&sin, &sl))
		sin.sin_port = htons(1);
	if (fd >= 0)
		close(fd);
	t0 = now_ms();
	e = P->connect_addr(I_short.p, (struct sockaddr *)&sin, sizeof(sin), "x", 1, x, &c, &why);
	if (e == DOCA_SUCCESS) {
		x->c = c;
		wait_until(&I_short, c_cx_term, x, I_short.timeout_ms + 5000, -1);
	}
	took = now_ms() - t0;
	printf("  nobody listening: %s after %llu ms (%s)\n", e ? "refused at connect_addr" : x->failed ? "FAILED" :
	       "nothing", (unsigned long long)took, e ? why.msg : x->why);
	if (e == DOCA_SUCCESS) {
		CHECK(x->failed == 1 && x->est == 0, "FAILED %d, ESTABLISHED %d, REJECTED %d", x->failed, x->est, x->rej);
		CHECK(took <= I_short.timeout_ms + 1500, "FAILED after %llu ms, timeout_ms %u", (unsigned long long)took,
		      I_short.timeout_ms);
		x->closed = 1;
		P->conn_close(c);
	}
}

static void rule_close_in_use(void)
{
	doca_error_t e;
	struct sd_prov_caps k;

	rule_begin("close with an imported key and a registration left -> DOCA_ERROR_IN_USE, nothing freed");
	e = P->close(I_main.p);
	CHECK(e == DOCA_ERROR_IN_USE, "close with a key and a registration left: %s", ES(e));
	if (e == DOCA_SUCCESS)
		exit(1);
	prog(&I_main);
	P->query_caps(I_main.p, &k);
	P->rkey_release(I_main.p, RK);
	e = P->close(I_main.p);
	CHECK(e == DOCA_ERROR_IN_USE, "close with a key and a registration left, one key released: %s", ES(e));
	P->rkey_release(I_main.p, RK_RO);
	e = P->close(I_main.p);
	CHECK(e == DOCA_ERROR_IN_USE, "close with a registration left: %s", ES(e));
	EXPECT_OK(P->dereg_mem(I_main.p, AR_MR), "dereg_mem after refused closes");
	for (uint64_t end = now_ms() + 10000; P->closing(I_main.p) > 0 && now_ms() < end;)
		pump(&I_main, 5);
	EXPECT_OK(P->close(I_main.p), "close");
	EXPECT_OK(P->close(I_short.p), "close (the short instance)");
}

static void rule_one_completion(void)
{
	int missing = 0, twice = 0, refused = 0;

	rule_begin("exactly one op_done per accepted op, none per refused op; callbacks only inside progress()");
	for (int i = 0; i < nops; i++) {
		missing += OPS[i].accepted && OPS[i].done == 0;
		twice += OPS[i].done > 1;
		refused += OPS[i].refused && OPS[i].done;
	}
	CHECK(missing == 0 && twice == 0 && refused == 0, "of %d ops: %d accepted without op_done, %d with several, "
	      "%d refused with one", nops, missing, twice, refused);
	CHECK(cb_outside == 0, "%ld callbacks outside progress() of their instance", cb_outside);
}

int main(int argc, char **argv)
{
	struct sd_prov_why why = {{0}};
	int gs, vs, status = -1;
	pid_t tpid, gpid, vpid;
	doca_error_t e;
	uint64_t t0 = now_ms();

	who = "initiator";
	rule = "setup";
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 2) {
		fprintf(stderr, "usage: %s <provider>\n", argv[0]);
		return 2;
	}
	NAME = argv[1];
	P = sd_provider_find(NAME);
	if (!P) {
		printf("SKIP: provider %s not built in\n", NAME);
		return 77;
	}
	e = P->probe(&why);
	if (e) {
		printf("SKIP: provider %s cannot start here: %s: %s\n", NAME, ES(e), why.msg);
		return why.msg[0] ? 77 : 1; /* an error comes with a reason */
	}
	printf("conformance of provider %s (%s)\n", NAME, getenv("UCX_TLS") ? getenv("UCX_TLS") :
	       getenv("FI_PROVIDER") ? getenv("FI_PROVIDER") : "default transports");
	signal(SIGPIPE, SIG_IGN);
	/* every child before any instance exists in this process */
	if ((gpid = spawn(ghost, &gs)) < 0 || (vpid = spawn(victim, &vs)) < 0 || (tpid = spawn(target, &S_sock)) < 0)
		return 1;
	alarm(240);

	rule_ops_table();
	rule_open_close();
	inst_open(&I_main, "main", 5000);
	AR = aligned_alloc(4096, ARENA);
	memset(AR, 0, ARENA);
	rule_caps_before();
	{
		void *b = NULL;
		size_t l = 0;

		EXPECT_OK(P->reg_mem(I_main.p, AR, ARENA, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE, &AR_MR, &b, &l), "reg_mem");
		free(b);
	}
	rule_connect();
	target_alive = 1;
	rule_tfails0 = 0;
	rule_blobs();
	rule_rma();
	rule_atomics();
	rule_refused();
	rule_messages();
	rule_order();
	rule_flush();
	rule_hold();
	rule_place();
	rule_fd();
	rule_cm();
	inst_open(&I_short, "short", 2000); /* the failure cases: short deadlines */
	rule_revoke();
	rule_cm_nobody();
	rule_peer_close();
	rule_close_outstanding();
	rule_end();
	{
		struct msg m = { .cmd = CMD_QUIT };

		msend(S_sock, &m, sizeof(m));
		target_alive = 0;
		for (uint64_t end = now_ms() + 15000; waitpid(tpid, &status, WNOHANG) == 0 && now_ms() < end;)
			pump(&I_main, 10);
		rule = "target";
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "target exit status 0x%x (its FAIL lines above)",
		      status);
		if (!WIFEXITED(status)) {
			kill(tpid, SIGKILL);
			waitpid(tpid, NULL, 0);
		}
		if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
			rules_failed++;
		rule = "setup";
	}
	rule_dead_address(gs, gpid);
	rule_peer_killed(vs, vpid);
	rule_close_in_use();
	rule_one_completion();
	rule_end();
	printf("%s %s: %d rules ok, %d failed; skipped by caps: %s; %llu ms\n", argv[0], NAME, rules_ok, rules_failed,
	       skipped[0] ? skipped : "none", (unsigned long long)(now_ms() - t0));
	checks_summary(argv[0]);
	printf("%s: %s\n", argv[0], fails || rules_failed ? "FAILED" : "ok");
	return fails || rules_failed ? 1 : 0;
}
