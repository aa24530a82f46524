/*
 * softdoca RDMA connections: connection objects and their lifetime, the
 * out-of-band export/connect calls, dialing, the handshake frames of both
 * flavours (HELLO / HELLO_ACK, CM_REQ / CM_ACCEPT / CM_REJECT / CM_RTU),
 * handshake deadlines, disconnect, and the handlers this layer registers
 * with the engine: sd_conn_link_ops on every link, sd_conn_rdma_ops on every
 * context with a connection or listener. Listeners, sockets, address objects
 * and the RDMA CM calls (listen / accept / reject / connect_to_addr) are in
 * rdma_cm.c.
 *
 * Export/connect pairing: doca_rdma_export creates a connection with a random
 * 128-bit token and returns a CRC-protected blob (rdma.h) naming this
 * context's engine listener (device address, ephemeral port), the process
 * instance id and the token. doca_rdma_connect compares (instance, token) of
 * both sides: the greater one dials the other's listener and sends HELLO with
 * its own instance/token and the token it is connecting to; the other side
 * matches the token to its exported connection, checks the dialer's identity
 * against the blob it was given (a HELLO that arrives before the app called
 * doca_rdma_connect is held until then) and answers HELLO_ACK. Both sides are
 * then established. Every handshake is bounded by the connection request
 * timeout.
 *
 * RDMA CM handshake frames: once connected, the client's link sends CM_REQ;
 * the server makes a connection in the REQUESTED state and queues the
 * request event for the application to accept or reject (rdma_cm.c), or
 * rejects at once when max_num_connections are in use. CM_ACCEPT (with
 * private data, kept on the client's connection) is answered by CM_RTU;
 * CM_REJECT fails the client's connection. A request left undecided is
 * rejected after max(connection request timeout, SOFTDOCA_TIMEOUT_MS). New
 * connections beyond max_num_connections are refused with DOCA_ERROR_FULL
 * (sd_rdma_conn_slot_check, for doca_rdma_export and
 * doca_rdma_connect_to_addr).
 *
 * Handshake frames also carry the same-host transport offer (rdma_xport.c).
 *
 * Local doca_rdma_connection_disconnect flushes the connection's tasks with
 * DOCA_ERROR_CONNECTION_ABORTED and fires no local callback; the peer gets its
 * disconnect callback and DOCA_ERROR_CONNECTION_RESET for its tasks.
 */
#define _GNU_SOURCE
#include "rdma.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* ---------------------------------------------------------------- objects */
static int cmp_ident(uint64_t ia, const uint8_t *ta, uint64_t ib, const uint8_t *tb)
{
	if (ia != ib)
		return ia > ib ? 1 : -1;
	return memcmp(ta, tb, SD_RDMA_TOKEN_LEN);
}

static void conn_free(struct doca_rdma_connection *c)
{
	sd_prov_conn_free(c);
	sd_handle_del(c);
	SD_LIVE_DEC(SD_LIVE_CONN);
	free(c);
}

struct doca_rdma_connection *sd_conn_new(struct doca_rdma *rdma)
{
	struct doca_rdma_connection *c, **pp;

	sd_conn_reap(rdma);
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	if (sd_random_bytes(c->token, sizeof(c->token)) != 0 || sd_handle_add_kind(c, SD_H_CONN) != 0) {
		free(c);
		return NULL;
	}
	SD_LIVE_INC(SD_LIVE_CONN);
	rdma->lg.eng_ops = &sd_conn_rdma_ops; /* the engine now has work of ours to do for rdma */
	c->rdma = rdma;
	c->id = rdma->next_conn_id++;
	c->close_status = DOCA_ERROR_NOT_CONNECTED;
	for (pp = &rdma->conns; *pp; pp = &(*pp)->next)
		;
	*pp = c;
	rdma->nconns_active++;
	return c;
}

void sd_conn_free_all(struct doca_rdma *rdma)
{
	while (rdma->conns) {
		struct doca_rdma_connection *c = rdma->conns;
		rdma->conns = c->next;
		conn_free(c);
	}
	rdma->nconns_active = 0;
	rdma->nconns_closed = 0;
}

/* A closed connection stays allocated while the application can still reach
 * it through DOCA: an event naming it not yet delivered, a task pointing at
 * it (its connection, or a receive's result connection), or among the
 * SD_CONN_KEEP_CLOSED most recently closed (handles the application keeps
 * after the disconnect/failure callback stay valid for a while; the
 * connection API checks handles against the live registry). Called when a
 * connection is created, so memory stays bounded however many
 * connect/close cycles a context goes through. */
