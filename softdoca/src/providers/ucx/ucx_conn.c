/*
 * softdoca provider `ucx`, connections: lookup, failure, control messages and their pump, OOB and CM
 * set-up, close. The design is described at the top of ucx_provider.c.
 */
#define _GNU_SOURCE
#include "ucx_internal.h"

/* ------------------------------------------------------------------ conns */
struct uconn *ux_conn_lookup(struct sd_prov *p, uint64_t id)
{
	uint32_t idx = (uint32_t)id, gen = (uint32_t)(id >> 32);

	if (idx == 0 || idx > p->nslots)
		return NULL;
	if (p->gens[idx - 1] != gen || !p->slots[idx - 1])
		return NULL;
	return p->slots[idx - 1];
}

static struct uconn *conn_alloc(struct sd_prov *p, void *ctx)
{
	struct uconn *c = calloc(1, sizeof(*c));
	uint32_t idx = 0;

	if (!c)
		return NULL;
	for (uint32_t i = 0; i < p->nslots; i++)
		if (!p->slots[i]) {
			idx = i + 1;
			break;
		}
	if (!idx) {
		uint32_t n = p->nslots ? p->nslots * 2 : 16;
		struct uconn **s = realloc(p->slots, n * sizeof(*s));
		uint32_t *g;

		if (!s) {
			free(c);
			return NULL;
		}
		p->slots = s;
		g = realloc(p->gens, n * sizeof(*g));
		if (!g) {
			free(c);
			return NULL;
		}
		p->gens = g;
		for (uint32_t i = p->nslots; i < n; i++) {
			p->slots[i] = NULL;
			p->gens[i] = (uint32_t)(p->uid >> 7) + i;
		}
		idx = p->nslots + 1;
		p->nslots = n;
	}
	p->gens[idx - 1]++;
	p->slots[idx - 1] = c;
	c->id = ((uint64_t)p->gens[idx - 1] << 32) | idx;
	c->p = p;
	c->w = p->w;
	c->ctx = ctx;
	c->rx_expect = 1;
	c->next = p->conns;
	if (p->conns)
		p->conns->prev = c;
	p->conns = c;
	return c;
}

void ux_conn_kick(struct uconn *c)
{
	c->kicked = 1;
	c->p->kick_any = 1;
}

/* ------------------------------------------------------------------ failure */
/* Endpoint parameters: a same-host peer (shared memory may serve it) gets no UCX peer-failure handling unless
 * SOFTDOCA_UCX_PEER_ERRORS is set (docs/providers.md, "Shared memory on one host"). */
ucp_ep_params_t ux_ep_params_for(int same_host, ucp_err_handler_cb_t cb, void *arg)
{
	ucp_ep_params_t ep;

	memset(&ep, 0, sizeof(ep));
	if (same_host && !getenv("SOFTDOCA_UCX_PEER_ERRORS")) {
		ep.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
		ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
		return ep;
	}
	ep.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
	ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
	ep.err_handler.cb = cb;
	ep.err_handler.arg = arg;
	return ep;
}

/*
 * ucp_ep_close_nbx: forced or after a flush; the request UCX still holds (cb is called when it
 * is done), or NULL (cb NULL: nothing waits on it, UCX releases it once done).
 *
 * UCX refuses to force-close an endpoint without peer-failure handling
 * (UCP_ERR_HANDLING_MODE_NONE: the same-host ones, ux_ep_params_for, and the
 * probe's): ucp_ep_close_nbx returns UCS_ERR_INVALID_PARAM and leaves it as it
 * is, open, until its worker is destroyed. Each such endpoint kept its
 * attachment of the peer's shared-memory receive queue (a 12 kB mapping of
 * the peer's /dev/shm segment, one VMA) and UCX's state for it: about 12-18 kB
 * for every same-host connection that closed, for the life of the worker
 * (test_rdma.c's connect/close cycles under UCX_TLS=posix,cma). Such an
 * endpoint is closed after a local flush instead (what was sent has left;
 * the callers flushed their last message first, or gave up on it), and its
 * request is not waited for: a peer that died with our sends queued would
 * keep it open, as before.
 */
void *ux_ep_close(struct sd_prov *p, ucp_ep_h ep, int force, ucp_send_nbx_callback_t cb, void *user)
{
	ucp_request_param_t rp;
	ucs_status_ptr_t r;

	memset(&rp, 0, sizeof(rp));
	rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | (cb ? UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA : 0);
	rp.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
	rp.cb.send = cb;
	rp.user_data = user;
	r = UX.ep_close_nbx(ep, &rp);
	if (force && UCS_PTR_IS_ERR(r) && UCS_PTR_STATUS(r) == UCS_ERR_INVALID_PARAM) {
		memset(&rp, 0, sizeof(rp)); /* no peer-failure handling: close it after a flush, untracked */
		rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
		r = UX.ep_close_nbx(ep, &rp);
		p->ep_graceful++;
		cb = NULL;
	}
	p->eps--; /* an error but the refusal above: UCX released it (ucp.h) */
	if (!r || UCS_PTR_IS_ERR(r))
		return NULL;
	if (!cb) {
		UX.request_free(r); /* released once done */
		return NULL;
	}
	return r;
}

