/*
 * ofi provider: connections.
 *
 * OOB (conn_export / conn_connect). The address blob body: owner uid u64,
 * connection id u32, endpoint type u32, name length u32, flags u32, then the
 * name: the instance's RDM endpoint name (fi_getname), or for MSG providers
 * the instance's OOB passive endpoint (fi_passive_ep + fi_listen at open).
 * flags: bit 0 (ADDR_F_BELL): the instance has a doorbell (ofi_provider.c),
 * at the abstract AF_UNIX name derived from the owner uid; blobs from before
 * had 0 there (no doorbell: the peer is polled as before); other bits are
 * refused (DOCA_ERROR_UNSUPPORTED_VERSION).
 *  - RDM: conn_connect does fi_av_insert and sends HELLO (ids, uid); a side is
 *    ESTABLISHED once it connected and got the peer's HELLO naming the ids of
 *    the blob it was given.
 *  - MSG: both sides listen on their OOB passive endpoint; the side with the
 *    lower (uid, connection id) connects (fi_connect, private data: the ids and
 *    its uid), the other one accepts the request once its own conn_connect was
 *    called with a blob naming the requester (a request that arrives earlier
 *    is kept; one naming no connection of ours, or not matching the blob, is
 *    rejected). FI_CONNECTED on both sides: ESTABLISHED.
 * CM (listen / accept / reject / connect_addr): MSG providers only: a passive
 * endpoint per listener, private data through fi_connect / fi_accept /
 * fi_reject behind an 8-byte header (caps.max_priv = the provider's CM data
 * size less 24, at most 255). RDM providers (shm, efa, rxm) have no
 * connection manager: listen / connect_addr answer DOCA_ERROR_NOT_SUPPORTED
 * with the reason (use OOB), and caps lack SD_PROV_CAP_CM.
 *
 * Failure: MSG: FI_SHUTDOWN (peer closed or died: DISCONNECTED after a
 * conn_close of the peer, i.e. its BYE-less shutdown) and EQ errors
 * (ECONNREFUSED: refused / rejected); every deadline (set-up, the oldest op)
 * fails the connection (TIME_OUT while connecting, CONNECTION_RESET once
 * established) and every outstanding op with CONNECTION_RESET.
 */
#define _GNU_SOURCE
#include "ofi_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ADDR_BODY_FIXED 24
#define ADDR_F_BELL 1u
#define CMH 24 /* struct cmhdr */
enum { K_OOB_REQ = 1, K_CM_REQ, K_CM_ACC, K_CM_REJ };

struct cmhdr {
	uint32_t magic;
	uint8_t kind;
	uint8_t rsv[3];
	uint32_t dst, src;
	uint64_t uid;
};

static void emit(struct sd_prov_conn *c, enum sd_prov_conn_ev evk, doca_error_t st, enum sd_prov_fail reason,
		 const void *priv, size_t priv_len, const char *why)
{
	struct sd_prov *p = c->p;
	struct sd_prov_conn_event ev = { .ev = evk, .status = st, .reason = reason, .priv = priv,
					 .priv_len = priv_len, .why = why ? why : "" };

	if (c->user_closed)
		return;
	if (evk == SD_PROV_EV_FAILED || evk == SD_PROV_EV_DISCONNECTED || evk == SD_PROV_EV_REJECTED) {
		if (c->failed_reported)
			return;
		c->failed_reported = 1;
	}
	if (p->in_progress) {
		p->cbs.conn_event(p->cbs.arg, c, c->ctx, &ev);
		return;
	}
	/* outside progress (conn_connect): keep it for the next progress */
	c->ev_pending = evk;
	c->fail_status = st;
	c->fail_reason = reason;
	if (priv_len > sizeof(c->priv))
		priv_len = sizeof(c->priv);
	if (priv_len)
		memcpy(c->priv, priv, priv_len);
	c->priv_len = priv_len;
	snprintf(c->why, sizeof(c->why), "%s", why ? why : "");
	p->kick = 1;
}

void ofi_conn_fail(struct sd_prov_conn *c, doca_error_t st, enum sd_prov_fail reason, const char *fmt, ...)
{
	va_list ap;

	if (c->state == CS_FAILED || c->state == CS_DEAD)
		return;
	c->state = CS_FAILED;
	c->fail_status = st;
	c->fail_reason = reason;
	va_start(ap, fmt);
	vsnprintf(c->why, sizeof(c->why), fmt, ap);
	va_end(ap);
	c->ev_pending = -1; /* the teardown and the FAILED event: in ofi_conn_step */
	c->p->kick = 1;
}

void ofi_conn_established(struct sd_prov_conn *c)
{
	c->state = CS_ESTABLISHED;
	c->deadline_ns = 0;
	emit(c, SD_PROV_EV_ESTABLISHED, DOCA_SUCCESS, SD_PROV_FAIL_NONE, c->priv, c->priv_len, NULL);
	c->priv_len = 0;
}