void sd_conn_reap(struct doca_rdma *rdma)
{
	struct doca_rdma_connection **pp, *c;
	uint64_t keep_from;

	if (rdma->nconns_closed <= SD_CONN_KEEP_CLOSED)
		return;
	keep_from = rdma->close_seq - SD_CONN_KEEP_CLOSED; /* free closed_seq <= keep_from */
	for (pp = &rdma->conns; *pp;) {
		c = *pp;
		if (c->closed_seq && c->closed_seq <= keep_from && !c->link && !c->wq_head &&
		    atomic_load(&c->ev_pending) == 0 && atomic_load(&c->task_refs) == 0) {
			*pp = c->next;
			rdma->nconns_closed--;
			conn_free(c);
		} else {
			pp = &c->next;
		}
	}
}

void sd_conn_ref(struct doca_rdma_connection *c)
{
	if (c)
		atomic_fetch_add(&c->task_refs, 1);
}

void sd_conn_unref(struct doca_rdma_connection *c)
{
	if (c)
		atomic_fetch_sub(&c->task_refs, 1);
}

int sd_conn_live(const struct doca_rdma_connection *c)
{
	return sd_handle_live_kind(c, SD_H_CONN);
}

void sd_conn_set_why(struct doca_rdma_connection *c, const char *why)
{
	if (c && why && why[0] && !c->why[0])
		snprintf(c->why, sizeof(c->why), "%s", why);
}

void sd_conn_fail_waiting(struct doca_rdma_connection *conn, doca_error_t status)
{
	while (conn->wq_head) {
		struct sd_rtask *t = conn->wq_head;
		conn->wq_head = t->qnext;
		t->qnext = NULL;
		sd_rtask_fail(t, status, "connection %u closed before it was established%s%s", conn->id,
			      conn->why[0] ? ": " : "", conn->why);
	}
	conn->wq_tail = NULL;
}

void sd_conn_established(struct doca_rdma_connection *conn)
{
	struct sd_link *l = conn->link;

	conn->state = SDC_ESTABLISHED;
	conn->ever_established = 1;
	conn->deadline_ns = 0;
	l->deadline_ns = 0;
	l->last_rx_ns = sd_now_ns();
	sd_xport_attach(l->xpeer, conn->peer_instance);
	sd_rdma_queue_event(conn->rdma, SD_EV_ESTABLISHED, conn);
	sd_prov_conn_start(conn); /* SOFTDOCA_PROVIDER: its connection, beside the native link */
	while (conn->wq_head) {
		struct sd_rtask *t = conn->wq_head;
		conn->wq_head = t->qnext;
		t->qnext = NULL;
		sd_rtask_start(t, l);
	}
	conn->wq_tail = NULL;
	sd_link_flush(l);
}

void sd_conn_on_link_closed(struct doca_rdma_connection *conn, doca_error_t status, int notify)
{
	enum sd_conn_state prev = conn->state;

	sd_prov_conn_end(conn, status, notify); /* the peer ended it: its answers in flight still count */
	if (conn->link) {
		struct sd_link *l = conn->link;
		conn->link = NULL;
		l->conn = NULL;
		sd_link_close(l, status);
	}
	if (prev == SDC_CLOSED)
		return;
	conn->state = SDC_CLOSED;
	conn->closed_seq = ++conn->rdma->close_seq;
	conn->rdma->nconns_closed++;
	conn->close_status = status == DOCA_ERROR_CONNECTION_ABORTED ? status : DOCA_ERROR_CONNECTION_RESET;
	if (conn->rdma->nconns_active)
		conn->rdma->nconns_active--;
	sd_conn_fail_waiting(conn, status);
	if (!conn->ever_established && conn->fail_reason == SD_FAIL_NONE)
		conn->fail_reason = SD_FAIL_LOST;
	if (!notify)
		return;
	if (conn->ever_established)
		sd_rdma_queue_event(conn->rdma, SD_EV_DISCONNECT, conn);
	else if (prev != SDC_EXPORTED)
		sd_rdma_queue_event(conn->rdma, SD_EV_FAILURE, conn);
}

