/*
 * softdoca engine: the frames of a link (its handshake's, then those of the
 * established connection), read by the rx framing (rdma_rx.c) and
 * dispatched here (the link's on_header / on_payload_done, which the
 * connection layer points at these two). Kept
 * here: the handshake frames' buffer, keepalive (PING / PONG), RNR_WAIT,
 * DISCONNECT, a provider address's buffer, RNR parking (a message with no
 * receive posted: its budget, its payload's place, its expiry, the sender's
 * failure), the peer's requests held behind a parked message
 * (sd_frames_park_holds), and the one-sided requests
 * (rdma_serve.c). Handed to the link's owner (struct sd_link_ops): the
 * answers to this side's requests (on_response_*), the peer's messages
 * (on_message_*: sends, a write's immediate, parking), refused requests
 * (on_refused: answered, then the connection breaks), and the handshake and
 * provider control frames once their payload arrived (on_ctrl).
 *
 * This module knows no DOCA object (tests/test_softdoca_layers.py).
 */
#include "rdma.h"

#include <stdlib.h>

/* While a message is parked, is a frame of this opcode held back until the
 * parked one is taken or expires? The peer's requests are (they come after
 * the parked message: a send, a write, a read, an atomic, a disconnect...),
 * as an RC QP's RNR stalls the peer's requests; the answers to this side's
 * requests and to its control frames, and keepalive / RNR-wait frames, are
 * not: they are read on, so this side's tasks complete while it has no
 * receive posted. One request header at most is held (the link then stops
 * reading): answers queued behind it wait with it. */
int sd_frames_park_holds(uint8_t op)
{
	switch (op) {
	case SD_OP_RESP:
	case SD_OP_READ_RESP:
	case SD_OP_ATOMIC_RESP:
	case SD_OP_PING:
	case SD_OP_PONG:
	case SD_OP_RNR_WAIT:
	case SD_OP_PROV_REVOKE_ACK:
	case SD_OP_PROV_CHECK_ACK:
		return 0;
	default:
		return 1;
	}
}

/* A one-sided READ or atomic: answered, or refused through the owner. */
static int request(struct sd_link *l, const struct sd_hdr *h)
{
	struct sd_prov_nak nak;
	doca_error_t st = DOCA_SUCCESS;
	int rc;

	if (h->opcode == SD_OP_READ) {
		rc = sd_serve_read(l, h, &st, &nak);
		if (rc == 1)
			rc = l->ops->on_refused(l, SD_OP_READ_RESP, h, h->rlen, st, &nak);
	} else {
		rc = sd_serve_atomic(l, h, &st, &nak);
		if (rc == 1)
			rc = l->ops->on_refused(l, SD_OP_ATOMIC_RESP, h, 8, st, &nak);
	}
	return rc != 0 ? -1 : 0;
}

int sd_frames_on_header(struct sd_link *l, doca_error_t *st)
{
	const struct sd_hdr *h = &l->rx;
	int established = l->ops->established(l);

	*st = DOCA_ERROR_CONNECTION_RESET;
	l->rx_action = SD_RXA_NONE;
	l->rx_discard = 0;
	l->rx_iovcnt = 0;
	l->rx_task = NULL;
	l->rx_ref = NULL;
	l->rx_status = DOCA_SUCCESS;
	if (h->opcode <= SD_OP_CM_RTU) {
		if (established)
			return -1;
		l->rx_action = SD_RXA_CTRL;
		sd_link_rx_into(l, l->ctrl_buf, h->payload_len);
		return 0;
	}
	if (!established) {
		SD_WARN("rdma: data frame (opcode %u) on a link that is not established", h->opcode);
		return -1;
	}
	if (l->parked && sd_frames_park_holds(h->opcode))
		return 1; /* acted on once the parked message is taken or expires (the link keeps the header) */
	switch (h->opcode) {
	case SD_OP_PING:
	case SD_OP_PONG:
	case SD_OP_RNR_WAIT:
	case SD_OP_DISCONNECT:
	case SD_OP_PROV_REVOKE:
	case SD_OP_PROV_REVOKE_ACK:
	case SD_OP_PROV_CHECK:
	case SD_OP_PROV_CHECK_ACK:
		l->rx_action = SD_RXA_CTRL;
		return 0;
	case SD_OP_PROV_ADDR: /* a provider connection's address (rdma_prov.c) */
		if (!h->payload_len || h->payload_len > (64u << 10) || l->prov_buf)
			return -1;
		l->prov_buf = malloc(h->payload_len);
		if (!l->prov_buf)
			return -1;
		l->rx_action = SD_RXA_CTRL;
		sd_link_rx_into(l, l->prov_buf, h->payload_len);
		return 0;
	case SD_OP_RESP:
	case SD_OP_READ_RESP:
	case SD_OP_ATOMIC_RESP:
		return l->ops->on_response_header(l, h);
	case SD_OP_WRITE:
	case SD_OP_WRITE_IMM:
		sd_serve_write(l, h); /* a refusal is answered once its payload is drained */
		return 0;
	case SD_OP_SEND:
	case SD_OP_SEND_IMM:
		return l->ops->on_message_header(l, h) != 0 ? -1 : 0;
	case SD_OP_READ:
	case SD_OP_CMP_SWP:
	case SD_OP_FETCH_ADD:
		return request(l, h);
	default:
		return -1;
	}
}

