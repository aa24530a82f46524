/*
 * softdoca RDMA links: one TCP connection between two engines. The frame
 * header codec, queueing and zero-copy transmission (sendmsg straight from
 * the frames' memory), close, drain and freeing. Engine lock held everywhere.
 *
 * Links sit right above the engine services and call nothing higher: what
 * happens to a link is reported to its owner (the connection layer) through
 * the struct sd_link_ops it gave to sd_link_new.
 */
#include "rdma.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* ---------------------------------------------------------------- header codec */
void sd_hdr_encode(const struct sd_hdr *h, uint8_t out[SD_HDR_LEN])
{
	memset(out, 0, SD_HDR_LEN);
	sd_put_le32(out + 0, SD_WIRE_MAGIC);
	out[4] = SD_WIRE_VERSION;
	out[5] = h->opcode;
	sd_put_le16(out + 6, h->flags);
	sd_put_le64(out + 8, h->req_id);
	sd_put_le32(out + 16, h->payload_len);
	memcpy(out + 20, h->imm, 4);
	sd_put_le32(out + 24, h->status);
	sd_put_le32(out + 28, h->budget_ms);
	sd_put_le64(out + 32, h->instance);
	sd_put_le64(out + 40, h->map_id);
	sd_put_le64(out + 48, h->raddr);
	sd_put_le64(out + 56, h->rlen);
	memcpy(out + 64, h->key, SD_KEY_LEN);
	sd_put_le64(out + 80, h->arg0);
	sd_put_le64(out + 88, h->arg1);
}

static uint32_t max_payload(uint8_t op)
{
	switch (op) {
	case SD_OP_HELLO:
		return SD_HELLO_LEN;
	case SD_OP_CM_REQ:
		return SD_CMREQ_LEN;
	case SD_OP_CM_ACCEPT:
		return SD_RDMA_MAX_PRIV;
	case SD_OP_WRITE:
	case SD_OP_WRITE_IMM:
	case SD_OP_SEND:
	case SD_OP_SEND_IMM:
	case SD_OP_READ_RESP:
		return SD_RDMA_MAX_MSG;
	case SD_OP_ATOMIC_RESP:
		return 8;
	case SD_OP_PROV_ADDR:
		return 64u << 10;
	default:
		return 0;
	}
}

int sd_hdr_decode(const uint8_t in[SD_HDR_LEN], struct sd_hdr *h)
{
	if (sd_get_le32(in) != SD_WIRE_MAGIC || in[4] != SD_WIRE_VERSION)
		return -1;
	memset(h, 0, sizeof(*h));
	h->opcode = in[5];
	h->flags = sd_get_le16(in + 6);
	h->req_id = sd_get_le64(in + 8);
	h->payload_len = sd_get_le32(in + 16);
	memcpy(h->imm, in + 20, 4);
	h->status = sd_get_le32(in + 24);
	h->budget_ms = sd_get_le32(in + 28);
	h->instance = sd_get_le64(in + 32);
	h->map_id = sd_get_le64(in + 40);
	h->raddr = sd_get_le64(in + 48);
	h->rlen = sd_get_le64(in + 56);
	memcpy(h->key, in + 64, SD_KEY_LEN);
	h->arg0 = sd_get_le64(in + 80);
	h->arg1 = sd_get_le64(in + 88);
	if (h->flags != 0)
		return -1;
	switch (h->opcode) {
	case SD_OP_HELLO: case SD_OP_HELLO_ACK: case SD_OP_CM_REQ: case SD_OP_CM_ACCEPT:
	case SD_OP_CM_REJECT: case SD_OP_CM_RTU: case SD_OP_WRITE: case SD_OP_WRITE_IMM:
	case SD_OP_SEND: case SD_OP_SEND_IMM: case SD_OP_READ: case SD_OP_CMP_SWP:
	case SD_OP_FETCH_ADD: case SD_OP_RESP: case SD_OP_READ_RESP: case SD_OP_ATOMIC_RESP:
	case SD_OP_PING: case SD_OP_PONG: case SD_OP_RNR_WAIT: case SD_OP_DISCONNECT: case SD_OP_PROV_ADDR:
	case SD_OP_PROV_REVOKE: case SD_OP_PROV_REVOKE_ACK: case SD_OP_PROV_CHECK: case SD_OP_PROV_CHECK_ACK:
		break;
	default:
		return -1;
	}
	if (h->payload_len > max_payload(h->opcode))
		return -1;
	if (h->status > DOCA_ERROR_DEVICE_FATAL_ERROR)
		return -1;
	if (h->opcode == SD_OP_READ && h->rlen > SD_RDMA_MAX_MSG)
		return -1;
	return 0;
}

