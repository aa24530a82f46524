/*
 * softdoca provider `ucx`, links: the one endpoint between two instances that their address-made
 * connections share. The design is described at the top of ucx_provider.c.
 */
#define _GNU_SOURCE
#include "ucx_internal.h"

/* ------------------------------------------------------------------ links
 * UCP pairs the endpoints that two workers create to each other's address in
 * the order each side created them (per remote worker: the k-th on one side
 * is connected to the k-th on the other). Two processes that set up several
 * connections at once create them in different orders, so one endpoint per
 * connection would cross them: connection X's puts would be served, and
 * acknowledged, by the endpoint of another connection Z, and X would hang
 * once Z closed (seen: a write of the transfer engine waiting for a flush
 * that never completed). So every connection set up from worker addresses
 * between two instances uses one endpoint: the link. Both sides create their
 * link endpoints in step (the k-th link with the k-th), which holds because a
 * link closes only when both sides agree: the side whose last connection left
 * asks (UNLINK, naming its link), the other answers OK (it has none left
 * either, and closes its own) or BUSY (a new connection uses it: both keep
 * it). A connection that comes while its side asks waits for the answer.
 * Both asking at once is agreement. No answer within timeout_ms: the peer is
 * gone and the link closes. Where only one side sees a link fail (UCX's peer
 * error, an op's deadline), the two may be out of step once: the next
 * connection's ops get no completion, their deadline fails that link too, and
 * both sides start again in step. Loopback (the same instance) and CM
 * connections keep endpoints of their own: UCP pairs neither by order. */

/* The open link of worker w to the peer instance uid's worker of address hash ahash. */
struct ulink *ux_link_find(struct uworker *w, uint64_t uid, uint32_t ahash)
{
	for (struct ulink *l = w->p->links; l; l = l->next)
		if (l->w == w && l->uid == uid && l->ahash == ahash && l->state != LK_CLOSING)
			return l;
	return NULL;
}

/* The link a link message names: UNLINK by the endpoint it came on, answers by our nonce. */
static struct ulink *link_of_msg(struct uworker *w, const struct am_hdr *h, ucp_ep_h reply)
{
	for (struct ulink *l = w->p->links; l; l = l->next)
		if (l->w == w && l->uid == h->uid && l->state != LK_CLOSING &&
		    (h->type == AM_UNLINK ? l->ep == reply : l->nonce == h->seq))
			return l;
	return NULL;
}

struct lmsg {
	struct am_hdr h;
	struct ulink *l;              /* NULL: an answer sent on a reply ep (nothing to count) */
};

static void lmsg_cb(void *req, ucs_status_t s, void *user)
{
	struct lmsg *m = user;

	(void)s;
	UX.request_free(req);
	if (m->l) {
		m->l->sends--;
		m->l->p->kick_any = 1;
	}
	free(m);
}

/* A link message (UNLINK with the reply flag; answers on the ep UNLINK came on). */
static void link_msg(struct sd_prov *p, ucp_ep_h ep, struct ulink *l, enum am_type t, uint64_t nonce)
{
	struct lmsg *m = calloc(1, sizeof(*m));
	ucp_request_param_t rp;
	ucs_status_ptr_t r;

	if (!m)
		return; /* unanswered: the asking side's deadline closes the link */
	m->h.magic = AM_MAGIC;
	m->h.type = (uint8_t)t;
	m->h.uid = p->uid;
	m->h.seq = nonce;
	m->l = l;
	memset(&rp, 0, sizeof(rp));
	rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	rp.cb.send = lmsg_cb;
	rp.user_data = m;
	if (t == AM_UNLINK) {
		rp.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
		rp.flags = UCP_AM_SEND_FLAG_REPLY;
	}
	r = UX.am_send_nbx(ep, SD_UCX_AM_ID, &m->h, sizeof(m->h), NULL, 0, &rp);
	if (r == NULL || UCS_PTR_IS_ERR(r)) {
		free(m);
		return;
	}
	if (l)
		l->sends++;
}

