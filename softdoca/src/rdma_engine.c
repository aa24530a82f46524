/*
 * softdoca RDMA engine: the "NIC". One thread per process runs an epoll loop
 * over non-blocking TCP sockets (links between engines), the listeners of the
 * started rdma contexts and an eventfd that application threads use to wake
 * it. It serves incoming one-sided operations straight into / out of
 * registered memory, so they complete without the target progressing.
 *
 * Lifetime: started lazily by the first doca_ctx_start of an rdma context,
 * stopped and joined when the last doca_rdma is destroyed. It never blocks
 * process exit (nothing joins it at exit). After fork() the child forgets the
 * parent's engine (pthread_atfork) and starts its own when needed; it never
 * shuts down sockets it inherited, it only closes its copies.
 *
 * Liveness: TCP keepalive + TCP_USER_TIMEOUT derived from SOFTDOCA_TIMEOUT_MS
 * (T, default 5000), and an engine check: a link with work outstanding pings
 * its peer after T/4 of silence and is declared dead after T of silence.
 */
#include "rdma.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct sd_engthr {
	pthread_t thr;
	int epfd;
	struct sd_ep efd;
	int stop;
};

static struct {
	pthread_mutex_t lock;
	pthread_mutex_t life;        /* serialises engine start / join */
	struct sd_engthr *cur;
	int nrdma;
	struct doca_rdma *rdmas;     /* started contexts */
	struct sd_link *graveyard;   /* closed links, freed at the end of a loop turn */
	uint64_t timeout_ns;
} eng = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.life = PTHREAD_MUTEX_INITIALIZER,
};

static pthread_once_t eng_once = PTHREAD_ONCE_INIT;
static uint8_t scratch[65536];

static void eng_atfork_child(void)
{
	/* The parent's engine thread does not exist here: forget it. Its fds
	 * stay open in the child (closing epoll/eventfd copies is harmless but
	 * not needed); contexts inherited from the parent are unusable. */
	pthread_mutex_init(&eng.lock, NULL);
	pthread_mutex_init(&eng.life, NULL);
	eng.cur = NULL;
	eng.nrdma = 0;
	eng.rdmas = NULL;
	eng.graveyard = NULL;
}

static void eng_init_once(void)
{
	uint64_t ms = sd_env_ms("SOFTDOCA_TIMEOUT_MS", 5000);

	if (ms < 100)
		ms = 100;
	eng.timeout_ns = ms * 1000000ull;
	pthread_atfork(NULL, NULL, eng_atfork_child);
}

uint64_t sd_eng_timeout_ns(void)
{
	pthread_once(&eng_once, eng_init_once);
	return eng.timeout_ns;
}

void sd_eng_lock(void)
{
	pthread_mutex_lock(&eng.lock);
}

void sd_eng_unlock(void)
{
	pthread_mutex_unlock(&eng.lock);
}

void sd_eng_kick(void)
{
	uint64_t one = 1;

	if (eng.cur && eng.cur->efd.fd >= 0) {
		ssize_t r = write(eng.cur->efd.fd, &one, sizeof(one));
		(void)r;
	}
}

int sd_eng_ep_add(struct sd_ep *ep, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = ep};

	if (!eng.cur)
		return -1;
	return epoll_ctl(eng.cur->epfd, EPOLL_CTL_ADD, ep->fd, &ev);
}

void sd_eng_ep_mod(struct sd_ep *ep, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = ep};

	if (eng.cur && ep->fd >= 0)
		epoll_ctl(eng.cur->epfd, EPOLL_CTL_MOD, ep->fd, &ev);
}

void sd_eng_ep_del(struct sd_ep *ep)
{
	if (eng.cur && ep->fd >= 0)
		epoll_ctl(eng.cur->epfd, EPOLL_CTL_DEL, ep->fd, NULL);
}

/* ---------------------------------------------------------------- rx */
static void iov_advance(struct iovec **iov, int *cnt, size_t n)
{
	while (n > 0 && *cnt > 0) {
		if (n >= (*iov)->iov_len) {
			n -= (*iov)->iov_len;
			(*iov)++;
			(*cnt)--;
		} else {
			(*iov)->iov_base = (uint8_t *)(*iov)->iov_base + n;
			(*iov)->iov_len -= n;
			n = 0;
		}
	}
	while (*cnt > 0 && (*iov)->iov_len == 0) {
		(*iov)++;
		(*cnt)--;
	}
}