void sd_conn_fail(struct doca_rdma_connection *c, enum sd_fail_reason why)
{
	static const char *const text[] = {
		[SD_FAIL_REJECTED] = "the connection request was rejected by the peer",
		[SD_FAIL_TIMEOUT] = "the connection request timed out",
		[SD_FAIL_REFUSED] = "the connection was refused (nothing listens there)",
		[SD_FAIL_LOST] = "the connection was lost while being established",
	};

	c->fail_reason = why;
	if (why > SD_FAIL_NONE && why <= SD_FAIL_LOST)
		sd_conn_set_why(c, text[why]);
	if (c->link)
		sd_link_set_why(c->link, "%s", c->why);
	if (c->link)
		sd_link_close(c->link, DOCA_ERROR_CONNECTION_RESET);
	else
		sd_conn_on_link_closed(c, DOCA_ERROR_CONNECTION_RESET, 1);
}

/* Handshake deadline checks; returns the next deadline (0: none). */
static uint64_t check_deadlines(struct doca_rdma *rdma, uint64_t now)
{
	uint64_t next = 0;

	for (struct doca_rdma_connection *c = rdma->conns; c; c = c->next) {
		if ((c->state != SDC_CONNECTING && c->state != SDC_ACCEPTING && c->state != SDC_REQUESTED) ||
		    !c->deadline_ns)
			continue;
		if (now >= c->deadline_ns && c->state == SDC_REQUESTED) {
			/* the application never decided: reject it, as the client
			 * has given up by now anyway */
			SD_WARN("rdma: connection %u: request neither accepted nor rejected within %llu ms, rejecting it",
				c->id, (unsigned long long)((c->deadline_ns - c->requested_ns) / 1000000ull));
			if (c->link) {
				sd_conn_send_ctrl(c->link, SD_OP_CM_REJECT, NULL, 0);
				sd_link_flush(c->link);
			}
			sd_conn_fail(c, SD_FAIL_TIMEOUT);
			continue;
		}
		if (now >= c->deadline_ns) {
			SD_WARN("rdma: connection %u: connection request timed out (%u ms)", c->id,
				(unsigned)rdma->timeout_ms);
			sd_conn_fail(c, SD_FAIL_TIMEOUT);
			continue;
		}
		if (!next || c->deadline_ns < next)
			next = c->deadline_ns;
	}
	return next;
}

const uint8_t *sd_rdma_conn_private_data(const struct doca_rdma_connection *conn, uint8_t *len)
{
	if (len)
		*len = conn ? conn->priv_len : 0;
	return conn && conn->priv_len ? conn->priv : NULL;
}

enum sd_fail_reason sd_rdma_conn_fail_reason(const struct doca_rdma_connection *conn)
{
	return conn ? conn->fail_reason : SD_FAIL_NONE;
}

/* ---------------------------------------------------------------- handshake */
#define SD_PROV_OFFER_MAGIC 0x50524f56u /* "PROV", high half of the offer; low half: the provider */

static uint64_t prov_offer(void)
{
	const char *n = sd_prov_name();
	uint32_t id = 0;

	if (!strcmp(n, "native"))
		return 0;
	for (; *n; n++)
		id = id * 31u + (uint8_t)*n;
	return ((uint64_t)SD_PROV_OFFER_MAGIC << 32) | (id ? id : 1);
}

/* Both sides must use the same provider: refuse a handshake that says otherwise. */
static int prov_check(const struct sd_hdr *h)
{
	uint64_t mine = prov_offer(), theirs = (h->raddr >> 32) == SD_PROV_OFFER_MAGIC ? h->raddr : 0;

	if (mine == theirs)
		return 0;
	SD_WARN("rdma: the peer uses %s provider, this process uses provider %s: set SOFTDOCA_PROVIDER alike on both "
		"sides", theirs ? "another" : "the native", sd_prov_name());
	return -1;
}

int sd_conn_send_ctrl(struct sd_link *l, uint8_t op, const void *payload, size_t len)
{
	struct sd_hdr h = {.opcode = op};

	if (op == SD_OP_HELLO || op == SD_OP_HELLO_ACK || op == SD_OP_CM_REQ || op == SD_OP_CM_ACCEPT) {
		sd_xport_offer(sd_link_rdma(l)->permissions, &h);
		h.raddr = prov_offer(); /* which provider this side uses (older peers: 0, native) */
	}
	return sd_link_send_ctrl(l, &h, payload, len);
}

