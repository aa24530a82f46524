/*
 * softdoca RDMA data operations, the DOCA side of the frames (see rdma.h for
 * the layout; the header codec is in rdma_link.c, the dispatch of a link's
 * frames and the RNR park rules in engine/rdma_frames.c, the one-sided
 * responder in engine/rdma_serve.c): the handlers the connection layer gives
 * every link (sd_conn_link_ops) for what needs the DOCA objects: validating a
 * remote access (sd_wire_mem_acquire), answers that complete this side's
 * tasks, messages that fill posted receives or park, refusals, control
 * frames; and parked messages handed to receives posted later
 * (sd_wire_deliver_parked).
 *
 * Nothing from the wire is trusted: headers are parsed strictly (a malformed
 * frame closes that link only), every remote access is validated by
 * sd_mmap_acquire (instance, map id, key, bounds, mmap permissions) and by
 * the target context's permissions before any byte moves. Payloads go
 * straight into their final memory; a rejected payload is drained into a
 * scratch buffer. The only extra copy is a two-sided message that arrives
 * while no receive is posted (RNR): it is parked on the heap for at most the
 * sender's RNR budget. Meanwhile the link reads on past it for the answers
 * to this side's requests; the peer's next request waits (see
 * sd_frames_park_holds, engine/rdma_frames.c).
 *
 * A refused remote access (or a misaligned remote atomic) is fatal for the
 * connection, as on an RC QP: the target answers with an error response
 * saying why (enum sd_prov_nak_code), then breaks the connection; the requester fails
 * that task with the reason in its detail, flushes the others and breaks its
 * end too (see docs/softdoca-contract.md).
 */
#include "rdma.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Error details are cut at SD_DETAIL_LEN on purpose. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

/* ---------------------------------------------------------------- helpers */
static void respond(struct sd_link *l, uint8_t op, uint64_t req_id, doca_error_t st)
{
	struct sd_hdr h = {.opcode = op, .req_id = req_id, .status = (uint32_t)st};

	sd_link_send_ctrl(l, &h, NULL, 0);
}

/* An error response carrying why (see rdma.h, "Error responses"). */
static int respond_nak(struct sd_link *l, uint8_t op, uint64_t req_id, doca_error_t st, const struct sd_prov_nak *nak)
{
	struct sd_hdr h = {.opcode = op, .req_id = req_id, .status = (uint32_t)st};

	h.arg0 = nak->code;
	h.arg1 = nak->perms;
	h.map_id = nak->map_id;
	h.raddr = nak->base;
	h.rlen = nak->len;
	return sd_link_send_ctrl(l, &h, NULL, 0);
}

static uint32_t op_need(uint8_t op)
{
	switch (op) {
	case SD_OP_READ:
		return DOCA_ACCESS_FLAG_RDMA_READ;
	case SD_OP_CMP_SWP:
	case SD_OP_FETCH_ADD:
		return DOCA_ACCESS_FLAG_RDMA_ATOMIC;
	default:
		return DOCA_ACCESS_FLAG_RDMA_WRITE;
	}
}

static const char *op_name(uint8_t op)
{
	switch (op) {
	case SD_OP_READ:
		return "read";
	case SD_OP_CMP_SWP:
		return "compare-and-swap";
	case SD_OP_FETCH_ADD:
		return "fetch-and-add";
	case SD_OP_WRITE_IMM:
		return "write with immediate";
	case SD_OP_SEND:
	case SD_OP_SEND_IMM:
		return "send";
	default:
		return "write";
	}
}