static int frame_done(struct sd_link *l, doca_error_t *st)
{
	int rc;

	l->rx_state = SD_RX_HDR;
	rc = sd_wire_on_payload_done(l, st);
	l->rx_action = SD_RXA_NONE;
	l->rx_discard = 0;
	return rc;
}

/* Returns -1 when the link must be closed with *st. */
static int link_on_readable(struct sd_link *l, doca_error_t *st)
{
	int frames = 0;
	size_t bytes = 0;

	while (!l->dead && !l->rx_paused && frames < 256 && bytes < (8u << 20)) {
		ssize_t r;

		if (l->draining) {
			r = recv(l->ep.fd, scratch, sizeof(scratch), 0);
			if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
				*st = DOCA_ERROR_CONNECTION_RESET;
				return -1;
			}
			if (r < 0 && errno != EINTR)
				return 0;
			bytes += r > 0 ? (size_t)r : 0;
			continue;
		}
		if (l->rx_state == SD_RX_HDR) {
			r = recv(l->ep.fd, l->rx_hdr_buf + l->rx_hdr_got, SD_HDR_LEN - l->rx_hdr_got, 0);
		} else if (l->rx_discard || l->rx_iovcnt == 0) {
			size_t want = l->rx_left < sizeof(scratch) ? l->rx_left : sizeof(scratch);
			r = recv(l->ep.fd, scratch, want, 0);
		} else {
			/* never read past this frame: the destination may be larger than
			 * the payload, and the next frame may already be in the socket */
			struct iovec clip[64];
			int cnt = 0;
			size_t want = l->rx_left;

			for (int k = 0; k < l->rx_iovcnt && cnt < 64 && want; k++) {
				clip[cnt] = l->rx_iov[k];
				if (clip[cnt].iov_len > want)
					clip[cnt].iov_len = want;
				want -= clip[cnt].iov_len;
				cnt++;
			}
			r = readv(l->ep.fd, clip, cnt);
		}
		if (r == 0) {
			*st = DOCA_ERROR_CONNECTION_RESET;
			return -1;
		}
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			*st = DOCA_ERROR_CONNECTION_RESET;
			return -1;
		}
		l->last_rx_ns = sd_now_ns();
		bytes += (size_t)r;
		if (l->rx_state == SD_RX_HDR) {
			l->rx_hdr_got += (size_t)r;
			if (l->rx_hdr_got < SD_HDR_LEN)
				continue;
			l->rx_hdr_got = 0;
			frames++;
			if (sd_hdr_decode(l->rx_hdr_buf, &l->rx) != 0) {
				SD_WARN("rdma: malformed frame header, closing link");
				*st = DOCA_ERROR_CONNECTION_RESET;
				return -1;
			}
			if (sd_wire_on_header(l, st) != 0)
				return -1;
			l->rx_left = l->rx.payload_len;
			if (l->rx_left == 0) {
				if (frame_done(l, st) != 0)
					return -1;
			} else {
				l->rx_state = SD_RX_PAYLOAD;
			}
		} else {
			l->rx_left -= (size_t)r;
			if (!l->rx_discard && l->rx_iovcnt)
				iov_advance(&l->rx_iov, &l->rx_iovcnt, (size_t)r);
			if (l->rx_left == 0 && frame_done(l, st) != 0)
				return -1;
		}
	}
	return 0;
}

