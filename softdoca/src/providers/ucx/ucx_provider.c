/*
 * softdoca provider `ucx`: the provider interface (../provider.h) on UCP.
 *
 * libucp.so.0 is dlopened at the first probe/open, so softdoca builds and runs
 * where UCX is absent; the build needs only <ucp/api/ucp.h> (libucx-dev) for
 * the types and constants.
 *
 * Instance: one ucp_context + one current ucp_worker (RMA | AMO64 | AM | WAKEUP;
 * a worker whose shared-memory queue a killed peer stalled is swapped for a
 * fresh one: ucx_worker.c), the workers reporting into one epoll fd,
 * UCS_THREAD_MODE_SERIALIZED: the provider contract has the caller serialize
 * every call (softdoca's engine lock is held by the engine thread while it
 * progresses and by application threads while they submit), so UCP's own
 * locking (MULTI) would only add a lock per call; SINGLE is not enough since
 * the calls come from more than one thread.
 * UCX picks the transports; UCX_TLS / UCX_NET_DEVICES are read by UCX from the
 * environment and never set here.
 *
 * Messages: one AM id (SD_UCX_AM_ID) with a fixed header (struct am_hdr):
 * connection handshakes (OOB HELLO; CM REQ / ACCEPT / REJECT / RTU), sends,
 * the immediate of write-with-immediate, BYE. Every header names the
 * receiver's connection id, so several connections between the same two
 * workers are kept apart; sends carry a per-connection sequence and the
 * receiver delivers in that order whatever the lanes did.
 *
 * Endpoints: the connections between two instances share one endpoint, their
 * link (see "Links": UCP pairs address-made endpoints in creation order).
 * Connections within one instance and CM connections have their own.
 *
 * Ordering: UCP orders neither RMA against AM nor puts' remote completion
 * against anything. So a connection tracks whether puts were issued since its
 * last ucp_ep_flush_nbx ("dirty"); a send, the immediate of a
 * write-with-immediate, a read or an atomic that follows puts waits (in a FIFO
 * gate, preserving their order) until a flush issued after those puts
 * completed, i.e. the data is at the target. A write completes (DOCA: the
 * data is at the target) when its puts completed locally and a flush issued
 * after them completed; one flush per progress round covers every write of
 * the round.
 *
 * Small writes: where UCX has no RMA of its own (not verbs), a write of up to
 * 1 KiB is an entry of a batch sent as one active message, applied and checked
 * by the target and acknowledged (ucx_amw.c); ops behind such writes wait in
 * the gate for those acknowledgements as they wait for a flush behind puts.
 *
 * Remote keys: the rkey blob carries softdoca's base / length / access and the
 * owner instance's uid next to ucp_rkey_pack's bytes; ops are checked against
 * them before they leave (tcp, shared memory and cma enforce nothing at the
 * target, see caps). ucp_ep_rkey_unpack is per endpoint, so imported keys are
 * unpacked lazily per connection and cached on it.
 *
 * Failure: every endpoint uses UCP_ERR_HANDLING_MODE_PEER; its error callback
 * fails the connection (force close: UCP completes its outstanding requests
 * with an error). Connection set-up and every outstanding op also have a
 * deadline (timeout_ms): past it the connection is failed the same way, so
 * nothing waits on a peer that died where UCX does not notice (shared memory).
 *
 * Files: this one (loading libucp, the instance, progress and arming, memory
 * registration and remote keys, the ops table); ucx_worker.c (workers, the
 * receive-queue probe, the swap); ucx_amw.c (small writes as batches);
 * ucx_conn.c (connections: OOB
 * and CM set-up, control messages, failure, close); ucx_link.c (the shared
 * endpoint of two instances); ucx_rx.c (incoming active messages, delivery in
 * order, rendezvous placement); ucx_ops.c (data operations and the flush
 * gate); ucx_internal.h (their shared types, nothing outside this folder).
 */
#define _GNU_SOURCE
#include "ucx_internal.h"

#include <sys/epoll.h>

/* ------------------------------------------------------------------ dlopen */
struct ucx_api UX;
static pthread_once_t u_once = PTHREAD_ONCE_INIT;

