/*
 * softdoca provider `ucx`, incoming active messages: handshakes, sends and immediates delivered in
 * order, rndv placement. The design is described at the top of ucx_provider.c.
 */
#define _GNU_SOURCE
#include "ucx_internal.h"

/* ------------------------------------------------------------------ AM rx */
static void rxq_insert(struct uconn *c, struct urx *x)
{
	struct urx **pp = &c->rxq;

	while (*pp && (*pp)->h.seq < x->h.seq)
		pp = &(*pp)->next;
	x->next = *pp;
	*pp = x;
}

/* Offer an eager message now (we are inside progress()). 0: held, queue it. */
static int deliver_now(struct uconn *c, const struct am_hdr *h, const void *data, size_t len)
{
	struct sd_prov *p = c->p;
	struct sd_prov_rx rx = {
		.kind = h->type == AM_WIMM ? SD_PROV_RX_WRITE_IMM : SD_PROV_RX_SEND,
		.has_imm = !!(h->flags & AMF_IMM),
		.imm = h->imm,
		.len = len,
		.data = data,
	};
	struct sd_prov_iov dst[MAX_IOV];
	int ndst = MAX_IOV;
	void *rx_ctx = NULL;
	enum sd_prov_rx_answer a = p->cbs.rx(p->cbs.arg, (struct sd_prov_conn *)c, c->ctx, &rx, dst, &ndst, &rx_ctx);
	size_t room = 0, off = 0;

	if (a == SD_PROV_RX_HOLD) {
		c->rx_held = 1;
		return 0;
	}
	c->rx_expect++;
	if (a != SD_PROV_RX_PLACE)
		return 1;
	if (ndst < 0 || ndst > MAX_IOV)
		ndst = 0;
	for (int i = 0; i < ndst; i++)
		room += dst[i].len;
	if (room < len) {
		p->cbs.rx_done(p->cbs.arg, rx_ctx, DOCA_ERROR_TOO_BIG, 0);
		return 1;
	}
	for (int i = 0; i < ndst && off < len; i++) {
		size_t k = dst[i].len < len - off ? dst[i].len : len - off;

		memcpy(dst[i].addr, (const uint8_t *)data + off, k);
		off += k;
	}
	p->cbs.rx_done(p->cbs.arg, rx_ctx, DOCA_SUCCESS, off);
	return 1;
}

ucs_status_t ux_am_cb(void *arg, const void *header, size_t hlen, void *data, size_t len,
		      const ucp_am_recv_param_t *param)
{
	struct uworker *w = arg;
	struct sd_prov *p = w->p;
	struct am_hdr h;
	struct uconn *c = NULL;
	int rndv = !!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV);
	int persist = !!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA);
	struct urx *x;

	if (hlen != sizeof(h))
		return UCS_OK; /* not ours: drop */
	memcpy(&h, header, sizeof(h));
	if (h.magic != AM_MAGIC)
		return UCS_OK;
	if (h.type == AM_PROBE) {
		ux_probe_on_msg(w, &h);
		return UCS_OK;
	}
	if (h.type >= AM_UNLINK && h.type <= AM_UNLINK_BUSY) {
		ux_link_on_msg(w, &h, param);
		return UCS_OK;
	}
	if (h.type == AM_CM_REQ) {
		/* the server's conn is the one whose ep is the reply ep */
		if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP))
			return UCS_OK;
		for (struct uconn *k = p->conns; k; k = k->next)
			if (k->ep == param->reply_ep && k->state == CS_CM_WAIT_REQ) {
				c = k;
				break;
			}
		if (!c || rndv || len > SD_PROV_MAX_PRIV)
			return UCS_OK;
		c->peer_id = h.src;
		c->peer_uid = h.uid;
		c->priv_len = len;
		memcpy(c->priv, data, len);
		c->state = CS_CM_REQUESTED;
		c->cm_pending_event = AM_CM_REQ;
		ux_conn_kick(c);
		return UCS_OK;
	}
	c = ux_conn_lookup(p, h.dst);
	if (!c || c->w != w || c->state == CS_FAILED || c->state == CS_CLOSING)
		return UCS_OK; /* another worker's: not for this connection */
	switch (h.type) {
	case AM_HELLO:
		if (c->is_cm || rndv)
			return UCS_OK;
		if (c->peer_uid && c->peer_uid != h.uid)
			return UCS_OK;
		c->hello_seen = 1;
		c->peer_uid = h.uid;
		c->peer_id = h.src;
		ux_conn_kick(c);
		return UCS_OK;
	case AM_CM_ACCEPT:
	case AM_CM_REJECT:
		if (!c->cm_client || c->state != CS_CONNECTING || rndv || len > SD_PROV_MAX_PRIV)
			return UCS_OK;
		c->peer_id = h.src;
		c->peer_uid = h.uid;
		c->priv_len = len;
		memcpy(c->priv, data, len);
		c->cm_pending_event = h.type;
		ux_conn_kick(c);
		return UCS_OK;
	case AM_CM_RTU:
		if (c->state == CS_CM_ACCEPTED) {
			c->cm_pending_event = AM_CM_RTU;
			ux_conn_kick(c);
		}
		return UCS_OK;
	case AM_BYE:
		c->bye_seen = 1;
		c->cm_pending_event = AM_BYE;
		ux_conn_kick(c);
		return UCS_OK;
	case AM_WRITEV:
	case AM_WACK:
		if (!rndv) /* a batch may overtake the HELLO: the target's checks hold in any state */
			ux_amw_on_msg(c, &h, data, len);
		return UCS_OK;
	case AM_SEND:
	case AM_WIMM:
		break;
	default:
		return UCS_OK;
	}
	if (h.seq < c->rx_expect)
		return UCS_OK; /* duplicate */
	if (!rndv && h.seq == c->rx_expect && !c->rxq && !c->rx_held && !c->rx_placing && c->state == CS_ESTABLISHED &&
	    deliver_now(c, &h, data, len))
		return UCS_OK; /* the common case: in order, a receive posted, no copy kept */
	x = calloc(1, sizeof(*x));
	if (!x)
		return UCS_OK; /* dropped: the sender's op still completes; a receive times out upstairs */
	x->h = h;
	x->len = len;
	x->rndv = rndv;
	if (rndv || persist) {
		x->data = data;
		x->ucx_owned = 1;
	} else if (len) {
		x->data = malloc(len);
		if (!x->data) {
			free(x);
			return UCS_OK;
		}
		memcpy(x->data, data, len);
	}
	rxq_insert(c, x);
	ux_conn_kick(c);
	return x->ucx_owned ? UCS_INPROGRESS : UCS_OK;
}