static void close_cb(void *req, ucs_status_t s, void *user)
{
	struct uconn *c = user;

	(void)s;
	UX.request_free(req);
	c->close_req = NULL;
	c->p->kick_any = 1;
}


static void close_ep(struct uconn *c, int force)
{
	if (c->link || c->paddr) {
		ux_link_put(c); /* the link's endpoint stays for the other connections */
		return;
	}
	if (!c->ep)
		return;
	c->close_req = ux_ep_close(c->p, c->ep, force, close_cb, c);
	c->ep = NULL;
}

static void rxq_free(struct uconn *c)
{
	while (c->rxq) {
		struct urx *x = c->rxq;

		c->rxq = x->next;
		if (x->ucx_owned)
			UX.am_data_release(c->w->h, x->data);
		else
			free(x->data);
		free(x);
	}
}

/* The connection is broken: every op fails, the ep goes (forced). */
void ux_conn_fail(struct uconn *c, int force, doca_error_t st, enum sd_prov_fail reason, const char *fmt, ...)
{
	va_list ap;

	if (c->state == CS_FAILED)
		return;
	c->state = CS_FAILED;
	c->fail_status = st;
	c->fail_reason = reason;
	va_start(ap, fmt);
	vsnprintf(c->why, sizeof(c->why), fmt, ap);
	va_end(ap);
	/* every op of the connection (queued, awaiting a flush, or with requests
	 * in UCX) fails now; requests UCX gives back later only free memory */
	c->gate_head = c->gate_tail = NULL;
	c->await_head = NULL;
	ux_amw_drop(c);
	while (c->outstanding) {
		struct uop *o = c->outstanding;

		o->gnext = NULL;
		o->gated = 0;
		if (o->status == DOCA_SUCCESS)
			o->status = st;
		o->early = 1;
		ux_op_to_done(o);
	}
	close_ep(c, force);
	rxq_free(c);
	c->rx_held = 0;
	if (!c->closed_by_user)
		c->pending_ev = SD_PROV_EV_FAILED;
	ux_conn_kick(c);
}

static void err_cb(void *arg, ucp_ep_h ep, ucs_status_t s)
{
	struct uconn *c = arg;

	(void)ep;
	if (c->state == CS_CLOSING && c->ep && !c->link) { /* its flush will not complete: no need to wait */
		close_ep(c, 1);
		c->p->kick_any = 1;
		return;
	}
	if (c->state == CS_FAILED || c->state == CS_CLOSING)
		return;
	if (c->state == CS_ESTABLISHED)
		ux_conn_fail(c, 1, DOCA_ERROR_CONNECTION_RESET, SD_PROV_FAIL_LOST, "connection lost: %s", ustr(s));
	else if (s == UCS_ERR_TIMED_OUT || s == UCS_ERR_ENDPOINT_TIMEOUT)
		ux_conn_fail(c, 1, DOCA_ERROR_TIME_OUT, SD_PROV_FAIL_TIMEOUT, "no answer while connecting: %s", ustr(s));
	else
		ux_conn_fail(c, 1, DOCA_ERROR_CONNECTION_ABORTED, SD_PROV_FAIL_REFUSED,
			     "connection refused or unreachable: %s", ustr(s));
}

/* ------------------------------------------------------------------ transport */
/* The transports an endpoint's lanes use, from ucp_ep_print_info (UCX 1.13
 * has no ucp_ep_query field for them): lines "lane[N]: <rsc>:<tl>/<dev>...". */
static void ep_transport(ucp_ep_h ep, char *out, size_t n)
{
	char *buf = NULL, *line, *save = NULL;
	size_t blen = 0;
	FILE *f;

	out[0] = 0;
	if (!ep || !(f = open_memstream(&buf, &blen)))
		return;
	UX.ep_print_info(ep, f);
	fclose(f);
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *l = strstr(line, "lane["), *q, *slash, tl[32];
		size_t k;

		if (!l || !(q = strchr(l, ':')))
			continue;
		q++;
		while (*q == ' ')
			q++;
		/* "<rsc index>:<tl>/<dev>" */
		while (*q >= '0' && *q <= '9')
			q++;
		if (*q == ':')
			q++;
		slash = strchr(q, '/');
		if (!slash || (size_t)(slash - q) >= sizeof(tl))
			continue;
		k = (size_t)(slash - q);
		memcpy(tl, q, k);
		tl[k] = 0;
		if (!tl[0])
			continue;
		/* add once */
		{
			char *hit = strstr(out, tl);
			size_t ol = strlen(out);

			if (hit && (hit == out || hit[-1] == ',') && (hit[k] == 0 || hit[k] == ','))
				continue;
			if (ol + k + 2 > n)
				break;
			if (ol)
				out[ol++] = ',';
			memcpy(out + ol, tl, k + 1);
		}
	}
	free(buf);
}