/* ---------------------------------------------------------------- links */
/* Closed links wait here until the end of the engine's turn: the engine
 * thread may still hold pointers to them (engine lock). */
static struct sd_link *graveyard;
static _Atomic uint64_t link_serial; /* tags links in a pe's notification set */
static pthread_once_t link_once = PTHREAD_ONCE_INIT;

static size_t ctrl_q_all, park_all;
static int nlinks_live;

static void link_atfork_child(void)
{
	graveyard = NULL; /* the parent's engine thread may have been mid-turn */
	ctrl_q_all = park_all = 0; /* the parent's links are not the child's */
	nlinks_live = 0;
}

static void link_init_once(void)
{
	pthread_atfork(NULL, NULL, link_atfork_child);
}

void sd_link_set_why(struct sd_link *l, const char *fmt, ...)
{
	va_list ap;

	if (l->why[0]) /* the first reason is the cause */
		return;
	va_start(ap, fmt);
	vsnprintf(l->why, sizeof(l->why), fmt, ap);
	va_end(ap);
}

/* Input registrations: the pe's (a thread waiting there reads the input
 * itself) strictly before the engine's, both exclusive, so the kernel wakes
 * the first of them with a thread blocked in it. */
static int link_rx_register(struct sd_link *l)
{
	l->pe_watched = l->ops->rx_watch(l, 1) == 0;
	if (sd_eng_ep_add(&l->ep, EPOLLIN | EPOLLEXCLUSIVE) != 0) {
		if (l->pe_watched)
			(void)l->ops->rx_watch(l, 0);
		l->pe_watched = 0;
		return -1;
	}
	l->rx_registered = 1;
	return 0;
}

static void link_rx_unregister(struct sd_link *l)
{
	if (!l->rx_registered)
		return;
	sd_eng_ep_del(&l->ep);
	if (l->pe_watched)
		(void)l->ops->rx_watch(l, 0);
	l->pe_watched = 0;
	l->rx_registered = 0;
}

void sd_link_update_events(struct sd_link *l)
{
	uint32_t ev = (l->connecting || l->txq_head) ? EPOLLOUT : 0;

	if (l->dead)
		return;
	/* exclusive registrations cannot be modified: a paused link's input is
	 * unregistered (its errors still arrive through wep) */
	if (l->rx_paused)
		link_rx_unregister(l);
	else if (!l->rx_registered && link_rx_register(l) != 0) {
		SD_ERR("rdma: cannot watch a link's input again (epoll: %s); closing it", strerror(errno));
		sd_link_set_why(l, "the engine could not watch the connection's input (epoll_ctl failed)");
		l->deadline_ns = 1; /* the engine's next timer pass closes it */
		sd_eng_kick();
	}
	if (ev != l->ep_events) {
		l->ep_events = ev;
		sd_eng_ep_mod(&l->wep, ev);
	}
}

void sd_link_set_rx_paused(struct sd_link *l, int paused)
{
	l->rx_paused = paused ? (l->rx_paused | SD_RXP_APP) : (l->rx_paused & ~SD_RXP_APP);
	sd_link_update_events(l);
	if (!l->rx_paused)
		sd_link_rx_kick(l);
}