static void link_close_cb(void *req, ucs_status_t s, void *user)
{
	struct ulink *l = user;

	(void)s;
	UX.request_free(req);
	l->close_req = NULL;
	l->p->kick_any = 1;
}

/* Close the link (its ep is closed by ux_link_pump: never inside a UCX callback). */
void ux_link_close(struct ulink *l, int force)
{
	l->state = LK_CLOSING;
	l->force |= force;
	l->p->kick_any = 1;
}

void ux_link_close_ep(struct ulink *l)
{
	l->close_req = ux_ep_close(l->p, l->ep, l->force, link_close_cb, l);
	l->ep = NULL;
}

/* The link's last connection left: ask the peer whether it may close. */
static void link_unlink(struct ulink *l)
{
	l->state = LK_UNLINKING;
	l->deadline_ns = now_ns() + l->p->timeout_ns;
	link_msg(l->p, l->ep, l, AM_UNLINK, l->nonce);
}

void ux_link_put(struct uconn *c)
{
	struct ulink *l = c->link;

	if (c->paddr) { /* it never got its link */
		free(c->paddr);
		c->paddr = NULL;
		c->p->link_waiters--;
	}
	c->ep = NULL;
	c->link = NULL;
	if (!l)
		return;
	/* UCX may still hold requests of its ops: they only free memory now (see ux_progress) */
	while (c->outstanding) {
		struct uop *o = c->outstanding;

		o->gnext = NULL;
		o->gated = 0;
		if (o->status == DOCA_SUCCESS)
			o->status = DOCA_ERROR_CONNECTION_RESET;
		o->early = 1;
		ux_op_to_done(o);
	}
	if (--l->refs == 0 && l->state == LK_OPEN)
		link_unlink(l);
}

static void link_err_cb(void *arg, ucp_ep_h ep, ucs_status_t s);

struct ulink *ux_link_open(struct uworker *w, uint64_t uid, int same_host, const void *addr, size_t alen,
			   struct sd_prov_why *why)
{
	struct sd_prov *p = w->p;
	struct ulink *l = calloc(1, sizeof(*l));
	ucp_ep_params_t ep;
	ucs_status_t s;
	static uint64_t seq;

	if (!l) {
		WHY(why, "out of memory");
		return NULL;
	}
	l->p = p;
	l->w = w;
	l->uid = uid;
	l->ahash = ux_addr_hash(addr, alen);
	l->same_host = same_host;
	l->nonce = p->uid ^ (++seq * 0x9e3779b97f4a7c15ull) ^ now_ns();
	ep = ux_ep_params_for(same_host, link_err_cb, l);
	ep.field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
	ep.address = (const ucp_address_t *)addr;
	s = UX.ep_create(w->h, &ep, &l->ep);
	if (s != UCS_OK) {
		WHY(why, "ucx: cannot reach the peer's worker address: %s", ustr(s));
		free(l);
		return NULL;
	}
	p->eps++;
	l->next = p->links;
	p->links = l;
	return l;
}

void ux_link_attach(struct uconn *c, struct ulink *l)
{
	c->link = l;
	c->ep = l->ep;
	l->refs++;
	l->deadline_ns = 0;
}

/* A link failed (UCX reported the peer gone, or an op of one of its connections got no completion): every
 * connection on it fails. */
void ux_link_fail(struct ulink *l, ucs_status_t s, const char *why)
{
	if (l->state == LK_CLOSING)
		return;
	l->state = LK_CLOSING; /* its connections' ux_link_put must not ask the peer */
	for (struct uconn *c = l->p->conns; c; c = c->next) {
		if (c->link != l)
			continue;
		if (c->state == CS_FAILED || c->state == CS_CLOSING)
			ux_link_put(c);
		else if (c->state == CS_ESTABLISHED)
			ux_conn_fail(c, 1, DOCA_ERROR_CONNECTION_RESET, SD_PROV_FAIL_LOST, "%s%s", why,
				     s ? ustr(s) : "");
		else if (s == UCS_ERR_TIMED_OUT || s == UCS_ERR_ENDPOINT_TIMEOUT)
			ux_conn_fail(c, 1, DOCA_ERROR_TIME_OUT, SD_PROV_FAIL_TIMEOUT, "no answer while connecting: %s",
				     ustr(s));
		else
			ux_conn_fail(c, 1, DOCA_ERROR_CONNECTION_ABORTED, SD_PROV_FAIL_REFUSED,
				     "connection refused or unreachable: %s", s ? ustr(s) : why);
	}
	ux_link_close(l, 1);
}