/* ------------------------------------------------------------ MSG endpoints */
int ofi_msg_ep_setup(struct sd_prov_conn *c, struct fi_info *info)
{
	struct sd_prov *p = c->p;
	struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_FD };
	int rc;

	rc = fi_cq_open(p->domain, &cqa, &c->cq, c);
	if (rc == -FI_ENOSYS || rc == -FI_EINVAL) {
		cqa.wait_obj = FI_WAIT_NONE;
		rc = fi_cq_open(p->domain, &cqa, &c->cq, c);
	}
	if (rc) {
		c->cq = NULL;
		return rc;
	}
	if (cqa.wait_obj == FI_WAIT_FD)
		ofi_watch_fd(p, &c->cq->fid, &c->cq_fd);
	else
		p->poll_only = 1;
	rc = fi_endpoint(p->domain, info, &c->ep, c);
	if (rc) {
		c->ep = NULL;
		return rc;
	}
	rc = fi_ep_bind(c->ep, &p->eq->fid, 0);
	if (!rc)
		rc = fi_ep_bind(c->ep, &c->cq->fid, FI_TRANSMIT | FI_RECV);
	if (!rc)
		rc = fi_enable(c->ep);
	if (!rc) {
		c->nrxb = OFI_RX_MSG;
		rc = ofi_alloc_rx(p, c, c->nrxb, &c->rxb);
		if (rc)
			c->nrxb = 0;
	}
	return rc;
}

void ofi_msg_ep_teardown(struct sd_prov_conn *c)
{
	struct sd_prov *p = c->p;

	if (p->ch.ep_type != FI_EP_MSG) /* RDM: the endpoints are the instance's (struct ofi_txe) */
		return;
	if (c->ep && c->ep != p->ep)
		fi_close(&c->ep->fid);
	if (c->ep != p->ep)
		c->ep = NULL;
	if (c->rxb)
		ofi_free_rx(p, c->rxb, c->nrxb);
	c->rxb = NULL;
	c->nrxb = 0;
	if (c->cq && c->cq != p->cq) {
		ofi_unwatch_fd(p, c->cq_fd);
		fi_close(&c->cq->fid);
		c->cq = NULL;
		c->cq_fd = -1;
	}
}

/* MSG: a connection request kept in c->info (the peer's OOB connect that came
 * before our conn_connect, or an undecided CM request) that will not be
 * accepted after all. Its handle (fi_info.handle, FI_CLASS_CONNREQ) belongs to
 * the provider until fi_accept succeeds or fi_reject is called: fi_freeinfo
 * does not free it, nor does closing an endpoint opened from it (tcp 1.17:
 * struct tcpx_conn_handle and the accepted socket, which stays open: the peer
 * hears nothing until its timeout; verbs: struct vrb_connreq). fi_reject frees
 * it, refuses the peer where the endpoint did not take the socket yet, and
 * only frees it where it did. The passive endpoint must still be open. */
void ofi_conn_drop_request(struct sd_prov_conn *c)
{
	struct fid_pep *pep;

	if (!c->info)
		return;
	pep = c->listener ? c->listener->pep : (!c->is_cm ? c->p->oob_pep : NULL);
	if (pep && c->info->handle)
		fi_reject(pep, c->info->handle, NULL, 0);
	OFI.freeinfo(c->info);
	c->info = NULL;
}

static int cm_data_size(struct sd_prov *p, struct fid_pep *pep)
{
	size_t sz = 0, len = sizeof(sz);

	if (fi_getopt(&pep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &sz, &len) || sz < CMH) {
		p->max_priv = 0;
		return 0;
	}
	p->max_priv = sz - CMH < SD_PROV_MAX_PRIV ? sz - CMH : SD_PROV_MAX_PRIV;
	return 0;
}

/* MSG: the OOB passive endpoint (called at open) */
int ofi_msg_init(struct sd_prov *p)
{
	int rc = fi_passive_ep(p->fabric, p->info, &p->oob_pep, p);

	if (rc)
		return rc;
	rc = fi_pep_bind(p->oob_pep, &p->eq->fid, 0);
	if (!rc)
		rc = fi_listen(p->oob_pep);
	if (!rc) {
		p->oob_name_len = sizeof(p->oob_name);
		rc = fi_getname(&p->oob_pep->fid, p->oob_name, &p->oob_name_len);
	}
	if (!rc)
		cm_data_size(p, p->oob_pep);
	return rc;
}

static void fill_cmh(struct cmhdr *h, int kind, uint32_t dst, uint32_t src, uint64_t uid)
{
	memset(h, 0, sizeof(*h));
	h->magic = OFI_MAGIC;
	h->kind = (uint8_t)kind;
	h->dst = dst;
	h->src = src;
	h->uid = uid;
}

/* MSG, passive side of OOB: accept the kept request */
static void oob_accept(struct sd_prov_conn *c)
{
	struct cmhdr h;
	int rc;

	rc = ofi_msg_ep_setup(c, c->info);
	fill_cmh(&h, K_OOB_REQ, c->peer_id, c->id, c->p->uid);
	if (!rc)
		rc = fi_accept(c->ep, &h, sizeof(h));
	if (rc) { /* the handle is still the provider's: rejected (freed) */
		ofi_conn_drop_request(c);
	} else { /* fi_accept freed the handle */
		OFI.freeinfo(c->info);
		c->info = NULL;
	}
	if (rc)
		ofi_conn_fail(c, DOCA_ERROR_CONNECTION_ABORTED, SD_PROV_FAIL_REFUSED, "fi_accept: %s", ofi_str(rc));
	else
		c->state = CS_ACCEPTING;
}

static struct fi_info *active_info(struct sd_prov *p)
{
	struct fi_info *i = OFI.dupinfo(p->info);

	if (i && i->src_addr) { /* let the provider bind the source (loopback peers, other interfaces) */
		free(i->src_addr);
		i->src_addr = NULL;
		i->src_addrlen = 0;
	}
	return i;
}

