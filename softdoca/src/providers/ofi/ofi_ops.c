/*
 * ofi provider: data ops (posting, ordering, completion of ops), messages, and
 * the emulations; the receive side is in ofi_rx.c.
 *
 * Messages: every FI_MSG message starts with struct ohdr (the receiver's
 * connection id, the sender's, the sender instance). Eager up to OFI_EAGER
 * bytes in all, posted receive buffers inside the provider (OFI_RX_RDM on the
 * shared RDM endpoint, OFI_RX_MSG per MSG endpoint), reposted once the
 * message was delivered or copied into the connection's queue.
 * Larger sends: rendezvous. The sender registers its source (FI_REMOTE_READ;
 * a multi-iov source is first copied into one staging buffer) and sends RTS
 * (length, address, key); the receiver's rx callback sees data == NULL, answers
 * PLACE and the provider fi_read()s the payload into dst, then sends FIN, and
 * the send completes at the sender. A HOLD answer to an RTS fetches the
 * payload into provider memory at once (FIN sent), so a held message never
 * keeps the sender's op past its deadline.
 *
 * Order (provider.h): sends are ordered by the provider (FI_ORDER_SAS, demanded
 * by the negotiation). A send / read / atomic / emulated immediate after a
 * write: where the provider lacks FI_ORDER_SAW / FI_ORDER_RAW (shm's tx side),
 * it waits in the connection's queue until every earlier write completed;
 * writes ask FI_DELIVERY_COMPLETE (where accepted), so a completed write is
 * visible at the target. flush completes once every op submitted before it on
 * the connection completed.
 *
 * Emulations:
 *  - write-with-immediate without remote CQ data: the write, then an M_WIMM
 *    message carrying the immediate (at once where FI_ORDER_SAW holds, else
 *    once the write completed, delivery-complete).
 *  - atomics without native FI_UINT64 FI_SUM / FI_CSWAP (fi_query_atomic): an
 *    M_AREQ request answered by the target's progress (it checks its own
 *    registrations: range and RDMA_ATOMIC, refused with NOT_PERMITTED) with
 *    M_ARESP; caps lack SD_PROV_CAP_ATOMIC_NATIVE then.
 */
#define _GNU_SOURCE
#include "ofi_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HDR sizeof(struct ohdr)
#define EAGER_PAYLOAD (OFI_EAGER - HDR)

/* ------------------------------------------------------------ ops */
struct oop *ofi_op_new(struct sd_prov_conn *c, enum op_type t, void *op_ctx)
{
	struct oop *o = calloc(1, sizeof(*o));

	if (!o)
		return NULL;
	o->kind = CTX_OP;
	o->c = c;
	o->type = t;
	o->op_ctx = op_ctx;
	o->serial = ++c->p->next_serial;
	o->start_ns = ofi_now_ns();
	return o;
}

void ofi_free_op(struct sd_prov *p, struct oop *o)
{
	(void)p;
	for (int i = 0; i < o->ntmp; i++)
		if (o->tmp_mr[i])
			fi_close(&o->tmp_mr[i]->fid);
	free(o->msg);
	free(o->stage);
	free(o);
}

static void q_push(struct oop **h, struct oop **t, struct oop *o)
{
	o->next = NULL;
	if (*t)
		(*t)->next = o;
	else
		*h = o;
	*t = o;
}

static void q_remove(struct oop **h, struct oop **t, struct oop *o)
{
	struct oop *prev = NULL;

	for (struct oop *x = *h; x; prev = x, x = x->next)
		if (x == o) {
			if (prev)
				prev->next = x->next;
			else
				*h = x->next;
			if (*t == x)
				*t = prev;
			x->next = NULL;
			return;
		}
}

static void report(struct oop *o, doca_error_t st)
{
	struct sd_prov *p = o->c ? o->c->p : NULL;

	if (o->reported || o->internal || !p)
		return;
	o->reported = 1;
	if (st == DOCA_SUCCESS && o->result && (o->type == OP_FADD || o->type == OP_CSWAP))
		*o->result = o->abuf;
	p->cbs.op_done(p->cbs.arg, o->op_ctx, st);
}

/* report and take off the lists every op of c; ops the fabric still holds
 * become orphans on a shared (RDM) endpoint, else (MSG: the endpoint is closed
 * before this) they are freed. quiet: no callbacks (close). */
