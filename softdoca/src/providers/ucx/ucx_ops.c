/*
 * softdoca provider `ucx`, data operations: writes, reads, atomics, sends; the flush gate that orders
 * them. The design is described at the top of ucx_provider.c.
 */
#define _GNU_SOURCE
#include "ucx_internal.h"

/* ------------------------------------------------------------------ ops */
struct uop *ux_op_new(struct sd_prov *p, struct uconn *c, enum op_type t, void *op_ctx)
{
	struct uop *o = p->free_ops;

	if (o)
		p->free_ops = o->next;
	else if (!(o = malloc(sizeof(*o))))
		return NULL;
	memset(o, 0, offsetof(struct uop, priv));
	o->p = p;
	o->c = c;
	o->w = c->w;
	o->type = t;
	o->op_ctx = op_ctx;
	o->start_ns = now_ns();
	/* on the conn's outstanding list, oldest first */
	o->prev = c->outstanding_tail;
	if (c->outstanding_tail)
		c->outstanding_tail->next = o;
	else
		c->outstanding = o;
	c->outstanding_tail = o;
	o->on_list = 1;
	return o;
}

void ux_op_unlink(struct uop *o)
{
	struct uconn *c = o->c;

	if (!o->on_list)
		return;
	if (o->prev)
		o->prev->next = o->next;
	else
		c->outstanding = o->next;
	if (o->next)
		o->next->prev = o->prev;
	else
		c->outstanding_tail = o->prev;
	o->next = o->prev = NULL;
	o->on_list = 0;
}

void ux_op_to_done(struct uop *o)
{
	struct sd_prov *p = o->p;

	ux_op_unlink(o);
	o->next = NULL;
	if (p->done_tail)
		p->done_tail->next = o;
	else
		p->done_head = o;
	p->done_tail = o;
}

static void op_finish_local(struct uop *o)
{
	struct uconn *c = o->c;

	if (o->type == OP_IFLUSH) {
		if (o->status == DOCA_SUCCESS && o->flush_seq > c->flush_done)
			c->flush_done = o->flush_seq;
		c->flush_inflight--;
		ux_conn_kick(c);
	}
	if (o->need_remote && o->status == DOCA_SUCCESS && c->flush_done < o->wait_seq &&
	    c->state != CS_FAILED) {
		/* locally complete; wait for a flush issued after it */
		o->gnext = c->await_head;
		c->await_head = o;
		ux_conn_kick(c);
		return;
	}
	if (c->state == CS_FAILED && o->status == DOCA_SUCCESS && o->type != OP_IFLUSH && o->need_remote)
		o->status = c->fail_status;
	ux_op_to_done(o);
}

static void sub_done(struct uop *o, ucs_status_t s)
{
	if (o->orphan || o->early) {
		o->pending--; /* already reported: only the memory is left (see ux_progress) */
		return;
	}
	if (s != UCS_OK && o->status == DOCA_SUCCESS)
		o->status = (o->c->state == CS_FAILED && o->c->fail_status) ? o->c->fail_status : map_status(s);
	if (--o->pending == 0)
		op_finish_local(o);
}

static void send_cb(void *req, ucs_status_t s, void *user)
{
	UX.request_free(req);
	sub_done(user, s);
}

/* Account the result of an *_nbx call. */
static void track(struct uop *o, ucs_status_ptr_t r)
{
	if (r == NULL)
		return;
	if (UCS_PTR_IS_ERR(r)) {
		if (o->status == DOCA_SUCCESS)
			o->status = map_status(UCS_PTR_STATUS(r));
		return;
	}
	o->pending++;
}

static void param_init(ucp_request_param_t *rp, struct uop *o)
{
	memset(rp, 0, sizeof(*rp));
	rp->op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	rp->cb.send = send_cb;
	rp->user_data = o;
}

void ux_issue_flush(struct uconn *c)
{
	struct uop *o;
	ucp_request_param_t rp;

	if (!c->ep || c->state == CS_FAILED)
		return;
	o = ux_op_new(c->p, c, OP_IFLUSH, NULL);
	if (!o)
		return; /* retried at the next progress */
	o->flush_seq = ++c->flush_issued;
	c->dirty = 0;
	c->flush_inflight++;
	o->pending = 1;
	param_init(&rp, o);
	track(o, UX.ep_flush_nbx(c->ep, &rp));
	sub_done(o, UCS_OK);
}