void sd_nak_describe(char *out, size_t n, int requester, uint8_t op, uint64_t raddr, uint64_t len,
		     const struct sd_prov_nak *nak)
{
	const char *who = requester ? "target refused: " : "refused the peer's ";
	const char *need = op_need(op) == DOCA_ACCESS_FLAG_RDMA_READ	 ? "RDMA_READ"
			   : op_need(op) == DOCA_ACCESS_FLAG_RDMA_ATOMIC ? "RDMA_ATOMIC"
									  : "RDMA_WRITE";
	char p[128], head[96];

	if (requester)
		snprintf(head, sizeof(head), "%s", who);
	else
		snprintf(head, sizeof(head), "%s%s of %llu bytes: ", who, op_name(op), (unsigned long long)len);
	sd_access_str(nak->perms, p, sizeof(p));
	switch (nak->code) {
	case SD_PROV_NAK_CTX_PERM:
		snprintf(out, n, "%sthe target's RDMA context lacks %s (has %s); grant %s on the target's Rdma context",
			 head, need, p, need);
		break;
	case SD_PROV_NAK_MAP_PERM:
		snprintf(out, n, "%sremote mmap 0x%llx lacks %s (has %s); grant %s on the target's MemoryMap", head,
			 (unsigned long long)nak->map_id, need, p, need);
		break;
	case SD_PROV_NAK_BOUNDS:
		snprintf(out, n,
			 "%sremote range [0x%llx, +%llu) is outside mmap 0x%llx [0x%llx, +%llu) (forged or stale "
			 "descriptor, or a remote buffer past the map)",
			 head, (unsigned long long)raddr, (unsigned long long)len, (unsigned long long)nak->map_id,
			 (unsigned long long)nak->base, (unsigned long long)nak->len);
		break;
	case SD_PROV_NAK_KEY:
		snprintf(out, n, "%swrong access key for remote mmap 0x%llx (stale or forged descriptor)", head,
			 (unsigned long long)nak->map_id);
		break;
	case SD_PROV_NAK_NO_MAP:
		snprintf(out, n,
			 "%sremote mmap 0x%llx is not registered on the target (stopped or destroyed there, or a "
			 "forged descriptor)",
			 head, (unsigned long long)nak->map_id);
		break;
	case SD_PROV_NAK_INSTANCE:
		snprintf(out, n,
			 "%sthe remote mmap descriptor was issued by another process instance (did the target "
			 "restart?)",
			 head);
		break;
	case SD_PROV_NAK_NOT_STARTED:
		snprintf(out, n, "%sremote mmap 0x%llx is not started", head, (unsigned long long)nak->map_id);
		break;
	case SD_PROV_NAK_ALIGN:
		snprintf(out, n, "%satomic target 0x%llx is not 8-byte aligned", head, (unsigned long long)raddr);
		break;
	case SD_PROV_NAK_RECV_ROOM:
		snprintf(out, n, "%sthe posted receive has room for %llu bytes, the message is %llu bytes", head,
			 (unsigned long long)nak->len, (unsigned long long)len);
		break;
	default:
		snprintf(out, n, "%sremote access refused (no detail from the target)", head);
		break;
	}
}

/* Validate a remote access against this process, the target ctx and the map
 * (sd_link_ops.mem_acquire of every link: engine/rdma_serve.c asks it). */
doca_error_t sd_wire_mem_acquire(struct sd_link *l, const struct sd_hdr *h, uint64_t len, uint32_t perm, void **refp,
				 struct sd_prov_nak *nak)
{
	struct sd_acquire_why w;
	struct doca_mmap **ref = (struct doca_mmap **)refp;
	doca_error_t rc;

	*ref = NULL;
	memset(nak, 0, sizeof(*nak));
	nak->map_id = h->map_id;
	if ((sd_link_rdma(l)->permissions & perm) != perm) {
		nak->code = SD_PROV_NAK_CTX_PERM;
		nak->perms = sd_link_rdma(l)->permissions;
		return DOCA_ERROR_NOT_PERMITTED;
	}
	if (len == 0) /* nothing is touched: no key needed */
		return DOCA_SUCCESS;
	if (h->instance != sd_instance_id()) {
		nak->code = SD_PROV_NAK_INSTANCE;
		return DOCA_ERROR_NOT_PERMITTED;
	}
	rc = sd_mmap_acquire_why(h->map_id, h->key, h->raddr, len, perm, ref, &w);
	if (rc != DOCA_SUCCESS) {
		*ref = NULL;
		nak->code = w.code == SD_ACQ_KEY      ? SD_PROV_NAK_KEY
			    : w.code == SD_ACQ_BOUNDS ? SD_PROV_NAK_BOUNDS
			    : w.code == SD_ACQ_PERM   ? SD_PROV_NAK_MAP_PERM
						      : SD_PROV_NAK_NO_MAP;
		if (w.code == SD_ACQ_BOUNDS || w.code == SD_ACQ_PERM) {
			nak->base = w.base;
			nak->len = w.len;
			nak->perms = w.perms;
		}
		return DOCA_ERROR_NOT_PERMITTED;
	}
	if (!*ref || (*ref)->remote || !(*ref)->started) {
		if (*ref)
			sd_mmap_release(*ref);
		*ref = NULL;
		nak->code = SD_PROV_NAK_NOT_STARTED;
		return DOCA_ERROR_NOT_PERMITTED;
	}
	return DOCA_SUCCESS;
}