static void merge_transport(char *dst, size_t n, const char *src)
{
	char tmp[64], *save = NULL;

	snprintf(tmp, sizeof(tmp), "%s", src);
	for (char *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		size_t k = strlen(t), ol = strlen(dst);
		char *hit = strstr(dst, t);

		if (hit && (hit == dst || hit[-1] == ',') && (hit[k] == 0 || hit[k] == ','))
			continue;
		if (ol + k + 2 > n)
			return;
		if (ol)
			dst[ol++] = ',';
		memcpy(dst + ol, t, k + 1);
	}
}

/* ------------------------------------------------------------------ control messages */
doca_error_t ux_send_ctrl(struct uconn *c, enum am_type t, const void *priv, size_t priv_len)
{
	struct uop *o;

	if (!c->ep)
		return DOCA_ERROR_NOT_CONNECTED;
	o = ux_op_new(c->p, c, OP_CTRL, NULL);
	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	o->hdr.magic = AM_MAGIC;
	o->hdr.type = (uint8_t)t;
	o->hdr.dst = c->peer_id;
	o->hdr.src = c->id;
	o->hdr.uid = c->p->uid;
	o->hdr.priv_len = (uint16_t)priv_len;
	if (priv_len)
		memcpy(o->priv, priv, priv_len);
	ux_issue_gated(o);
	return DOCA_SUCCESS;
}

static void emit(struct uconn *c, enum sd_prov_conn_ev ev, doca_error_t st, enum sd_prov_fail reason,
		 const void *priv, size_t priv_len, const char *why)
{
	struct sd_prov *p = c->p;
	struct sd_prov_conn_event e = {
		.ev = ev, .status = st, .reason = reason, .priv = priv, .priv_len = priv_len, .why = why ? why : "",
	};

	if (c->closed_by_user || !p->cbs.conn_event)
		return;
	p->cbs.conn_event(p->cbs.arg, (struct sd_prov_conn *)c, c->ctx, &e);
}

static void established(struct uconn *c, const void *priv, size_t priv_len)
{
	c->state = CS_ESTABLISHED;
	ep_transport(c->ep, c->transport, sizeof(c->transport));
	merge_transport(c->p->transport, sizeof(c->p->transport), c->transport);
	emit(c, SD_PROV_EV_ESTABLISHED, DOCA_SUCCESS, SD_PROV_FAIL_NONE, priv, priv_len, NULL);
}