/* Pair an incoming OOB link carrying a HELLO with conn (connect called). */
static int oob_attach(struct doca_rdma_connection *c, struct sd_link *l)
{
	if (c->link || c->dialer || l->hello_instance != c->peer_instance ||
	    memcmp(l->hello_token, c->peer_token, SD_RDMA_TOKEN_LEN) != 0) {
		SD_WARN("rdma: HELLO does not match the connection details given to doca_rdma_connect");
		return -1;
	}
	l->conn = c;
	c->link = l;
	l->have_hello = 0;
	sd_link_set_rx_paused(l, 0);
	if (sd_conn_send_ctrl(l, SD_OP_HELLO_ACK, NULL, 0) != 0)
		return -1;
	sd_conn_established(c);
	return 0;
}

void sd_conn_on_connected(struct sd_link *l, int err)
{
	struct doca_rdma_connection *c = l->conn;
	uint8_t p[SD_HELLO_LEN];

	if (!c) {
		sd_link_close(l, DOCA_ERROR_CONNECTION_RESET);
		return;
	}
	if (err) {
		SD_WARN("rdma: connection %u: connect to %s:%u failed: %s", c->id, c->peer.str,
			(unsigned)c->peer.port, strerror(err));
		sd_conn_fail(c, SD_FAIL_REFUSED);
		return;
	}
	sd_put_le64(p, sd_instance_id());
	memcpy(p + 8, c->token, SD_RDMA_TOKEN_LEN);
	if (c->is_cm) {
		if (sd_conn_send_ctrl(l, SD_OP_CM_REQ, p, SD_CMREQ_LEN) != 0)
			sd_conn_fail(c, SD_FAIL_LOST);
		return;
	}
	memcpy(p + 8 + SD_RDMA_TOKEN_LEN, c->peer_token, SD_RDMA_TOKEN_LEN);
	if (sd_conn_send_ctrl(l, SD_OP_HELLO, p, SD_HELLO_LEN) != 0)
		sd_conn_fail(c, SD_FAIL_LOST);
}

int sd_conn_on_handshake(struct sd_link *l, const struct sd_hdr *h, const uint8_t *p)
{
	struct doca_rdma *rdma = sd_link_rdma(l);
	struct doca_rdma_connection *c = l->conn;

	if (h->opcode == SD_OP_HELLO || h->opcode == SD_OP_HELLO_ACK || h->opcode == SD_OP_CM_REQ ||
	    h->opcode == SD_OP_CM_ACCEPT) {
		if (prov_check(h) != 0)
			return -1;
		sd_xport_on_offer(&l->xpeer, h);
	}
	switch (h->opcode) {
	case SD_OP_HELLO:
		if (c || l->from_listener != 1 || l->have_hello || h->payload_len != SD_HELLO_LEN)
			return -1;
		l->hello_instance = sd_get_le64(p);
		memcpy(l->hello_token, p + 8, SD_RDMA_TOKEN_LEN);
		memcpy(l->hello_target, p + 8 + SD_RDMA_TOKEN_LEN, SD_RDMA_TOKEN_LEN);
		l->have_hello = 1;
		for (c = rdma->conns; c; c = c->next) {
			if (c->is_cm || memcmp(c->token, l->hello_target, SD_RDMA_TOKEN_LEN) != 0)
				continue;
			if (c->state == SDC_EXPORTED) {
				/* the app has not called doca_rdma_connect yet: hold it */
				sd_link_set_rx_paused(l, 1);
				return 0;
			}
			if (c->state == SDC_CONNECTING)
				return oob_attach(c, l);
			return -1;
		}
		SD_WARN("rdma: HELLO for an unknown connection token");
		return -1;
	case SD_OP_HELLO_ACK:
		if (!c || c->is_cm || !c->dialer || c->state != SDC_CONNECTING || h->payload_len)
			return -1;
		sd_conn_established(c);
		return 0;
	case SD_OP_CM_REQ:
		if (c || l->from_listener != 2 || h->payload_len != SD_CMREQ_LEN)
			return -1;
		if (rdma->nconns_active >= rdma->max_conns || !rdma->lg.running) {
			SD_WARN("rdma: connection request rejected: %u connections in use", rdma->nconns_active);
			sd_conn_send_ctrl(l, SD_OP_CM_REJECT, NULL, 0);
			sd_link_drain(l, DOCA_ERROR_CONNECTION_ABORTED);
			return 0;
		} else {
			struct sockaddr_storage ss;
			socklen_t sl = sizeof(ss);

			c = sd_conn_new(rdma);
			if (!c)
				return -1;
			c->is_cm = 1;
			c->state = SDC_REQUESTED;
			c->peer_instance = sd_get_le64(p);
			memcpy(c->peer_token, p + 8, SD_RDMA_TOKEN_LEN);
			if (getpeername(l->ep.fd, (struct sockaddr *)&ss, &sl) == 0)
				sd_addr_from_sockaddr(&c->peer, &ss, sl);
			c->link = l;
			l->conn = c;
			l->deadline_ns = 0;
			{
				/* bounded like the connection request itself */
				uint64_t T = sd_eng_timeout_ns(), req = (uint64_t)rdma->timeout_ms * 1000000ull;

				c->requested_ns = sd_now_ns();
				c->deadline_ns = c->requested_ns + (req > T ? req : T);
			}
			sd_rdma_queue_event(rdma, SD_EV_REQUEST, c);
			return 0;
		}
	case SD_OP_CM_ACCEPT:
		if (!c || !c->cm_client || c->state != SDC_CONNECTING)
			return -1;
		memcpy(c->priv, p, h->payload_len);
		c->priv_len = (uint8_t)h->payload_len;
		if (sd_conn_send_ctrl(l, SD_OP_CM_RTU, NULL, 0) != 0)
			return -1;
		sd_conn_established(c);
		return 0;
	case SD_OP_CM_REJECT:
		if (!c || !c->cm_client || c->state != SDC_CONNECTING)
			return -1;
		SD_WARN("rdma: connection %u: connection request rejected by the peer", c->id);
		sd_conn_fail(c, SD_FAIL_REJECTED);
		return 0;
	case SD_OP_CM_RTU:
		if (!c || !c->is_cm || c->cm_client || c->state != SDC_ACCEPTING)
			return -1;
		sd_conn_established(c);
		return 0;
	default:
		return -1;
	}
}