void ofi_fail_ops(struct sd_prov_conn *c, doca_error_t st, int quiet)
{
	struct sd_prov *p = c->p;
	struct oop *lists[2] = { c->out_head, c->pend_head };

	c->out_head = c->out_tail = c->pend_head = c->pend_tail = NULL;
	c->writes_out = 0;
	for (int k = 0; k < 2; k++) {
		for (struct oop *o = lists[k], *nx; o; o = nx) {
			nx = o->next;
			if (quiet)
				o->reported = 1;
			else
				report(o, st);
			o->reported = 1;
			o->c = NULL;
			if (k == 0 && (o->posted > 0 || o->msg_state == 1) && c->txe) {
				/* the shared CQ may still report it: kept until then. Held by
				 * a failed connection (not quiet): it may never complete, and
				 * on shm its missing answer blocks every later one of that
				 * endpoint: new connections to the peer get a fresh one */
				o->txe = c->txe;
				c->txe->orphans++;
				if (!quiet && !c->txe->wedged) {
					c->txe->wedged = 1;
					p->nwedged++;
				}
				o->next = p->orphans;
				p->orphans = o;
			} else {
				ofi_free_op(p, o);
			}
		}
	}
}

/* descriptors for a local list (FI_MR_LOCAL: the caller's mr or a temporary one) */
int ofi_local_descs(struct oop *o, const struct sd_prov_iov *iov, int niov, uint64_t acc)
{
	struct sd_prov *p = o->c->p;

	o->niov = 0;
	o->total = 0;
	for (int i = 0; i < niov; i++) {
		if (!iov[i].len)
			continue;
		o->iov[o->niov].iov_base = iov[i].addr;
		o->iov[o->niov].iov_len = iov[i].len;
		o->desc[o->niov] = NULL;
		if (iov[i].mr)
			o->desc[o->niov] = fi_mr_desc(iov[i].mr->mr);
		else if (p->ch.mr_local) {
			int rc = ofi_reg_tmp(p, iov[i].addr, iov[i].len, acc, &o->tmp_mr[o->ntmp], &o->desc[o->niov]);
			if (rc)
				return rc;
			o->ntmp++;
		}
		o->total += iov[i].len;
		o->niov++;
	}
	return 0;
}

static doca_error_t check_iov(const struct sd_prov_iov *iov, int niov, uint64_t *total)
{
	uint64_t t = 0;

	if (niov < 0 || niov > OFI_MAX_IOV || (niov && !iov))
		return DOCA_ERROR_INVALID_VALUE;
	for (int i = 0; i < niov; i++) {
		if (iov[i].len && !iov[i].addr)
			return DOCA_ERROR_INVALID_VALUE;
		t += iov[i].len;
		if (t > (1ull << 30))
			return DOCA_ERROR_TOO_BIG;
	}
	*total = t;
	return DOCA_SUCCESS;
}

/* the requester's checks: the key's owner, bounds, rights */
static doca_error_t rcheck(struct sd_prov_conn *c, struct sd_prov_rkey *rk, uint64_t raddr, uint64_t len, uint32_t need)
{
	if (!rk)
		return DOCA_ERROR_INVALID_VALUE;
	if (rk->owner != c->peer_uid)
		return DOCA_ERROR_NOT_PERMITTED;
	if (raddr < rk->base || raddr + len < raddr || raddr - rk->base > rk->len || len > rk->len - (raddr - rk->base))
		return DOCA_ERROR_NOT_PERMITTED;
	if ((rk->access & need) != need)
		return DOCA_ERROR_NOT_PERMITTED;
	return DOCA_SUCCESS;
}

static uint64_t target_addr(struct sd_prov_rkey *rk, uint64_t raddr)
{
	return rk->offset_mode ? raddr - rk->base : raddr;
}

static void fill_hdr(struct sd_prov_conn *c, struct ohdr *h, int type)
{
	memset(h, 0, sizeof(*h));
	h->magic = OFI_MAGIC;
	h->type = (uint8_t)type;
	h->dst = c->peer_id;
	h->src = c->id;
	h->uid = c->p->uid;
}