/* A control item (a response, mostly) queued / sent: past SD_CTRLQ_HIGH the
 * peer asks faster than it reads the answers, so its input waits (TCP's flow
 * control then holds the peer) until they drain to SD_CTRLQ_LOW. Its silence
 * meanwhile is the keepalive's: a peer that neither reads nor lets us read
 * for SOFTDOCA_TIMEOUT_MS is declared dead. */
static size_t ctrl_cost(const struct sd_txitem *it)
{
	/* the allocation: a blob of small frames, a frame's copied payload, or (a read's data: it->ref) none */
	return sizeof(*it) + (it->ref ? 0 : it->blob_cap ? it->blob_cap : it->iov1.iov_len);
}

/* Every link's ctrl_q together (ctrl_q_all, engine lock): past SD_CTRLQ_PROC
 * a link that holds its share of it (SD_CTRLQ_PROC over the links open, at
 * least SD_CTRLQ_SHARE_MIN, at most SD_CTRLQ_SHARE) waits too, so many peers
 * that do not read stay near SD_CTRLQ_PROC together instead of adding up to
 * connections x SD_CTRLQ_HIGH; peers that read their answers (small queues)
 * go on. */
static size_t ctrl_q_share(void)
{
	size_t share = nlinks_live > 0 ? SD_CTRLQ_PROC / (size_t)nlinks_live : SD_CTRLQ_SHARE;

	return share > SD_CTRLQ_SHARE ? SD_CTRLQ_SHARE : share < SD_CTRLQ_SHARE_MIN ? SD_CTRLQ_SHARE_MIN : share;
}

static int ctrl_q_over(const struct sd_link *l)
{
	return l->ctrl_q >= SD_CTRLQ_HIGH || (ctrl_q_all >= SD_CTRLQ_PROC && l->ctrl_q >= ctrl_q_share());
}

static size_t ctrl_q_resume_at(void)
{
	return ctrl_q_all >= SD_CTRLQ_PROC ? ctrl_q_share() / 2 : SD_CTRLQ_LOW;
}

static void ctrl_q_add(struct sd_link *l, const struct sd_txitem *it)
{
	size_t c = ctrl_cost(it);

	l->ctrl_q += c;
	ctrl_q_all += c;
	/* at a frame's boundary only: a write half read would hold its map (rx_ref) while paused; the
	 * next answer queued looks again */
	if (!ctrl_q_over(l) || (l->rx_paused & SD_RXP_TX) || l->dead || l->rx_state == SD_RX_PAYLOAD)
		return;
	SD_DBG("rdma: the peer does not read its answers (%zu bytes queued): its input waits", l->ctrl_q);
	l->rx_paused |= SD_RXP_TX;
	sd_link_update_events(l);
}

static void ctrl_q_done(struct sd_link *l, const struct sd_txitem *it)
{
	size_t c = ctrl_cost(it);

	if (c > l->ctrl_q)
		c = l->ctrl_q;
	l->ctrl_q -= c;
	ctrl_q_all -= c;
	if (!(l->rx_paused & SD_RXP_TX) || l->ctrl_q > ctrl_q_resume_at() || l->dead)
		return;
	l->rx_paused &= ~SD_RXP_TX;
	sd_link_update_events(l);
	if (!l->rx_paused)
		sd_link_rx_kick(l);
}

void sd_link_unpark(struct sd_link *l)
{
	sd_link_park_free(l);
	l->park_defer = 0;
	l->parked = 0;
	l->group->nparked--;
}

size_t sd_link_park_bytes(void)
{
	return park_all;
}

uint8_t *sd_link_park_alloc(struct sd_link *l, size_t len)
{
	sd_link_park_free(l);
	l->park_buf = malloc(len);
	if (l->park_buf) {
		l->park_cap = len;
		park_all += len;
	}
	return l->park_buf;
}

void sd_link_park_free(struct sd_link *l)
{
	free(l->park_buf);
	l->park_buf = NULL;
	park_all -= l->park_cap;
	l->park_cap = 0;
}