static void place_cb(void *req, ucs_status_t s, size_t len, void *user)
{
	struct uplace *pl = user;

	(void)len;
	UX.request_free(req);
	pl->st = s;
	pl->next = pl->p->place_done;
	pl->p->place_done = pl;
	pl->p->kick_any = 1;
}

/* Offer queued messages of c, in order, one at a time. Returns callbacks run. */
int ux_rx_pump(struct uconn *c)
{
	struct sd_prov *p = c->p;
	int n = 0;

	while (c->rxq && c->rxq->h.seq == c->rx_expect && !c->rx_held && !c->rx_placing &&
	       c->state != CS_FAILED && c->state != CS_CLOSING) {
		struct urx *x = c->rxq;
		struct sd_prov_rx rx = {
			.kind = x->h.type == AM_WIMM ? SD_PROV_RX_WRITE_IMM : SD_PROV_RX_SEND,
			.has_imm = !!(x->h.flags & AMF_IMM),
			.imm = x->h.imm,
			.len = x->len,
			.data = x->rndv ? NULL : x->data,
		};
		struct sd_prov_iov dst[MAX_IOV];
		int ndst = MAX_IOV;
		void *rx_ctx = NULL;
		enum sd_prov_rx_answer a;

		a = p->cbs.rx(p->cbs.arg, (struct sd_prov_conn *)c, c->ctx, &rx, dst, &ndst, &rx_ctx);
		n++;
		if (a == SD_PROV_RX_HOLD) {
			c->rx_held = 1;
			break;
		}
		c->rxq = x->next;
		c->rx_expect++;
		if (a == SD_PROV_RX_PLACE) {
			size_t room = 0;

			if (ndst < 0 || ndst > MAX_IOV)
				ndst = 0;
			for (int i = 0; i < ndst; i++)
				room += dst[i].len;
			if (room < x->len) {
				if (x->ucx_owned)
					UX.am_data_release(c->w->h, x->data);
				else
					free(x->data);
				free(x);
				p->cbs.rx_done(p->cbs.arg, rx_ctx, DOCA_ERROR_TOO_BIG, 0);
				continue;
			}
			if (!x->rndv) {
				size_t off = 0;

				for (int i = 0; i < ndst && off < x->len; i++) {
					size_t k = dst[i].len < x->len - off ? dst[i].len : x->len - off;
					memcpy(dst[i].addr, (uint8_t *)x->data + off, k);
					off += k;
				}
				if (x->ucx_owned)
					UX.am_data_release(c->w->h, x->data);
				else
					free(x->data);
				free(x);
				p->cbs.rx_done(p->cbs.arg, rx_ctx, DOCA_SUCCESS, off);
				continue;
			}
			/* rendezvous: fetch straight into place */
			{
				struct uplace *pl = calloc(1, sizeof(*pl));
				ucp_request_param_t rp;
				ucs_status_ptr_t r;
				size_t left = x->len;
				int k = 0;

				if (!pl) {
					UX.am_data_release(c->w->h, x->data);
					free(x);
					p->cbs.rx_done(p->cbs.arg, rx_ctx, DOCA_ERROR_NO_MEMORY, 0);
					continue;
				}
				for (int i = 0; i < ndst && left; i++) {
					size_t m = dst[i].len < left ? dst[i].len : left;
					pl->iov[k].buffer = dst[i].addr;
					pl->iov[k].length = m;
					left -= m;
					k++;
				}
				pl->c = c;
				pl->conn_id = c->id;
				pl->rx_ctx = rx_ctx;
				pl->len = x->len;
				pl->p = p;
				memset(&rp, 0, sizeof(rp));
				rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
						  UCP_OP_ATTR_FIELD_DATATYPE;
				rp.cb.recv_am = place_cb;
				rp.user_data = pl;
				if (k == 1) { /* one buffer: contiguous (the common case) */
					rp.datatype = ucp_dt_make_contig(1);
					r = UX.am_recv_data_nbx(c->w->h, x->data, pl->iov[0].buffer, pl->iov[0].length,
								&rp);
				} else {
					rp.datatype = ucp_dt_make_iov();
					r = UX.am_recv_data_nbx(c->w->h, x->data, pl->iov, (size_t)k, &rp);
				}
				free(x);
				if (r == NULL || UCS_PTR_IS_ERR(r)) {
					doca_error_t st = r ? map_status(UCS_PTR_STATUS(r)) : DOCA_SUCCESS;
					size_t got = st ? 0 : pl->len;

					free(pl);
					p->cbs.rx_done(p->cbs.arg, rx_ctx, st, got);
					continue;
				}
				c->rx_placing = 1;
			}
			continue;
		}
		/* TAKEN */
		if (x->ucx_owned)
			UX.am_data_release(c->w->h, x->data);
		else
			free(x->data);
		free(x);
	}
	return n;
}