/* a message (header + payload copied) owned by the op */
static int make_msg(struct oop *o, int type, const struct sd_prov_iov *iov, int niov, size_t len)
{
	struct sd_prov *p = o->c->p;
	size_t off = HDR;

	o->msg = malloc(HDR + len);
	if (!o->msg)
		return -FI_ENOMEM;
	fill_hdr(o->c, (struct ohdr *)o->msg, type);
	for (int i = 0; i < niov; i++) {
		if (iov[i].len)
			memcpy(o->msg + off, iov[i].addr, iov[i].len);
		off += iov[i].len;
	}
	o->msg_len = HDR + len;
	if (p->ch.mr_local) {
		int rc = ofi_reg_tmp(p, o->msg, o->msg_len, FI_SEND, &o->tmp_mr[o->ntmp], &o->msg_desc);
		if (rc)
			return rc;
		o->ntmp++;
	}
	return 0;
}

static int post_rma(struct oop *o, int is_read, uint64_t flags_extra, uint64_t data)
{
	struct sd_prov_conn *c = o->c;
	struct sd_prov *p = c->p;
	size_t lim = p->ch.iov_limit;

	/* chunks of iov_limit entries, each one fabric request; resumes after EAGAIN */
	for (int i = o->next_iov; i < o->niov;) {
		int n = (int)((size_t)(o->niov - i) < lim ? (size_t)(o->niov - i) : lim);
		uint64_t len = 0;
		struct fi_rma_iov riov;
		struct fi_msg_rma m;
		uint64_t fl = FI_COMPLETION | flags_extra;
		int rc;

		for (int k = 0; k < n; k++)
			len += o->iov[i + k].iov_len;
		riov.addr = o->raddr + o->next_off;
		riov.len = len;
		riov.key = o->rkey;
		memset(&m, 0, sizeof(m));
		m.msg_iov = &o->iov[i];
		m.desc = &o->desc[i];
		m.iov_count = (size_t)n;
		m.addr = c->dest;
		m.rma_iov = &riov;
		m.rma_iov_count = 1;
		m.context = &o->fctx;
		if (i + n < o->niov)
			fl &= ~(uint64_t)FI_REMOTE_CQ_DATA; /* the immediate rides on the last chunk */
		m.data = (fl & FI_REMOTE_CQ_DATA) ? data : 0;
		if (!is_read && p->dc_ok)
			fl |= FI_DELIVERY_COMPLETE;
		rc = is_read ? (int)fi_readmsg(c->ep, &m, fl) : (int)fi_writemsg(c->ep, &m, fl);
		if ((rc == -FI_EBADFLAGS || rc == -FI_EINVAL || rc == -FI_ENOSYS) && (fl & FI_DELIVERY_COMPLETE)) {
			p->dc_ok = 0; /* transmit-complete semantics only; writes are then fenced by the order bits */
			continue;
		}
		if (rc)
			return rc;
		o->posted++;
		i += n;
		o->next_iov = i;
		o->next_off += len;
	}
	return 0;
}

/* ------------------------------------------------------------ posting */
static int rma_done(const struct oop *o) { return !o->need_rma || (o->next_iov >= o->niov && o->posted == 0); }

/* post what can be posted of o now; 0 or a libfabric error (-FI_EAGAIN: retry later) */
static int post_op(struct oop *o)
{
	struct sd_prov_conn *c = o->c;
	struct sd_prov *p = c->p;
	int rc;

	ofi_ring(c); /* the peer's progress serves it (once per round: ofi_bell_flush) */
	if (o->need_rma && o->next_iov < o->niov) {
		int rd = o->type == OP_READ || o->type == OP_RNDV_READ;
		int native_imm = o->type == OP_WIMM && p->ch.native_cq_data;
		uint64_t data = (uint64_t)o->imm | (p->ch.ep_type == FI_EP_RDM ? (uint64_t)c->peer_id << 32 : 0);

		if (o->is_write == 0 && !rd && o->next_iov == 0) {
			o->is_write = 1;
			c->writes_out++;
		}
		rc = post_rma(o, rd, native_imm ? FI_REMOTE_CQ_DATA : 0, data);
		if (rc)
			return rc;
	}
	if ((o->type == OP_FADD || o->type == OP_CSWAP) && !o->need_msg && o->posted == 0 && !o->msg_state) {
		struct fi_ioc src = { &o->operand, 1 }, cmp = { &o->compare, 1 }, res = { &o->abuf, 1 };
		struct fi_rma_ioc rioc = { o->raddr, 1, o->rkey };
		struct fi_msg_atomic m = { .msg_iov = &src, .desc = &o->msg_desc, .iov_count = 1, .addr = c->dest,
					   .rma_iov = &rioc, .rma_iov_count = 1, .datatype = FI_UINT64,
					   .op = o->type == OP_FADD ? FI_SUM : FI_CSWAP, .context = &o->fctx };
		void *d = o->msg_desc;

		rc = o->type == OP_FADD ? (int)fi_fetch_atomicmsg(c->ep, &m, &res, &d, 1, FI_COMPLETION)
					: (int)fi_compare_atomicmsg(c->ep, &m, &cmp, &d, 1, &res, &d, 1, FI_COMPLETION);
		if (rc)
			return rc;
		o->posted++;
		o->msg_state = 3; /* marks "issued" for the native atomic */
	}
	if (o->need_msg && o->msg_state == 0 && (o->type != OP_WIMM || p->ch.order_saw || rma_done(o))) {
		rc = (int)fi_send(c->ep, o->msg, o->msg_len, o->msg_desc, c->dest, &o->m.f);
		if (rc)
			return rc;
		o->msg_state = 1;
	}
	return 0;
}