int ux_conn_pump(struct uconn *c, uint64_t now)
{
	struct sd_prov *p = c->p;
	int n = 0;
	int ev = c->cm_pending_event;

	c->kicked = 0;
	c->cm_pending_event = 0;
	if (c->state == CS_CLOSING) {
		/* our last message (BYE / REJECT) is at the peer, or the peer is gone */
		if (c->ep && (c->flush_done >= c->close_seq || now > c->deadline_ns))
			close_ep(c, 1);
		return 0;
	}
	/* both HELLOs seen: established, before a BYE that came in the same round (the peer
	 * was established when it sent it; the user sees established, then disconnected) */
	if (c->state == CS_CONNECTING && !c->is_cm && c->connected_local && c->hello_seen && c->ep) {
		n++;
		established(c, NULL, 0);
	}
	switch (ev) {
	case AM_CM_REQ:
		if (c->state == CS_CM_REQUESTED && p->cbs.conn_request) {
			struct sd_prov_listener *l = c->listener;
			struct sockaddr_storage ss;
			socklen_t sl = 0;

			ss = c->peer_ss;
			sl = ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
			     : ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) : 0;
			n++;
			p->cbs.conn_request(p->cbs.arg, l, l ? l->ctx : NULL, (struct sd_prov_conn *)c, c->priv,
					    c->priv_len, sl ? (struct sockaddr *)&ss : NULL, sl);
		}
		break;
	case AM_CM_ACCEPT:
		if (c->state == CS_CONNECTING) {
			ux_send_ctrl(c, AM_CM_RTU, NULL, 0);
			n++;
			established(c, c->priv, c->priv_len);
		}
		break;
	case AM_CM_REJECT:
		if (c->state == CS_CONNECTING) {
			c->state = CS_FAILED;
			c->fail_status = DOCA_ERROR_CONNECTION_ABORTED;
			c->fail_reason = SD_PROV_FAIL_REFUSED;
			snprintf(c->why, sizeof(c->why), "the connection request was rejected by the peer");
			close_ep(c, 1);
			n++;
			emit(c, SD_PROV_EV_REJECTED, DOCA_ERROR_CONNECTION_ABORTED, SD_PROV_FAIL_REFUSED, c->priv,
			     c->priv_len, c->why);
			return n;
		}
		break;
	case AM_CM_RTU:
		if (c->state == CS_CM_ACCEPTED) {
			n++;
			established(c, NULL, 0);
		}
		break;
	case AM_BYE:
		if (c->state != CS_FAILED) {
			ux_conn_fail(c, 1, DOCA_ERROR_CONNECTION_RESET, SD_PROV_FAIL_LOST,
				     "the peer closed the connection");
			if (c->pending_ev)
				c->pending_ev = SD_PROV_EV_DISCONNECTED;
		}
		break;
	default:
		break;
	}
	/* deadlines */
	if ((c->state == CS_CONNECTING || c->state == CS_CM_WAIT_REQ || c->state == CS_CM_REQUESTED ||
	     c->state == CS_CM_ACCEPTED || (c->state == CS_NEW && c->deadline_ns)) && c->deadline_ns && now > c->deadline_ns) {
		/* our half left, the peer's did not come: over UCX's shared memory, a peer killed while
		 * writing into this worker's receive queue stalls it (ucx_worker.c) */
		int stall = c->same_host && !c->hello_seen && c->connected_local;

		if (stall)
			ux_worker_suspect(c->w);
		ux_conn_fail(c, 1, DOCA_ERROR_TIME_OUT, SD_PROV_FAIL_TIMEOUT,
			     "no answer from the peer within %llu ms (address pointing nowhere, or the peer is gone%s)",
			     (unsigned long long)(p->timeout_ns / 1000000),
			     stall ? "; or a peer killed mid-send stalled UCX shared memory here: new connections get a "
				     "fresh UCX worker, docs/providers.md" : "");
	} else if (c->outstanding && c->state != CS_FAILED && now > c->outstanding->start_ns + p->timeout_ns) {
		char why[96];

		snprintf(why, sizeof(why), "an operation got no completion within %llu ms: the peer is taken as gone",
			 (unsigned long long)(p->timeout_ns / 1000000));
		if (c->same_host) /* or its answers wait in a stalled receive queue */
			ux_worker_suspect(c->w);
		if (c->link) /* the endpoint is the link's: its other connections are as stuck */
			ux_link_fail(c->link, UCS_OK, why);
		else
			ux_conn_fail(c, 1, DOCA_ERROR_CONNECTION_RESET, SD_PROV_FAIL_LOST, "%s", why);
	}
	if (c->pending_ev) {
		int e = c->pending_ev;

		c->pending_ev = 0;
		n++;
		emit(c, (enum sd_prov_conn_ev)e, c->fail_status, c->fail_reason, NULL, 0, c->why);
	}
	if (c->state == CS_FAILED)
		return n;
	/* writes waiting for their remote completion */
	if (c->await_head) {
		struct uop **pp = &c->await_head;
		int need = 0;

		while (*pp) {
			struct uop *o = *pp;

			if (o->wait_seq <= c->flush_done) {
				*pp = o->gnext;
				o->gnext = NULL;
				ux_op_to_done(o);
			} else {
				if (o->wait_seq > c->flush_issued)
					need = 1;
				pp = &o->gnext;
			}
		}
		if (need && !c->flush_inflight)
			ux_issue_flush(c);
	}
	ux_amw_pump(c);
	ux_gate_pump(c);
	n += ux_rx_pump(c);
	return n;
}

void ux_conn_free(struct uconn *c)
{
	struct sd_prov *p = c->p;
	uint32_t idx = (uint32_t)c->id;

	if (idx && idx <= p->nslots && p->slots[idx - 1] == c)
		p->slots[idx - 1] = NULL;
	if (c->prev)
		c->prev->next = c->next;
	else
		p->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->paddr)
		ux_link_put(c); /* closed while it waited for its link */
	ux_rkc_clear(c);
	rxq_free(c);
	ux_amw_drop(c);
	free(c);
}

int ux_conn_freeable(const struct uconn *c)
{
	return c->closed_by_user && !c->ep && !c->close_req && !c->outstanding && !c->rx_placing;
}

/* ------------------------------------------------------------------ connections */
/*
 * UCX 1.13's shared-memory transports (posix, sysv, cma) have no peer-failure
 * support: an endpoint created with UCP_ERR_HANDLING_MODE_PEER is unreachable
 * over them, and where tcp is also enabled UCX silently picks tcp instead. So a
 * connection whose peer shares this host (same boot, same IPC, mount and PID
 * namespaces, same uid: what posix shm and cma need) gets an endpoint without
 * UCX error handling. Peer death is then seen by the deadlines of this
 * provider (every op and set-up) and by the DOCA connection above it, which
 * fail the connection with a forced close.
 */