/* A remote access error is fatal for an RC connection (IBTA: the responder's
 * QP moves to the error state, the requester gets a remote access error and
 * its other outstanding work is flushed): answer the error with its reason,
 * then break the connection on this side too; the peer learns of it from
 * the NAK, then from the close. */
int sd_wire_refused(struct sd_link *l, uint8_t resp_op, const struct sd_hdr *h, uint64_t len, doca_error_t st,
		    const struct sd_prov_nak *nak)
{
	char d[SD_DETAIL_LEN];
	int rc = respond_nak(l, resp_op, h->req_id, st, nak);

	sd_nak_describe(d, sizeof(d), 0, h->opcode, h->raddr, len, nak);
	SD_WARN("rdma: connection %u: %s; breaking the connection (a remote access error is fatal for an RC "
		"connection)", l->conn ? l->conn->id : 0, d);
	sd_link_set_why(l, "remote access error: %s", d);
	sd_link_drain(l, DOCA_ERROR_CONNECTION_RESET);
	return rc;
}

static void recv_result(struct sd_rtask *t, struct sd_link *l, const struct sd_hdr *h, uint32_t len)
{
	if (h->opcode == SD_OP_SEND)
		t->res_opcode = DOCA_RDMA_OPCODE_RECV_SEND;
	else if (h->opcode == SD_OP_SEND_IMM)
		t->res_opcode = DOCA_RDMA_OPCODE_RECV_SEND_WITH_IMM;
	else
		t->res_opcode = DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM;
	t->res_len = len;
	memcpy(&t->res_imm, h->imm, 4);
	if (t->res_conn != l->conn) { /* the receive keeps its result connection allocated */
		sd_conn_ref(l->conn);
		sd_conn_unref(t->res_conn);
		t->res_conn = l->conn;
	}
}

/* Receive t takes the message of header h arriving on l: its payload is read
 * straight into t, or, t too small, t fails TOO_BIG and the payload is read
 * past (the sender is refused once it is). */
static void take_recv(struct sd_link *l, struct sd_rtask *t, const struct sd_hdr *h)
{
	uint64_t cap = 0;
	int n = t->dst ? sd_buf_tail(t->dst, t->iov, t->iov_cap, &cap) : 0;

	if (n < 0 || h->payload_len > cap) {
		sd_rtask_fail(t, DOCA_ERROR_TOO_BIG, "the posted receive has room for %llu bytes, the peer sent %u bytes",
			      (unsigned long long)cap, h->payload_len);
		l->rx_status = DOCA_ERROR_TOO_BIG;
		memset(&l->rx_nak, 0, sizeof(l->rx_nak));
		l->rx_nak.code = SD_PROV_NAK_RECV_ROOM;
		l->rx_nak.len = cap;
		l->rx_discard = 1;
		return;
	}
	l->rx_task = t;
	l->rx_iov = t->iov;
	l->rx_iovcnt = n;
}

/* A receive for a message that just arrived, if one is left once the messages
 * parked before it got theirs (a receive posted a moment ago may not have
 * been handed to them yet). */
static struct sd_rtask *next_recv(struct doca_rdma *rdma)
{
	if (rdma->lg.nparked && rdma->rq_head)
		sd_wire_deliver_parked(rdma);
	return sd_rdma_pop_recv(rdma);
}

/* ---------------------------------------------------------------- header */
static struct sd_rtask *expect_resp(struct sd_link *l, const struct sd_hdr *h)
{
	struct sd_rtask *t;

	if (!l->out_head || ((struct sd_rtask *)l->out_head->op)->tx.sent != l->out_head->total)
		return NULL;
	t = l->out_head->op;
	if (sd_get_le64(t->tx.hdr + 8) != h->req_id)
		return NULL;
	switch (t->type) {
	case SD_T_READ:
		return h->opcode == SD_OP_READ_RESP ? t : NULL;
	case SD_T_CMP_SWP:
	case SD_T_FETCH_ADD:
		return h->opcode == SD_OP_ATOMIC_RESP ? t : NULL;
	default:
		return h->opcode == SD_OP_RESP ? t : NULL;
	}
}

