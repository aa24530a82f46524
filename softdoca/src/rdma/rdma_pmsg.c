/*
 * softdoca RDMA: the receiving half of two-sided messages through a provider
 * (the protocol is described in rdma_pmsg.h). A message lands in the posted
 * receive at the head of the context's queue, or is parked in order on its
 * connection until receives are posted or the sender's RNR budget runs out;
 * every receive it fills is acknowledged to the sender. A large message (one
 * the provider must still fetch) is fetched into a buffer of its own first
 * and handed to a receive from there, so nothing the provider writes can land
 * in a receive that failed in the meantime (the receive it found posted is set
 * aside for it meanwhile: a later message of another connection does not take
 * it). What is parked or being fetched is
 * charged to the process's park allowance (sd_link_park_limit, shared with the
 * native links): past it, a connection may park only its share, and a message
 * beyond that gets the RNR verdict at once. Engine lock held everywhere.
 */
#include "rdma_pmsg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sd_pm_park {
	struct sd_pm_park *next;
	struct sd_pm_hdr h;
	uint8_t *buf;
	size_t len;
	uint64_t arrived_ns;
};

struct sd_pm_place { /* a large message being fetched into buf */
	struct doca_rdma_connection *c; /* referenced; NULL once the connection ended */
	uint8_t hdr[SD_PM_HDR];
	uint32_t seq;
	uint8_t *buf;
	size_t len;
	struct sd_rtask *t; /* the receive it found posted: off the queue while it is fetched */
	size_t reserved;    /* len when it had one (pm_reserved) */
	uint64_t arrived_ns;
};

struct sd_pm_ack {
	struct sd_pm_ack *next;
	struct sd_pm_hdr h;
};

static struct doca_rdma_connection *active; /* connections with parks or acknowledgements due */
/* Of what is charged to the park allowance, the buffers of messages being
 * fetched for a receive they found posted: bounded by the application's
 * receives, so they count in park_bytes but do not make others' parks refused. */
static size_t pm_reserved;

/* What one connection may park here: SD_PM_WINDOW, the senders' window;
 * SOFTDOCA_PROVIDER_RX_WINDOW lowers it (tests: a sender beyond it is broken off). */
static uint32_t rx_window(void)
{
	static uint32_t w;

	if (!w) {
		const char *e = getenv("SOFTDOCA_PROVIDER_RX_WINDOW");
		unsigned long v = e && *e ? strtoul(e, NULL, 10) : SD_PM_WINDOW;

		w = v >= 1 && v <= SD_PM_WINDOW ? (uint32_t)v : SD_PM_WINDOW;
	}
	return w;
}

void sd_pm_encode(const struct sd_pm_hdr *h, uint8_t out[SD_PM_HDR])
{
	out[0] = h->type;
	out[1] = h->flags;
	out[2] = (uint8_t)h->status;
	out[3] = (uint8_t)(h->status >> 8);
	sd_put_le32(out + 4, h->seq);
	memcpy(out + 8, &h->imm, 4);
	sd_put_le32(out + 12, 0);
	sd_put_le64(out + 16, h->info);
}

void sd_pm_decode(const uint8_t in[SD_PM_HDR], struct sd_pm_hdr *h)
{
	h->type = in[0];
	h->flags = in[1];
	h->status = (uint16_t)(in[2] | in[3] << 8);
	h->seq = sd_get_le32(in + 4);
	memcpy(&h->imm, in + 8, 4);
	h->info = sd_get_le64(in + 16);
}

/* A receive taken for a message that did not come goes back to the head of its queue. */
static void unreserve(struct doca_rdma *rdma, struct sd_rtask *t)
{
	t->qnext = rdma->rq_head;
	rdma->rq_head = t;
	if (!rdma->rq_tail)
		rdma->rq_tail = t;
}

static void watch(struct doca_rdma_connection *c)
{
	if (c->pm_listed)
		return;
	c->pm_listed = 1;
	sd_conn_ref(c);
	c->pm_next = active;
	active = c;
}