uint32_t ux_host_id(void)
{
	static const char *const ns[] = { "/proc/self/ns/ipc", "/proc/self/ns/mnt", "/proc/self/ns/pid" };
	char boot[64] = { 0 };
	uint32_t h = 2166136261u;
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	struct stat st;
	uint64_t v[4];

	if (!f)
		return 0;
	if (!fgets(boot, sizeof(boot), f))
		boot[0] = 0;
	fclose(f);
	if (!boot[0])
		return 0;
	for (size_t i = 0; i < 3; i++)
		v[i] = stat(ns[i], &st) == 0 ? (uint64_t)st.st_ino : 0;
	v[3] = (uint64_t)getuid();
	for (const char *b = boot; *b; b++)
		h = (h ^ (uint8_t)*b) * 16777619u;
	for (size_t i = 0; i < sizeof(v); i++)
		h = (h ^ ((const uint8_t *)v)[i]) * 16777619u;
	return h ? h : 1;
}

/* Whether UCX_TLS leaves one of names enabled (unset: UCX's default, all of
 * them). A name ending in '*' matches by prefix (rc*: rc, rc_v, rc_mlx5, ...).
 * In an exclusion list (^...) only the names in keep_on_exclude count as
 * excluded: the aliases that cover a whole family. */
static int tls_enabled(const char *const *names, size_t n, const char *const *keep_on_exclude, size_t nk)
{
	const char *t = getenv("UCX_TLS");
	char buf[256], *save = NULL;
	int exclude, hit = 0;

	if (!t || !*t)
		return 1;
	exclude = t[0] == '^';
	snprintf(buf, sizeof(buf), "%s", t + exclude);
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		const char *const *set = exclude ? keep_on_exclude : names;
		size_t m = exclude ? nk : n;

		for (size_t i = 0; i < m; i++) {
			size_t len = strlen(set[i]);

			if (set[i][len - 1] == '*' ? !strncmp(tok, set[i], len - 1) : !strcmp(tok, set[i]))
				hit = 1;
		}
	}
	return exclude ? !hit : hit;
}

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* Whether UCX_TLS leaves a shared-memory transport enabled (UCX's default
 * does). Where it does not, a same-host peer keeps peer-failure handling: it
 * would gain nothing without it, and lose UCX's own error reports. */
static int shm_enabled(void)
{
	static const char *const shm[] = {"all", "sm", "shm", "posix", "sysv", "cma", "knem", "xpmem", "mm"};
	static const char *const family[] = {"sm", "shm"};

	return tls_enabled(shm, NELEM(shm), family, NELEM(family));
}

/* Whether UCX's client-server connections (ucp_listener, ucp_ep_create from a
 * socket address) can work under UCX_TLS: they need a network transport for
 * their wire-up (tcp, or verbs through rdmacm). Under UCX_TLS=posix,cma a
 * connect fails at once ("Destination is unreachable") and the listener never
 * hears of it, so SD_PROV_CAP_CM is claimed only where this holds. An
 * exclusion list counts as one only when it leaves tcp out. */
int ux_cm_enabled(void)
{
	static const char *const net[] = {"all", "tcp", "ib", "rc*", "ud*", "dc*"};
	static const char *const family[] = {"tcp"};

	return tls_enabled(net, NELEM(net), family, NELEM(family));
}

/* listen / connect_addr where SD_PROV_CAP_CM is not claimed (ux_cm_enabled) */
static doca_error_t no_cm(struct sd_prov_why *why)
{
	WHY(why, "ucx: UCX_TLS=%s enables no network transport, which UCX's client-server connections need "
		 "(add tcp to UCX_TLS, or connect out of band: conn_export / conn_connect)", getenv("UCX_TLS"));
	return DOCA_ERROR_NOT_SUPPORTED;
}

static ucp_ep_params_t ep_params(struct uconn *c)
{
	return ux_ep_params_for(c->same_host, err_cb, c);
}

doca_error_t ux_conn_create(struct sd_prov *p, void *ctx, struct sd_prov_conn **out)
{
	struct uconn *c;

	if (!p || !out)
		return DOCA_ERROR_INVALID_VALUE;
	c = conn_alloc(p, ctx);
	if (!c)
		return DOCA_ERROR_NO_MEMORY;
	*out = (struct sd_prov_conn *)c;
	return DOCA_SUCCESS;
}

doca_error_t ux_conn_export(struct sd_prov_conn *pc, void **blob, size_t *len)
{
	struct uconn *c = (struct uconn *)pc;
	ucp_address_t *a = NULL;
	size_t alen = 0;
	ucs_status_t s;
	uint8_t *b;
	uint32_t total;

	if (!c || !blob || !len || c->is_cm)
		return DOCA_ERROR_INVALID_VALUE;
	s = UX.worker_get_address(c->w->h, &a, &alen);
	if (s != UCS_OK)
		return map_status(s);
	total = (uint32_t)(SD_PROV_BLOB_HDR_LEN + ADDR_BODY_FIXED + alen);
	b = malloc(total);
	if (!b) {
		UX.worker_release_address(c->w->h, a);
		return DOCA_ERROR_NO_MEMORY;
	}
	sd_prov_blob_begin(b, PROV_NAME, SD_PROV_BLOB_ADDR, total);
	put64(b + 32, c->p->uid);
	put64(b + 40, c->id);
	put32(b + 48, (uint32_t)alen);
	put32(b + 52, c->p->host); /* 0: unknown (never the same host) */
	memcpy(b + 56, a, alen);
	sd_prov_blob_seal(b, total);
	UX.worker_release_address(c->w->h, a);
	*blob = b;
	*len = total;
	return DOCA_SUCCESS;
}