static void u_load(void)
{
	void *h = dlopen("libucp.so.0", RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		snprintf(UX.err, sizeof(UX.err), "libucp.so.0 not found (%s): install UCX (Debian: libucx0)", dlerror());
		return;
	}
#define SYM(field, name)                                                                              \
	do {                                                                                          \
		UX.field = (__typeof__(UX.field))dlsym(h, name);                                         \
		if (!UX.field) {                                                                       \
			snprintf(UX.err, sizeof(UX.err), "libucp.so.0 lacks %s: UCX >= 1.12 needed", name); \
			return;                                                                       \
		}                                                                                     \
	} while (0)
	SYM(config_read, "ucp_config_read");
	SYM(config_release, "ucp_config_release");
	SYM(init_version, "ucp_init_version");
	SYM(cleanup, "ucp_cleanup");
	SYM(worker_create, "ucp_worker_create");
	SYM(worker_destroy, "ucp_worker_destroy");
	SYM(worker_get_address, "ucp_worker_get_address");
	SYM(worker_release_address, "ucp_worker_release_address");
	SYM(worker_progress, "ucp_worker_progress");
	SYM(worker_get_efd, "ucp_worker_get_efd");
	SYM(worker_arm, "ucp_worker_arm");
	SYM(worker_set_am_recv_handler, "ucp_worker_set_am_recv_handler");
	SYM(ep_create, "ucp_ep_create");
	SYM(ep_close_nbx, "ucp_ep_close_nbx");
	SYM(ep_flush_nbx, "ucp_ep_flush_nbx");
	SYM(ep_print_info, "ucp_ep_print_info");
	SYM(mem_map, "ucp_mem_map");
	SYM(mem_unmap, "ucp_mem_unmap");
	SYM(rkey_pack, "ucp_rkey_pack");
	SYM(rkey_buffer_release, "ucp_rkey_buffer_release");
	SYM(ep_rkey_unpack, "ucp_ep_rkey_unpack");
	SYM(rkey_destroy, "ucp_rkey_destroy");
	SYM(put_nbx, "ucp_put_nbx");
	SYM(get_nbx, "ucp_get_nbx");
	SYM(atomic_op_nbx, "ucp_atomic_op_nbx");
	SYM(am_send_nbx, "ucp_am_send_nbx");
	SYM(am_recv_data_nbx, "ucp_am_recv_data_nbx");
	SYM(am_data_release, "ucp_am_data_release");
	SYM(request_free, "ucp_request_free");
	SYM(listener_create, "ucp_listener_create");
	SYM(listener_destroy, "ucp_listener_destroy");
	SYM(listener_query, "ucp_listener_query");
	SYM(listener_reject, "ucp_listener_reject");
	SYM(conn_request_query, "ucp_conn_request_query");
	SYM(get_version, "ucp_get_version");
	SYM(status_string, "ucs_status_string");
#undef SYM
	UX.get_version(&UX.major, &UX.minor, &UX.release);
	UX.loaded = 1; /* never dlclosed: UCX keeps global state (memory hooks, modules) */
}

static doca_error_t u_probe(struct sd_prov_why *why)
{
	pthread_once(&u_once, u_load);
	if (!UX.loaded) {
		if (why)
			snprintf(why->msg, sizeof(why->msg), "provider ucx: %s", UX.err);
		return DOCA_ERROR_NOT_SUPPORTED;
	}
	return DOCA_SUCCESS;
}