static void pop_out(struct sd_link *l)
{
	struct sd_txitem *it = l->out_head;

	l->out_head = it->next;
	if (!l->out_head)
		l->out_tail = NULL;
	l->out_count--;
	it->next = NULL;
}

/* The answer to this side's oldest request arrived (engine/rdma_frames.c,
 * sd_link_ops.on_response_header): where its payload goes. */
int sd_wire_response_header(struct sd_link *l, const struct sd_hdr *h)
{
	struct sd_rtask *t = expect_resp(l, h);

	if (!t) {
		SD_WARN("rdma: unexpected response (opcode %u), closing link", h->opcode);
		return -1;
	}
	l->rx_status = (doca_error_t)h->status;
	if (h->status != DOCA_SUCCESS || h->opcode == SD_OP_RESP) {
		if (h->payload_len)
			return -1;
		l->rx_action = SD_RXA_NONE;
		l->rx_task = t;
		return 0;
	}
	l->rx_task = t;
	if (h->opcode == SD_OP_READ_RESP) {
		if (h->payload_len != t->xfer_len)
			return -1;
		l->rx_action = SD_RXA_READ_RESP;
		l->rx_iov = t->iov;
		l->rx_iovcnt = t->iovn;  /* scatter list computed at submit */
		return 0;
	}
	if (h->payload_len != 8)
		return -1;
	l->rx_action = SD_RXA_ATOMIC_RESP;
	sd_link_rx_into(l, t->atomic_val, 8);
	return 0;
}

/* A SEND / SEND_IMM arrived (sd_link_ops.on_message_header): into a posted
 * receive, parked (RNR), or refused once its payload is drained. */
int sd_wire_message_header(struct sd_link *l, const struct sd_hdr *h)
{
	struct sd_rtask *t = next_recv(sd_link_rdma(l));

	l->rx_action = SD_RXA_SEND;
	l->rx_status = DOCA_SUCCESS;
	if (!t) {
		if (sd_frames_park_start(l, h, 1) != 0) {
			l->rx_status = DOCA_ERROR_TIME_OUT;
			l->rx_discard = 1;
			return 0;
		}
		if (l->park_defer) {
			/* read nothing of it until a receive is posted (sd_wire_deliver_parked) */
			l->rx_action = SD_RXA_PARK_DEFER;
			l->rx_iovcnt = 0;
			sd_frames_park_enter(l);
			return 0;
		}
		l->rx_action = SD_RXA_PARK;
		sd_link_rx_into(l, l->park_buf, l->park_len);
		return 0;
	}
	take_recv(l, t, h);
	return 0;
}

/* ---------------------------------------------------------------- payload done */
static void complete_response(struct sd_link *l, struct sd_rtask *t, doca_error_t st)
{
	const struct sd_hdr *h = &l->rx;
	int rnr = st == DOCA_ERROR_TIME_OUT && (t->type == SD_T_SEND || t->type == SD_T_SEND_IMM ||
						 t->type == SD_T_WRITE_IMM);
	/* remote access errors (refused access, a remote invalid request) are
	 * fatal for an RC connection: the peer has broken it too */
	int fatal = st == DOCA_ERROR_NOT_PERMITTED || (st == DOCA_ERROR_INVALID_VALUE && h->opcode != SD_OP_RESP);

	pop_out(l);
	if (st == DOCA_SUCCESS) {
		sd_rtask_complete(t, st);
		return;
	}
	if (rnr) {
		sd_rtask_fail(t, st, "RNR retry exceeded: the peer had no receive posted within the budget (%u ms)",
			      sd_rnr_budget_ms(t->rdma));
		SD_WARN("rdma: peer reported RNR retry exceeded, breaking the connection");
		sd_link_set_why(l, "RNR retry exceeded on an earlier task (no receive posted at the peer)");
		sd_link_close(l, DOCA_ERROR_CONNECTION_RESET);
		return;
	}
	{
		struct sd_prov_nak nak = {.code = (uint32_t)h->arg0, .perms = (uint32_t)h->arg1,
					  .map_id = h->map_id, .base = h->raddr, .len = h->rlen};
		const struct doca_buf *r = t->type == SD_T_READ ? t->src : t->dst;
		uint64_t raddr = r ? (uint64_t)(uintptr_t)r->data : 0;
		uint8_t op = sd_get_le32(t->tx.hdr) == SD_WIRE_MAGIC ? t->tx.hdr[5] : SD_OP_WRITE;
		char d[SD_DETAIL_LEN];

		if (nak.code >= SD_PROV_NAK_NUM)
			nak.code = SD_PROV_NAK_NONE;
		sd_nak_describe(d, sizeof(d), 1, op, raddr, t->xfer_len, &nak);
		sd_rtask_fail(t, st, "%s%s", d, fatal ? "; the connection is broken (RC semantics)" : "");
		if (fatal) {
			SD_WARN("rdma: connection %u: %s; breaking the connection", l->conn ? l->conn->id : 0, d);
			sd_link_set_why(l, "remote access error on an earlier task: %s", d);
			sd_link_close(l, DOCA_ERROR_CONNECTION_RESET);
		}
	}
}

