/*
 * softdoca provider `ucx`, small writes as active messages. The design is described at the top of
 * ucx_provider.c.
 *
 * Where UCX has no RMA of its own (tcp; shared memory on memory a peer cannot map), UCX 1.13
 * emulates each put as an active message that the target answers with a completion of its own:
 * one message and one answer per write. A stream of small writes is then bound by per-message
 * costs (about 0.1 million writes/s over tcp here). So on such connections a write of up to
 * AMW_MAX_ONE bytes becomes an entry of a batch: the first write of an idle connection leaves at
 * once, later ones gather until the batch is full, the next progress round, or an operation that
 * must follow them, and at most AMW_INFLIGHT batches are unacknowledged (later ones wait, in order,
 * in the connection's queue: its writes are bounded by the DOCA tasks outstanding); the target applies a batch in its active-message callback, after checking
 * each entry against its own registrations (bounds and the write right: softdoca's checks back at
 * the target), and acknowledges cumulatively: over tcp once per progress round, over shared memory
 * (where an answer costs no system call) at once. A write completes when its
 * batch is acknowledged: its bytes are in the target's memory, as DOCA requires. Operations that
 * must follow writes (sends, immediates, reads, atomics, flushes) wait in the connection's gate for
 * the acknowledgement of every batch sent before them, as they wait for a flush after puts.
 * Over verbs (rc, dc, ud) puts are the NIC's and writes stay puts. SOFTDOCA_UCX_AM_WRITES=0 keeps
 * every write a put.
 *
 * Batch body: entries of { registration base u64, address u64, length u32, 0 u32, the bytes padded
 * to 8 } (little-endian). Acknowledgement: header seq = the last batch applied; imm = the status of
 * the first refused entry since the last acknowledgement (0: none), rsv = its index, body = its
 * batch (u64).
 */
#define _GNU_SOURCE
#include "ucx_internal.h"

#define AMW_MAX_ONE 1024u    /* writes up to this many bytes go as entries of a batch */
#define AMW_BATCH_MAX 8192u  /* body bytes of a batch (one eager message over tcp and shared memory) */
#define AMW_ENT 24u          /* an entry's fixed part */
#define AMW_INFLIGHT 32u     /* batches unacknowledged at most (the target tracks a window of 64) */

struct amw_batch {
	struct amw_batch *next;
	struct am_hdr h;
	size_t len;
	uint32_t n;
	uint8_t data[AMW_BATCH_MAX];
};

struct amw_ack {
	struct am_hdr h;
	uint8_t fseq[8];
	struct sd_prov *p;
	uint64_t conn;     /* the connection's id: it may be gone when UCX gives the request back */
};

static int verbs_transport(const char *t)
{
	char buf[64], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", t);
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		if (!strncmp(tok, "rc", 2) || !strncmp(tok, "dc", 2) || !strncmp(tok, "ud", 2))
			return 1;
	return 0;
}

int ux_amw_eligible(struct uconn *c, size_t total)
{
	if (total > AMW_MAX_ONE)
		return 0;
	if (!c->amw_ok) /* decided once the transport is known: 1 yes, 2 no */
		c->amw_ok = c->p->amw_env != 0 && c->transport[0] && !verbs_transport(c->transport) ? 1 : 2;
	return c->amw_ok == 1;
}

static void batch_sent(void *req, ucs_status_t s, void *user)
{
	(void)s;
	UX.request_free(req);
	free(user);
}

/* Fail the writes of batch seq (it could not leave). */
static void fail_batch(struct uconn *c, uint64_t seq, doca_error_t st)
{
	for (struct uop **pp = &c->amw_head, *prev = NULL; *pp;) {
		struct uop *o = *pp;

		if (o->amw_seq != seq) {
			prev = o;
			pp = &o->gnext;
			continue;
		}
		*pp = o->gnext;
		if (c->amw_tail == o)
			c->amw_tail = prev;
		o->gnext = NULL;
		o->status = st;
		ux_op_to_done(o);
	}
}