/* ------------------------------------------------------------------ progress */
int ux_progress(struct sd_prov *p)
{
	int n = 0;
	uint64_t now;

	if (p->amw_fill) /* small writes gathered since the last round leave (ucx_amw.c) */
		ux_amw_send_all(p);
	for (struct uworker *w = p->workers; w; w = w->next)
		for (int i = 0; i < 256; i++) {
			unsigned k = UX.worker_progress(w->h);

			if (!k)
				break;
			n += (int)k;
		}
	while (p->place_done) {
		struct uplace *pl = p->place_done;
		doca_error_t st = map_status(pl->st);

		p->place_done = pl->next;
		pl->c->rx_placing = 0;
		ux_conn_kick(pl->c);
		if (pl->c->closed_by_user && st == DOCA_SUCCESS)
			st = DOCA_ERROR_CONNECTION_RESET;
		/* even after conn_close: the owner of dst gets it back only here */
		p->cbs.rx_done(p->cbs.arg, pl->rx_ctx, st, st ? 0 : pl->len);
		free(pl);
		n++;
	}
	p->kick_any = 0;
	now = now_ns();
	if (p->links)
		ux_link_pump(p, now);
	for (struct uconn *c = p->conns; c; c = c->next)
		n += ux_conn_pump(c, now);
	while (p->done_head) {
		struct uop *o = p->done_head;

		p->done_head = o->next;
		if (!p->done_head)
			p->done_tail = NULL;
		if (o->type != OP_CTRL && o->type != OP_IFLUSH) {
			p->cbs.op_done(p->cbs.arg, o->op_ctx, o->status);
			n++;
		}
		if (o->pending > 0) {
			o->orphan = 1;
			o->next = p->orphans;
			p->orphans = o;
		} else {
			o->next = p->free_ops;
			p->free_ops = o;
		}
	}
	for (struct uop **pp = &p->orphans; *pp;) {
		struct uop *o = *pp;

		if (o->pending > 0) {
			pp = &o->next;
			continue;
		}
		*pp = o->next;
		o->next = p->free_ops;
		p->free_ops = o;
	}
	for (struct uconn *c = p->conns, *nx; c; c = nx) {
		nx = c->next;
		if (ux_conn_freeable(c))
			ux_conn_free(c);
	}
	ux_probe_pump(p, now);
	if (p->workers->next)
		ux_worker_sweep(p);
	return n;
}

static doca_error_t u_get_fd(struct sd_prov *p, int *fd)
{
	*fd = p->efd;
	return p->efd >= 0 ? DOCA_SUCCESS : DOCA_ERROR_NOT_SUPPORTED;
}

static doca_error_t u_arm(struct sd_prov *p, int *max_sleep_ms)
{
	uint64_t now = now_ns(), next = UINT64_MAX;
	ucs_status_t s;

	if (p->done_head || p->kick_any || p->place_done || (p->amw_fill && ux_amw_ready(p)))
		return DOCA_ERROR_AGAIN;
	for (struct uconn *c = p->conns; c; c = c->next) {
		if (c->kicked || c->pending_ev || c->cm_pending_event)
			return DOCA_ERROR_AGAIN;
		if (c->deadline_ns && c->state != CS_ESTABLISHED && c->state != CS_FAILED && c->deadline_ns < next)
			next = c->deadline_ns;
		if (c->outstanding && c->state != CS_FAILED && c->outstanding->start_ns + p->timeout_ns < next)
			next = c->outstanding->start_ns + p->timeout_ns;
	}
	for (struct ulink *l = p->links; l; l = l->next) {
		if (l->state == LK_CLOSING && (l->ep || (!l->close_req && !l->sends)))
			return DOCA_ERROR_AGAIN;
		if (l->state != LK_CLOSING && l->deadline_ns && l->deadline_ns < next)
			next = l->deadline_ns;
	}
	if (p->probe.due_ns && p->probe.due_ns < next) /* its verdict: ux_probe_pump */
		next = p->probe.due_ns;
	for (struct uworker *w = p->workers; w; w = w->next) {
		s = UX.worker_arm(w->h);
		if (s == UCS_ERR_BUSY)
			return DOCA_ERROR_AGAIN;
		if (s != UCS_OK)
			return map_status(s);
	}
	if (max_sleep_ms)
		*max_sleep_ms = next == UINT64_MAX ? -1 : next <= now ? 0 : (int)((next - now) / 1000000 + 1);
	return DOCA_SUCCESS;
}