/* ---------------------------------------------------------------- handlers */
/* link no longer carries c: c loses it, with the link's reason. */
static void link_detached(struct sd_link *l, doca_error_t status)
{
	struct doca_rdma_connection *c = l->conn;

	l->conn = NULL;
	if (!c)
		return;
	c->link = NULL;
	sd_conn_set_why(c, l->why);
	sd_conn_on_link_closed(c, status, status != DOCA_ERROR_CONNECTION_ABORTED);
}

static void link_free(struct sd_link *l)
{
	sd_xport_peer_free(l->xpeer);
}

/* Fail a task the link can no longer carry, saying why (its detail, cut at
 * SD_DETAIL_LEN on purpose). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-truncation"
static void link_flush_op(struct sd_link *l, void *op, doca_error_t status)
{
	struct sd_rtask *t = op;

	if (l->why[0])
		snprintf(t->detail, sizeof(t->detail), "flushed: %s", l->why);
	else if (status == DOCA_ERROR_CONNECTION_ABORTED)
		snprintf(t->detail, sizeof(t->detail), "%s",
			 "flushed: the connection was disconnected locally or its context stopped");
	else
		snprintf(t->detail, sizeof(t->detail), "%s",
			 "the connection was lost (the peer closed it, died or became unreachable)");
	sd_eng_complete(&t->base, status);
}
#pragma GCC diagnostic pop


static void link_release_ref(void *ref)
{
	sd_mmap_release(ref);
}

static int link_established(const struct sd_link *l)
{
	return l->conn && l->conn->state == SDC_ESTABLISHED;
}

/* The input of l in its context's pe set (EXCLUSIVE, before the engine's). */
static int link_rx_watch(struct sd_link *l, int on)
{
	struct doca_pe *pe = sd_link_rdma(l)->ctx.pe;

	if (!pe)
		return -1;
	if (on)
		return sd_pe_watch(pe, l->ep.fd, l->serial);
	sd_pe_unwatch(pe, l->ep.fd);
	return 0;
}