static void out_push(struct sd_prov_conn *c, struct oop *o)
{
	if (!o->in_out) {
		q_push(&c->out_head, &c->out_tail, o);
		o->in_out = 1;
	}
}

/* an accepted op: post it now unless order or an earlier queued op says wait */
doca_error_t ofi_submit(struct sd_prov_conn *c, struct oop *o, int bypass)
{
	struct sd_prov *p = c->p;
	int rc;

	if (!bypass && (c->pend_head || (o->wait_writes && c->writes_out) || o->wait_all)) {
		q_push(&c->pend_head, &c->pend_tail, o);
		o->queued = 1;
		p->kick = 1;
		return DOCA_SUCCESS;
	}
	rc = post_op(o);
	if (rc == -FI_EAGAIN) {
		if (o->posted || o->msg_state) { /* partly posted: the rest follows from pump */
			out_push(c, o);
			o->needs_repost = 1;
		} else {
			q_push(&c->pend_head, &c->pend_tail, o);
			o->queued = 1;
		}
		p->kick = 1;
		return DOCA_SUCCESS;
	}
	if (rc) {
		if (o->posted || o->msg_state) { /* partly posted: report through the completion */
			o->status = ofi_err(rc);
			o->next_iov = o->niov;
			o->need_msg = 0;
			out_push(c, o);
			return DOCA_SUCCESS;
		}
		if (o->is_write) {
			o->is_write = 0;
			c->writes_out--;
		}
		ofi_free_op(p, o);
		return ofi_err(rc) == DOCA_ERROR_AGAIN ? DOCA_ERROR_IO_FAILED : ofi_err(rc);
	}
	out_push(c, o);
	return DOCA_SUCCESS;
}

static doca_error_t conn_ready(struct sd_prov_conn *c)
{
	if (!c)
		return DOCA_ERROR_INVALID_VALUE;
	if (c->state != CS_ESTABLISHED || c->user_closed)
		return DOCA_ERROR_NOT_CONNECTED;
	return DOCA_SUCCESS;
}

doca_error_t ofi_send_ctrl(struct sd_prov_conn *c, int type, uint64_t a, uint64_t b, uint64_t cc, uint64_t d)
{
	struct oop *o = ofi_op_new(c, OP_CTRL, NULL);
	struct ohdr *h;

	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	o->internal = 1;
	o->need_msg = 1;
	o->m.kind = CTX_OPMSG;
	o->m.o = o;
	if (make_msg(o, type, NULL, 0, 0)) {
		ofi_free_op(c->p, o);
		return DOCA_ERROR_NO_MEMORY;
	}
	h = (struct ohdr *)o->msg;
	h->a = a;
	h->b = b;
	h->c = cc;
	h->d = d;
	return ofi_submit(c, o, !c->pend_head);
}

/* ------------------------------------------------------------ completion of ops */
struct oop *ofi_find_out(struct sd_prov_conn *c, uint64_t serial)
{
	for (struct oop *o = c->out_head; o; o = o->next)
		if (o->serial == serial)
			return o;
	return NULL;
}