/* ------------------------------------------------------------------ open / close */
static doca_error_t u_open(const struct sd_prov_open_params *prm, struct sd_prov **out, struct sd_prov_why *why)
{
	struct sd_prov *p;
	ucp_config_t *cfg = NULL;
	ucp_params_t up;
	ucs_status_t s;
	doca_error_t e;
	FILE *ur;

	if (!prm || !prm->cbs || !prm->cbs->op_done || !prm->cbs->rx || !prm->cbs->rx_done || !out)
		return DOCA_ERROR_INVALID_VALUE;
	e = u_probe(why);
	if (e)
		return e;
	p = calloc(1, sizeof(*p));
	if (!p)
		return DOCA_ERROR_NO_MEMORY;
	p->cbs = *prm->cbs;
	p->efd = -1;
	p->timeout_ns = (uint64_t)(prm->timeout_ms ? prm->timeout_ms : 5000) * 1000000ull;
	ur = fopen("/dev/urandom", "rb");
	if (!ur || fread(&p->uid, sizeof(p->uid), 1, ur) != 1)
		p->uid = now_ns() ^ ((uint64_t)getpid() << 32);
	if (ur)
		fclose(ur);
	p->uid |= 1;
	p->host = ux_host_id();
	{
		const char *amw = getenv("SOFTDOCA_UCX_AM_WRITES");

		p->amw_env = amw && *amw ? atoi(amw) != 0 : -1;
		p->cm = ux_cm_enabled(); /* UCX_TLS is read once, like UCX's own configuration */
	}
	s = UX.config_read(NULL, NULL, &cfg);
	if (s != UCS_OK) {
		WHY(why, "provider ucx: ucp_config_read: %s (check the UCX_* environment)", ustr(s));
		free(p);
		return DOCA_ERROR_BAD_CONFIG;
	}
	memset(&up, 0, sizeof(up));
	up.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
	up.features = UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
	up.name = "softdoca";
	s = UX.init_version(UCP_API_MAJOR, UCP_API_MINOR, &up, cfg, &p->ctx);
	UX.config_release(cfg);
	if (s != UCS_OK) {
		WHY(why, "provider ucx: ucp_init: %s (UCX_TLS=%s: does it name a transport present here?)", ustr(s),
		    getenv("UCX_TLS") ? getenv("UCX_TLS") : "(unset)");
		free(p);
		return DOCA_ERROR_INITIALIZATION;
	}
	p->efd = epoll_create1(EPOLL_CLOEXEC);
	if (p->efd < 0) {
		WHY(why, "provider ucx: epoll_create1: %s", strerror(errno));
		UX.cleanup(p->ctx);
		free(p);
		return DOCA_ERROR_INITIALIZATION;
	}
	if (!ux_worker_new(p, why)) {
		close(p->efd);
		UX.cleanup(p->ctx);
		free(p);
		return DOCA_ERROR_INITIALIZATION;
	}
	*out = p;
	return DOCA_SUCCESS;
}

static doca_error_t u_close(struct sd_prov *p)
{
	if (!p)
		return DOCA_ERROR_INVALID_VALUE;
	if (p->nmr || p->nrkey)
		return DOCA_ERROR_IN_USE;
	for (struct ulink *l = p->links; l; l = l->next)
		ux_link_close(l, 1); /* before the connections leave them: no UNLINK */
	for (struct uconn *c = p->conns; c; c = c->next) {
		c->closed_by_user = 1;
		if (c->state != CS_FAILED)
			ux_conn_fail(c, 1, DOCA_ERROR_CONNECTION_RESET, SD_PROV_FAIL_LOST, "provider closed");
		if (c->link || c->paddr)
			ux_link_put(c);
	}
	for (struct ulink *l = p->links; l; l = l->next)
		if (l->ep)
			ux_link_close_ep(l);
	/* let the closes finish, bounded */
	for (uint64_t end = now_ns() + (p->timeout_ns < 2000000000ull ? p->timeout_ns : 2000000000ull); now_ns() < end;) {
		int busy = 0;

		for (struct uworker *w = p->workers; w; w = w->next)
			UX.worker_progress(w->h);
		for (struct uconn *c = p->conns; c; c = c->next)
			busy |= c->close_req != NULL || c->rx_placing;
		for (struct ulink *l = p->links; l; l = l->next)
			busy |= l->close_req != NULL || l->sends;
		if (!busy)
			break;
	}
	for (struct uconn *c = p->conns; c; c = c->next)
		ux_rkc_clear(c);
	ux_probe_close(p);
	while (p->workers) { /* before freeing what UCX callbacks may touch */
		struct uworker *w = p->workers;

		p->workers = w->next;
		UX.worker_destroy(w->h);
		free(w);
	}
	UX.cleanup(p->ctx);
	close(p->efd);
	while (p->done_head) {
		struct uop *o = p->done_head;

		p->done_head = o->next;
		free(o);
	}
	while (p->orphans) {
		struct uop *o = p->orphans;

		p->orphans = o->next;
		free(o);
	}
	while (p->place_done) {
		struct uplace *pl = p->place_done;

		p->place_done = pl->next;
		free(pl);
	}
	while (p->conns) {
		struct uconn *c = p->conns;

		/* ops still listed (UCX did not complete them): free them */
		while (c->outstanding) {
			struct uop *o = c->outstanding;

			ux_op_unlink(o);
			free(o);
		}
		c->nrkc = 0; /* the rkeys went with the context */
		ux_conn_free(c);
	}
	while (p->free_ops) {
		struct uop *o = p->free_ops;

		p->free_ops = o->next;
		free(o);
	}
	while (p->links) { /* what UCX still held went with the worker */
		struct ulink *l = p->links;

		p->links = l->next;
		free(l);
	}
	free(p->slots);
	free(p->gens);
	free(p);
	return DOCA_SUCCESS;
}