/* ------------------------------------------------------------ OOB */
doca_error_t ofi_conn_create(struct sd_prov *p, void *ctx, struct sd_prov_conn **out)
{
	struct sd_prov_conn *c;

	if (!p || !out)
		return DOCA_ERROR_INVALID_VALUE;
	c = ofi_conn_alloc(p, ctx);
	if (!c)
		return DOCA_ERROR_NO_MEMORY;
	if (p->ch.ep_type == FI_EP_MSG) {
		c->ep = NULL;
		c->cq = NULL;
	}
	*out = c;
	return DOCA_SUCCESS;
}

doca_error_t ofi_conn_export(struct sd_prov_conn *c, void **blob, size_t *len)
{
	struct sd_prov *p;
	const uint8_t *name;
	size_t nl;
	uint32_t total;
	uint8_t *b;

	if (!c || !blob || !len)
		return DOCA_ERROR_INVALID_VALUE;
	p = c->p;
	name = p->ch.ep_type == FI_EP_MSG ? p->oob_name : p->name;
	nl = p->ch.ep_type == FI_EP_MSG ? p->oob_name_len : p->name_len;
	total = (uint32_t)(SD_PROV_BLOB_HDR_LEN + ADDR_BODY_FIXED + nl);
	b = malloc(total);
	if (!b)
		return DOCA_ERROR_NO_MEMORY;
	sd_prov_blob_begin(b, OFI_PROV_NAME, SD_PROV_BLOB_ADDR, total);
	ofi_put64(b + 32, p->uid);
	ofi_put32(b + 40, c->id);
	ofi_put32(b + 44, (uint32_t)p->ch.ep_type);
	ofi_put32(b + 48, (uint32_t)nl);
	ofi_put32(b + 52, p->ch.ep_type == FI_EP_RDM && p->bell_fd >= 0 ? ADDR_F_BELL : 0u);
	memcpy(b + 56, name, nl);
	sd_prov_blob_seal(b, total);
	*blob = b;
	*len = total;
	return DOCA_SUCCESS;
}

doca_error_t ofi_conn_connect(struct sd_prov_conn *c, const void *blob, size_t len, struct sd_prov_why *why)
{
	struct sd_prov *p;
	const uint8_t *b;
	size_t bl, nl;
	doca_error_t e;
	uint64_t uid;
	uint32_t id, type, flags;
	int rc;

	if (!c)
		return DOCA_ERROR_INVALID_VALUE;
	p = c->p;
	if (c->state != CS_NEW || c->connected_local || c->is_cm)
		return DOCA_ERROR_BAD_STATE;
	e = sd_prov_blob_check(blob, len, OFI_PROV_NAME, SD_PROV_BLOB_ADDR, &b, &bl, why);
	if (e)
		return e;
	if (bl < ADDR_BODY_FIXED) {
		OFI_WHY(why, "ofi address blob: body of %zu bytes, at least %u expected", bl, ADDR_BODY_FIXED);
		return DOCA_ERROR_INVALID_VALUE;
	}
	uid = ofi_get64(b);
	id = ofi_get32(b + 8);
	type = ofi_get32(b + 12);
	nl = ofi_get32(b + 16);
	flags = ofi_get32(b + 20);
	if (uid == 0 || id == 0 || nl == 0 || nl != bl - ADDR_BODY_FIXED || nl > sizeof(c->peer_name)) {
		OFI_WHY(why, "ofi address blob: inconsistent fields (name of %zu bytes in a body of %zu)", nl, bl);
		return DOCA_ERROR_INVALID_VALUE;
	}
	if (flags & ~ADDR_F_BELL) {
		OFI_WHY(why, "ofi address blob with flags 0x%x: this version knows 0x%x (a newer softdoca made it?)",
			flags, ADDR_F_BELL);
		return DOCA_ERROR_UNSUPPORTED_VERSION;
	}
	if (type != (uint32_t)p->ch.ep_type) {
		OFI_WHY(why, "ofi address blob of a %s endpoint, this side uses %s (%s): set FI_PROVIDER alike on both sides",
			type == FI_EP_MSG ? "FI_EP_MSG" : type == FI_EP_RDM ? "FI_EP_RDM" : "unknown",
			p->ch.ep_type == FI_EP_MSG ? "FI_EP_MSG" : "FI_EP_RDM", p->ch.prov);
		return DOCA_ERROR_NOT_SUPPORTED;
	}
	if (c->hello_seen && (c->peer_id != id || c->peer_uid != uid)) {
		OFI_WHY(why, "ofi address blob names another peer than the one that said hello");
		return DOCA_ERROR_INVALID_VALUE;
	}
	memcpy(c->peer_name, b + ADDR_BODY_FIXED, nl);
	c->peer_name_len = nl;
	c->peer_uid = uid;
	c->peer_id = id;
	c->deadline_ns = ofi_now_ns() + p->timeout_ns;
	if (p->ch.ep_type == FI_EP_RDM) {
		/* the AV entry stays until the instance closes (a peer connected again
		 * gets the same one, ofi_av_addr) */
		rc = ofi_av_addr(p, c->peer_name, c->peer_name_len, &c->dest);
		if (rc) {
			OFI_WHY(why, "ofi (%s): fi_av_insert of the peer's address failed (%s; %ld peer addresses "
				"inserted)", p->ch.prov, rc == -FI_EADDRNOTAVAIL ? "not inserted" : ofi_str(rc),
				p->navents);
			return DOCA_ERROR_INVALID_VALUE;
		}
		ofi_lockwatch_peer(p, uid, c->peer_name, c->peer_name_len); /* shm: its queue lock */
		if (!c->txe) {
			c->txe = ofi_txe_get(p, uid, (flags & ADDR_F_BELL) != 0, &rc);
			if (!c->txe) {
				OFI_WHY(why, "ofi (%s): a transmit endpoint for the peer: %s", p->ch.prov, ofi_str(rc));
				return ofi_err(rc) == DOCA_ERROR_INVALID_VALUE ? DOCA_ERROR_INITIALIZATION : ofi_err(rc);
			}
			c->ep = c->txe->ep;
		}
		ofi_awake_peer(p, c->txe, c->peer_name, c->peer_name_len); /* shm: rings it can skip */
		c->connected_local = 1;
		c->state = CS_CONNECTING;
		e = ofi_send_ctrl(c, M_HELLO, 0, 0, 0, 0);
		ofi_bell_flush(p);
		if (e) {
			OFI_WHY(why, "ofi (%s): sending hello: %s", p->ch.prov, sd_prov_strerror(e));
			c->state = CS_NEW;
			c->connected_local = 0;
			return e;
		}
		if (c->hello_seen)
			ofi_conn_established(c);
		return DOCA_SUCCESS;
	}
	/* MSG */
	c->connected_local = 1;
	c->state = CS_CONNECTING;
	c->active = p->uid < uid || (p->uid == uid && c->id < id);
	if (c->active) {
		struct fi_info *ai = active_info(p);
		struct cmhdr h;

		if (!ai)
			return DOCA_ERROR_NO_MEMORY;
		rc = ofi_msg_ep_setup(c, ai);
		OFI.freeinfo(ai);
		fill_cmh(&h, K_OOB_REQ, id, c->id, p->uid);
		if (!rc)
			rc = fi_connect(c->ep, c->peer_name, &h, sizeof(h));
		if (rc) {
			OFI_WHY(why, "ofi (%s): connecting: %s", p->ch.prov, ofi_str(rc));
			ofi_msg_ep_teardown(c);
			c->state = CS_NEW;
			c->connected_local = 0;
			return ofi_err(rc) == DOCA_ERROR_INVALID_VALUE ? DOCA_ERROR_CONNECTION_ABORTED : ofi_err(rc);
		}
	} else if (c->info) {
		if (c->hello_seen)
			oob_accept(c);
	}
	return DOCA_SUCCESS;
}

