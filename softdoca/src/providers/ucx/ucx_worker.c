/*
 * softdoca provider `ucx`, workers: the instance's UCP workers, the probe of the current one's
 * shared-memory receive queue, and the swap to a fresh worker. The design is described at the top
 * of ucx_provider.c.
 *
 * Why a swap. UCX 1.13's shared-memory receive queue (posix, sysv) is a FIFO of
 * slots that senders claim, fill and then mark written, and that the receiver
 * reads in order. A same-host sender killed between its claim and its mark
 * leaves a slot the worker waits on for good: from then on nothing any
 * same-host peer sends this worker over shared memory arrives. Neither UCX nor
 * this process can repair that queue; new connections go to a fresh worker,
 * which has a queue of its own, and the stalled one keeps what it carries and
 * is destroyed once none of it is left.
 *
 * When. (1) A probe: once a same-host connection ends without the peer's BYE
 * (its process may have died, perhaps mid-send), a small second worker sends
 * the current one a message over shared memory; if it has not arrived within
 * PROBE_MS of progress, the queue is stalled. (2) A same-host connection that
 * heard nothing from its peer within timeout_ms (set-up, or an operation's
 * completion) suspects its worker directly. A peer merely stopped or slow
 * costs a worker at most, which is harmless.
 *
 * Workers report into one epoll fd (the instance's fd), so the engine never
 * learns of a swap. Peers tell the new worker from the old by its address,
 * whose hash keys their links (ux_link_find).
 */
#define _GNU_SOURCE
#include "ucx_internal.h"

#define PROBE_MS 100

uint32_t ux_addr_hash(const void *addr, size_t len)
{
	return sd_prov_crc32(addr, len) | 1u; /* never 0: 0 is "none" */
}

struct uworker *ux_worker_new(struct sd_prov *p, struct sd_prov_why *why)
{
	struct uworker *w = calloc(1, sizeof(*w));
	ucp_worker_params_t wp;
	ucp_am_handler_param_t ap;
	ucp_address_t *a = NULL;
	size_t alen = 0;
	ucs_status_t s;

	if (!w) {
		WHY(why, "provider ucx: out of memory");
		return NULL;
	}
	w->p = p;
	memset(&wp, 0, sizeof(wp));
	wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_EVENT_FD;
	wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
	wp.event_fd = p->efd;
	s = UX.worker_create(p->ctx, &wp, &w->h);
	if (s != UCS_OK) {
		WHY(why, "provider ucx: ucp_worker_create: %s", ustr(s));
		free(w);
		return NULL;
	}
	memset(&ap, 0, sizeof(ap));
	ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
			UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
	ap.id = SD_UCX_AM_ID;
	ap.flags = UCP_AM_FLAG_WHOLE_MSG;
	ap.cb = ux_am_cb;
	ap.arg = w;
	s = UX.worker_set_am_recv_handler(w->h, &ap);
	if (s == UCS_OK)
		s = UX.worker_get_address(w->h, &a, &alen);
	if (s != UCS_OK) {
		WHY(why, "provider ucx: worker set-up: %s", ustr(s));
		UX.worker_destroy(w->h);
		free(w);
		return NULL;
	}
	w->ahash = ux_addr_hash(a, alen);
	UX.worker_release_address(w->h, a);
	w->next = p->workers;
	p->workers = w;
	p->w = w;
	return w;
}

static int op_on(const struct uop *list, const struct uworker *w)
{
	for (const struct uop *o = list; o; o = o->next)
		if (o->w == w && o->pending > 0)
			return 1;
	return 0;
}

/* A retired worker that nothing uses any more is destroyed (outside any UCX callback). */
void ux_worker_sweep(struct sd_prov *p)
{
	for (struct uworker **pp = &p->workers; *pp;) {
		struct uworker *w = *pp;
		/* the current one, or what UCX still holds (the done list is empty here: ux_progress drained it) */
		int used = w == p->w || w->listeners || op_on(p->orphans, w);

		for (struct uconn *c = p->conns; c && !used; c = c->next)
			used = c->w == w;
		for (struct ulink *l = p->links; l && !used; l = l->next)
			used = l->w == w;
		if (used) {
			pp = &w->next;
			continue;
		}
		*pp = w->next;
		UX.worker_destroy(w->h);
		free(w);
	}
}