const struct sd_link_ops sd_conn_link_ops = {
	.on_connected = sd_conn_on_connected,
	.on_header = sd_frames_on_header,
	.on_payload_done = sd_frames_on_payload_done,
	.on_abort_rx = sd_wire_abort_rx,
	.on_detached = link_detached,
	.on_free = link_free,
	.on_flush = link_flush_op,
	.release_ref = link_release_ref,
	.rx_watch = link_rx_watch,
	.established = link_established,
	.mem_acquire = sd_wire_mem_acquire,
	.on_response_header = sd_wire_response_header,
	.on_response_done = sd_wire_response_done,
	.on_message_header = sd_wire_message_header,
	.on_message_done = sd_wire_message_done,
	.on_refused = sd_wire_refused,
	.on_ctrl = sd_wire_ctrl,
};

static uint64_t rdma_timers(struct sd_link_group *g, uint64_t now)
{
	struct doca_rdma *rdma = sd_group_rdma(g);
	uint64_t next = check_deadlines(rdma, now);

	return sd_min_deadline(next, sd_listener_timers(rdma, now));
}

/* ctx stop, once its links are closed: its connections close without
 * events, its listeners go. */
static void rdma_detach(struct sd_link_group *g, doca_error_t status)
{
	struct doca_rdma *rdma = sd_group_rdma(g);

	for (struct doca_rdma_connection *c = rdma->conns; c; c = c->next)
		if (c->state != SDC_CLOSED)
			sd_conn_on_link_closed(c, status, 0);
		else if (c->plinger_ns)
			sd_prov_conn_end(c, status, 0); /* the context stops: no more waiting for answers */
	while (rdma->listeners)
		sd_listener_close(rdma->listeners);
}

static void rdma_deliver_parked(struct sd_link_group *g)
{
	struct doca_rdma *rdma = sd_group_rdma(g);

	if (rdma->rq_head)
		sd_wire_deliver_parked(rdma);
}

const struct sd_rdma_ops sd_conn_rdma_ops = {
	.timers = rdma_timers,
	.deliver_parked = rdma_deliver_parked,
	.detach = rdma_detach,
};

/* ---------------------------------------------------------------- blob */
static void blob_encode(struct doca_rdma_connection *c, const struct sockaddr_storage *ss)
{
	uint8_t *b = c->blob;

	memset(b, 0, SD_BLOB_LEN);
	sd_put_le32(b, SD_BLOB_MAGIC);
	sd_put_le16(b + 4, SD_BLOB_VERSION);
	sd_put_le16(b + 6, SD_BLOB_LEN);
	sd_put_le64(b + 8, sd_instance_id());
	memcpy(b + 16, c->token, SD_RDMA_TOKEN_LEN);
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
		b[32 + 10] = 0xff;
		b[32 + 11] = 0xff;
		memcpy(b + 32 + 12, &a->sin_addr, 4);
		sd_put_le16(b + 48, ntohs(a->sin_port));
		b[50] = 4;
	} else {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
		memcpy(b + 32, &a->sin6_addr, 16);
		sd_put_le16(b + 48, ntohs(a->sin6_port));
		b[50] = 6;
		sd_put_le32(b + 52, a->sin6_scope_id);
	}
	sd_put_le32(b + 60, sd_crc32(b, 60));
}

static doca_error_t blob_parse(const uint8_t *b, size_t len, uint64_t *inst, uint8_t *token,
			       struct sockaddr_storage *ss, socklen_t *sl)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	uint16_t port;

	if (len != SD_BLOB_LEN || sd_get_le32(b) != SD_BLOB_MAGIC || sd_get_le16(b + 4) != SD_BLOB_VERSION ||
	    sd_get_le16(b + 6) != SD_BLOB_LEN || sd_get_le32(b + 60) != sd_crc32(b, 60) || b[51] != 0 ||
	    sd_get_le32(b + 56) != 0)
		return DOCA_ERROR_INVALID_VALUE;
	port = sd_get_le16(b + 48);
	if (port == 0)
		return DOCA_ERROR_INVALID_VALUE;
	*inst = sd_get_le64(b + 8);
	memcpy(token, b + 16, SD_RDMA_TOKEN_LEN);
	memset(ss, 0, sizeof(*ss));
	if (b[50] == 4) {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;
		if (memcmp(b + 32, mapped, 12) != 0 || sd_get_le32(b + 52) != 0)
			return DOCA_ERROR_INVALID_VALUE;
		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		memcpy(&a->sin_addr, b + 44, 4);
		*sl = sizeof(*a);
	} else if (b[50] == 6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		memcpy(&a->sin6_addr, b + 32, 16);
		a->sin6_scope_id = sd_get_le32(b + 52);
		*sl = sizeof(*a);
	} else {
		return DOCA_ERROR_INVALID_VALUE;
	}
	return DOCA_SUCCESS;
}

