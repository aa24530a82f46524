/*
 * softdoca engine: the frames of a link (its handshake's, then those of the
 * established connection), read by the rx framing (rdma_rx.c) and
 * dispatched here (the link's on_header / on_payload_done, which the
 * connection layer points at these two). Kept
 * here: the handshake frames' buffer, keepalive (PING / PONG), RNR_WAIT,
 * DISCONNECT, a provider address's buffer, the peer's requests held behind
 * a parked message (sd_frames_park_holds), and the one-sided requests
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
	struct sd_nak_info nak;
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
			struct sd_nak_info nak = l->rx_nak;
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