/* A peer's worker address goes to ucp_ep_create, which takes no length and trusts it: UCX aborts the process
 * on an address format it does not know (ucp_address_unpack_header asserts: format 1 or 2, the low four bits
 * of the first byte 0 or 1; format 2 has a second header byte). Refused here with a reason instead. This checks
 * the header only: UCX parses the rest unchecked (docs/providers.md, "Known gaps"). */
static int addr_header_ok(const uint8_t *a, uint32_t alen)
{
	uint8_t version = a[0] & 0x0f;

	return version == 0 || (version == 1 && alen >= 2);
}

doca_error_t ux_conn_connect(struct sd_prov_conn *pc, const void *blob, size_t len, struct sd_prov_why *why)
{
	struct uconn *c = (struct uconn *)pc;
	const uint8_t *b;
	size_t bl;
	doca_error_t e;
	uint32_t alen;
	ucp_ep_params_t ep;
	ucs_status_t s;

	if (!c)
		return DOCA_ERROR_INVALID_VALUE;
	if (c->state != CS_NEW || c->is_cm) {
		WHY(why, "ucx connection already connected");
		return DOCA_ERROR_BAD_STATE;
	}
	e = sd_prov_blob_check(blob, len, PROV_NAME, SD_PROV_BLOB_ADDR, &b, &bl, why);
	if (e)
		return e;
	alen = bl >= ADDR_BODY_FIXED ? get32(b + 16) : 0;
	if (bl < ADDR_BODY_FIXED || alen == 0 || alen != bl - ADDR_BODY_FIXED || get64(b) == 0 || get64(b + 8) == 0) {
		WHY(why, "ucx connection blob: inconsistent fields");
		return DOCA_ERROR_INVALID_VALUE;
	}
	if (!addr_header_ok(b + ADDR_BODY_FIXED, alen)) {
		WHY(why, "ucx connection blob: the peer's worker address is not a UCP address (header byte 0x%02x: "
			 "address format %u, not 1 or 2); a forged or corrupted blob",
		    b[ADDR_BODY_FIXED], (unsigned)(b[ADDR_BODY_FIXED] & 0x0f) + 1);
		return DOCA_ERROR_INVALID_VALUE;
	}
	c->peer_uid = get64(b);
	c->peer_id = get64(b + 8);
	c->same_host = c->p->host && get32(b + 20) == c->p->host && shm_enabled();
	c->peer_ahash = ux_addr_hash(b + ADDR_BODY_FIXED, alen);
	if (c->peer_uid != c->p->uid) { /* another instance: the link to it (see "Links") */
		struct ulink *l = ux_link_find(c->w, c->peer_uid, c->peer_ahash);

		if (l && l->state == LK_UNLINKING) { /* wait for the peer's answer (ux_link_pump) */
			c->paddr = malloc(alen);
			if (!c->paddr) {
				c->peer_uid = c->peer_id = 0;
				return DOCA_ERROR_NO_MEMORY;
			}
			memcpy(c->paddr, b + ADDR_BODY_FIXED, alen);
			c->paddr_len = alen;
			c->p->link_waiters++;
		} else {
			if (!l)
				l = ux_link_open(c->w, c->peer_uid, c->same_host, b + ADDR_BODY_FIXED, alen, why);
			if (!l) {
				c->peer_uid = c->peer_id = 0;
				return DOCA_ERROR_CONNECTION_ABORTED;
			}
			ux_link_attach(c, l);
		}
	} else {
		ep = ep_params(c); /* loopback: UCP connects the endpoint to itself */
		ep.field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
		ep.address = (const ucp_address_t *)(b + ADDR_BODY_FIXED);
		s = UX.ep_create(c->w->h, &ep, &c->ep);
		if (s != UCS_OK) {
			c->ep = NULL;
			WHY(why, "ucx: cannot reach the peer's worker address: %s", ustr(s));
			c->peer_uid = c->peer_id = 0;
			return DOCA_ERROR_CONNECTION_ABORTED;
		}
		c->p->eps++;
	}
	c->state = CS_CONNECTING;
	c->connected_local = 1;
	c->deadline_ns = now_ns() + c->p->timeout_ns;
	e = c->ep ? ux_send_ctrl(c, AM_HELLO, NULL, 0) : DOCA_SUCCESS; /* a waiting one says HELLO once attached */
	ux_conn_kick(c);
	return e;
}