int sd_rdma_ctx_usable(struct doca_rdma *rdma)
{
	return rdma->lg.running &&
	       (rdma->ctx.state == DOCA_CTX_STATE_RUNNING || rdma->ctx.state == DOCA_CTX_STATE_STARTING);
}

/* Outgoing link for conn to ss. Engine lock held. */
void sd_conn_dial(struct doca_rdma_connection *c, const struct sockaddr_storage *ss, socklen_t sl)
{
	int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int rc;
	struct sd_link *l;

	if (fd < 0) {
		sd_conn_fail(c, SD_FAIL_REFUSED);
		return;
	}
	sd_sock_tune(fd);
	rc = connect(fd, (const struct sockaddr *)ss, sl);
	if (rc != 0 && errno != EINPROGRESS) {
		SD_WARN("rdma: connection %u: connect to %s:%u failed: %s", c->id, c->peer.str,
			(unsigned)c->peer.port, strerror(errno));
		close(fd);
		sd_conn_fail(c, SD_FAIL_REFUSED);
		return;
	}
	l = sd_link_new(&c->rdma->lg, fd, rc != 0, &sd_conn_link_ops);
	if (!l) {
		close(fd);
		sd_conn_fail(c, SD_FAIL_LOST);
		return;
	}
	l->conn = c;
	c->link = l;
	if (rc == 0)
		sd_conn_on_connected(l, 0);
	if (!l->dead)
		sd_link_flush(l);
}

/* ---------------------------------------------------------------- OOB API */
/* May a new connection be created now? Called with the engine lock held. */
doca_error_t sd_rdma_conn_slot_check(struct doca_rdma *rdma)
{
	if (!sd_rdma_ctx_usable(rdma))
		return DOCA_ERROR_BAD_STATE;
	if (rdma->nconns_active >= rdma->max_conns)
		return DOCA_ERROR_FULL;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_export(struct doca_rdma *rdma, const void **details, size_t *size,
					struct doca_rdma_connection **conn)
{
	struct doca_rdma_connection *c;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	doca_error_t rc = DOCA_SUCCESS;

	if (!rdma || !details || !size || !conn)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_rdma_live(rdma))
		return DOCA_ERROR_BAD_STATE;
	sd_eng_lock();
	rc = sd_rdma_conn_slot_check(rdma);
	if (rc != DOCA_SUCCESS)
		goto out;
	if (!rdma->oob) {
		const struct doca_devinfo *in = &rdma->dev->info;
		if (!in->has_ipv4 && !in->has_ipv6) {
			rc = DOCA_ERROR_NOT_SUPPORTED;
			goto out;
		}
		if (sd_open_listener(rdma, !in->has_ipv4, 0, 1, &rc) != 0)
			goto out;
	}
	if (getsockname(rdma->oob->ep.fd, (struct sockaddr *)&ss, &sl) != 0) {
		rc = DOCA_ERROR_OPERATING_SYSTEM;
		goto out;
	}
	c = sd_conn_new(rdma);
	if (!c) {
		rc = DOCA_ERROR_NO_MEMORY;
		goto out;
	}
	c->state = SDC_EXPORTED;
	blob_encode(c, &ss);
	*details = c->blob;
	*size = SD_BLOB_LEN;
	*conn = c;
out:
	sd_eng_unlock();
	return rc;
}

SD_EXPORT doca_error_t doca_rdma_connect(struct doca_rdma *rdma, const void *details, size_t size,
					 struct doca_rdma_connection *c)
{
	struct sockaddr_storage ss;
	socklen_t sl = 0;
	uint64_t inst;
	uint8_t token[SD_RDMA_TOKEN_LEN];
	doca_error_t rc;

