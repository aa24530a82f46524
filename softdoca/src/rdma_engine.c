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

/* completion batch (engine lock) */
#define SD_CQ_PES 8
static _Thread_local int eng_held;
static struct {
	struct doca_pe *pe;
	struct doca_task *head, *tail;
} cqb[SD_CQ_PES];
static int ncqb;
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
	ncqb = 0;
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

/* ---------------------------------------------------------------- lock, completions */
/* Completions made while the engine lock is held are collected per progress
 * engine and handed over in one batch (one pe lock, one notification) when
 * the lock is released, or before a connection event is queued (causal
 * order: a disconnect is seen after the completions that preceded it). */

void sd_eng_flush_completions(void)
{
	if (!eng_held)
		return;
	for (int i = 0; i < ncqb; i++) {
		sd_task_complete_list(cqb[i].pe, cqb[i].head, cqb[i].tail);
		cqb[i].pe = NULL;
		cqb[i].head = cqb[i].tail = NULL;
	}
	ncqb = 0;
}

void sd_eng_complete(struct doca_task *task, doca_error_t status)
{
	struct doca_pe *pe = task->ctx ? task->ctx->pe : NULL;
	int i;

	if (!eng_held || !pe) {
		sd_task_complete(task, status);
		return;
	}
	task->status = status;
	task->cq_next = NULL;
	for (i = 0; i < ncqb && cqb[i].pe != pe; i++)
		;
	if (i == SD_CQ_PES) {
		sd_eng_flush_completions();
		i = 0;
	}
	if (i == ncqb) {
		cqb[i].pe = pe;
		cqb[i].head = cqb[i].tail = task;
		ncqb++;
	} else {
		cqb[i].tail->cq_next = task;
		cqb[i].tail = task;
	}
}

void sd_eng_lock(void)
{
	pthread_mutex_lock(&eng.lock);
	eng_held = 1;
}

int sd_eng_trylock(void)
{
	if (pthread_mutex_trylock(&eng.lock) != 0)
		return -1;
	eng_held = 1;
	return 0;
}