void sd_link_park_charge(size_t len)
{
	park_all += len;
}

void sd_link_park_credit(size_t len)
{
	park_all -= len < park_all ? len : park_all;
}

size_t sd_link_park_limit(void)
{
	static size_t lim;

	if (!lim) {
		const char *e = getenv("SOFTDOCA_PARK_MAX_MB");
		unsigned long mb = e && *e ? strtoul(e, NULL, 10) : 0;

		lim = mb >= 1 && mb <= (SIZE_MAX >> 21) ? (size_t)mb << 20 : SD_PARK_PROC;
	}
	return lim;
}

/* Staged bytes (or a deferred header) of a link that was paused are
 * processed by the engine once it is unpaused (the socket may hold nothing
 * more to wake it). */
void sd_link_rx_kick(struct sd_link *l)
{
	if (!l->dead && !l->rx_paused && (l->rb_pos < l->rb_end || l->rx_held)) {
		l->rx_kick = 1;
		sd_eng_kick();
	}
}

struct sd_link *sd_link_new(struct sd_link_group *group, int fd, int connecting, const struct sd_link_ops *ops)
{
	struct sd_link *l = calloc(1, sizeof(*l));
	uint64_t now = sd_now_ns();

	pthread_once(&link_once, link_init_once);
	if (!l)
		return NULL;
	l->rb = malloc(SD_RB_CAP);
	if (!l->rb) {
		free(l);
		return NULL;
	}
	l->ep.kind = SD_EP_LINK;
	l->ep.fd = fd;
	l->wep.kind = SD_EP_LINK_OUT;
	l->wep.fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	l->serial = atomic_fetch_add(&link_serial, 1) + 1;
	l->ops = ops;
	l->group = group;
	l->connecting = connecting;
	l->last_rx_ns = now;
	l->last_ping_ns = now;
	l->sweep_ns = now;
	l->next_req_id = 1;
	l->ep_events = connecting ? EPOLLOUT : 0;
	if (l->wep.fd < 0 || sd_eng_ep_add(&l->wep, l->ep_events) != 0 || link_rx_register(l) != 0) {
		if (l->wep.fd >= 0) {
			sd_eng_ep_del(&l->wep);
			close(l->wep.fd);
		}
		free(l->rb);
		free(l);
		return NULL;
	}
	SD_LIVE_INC(SD_LIVE_LINK);
	nlinks_live++;
	l->next = group->links;
	group->links = l;
	return l;
}

static void drop_item(struct sd_link *l, struct sd_txitem *it)
{
	if (it->ref)
		l->ops->release_ref(it->ref);
	it->ref = NULL;
	if (!it->op) {
		SD_LIVE_DEC(SD_LIVE_CTRL);
		free(it);
	}
}

void sd_link_close(struct sd_link *l, doca_error_t status)
{
	struct sd_txitem *it, *nx;
	struct sd_link **pp;

	if (l->dead)
		return;
	l->dead = 1;
	link_rx_unregister(l);
	sd_eng_ep_del(&l->wep);
	close(l->wep.fd);
	l->wep.fd = -1;
	close(l->ep.fd);
	l->ep.fd = -1;
	l->ops->on_abort_rx(l, status);
	if (l->parked)
		sd_link_unpark(l);
	for (it = l->txq_head; it; it = nx) {
		nx = it->next;
		if (it->op)
			l->ops->on_flush(l, it->op, status);
		drop_item(l, it);
	}
	l->txq_head = l->txq_tail = NULL;
	ctrl_q_all -= l->ctrl_q;
	l->ctrl_q = 0;
	for (it = l->out_head; it; it = nx) {
		nx = it->next;
		l->ops->on_flush(l, it->op, status);
	}
	l->out_head = l->out_tail = NULL;
	l->out_count = 0;
	for (pp = &l->group->links; *pp; pp = &(*pp)->next) {
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	}
	l->next = graveyard;
	graveyard = l;
	l->ops->on_detached(l, status);
	sd_eng_kick();
}

