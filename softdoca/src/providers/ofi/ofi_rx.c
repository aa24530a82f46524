/*
 * ofi provider: the receive side. Posted receive buffers (OFI_EAGER bytes:
 * the header and an eager payload; OFI_RX_RDM on the shared RDM endpoint,
 * OFI_RX_MSG per MSG endpoint), reposted once a message was delivered or
 * copied into its connection's queue; messages offered in order, one at a
 * time per connection (HOLD keeps them until rx_resume); rendezvous fetches
 * (PLACE with data == NULL: fi_read into dst, then FIN to the sender; HOLD:
 * fetched into provider memory at once); the target's half of the emulated
 * atomics; CQ reading and the dispatch of completions. See ofi_ops.c.
 */
#define _GNU_SOURCE
#include "ofi_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HDR sizeof(struct ohdr)

/* ------------------------------------------------------------ receive buffers */
int ofi_post_rx(struct sd_prov *p, struct orxbuf *b)
{
	struct fid_ep *ep = b->c ? b->c->ep : p->ep;
	int rc = (int)fi_recv(ep, b->buf, OFI_EAGER, b->desc, FI_ADDR_UNSPEC, &b->fctx);

	/* -FI_EAGAIN (a full receive queue): progress posts it again later */
	b->posted = rc == 0 ? 1 : rc == -FI_EAGAIN ? 2 : 0;
	if (rc == -FI_EAGAIN) {
		p->rx_unposted++;
		p->kick = 1;
	}
	return rc;
}

static void repost_list(struct sd_prov *p, struct orxbuf *b, int n)
{
	for (int i = 0; i < n && p->rx_unposted > 0; i++)
		if (b[i].posted == 2) {
			p->rx_unposted--;
			ofi_post_rx(p, &b[i]);
		}
}

void ofi_repost_rx(struct sd_prov *p)
{
	if (p->rxb)
		repost_list(p, p->rxb, p->nrxb);
	for (struct sd_prov_conn *c = p->conns; c && p->rx_unposted > 0; c = c->next)
		if (c->rxb && c->state != CS_FAILED && c->state != CS_DEAD)
			repost_list(p, c->rxb, c->nrxb);
}

int ofi_alloc_rx(struct sd_prov *p, struct sd_prov_conn *c, int n, struct orxbuf **out)
{
	struct orxbuf *b = calloc((size_t)n, sizeof(*b));
	int rc = 0;

	if (!b)
		return -FI_ENOMEM;
	for (int i = 0; i < n; i++) {
		b[i].kind = CTX_RX;
		b[i].c = c;
		b[i].buf = malloc(OFI_EAGER);
		if (!b[i].buf) {
			ofi_free_rx(p, b, n);
			return -FI_ENOMEM;
		}
		if (p->ch.mr_local) {
			rc = ofi_reg_tmp(p, b[i].buf, OFI_EAGER, FI_RECV, &b[i].mr, &b[i].desc);
			if (rc) {
				ofi_free_rx(p, b, n);
				return rc;
			}
		}
	}
	for (int i = 0; i < n; i++) {
		rc = ofi_post_rx(p, &b[i]);
		if (rc && rc != -FI_EAGAIN) {
			ofi_free_rx(p, b, n);
			return rc;
		}
	}
	*out = b; /* (a buffer that met -FI_EAGAIN is posted by a later progress) */
	return 0;
}

/* the endpoint the buffers were posted on is closed already */
void ofi_free_rx(struct sd_prov *p, struct orxbuf *b, int n)
{
	if (!b)
		return;
	for (int i = 0; i < n; i++) {
		if (b[i].posted == 2 && p->rx_unposted > 0)
			p->rx_unposted--;
		if (b[i].mr)
			fi_close(&b[i].mr->fid);
		free(b[i].buf);
	}
	free(b);
}

/* ------------------------------------------------------------ the receive side */
static struct sd_prov_mr *mr_by_key(struct sd_prov *p, uint64_t key)
{
	for (struct sd_prov_mr *m = p->mrs; m; m = m->next)
		if (m->key == key)
			return m;
	return NULL;
}