static int may_send(const struct uconn *c)
{
	return c->amw_sent - c->amw_acked < AMW_INFLIGHT;
}

/* Send the oldest batch not sent yet. */
static void send_one(struct uconn *c)
{
	struct amw_batch *b = c->wb;
	ucp_request_param_t rp;
	ucs_status_ptr_t r;

	c->wb = b->next;
	if (!c->wb) {
		c->wb_tail = NULL;
		c->p->amw_fill--;
	}
	c->amw_queued--;
	memset(&b->h, 0, sizeof(b->h));
	b->h.magic = AM_MAGIC;
	b->h.type = AM_WRITEV;
	b->h.dst = c->peer_id;
	b->h.src = c->id;
	b->h.uid = c->p->uid;
	b->h.seq = ++c->amw_sent;
	c->p->amw_batches++;
	c->p->amw_writes += b->n;
	memset(&rp, 0, sizeof(rp));
	rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
	rp.flags = UCP_AM_SEND_FLAG_EAGER;
	rp.cb.send = batch_sent;
	rp.user_data = b;
	r = c->ep ? UX.am_send_nbx(c->ep, SD_UCX_AM_ID, &b->h, sizeof(b->h), b->data, b->len, &rp)
		  : UCS_STATUS_PTR(UCS_ERR_NOT_CONNECTED);
	if (r == NULL || UCS_PTR_IS_ERR(r)) {
		if (r)
			fail_batch(c, b->h.seq, map_status(UCS_PTR_STATUS(r)));
		free(b);
	}
}

/* Send the batches not sent yet, as far as the window allows (the rest leave as acknowledgements come). */
void ux_amw_send(struct uconn *c)
{
	while (c->wb && may_send(c))
		send_one(c);
}

/* The connection closes: every batch not sent yet leaves now, whatever the window. */
void ux_amw_send_now(struct uconn *c)
{
	while (c->wb)
		send_one(c);
}

void ux_amw_send_all(struct sd_prov *p)
{
	for (struct uconn *c = p->conns; c && p->amw_fill; c = c->next)
		if (c->wb)
			ux_amw_send(c);
}

doca_error_t ux_amw_write(struct uconn *c, const struct sd_prov_iov *iov, int niov, struct sd_prov_rkey *rk,
			  uint64_t raddr, size_t total, void *op_ctx)
{
	size_t need = AMW_ENT + ((total + 7) & ~(size_t)7);
	struct amw_batch *b = c->wb_tail;
	struct uop *o;
	uint8_t *e;
	size_t off = 0;

	if (!b || b->len + need > AMW_BATCH_MAX) { /* a new batch (the full one leaves as the window allows) */
		b = malloc(sizeof(*b));
		if (!b)
			return DOCA_ERROR_NO_MEMORY;
		b->next = NULL;
		b->len = 0;
		b->n = 0;
		if (c->wb_tail)
			c->wb_tail->next = b;
		else {
			c->wb = b;
			c->p->amw_fill++;
		}
		c->wb_tail = b;
		c->amw_queued++;
	}
	o = ux_op_new(c->p, c, OP_WRITE, op_ctx);
	if (!o)
		return DOCA_ERROR_NO_MEMORY; /* an empty batch leaves empty: the target applies nothing */
	e = b->data + b->len;
	put64(e, rk->base);
	put64(e + 8, raddr);
	put32(e + 16, (uint32_t)total);
	put32(e + 20, 0);
	for (int i = 0; i < niov; i++) {
		memcpy(e + AMW_ENT + off, iov[i].addr, iov[i].len);
		off += iov[i].len;
	}
	memset(e + AMW_ENT + total, 0, need - AMW_ENT - total);
	b->len += need;
	o->amw_seq = c->amw_sent + c->amw_queued;
	o->amw_idx = b->n++;
	o->gnext = NULL;
	if (c->amw_tail)
		c->amw_tail->gnext = o;
	else
		c->amw_head = o;
	c->amw_tail = o;
	if (c->amw_acked == c->amw_sent)
		ux_amw_send(c); /* nothing in flight: no reason to wait */
	return DOCA_SUCCESS;
}