static void u_caps(struct sd_prov *p, struct sd_prov_caps *caps)
{
	int verbs;

	memset(caps, 0, sizeof(*caps));
	snprintf(caps->name, sizeof(caps->name), PROV_NAME);
	snprintf(caps->version, sizeof(caps->version), "%u.%u.%u", UX.major, UX.minor, UX.release);
	snprintf(caps->transport, sizeof(caps->transport), "%s", p->transport);
	verbs = strstr(p->transport, "rc") || strstr(p->transport, "dc") || strstr(p->transport, "ud");
	/* verbs memory regions bound remote access; UCX 1.13 registers them with
	 * every remote right, so access bits are softdoca's to check */
	caps->enforce = verbs ? SD_PROV_ENF_BOUNDS | SD_PROV_ENF_REVOKE : 0;
	/* ucp_worker_progress counts the puts and messages it served; the worker's fd is armed by
	 * ucp_worker_arm (its eventfd read, its shared-memory signal socket drained) */
	caps->flags = SD_PROV_CAP_OOB | (p->cm ? SD_PROV_CAP_CM : 0) | SD_PROV_CAP_FD | SD_PROV_CAP_CHECK_REQUESTER |
		      SD_PROV_CAP_SPIN_UNARMED |
		      (verbs ? SD_PROV_CAP_ATOMIC_NATIVE | SD_PROV_CAP_ONE_SIDED_NO_TARGET : 0);
	/* UCX's shared-memory transports (mm: posix, sysv, xpmem): ucp_worker_arm sets the FIFO's armed
	 * flag, and the next sender sends a datagram that the next arm drains */
	if (strstr(p->transport, "posix") || strstr(p->transport, "sysv") || strstr(p->transport, "xpmem"))
		caps->flags |= SD_PROV_CAP_ARM_SIGNALS;
	caps->max_msg = 1ull << 30;
	caps->max_iov = MAX_IOV;
	caps->max_priv = SD_PROV_MAX_PRIV;
	caps->thread_mode = 0;
}

/* ------------------------------------------------------------------ memory */
#define ACCESS_MASK 0x7fu