/* RDM: the AV address of a peer's endpoint name, inserted into the AV once per
 * instance and kept until it closes (ofi_av_forget). Not once per connection:
 * shm 1.17 counts every fi_av_insert against its SMR_MAX_PEERS (256) entries,
 * the same address inserted again included (its smr_av->used only goes down
 * in fi_av_remove), so the 257th connection of a process's life failed with
 * "AV insert failed. The maximum number of AV entries shm supported has been
 * reached" although it had only a few peers. And no fi_av_remove of a peer
 * that is gone: with it, shm 1.17 never got a later connection past its first
 * send (it keeps its own side's mapping of the removed slot, which the next
 * address inserted reuses). So an instance reaches at most 256 distinct peer
 * processes over its life on shm. 0 or a negative fi error
 * (-FI_EADDRNOTAVAIL: the provider did not insert it). */
int ofi_av_addr(struct sd_prov *p, const uint8_t *name, size_t len, fi_addr_t *out)
{
	struct ofi_avent *e;
	fi_addr_t a = FI_ADDR_NOTAVAIL;
	int rc;

	if (len == 0 || len > sizeof(e->name))
		return -FI_EINVAL;
	for (struct ofi_avent **pp = &p->avents; (e = *pp); pp = &e->next) {
		if (e->len == len && !memcmp(e->name, name, len)) {
			*pp = e->next; /* most recent first: a peer's connections come in runs */
			e->next = p->avents;
			p->avents = e;
			*out = e->addr;
			return 0;
		}
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return -FI_ENOMEM;
	rc = fi_av_insert(p->av, name, 1, &a, 0, NULL);
	if (rc != 1 || a == FI_ADDR_NOTAVAIL) {
		free(e);
		return rc < 0 ? rc : -FI_EADDRNOTAVAIL;
	}
	memcpy(e->name, name, len);
	e->len = len;
	e->addr = a;
	e->next = p->avents;
	p->avents = e;
	p->navents++;
	*out = a;
	return 0;
}

/* The instance closes (its AV with it). */
void ofi_av_forget(struct sd_prov *p)
{
	while (p->avents) {
		struct ofi_avent *e = p->avents;

		p->avents = e->next;
		free(e);
	}
	p->navents = 0;
}

/* RDM: the peer's HELLO */
void ofi_rx_hello(struct sd_prov *p, const struct ohdr *h)
{
	struct sd_prov_conn *c = ofi_conn_lookup(p, h->dst);

	if (!c || c->is_cm || c->user_closed || c->hello_seen)
		return;
	if (c->connected_local) {
		if (h->src != c->peer_id || h->uid != c->peer_uid)
			return;
		c->hello_seen = 1;
		if (c->state == CS_CONNECTING)
			ofi_conn_established(c);
	} else if (c->state == CS_NEW) {
		c->hello_seen = 1; /* checked against the blob at conn_connect */
		c->peer_id = h->src;
		c->peer_uid = h->uid;
	}
}

/* ------------------------------------------------------------ the EQ */
static struct sd_prov_listener *listener_of(struct sd_prov *p, fid_t fid)
{
	for (struct sd_prov_listener *l = p->listeners; l; l = l->next)
		if (&l->pep->fid == fid)
			return l;
	return NULL;
}

static struct sd_prov_conn *conn_of(struct sd_prov *p, fid_t fid)
{
	if (!fid || (p->oob_pep && fid == &p->oob_pep->fid) || listener_of(p, fid))
		return NULL;
	for (struct sd_prov_conn *c = p->conns; c; c = c->next)
		if (c->ep && &c->ep->fid == fid)
			return c;
	return NULL;
}

static void on_connreq(struct sd_prov *p, struct fi_eq_cm_entry *e, size_t dlen)
{
	struct cmhdr h;
	struct sd_prov_listener *l = listener_of(p, e->fid);
	struct fid_pep *pep = l ? l->pep : p->oob_pep;

	if (dlen < CMH) {
		fi_reject(pep, e->info->handle, NULL, 0);
		OFI.freeinfo(e->info);
		return;
	}
	memcpy(&h, e->data, CMH);
	if (h.magic != OFI_MAGIC) {
		fi_reject(pep, e->info->handle, NULL, 0);
		OFI.freeinfo(e->info);
		return;
	}
	if (!l && h.kind == K_OOB_REQ) {
		struct sd_prov_conn *c = ofi_conn_lookup(p, h.dst);

		if (!c || c->is_cm || c->user_closed || c->info || c->ep || c->state > CS_CONNECTING ||
		    (c->connected_local && (c->active || c->peer_id != h.src || c->peer_uid != h.uid))) {
			fi_reject(pep, e->info->handle, NULL, 0);
			OFI.freeinfo(e->info);
			return;
		}
		c->info = e->info;
		c->hello_seen = 1;
		if (c->connected_local)
			oob_accept(c);
		else {
			c->peer_id = h.src;
			c->peer_uid = h.uid;
		}
		return;
	}
	if (l && h.kind == K_CM_REQ) {
		struct sd_prov_conn *c = ofi_conn_alloc(p, NULL);

		if (!c) {
			fi_reject(pep, e->info->handle, NULL, 0);
			OFI.freeinfo(e->info);
			return;
		}
		c->ep = NULL;
		c->cq = NULL;
		c->is_cm = 1;
		c->listener = l;
		c->peer_id = h.src; /* the client's connection: every message's dst */
		c->peer_uid = h.uid;
		c->info = e->info;
		c->state = CS_CM_REQUESTED;
		c->deadline_ns = ofi_now_ns() + p->timeout_ns;
		p->cbs.conn_request(p->cbs.arg, l, l->ctx, c, e->data + CMH, dlen - CMH,
				    (const struct sockaddr *)e->info->dest_addr, (socklen_t)e->info->dest_addrlen);
		return;
	}
	fi_reject(pep, e->info->handle, NULL, 0);
	OFI.freeinfo(e->info);
}

int ofi_read_eq(struct sd_prov *p)
{
	union {
		struct fi_eq_cm_entry e;
		uint8_t raw[sizeof(struct fi_eq_cm_entry) + 1024];
	} u;
	int n = 0;

	for (int round = 0; round < 32; round++) {
		uint32_t event = 0;
		ssize_t k = fi_eq_read(p->eq, &event, &u, sizeof(u), 0);

		if (k == -FI_EAVAIL) {
			struct fi_eq_err_entry ee;
			struct sd_prov_conn *c;

			memset(&ee, 0, sizeof(ee));
			if (fi_eq_readerr(p->eq, &ee, 0) < 0)
				break;
			n++;
			c = conn_of(p, ee.fid);
			if (!c)
				continue;
			if (ee.err == FI_ECONNREFUSED && c->is_cm && c->cm_client && ee.err_data &&
			    ee.err_data_size >= CMH && ((struct cmhdr *)ee.err_data)->magic == OFI_MAGIC &&
			    ((struct cmhdr *)ee.err_data)->kind == K_CM_REJ) {
				c->state = CS_FAILED;
				emit(c, SD_PROV_EV_REJECTED, DOCA_ERROR_CONNECTION_ABORTED, SD_PROV_FAIL_REFUSED,
				     (uint8_t *)ee.err_data + CMH, ee.err_data_size - CMH, "rejected by the server");
				c->ev_pending = -1;
				c->failed_reported = 1;
			} else if (c->state == CS_CONNECTING || c->state == CS_ACCEPTING) {
				ofi_conn_fail(c, DOCA_ERROR_CONNECTION_ABORTED, SD_PROV_FAIL_REFUSED,
					      "connection refused or unreachable (%s)", ofi_str(ee.err));
			} else {
				ofi_conn_fail(c, DOCA_ERROR_CONNECTION_RESET, SD_PROV_FAIL_LOST, "connection broke (%s)",
					      ofi_str(ee.err));
			}
			continue;
		}
		if (k < 0)
			break;
		n++;
		if (event == FI_CONNREQ) {
			on_connreq(p, &u.e, (size_t)k > sizeof(u.e) ? (size_t)k - sizeof(u.e) : 0);
		} else if (event == FI_CONNECTED) {
			struct sd_prov_conn *c = conn_of(p, u.e.fid);
			size_t dlen = (size_t)k > sizeof(u.e) ? (size_t)k - sizeof(u.e) : 0;

			if (!c || (c->state != CS_CONNECTING && c->state != CS_ACCEPTING))
				continue;
			c->priv_len = 0;
			if (c->is_cm && c->cm_client) {
				struct cmhdr h;

				if (dlen >= CMH)
					memcpy(&h, u.e.data, CMH);
				if (dlen < CMH || h.magic != OFI_MAGIC || h.kind != K_CM_ACC) {
					/* every message would name connection 0 there and be dropped */
					ofi_conn_fail(c, DOCA_ERROR_CONNECTION_ABORTED, SD_PROV_FAIL_REFUSED,
						      "the server's accept carries no softdoca ofi header (%zu bytes): "
						      "not a softdoca peer, or another version", dlen);
					continue;
				}
				c->peer_id = h.src; /* the server's connection */
				c->peer_uid = h.uid;
				c->priv_len = dlen - CMH < sizeof(c->priv) ? dlen - CMH : sizeof(c->priv);
				memcpy(c->priv, u.e.data + CMH, c->priv_len);
			}
			ofi_conn_established(c);
		} else if (event == FI_SHUTDOWN) {
			struct sd_prov_conn *c = conn_of(p, u.e.fid);

			if (!c || c->state == CS_FAILED || c->state == CS_DEAD)
				continue;
			if (c->state == CS_ESTABLISHED && !c->out_head && !c->pend_head) {
				emit(c, SD_PROV_EV_DISCONNECTED, DOCA_SUCCESS, SD_PROV_FAIL_NONE, NULL, 0, "the peer closed");
				c->state = CS_FAILED;
				c->ev_pending = -1; /* teardown, no further event */
				c->fail_status = DOCA_ERROR_CONNECTION_RESET;
			} else {
				ofi_conn_fail(c, DOCA_ERROR_CONNECTION_RESET, SD_PROV_FAIL_LOST,
					      "the peer closed the connection or died");
			}
		}
	}
	return n;
}

/* ------------------------------------------------------------ deadlines, close */
int ofi_conn_deadlines(struct sd_prov *p)
{
	uint64_t now = ofi_now_ns();
	int n = 0;

	for (struct sd_prov_conn *c = p->conns; c; c = c->next) {
		if (c->state == CS_FAILED || c->state == CS_DEAD)
			continue;
		if (c->deadline_ns && now > c->deadline_ns && c->state != CS_ESTABLISHED && c->state != CS_CLOSING) {
			ofi_conn_fail(c, DOCA_ERROR_TIME_OUT, SD_PROV_FAIL_TIMEOUT, "no answer within %llu ms",
				      (unsigned long long)(p->timeout_ns / 1000000ull));
			n++;
			continue;
		}
		if (c->state == CS_ESTABLISHED &&
		    ((c->out_head && now > c->out_head->start_ns + p->timeout_ns) ||
		     (c->pend_head && now > c->pend_head->start_ns + p->timeout_ns))) {
			ofi_conn_fail(c, DOCA_ERROR_CONNECTION_RESET, SD_PROV_FAIL_LOST,
				      "no completion within %llu ms: the peer is gone or stuck",
				      (unsigned long long)(p->timeout_ns / 1000000ull));
			n++;
		}
	}
	return n;
}

/* shm: is the peer's process gone (exited, or a zombie)? Its endpoint name
 * carries its pid (shm_name, ofi_provider.c). Nothing more is sent to such a
 * peer: shm 1.17 keeps each endpoint's queue lock in shared memory, and a
 * process killed while it held the lock leaves every sender spinning inside
 * libfabric; a closing connection's BYE to a dead peer was such a send. */
static int peer_gone(const struct sd_prov_conn *c)
{
	char obj[128];
	pid_t pid;

	return !ofi_shm_object(c->peer_name, c->peer_name_len, obj, sizeof(obj), &pid) && ofi_pid_gone(pid);
}

/* inside progress: failure teardown, kept events, closing; 1 when c was freed */
int ofi_conn_step(struct sd_prov_conn *c)
{
	struct sd_prov *p = c->p;

	if (c->ev_pending == -1) {
		struct sd_prov_conn_event ev = { .ev = SD_PROV_EV_FAILED, .status = c->fail_status,
						 .reason = c->fail_reason, .why = c->why };
		c->ev_pending = 0;
		ofi_msg_ep_teardown(c); /* MSG: nothing completes any more; RDM: nothing to close */
		ofi_fail_ops(c, DOCA_ERROR_CONNECTION_RESET, 0);
		ofi_conn_drop_request(c); /* an undecided CM request, or a kept OOB one: refused */
		if (!c->user_closed && !c->failed_reported) {
			c->failed_reported = 1;
			p->cbs.conn_event(p->cbs.arg, c, c->ctx, &ev);
		}
	} else if (c->ev_pending > 0) {
		int evk = c->ev_pending;
		c->ev_pending = 0;
		if (!c->user_closed) {
			struct sd_prov_conn_event ev = { .ev = evk, .status = c->fail_status, .reason = c->fail_reason,
							 .priv = c->priv, .priv_len = c->priv_len, .why = c->why };
			p->cbs.conn_event(p->cbs.arg, c, c->ctx, &ev);
		}
	}
	if (!c->user_closed)
		return 0;
	if (c->state == CS_ESTABLISHED || c->state == CS_CLOSING) {
		c->state = CS_CLOSING;
		int gone = peer_gone(c);

		if ((c->out_head || c->pend_head) && ofi_now_ns() < c->deadline_ns && !gone)
			return 0;
		if (p->ch.ep_type == FI_EP_MSG && c->ep) { /* MSG: ops left past the deadline fail; the peer sees FI_SHUTDOWN */
			fi_shutdown(c->ep, 0);
			ofi_msg_ep_teardown(c);
			ofi_fail_ops(c, DOCA_ERROR_CONNECTION_RESET, 0);
		} else {
			ofi_fail_ops(c, DOCA_ERROR_CONNECTION_RESET, 0);
			if (!gone) {
				ofi_send_ctrl(c, M_BYE, 0, 0, 0, 0);
				ofi_fail_ops(c, DOCA_ERROR_CONNECTION_RESET, 1); /* the BYE: an orphan */
			}
		}
	} else {
		/* RDM, closed in its set-up with its HELLO not completed yet: kept until it is (or the deadline,
		 * or the peer is gone); the bridge closes a connection whenever its DOCA connection ends, also
		 * mid set-up. Failed now:
		 *  - a posted HELLO would be an orphan that wedges the transmit endpoint toward that peer, which
		 *    the next CQ read closes while the fabric may still complete the HELLO into the CQ (rxm,
		 *    efa defer completions);
		 *  - a queued one (shm answered -FI_EAGAIN: its first post to a peer only sends the
		 *    endpoint's name, and posts wait until the peer has mapped it) leaves that name in the
		 *    peer's queue; an own transmit endpoint closed before the peer read it unlinks its region,
		 *    and libfabric 1.17's shm then dereferences a NULL region in the peer's progress
		 *    (smr_progress_connreq): the peer process dies of SIGSEGV. */
		if (p->ch.ep_type == FI_EP_RDM && c->state == CS_CONNECTING && (c->out_head || c->pend_head) &&
		    ofi_now_ns() < c->deadline_ns && !peer_gone(c))
			return 0;
		ofi_msg_ep_teardown(c);
		ofi_fail_ops(c, DOCA_ERROR_CONNECTION_RESET, 0);
		ofi_conn_drop_request(c); /* closed before it connected: the peer's kept OOB request refused */
	}
	/* the AV entry stays (see ofi_conn_connect) */
	ofi_conn_free(c);
	return 1;
}

int ofi_conn_closing(struct sd_prov *p)
{
	int n = 0;

	for (struct sd_prov_conn *c = p ? p->conns : NULL; c; c = c->next)
		n += c->user_closed; /* freed by the progress that finished its close */
	return n;
}

void ofi_conn_close(struct sd_prov_conn *c)
{
	if (!c || c->user_closed)
		return;
	c->user_closed = 1;
	c->deadline_ns = ofi_now_ns() + c->p->timeout_ns;
	c->p->kick = 1; /* the next progress closes it (callbacks only run there) */
}

/* ------------------------------------------------------------ CM (MSG providers) */
static doca_error_t no_cm(struct sd_prov *p, struct sd_prov_why *why)
{
	OFI_WHY(why, "provider ofi over %s uses FI_EP_RDM endpoints, which have no connection manager: listen / "
		"connect_addr are not supported, use conn_export / conn_connect (OOB)", p->ch.prov);
	return DOCA_ERROR_NOT_SUPPORTED;
}

doca_error_t ofi_listen(struct sd_prov *p, struct sockaddr_storage *addr, socklen_t *addr_len, void *ctx,
			struct sd_prov_listener **out, struct sd_prov_why *why)
{
	struct sd_prov_listener *l;
	struct fi_info *info;
	size_t len;
	int rc;

	if (!p || !addr || !addr_len || !out)
		return DOCA_ERROR_INVALID_VALUE;
	if (!p->ch.cm)
		return no_cm(p, why);
	if ((addr->ss_family != AF_INET && addr->ss_family != AF_INET6) || *addr_len > sizeof(*addr))
		return DOCA_ERROR_INVALID_VALUE;
	info = OFI.dupinfo(p->info);
	l = calloc(1, sizeof(*l));
	if (!info || !l) {
		if (info)
			OFI.freeinfo(info);
		free(l);
		return DOCA_ERROR_NO_MEMORY;
	}
	free(info->src_addr);
	info->src_addr = malloc(*addr_len);
	if (!info->src_addr) {
		OFI.freeinfo(info);
		free(l);
		return DOCA_ERROR_NO_MEMORY;
	}
	memcpy(info->src_addr, addr, *addr_len);
	info->src_addrlen = *addr_len;
	info->addr_format = addr->ss_family == AF_INET6 ? FI_SOCKADDR_IN6 : FI_SOCKADDR_IN;
	l->p = p;
	l->ctx = ctx;
	rc = fi_passive_ep(p->fabric, info, &l->pep, l);
	OFI.freeinfo(info);
	if (!rc)
		rc = fi_pep_bind(l->pep, &p->eq->fid, 0);
	if (!rc)
		rc = fi_listen(l->pep);
	len = sizeof(*addr);
	if (!rc)
		rc = fi_getname(&l->pep->fid, addr, &len);
	if (rc) {
		OFI_WHY(why, "ofi (%s): listen: %s", p->ch.prov, ofi_str(rc));
		if (l->pep)
			fi_close(&l->pep->fid);
		free(l);
		return rc == -FI_EADDRINUSE ? DOCA_ERROR_IN_USE : ofi_err(rc);
	}
	*addr_len = (socklen_t)len;
	l->next = p->listeners;
	p->listeners = l;
	*out = l;
	return DOCA_SUCCESS;
}

void ofi_listener_close(struct sd_prov_listener *l)
{
	struct sd_prov *p;

	if (!l)
		return;
	p = l->p;
	for (struct sd_prov_conn *c = p->conns; c; c = c->next)
		if (c->listener == l) {
			if (c->info) { /* undecided: refused */
				fi_reject(l->pep, c->info->handle, NULL, 0);
				OFI.freeinfo(c->info);
				c->info = NULL;
				if (c->state == CS_CM_REQUESTED)
					ofi_conn_fail(c, DOCA_ERROR_CONNECTION_ABORTED, SD_PROV_FAIL_REFUSED,
						      "the listener closed");
			}
			c->listener = NULL;
		}
	for (struct sd_prov_listener **pp = &p->listeners; *pp; pp = &(*pp)->next)
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	fi_close(&l->pep->fid);
	free(l);
}

doca_error_t ofi_accept(struct sd_prov_conn *c, const void *priv, size_t priv_len)
{
	uint8_t buf[CMH + SD_PROV_MAX_PRIV];
	int rc;

	if (!c || (priv_len && !priv))
		return DOCA_ERROR_INVALID_VALUE;
	if (c->state != CS_CM_REQUESTED || !c->info || c->user_closed)
		return DOCA_ERROR_BAD_STATE;
	if (priv_len > c->p->max_priv)
		return DOCA_ERROR_INVALID_VALUE;
	fill_cmh((struct cmhdr *)buf, K_CM_ACC, 0, c->id, c->p->uid);
	if (priv_len)
		memcpy(buf + CMH, priv, priv_len);
	rc = ofi_msg_ep_setup(c, c->info);
	if (!rc)
		rc = fi_accept(c->ep, buf, CMH + priv_len);
	if (rc) { /* the handle is still the provider's: rejected (freed) */
		ofi_conn_drop_request(c);
	} else { /* fi_accept freed the handle */
		OFI.freeinfo(c->info);
		c->info = NULL;
	}
	if (rc) {
		ofi_msg_ep_teardown(c);
		c->state = CS_FAILED;
		return ofi_err(rc);
	}
	c->state = CS_ACCEPTING;
	c->deadline_ns = ofi_now_ns() + c->p->timeout_ns;
	return DOCA_SUCCESS;
}

doca_error_t ofi_reject(struct sd_prov_conn *c, const void *priv, size_t priv_len)
{
	uint8_t buf[CMH + SD_PROV_MAX_PRIV];
	int rc;

	if (!c || (priv_len && !priv))
		return DOCA_ERROR_INVALID_VALUE;
	if (c->state != CS_CM_REQUESTED || !c->info || !c->listener || c->user_closed)
		return DOCA_ERROR_BAD_STATE;
	if (priv_len > c->p->max_priv)
		return DOCA_ERROR_INVALID_VALUE;
	fill_cmh((struct cmhdr *)buf, K_CM_REJ, 0, c->id, c->p->uid);
	if (priv_len)
		memcpy(buf + CMH, priv, priv_len);
	rc = fi_reject(c->listener->pep, c->info->handle, buf, CMH + priv_len);
	OFI.freeinfo(c->info);
	c->info = NULL;
	c->state = CS_DEAD;
	ofi_conn_close(c); /* gone for the caller now; freed by the next progress (no event) */
	return ofi_err(rc);
}

doca_error_t ofi_connect_addr(struct sd_prov *p, const struct sockaddr *addr, socklen_t addr_len, const void *priv,
			      size_t priv_len, void *ctx, struct sd_prov_conn **out, struct sd_prov_why *why)
{
	uint8_t buf[CMH + SD_PROV_MAX_PRIV];
	struct sd_prov_conn *c;
	struct fi_info *ai;
	int rc;

	if (!p || !addr || !out || (priv_len && !priv))
		return DOCA_ERROR_INVALID_VALUE;
	if (!p->ch.cm)
		return no_cm(p, why);
	if (priv_len > p->max_priv) {
		OFI_WHY(why, "ofi (%s): %zu bytes of private data, the provider carries %zu", p->ch.prov, priv_len,
			p->max_priv);
		return DOCA_ERROR_INVALID_VALUE;
	}
	c = ofi_conn_alloc(p, ctx);
	ai = active_info(p);
	if (!c || !ai) {
		if (c)
			ofi_conn_free(c);
		if (ai)
			OFI.freeinfo(ai);
		return DOCA_ERROR_NO_MEMORY;
	}
	c->ep = NULL;
	c->cq = NULL;
	c->is_cm = 1;
	c->cm_client = 1;
	rc = ofi_msg_ep_setup(c, ai);
	OFI.freeinfo(ai);
	fill_cmh((struct cmhdr *)buf, K_CM_REQ, 0, c->id, p->uid);
	if (priv_len)
		memcpy(buf + CMH, priv, priv_len);
	if (!rc)
		rc = fi_connect(c->ep, addr, buf, CMH + priv_len);
	(void)addr_len;
	if (rc) {
		OFI_WHY(why, "ofi (%s): fi_connect: %s", p->ch.prov, ofi_str(rc));
		ofi_msg_ep_teardown(c);
		ofi_conn_free(c);
		return ofi_err(rc) == DOCA_ERROR_INVALID_VALUE ? DOCA_ERROR_CONNECTION_ABORTED : ofi_err(rc);
	}
	c->state = CS_CONNECTING;
	c->deadline_ns = ofi_now_ns() + p->timeout_ns;
	*out = c;
	return DOCA_SUCCESS;
}