/* The payload of a message arrived or waits (sd_link_ops.on_message_done):
 * a WRITE_IMM's immediate takes a receive, a SEND fills the one it took, a
 * message without a receive is parked. The sender's acknowledgement is
 * queued before the receive completes: a receiver that exits right after its
 * completion does not lose it. */
int sd_wire_message_done(struct sd_link *l)
{
	const struct sd_hdr *h = &l->rx;
	struct sd_rtask *t = l->rx_task;

	l->rx_task = NULL;
	switch (l->rx_action) {
	case SD_RXA_WRITE: { /* a WRITE_IMM whose data landed */
		struct sd_rtask *r = next_recv(sd_link_rdma(l));

		if (r) {
			recv_result(r, l, h, h->payload_len);
			respond(l, SD_OP_RESP, h->req_id, l->rx_status);
			sd_rtask_complete(r, DOCA_SUCCESS);
			return 0;
		} else if (sd_frames_park_start(l, h, 0) == 0) {
			sd_frames_park_enter(l);
			return 0;
		} else {
			sd_frames_rnr_fail(l, h);
			return 0;
		}
	}
	case SD_RXA_SEND:
		if (l->rx_status == DOCA_ERROR_TIME_OUT) {
			sd_frames_rnr_fail(l, h);
			return 0;
		}
		if (l->rx_status != DOCA_SUCCESS) {
			respond_nak(l, SD_OP_RESP, h->req_id, l->rx_status, &l->rx_nak);
			return 0;
		}
		respond(l, SD_OP_RESP, h->req_id, l->rx_status);
		if (t) {
			sd_buf_tail_commit(t->dst, h->payload_len);
			recv_result(t, l, h, h->payload_len);
			sd_rtask_complete(t, DOCA_SUCCESS);
		}
		return 0;
	case SD_RXA_PARK:
		sd_frames_park_enter(l);
		return 0;
	case SD_RXA_PARK_DEFER:
		/* its budget ran out with its payload still in the socket (sd_frames_park_expired): read past */
		sd_frames_rnr_fail(l, h);
		return 0;
	default:
		return -1;
	}
}

/* The answer to this side's request was read (sd_link_ops.on_response_done). */
int sd_wire_response_done(struct sd_link *l)
{
	const struct sd_hdr *h = &l->rx;
	struct sd_rtask *t = l->rx_task;

	l->rx_task = NULL;
	switch (l->rx_action) {
	case SD_RXA_READ_RESP:
		sd_buf_tail_commit(t->dst, h->payload_len);
		t->res_len = h->payload_len;
		complete_response(l, t, DOCA_SUCCESS);
		return 0;
	case SD_RXA_ATOMIC_RESP: {
		uint64_t v = sd_get_le64(t->atomic_val);
		struct doca_buf *res = t->result;

		memcpy(res->data + res->data_len, &v, 8);
		res->data_len += 8;
		complete_response(l, t, DOCA_SUCCESS);
		return 0;
	}
	case SD_RXA_NONE:
		if (t) {
			if (l->rx_status == DOCA_SUCCESS && t->type == SD_T_READ)
				t->res_len = 0;
			complete_response(l, t, l->rx_status);
		}
		return 0;
	default:
		return -1;
	}
}