static doca_error_t u_reg_mem(struct sd_prov *p, void *addr, size_t len, uint32_t access, struct sd_prov_mr **out,
			      void **blob, size_t *blob_len)
{
	struct sd_prov_mr *mr;
	ucp_mem_map_params_t mp;
	void *packed = NULL;
	size_t plen = 0;
	ucs_status_t s;
	uint8_t *b;
	uint32_t total;

	if (!p || !addr || !len || (access & ~ACCESS_MASK) || !out || !blob || !blob_len)
		return DOCA_ERROR_INVALID_VALUE;
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return DOCA_ERROR_NO_MEMORY;
	memset(&mp, 0, sizeof(mp));
	mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
	mp.address = addr;
	mp.length = len;
	s = UX.mem_map(p->ctx, &mp, &mr->memh);
	if (s != UCS_OK) {
		free(mr);
		return map_status(s);
	}
	s = UX.rkey_pack(p->ctx, mr->memh, &packed, &plen);
	if (s != UCS_OK || plen > SD_PROV_BLOB_MAX - SD_PROV_BLOB_HDR_LEN - RKEY_BODY_FIXED) {
		if (s == UCS_OK)
			UX.rkey_buffer_release(packed);
		UX.mem_unmap(p->ctx, mr->memh);
		free(mr);
		return s != UCS_OK ? map_status(s) : DOCA_ERROR_TOO_BIG;
	}
	total = (uint32_t)(SD_PROV_BLOB_HDR_LEN + RKEY_BODY_FIXED + plen);
	b = malloc(total);
	if (!b) {
		UX.rkey_buffer_release(packed);
		UX.mem_unmap(p->ctx, mr->memh);
		free(mr);
		return DOCA_ERROR_NO_MEMORY;
	}
	sd_prov_blob_begin(b, PROV_NAME, SD_PROV_BLOB_RKEY, total);
	put64(b + 32, (uint64_t)(uintptr_t)addr);
	put64(b + 40, len);
	put32(b + 48, access);
	put32(b + 52, 0);
	put64(b + 56, p->uid);
	put32(b + 64, (uint32_t)plen);
	put32(b + 68, 0);
	memcpy(b + 72, packed, plen);
	sd_prov_blob_seal(b, total);
	UX.rkey_buffer_release(packed);
	mr->addr = addr;
	mr->len = len;
	mr->access = access;
	mr->next = p->mrs;
	if (p->mrs)
		p->mrs->prev = mr;
	p->mrs = mr;
	p->nmr++;
	*out = mr;
	*blob = b;
	*blob_len = total;
	return DOCA_SUCCESS;
}

static doca_error_t u_dereg_mem(struct sd_prov *p, struct sd_prov_mr *mr)
{
	ucs_status_t s;

	if (!p || !mr)
		return DOCA_ERROR_INVALID_VALUE;
	s = UX.mem_unmap(p->ctx, mr->memh);
	if (mr->prev)
		mr->prev->next = mr->next;
	else
		p->mrs = mr->next;
	if (mr->next)
		mr->next->prev = mr->prev;
	free(mr);
	p->nmr--;
	return map_status(s);
}

static doca_error_t u_rkey_import(struct sd_prov *p, const void *blob, size_t len, struct sd_prov_rkey **out,
				  uint64_t *base, uint64_t *rlen, uint32_t *access, struct sd_prov_why *why)
{
	const uint8_t *b;
	size_t bl;
	doca_error_t e;
	struct sd_prov_rkey *rk;
	uint64_t rb, rl;
	uint32_t acc, plen;

	if (!p || !out)
		return DOCA_ERROR_INVALID_VALUE;
	e = sd_prov_blob_check(blob, len, PROV_NAME, SD_PROV_BLOB_RKEY, &b, &bl, why);
	if (e)
		return e;
	if (bl < RKEY_BODY_FIXED) {
		WHY(why, "ucx remote key blob: body of %zu bytes, at least %u expected", bl, RKEY_BODY_FIXED);
		return DOCA_ERROR_INVALID_VALUE;
	}
	rb = get64(b);
	rl = get64(b + 8);
	acc = get32(b + 16);
	plen = get32(b + 32);
	if (plen == 0 || plen != bl - RKEY_BODY_FIXED || rl == 0 || rb + rl < rb || (acc & ~ACCESS_MASK) ||
	    get64(b + 24) == 0) {
		WHY(why, "ucx remote key blob: inconsistent fields (range 0x%llx+%llu, access 0x%x, key %u of %zu bytes)",
		    (unsigned long long)rb, (unsigned long long)rl, acc, plen, bl - RKEY_BODY_FIXED);
		return DOCA_ERROR_INVALID_VALUE;
	}
	rk = malloc(sizeof(*rk) + plen);
	if (!rk)
		return DOCA_ERROR_NO_MEMORY;
	rk->base = rb;
	rk->len = rl;
	rk->access = acc;
	rk->owner = get64(b + 24);
	rk->packed_len = plen;
	memcpy(rk->packed, b + RKEY_BODY_FIXED, plen);
	p->nrkey++;
	*out = rk;
	if (base)
		*base = rb;
	if (rlen)
		*rlen = rl;
	if (access)
		*access = acc;
	return DOCA_SUCCESS;
}