static void link_err_cb(void *arg, ucp_ep_h ep, ucs_status_t s)
{
	struct ulink *l = arg;

	(void)ep;
	if (l->state == LK_UNLINKING && !l->refs) { /* the peer closed its side: that is an answer too */
		ux_link_close(l, 1);
		return;
	}
	ux_link_fail(l, s, "connection lost: ");
}

/* UNLINK / OK / BUSY arrived (in the AM callback). */
void ux_link_on_msg(struct uworker *w, const struct am_hdr *h, const ucp_am_recv_param_t *param)
{
	struct sd_prov *p = w->p;
	ucp_ep_h reply = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : NULL;
	struct ulink *l = link_of_msg(w, h, reply);

	if (h->type == AM_UNLINK) {
		int busy;

		if (!reply)
			return;
		/* ours is the endpoint it came on (the steps match): busy while a connection uses it; not ours or
		 * none: we have nothing to keep */
		busy = l && l->ep == reply && l->refs > 0;
		link_msg(p, reply, NULL, busy ? AM_UNLINK_BUSY : AM_UNLINK_OK, h->seq);
		if (l && l->ep == reply && !busy)
			ux_link_close(l, 0); /* both agree (or both asked): the answer leaves first */
		return;
	}
	if (!l || l->state != LK_UNLINKING || l->nonce != h->seq)
		return;
	if (h->type == AM_UNLINK_OK) {
		ux_link_close(l, 0);
	} else {
		l->state = LK_OPEN;
		l->deadline_ns = now_ns() + p->timeout_ns; /* idle still: ask again later */
	}
	p->kick_any = 1;
}

/* Links' deadlines, closes that finished, and connections waiting for their link. */
void ux_link_pump(struct sd_prov *p, uint64_t now)
{
	for (struct ulink **pp = &p->links; *pp;) {
		struct ulink *l = *pp;

		if (l->state == LK_CLOSING && l->ep)
			ux_link_close_ep(l);
		if (l->state == LK_CLOSING && !l->close_req && !l->sends) {
			*pp = l->next;
			free(l);
			continue;
		}
		if (l->state == LK_UNLINKING && now > l->deadline_ns)
			ux_link_close(l, 1); /* no answer: the peer is gone */
		else if (l->state == LK_OPEN && !l->refs && l->deadline_ns && now > l->deadline_ns)
			link_unlink(l);
		pp = &l->next;
	}
	if (!p->link_waiters)
		return;
	for (struct uconn *c = p->conns; c; c = c->next) {
		struct sd_prov_why why = {{0}};
		struct ulink *l;

		if (!c->paddr)
			continue;
		l = ux_link_find(c->w, c->peer_uid, c->peer_ahash);
		if (l && l->state == LK_UNLINKING)
			continue;
		if (!l)
			l = ux_link_open(c->w, c->peer_uid, c->same_host, c->paddr, c->paddr_len, &why);
		free(c->paddr);
		c->paddr = NULL;
		p->link_waiters--;
		if (!l) {
			ux_conn_fail(c, 1, DOCA_ERROR_CONNECTION_ABORTED, SD_PROV_FAIL_REFUSED, "%s", why.msg);
			continue;
		}
		ux_link_attach(c, l);
		ux_send_ctrl(c, AM_HELLO, NULL, 0);
		ux_conn_kick(c);
	}
}
