/*
 * softdoca RDMA links: one TCP connection between two engines. Queueing and
 * zero-copy transmission (sendmsg straight from the frames' memory), close
 * and drain. Engine lock held everywhere.
 */
#include "rdma.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* ---------------------------------------------------------------- links */
void sd_link_set_why(struct sd_link *l, const char *fmt, ...)
{
	va_list ap;

	if (l->why[0]) /* the first reason is the cause */
		return;
	va_start(ap, fmt);
	vsnprintf(l->why, sizeof(l->why), fmt, ap);
	va_end(ap);
}

/* Fail a task the link can no longer carry, saying why. */
static void flush_task(struct sd_link *l, struct sd_rtask *t, doca_error_t status)
{
	if (l->why[0])
		sd_rtask_fail(t, status, "flushed: %s", l->why);
	else if (status == DOCA_ERROR_CONNECTION_ABORTED)
		sd_rtask_fail(t, status, "flushed: the connection was disconnected locally or its context stopped");
	else
		sd_rtask_fail(t, status, "the connection was lost (the peer closed it, died or became unreachable)");
}

void sd_link_update_events(struct sd_link *l)
{
	uint32_t ev = 0;

	if (l->dead)
		return;
	if (!l->rx_paused)
		ev |= EPOLLIN;
	if (l->connecting || l->txq_head)
		ev |= EPOLLOUT;
	if (ev != l->ep_events) {
		l->ep_events = ev;
		sd_eng_ep_mod(&l->ep, ev);
	}
}

void sd_link_set_rx_paused(struct sd_link *l, int paused)
{
	l->rx_paused = paused;
	sd_link_update_events(l);
	if (!paused)
		sd_link_rx_kick(l);
}

struct sd_link *sd_link_new(struct doca_rdma *rdma, int fd, int connecting)
{
	struct sd_link *l = calloc(1, sizeof(*l));
	uint64_t now = sd_now_ns();

	if (!l)
		return NULL;
	l->rb = malloc(SD_RB_CAP);
	if (!l->rb) {
		free(l);
		return NULL;
	}
	l->ep.kind = SD_EP_LINK;
	l->ep.fd = fd;
	l->rdma = rdma;
	l->connecting = connecting;
	l->last_rx_ns = now;
	l->last_ping_ns = now;
	l->next_req_id = 1;
	l->ep_events = EPOLLIN | (connecting ? EPOLLOUT : 0);
	if (sd_eng_ep_add(&l->ep, l->ep_events) != 0) {
		free(l->rb);
		free(l);
		return NULL;
	}
	SD_LIVE_INC(SD_LIVE_LINK);
	l->next = rdma->links;
	rdma->links = l;
	return l;
}

void sd_wire_drop_item(struct sd_txitem *it)
{
	if (it->ref)
		sd_mmap_release(it->ref);
	it->ref = NULL;
	if (!it->task) {
		SD_LIVE_DEC(SD_LIVE_CTRL);
		free(it);
	}
}

void sd_link_close(struct sd_link *l, doca_error_t status)
{
	struct sd_txitem *it, *nx;
	struct doca_rdma_connection *conn = l->conn;
	struct sd_link **pp;

	if (l->dead)
		return;
	l->dead = 1;
	sd_eng_ep_del(&l->ep);
	close(l->ep.fd);
	l->ep.fd = -1;
	sd_wire_abort_rx(l, status);
	if (l->parked) {
		l->parked = 0;
		l->rdma->nparked--;
		free(l->park_buf);
		l->park_buf = NULL;
	}
	for (it = l->txq_head; it; it = nx) {
		nx = it->next;
		if (it->task)
			flush_task(l, it->task, status);
		sd_wire_drop_item(it);
	}
	l->txq_head = l->txq_tail = NULL;
	for (it = l->out_head; it; it = nx) {
		nx = it->next;
		flush_task(l, it->task, status);
	}
	l->out_head = l->out_tail = NULL;
	l->out_count = 0;
	for (pp = &l->rdma->links; *pp; pp = &(*pp)->next) {
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	}
	sd_eng_bury(l);
	l->conn = NULL;
	if (conn) {
		conn->link = NULL;
		sd_conn_set_why(conn, l->why);
		sd_conn_on_link_closed(conn, status, status != DOCA_ERROR_CONNECTION_ABORTED);
	}
	sd_eng_kick();
}

void sd_link_queue(struct sd_link *l, struct sd_txitem *it)
{
	if (!l->txq_head && !l->out_head)
		l->last_rx_ns = sd_now_ns(); /* idle -> busy: silence is counted from now */
	it->next = NULL;
	it->sent = 0;
	if (l->txq_tail)
		l->txq_tail->next = it;
	else
		l->txq_head = it;
	l->txq_tail = it;
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
	if (it->task) {
		it->next = NULL;
		if (l->out_tail)
			l->out_tail->next = it;
		else
			l->out_head = it;
		l->out_tail = it;
		l->out_count++;
	} else {
		sd_wire_drop_item(it);
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
			if (take && (it->task || (!it->blob_cap && it->total > SD_HDR_LEN)))
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
	struct doca_rdma_connection *conn = l->conn;
	struct sd_txitem *it, **pp;

	if (l->dead || l->draining)
		return;
	if (l->txq_head && l->txq_head->task && l->txq_head->sent) {
		/* a request is half on the wire: nothing can follow it */
		sd_link_close(l, status);
		return;
	}
	sd_wire_abort_rx(l, status);
	l->rx_state = SD_RX_HDR;
	l->rx_hdr_got = 0;
	for (pp = &l->txq_head; *pp;) {
		it = *pp;
		if (it->task) {
			*pp = it->next;
			flush_task(l, it->task, status);
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
		flush_task(l, it->task, status);
	}
	l->out_tail = NULL;
	l->out_count = 0;
	if (l->parked) {
		l->parked = 0;
		l->rdma->nparked--;
		free(l->park_buf);
		l->park_buf = NULL;
	}
	l->draining = 1;
	l->close_after_flush = 1;
	l->deadline_ns = sd_now_ns() + sd_eng_timeout_ns();
	l->rx_paused = 0;
	l->conn = NULL;
	if (conn) {
		conn->link = NULL;
		sd_conn_set_why(conn, l->why);
		sd_conn_on_link_closed(conn, status, status != DOCA_ERROR_CONNECTION_ABORTED);
	}
	sd_link_flush(l);
}

/* The doorbell of a submit with DOCA_TASK_SUBMIT_FLAG_FLUSH: the tasks
 * queued on rdma's links since the last one go out. Sent from the
 * submitting thread (no engine wake-up), unless requests are outstanding
 * on the link: then the engine, which wakes for their responses anyway,
 * sends them with its next flush, many in one sendmsg (on an RC QP later
 * work waits behind earlier work too). */
void sd_link_submit_flush(struct doca_rdma *rdma, struct sd_link *l)
{
	for (struct sd_link *x = rdma->links; x; x = x->next) {
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