void sd_link_free_closed(void)
{
	while (graveyard) {
		struct sd_link *l = graveyard;

		graveyard = l->next;
		sd_link_park_free(l);
		free(l->prov_buf);
		free(l->rb);
		l->ops->on_free(l);
		SD_LIVE_DEC(SD_LIVE_LINK);
		nlinks_live--;
		free(l);
	}
}

void sd_link_queue(struct sd_link *l, struct sd_txitem *it)
{
	if (!l->txq_head && !l->out_head && !l->awaited && l->rx_state != SD_RX_PAYLOAD)
		l->last_rx_ns = sd_now_ns(); /* idle -> busy: silence is counted from now (mid-payload it counts already) */
	it->next = NULL;
	it->sent = 0;
	if (l->txq_tail)
		l->txq_tail->next = it;
	else
		l->txq_head = it;
	l->txq_tail = it;
	if (!it->op)
		ctrl_q_add(l, it);
}

/* Control frames (responses, pings, handshake) are small: consecutive ones
 * share one allocation, a blob of encoded frames sent as one piece. */
#define SD_CTRL_BLOB 4096u
#define SD_CTRL_SMALL 64u

int sd_link_send_ctrl(struct sd_link *l, const struct sd_hdr *h, const void *payload, size_t len)
{
	struct sd_txitem *it = l->txq_tail;
	struct sd_hdr hh = *h;

	hh.payload_len = (uint32_t)len;
	if (it && it->blob_cap && len <= SD_CTRL_SMALL && it->iov1.iov_len + SD_HDR_LEN + len <= it->blob_cap) {
		uint8_t *p = (uint8_t *)(it + 1) + it->iov1.iov_len;

		sd_hdr_encode(&hh, p);
		if (len)
			memcpy(p + SD_HDR_LEN, payload, len);
		it->iov1.iov_len += SD_HDR_LEN + len;
		it->iov = &it->iov1;
		it->iovcnt = 1;
		it->total += SD_HDR_LEN + len;
		return 0;
	}
	it = calloc(1, sizeof(*it) + (len <= SD_CTRL_SMALL ? SD_CTRL_BLOB : len));
	if (!it)
		return -1;
	SD_LIVE_INC(SD_LIVE_CTRL);
	sd_hdr_encode(&hh, it->hdr);
	it->iov1.iov_base = it + 1;
	it->iov1.iov_len = len;
	if (len) {
		memcpy(it + 1, payload, len);
		it->iov = &it->iov1;
		it->iovcnt = 1;
	}
	if (len <= SD_CTRL_SMALL)
		it->blob_cap = SD_CTRL_BLOB;
	it->total = SD_HDR_LEN + len;
	sd_link_queue(l, it);
	return 0;
}

static void item_sent(struct sd_link *l, struct sd_txitem *it)
{
	if (it->op) {
		it->next = NULL;
		if (l->out_tail)
			l->out_tail->next = it;
		else
			l->out_head = it;
		l->out_tail = it;
		l->out_count++;
	} else {
		ctrl_q_done(l, it);
		drop_item(l, it);
	}
}

/* Send as much of the tx queue as the socket takes. Returns -1 on a fatal
 * socket error (the caller closes the link, or lets the engine see it). */