void sd_eng_unlock(void)
{
	if (ncqb)
		sd_eng_flush_completions();
	eng_held = 0;
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
/* Reads: one recv into the link's staging buffer (rb) brings many small
 * frames, which are parsed and copied out of it; a payload of at least
 * SD_RX_DIRECT_MIN bytes is read straight into its destination, with the
 * staging buffer as the last piece of the same readv (whatever follows the
 * frame lands there). */

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

/* Payload bytes from the staging buffer into their destination: registered
 * application memory for a write, a posted receive or a read's destination.
 * The NIC-side copy of one-sided RDMA (softdoca/tsan.supp names it). */
__attribute__((noinline)) static void sd_eng_rx_copy(struct sd_link *l, const uint8_t *p, size_t n)
{
	while (n > 0 && l->rx_iovcnt > 0) {
		size_t c = l->rx_iov->iov_len < n ? l->rx_iov->iov_len : n;

		memcpy(l->rx_iov->iov_base, p, c);
		p += c;
		n -= c;
		iov_advance(&l->rx_iov, &l->rx_iovcnt, c);
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

static int header_done(struct sd_link *l, doca_error_t *st)
{
	l->rx_hdr_got = 0;
	if (sd_hdr_decode(l->rx_hdr_buf, &l->rx) != 0) {
		SD_WARN("rdma: malformed frame header, closing link");
		*st = DOCA_ERROR_CONNECTION_RESET;
		return -1;
	}
	if (sd_wire_on_header(l, st) != 0)
		return -1;
	l->rx_left = l->rx.payload_len;
	if (l->rx_left == 0)
		return frame_done(l, st);
	l->rx_state = SD_RX_PAYLOAD;
	return 0;
}

static int rx_stop(const struct sd_link *l)
{
	return l->dead || l->rx_paused || l->draining;
}

/* Process the staged bytes (all of them unless the link pauses, dies or
 * drains). Returns -1 when the link must be closed with *st. */
static int rx_consume(struct sd_link *l, doca_error_t *st, int *frames)
{
	while (l->rb_pos < l->rb_end && !rx_stop(l)) {
		size_t avail = l->rb_end - l->rb_pos;
		const uint8_t *p = l->rb + l->rb_pos;

		if (l->rx_state == SD_RX_HDR) {
			size_t take = SD_HDR_LEN - l->rx_hdr_got;

			if (take > avail)
				take = avail;
			memcpy(l->rx_hdr_buf + l->rx_hdr_got, p, take);
			l->rb_pos += take;
			l->rx_hdr_got += take;
			if (l->rx_hdr_got < SD_HDR_LEN)
				break;
			(*frames)++;
			if (header_done(l, st) != 0)
				return -1;
		} else {
			size_t take = l->rx_left < avail ? l->rx_left : avail;

			if (!l->rx_discard && l->rx_iovcnt)
				sd_eng_rx_copy(l, p, take);
			l->rb_pos += take;
			l->rx_left -= take;
			if (l->rx_left == 0 && frame_done(l, st) != 0)
				return -1;
		}
	}
	if (l->draining)
		l->rb_pos = l->rb_end;
	if (l->rb_pos == l->rb_end)
		l->rb_pos = l->rb_end = 0;
	return 0;
}

/* Returns -1 when the link must be closed with *st. */
static int link_on_readable(struct sd_link *l, doca_error_t *st)
{
	int frames = 0;
	size_t bytes = 0;

	l->rx_kick = 0;
	while (!l->dead && !l->rx_paused) {
		ssize_t r;
		size_t direct = 0;

		if (l->draining) {
			l->rb_pos = l->rb_end = 0;
			r = recv(l->ep.fd, scratch, sizeof(scratch), 0);
			if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
				*st = DOCA_ERROR_CONNECTION_RESET;
				return -1;
			}
			if (r < 0 && errno != EINTR)
				return 0;
			bytes += r > 0 ? (size_t)r : 0;
			if (bytes >= (8u << 20))
				return 0;
			continue;
		}
		if (rx_consume(l, st, &frames) != 0)
			return -1;
		if (rx_stop(l))
			continue;
		if (frames >= 1024 || bytes >= (8u << 20))
			return 0; /* level-triggered: the rest on the next turn */
		if (l->rx_state == SD_RX_PAYLOAD && !l->rx_discard && l->rx_iovcnt && l->rx_left >= SD_RX_DIRECT_MIN) {
			/* never read past this frame into the destination: the
			 * destination may be larger than the payload; what follows
			 * lands in the staging buffer */
			struct iovec clip[65];
			int cnt = 0;
			size_t want = l->rx_left;

			for (int k = 0; k < l->rx_iovcnt && cnt < 64 && want; k++) {
				clip[cnt] = l->rx_iov[k];
				if (clip[cnt].iov_len > want)
					clip[cnt].iov_len = want;
				want -= clip[cnt].iov_len;
				direct += clip[cnt].iov_len;
				cnt++;
			}
			clip[cnt].iov_base = l->rb;
			clip[cnt].iov_len = SD_RB_CAP;
			cnt++;
			r = readv(l->ep.fd, clip, cnt);
		} else {
			r = recv(l->ep.fd, l->rb, SD_RB_CAP, 0);
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
		if (direct) {
			size_t d = (size_t)r < direct ? (size_t)r : direct;

			l->rx_left -= d;
			iov_advance(&l->rx_iov, &l->rx_iovcnt, d);
			l->rb_pos = 0;
			l->rb_end = (size_t)r - d;
			if (l->rx_left == 0 && frame_done(l, st) != 0)
				return -1;
		} else {
			l->rb_pos = 0;
			l->rb_end = (size_t)r;
		}
	}
	return 0;
}

/* Staged bytes of a link that was paused are processed by the engine once
 * it is unpaused (the socket may hold nothing more to wake it). */
void sd_link_rx_kick(struct sd_link *l)
{
	if (!l->dead && !l->rx_paused && l->rb_pos < l->rb_end) {
		l->rx_kick = 1;
		sd_eng_kick();
	}
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

/* Inline progress: doca_pe_progress of a context with tasks in flight
 * reads the responses waiting on its links itself (non-blocking, only if
 * the engine lock is free), so a polling application sees its completion
 * without waiting for the engine thread to be scheduled. */
void sd_eng_poll(struct doca_rdma *rdma)
{
	if (atomic_load_explicit(&rdma->ctx.inflight, memory_order_relaxed) == 0)
		return;
	if (sd_eng_trylock() != 0)
		return;
	if (rdma->running) {
		for (struct sd_link *l = rdma->links, *nx; l; l = nx) {
			nx = l->next;
			if (l->out_head && !l->dead && !l->connecting && !l->rx_paused)
				link_on_event(l, EPOLLIN);
		}
	}
	sd_eng_unlock();
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
		free(l->rb);
		sd_xport_peer_free(l->xpeer);
		SD_LIVE_DEC(SD_LIVE_LINK);
		free(l);
	}
}

/* Adaptive spinning: after a turn that handled events the engine polls
 * (epoll_wait without sleeping) for up to SOFTDOCA_SPIN_US microseconds
 * before it sleeps, so a request arriving soon after the last one is
 * served without a thread wake-up. 0 disables it. */
static uint64_t eng_spin_ns(void)
{
	static uint64_t v = UINT64_MAX;

	if (v == UINT64_MAX) {
		const char *e = getenv("SOFTDOCA_SPIN_US");
		uint64_t us = e && *e ? strtoull(e, NULL, 10) : SD_SPIN_US_DEFAULT;

		if (us > 100000)
			us = 100000;
		v = us * 1000ull;
	}
	return v;
}

static void *eng_main(void *arg)
{
	struct sd_engthr *et = arg;
	struct epoll_event evs[64];
	int timeout = -1;
	uint64_t spin_until = 0, spin = eng_spin_ns();

	for (;;) {
		int n = epoll_wait(et->epfd, evs, 64, timeout);
		uint64_t now, next;

		sd_eng_lock();
		if (et->stop) {
			sd_eng_unlock();
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
		for (struct doca_rdma *r = eng.rdmas; r; r = r->eng_next) {
			if (r->nparked && r->rq_head)
				sd_wire_deliver_parked(r);
			for (struct sd_link *l = r->links, *nx; l; l = nx) {
				nx = l->next;
				if (l->rx_kick)
					link_on_event(l, EPOLLIN);
			}
		}
		now = sd_now_ns();
		next = eng_timers(now);
		eng_free_graveyard();
		sd_eng_unlock();
		if (n > 0 && spin)
			spin_until = now + spin;
		if (spin_until && now < spin_until) {
			timeout = 0;
			continue;
		}
		spin_until = 0;
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
	sd_eng_lock();
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
	sd_eng_unlock();
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
	sd_eng_lock();
	eng.nrdma++;
	sd_eng_unlock();
}

void sd_eng_rdma_destroyed(void)
{
	struct sd_engthr *et = NULL;

	pthread_mutex_lock(&eng.life);
	sd_eng_lock();
	if (eng.nrdma > 0)
		eng.nrdma--;
	if (eng.nrdma == 0 && eng.cur) {
		et = eng.cur;
		et->stop = 1;
		sd_eng_kick();
	}
	sd_eng_unlock();
	if (et) {
		pthread_join(et->thr, NULL);
		sd_eng_lock();
		eng_free_graveyard();
		eng.cur = NULL;
		sd_eng_unlock();
		close(et->epfd);
		close(et->efd.fd);
		free(et);
	}
	pthread_mutex_unlock(&eng.life);
}