static ucp_rkey_h rkey_for(struct uconn *c, struct sd_prov_rkey *rk, doca_error_t *err)
{
	ucs_status_t s;
	ucp_rkey_h h;

	for (int i = 0; i < c->nrkc; i++)
		if (c->rkc[i].rk == rk)
			return c->rkc[i].h;
	if (c->nrkc == c->caprkc) {
		int n = c->caprkc ? c->caprkc * 2 : 8;
		struct rkcache *r = realloc(c->rkc, (size_t)n * sizeof(*r));
		if (!r) {
			*err = DOCA_ERROR_NO_MEMORY;
			return NULL;
		}
		c->rkc = r;
		c->caprkc = n;
	}
	s = UX.ep_rkey_unpack(c->ep, rk->packed, &h);
	if (s != UCS_OK) {
		*err = DOCA_ERROR_INVALID_VALUE;
		return NULL;
	}
	c->rkc[c->nrkc].rk = rk;
	c->rkc[c->nrkc].h = h;
	c->nrkc++;
	return h;
}

void ux_rkc_clear(struct uconn *c)
{
	for (int i = 0; i < c->nrkc; i++)
		UX.rkey_destroy(c->rkc[i].h);
	free(c->rkc);
	c->rkc = NULL;
	c->nrkc = c->caprkc = 0;
}

/* Issue a gated op now (its flush has completed). */
void ux_issue_gated(struct uop *o)
{
	struct uconn *c = o->c;
	ucp_request_param_t rp;
	doca_error_t e = DOCA_SUCCESS;
	ucp_rkey_h h;

	if (o->gate_ref)
		o->gate_ref = 0; /* the submitter's guard becomes this one */
	else
		o->pending++; /* guard */
	param_init(&rp, o);
	switch (o->type) {
	case OP_SEND:
	case OP_WIMM:
	case OP_CTRL:
		if (o->niov > 0 && o->total > 0) {
			rp.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
			rp.datatype = ucp_dt_make_iov();
			track(o, UX.am_send_nbx(c->ep, SD_UCX_AM_ID, &o->hdr, sizeof(o->hdr), o->uiov, (size_t)o->niov,
						 &rp));
		} else {
			if (o->hdr.type == AM_CM_REQ) {
				rp.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
				rp.flags = UCP_AM_SEND_FLAG_REPLY;
			}
			track(o, UX.am_send_nbx(c->ep, SD_UCX_AM_ID, &o->hdr, sizeof(o->hdr),
						o->hdr.priv_len ? o->priv : NULL, o->hdr.priv_len, &rp));
		}
		break;
	case OP_READ: {
		uint64_t off = 0;

		h = rkey_for(c, o->rk, &e);
		if (!h)
			break;
		for (int i = 0; i < o->niov; i++) {
			if (!o->liov[i].len)
				continue;
			track(o, UX.get_nbx(c->ep, o->liov[i].addr, o->liov[i].len, o->raddr + off, h, &rp));
			off += o->liov[i].len;
		}
		break;
	}
	case OP_FADD:
	case OP_CSWAP:
		h = rkey_for(c, o->rk, &e);
		if (!h)
			break;
		rp.op_attr_mask |= UCP_OP_ATTR_FIELD_REPLY_BUFFER | UCP_OP_ATTR_FIELD_DATATYPE;
		rp.datatype = ucp_dt_make_contig(8);
		rp.reply_buffer = o->result;
		if (o->type == OP_CSWAP)
			*o->result = o->cmp_result; /* in: compare; out: the old value */
		track(o, UX.atomic_op_nbx(c->ep, o->type == OP_FADD ? UCP_ATOMIC_OP_ADD : UCP_ATOMIC_OP_CSWAP,
					  &o->operand, 1, o->raddr, h, &rp));
		break;
	case OP_FLUSH:
		track(o, UX.ep_flush_nbx(c->ep, &rp));
		break;
	default:
		break;
	}
	if (e != DOCA_SUCCESS && o->status == DOCA_SUCCESS)
		o->status = e;
	sub_done(o, UCS_OK);
}

static void gate_push(struct uconn *c, struct uop *o)
{
	if (c->dirty)
		ux_issue_flush(c);
	if (c->wb)
		ux_amw_send(c); /* the batches not sent yet leave now, as the window allows */
	o->wait_seq = c->flush_issued;
	o->amw_seq = c->amw_sent + c->amw_queued; /* and every batch before it is acknowledged */
	o->gated = 1;
	o->gnext = NULL;
	if (c->gate_tail)
		c->gate_tail->gnext = o;
	else
		c->gate_head = o;
	c->gate_tail = o;
}

void ux_gate_pump(struct uconn *c)
{
	while (c->gate_head && c->gate_head->wait_seq <= c->flush_done && c->gate_head->amw_seq <= c->amw_acked &&
	       c->ep && c->state != CS_FAILED) {
		struct uop *o = c->gate_head;

		c->gate_head = o->gnext;
		if (!c->gate_head)
			c->gate_tail = NULL;
		o->gated = 0;
		o->gnext = NULL;
		ux_issue_gated(o);
	}
}