void ofi_maybe_done(struct oop *o)
{
	struct sd_prov_conn *c = o->c;
	struct sd_prov *p = c->p;

	if (!rma_done(o) || (o->need_msg && o->msg_state != 2) || o->sub_pending || o->needs_repost ||
	    (o->msg_state == 3 && o->posted) || o->queued)
		return;
	if (o->in_out)
		q_remove(&c->out_head, &c->out_tail, o);
	o->in_out = 0;
	if (o->type == OP_RNDV_READ)
		ofi_rndv_read_done(o, o->status);
	else
		report(o, o->status);
	if (o->status && !o->internal && c->state == CS_ESTABLISHED)
		ofi_conn_fail(c, DOCA_ERROR_CONNECTION_RESET, SD_PROV_FAIL_LOST, "an operation failed (%s): the connection "
			      "breaks, as on RC hardware", sd_prov_strerror(o->status));
	ofi_free_op(p, o);
	p->kick = 1;
}

void ofi_op_part_done(struct sd_prov *p, struct oop *o, int msg_part, doca_error_t st)
{
	if (msg_part)
		o->msg_state = 2;
	else
		o->posted--;
	if (!o->c) { /* an orphan: the connection is gone */
		if (o->posted <= 0 && o->msg_state != 1) {
			for (struct oop **pp = &p->orphans; *pp; pp = &(*pp)->next)
				if (*pp == o) {
					*pp = o->next;
					break;
				}
			if (o->txe && o->txe->orphans > 0)
				o->txe->orphans--;
			ofi_free_op(p, o);
		}
		return;
	}
	if (st && !o->status)
		o->status = st;
	if (o->is_write && rma_done(o)) {
		o->is_write = 0;
		o->c->writes_out--;
		p->kick = 1;
	}
	if (o->type == OP_WIMM && o->need_msg && o->msg_state == 0 && rma_done(o)) {
		if (o->status) {
			o->need_msg = 0;
		} else {
			int rc = post_op(o);
			if (rc == -FI_EAGAIN)
				o->needs_repost = 1;
			else if (rc) {
				o->status = ofi_err(rc);
				o->need_msg = 0;
			}
		}
	}
	ofi_maybe_done(o);
}

/* ------------------------------------------------------------ pump (inside progress) */


int ofi_conn_pump(struct sd_prov_conn *c)
{
	struct sd_prov *p = c->p;
	int n = 0;

	for (struct oop *o = c->out_head, *nx; o; o = nx) {
		nx = o->next;
		if (!o->needs_repost)
			continue;
		int rc = post_op(o);
		if (rc == -FI_EAGAIN) {
			p->kick = 1;
			break;
		}
		o->needs_repost = 0;
		if (rc) {
			o->status = ofi_err(rc);
			o->need_msg = 0;
			o->next_iov = o->niov;
		}
		ofi_maybe_done(o);
		n++;
	}
	while (c->pend_head && (c->state == CS_ESTABLISHED || c->state == CS_CLOSING || c->state == CS_CONNECTING)) {
		struct oop *o = c->pend_head;
		int rc;

		if (o->wait_all) {
			if (c->out_head)
				break;
			q_remove(&c->pend_head, &c->pend_tail, o);
			o->queued = 0;
			report(o, DOCA_SUCCESS);
			ofi_free_op(p, o);
			n++;
			continue;
		}
		if (o->wait_writes && c->writes_out)
			break;
		rc = post_op(o);
		if (rc == -FI_EAGAIN && !o->posted && !o->msg_state) {
			p->kick = 1;
			break;
		}
		q_remove(&c->pend_head, &c->pend_tail, o);
		o->queued = 0;
		out_push(c, o);
		if (rc == -FI_EAGAIN) {
			o->needs_repost = 1;
			p->kick = 1;
			break;
		}
		if (rc) {
			o->status = ofi_err(rc);
			o->need_msg = 0;
			o->next_iov = o->niov;
			o->sub_pending = 0;
			ofi_maybe_done(o);
		}
		n++;
	}
	n += ofi_rx_pump(c);
	return n + ofi_conn_step(c); /* may free c */
}

/* ------------------------------------------------------------ the ops */
static struct oop *op_for(struct sd_prov_conn *c, enum op_type t, void *op_ctx)
{
	struct oop *o = ofi_op_new(c, t, op_ctx);