static void probe_drop_ep(struct sd_prov *p)
{
	struct uprobe *pr = &p->probe;

	if (pr->ep) {
		ux_ep_close(p, pr->ep, 1, NULL, NULL); /* released once done; nothing waits on it */
		pr->ep = NULL;
	}
	pr->to = NULL;
	pr->due_ns = 0;
}

void ux_worker_suspect(struct uworker *w)
{
	struct sd_prov *p = w->p;
	struct uworker *old = p->w;

	if (w != old)
		return; /* retired already: new connections have a fresh worker */
	if (!ux_worker_new(p, NULL))
		return; /* keep the old one: better a suspect worker than none */
	p->swaps++;
	if (p->probe.to == old)
		probe_drop_ep(p);
}

static void probe_sent(void *req, ucs_status_t s, void *user)
{
	struct sd_prov *p = user;

	(void)s;
	UX.request_free(req);
	p->probe.sends--;
}

/* A same-host connection of w ended without its peer's BYE: probe w's receive queue. */
void ux_probe_start(struct uworker *w)
{
	struct sd_prov *p = w->p;
	struct uprobe *pr = &p->probe;
	ucp_request_param_t rp;
	ucs_status_ptr_t r;
	if (w != p->w || pr->due_ns)
		return; /* a retired worker needs no probe; one is under way */
	if (!pr->h) {
		ucp_worker_params_t wp;

		memset(&wp, 0, sizeof(wp));
		wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
		wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
		if (UX.worker_create(p->ctx, &wp, &pr->h) != UCS_OK) {
			pr->h = NULL;
			return;
		}
	}
	if (pr->to != w) {
		ucp_address_t *a = NULL;
		size_t alen = 0;
		ucp_ep_params_t ep;

		probe_drop_ep(p);
		memset(&ep, 0, sizeof(ep));
		ep.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
		ep.err_mode = UCP_ERR_HANDLING_MODE_NONE; /* shared memory has no other */
		if (UX.worker_get_address(w->h, &a, &alen) != UCS_OK)
			return;
		ep.field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
		ep.address = a;
		if (UX.ep_create(pr->h, &ep, &pr->ep) != UCS_OK)
			pr->ep = NULL;
		else
			p->eps++;
		UX.worker_release_address(w->h, a);
		if (!pr->ep)
			return;
		pr->to = w;
	}
	memset(&pr->hdr, 0, sizeof(pr->hdr));
	pr->hdr.magic = AM_MAGIC;
	pr->hdr.type = AM_PROBE;
	pr->hdr.uid = p->uid;
	pr->hdr.seq = ++pr->nonce;
	memset(&rp, 0, sizeof(rp));
	rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
	rp.flags = UCP_AM_SEND_FLAG_EAGER;
	rp.cb.send = probe_sent;
	rp.user_data = p;
	r = UX.am_send_nbx(pr->ep, SD_UCX_AM_ID, &pr->hdr, sizeof(pr->hdr), NULL, 0, &rp);
	if (UCS_PTR_IS_ERR(r))
		return;
	if (r)
		pr->sends++;
	pr->due_ns = now_ns() + PROBE_MS * 1000000ull;
	p->probes++;
}

/* The probe arrived (in the AM callback of worker w). */
void ux_probe_on_msg(struct uworker *w, const struct am_hdr *h)
{
	struct uprobe *pr = &w->p->probe;

	if (pr->to == w && pr->due_ns && h->uid == w->p->uid && h->seq == pr->nonce)
		pr->due_ns = 0; /* the queue moves */
}

/* After the workers' progress: a probe past its time did not get through the queue. */
void ux_probe_pump(struct sd_prov *p, uint64_t now)
{
	struct uprobe *pr = &p->probe;

	if (!pr->h)
		return;
	if (pr->sends || pr->due_ns)
		UX.worker_progress(pr->h);
	if (pr->due_ns && now > pr->due_ns) {
		pr->due_ns = 0;
		ux_worker_suspect(pr->to);
	}
}

void ux_probe_close(struct sd_prov *p)
{
	probe_drop_ep(p);
	if (p->probe.h)
		UX.worker_destroy(p->probe.h); /* what it still sends goes with it */
	p->probe.h = NULL;
}