/* Whether a batch waits that may leave now (arm: progress first). */
int ux_amw_ready(struct sd_prov *p)
{
	for (struct uconn *c = p->conns; c && p->amw_fill; c = c->next)
		if (c->wb && may_send(c))
			return 1;
	return 0;
}

/* What the target applied: batches may arrive out of order (UCX orders no active messages across
 * lanes); amw_applied is the last of an unbroken run, amw_ooo the ones applied beyond it. */
static void mark_applied(struct uconn *c, uint64_t seq)
{
	uint64_t d;

	if (seq <= c->amw_applied)
		return;
	d = seq - c->amw_applied;
	if (d > 64)
		return; /* cannot happen: a requester keeps at most AMW_INFLIGHT unacknowledged */
	c->amw_ooo |= 1ull << (d - 1);
	while (c->amw_ooo & 1) {
		c->amw_ooo >>= 1;
		c->amw_applied++;
	}
}


/* The target's registration that the requester named (its base), if [addr, addr+len) lies in it
 * and it grants remote writes. */
static doca_error_t target_check(struct sd_prov *p, uint64_t base, uint64_t addr, uint64_t len)
{
	for (struct sd_prov_mr *mr = p->mrs; mr; mr = mr->next) {
		if ((uint64_t)(uintptr_t)mr->addr != base)
			continue;
		if (addr < base || addr - base > mr->len || len > mr->len - (addr - base))
			continue; /* another registration may start at the same base */
		return (mr->access & DOCA_ACCESS_FLAG_RDMA_WRITE) ? DOCA_SUCCESS : DOCA_ERROR_NOT_PERMITTED;
	}
	return DOCA_ERROR_NOT_PERMITTED;
}

static void refuse(struct uconn *c, uint64_t seq, uint32_t idx, doca_error_t st)
{
	if (c->amw_fail_st)
		return; /* the first since the last acknowledgement is reported */
	c->amw_fail_st = st;
	c->amw_fail_seq = seq;
	c->amw_fail_idx = idx;
}

/* A batched write's bytes into the target's registered memory: the NIC-side
 * copy of one-sided RDMA (softdoca/tsan.supp names it). */
__attribute__((noinline)) static void ux_amw_copy(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
}

static void apply(struct uconn *c, const struct am_hdr *h, const uint8_t *d, size_t len)
{
	size_t off = 0;

	for (uint32_t idx = 0; off < len; idx++) {
		uint64_t base, addr;
		uint32_t n;
		size_t need;

		if (len - off < AMW_ENT) {
			refuse(c, h->seq, idx, DOCA_ERROR_INVALID_VALUE);
			return;
		}
		base = get64(d + off);
		addr = get64(d + off + 8);
		n = get32(d + off + 16);
		need = AMW_ENT + (((size_t)n + 7) & ~(size_t)7);
		if (n > AMW_MAX_ONE || need > len - off) {
			refuse(c, h->seq, idx, DOCA_ERROR_INVALID_VALUE);
			return;
		}
		if (target_check(c->p, base, addr, n) == DOCA_SUCCESS)
			ux_amw_copy((void *)(uintptr_t)addr, d + off + AMW_ENT, n);
		else
			refuse(c, h->seq, idx, DOCA_ERROR_NOT_PERMITTED);
		off += need;
	}
}

static void send_ack(struct uconn *c);