	if (!rdma || !details || !c)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_rdma_live(rdma))
		return DOCA_ERROR_BAD_STATE;
	rc = blob_parse(details, size, &inst, token, &ss, &sl);
	if (rc != DOCA_SUCCESS)
		return rc;
	sd_eng_lock();
	if (!sd_rdma_ctx_usable(rdma)) {
		rc = DOCA_ERROR_BAD_STATE;
		goto out;
	}
	{
		struct doca_rdma_connection *x = rdma->conns;
		while (x && x != c)
			x = x->next;
		if (!x) {
			rc = DOCA_ERROR_INVALID_VALUE;
			goto out;
		}
	}
	if (c->is_cm || c->state != SDC_EXPORTED) {
		rc = DOCA_ERROR_BAD_STATE;
		goto out;
	}
	if (cmp_ident(sd_instance_id(), c->token, inst, token) == 0) {
		rc = DOCA_ERROR_INVALID_VALUE; /* our own details */
		goto out;
	}
	c->peer_instance = inst;
	memcpy(c->peer_token, token, SD_RDMA_TOKEN_LEN);
	sd_addr_from_sockaddr(&c->peer, &ss, sl);
	c->state = SDC_CONNECTING;
	c->deadline_ns = sd_now_ns() + (uint64_t)rdma->timeout_ms * 1000000ull;
	c->dialer = cmp_ident(sd_instance_id(), c->token, inst, token) > 0;
	if (c->dialer) {
		sd_conn_dial(c, &ss, sl);
	} else {
		struct sd_link *l, *nx;

		for (l = rdma->lg.links; l; l = nx) {
			nx = l->next;
			if (l->conn || !l->have_hello || memcmp(l->hello_target, c->token, SD_RDMA_TOKEN_LEN) != 0)
				continue;
			if (oob_attach(c, l) != 0)
				sd_link_close(l, DOCA_ERROR_CONNECTION_RESET);
			break;
		}
	}
	rc = DOCA_SUCCESS;
out:
	sd_eng_unlock();
	return rc;
}

SD_EXPORT doca_error_t doca_rdma_connection_disconnect(struct doca_rdma_connection *c)
{
	if (!c)
		return DOCA_ERROR_INVALID_VALUE;
	sd_eng_lock();
	if (!sd_conn_live(c)) { /* freed long after it closed */
		sd_eng_unlock();
		return DOCA_ERROR_INVALID_VALUE;
	}
	if (c->state != SDC_CLOSED) {
		struct sd_link *l = c->link;

		if (l && c->state == SDC_ESTABLISHED && !(l->txq_head && l->txq_head->sent)) {
			struct sd_hdr h = {.opcode = SD_OP_DISCONNECT};
			/* at the head of the queue: goes out before anything else */
			struct sd_txitem *keep = l->txq_head, *keep_tail = l->txq_tail;
			l->txq_head = l->txq_tail = NULL;
			if (sd_link_send_ctrl(l, &h, NULL, 0) == 0)
				sd_link_flush(l);
			if (l->txq_head) { /* not sent: restore for the close path */
				l->txq_tail->next = keep;
				if (keep)
					l->txq_tail = keep_tail;
			} else {
				l->txq_head = keep;
				l->txq_tail = keep_tail;
			}
		}
		if (l)
			sd_link_close(l, DOCA_ERROR_CONNECTION_ABORTED);
		else
			sd_conn_on_link_closed(c, DOCA_ERROR_CONNECTION_ABORTED, 0);
	}
	sd_eng_unlock();
	return DOCA_SUCCESS;
}

/* ---------------------------------------------------------------- getters */
SD_EXPORT doca_error_t doca_rdma_connection_set_user_data(struct doca_rdma_connection *c, union doca_data ud)
{
	if (!c || !sd_conn_live(c))
		return DOCA_ERROR_INVALID_VALUE;
	c->user_data = ud;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_connection_get_user_data(const struct doca_rdma_connection *c,
							  union doca_data *ud)
{
	if (!c || !ud || !sd_conn_live(c))
		return DOCA_ERROR_INVALID_VALUE;
	*ud = c->user_data;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_connection_get_id(const struct doca_rdma_connection *c, uint32_t *id)
{
	if (!c || !id || !sd_conn_live(c))
		return DOCA_ERROR_INVALID_VALUE;
	*id = c->id;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_connection_get_addr(const struct doca_rdma_connection *c,
						     struct doca_rdma_addr **addr)
{
	if (!c || !addr || !sd_conn_live(c))
		return DOCA_ERROR_INVALID_VALUE;
	if (c->peer.sslen == 0)
		return DOCA_ERROR_NOT_CONNECTED;
	*addr = (struct doca_rdma_addr *)&c->peer;
	return DOCA_SUCCESS;
}