/* emulated atomic at the target: key, range and RDMA_ATOMIC checked against our registrations */
static doca_error_t do_atomic(struct sd_prov *p, const struct ohdr *h, uint64_t *old)
{
	uint64_t raddr = h->a, key = h->b;
	int is_cswap = (h->flags >> 1) & 1;
	struct sd_prov_mr *m = mr_by_key(p, key);
	uint64_t *ptr;

	if (!m || !(m->access & DOCA_ACCESS_FLAG_RDMA_ATOMIC) || raddr < (uint64_t)(uintptr_t)m->addr ||
	    raddr + 8 > (uint64_t)(uintptr_t)m->addr + m->len || (raddr & 7))
		return DOCA_ERROR_NOT_PERMITTED;
	ptr = (uint64_t *)(uintptr_t)raddr;
	if (is_cswap) {
		uint64_t exp = h->d;
		__atomic_compare_exchange_n(ptr, &exp, h->c, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
		*old = exp;
	} else {
		*old = __atomic_fetch_add(ptr, h->c, __ATOMIC_SEQ_CST);
	}
	return DOCA_SUCCESS;
}

static void rx_free(struct orx *r)
{
	if (!r->borrowed)
		free(r->data);
	free(r);
}

void ofi_rx_free_queue(struct sd_prov_conn *c)
{
	for (struct orx *r = c->rxq_head, *nx; r; r = nx) {
		nx = r->next;
		rx_free(r);
	}
	c->rxq_head = c->rxq_tail = NULL;
}

/* fetch a rendezvous payload: into dst (PLACE) or into provider memory (HOLD) */
static int start_fetch(struct sd_prov_conn *c, struct orx *r, struct sd_prov_rx_place *pl)
{
	struct oop *o = ofi_op_new(c, OP_RNDV_READ, NULL);
	struct sd_prov_iov one;
	int rc;

	if (!o)
		return -FI_ENOMEM;
	o->internal = 1;
	o->need_rma = 1;
	o->place = pl;
	pl->rx = r;
	if (!pl->ndst) {
		r->data = malloc(r->h.a ? r->h.a : 1);
		if (!r->data) {
			ofi_free_op(c->p, o);
			return -FI_ENOMEM;
		}
		r->borrowed = 0;
		one.addr = r->data;
		one.len = r->h.a;
		one.mr = NULL;
		rc = ofi_local_descs(o, &one, 1, FI_READ);
	} else {
		/* dst may be larger than the payload: trim the list to the length */
		struct sd_prov_iov d[OFI_MAX_IOV];
		uint64_t left = r->h.a;
		int n = 0;
		for (int i = 0; i < pl->ndst && left; i++) {
			d[n] = pl->dst[i];
			if (d[n].len > left)
				d[n].len = left;
			left -= d[n].len;
			n++;
		}
		rc = ofi_local_descs(o, d, n, FI_READ);
	}
	if (rc) {
		ofi_free_op(c->p, o);
		return rc;
	}
	o->raddr = r->h.b;
	o->rkey = r->h.c;
	o->m.o = o;
	o->m.kind = CTX_OPMSG;
	if (pl->ndst)
		c->rx_placing = 1;
	else
		r->fetching = 1;
	ofi_submit(c, o, 1);
	return 0;
}

void ofi_rndv_read_done(struct oop *o, doca_error_t st)
{
	struct sd_prov_conn *c = o->c;
	struct sd_prov *p = c->p;
	struct sd_prov_rx_place *pl = o->place;
	struct orx *r = pl->rx;

	ofi_send_ctrl(c, M_FIN, r->h.d, (uint64_t)st, 0, 0);
	if (pl->ndst) { /* PLACE: done */
		c->rx_placing = 0;
		c->rxq_head = r->next;
		if (!c->rxq_head)
			c->rxq_tail = NULL;
		if (c->user_closed && st == DOCA_SUCCESS)
			st = DOCA_ERROR_CONNECTION_RESET;
		/* even after conn_close: the owner of dst gets it back only here */
		p->cbs.rx_done(p->cbs.arg, pl->rx_ctx, st, st ? 0 : r->h.a);
		rx_free(r);
		if (c->placing == pl)
			c->placing = NULL;
		free(pl);
	} else {
		r->fetching = 0;
		r->fetched = st == DOCA_SUCCESS;
		r->fetch_st = st;
		free(pl);
	}
	p->kick = 1;
}

/* offer r (the head of the queue) to the application: 0 consumed, 1 held, 2 placing */
static int deliver(struct sd_prov_conn *c, struct orx *r)
{
	struct sd_prov *p = c->p;
	struct sd_prov_rx rx = {0};
	struct sd_prov_iov dst[OFI_MAX_IOV];
	int ndst = OFI_MAX_IOV;
	void *rx_ctx = NULL;
	enum sd_prov_rx_answer ans;

	if (r->fetching)
		return 1;
	if (r->rndv && !r->fetched && r->fetch_st) { /* the held fetch failed: the connection breaks */
		ofi_conn_fail(c, DOCA_ERROR_CONNECTION_RESET, SD_PROV_FAIL_LOST, "rendezvous fetch failed");
		return 0;
	}
	if (c->user_closed) {
		if (r->rndv && !r->fetched)
			ofi_send_ctrl(c, M_FIN, r->h.d, DOCA_ERROR_CONNECTION_RESET, 0, 0);
		return 0;
	}
	rx.kind = r->h.type == M_WIMM ? SD_PROV_RX_WRITE_IMM : SD_PROV_RX_SEND;
	rx.has_imm = r->h.type == M_WIMM || (r->h.flags & MF_IMM);
	rx.imm = r->h.imm;
	rx.len = r->rndv ? r->h.a : r->len;
	rx.data = r->h.type == M_WIMM ? NULL : (r->rndv && !r->fetched) ? NULL : (r->data ? r->data : (void *)"");
	memset(dst, 0, sizeof(dst));
	ans = p->cbs.rx(p->cbs.arg, c, c->ctx, &rx, dst, &ndst, &rx_ctx);
	if (ans == SD_PROV_RX_HOLD) {
		c->rx_held = 1;
		if (r->rndv && !r->fetched) {
			struct sd_prov_rx_place *pl = calloc(1, sizeof(*pl));
			if (!pl || start_fetch(c, r, pl)) {
				free(pl);
				r->fetch_st = DOCA_ERROR_NO_MEMORY;
			}
		}
		return 1;
	}
	if (ans == SD_PROV_RX_PLACE && rx.kind == SD_PROV_RX_WRITE_IMM) { /* no payload: placed at once */
		p->cbs.rx_done(p->cbs.arg, rx_ctx, DOCA_SUCCESS, 0);
		return 0;
	}
	if (ans == SD_PROV_RX_PLACE && rx.kind == SD_PROV_RX_SEND) {
		uint64_t room = 0;
		if (ndst < 0 || ndst > OFI_MAX_IOV)
			ndst = 0;
		for (int i = 0; i < ndst; i++)
			room += dst[i].len;
		if (room < rx.len) {
			if (r->rndv && !r->fetched)
				ofi_send_ctrl(c, M_FIN, r->h.d, DOCA_ERROR_TOO_BIG, 0, 0);
			p->cbs.rx_done(p->cbs.arg, rx_ctx, DOCA_ERROR_TOO_BIG, 0);
			return 0;
		}
		if (rx.data) {
			size_t off = 0;
			for (int i = 0; i < ndst && off < rx.len; i++) {
				size_t k = dst[i].len < rx.len - off ? dst[i].len : rx.len - off;
				memcpy(dst[i].addr, (const uint8_t *)rx.data + off, k);
				off += k;
			}
			p->cbs.rx_done(p->cbs.arg, rx_ctx, DOCA_SUCCESS, rx.len);
			return 0;
		}
		{
			struct sd_prov_rx_place *pl = calloc(1, sizeof(*pl));
			if (!pl)
				goto fail;
			memcpy(pl->dst, dst, sizeof(dst));
			pl->ndst = ndst;
			pl->rx_ctx = rx_ctx;
			if (start_fetch(c, r, pl)) {
				free(pl);
				goto fail;
			}
			c->placing = pl;
			return 2;
		}
fail:
		ofi_send_ctrl(c, M_FIN, r->h.d, DOCA_ERROR_NO_MEMORY, 0, 0);
		p->cbs.rx_done(p->cbs.arg, rx_ctx, DOCA_ERROR_NO_MEMORY, 0);
		return 0;
	}
	/* TAKEN (a rendezvous payload not fetched is dropped, the sender completes) */
	if (r->rndv && !r->fetched)
		ofi_send_ctrl(c, M_FIN, r->h.d, DOCA_SUCCESS, 0, 0);
	return 0;
}

static void rx_incoming(struct sd_prov_conn *c, const struct ohdr *h, const uint8_t *payload, size_t plen)
{
	struct orx *r = calloc(1, sizeof(*r));
	int res;

	if (!r)
		return;
	r->h = *h;
	r->rndv = h->type == M_RTS;
	r->len = r->rndv ? 0 : plen;
	r->data = (uint8_t *)payload;
	r->borrowed = 1;
	if (c->rxq_head || c->rx_held || c->rx_placing || (c->state != CS_ESTABLISHED && c->state != CS_CLOSING)) {
		res = 1;
	} else {
		r->next = NULL;
		c->rxq_head = c->rxq_tail = r; /* the head while offered (deliver's PLACE path pops it) */
		res = deliver(c, r);
		if (res == 0) {
			c->rxq_head = c->rxq_tail = NULL;
			rx_free(r);
			return;
		}
		c->rxq_head = c->rxq_tail = NULL;
	}
	if (r->borrowed) { /* keep: copy the payload out of the receive buffer */
		uint8_t *d = NULL;
		if (!r->rndv && plen) {
			d = malloc(plen);
			if (!d) {
				free(r);
				return;
			}
			memcpy(d, payload, plen);
		}
		r->data = r->rndv ? r->data : d;
		r->borrowed = r->rndv && r->data == payload ? 1 : 0;
		if (r->rndv && r->data == payload)
			r->data = NULL, r->borrowed = 0;
	}
	if (c->rxq_head == NULL && res) {
		c->rxq_head = c->rxq_tail = r;
	} else {
		r->next = NULL;
		if (c->rxq_tail)
			c->rxq_tail->next = r;
		else
			c->rxq_head = r;
		c->rxq_tail = r;
	}
}

static void handle_msg(struct sd_prov *p, struct sd_prov_conn *bc, const uint8_t *buf, size_t len)
{
	const struct ohdr *h = (const struct ohdr *)buf;
	struct sd_prov_conn *c;

	if (len < HDR || h->magic != OFI_MAGIC)
		return;
	if (h->type == M_HELLO) { /* RDM only: a connection's own endpoint (MSG) has no use for one, and a
				   * peer's HELLO there could mark another connection's as seen */
		if (!bc)
			ofi_rx_hello(p, h);
		return;
	}
	c = bc ? bc : ofi_conn_lookup(p, h->dst);
	/* MSG: a message may come before the EQ said FI_CONNECTED: kept in order
	 * (rx_incoming queues it until the connection is established) */
	if (!c || h->dst != c->id || (!bc && (h->src != c->peer_id || h->uid != c->peer_uid)) ||
	    (c->state != CS_ESTABLISHED && c->state != CS_CLOSING &&
	     !(bc && (c->state == CS_CONNECTING || c->state == CS_ACCEPTING))))
		return;
	switch (h->type) {
	case M_BYE:
		if (c->state == CS_ESTABLISHED && !c->user_closed) {
			struct sd_prov_conn_event ev = { .ev = SD_PROV_EV_DISCONNECTED, .why = "the peer closed" };
			c->state = CS_FAILED;
			c->failed_reported = 1;
			p->cbs.conn_event(p->cbs.arg, c, c->ctx, &ev);
		}
		break;
	case M_SEND: case M_WIMM: case M_RTS:
		rx_incoming(c, h, buf + HDR, len - HDR);
		break;
	case M_FIN: {
		struct oop *o = ofi_find_out(c, h->a);
		if (o && o->type == OP_SEND && o->sub_pending) {
			o->sub_pending = 0;
			if (h->b && !o->status)
				o->status = (doca_error_t)h->b;
			ofi_maybe_done(o);
		}
		break;
	}
	case M_AREQ: {
		uint64_t old = 0;
		doca_error_t st = do_atomic(p, h, &old);
		ofi_send_ctrl(c, M_ARESP, h->imm | ((uint64_t)h->rsv2 << 32), old, (uint64_t)st, 0);
		break;
	}
	case M_ARESP: {
		struct oop *o = ofi_find_out(c, h->a);
		if (o && (o->type == OP_FADD || o->type == OP_CSWAP) && o->sub_pending) {
			o->sub_pending = 0;
			o->abuf = h->b;
			if (h->c && !o->status)
				o->status = (doca_error_t)h->c;
			ofi_maybe_done(o);
		}
		break;
	}
	default:
		break;
	}
}

static struct sd_prov_conn *conn_of_cq(struct sd_prov *p, struct fid_cq *cq)
{
	for (struct sd_prov_conn *c = p->conns; c; c = c->next)
		if (c->cq == cq)
			return c;
	return NULL;
}

static void wimm_arrived(struct sd_prov *p, struct fid_cq *cq, uint64_t data)
{
	struct sd_prov_conn *c = cq == p->cq ? ofi_conn_lookup(p, (uint32_t)(data >> 32)) : conn_of_cq(p, cq);
	struct ohdr h;

	if (!c || (c->state != CS_ESTABLISHED && c->state != CS_CLOSING &&
		   !(cq != p->cq && (c->state == CS_CONNECTING || c->state == CS_ACCEPTING))))
		return;
	memset(&h, 0, sizeof(h));
	h.magic = OFI_MAGIC;
	h.type = M_WIMM;
	h.imm = (uint32_t)data;
	rx_incoming(c, &h, NULL, 0);
}

static int ctx_kind(void *ctx) { return *(int *)((char *)ctx + sizeof(struct fi_context2)); }

static void completion(struct sd_prov *p, struct fid_cq *cq, void *ctx, uint64_t flags, size_t len, uint64_t data,
		       int err)
{
	if ((flags & FI_REMOTE_CQ_DATA) && (flags & (FI_REMOTE_WRITE | FI_RMA)) && !err) {
		wimm_arrived(p, cq, data);
		if (ctx && ctx_kind(ctx) == CTX_RX) /* FI_RX_CQ_DATA: it consumed a receive */
			ofi_post_rx(p, ctx);
		return;
	}
	if (!ctx)
		return;
	switch (ctx_kind(ctx)) {
	case CTX_RX: {
		struct orxbuf *b = ctx;
		if (err == FI_ECANCELED)
			return; /* the endpoint closes */
		if (!err)
			handle_msg(p, b->c, b->buf, len);
		if (!b->c || (b->c->state != CS_FAILED && b->c->state != CS_DEAD))
			ofi_post_rx(p, b);
		break;
	}
	case CTX_OP:
		ofi_op_part_done(p, ctx, 0, err ? ofi_err(err) : DOCA_SUCCESS);
		break;
	case CTX_OPMSG:
		ofi_op_part_done(p, ((struct oop *)((char *)ctx - offsetof(struct oop, m)))->m.o, 1,
			     err ? ofi_err(err) : DOCA_SUCCESS);
		break;
	default:
		break;
	}
}

int ofi_read_cq(struct sd_prov *p, struct fid_cq *cq)
{
	struct fi_cq_data_entry e[16];
	int n = 0;

	for (int round = 0; round < 64; round++) {
		ssize_t k = fi_cq_read(cq, e, 16);

		if (k == -FI_EAGAIN)
			break;
		if (k == -FI_EAVAIL) {
			struct fi_cq_err_entry ee;
			memset(&ee, 0, sizeof(ee));
			if (fi_cq_readerr(cq, &ee, 0) < 0)
				break;
			completion(p, cq, ee.op_context, ee.flags, ee.len, ee.data, ee.err ? ee.err : FI_EIO);
			n++;
			continue;
		}
		if (k < 0)
			break;
		for (ssize_t i = 0; i < k; i++)
			completion(p, cq, e[i].op_context, e[i].flags, e[i].len, e[i].data, 0);
		n += (int)k;
		if (k < 16)
			break;
	}
	return n;
}

/* deliver what is queued on c, in order, while nothing holds it (inside progress) */
int ofi_rx_pump(struct sd_prov_conn *c)
{
	int n = 0;

	while (c->rxq_head && !c->rx_held && !c->rx_placing &&
	       (c->state == CS_ESTABLISHED || c->state == CS_CLOSING)) {
		struct orx *r = c->rxq_head;
		int res = deliver(c, r);

		n++;
		if (res)
			break;
		if (c->rxq_head == r) {
			c->rxq_head = r->next;
			if (!c->rxq_head)
				c->rxq_tail = NULL;
			rx_free(r);
		}
	}
	return n;
}