	if (o) {
		o->m.kind = CTX_OPMSG;
		o->m.o = o;
	}
	return o;
}

static doca_error_t rma_op(struct sd_prov_conn *c, enum op_type t, const struct sd_prov_iov *iov, int niov,
			   struct sd_prov_rkey *rk, uint64_t raddr, uint32_t imm, void *op_ctx)
{
	struct sd_prov *p;
	uint64_t total;
	struct oop *o;
	doca_error_t e = conn_ready(c);
	int rc;

	if (e)
		return e;
	p = c->p;
	e = check_iov(iov, niov, &total);
	if (e)
		return e;
	e = rcheck(c, rk, raddr, total, t == OP_READ ? DOCA_ACCESS_FLAG_RDMA_READ : DOCA_ACCESS_FLAG_RDMA_WRITE);
	if (e)
		return e;
	o = op_for(c, t, op_ctx);
	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	rc = ofi_local_descs(o, iov, niov, t == OP_READ ? FI_READ : FI_WRITE);
	if (rc) {
		ofi_free_op(p, o);
		return ofi_err(rc);
	}
	o->raddr = target_addr(rk, raddr);
	o->rkey = rk->key;
	o->imm = imm;
	o->need_rma = o->niov > 0;
	if (t == OP_READ)
		o->wait_writes = !p->ch.order_raw;
	if (t == OP_WIMM && (!p->ch.native_cq_data || !o->need_rma)) {
		o->need_msg = 1;
		rc = make_msg(o, M_WIMM, NULL, 0, 0);
		if (rc) {
			ofi_free_op(p, o);
			return ofi_err(rc);
		}
		((struct ohdr *)o->msg)->imm = imm;
		o->wait_writes = !p->ch.order_saw && !o->need_rma;
	}
	if (!o->need_rma && !o->need_msg)
		o->wait_all = 1; /* zero length: completes once the earlier ops did */
	e = ofi_submit(c, o, 0);
	ofi_bell_flush(p);
	return e;
}

doca_error_t ofi_op_write(struct sd_prov_conn *c, const struct sd_prov_iov *iov, int niov, struct sd_prov_rkey *rk,
			  uint64_t raddr, void *op_ctx)
{
	return rma_op(c, OP_WRITE, iov, niov, rk, raddr, 0, op_ctx);
}

doca_error_t ofi_op_read(struct sd_prov_conn *c, const struct sd_prov_iov *iov, int niov, struct sd_prov_rkey *rk,
			 uint64_t raddr, void *op_ctx)
{
	return rma_op(c, OP_READ, iov, niov, rk, raddr, 0, op_ctx);
}

doca_error_t ofi_op_write_imm(struct sd_prov_conn *c, const struct sd_prov_iov *iov, int niov,
			      struct sd_prov_rkey *rk, uint64_t raddr, uint32_t imm, void *op_ctx)
{
	return rma_op(c, OP_WIMM, iov, niov, rk, raddr, imm, op_ctx);
}

static doca_error_t atomic_op(struct sd_prov_conn *c, enum op_type t, struct sd_prov_rkey *rk, uint64_t raddr,
			      uint64_t operand, uint64_t compare, uint64_t *result, void *op_ctx)
{
	struct sd_prov *p;
	struct oop *o;
	doca_error_t e = conn_ready(c);
	int rc;

	if (e)
		return e;
	if (!result || (raddr & 7))
		return DOCA_ERROR_INVALID_VALUE;
	p = c->p;
	e = rcheck(c, rk, raddr, 8, DOCA_ACCESS_FLAG_RDMA_ATOMIC);
	if (e)
		return e;
	o = op_for(c, t, op_ctx);
	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	o->result = result;
	o->operand = operand;
	o->compare = compare;
	if (p->atomic_native) {
		o->raddr = target_addr(rk, raddr);
		o->rkey = rk->key;
		o->wait_writes = !p->ch.order_raw;
		if (p->ch.mr_local) {
			rc = ofi_reg_tmp(p, &o->abuf, 3 * sizeof(uint64_t), FI_READ | FI_WRITE, &o->tmp_mr[0], &o->msg_desc);
			if (rc) {
				ofi_free_op(p, o);
				return ofi_err(rc);
			}
			o->ntmp = 1;
		}
	} else {
		struct ohdr *h;

		rc = make_msg(o, M_AREQ, NULL, 0, 0);
		if (rc) {
			ofi_free_op(p, o);
			return ofi_err(rc);
		}
		h = (struct ohdr *)o->msg;
		h->a = raddr; /* the target's own address: it checks it against its registrations */
		h->b = rk->key;
		h->c = operand;
		h->d = compare;
		h->flags = t == OP_CSWAP ? 2 : 0;
		h->imm = (uint32_t)o->serial; /* the answer names the request */
		h->rsv2 = (uint32_t)(o->serial >> 32);
		o->need_msg = 1;
		o->sub_pending = 1;
		o->wait_writes = !p->ch.order_saw;
	}
	e = ofi_submit(c, o, 0);
	ofi_bell_flush(p);
	return e;
}