static void u_rkey_release(struct sd_prov *p, struct sd_prov_rkey *rk)
{
	if (!p || !rk)
		return;
	for (struct uconn *c = p->conns; c; c = c->next)
		for (int i = 0; i < c->nrkc; i++)
			if (c->rkc[i].rk == rk) {
				UX.rkey_destroy(c->rkc[i].h);
				c->rkc[i] = c->rkc[--c->nrkc];
				break;
			}
	free(rk);
	p->nrkey--;
}

/* "worker_swaps", "probes" (ucx_worker.c); "amw_batches", "amw_writes" (ucx_amw.c: batches sent, writes
 * sent in them); "live_eps" (UCP endpoints created and not closed yet), "ep_graceful" (forced closes UCX
 * refused and that were done after a flush: ux_ep_close); "live_conns", "live_links", "live_workers"
 * (objects of the instance, closed connections included until they are freed); "conns_new" (open
 * connections that never got the peer's address: conn_connect not called). */
static long u_counter(struct sd_prov *p, const char *name)
{
	if (!strcmp(name, "worker_swaps"))
		return (long)p->swaps;
	if (!strcmp(name, "probes"))
		return (long)p->probes;
	if (!strcmp(name, "amw_batches"))
		return (long)p->amw_batches;
	if (!strcmp(name, "amw_writes"))
		return (long)p->amw_writes;
	if (!strcmp(name, "live_eps"))
		return p->eps;
	if (!strcmp(name, "ep_graceful"))
		return (long)p->ep_graceful;
	if (!strcmp(name, "conns_new")) {
		long n = 0;

		for (struct uconn *c = p->conns; c; c = c->next)
			n += c->state == CS_NEW && !c->closed_by_user;
		return n;
	}
	if (!strcmp(name, "live_conns") || !strcmp(name, "live_links") || !strcmp(name, "live_workers")) {
		long n = 0;

		if (!strcmp(name, "live_conns"))
			for (struct uconn *c = p->conns; c; c = c->next)
				n++;
		else if (!strcmp(name, "live_links"))
			for (struct ulink *l = p->links; l; l = l->next)
				n++;
		else
			for (struct uworker *w = p->workers; w; w = w->next)
				n++;
		return n;
	}
	return -1;
}

const struct sd_provider_ops sd_provider_ucx = {
	.name = PROV_NAME,
	.abi = SD_PROV_ABI,
	.probe = u_probe,
	.open = u_open,
	.close = u_close,
	.query_caps = u_caps,
	.progress = ux_progress,
	.get_fd = u_get_fd,
	.arm = u_arm,
	.reg_mem = u_reg_mem,
	.dereg_mem = u_dereg_mem,
	.rkey_import = u_rkey_import,
	.rkey_release = u_rkey_release,
	.conn_create = ux_conn_create,
	.conn_export = ux_conn_export,
	.conn_connect = ux_conn_connect,
	.listen = ux_listen,
	.listener_close = ux_listener_close,
	.accept = ux_accept,
	.reject = ux_reject,
	.connect_addr = ux_connect_addr,
	.conn_set_ctx = ux_conn_set_ctx,
	.conn_transport = ux_conn_transport,
	.conn_close = ux_conn_close,
	.closing = ux_closing,
	.write = ux_write,
	.read = ux_read,
	.atomic_fadd = ux_fadd,
	.atomic_cswap = ux_cswap,
	.send = ux_send,
	.write_imm = ux_write_imm,
	.flush = ux_flush,
	.rx_resume = ux_rx_resume,
	.counter = u_counter,
};