static void conn_handler(ucp_conn_request_h req, void *arg)
{
	struct sd_prov_listener *l = arg;
	struct sd_prov *p = l->p;
	struct uconn *c = conn_alloc(p, NULL);
	ucp_conn_request_attr_t ra;
	ucp_ep_params_t ep;

	if (!c) {
		UX.listener_reject(l->l, req);
		return;
	}
	memset(&ra, 0, sizeof(ra));
	ra.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
	if (UX.conn_request_query(req, &ra) == UCS_OK)
		c->peer_ss = ra.client_address;
	c->is_cm = 1;
	c->listener = l;
	c->w = l->w; /* the request came to the listener's worker */
	ep = ep_params(c);
	ep.field_mask |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
	ep.conn_request = req;
	if (UX.ep_create(c->w->h, &ep, &c->ep) != UCS_OK) {
		c->ep = NULL;
		c->closed_by_user = 1; /* never reported: freed at the next progress */
		c->state = CS_FAILED;
		return;
	}
	c->p->eps++;
	c->state = CS_CM_WAIT_REQ;
	c->deadline_ns = now_ns() + p->timeout_ns;
}

doca_error_t ux_listen(struct sd_prov *p, struct sockaddr_storage *addr, socklen_t *alen, void *ctx,
		       struct sd_prov_listener **out, struct sd_prov_why *why)
{
	struct sd_prov_listener *l;
	ucp_listener_params_t lp;
	ucp_listener_attr_t la;
	ucs_status_t s;

	if (!p || !addr || !alen || !out)
		return DOCA_ERROR_INVALID_VALUE;
	if (!p->cm)
		return no_cm(why);
	l = calloc(1, sizeof(*l));
	if (!l)
		return DOCA_ERROR_NO_MEMORY;
	l->p = p;
	l->w = p->w;
	l->ctx = ctx;
	memset(&lp, 0, sizeof(lp));
	lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
	lp.sockaddr.addr = (const struct sockaddr *)addr;
	lp.sockaddr.addrlen = *alen;
	lp.conn_handler.cb = conn_handler;
	lp.conn_handler.arg = l;
	s = UX.listener_create(l->w->h, &lp, &l->l);
	if (s != UCS_OK) {
		WHY(why, "ucx: cannot listen: %s", ustr(s));
		free(l);
		return s == UCS_ERR_BUSY ? DOCA_ERROR_IN_USE : map_status(s);
	}
	l->w->listeners++;
	memset(&la, 0, sizeof(la));
	la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
	if (UX.listener_query(l->l, &la) == UCS_OK) {
		memcpy(addr, &la.sockaddr, sizeof(*addr));
		*alen = la.sockaddr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	}
	*out = l;
	return DOCA_SUCCESS;
}

void ux_listener_close(struct sd_prov_listener *l)
{
	if (!l)
		return;
	UX.listener_destroy(l->l);
	l->w->listeners--;
	for (struct uconn *c = l->p->conns; c; c = c->next)
		if (c->listener == l)
			c->listener = NULL;
	free(l);
}

doca_error_t ux_accept(struct sd_prov_conn *pc, const void *priv, size_t priv_len)
{
	struct uconn *c = (struct uconn *)pc;
	doca_error_t e;

	if (!c || priv_len > SD_PROV_MAX_PRIV || (priv_len && !priv))
		return DOCA_ERROR_INVALID_VALUE;
	if (c->state != CS_CM_REQUESTED)
		return c->state == CS_FAILED ? c->fail_status : DOCA_ERROR_BAD_STATE;
	e = ux_send_ctrl(c, AM_CM_ACCEPT, priv, priv_len);
	if (e == DOCA_SUCCESS) {
		c->state = CS_CM_ACCEPTED;
		c->deadline_ns = now_ns() + c->p->timeout_ns;
	}
	return e;
}

/* Close once what was sent is at the peer (ucp_ep_flush_nbx), bounded by
 * timeout_ms; then a forced close (a graceful ucp_ep_close_nbx waits for the
 * peer's side, which may be closing too). This also makes a close in the
 * middle of the endpoint's wire-up safe: UCX 1.13 aborts the process when a
 * wire-up reply comes for an endpoint already closed, and UCP holds a flush
 * until the wire-up is over (its wire-up endpoint answers a flush with
 * UCS_ERR_NO_RESOURCE, which queues it). The deadline is the one exception,
 * as for any op: a peer that never answers within timeout_ms is gone. */
static void close_after_flush(struct uconn *c)
{
	uint64_t before = c->flush_issued;

	c->state = CS_CLOSING;
	c->deadline_ns = now_ns() + c->p->timeout_ns;
	ux_issue_flush(c);
	c->close_seq = c->flush_issued;
	if (c->ep && c->flush_issued == before && !c->flush_inflight)
		c->close_seq = before + 1; /* no flush could be issued (no memory): the deadline closes it */
	ux_conn_kick(c);
}