int sd_link_flush_rc(struct sd_link *l)
{
	struct iovec v[64];
	int tx_progress = 0;

	while (!l->dead && !l->connecting && l->txq_head) {
		struct sd_txitem *it;
		int n = 0;
		struct msghdr msg;
		ssize_t r;

		for (it = l->txq_head; it && n < 64; it = it->next) {
			size_t off = it->sent;

			if (off < SD_HDR_LEN) {
				v[n].iov_base = it->hdr + off;
				v[n].iov_len = SD_HDR_LEN - off;
				n++;
				off = 0;
			} else {
				off -= SD_HDR_LEN;
			}
			for (int i = 0; i < it->iovcnt && n < 64; i++) {
				if (off >= it->iov[i].iov_len) {
					off -= it->iov[i].iov_len;
					continue;
				}
				v[n].iov_base = (uint8_t *)it->iov[i].iov_base + off;
				v[n].iov_len = it->iov[i].iov_len - off;
				off = 0;
				if (v[n].iov_len)
					n++;
			}
		}
		memset(&msg, 0, sizeof(msg));
		msg.msg_iov = v;
		msg.msg_iovlen = (size_t)n;
		r = sendmsg(l->ep.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			sd_link_update_events(l);
			return -1;
		}
		while (r > 0 && l->txq_head) {
			size_t take;

			it = l->txq_head;
			take = it->total - it->sent;
			if ((size_t)r < take)
				take = (size_t)r;
			it->sent += take;
			r -= (ssize_t)take;
			/* the peer took our data; while its input waits for its answers to drain, those count too */
			if (take && (it->op || (!it->blob_cap && it->total > SD_HDR_LEN) || (l->rx_paused & SD_RXP_TX)))
				tx_progress = 1;
			if (it->sent == it->total) {
				l->txq_head = it->next;
				if (!l->txq_head)
					l->txq_tail = NULL;
				item_sent(l, it);
			}
		}
	}
	if (tx_progress)
		l->last_tx_ns = sd_now_ns();
	sd_link_update_events(l);
	return 0;
}

void sd_link_drain(struct sd_link *l, doca_error_t status)
{
	struct sd_txitem *it, **pp;

	if (l->dead || l->draining)
		return;
	if (l->txq_head && l->txq_head->op && l->txq_head->sent) {
		/* a request is half on the wire: nothing can follow it */
		sd_link_close(l, status);
		return;
	}
	l->ops->on_abort_rx(l, status);
	l->rx_state = SD_RX_HDR;
	l->rx_hdr_got = 0;
	l->rx_held = 0; /* a deferred request is dropped with the rest of the input */
	for (pp = &l->txq_head; *pp;) {
		it = *pp;
		if (it->op) {
			*pp = it->next;
			l->ops->on_flush(l, it->op, status);
		} else {
			pp = &it->next;
		}
	}
	l->txq_tail = NULL;
	for (it = l->txq_head; it; it = it->next)
		l->txq_tail = it;
	while (l->out_head) {
		it = l->out_head;
		l->out_head = it->next;
		l->ops->on_flush(l, it->op, status);
	}
	l->out_tail = NULL;
	l->out_count = 0;
	if (l->parked)
		sd_link_unpark(l);
	l->draining = 1;
	l->close_after_flush = 1;
	l->deadline_ns = sd_now_ns() + sd_eng_timeout_ns();
	l->rx_paused = 0;
	l->ops->on_detached(l, status);
	sd_link_flush(l);
}

/* The doorbell of a submit with DOCA_TASK_SUBMIT_FLAG_FLUSH: the tasks
 * queued on the links of l's group since the last one go out. Sent from the
 * submitting thread (no engine wake-up), unless requests are outstanding
 * on the link: then the engine, which wakes for their responses anyway,
 * sends them with its next flush, many in one sendmsg (on an RC QP later
 * work waits behind earlier work too). */
void sd_link_submit_flush(struct sd_link *l)
{
	for (struct sd_link *x = l->group->links; x; x = x->next) {
		if (!x->unflushed)
			continue;
		x->unflushed = 0;
		if (x != l && !x->out_head)
			sd_link_flush(x);
	}
	l->unflushed = 0;
	if (l->out_head && !l->dead && !l->connecting)
		return; /* deferred: the engine flushes on the next response */
	sd_link_flush(l);
}

void sd_link_flush(struct sd_link *l)
{
	/* Errors surface to the engine as EPOLLERR/EPOLLHUP. */
	(void)sd_link_flush_rc(l);
	if (!l->txq_head && l->close_after_flush && !l->dead)
		shutdown(l->ep.fd, SHUT_WR);
}