int sd_frames_on_payload_done(struct sd_link *l, doca_error_t *st)
{
	const struct sd_hdr *h = &l->rx;

	*st = DOCA_ERROR_CONNECTION_RESET;
	switch (l->rx_action) {
	case SD_RXA_CTRL:
		switch (h->opcode) {
		case SD_OP_PING: {
			struct sd_hdr p = {.opcode = SD_OP_PONG};
			return sd_link_send_ctrl(l, &p, NULL, 0);
		}
		case SD_OP_PONG:
		case SD_OP_RNR_WAIT:
			return 0;
		case SD_OP_DISCONNECT:
			SD_DBG("rdma: peer disconnected");
			return -1;
		default:
			return l->ops->on_ctrl(l, h);
		}
	case SD_RXA_WRITE:
		sd_serve_release(l);
		if (l->rx_status != DOCA_SUCCESS) {
			struct sd_prov_nak nak = l->rx_nak;
			struct sd_hdr hh = *h;

			return l->ops->on_refused(l, SD_OP_RESP, &hh, hh.payload_len, l->rx_status, &nak);
		}
		if (h->opcode == SD_OP_WRITE_IMM) /* its immediate takes a receive: the owner's */
			return l->ops->on_message_done(l);
		{
			struct sd_hdr r = {.opcode = SD_OP_RESP, .req_id = h->req_id, .status = DOCA_SUCCESS};

			sd_link_send_ctrl(l, &r, NULL, 0);
		}
		return 0;
	case SD_RXA_SEND:
	case SD_RXA_PARK:
	case SD_RXA_PARK_DEFER:
		return l->ops->on_message_done(l);
	case SD_RXA_READ_RESP:
	case SD_RXA_ATOMIC_RESP:
	case SD_RXA_NONE:
		return l->ops->on_response_done(l);
	}
	return -1;
}

/* ---------------------------------------------------------------- RNR parking */
/* A two-sided message (with_payload: a SEND's; else a WRITE_IMM's immediate)
 * with no receive posted: park it for the sender's RNR budget (at most the
 * engine timeout), its payload on the heap, or left in the socket when the
 * process's parks are full. -1: no budget (or no memory): RNR at once. */
int sd_frames_park_start(struct sd_link *l, const struct sd_hdr *h, int with_payload)
{
	uint64_t budget = h->budget_ms, T = sd_eng_timeout_ns() / 1000000ull;

	if (budget > T)
		budget = T;
	if (budget == 0 || (with_payload && h->payload_len > SD_RDMA_MAX_PARK))
		return -1;
	l->park = *h;
	l->park_len = with_payload ? h->payload_len : 0;
	l->park_defer = 0;
	if (l->park_len && sd_link_park_bytes() + l->park_len > sd_link_park_limit()) {
		l->park_defer = 1; /* the process's parks are full: the payload waits in the socket */
		l->park_len = 0;
	} else if (l->park_len && !sd_link_park_alloc(l, l->park_len)) {
		return -1;
	}
	l->park_since_ns = sd_now_ns();
	l->park_deadline_ns = l->park_since_ns + budget * 1000000ull;
	l->park_nak_ns = l->park_since_ns + sd_eng_timeout_ns() / 4;
	return 0;
}

void sd_frames_park_enter(struct sd_link *l)
{
	l->parked = 1;
	l->group->nparked++;
	/* a payload left in the socket: nothing behind it can be read; else the
	 * link reads on (sd_frames_park_holds says what waits) */
	if (l->park_defer)
		sd_link_set_rx_paused(l, 1);
}

void sd_frames_unpark(struct sd_link *l)
{
	sd_link_unpark(l);
	sd_link_set_rx_paused(l, 0);
}

/* RNR retries exhausted: the sender's op fails with TIME_OUT and the
 * connection breaks on both sides. */
void sd_frames_rnr_fail(struct sd_link *l, const struct sd_hdr *h)
{
	struct sd_hdr r = {.opcode = SD_OP_RESP, .req_id = h->req_id, .status = (uint32_t)DOCA_ERROR_TIME_OUT};

	SD_WARN("rdma: no receive posted within the sender's RNR budget (%u ms), breaking the connection",
		h->budget_ms);
	sd_link_send_ctrl(l, &r, NULL, 0);
	sd_link_set_why(l, "RNR retry exceeded: no receive was posted here within the sender's budget (%u ms)",
			h->budget_ms);
	sd_link_drain(l, DOCA_ERROR_CONNECTION_RESET);
}

/* The message parked on l outlived its RNR budget (the engine's timers). */
void sd_frames_park_expired(struct sd_link *l)
{
	struct sd_hdr h = l->park;

	if (l->park_defer) {
		/* the payload is still in the socket: read past it first (its sender's request is answered
		 * once it went out whole: SD_RXA_PARK_DEFER), and within the timeout */
		sd_frames_unpark(l);
		l->rx_discard = 1;
		l->deadline_ns = sd_now_ns() + sd_eng_timeout_ns();
		return;
	}
	sd_frames_unpark(l);
	sd_frames_rnr_fail(l, &h);
}

/* The group's link whose message has been parked longest (NULL: none). */
struct sd_link *sd_frames_oldest_parked(const struct sd_link_group *g)
{
	struct sd_link *best = NULL;

	for (struct sd_link *l = g->links; l; l = l->next) {
		if (!l->parked || l->dead)
			continue;
		if (!best || l->park_since_ns < best->park_since_ns)
			best = l;
	}
	return best;
}