static void ack(struct doca_rdma_connection *c, uint32_t seq, doca_error_t status, uint64_t info)
{
	struct sd_pm_ack *a = c->pm_acks_tail;

	if (a && !a->h.status && !status) { /* successes are cumulative: one answer covers them */
		a->h.seq = seq;
		return;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return; /* the sender's deadline fails the task (and the connection) */
	a->h.type = SD_PM_ACK;
	a->h.status = (uint16_t)status;
	a->h.seq = seq;
	a->h.info = info;
	if (c->pm_acks_tail)
		c->pm_acks_tail->next = a;
	else
		c->pm_acks = a;
	c->pm_acks_tail = a;
	watch(c);
}

static void result(struct sd_rtask *t, struct doca_rdma_connection *c, const struct sd_pm_hdr *h, uint64_t len)
{
	if (h->type == SD_PM_WIMM)
		t->res_opcode = DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM;
	else if (h->flags & SD_PM_F_IMM)
		t->res_opcode = DOCA_RDMA_OPCODE_RECV_SEND_WITH_IMM;
	else
		t->res_opcode = DOCA_RDMA_OPCODE_RECV_SEND;
	t->res_len = (uint32_t)len;
	memcpy(&t->res_imm, &h->imm, 4);
	if (t->res_conn != c) { /* the receive keeps its result connection allocated */
		sd_conn_ref(c);
		sd_conn_unref(t->res_conn);
		t->res_conn = c;
	}
}

/* Hand one message (h; payload p/len) to the posted receive t; acknowledged first. */
static void fill(struct sd_rtask *t, struct doca_rdma_connection *c, const struct sd_pm_hdr *h, const uint8_t *p,
		 size_t len)
{
	uint64_t cap = 0, off = 0;
	int n;

	if (h->type == SD_PM_WIMM) {
		result(t, c, h, h->info);
		ack(c, h->seq, DOCA_SUCCESS, 0);
		sd_rtask_complete(t, DOCA_SUCCESS);
		return;
	}
	n = t->dst ? sd_buf_tail(t->dst, t->iov, t->iov_cap, &cap) : 0;
	if (n < 0 || len > cap) {
		ack(c, h->seq, DOCA_ERROR_TOO_BIG, cap);
		sd_rtask_fail(t, DOCA_ERROR_TOO_BIG, "the posted receive has room for %llu bytes, the peer sent %zu bytes",
			      (unsigned long long)cap, len);
		return;
	}
	for (int i = 0; i < n && off < len; i++) {
		size_t k = t->iov[i].iov_len < len - off ? t->iov[i].iov_len : len - off;

		memcpy(t->iov[i].iov_base, p + off, k);
		off += k;
	}
	if (len)
		sd_buf_tail_commit(t->dst, len);
	result(t, c, h, len);
	ack(c, h->seq, DOCA_SUCCESS, 0);
	sd_rtask_complete(t, DOCA_SUCCESS);
}

static void park_free_all(struct doca_rdma_connection *c)
{
	while (c->pm_park_head) {
		struct sd_pm_park *k = c->pm_park_head;

		c->pm_park_head = k->next;
		c->rdma->lg.nparked--;
		sd_link_park_credit(k->len);
		free(k->buf);
		free(k);
	}
	c->pm_park_tail = NULL;
	c->pm_parked = 0;
	c->pm_parked_bytes = 0;
}

/* Park k, which arrived at arrived_ns (receives go to the oldest first). */
static void park(struct doca_rdma_connection *c, struct sd_pm_park *k, uint64_t arrived_ns)
{
	k->arrived_ns = arrived_ns;
	if (c->pm_park_tail)
		c->pm_park_tail->next = k;
	else {
		c->pm_park_head = k;
		c->pm_park_ns = k->arrived_ns;
	}
	c->pm_park_tail = k;
	c->rdma->lg.nparked++;
	watch(c);
}

#define NO_RECEIVE "no receive was posted here within the sender's budget"

/* May c park len more bytes? Within the process's allowance, yes; past it, only
 * within its share: the allowance over the connections parking (c included),
 * between SD_CTRLQ_SHARE_MIN and SD_CTRLQ_SHARE, as for answers nobody reads,
 * and never past twice the allowance. Many peers that send while nothing is
 * posted hold no more than that, and a peer parking little is not refused for
 * the others (until twice the allowance). */
static int park_room(struct doca_rdma_connection *c, size_t len)
{
	size_t lim = sd_link_park_limit(), share, n = 1, held = c->pm_parked_bytes;
	size_t all = sd_link_park_bytes() - pm_reserved;

	if (all + len <= lim)
		return 1;
	if (all + len > 2 * lim)
		return 0;
	for (struct doca_rdma_connection *o = active; o; o = o->pm_next)
		if (o != c && (o->pm_park_head || o->pm_placing))
			n++;
	share = lim / n;
	share = share < SD_CTRLQ_SHARE_MIN ? SD_CTRLQ_SHARE_MIN : share > SD_CTRLQ_SHARE ? SD_CTRLQ_SHARE : share;
	if (c->pm_placing)
		held += c->pm_placing->len;
	return held + len <= share;
}

/* The budget is spent, or there is none (RNR retry count 0), or the message is
 * larger than anything parked, or the process's allowance is spent: the
 * sender's task fails with TIME_OUT (the oldest parked one's, if any: the
 * parked ones are dropped, and a verdict on a later message would tell the
 * sender they arrived) and the sender breaks the connection; nothing more of
 * this connection is taken. */
static void rnr_verdict(struct doca_rdma_connection *c, uint32_t seq, const char *why)
{
	char text[256];

	SD_WARN("rdma: connection %u: %s (the sender's RNR budget: %u ms)", c->id, why, c->peer_budget_ms);
	snprintf(text, sizeof(text), "RNR retry exceeded: %s", why);
	sd_conn_set_why(c, text);
	if (c->pm_park_head) /* the verdict is the oldest's: an answer covers every message before it */
		seq = c->pm_park_head->h.seq;
	ack(c, seq, DOCA_ERROR_TIME_OUT, 0);
	park_free_all(c);
	c->pm_dead = 1;
}

/* The connection of rdma whose parked message came first (NULL: none). */
static struct doca_rdma_connection *oldest(struct doca_rdma *rdma)
{
	struct doca_rdma_connection *best = NULL;

	for (struct doca_rdma_connection *c = active; c; c = c->pm_next)
		if (c->rdma == rdma && c->pm_park_head &&
		    (!best || c->pm_park_head->arrived_ns < best->pm_park_head->arrived_ns))
			best = c;
	return best;
}

uint64_t sd_pm_oldest_ns(struct doca_rdma *rdma)
{
	struct doca_rdma_connection *c = oldest(rdma);

	return c ? c->pm_park_head->arrived_ns : 0;
}

void sd_pm_deliver(struct doca_rdma *rdma)
{
	while (rdma->rq_head && sd_pm_deliver_one(rdma))
		;
}

int sd_pm_deliver_one(struct doca_rdma *rdma)
{
	struct doca_rdma_connection *best = rdma->rq_head ? oldest(rdma) : NULL;
	struct sd_pm_park *k;

	if (!best)
		return 0;
	k = best->pm_park_head;
	best->pm_park_head = k->next;
	if (!best->pm_park_head)
		best->pm_park_tail = NULL;
	best->pm_parked--;
	best->pm_parked_bytes -= k->len;
	best->pm_park_ns = sd_now_ns();
	rdma->lg.nparked--;
	fill(sd_rdma_pop_recv(rdma), best, &k->h, k->buf, k->len);
	sd_link_park_credit(k->len);
	free(k->buf);
	free(k);
	return 1;
}

enum sd_prov_rx_answer sd_pm_rx(struct doca_rdma_connection *c, const struct sd_pm_hdr *h,
				const struct sd_prov_rx *rx, struct sd_prov_iov *dst, int *ndst, void **rx_ctx, int *brk)
{
	struct doca_rdma *rdma = c->rdma;
	size_t len;
	uint32_t seq;
	struct sd_pm_park *k;
	int reserve = 0;

	*ndst = 0;
	*brk = 0;
	if (rx->kind != SD_PROV_RX_SEND || rx->len < SD_PM_HDR ||
	    (h && ((h->type != SD_PM_SEND && h->type != SD_PM_WIMM) || h->seq != c->pm_rx_seq ||
		   (h->type == SD_PM_WIMM && rx->len != SD_PM_HDR)))) {
		sd_conn_set_why(c, "the peer sent a malformed provider message");
		*brk = 1;
		return SD_PROV_RX_TAKEN;
	}
	len = rx->len - SD_PM_HDR;
	seq = c->pm_rx_seq++;
	if (c->pm_dead)
		return SD_PROV_RX_TAKEN;
	if (rdma->lg.nparked && rdma->rq_head) /* receives posted since: what came before takes them first */
		sd_wire_deliver_parked(rdma);
	if (!c->pm_park_head && rdma->rq_head) {
		if (h) { /* the common case: straight into the receive */
			fill(sd_rdma_pop_recv(rdma), c, h, (const uint8_t *)rx->data + SD_PM_HDR, len);
			return SD_PROV_RX_TAKEN;
		}
		/* large, with a receive posted: bounded by that receive's room */
		uint64_t cap = 0;
		struct sd_rtask *t = rdma->rq_head;
		int n = t->dst ? sd_buf_tail(t->dst, t->iov, t->iov_cap, &cap) : 0;

		if (n < 0 || len > cap) {
			struct sd_pm_hdr hh = {.type = SD_PM_SEND, .seq = seq};

			fill(sd_rdma_pop_recv(rdma), c, &hh, NULL, len); /* TOO_BIG, both sides */
			return SD_PROV_RX_TAKEN;
		}
		reserve = 1; /* it is this message's: no later one (of another connection) takes it meanwhile */
	} else {
		if (c->pm_parked + (c->pm_placing ? 1 : 0) >= rx_window() ||
		    (c->pm_parked && c->pm_parked_bytes + len > SD_RDMA_MAX_PARK)) {
			sd_conn_set_why(c, "the peer sent more messages than the receive window holds");
			*brk = 1;
			return SD_PROV_RX_TAKEN;
		}
		if (len > SD_RDMA_MAX_PARK || (!rdma->rq_head && c->peer_budget_ms == 0)) {
			rnr_verdict(c, seq, NO_RECEIVE); /* too large to park, or no budget: as the native link */
			return SD_PROV_RX_TAKEN;
		}
		if (!park_room(c, len)) {
			rnr_verdict(c, seq, "no receive posted, and the process's park allowance is spent "
					    "(SOFTDOCA_PARK_MAX_MB) with this connection holding its share");
			return SD_PROV_RX_TAKEN;
		}
	}
	if (!h) { /* large: fetched into a buffer of its own, then handed on */
		struct sd_pm_place *pl = calloc(1, sizeof(*pl));

		if (pl)
			pl->buf = len ? malloc(len) : NULL;
		if (!pl || (len && !pl->buf)) {
			free(pl);
			sd_conn_set_why(c, "no memory for an incoming message");
			*brk = 1;
			return SD_PROV_RX_TAKEN;
		}
		sd_link_park_charge(len);
		sd_conn_ref(c);
		pl->c = c;
		pl->seq = seq;
		pl->len = len;
		pl->t = reserve ? sd_rdma_pop_recv(rdma) : NULL;
		pl->reserved = reserve ? len : 0;
		pl->arrived_ns = sd_now_ns();
		pm_reserved += pl->reserved;
		dst[0] = (struct sd_prov_iov){.addr = pl->hdr, .len = SD_PM_HDR};
		dst[1] = (struct sd_prov_iov){.addr = pl->buf, .len = len};
		*ndst = 2;
		*rx_ctx = pl;
		c->pm_placing = pl;
		return SD_PROV_RX_PLACE;
	}
	k = calloc(1, sizeof(*k));
	if (k)
		k->buf = len ? malloc(len) : NULL;
	if (!k || (len && !k->buf)) {
		free(k);
		sd_conn_set_why(c, "no memory for an incoming message");
		*brk = 1;
		return SD_PROV_RX_TAKEN;
	}
	k->h = *h;
	k->len = len;
	sd_link_park_charge(len);
	if (len)
		memcpy(k->buf, (const uint8_t *)rx->data + SD_PM_HDR, len);
	c->pm_parked++;
	c->pm_parked_bytes += len;
	park(c, k, sd_now_ns());
	if (rdma->rq_head)
		sd_pm_deliver(rdma);
	return SD_PROV_RX_TAKEN;
}

struct doca_rdma_connection *sd_pm_rx_done(void *rx_ctx, doca_error_t status, size_t len)
{
	struct sd_pm_place *pl = rx_ctx;
	struct doca_rdma_connection *c = pl->c, *brk = NULL;
	struct sd_pm_hdr h;
	struct sd_pm_park *k;

	if (!c) { /* its connection ended (and may be gone): dropped */
		sd_link_park_credit(pl->len);
		pm_reserved -= pl->reserved;
		free(pl->buf);
		free(pl);
		return NULL;
	}
	if (c->pm_placing == pl)
		c->pm_placing = NULL;
	sd_pm_decode(pl->hdr, &h);
	if (c->pm_dead) {
		/* dropped */
	} else if (status != DOCA_SUCCESS || len != pl->len + SD_PM_HDR || h.type != SD_PM_SEND || h.seq != pl->seq) {
		sd_conn_set_why(c, status != DOCA_SUCCESS ? "an incoming message failed to arrive"
							  : "the peer sent a malformed provider message");
		brk = c;
	} else if (pl->t) {
		fill(pl->t, c, &h, pl->buf, pl->len);
		pl->t = NULL;
	} else if ((k = calloc(1, sizeof(*k))) != NULL) {
		k->h = h;
		k->buf = pl->buf;
		k->len = pl->len;
		pl->buf = NULL;
		c->pm_parked++;
		c->pm_parked_bytes += k->len;
		park(c, k, pl->arrived_ns); /* when it came, not when its fetch ended */
		if (c->rdma->rq_head)
			sd_pm_deliver(c->rdma);
	} else {
		sd_conn_set_why(c, "no memory for an incoming message");
		brk = c;
	}
	if (pl->t) /* not filled: posted again, first */
		unreserve(c->rdma, pl->t);
	if (pl->buf) /* not handed on as a park */
		sd_link_park_credit(pl->len);
	pm_reserved -= pl->reserved;
	free(pl->buf);
	free(pl);
	if (brk)
		return brk; /* the caller breaks it, then drops the reference */
	sd_conn_unref(c);
	return NULL;
}

int sd_pm_ack_next(struct doca_rdma_connection **c_out, uint8_t out[SD_PM_HDR])
{
	for (struct doca_rdma_connection *c = active; c; c = c->pm_next) {
		struct sd_pm_ack *a = c->pm_acks;

		if (!a)
			continue;
		c->pm_acks = a->next;
		if (!c->pm_acks)
			c->pm_acks_tail = NULL;
		sd_pm_encode(&a->h, out);
		free(a);
		*c_out = c;
		return 1;
	}
	return 0;
}

uint64_t sd_pm_timers(uint64_t now)
{
	uint64_t next = 0, T = sd_eng_timeout_ns();

	for (struct doca_rdma_connection **pp = &active; *pp;) {
		struct doca_rdma_connection *c = *pp;

		if (c->pm_park_head) {
			uint64_t budget = (uint64_t)c->peer_budget_ms * 1000000ull, due;

			if (budget > T)
				budget = T;
			due = c->pm_park_ns + budget;
			if (now >= due)
				rnr_verdict(c, c->pm_park_head->h.seq, NO_RECEIVE);
			else if (!next || due < next)
				next = due;
		}
		if (c->pm_park_head || c->pm_acks || c->pm_placing) {
			pp = &c->pm_next;
			continue;
		}
		*pp = c->pm_next;
		c->pm_next = NULL;
		c->pm_listed = 0;
		sd_conn_unref(c);
	}
	return next;
}

void sd_pm_conn_end(struct doca_rdma_connection *c, doca_error_t status)
{
	struct sd_pm_ack *a = c->pm_acks;

	(void)status;
	park_free_all(c);
	while (a) {
		struct sd_pm_ack *n = a->next;

		free(a);
		a = n;
	}
	c->pm_acks = c->pm_acks_tail = NULL;
	if (c->pm_placing) { /* the provider still reports it (its buffer is freed then) */
		if (c->pm_placing->t) /* its receive is posted again, first (a stopping context flushes it) */
			unreserve(c->rdma, c->pm_placing->t);
		c->pm_placing->t = NULL;
		c->pm_placing->c = NULL;
		c->pm_placing = NULL;
		sd_conn_unref(c);
	}
	c->pm_dead = 1;
	if (c->pm_listed) { /* a context destroyed right after frees its connections whatever their references */
		SD_CONN_LIST_REMOVE(&active, c, pm_next);
		c->pm_listed = 0;
		sd_conn_unref(c);
	}
}