doca_error_t ofi_op_fadd(struct sd_prov_conn *c, struct sd_prov_rkey *rk, uint64_t raddr, uint64_t add,
			 uint64_t *result, void *op_ctx)
{
	return atomic_op(c, OP_FADD, rk, raddr, add, 0, result, op_ctx);
}

doca_error_t ofi_op_cswap(struct sd_prov_conn *c, struct sd_prov_rkey *rk, uint64_t raddr, uint64_t compare,
			  uint64_t swap, uint64_t *result, void *op_ctx)
{
	return atomic_op(c, OP_CSWAP, rk, raddr, swap, compare, result, op_ctx);
}

doca_error_t ofi_op_send(struct sd_prov_conn *c, const struct sd_prov_iov *iov, int niov, const uint32_t *imm,
			 void *op_ctx)
{
	struct sd_prov *p;
	uint64_t total;
	struct oop *o;
	doca_error_t e = conn_ready(c);
	int rc;

	if (e)
		return e;
	p = c->p;
	e = check_iov(iov, niov, &total);
	if (e)
		return e;
	o = op_for(c, OP_SEND, op_ctx);
	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	o->wait_writes = !p->ch.order_saw;
	o->need_msg = 1;
	if (total <= EAGER_PAYLOAD) {
		rc = make_msg(o, M_SEND, iov, niov, total);
	} else {
		/* rendezvous: the target reads the source */
		void *src = NULL;
		struct ohdr *h;
		int n = 0;

		for (int i = 0; i < niov; i++)
			if (iov[i].len) {
				n++;
				src = iov[i].addr;
			}
		if (n > 1) {
			size_t off = 0;
			o->stage = malloc(total);
			if (!o->stage) {
				ofi_free_op(p, o);
				return DOCA_ERROR_NO_MEMORY;
			}
			for (int i = 0; i < niov; i++) {
				memcpy(o->stage + off, iov[i].addr, iov[i].len);
				off += iov[i].len;
			}
			src = o->stage;
		}
		rc = ofi_reg_tmp(p, src, total, FI_REMOTE_READ | FI_READ | FI_SEND, &o->tmp_mr[o->ntmp], NULL);
		if (!rc) {
			uint64_t key = fi_mr_key(o->tmp_mr[o->ntmp]);
			o->ntmp++;
			rc = make_msg(o, M_RTS, NULL, 0, 0);
			if (!rc) {
				h = (struct ohdr *)o->msg;
				h->a = total;
				h->b = p->ch.offset_mode ? 0 : (uint64_t)(uintptr_t)src;
				h->c = key;
				h->d = o->serial;
				o->sub_pending = 1;
			}
		}
	}
	if (rc) {
		ofi_free_op(p, o);
		return ofi_err(rc);
	}
	if (imm) {
		((struct ohdr *)o->msg)->flags |= MF_IMM;
		((struct ohdr *)o->msg)->imm = *imm;
	}
	e = ofi_submit(c, o, 0);
	ofi_bell_flush(p);
	return e;
}

doca_error_t ofi_op_flush(struct sd_prov_conn *c, void *op_ctx)
{
	struct oop *o;
	doca_error_t e = conn_ready(c);

	if (e)
		return e;
	o = op_for(c, OP_FLUSH, op_ctx);
	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	o->wait_all = 1;
	return ofi_submit(c, o, 0);
}

void ofi_op_rx_resume(struct sd_prov_conn *c)
{
	if (!c)
		return;
	c->rx_held = 0;
	c->p->kick = 1;
}