static void acked(struct uconn *c, const struct am_hdr *h, const void *data, size_t len)
{
	if (h->imm && len >= 8) { /* a refused entry: its write fails */
		uint64_t fseq = get64(data);

		for (struct uop *o = c->amw_head; o; o = o->gnext)
			if (o->amw_seq == fseq && o->amw_idx == h->rsv) {
				o->status = h->imm == DOCA_ERROR_INVALID_VALUE ? DOCA_ERROR_INVALID_VALUE
									     : DOCA_ERROR_NOT_PERMITTED;
				break;
			}
	}
	if (h->seq > c->amw_acked && h->seq <= c->amw_sent)
		c->amw_acked = h->seq;
	while (c->amw_head && c->amw_head->amw_seq <= c->amw_acked) {
		struct uop *o = c->amw_head;

		c->amw_head = o->gnext;
		if (!c->amw_head)
			c->amw_tail = NULL;
		o->gnext = NULL;
		ux_op_to_done(o);
	}
	ux_conn_kick(c); /* the gate may move */
}

/* A batch (target) or an acknowledgement (requester) arrived, in the AM callback. */
void ux_amw_on_msg(struct uconn *c, const struct am_hdr *h, const void *data, size_t len)
{
	if (h->type == AM_WACK) {
		acked(c, h, data, len);
		return;
	}
	apply(c, h, data, len);
	mark_applied(c, h->seq);
	c->amw_ack_due = 1;
	if (c->same_host) /* shared memory: an answer costs no system call, and now saves the peer ~1 us */
		send_ack(c);
	else              /* tcp: one answer per progress round for what arrived in it */
		ux_conn_kick(c);
}

static void ack_sent(void *req, ucs_status_t s, void *user)
{
	struct amw_ack *a = user;
	struct uconn *c = ux_conn_lookup(a->p, a->conn);

	(void)s;
	UX.request_free(req);
	if (c) {
		c->amw_ack_inflight = 0;
		if (c->amw_ack_due)
			ux_conn_kick(c); /* what arrived meanwhile: acknowledged by the next round */
	}
	free(a);
}

static void send_ack(struct uconn *c)
{
	struct amw_ack *a;
	ucp_request_param_t rp;
	ucs_status_ptr_t r;

	if (!c->amw_ack_due || !c->ep || c->amw_ack_inflight)
		return; /* one acknowledgement in UCX's hands at a time: a peer that reads none costs one */
	a = calloc(1, sizeof(*a));
	if (!a)
		return; /* again at the next round */
	c->amw_ack_due = 0;
	a->h.magic = AM_MAGIC;
	a->h.type = AM_WACK;
	a->h.dst = c->peer_id;
	a->h.src = c->id;
	a->h.uid = c->p->uid;
	a->h.seq = c->amw_applied;
	a->h.imm = (uint32_t)c->amw_fail_st;
	a->h.rsv = c->amw_fail_idx;
	put64(a->fseq, c->amw_fail_seq);
	c->amw_fail_st = DOCA_SUCCESS;
	a->p = c->p;
	a->conn = c->id;
	memset(&rp, 0, sizeof(rp));
	rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
	rp.flags = UCP_AM_SEND_FLAG_EAGER;
	rp.cb.send = ack_sent;
	rp.user_data = a;
	r = UX.am_send_nbx(c->ep, SD_UCX_AM_ID, &a->h, sizeof(a->h), a->fseq, sizeof(a->fseq), &rp);
	if (r == NULL || UCS_PTR_IS_ERR(r))
		free(a);
	else
		c->amw_ack_inflight = 1;
}

/* Once per progress round: a batch that waited for the window leaves; the target acknowledges
 * every batch applied so far, once. */
void ux_amw_pump(struct uconn *c)
{
	if (c->wb)
		ux_amw_send(c);
	send_ack(c);
}

/* The connection failed or is freed: the batch being filled goes (its writes fail with the
 * connection's other operations). */
void ux_amw_drop(struct uconn *c)
{
	if (c->wb)
		c->p->amw_fill--;
	while (c->wb) {
		struct amw_batch *b = c->wb;

		c->wb = b->next;
		free(b);
	}
	c->wb_tail = NULL;
	c->amw_queued = 0;
	c->amw_head = c->amw_tail = NULL;
}