doca_error_t ux_reject(struct sd_prov_conn *pc, const void *priv, size_t priv_len)
{
	struct uconn *c = (struct uconn *)pc;

	if (!c || priv_len > SD_PROV_MAX_PRIV || (priv_len && !priv))
		return DOCA_ERROR_INVALID_VALUE;
	if (c->state != CS_CM_REQUESTED)
		return c->state == CS_FAILED ? c->fail_status : DOCA_ERROR_BAD_STATE;
	ux_send_ctrl(c, AM_CM_REJECT, priv, priv_len);
	c->closed_by_user = 1;
	close_after_flush(c); /* the REJECT reaches the client first */
	return DOCA_SUCCESS;
}

doca_error_t ux_connect_addr(struct sd_prov *p, const struct sockaddr *addr, socklen_t alen, const void *priv,
			     size_t priv_len, void *ctx, struct sd_prov_conn **out, struct sd_prov_why *why)
{
	struct uconn *c;
	ucp_ep_params_t ep;
	ucs_status_t s;
	doca_error_t e;

	if (!p || !addr || !out || priv_len > SD_PROV_MAX_PRIV || (priv_len && !priv))
		return DOCA_ERROR_INVALID_VALUE;
	if (!p->cm)
		return no_cm(why);
	c = conn_alloc(p, ctx);
	if (!c)
		return DOCA_ERROR_NO_MEMORY;
	c->is_cm = c->cm_client = 1;
	ep = ep_params(c);
	ep.field_mask |= UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_FLAGS;
	ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
	ep.sockaddr.addr = addr;
	ep.sockaddr.addrlen = alen;
	s = UX.ep_create(c->w->h, &ep, &c->ep);
	if (s != UCS_OK) {
		c->ep = NULL;
		WHY(why, "ucx: cannot connect: %s", ustr(s));
		c->closed_by_user = 1;
		c->state = CS_FAILED;
		return DOCA_ERROR_CONNECTION_ABORTED;
	}
	p->eps++;
	c->state = CS_CONNECTING;
	c->deadline_ns = now_ns() + p->timeout_ns;
	e = ux_send_ctrl(c, AM_CM_REQ, priv, priv_len);
	if (e) {
		c->closed_by_user = 1;
		close_ep(c, 1);
		c->state = CS_FAILED;
		return e;
	}
	*out = (struct sd_prov_conn *)c;
	return DOCA_SUCCESS;
}

int ux_closing(struct sd_prov *p)
{
	int n = 0;

	for (struct uconn *c = p ? p->conns : NULL; c; c = c->next)
		n += c->closed_by_user && c->state == CS_CLOSING && c->ep != NULL; /* its flush is not done */
	for (struct ulink *l = p ? p->links : NULL; l; l = l->next)
		n += l->state == LK_UNLINKING || l->ep || l->close_req; /* the peer's answer, the close's flush */
	return n;
}

void ux_conn_set_ctx(struct sd_prov_conn *pc, void *ctx)
{
	if (pc)
		((struct uconn *)pc)->ctx = ctx;
}

void ux_conn_transport(struct sd_prov_conn *pc, char *out, size_t n)
{
	struct uconn *c = (struct uconn *)pc;

	if (!c->transport[0] && c->ep)
		ep_transport(c->ep, c->transport, sizeof(c->transport));
	snprintf(out, n, "%s", c->transport);
}

void ux_conn_close(struct sd_prov_conn *pc)
{
	struct uconn *c = (struct uconn *)pc;

	if (!c || c->closed_by_user)
		return;
	c->closed_by_user = 1;
	if (c->paddr) /* still waiting for its link (ux_link_pump): it must not get one now */
		ux_link_put(c);
	if (c->same_host && c->hello_seen && !c->bye_seen)
		ux_probe_start(c->w); /* its process may have died mid-send (ucx_worker.c) */
	if (c->wb && c->state == CS_ESTABLISHED) /* batches not sent yet leave before the BYE */
		ux_amw_send_now(c);
	if (c->state == CS_ESTABLISHED)
		ux_send_ctrl(c, AM_BYE, NULL, 0);
	if (c->state != CS_FAILED) {
		/* queued (gated) ops never left: they fail */
		while (c->gate_head) {
			struct uop *o = c->gate_head;

			c->gate_head = o->gnext;
			o->gnext = NULL;
			o->status = DOCA_ERROR_CONNECTION_RESET;
			ux_op_to_done(o);
		}
		c->gate_tail = NULL;
		while (c->await_head) {
			struct uop *o = c->await_head;

			c->await_head = o->gnext;
			ux_op_to_done(o); /* its data left; the close flushes it */
		}
		while (c->amw_head) { /* small writes that left: reported as the puts above */
			struct uop *o = c->amw_head;

			c->amw_head = o->gnext;
			o->gnext = NULL;
			ux_op_to_done(o);
		}
		c->amw_tail = NULL;
		rxq_free(c);
		close_after_flush(c);
	}
	c->p->kick_any = 1;
}