/* A handshake or provider control frame whose payload arrived (sd_link_ops.on_ctrl). */
int sd_wire_ctrl(struct sd_link *l, const struct sd_hdr *h)
{
	switch (h->opcode) {
	case SD_OP_PROV_REVOKE:
		return l->conn ? sd_prov_on_revoke(l->conn, h) : -1;
	case SD_OP_PROV_REVOKE_ACK:
		return l->conn ? sd_prov_on_revoke_ack(l->conn, h) : -1;
	case SD_OP_PROV_CHECK:
		return l->conn ? sd_prov_on_check(l->conn, h) : -1;
	case SD_OP_PROV_CHECK_ACK:
		return l->conn ? sd_prov_on_check_ack(l->conn, h) : -1;
	case SD_OP_PROV_ADDR: {
		int r = l->conn ? sd_prov_on_addr(l->conn, l->prov_buf, h->payload_len) : -1;

		free(l->prov_buf);
		l->prov_buf = NULL;
		return r;
	}
	default:
		return sd_conn_on_handshake(l, h, l->ctrl_buf);
	}
}

/* ---------------------------------------------------------------- parking */
/* A message whose payload waited in the socket gets receive t: the link reads
 * the payload straight into it (or, too small, drains it and refuses it with
 * the receive's room), as if t had been posted when the message came. */
static void deliver_deferred(struct sd_link *l, struct sd_rtask *t)
{
	l->rx_action = SD_RXA_SEND;
	l->rx_status = DOCA_SUCCESS;
	take_recv(l, t, &l->rx);
	l->last_rx_ns = sd_now_ns(); /* the rest of the payload is due from now (the keepalive) */
	sd_frames_unpark(l);
}

void sd_wire_deliver_parked(struct doca_rdma *rdma)
{
	while (rdma->lg.nparked && rdma->rq_head) {
		struct sd_link *l = sd_frames_oldest_parked(&rdma->lg);
		struct sd_rtask *t;
		doca_error_t st = DOCA_SUCCESS;
		uint64_t pm = sd_pm_oldest_ns(rdma);

		if (!l)
			break; /* what is left was parked by the provider path */
		if (pm && pm < l->park_since_ns) { /* the provider path's came first */
			sd_pm_deliver_one(rdma);
			continue;
		}
		t = sd_rdma_pop_recv(rdma);
		if (l->park_defer) {
			deliver_deferred(l, t);
			continue;
		}
		if (l->park.opcode != SD_OP_WRITE_IMM) {
			uint64_t cap = 0, off = 0;
			int n = t->dst ? sd_buf_tail(t->dst, t->iov, t->iov_cap, &cap) : 0;

			if (n < 0 || l->park_len > cap) {
				st = DOCA_ERROR_TOO_BIG;
			} else {
				for (int i = 0; i < n && off < l->park_len; i++) {
					size_t c = t->iov[i].iov_len;
					if (c > l->park_len - off)
						c = l->park_len - off;
					memcpy(t->iov[i].iov_base, l->park_buf + off, c);
					off += c;
				}
				if (l->park_len)
					sd_buf_tail_commit(t->dst, l->park_len);
			}
		}
		if (st == DOCA_SUCCESS) {
			recv_result(t, l, &l->park, l->park.payload_len);
			respond(l, SD_OP_RESP, l->park.req_id, st); /* acknowledgement first */
			sd_link_flush(l);
			sd_rtask_complete(t, st);
		} else {
			struct sd_prov_nak nak = {.code = SD_PROV_NAK_RECV_ROOM};
			uint64_t cap = 0;

			if (t->dst)
				sd_buf_tail(t->dst, t->iov, t->iov_cap, &cap);
			nak.len = cap;
			sd_rtask_fail(t, st, "the posted receive has room for %llu bytes, the peer sent %zu bytes",
				      (unsigned long long)cap, l->park_len);
			respond_nak(l, SD_OP_RESP, l->park.req_id, st, &nak);
		}
		sd_frames_unpark(l);
		sd_link_flush(l);
	}
	if (rdma->lg.nparked && rdma->rq_head)
		sd_pm_deliver(rdma);
}

void sd_wire_abort_rx(struct sd_link *l, doca_error_t status)
{
	sd_serve_release(l);
	/* a receive being filled belongs to the ctx, not to the outstanding list */
	if (l->rx_task && l->rx_task->type == SD_T_RECV)
		sd_rtask_fail(l->rx_task, status, "the connection broke while a message was arriving into this receive%s%s",
			      l->why[0] ? ": " : "", l->why);
	l->rx_task = NULL;
	l->rx_action = SD_RXA_NONE;
}