/* Submit an op that must follow earlier writes / queued ops. */
static void submit_ordered(struct uconn *c, struct uop *o)
{
	if (!c->dirty && !c->gate_head && !c->wb && c->amw_acked == c->amw_sent && c->state != CS_FAILED && c->ep) {
		ux_issue_gated(o);
		return;
	}
	gate_push(c, o);
	ux_gate_pump(c);
}

/* ------------------------------------------------------------------ data ops */
static doca_error_t conn_ready(struct uconn *c)
{
	if (!c)
		return DOCA_ERROR_INVALID_VALUE;
	if (c->closed_by_user || c->state == CS_CLOSING)
		return DOCA_ERROR_BAD_STATE;
	if (c->state == CS_FAILED)
		return c->fail_status ? c->fail_status : DOCA_ERROR_CONNECTION_RESET;
	if (c->state != CS_ESTABLISHED)
		return DOCA_ERROR_NOT_CONNECTED;
	return DOCA_SUCCESS;
}

static doca_error_t iov_total(const struct sd_prov_iov *iov, int niov, size_t *total)
{
	size_t t = 0;

	if (niov < 0 || niov > MAX_IOV || (niov && !iov))
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

/* softdoca's checks where the transport has none: the key's owner, bounds, rights. */
static doca_error_t rcheck(struct uconn *c, struct sd_prov_rkey *rk, uint64_t raddr, uint64_t len, uint32_t need)
{
	if (!rk)
		return DOCA_ERROR_INVALID_VALUE;
	if (rk->owner != c->peer_uid)
		return DOCA_ERROR_NOT_PERMITTED; /* a key of another peer */
	if (raddr < rk->base || raddr + len < raddr || raddr - rk->base > rk->len || len > rk->len - (raddr - rk->base))
		return DOCA_ERROR_NOT_PERMITTED;
	if ((rk->access & need) != need)
		return DOCA_ERROR_NOT_PERMITTED;
	return DOCA_SUCCESS;
}

static void issue_puts(struct uop *o, const struct sd_prov_iov *iov, int niov, ucp_rkey_h h)
{
	struct uconn *c = o->c;
	ucp_request_param_t rp;
	uint64_t off = 0;

	param_init(&rp, o);
	for (int i = 0; i < niov; i++) {
		if (!iov[i].len)
			continue;
		if (iov[i].mr) {
			rp.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
			rp.memh = iov[i].mr->memh;
		} else {
			rp.op_attr_mask &= ~(uint32_t)UCP_OP_ATTR_FIELD_MEMH;
		}
		track(o, UX.put_nbx(c->ep, iov[i].addr, iov[i].len, o->raddr + off, h, &rp));
		off += iov[i].len;
	}
	c->dirty = 1;
}

doca_error_t ux_write(struct sd_prov_conn *pc, const struct sd_prov_iov *iov, int niov, struct sd_prov_rkey *rk,
		      uint64_t raddr, void *op_ctx)
{
	struct uconn *c = (struct uconn *)pc;
	doca_error_t e = conn_ready(c);
	size_t total = 0;
	ucp_rkey_h h;
	struct uop *o;

	if (e || (e = iov_total(iov, niov, &total)) || (e = rcheck(c, rk, raddr, total, DOCA_ACCESS_FLAG_RDMA_WRITE)))
		return e;
	if (ux_amw_eligible(c, total))
		return ux_amw_write(c, iov, niov, rk, raddr, total, op_ctx); /* an entry of a batch (ucx_amw.c) */
	h = rkey_for(c, rk, &e);
	if (!h)
		return e;
	o = ux_op_new(c->p, c, OP_WRITE, op_ctx);
	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	o->raddr = raddr;
	o->need_remote = 1;
	o->wait_seq = c->flush_issued + 1;
	o->pending = 1;
	issue_puts(o, iov, niov, h);
	sub_done(o, UCS_OK);
	return DOCA_SUCCESS;
}

doca_error_t ux_read(struct sd_prov_conn *pc, const struct sd_prov_iov *iov, int niov, struct sd_prov_rkey *rk,
		     uint64_t raddr, void *op_ctx)
{
	struct uconn *c = (struct uconn *)pc;
	doca_error_t e = conn_ready(c);
	size_t total = 0;
	struct uop *o;

	if (e || (e = iov_total(iov, niov, &total)) || (e = rcheck(c, rk, raddr, total, DOCA_ACCESS_FLAG_RDMA_READ)))
		return e;
	if (!rkey_for(c, rk, &e))
		return e;
	o = ux_op_new(c->p, c, OP_READ, op_ctx);
	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	o->rk = rk;
	o->raddr = raddr;
	o->niov = niov;
	memcpy(o->liov, iov, (size_t)niov * sizeof(*iov));
	submit_ordered(c, o);
	return DOCA_SUCCESS;
}

static doca_error_t atomic(struct uconn *c, enum op_type t, struct sd_prov_rkey *rk, uint64_t raddr, uint64_t x,
			   uint64_t swap, uint64_t *result, void *op_ctx)
{
	doca_error_t e = conn_ready(c);
	struct uop *o;

	if (e)
		return e;
	if (!result || (raddr & 7))
		return DOCA_ERROR_INVALID_VALUE;
	if ((e = rcheck(c, rk, raddr, 8, DOCA_ACCESS_FLAG_RDMA_ATOMIC)))
		return e;
	if (!rkey_for(c, rk, &e))
		return e;
	o = ux_op_new(c->p, c, t, op_ctx);
	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	o->rk = rk;
	o->raddr = raddr;
	o->operand = x;       /* add, or compare */
	o->cmp_result = swap; /* cswap: the swap value, loaded into the reply buffer */
	o->result = result;
	submit_ordered(c, o);
	return DOCA_SUCCESS;
}

doca_error_t ux_fadd(struct sd_prov_conn *pc, struct sd_prov_rkey *rk, uint64_t raddr, uint64_t add,
		     uint64_t *result, void *op_ctx)
{
	return atomic((struct uconn *)pc, OP_FADD, rk, raddr, add, 0, result, op_ctx);
}

doca_error_t ux_cswap(struct sd_prov_conn *pc, struct sd_prov_rkey *rk, uint64_t raddr, uint64_t cmp,
		      uint64_t swap, uint64_t *result, void *op_ctx)
{
	return atomic((struct uconn *)pc, OP_CSWAP, rk, raddr, cmp, swap, result, op_ctx);
}

static struct uop *msg_op(struct uconn *c, enum op_type t, enum am_type at, const uint32_t *imm, void *op_ctx)
{
	struct uop *o = ux_op_new(c->p, c, t, op_ctx);

	if (!o)
		return NULL;
	o->hdr.magic = AM_MAGIC;
	o->hdr.type = (uint8_t)at;
	o->hdr.dst = c->peer_id;
	o->hdr.src = c->id;
	o->hdr.uid = c->p->uid;
	o->hdr.seq = ++c->tx_seq;
	if (imm) {
		o->hdr.flags = AMF_IMM;
		o->hdr.imm = *imm;
	}
	return o;
}

doca_error_t ux_send(struct sd_prov_conn *pc, const struct sd_prov_iov *iov, int niov, const uint32_t *imm,
		     void *op_ctx)
{
	struct uconn *c = (struct uconn *)pc;
	doca_error_t e = conn_ready(c);
	size_t total = 0;
	struct uop *o;

	if (e || (e = iov_total(iov, niov, &total)))
		return e;
	o = msg_op(c, OP_SEND, AM_SEND, imm, op_ctx);
	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	for (int i = 0; i < niov; i++) {
		o->uiov[i].buffer = iov[i].addr;
		o->uiov[i].length = iov[i].len;
	}
	o->niov = niov;
	o->total = total;
	submit_ordered(c, o);
	return DOCA_SUCCESS;
}

doca_error_t ux_write_imm(struct sd_prov_conn *pc, const struct sd_prov_iov *iov, int niov,
			  struct sd_prov_rkey *rk, uint64_t raddr, uint32_t imm, void *op_ctx)
{
	struct uconn *c = (struct uconn *)pc;
	doca_error_t e = conn_ready(c);
	size_t total = 0;
	ucp_rkey_h h;
	struct uop *o;

	if (e || (e = iov_total(iov, niov, &total)) || (e = rcheck(c, rk, raddr, total, DOCA_ACCESS_FLAG_RDMA_WRITE)))
		return e;
	h = rkey_for(c, rk, &e);
	if (!h)
		return e;
	o = msg_op(c, OP_WIMM, AM_WIMM, &imm, op_ctx);
	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	o->raddr = raddr;
	o->pending = 1;          /* guard over the puts, held until the immediate is issued */
	o->gate_ref = 1;
	issue_puts(o, iov, niov, h);
	submit_ordered(c, o);    /* the immediate: after a flush that covers the puts */
	return DOCA_SUCCESS;
}

doca_error_t ux_flush(struct sd_prov_conn *pc, void *op_ctx)
{
	struct uconn *c = (struct uconn *)pc;
	doca_error_t e = conn_ready(c);
	struct uop *o;

	if (e)
		return e;
	o = ux_op_new(c->p, c, OP_FLUSH, op_ctx);
	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	submit_ordered(c, o);
	return DOCA_SUCCESS;
}

void ux_rx_resume(struct sd_prov_conn *pc)
{
	struct uconn *c = (struct uconn *)pc;

	if (!c)
		return;
	c->rx_held = 0;
	ux_conn_kick(c);
}