static void link_on_event(struct sd_link *l, uint32_t events)
{
	doca_error_t st = DOCA_ERROR_CONNECTION_RESET;

	if (l->dead)
		return;
	if (l->connecting) {
		int err = 0;
		socklen_t el = sizeof(err);

		if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		if (getsockopt(l->ep.fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
			err = errno;
		if (err == 0 && (events & (EPOLLERR | EPOLLHUP)))
			err = ECONNREFUSED;
		l->connecting = 0;
		sd_conn_on_connected(l, err);
		if (!l->dead)
			sd_link_flush(l);
		return;
	}
	if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
		if (link_on_readable(l, &st) != 0) {
			sd_link_close(l, st);
			return;
		}
		if (!l->dead && l->rx_paused && (events & (EPOLLERR | EPOLLHUP)) && !(events & EPOLLIN)) {
			sd_link_close(l, DOCA_ERROR_CONNECTION_RESET);
			return;
		}
	}
	if (!l->dead && l->txq_head) {
		if (sd_link_flush_rc(l) != 0) {
			sd_link_close(l, DOCA_ERROR_CONNECTION_RESET);
			return;
		}
		if (!l->txq_head && l->close_after_flush)
			shutdown(l->ep.fd, SHUT_WR);
	}
}

/* ---------------------------------------------------------------- timers */
static uint64_t min_dl(uint64_t a, uint64_t b)
{
	if (!a)
		return b;
	if (!b)
		return a;
	return a < b ? a : b;
}

static uint64_t link_timers(struct sd_link *l, uint64_t now)
{
	uint64_t T = eng.timeout_ns, next = 0;

	if (l->dead)
		return 0;
	if (l->deadline_ns) {
		if (now >= l->deadline_ns) {
			SD_DBG("rdma: link handshake / drain deadline passed");
			sd_link_set_why(l, "handshake / drain deadline passed");
			sd_link_close(l, DOCA_ERROR_CONNECTION_RESET);
			return 0;
		}
		next = l->deadline_ns;
	}
	if (l->parked) {
		if (now >= l->park_deadline_ns) {
			sd_wire_park_expired(l);
			return l->dead ? 0 : now + 1000000;
		}
		if (now >= l->park_nak_ns) {
			struct sd_hdr h = {.opcode = SD_OP_RNR_WAIT};
			sd_link_send_ctrl(l, &h, NULL, 0);
			sd_link_flush(l);
			l->park_nak_ns = now + T / 4;
		}
		next = min_dl(next, min_dl(l->park_deadline_ns, l->park_nak_ns));
	} else if (l->conn && l->conn->state == SDC_ESTABLISHED && (l->out_head || l->txq_head)) {
		/* alive: the peer sent something, or took more of our data */
		uint64_t alive = l->last_rx_ns > l->last_tx_ns ? l->last_rx_ns : l->last_tx_ns;
		uint64_t ping_due = (alive > l->last_ping_ns ? alive : l->last_ping_ns) + T / 4;

		if (now - alive >= T) {
			SD_WARN("rdma: peer silent for %llu ms with work outstanding, declaring it dead",
				(unsigned long long)(T / 1000000));
			sd_link_set_why(l, "the peer was silent for %llu ms with work outstanding (SOFTDOCA_TIMEOUT_MS)",
					(unsigned long long)(T / 1000000));
			sd_link_close(l, DOCA_ERROR_CONNECTION_RESET);
			return 0;
		}
		if (now >= ping_due) {
			struct sd_hdr h = {.opcode = SD_OP_PING};
			sd_link_send_ctrl(l, &h, NULL, 0);
			sd_link_flush(l);
			l->last_ping_ns = now;
			ping_due = now + T / 4;
		}
		next = min_dl(next, min_dl(alive + T, ping_due));
	}
	return next;
}

static uint64_t eng_timers(uint64_t now)
{
	uint64_t next = 0;

	for (struct doca_rdma *r = eng.rdmas; r; r = r->eng_next) {
		struct sd_link *l, *nx;

		for (l = r->links; l; l = nx) {
			nx = l->next;
			next = min_dl(next, link_timers(l, now));
			/* Application threads queue work without waking the engine:
			 * while links exist, look at them at least every T/4. */
			if (!l->dead)
				next = min_dl(next, now + eng.timeout_ns / 4);
		}
		next = min_dl(next, sd_conn_check_deadlines(r, now));
		for (struct sd_listener *ls = r->listeners; ls; ls = ls->next) {
			if (ls->retry_ns && now >= ls->retry_ns) {
				ls->retry_ns = 0;
				sd_eng_ep_mod(&ls->ep, EPOLLIN);
			}
			next = min_dl(next, ls->retry_ns);
		}
	}
	return next;
}

/* ---------------------------------------------------------------- thread */
void sd_eng_bury(struct sd_link *l)
{
	l->next = eng.graveyard;
	eng.graveyard = l;
}

static void eng_free_graveyard(void)
{
	while (eng.graveyard) {
		struct sd_link *l = eng.graveyard;
		eng.graveyard = l->next;
		free(l->park_buf);
		SD_LIVE_DEC(SD_LIVE_LINK);
		free(l);
	}
}

static void *eng_main(void *arg)
{
	struct sd_engthr *et = arg;
	struct epoll_event evs[64];
	int timeout = -1;

	for (;;) {
		int n = epoll_wait(et->epfd, evs, 64, timeout);
		uint64_t now, next;

		pthread_mutex_lock(&eng.lock);
		if (et->stop) {
			pthread_mutex_unlock(&eng.lock);
			break;
		}
		for (int i = 0; i < n; i++) {
			struct sd_ep *ep = evs[i].data.ptr;

			if (ep->kind == SD_EP_EVENTFD) {
				uint64_t v;
				ssize_t r = read(ep->fd, &v, sizeof(v));
				(void)r;
			} else if (ep->kind == SD_EP_LISTENER) {
				sd_listener_on_accept((struct sd_listener *)ep);
			} else if (ep->kind == SD_EP_LINK) {
				link_on_event((struct sd_link *)ep, evs[i].events);
			}
		}
		for (struct doca_rdma *r = eng.rdmas; r; r = r->eng_next)
			if (r->nparked && r->rq_head)
				sd_wire_deliver_parked(r);
		now = sd_now_ns();
		next = eng_timers(now);
		eng_free_graveyard();
		pthread_mutex_unlock(&eng.lock);
		if (!next) {
			timeout = -1;
		} else {
			now = sd_now_ns();
			timeout = next <= now ? 0 : (int)((next - now + 999999) / 1000000);
			if (timeout > 60000)
				timeout = 60000;
		}
	}
	return NULL;
}

doca_error_t sd_eng_attach(struct doca_rdma *rdma)
{
	doca_error_t rc = DOCA_SUCCESS;

	pthread_once(&eng_once, eng_init_once);
	pthread_mutex_lock(&eng.life);
	pthread_mutex_lock(&eng.lock);
	if (!eng.cur) {
		struct sd_engthr *et = calloc(1, sizeof(*et));
		struct epoll_event ev;
		sigset_t all, old;

		if (!et) {
			rc = DOCA_ERROR_NO_MEMORY;
			goto out;
		}
		et->epfd = epoll_create1(EPOLL_CLOEXEC);
		et->efd.kind = SD_EP_EVENTFD;
		et->efd.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		ev.events = EPOLLIN;
		ev.data.ptr = &et->efd;
		if (et->epfd < 0 || et->efd.fd < 0 || epoll_ctl(et->epfd, EPOLL_CTL_ADD, et->efd.fd, &ev) != 0) {
			if (et->epfd >= 0)
				close(et->epfd);
			if (et->efd.fd >= 0)
				close(et->efd.fd);
			free(et);
			rc = DOCA_ERROR_OPERATING_SYSTEM;
			goto out;
		}
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		if (pthread_create(&et->thr, NULL, eng_main, et) != 0) {
			pthread_sigmask(SIG_SETMASK, &old, NULL);
			close(et->epfd);
			close(et->efd.fd);
			free(et);
			rc = DOCA_ERROR_OPERATING_SYSTEM;
			goto out;
		}
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		eng.cur = et;
	}
	rdma->running = 1;
	rdma->eng_next = eng.rdmas;
	eng.rdmas = rdma;
out:
	pthread_mutex_unlock(&eng.lock);
	pthread_mutex_unlock(&eng.life);
	return rc;
}

void sd_eng_detach_locked(struct doca_rdma *rdma, doca_error_t status)
{
	struct doca_rdma **pp;

	while (rdma->links)
		sd_link_close(rdma->links, status);
	for (struct doca_rdma_connection *c = rdma->conns; c; c = c->next)
		if (c->state != SDC_CLOSED)
			sd_conn_on_link_closed(c, status, 0);
	while (rdma->listeners)
		sd_listener_close(rdma->listeners);
	while (rdma->rq_head) {
		struct sd_rtask *t = rdma->rq_head;
		rdma->rq_head = t->qnext;
		sd_rtask_complete(t, status);
	}
	rdma->rq_tail = NULL;
	if (rdma->running) {
		for (pp = &eng.rdmas; *pp; pp = &(*pp)->eng_next) {
			if (*pp == rdma) {
				*pp = rdma->eng_next;
				break;
			}
		}
	}
	rdma->running = 0;
}

void sd_eng_rdma_created(void)
{
	pthread_once(&eng_once, eng_init_once);
	pthread_mutex_lock(&eng.lock);
	eng.nrdma++;
	pthread_mutex_unlock(&eng.lock);
}

void sd_eng_rdma_destroyed(void)
{
	struct sd_engthr *et = NULL;

	pthread_mutex_lock(&eng.life);
	pthread_mutex_lock(&eng.lock);
	if (eng.nrdma > 0)
		eng.nrdma--;
	if (eng.nrdma == 0 && eng.cur) {
		et = eng.cur;
		et->stop = 1;
		sd_eng_kick();
	}
	pthread_mutex_unlock(&eng.lock);
	if (et) {
		pthread_join(et->thr, NULL);
		pthread_mutex_lock(&eng.lock);
		eng_free_graveyard();
		eng.cur = NULL;
		pthread_mutex_unlock(&eng.lock);
		close(et->epfd);
		close(et->efd.fd);
		free(et);
	}
	pthread_mutex_unlock(&eng.life);
}
