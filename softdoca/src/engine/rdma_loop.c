/*
 * softdoca RDMA engine thread: the "NIC". One thread per process runs an
 * epoll loop over non-blocking TCP sockets (links between engines), the
 * listeners of the started rdma contexts and the eventfd that application
 * threads use to wake it (rdma_engine.c). It serves incoming one-sided
 * operations straight into / out of registered memory, so they complete
 * without the target progressing.
 *
 * It calls the layers below it (frames, links, rx framing, same-host
 * transport, engine services) and reaches the connection layer only through
 * the handlers that one registers: a link's sd_link_ops, a listener's
 * sd_ep.on_event, a context's sd_rdma_ops (its group's eng_ops). It knows
 * contexts only as groups of links (struct sd_link_group).
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
#define _GNU_SOURCE
#include "rdma.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

struct sd_engthr {
	pthread_t thr;
	int stop;
};

static struct {
	pthread_mutex_t life;        /* serialises engine start / join */
	struct sd_engthr *cur;       /* engine lock */
	int nrdma;                   /* engine lock */
	struct sd_link_group *groups; /* the groups of started contexts (engine lock) */
	uint64_t sleep_until;        /* engine lock: when the engine thread wakes at the latest (see loop_main) */
	_Atomic uint64_t app_polled_ns; /* an application thread last progressed the provider (sd_eng_poll); 0: it sleeps */
	atomic_int unwatched;        /* the engine left the provider's fd to that thread (sd_eng_hook_watch(0)) */
	atomic_ulong prov_progress_n; /* the engine thread's progress calls of a provider (softdoca_debug_counter) */
	_Atomic uint64_t app_slept_ns; /* an application thread last went to sleep on a pe (sd_eng_app_sleeps) */
} loop = {
	.life = PTHREAD_MUTEX_INITIALIZER,
};

static pthread_once_t loop_once = PTHREAD_ONCE_INIT;

static void loop_atfork_child(void)
{
	/* The parent's engine thread does not exist here: forget it; contexts
	 * inherited from the parent are unusable. */
	pthread_mutex_init(&loop.life, NULL);
	loop.cur = NULL;
	loop.nrdma = 0;
	loop.groups = NULL;
	loop.sleep_until = 0;
	atomic_store(&loop.app_polled_ns, 0);
	atomic_store(&loop.unwatched, 0);
	atomic_store(&loop.app_slept_ns, 0);
}

static void loop_init_once(void)
{
	(void)sd_eng_timeout_ns(); /* the engine services' own fork handler first */
	pthread_atfork(NULL, NULL, loop_atfork_child);
}

/* ---------------------------------------------------------------- link events */
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
		l->ops->on_connected(l, err);
		if (!l->dead)
			sd_link_flush(l);
		return;
	}
	if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
		if (sd_rx_read(l, &st) != 0) {
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

/* A link's input read by an application thread: the engine thread sleeps
 * with a timeout computed from the timers it knew; if reading parked the
 * link (RNR) or set a deadline, it must recompute it now. */
static void link_on_event_off_engine(struct sd_link *l)
{
	int parked = l->parked;
	uint64_t deadline = l->deadline_ns;

	link_on_event(l, EPOLLIN);
	if (l->parked != parked || l->deadline_ns != deadline)
		sd_eng_kick();
}

/* Inline progress: doca_pe_progress of a context with tasks in flight
 * reads the responses waiting on its links itself (non-blocking, only if
 * the engine lock is free), so a polling application sees its completion
 * without waiting for the engine thread to be scheduled. */
void sd_eng_poll(struct sd_link_group *g)
{
	if (sd_eng_trylock() != 0)
		return;
	if (g->running) {
		const struct sd_eng_hook *hook = sd_eng_get_hook();

		for (struct sd_link *l = g->links, *nx; l; l = nx) {
			nx = l->next;
			if (l->out_head && !l->dead && !l->connecting && !l->rx_paused)
				link_on_event_off_engine(l);
		}
		/* a provider's completions too (SOFTDOCA_PROVIDER): the engine thread
		 * sleeps on its fd, armed, and wakes for what is left; while this
		 * goes on it leaves the fd to this thread (loop_main: APP_POLL_NS) */
		if (hook) {
			hook->progress();
			atomic_store_explicit(&loop.app_polled_ns, sd_now_ns(), memory_order_relaxed);
		}
	}
	sd_eng_unlock();
}

int sd_eng_app_polls(void)
{
	return atomic_load(&loop.unwatched);
}

void sd_eng_app_sleeps(void)
{
	atomic_store_explicit(&loop.app_slept_ns, sd_now_ns(), memory_order_relaxed);
	if (!atomic_load_explicit(&loop.app_polled_ns, memory_order_relaxed))
		return;
	atomic_store(&loop.app_polled_ns, 0);
	if (atomic_load(&loop.unwatched))
		sd_eng_kick(); /* it watches the fd again before it sleeps */
}

/* A thread waiting on rdma's pe was woken by these links' input (their
 * serials): read it now, on that thread. The engine lock is taken blocking: a
 * waiter woken instead of the engine must not leave the input to it. */
void sd_eng_service(struct sd_link_group *g, const uint64_t *tags, int ntags)
{
	sd_eng_lock();
	if (g->running) {
		for (struct sd_link *l = g->links, *nx; l; l = nx) {
			nx = l->next;
			for (int i = 0; i < ntags; i++) {
				if (l->serial != tags[i])
					continue;
				if (!l->dead && !l->connecting && !l->rx_paused)
					link_on_event_off_engine(l);
				break;
			}
		}
	}
	sd_eng_unlock();
}

/* ---------------------------------------------------------------- timers */
static uint64_t link_timers(struct sd_link *l, uint64_t now, uint64_t T)
{
	uint64_t next = 0;

	if (l->dead)
		return 0;
	/* A pe waiter woken in the engine's place reads the input it was woken
	 * for (softdoca_pe_wait, doca_pe_clear_notification); should one have
	 * been woken and not read it, the engine reads every link at least
	 * every T/4 (the input stays level-triggered for the next arrival). */
	if (l->pe_watched && now >= l->sweep_ns + T / 4) {
		l->sweep_ns = now;
		if (!l->connecting && !l->rx_paused) {
			link_on_event(l, EPOLLIN);
			if (l->dead)
				return 0;
			now = sd_now_ns(); /* what it read is newer than the caller's clock */
		}
	}
	if (l->pe_watched)
		next = l->sweep_ns + T / 4;
	if (l->deadline_ns) {
		if (now >= l->deadline_ns) {
			SD_DBG("rdma: link handshake / drain deadline passed");
			sd_link_set_why(l, "handshake / drain deadline passed");
			sd_link_close(l, DOCA_ERROR_CONNECTION_RESET);
			return 0;
		}
		next = sd_min_deadline(next, l->deadline_ns); /* the sweep's time may come first */
	}
	if (l->parked) {
		if (now >= l->park_deadline_ns) {
			sd_frames_park_expired(l);
			return l->dead ? 0 : now + 1000000;
		}
		if (now >= l->park_nak_ns) {
			struct sd_hdr h = {.opcode = SD_OP_RNR_WAIT};
			sd_link_send_ctrl(l, &h, NULL, 0);
			sd_link_flush(l);
			l->park_nak_ns = now + T / 4;
		}
		next = sd_min_deadline(next, sd_min_deadline(l->park_deadline_ns, l->park_nak_ns));
	} else if ((l->out_head || l->txq_head || l->awaited || l->rx_state == SD_RX_PAYLOAD) &&
		   l->ops->established(l)) {
		/* (mid-payload the peer owes us the rest of a frame: a sender that stops there would hold what
		 * the payload goes into, a posted receive or a park, for ever) */
		/* alive: the peer sent something, or took more of our data */
		uint64_t alive = l->last_rx_ns > l->last_tx_ns ? l->last_rx_ns : l->last_tx_ns;
		uint64_t ping_due = (alive > l->last_ping_ns ? alive : l->last_ping_ns) + T / 4;

		if (now > alive && now - alive >= T) {
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
		next = sd_min_deadline(next, sd_min_deadline(alive + T, ping_due));
	}
	return next;
}

static uint64_t loop_timers(uint64_t now)
{
	uint64_t next = 0, T = sd_eng_timeout_ns();

	for (struct sd_link_group *g = loop.groups; g; g = g->eng_next) {
		struct sd_link *l, *nx;

		for (l = g->links; l; l = nx) {
			nx = l->next;
			next = sd_min_deadline(next, link_timers(l, now, T));
			/* Application threads queue work without waking the engine:
			 * while links exist, look at them at least every T/4. */
			if (!l->dead)
				next = sd_min_deadline(next, now + T / 4);
		}
		if (g->eng_ops)
			next = sd_min_deadline(next, g->eng_ops->timers(g, now));
	}
	return next;
}

/* ---------------------------------------------------------------- thread */
/* Adaptive spinning: after a turn that handled events the engine polls
 * (epoll_wait without sleeping) for up to SOFTDOCA_SPIN_US microseconds
 * before it sleeps, so a request arriving soon after the last one is
 * served without a thread wake-up. 0 disables it. On a polled provider
 * (nothing wakes the engine for what peers post, and its progress serves
 * their one-sided operations without reporting them) no turn can be told
 * from an idle one: with SOFTDOCA_SPIN_US the engine then polls for as
 * long as it runs (an RDMA context is started). */
uint64_t sd_eng_spin_ns(void)
{
	static uint64_t v = UINT64_MAX; /* read from the engine and the submitting threads: atomics */
	uint64_t x = __atomic_load_n(&v, __ATOMIC_RELAXED);

	if (x == UINT64_MAX) {
		const char *e = getenv("SOFTDOCA_SPIN_US");
		uint64_t us = e && *e ? strtoull(e, NULL, 10) : SD_SPIN_US_DEFAULT;

		if (us > 100000)
			us = 100000;
		x = us * 1000ull;
		__atomic_store_n(&v, x, __ATOMIC_RELAXED);
	}
	return x;
}

/* The serving spin (SOFTDOCA_SERVE_SPIN_US, default SD_SERVE_SPIN_US_DEFAULT;
 * with a provider open). Over a provider's tcp or shared memory a peer's
 * one-sided operation needs this process's engine thread, the NIC of the
 * process: a sleeping engine costs every such operation a thread wake-up
 * (20-60 us on a small VM, more than the operation). After a turn that served
 * a peer the engine polls for up to this long before it sleeps. Served: woken
 * by input (or finding some) while none of this process's own provider
 * operations is outstanding, nor ended within twice the window (their tail of
 * acknowledgements and the fabric's own traffic: an initiator does not spin
 * on its completions). Adaptive: the window is renewed while served turns
 * come within twice it of each other and halves after each one that came
 * later, so an engine serving sparse traffic sleeps at once and an idle one
 * never spins. 0 disables it. */
static uint64_t loop_serve_spin_ns(void)
{
	static uint64_t v = UINT64_MAX; /* engine thread only */

	if (v == UINT64_MAX) {
		const char *e = getenv("SOFTDOCA_SERVE_SPIN_US");
		uint64_t us = e && *e ? strtoull(e, NULL, 10) : SD_SERVE_SPIN_US_DEFAULT;

		v = (us > 100000 ? 100000 : us) * 1000ull;
	}
	return v;
}

/* A turn that served a peer at now: how long to poll after it. */
static uint64_t loop_serve_window(uint64_t now)
{
	static uint64_t cur, last; /* engine thread only */
	uint64_t max = loop_serve_spin_ns();

	if (!max)
		return 0;
	/* twice the window: an engine that slept through the gap made the peer's
	 * cycle longer by its own wake-up (without this slack a stream a little
	 * slower than the window keeps the engine asleep for good) */
	if (last && now - last <= 2 * max)
		cur = max;
	else
		cur /= 2; /* it came later: spinning for it was waste */
	last = now;
	return cur;
}

/* How long a stopping engine lets a provider's closed connections flush:
 * the engine timeout, at most 2 s (a peer that went silent costs no more). */
static uint64_t loop_drain_ns(void)
{
	uint64_t t = sd_eng_timeout_ns();

	return t < 2000000000ull ? t : 2000000000ull;
}

/* The longest the engine sleeps while a provider is open: an operation
 * submitted with a deadline further away than this needs no wake-up. */
#define LOOP_PROV_SLEEP_MS 1000
/* How long after an application thread last progressed the provider the
 * engine leaves it to that thread (the provider's completions do not wake
 * the engine meanwhile; anything the application stops collecting is the
 * engine's again at most this much later). */
#define APP_POLL_NS 1000000ull
/* Only an application that has not slept on a pe for this long counts as
 * polling: one that alternates (a blocking wait after a short spin) keeps
 * the fd with the engine, which its completions wake anyway. */
#define APP_SLEPT_NS 10000000ull
/* Timed-out turns in a row the engine leaves to such a thread when it holds
 * the engine lock: timers are then late by at most this many milliseconds. */
#define LOOP_YIELD_TURNS 8

/* An application thread progresses the provider itself (sd_eng_poll) and has
 * not slept on a pe lately: one that also sleeps on its pe keeps the fd with
 * the engine (a hand-back per wait). */
static int app_polls_now(uint64_t now)
{
	uint64_t polled = atomic_load(&loop.app_polled_ns);
	uint64_t slept = atomic_load_explicit(&loop.app_slept_ns, memory_order_relaxed);

	return polled && polled + APP_POLL_NS > now && !(slept && slept + APP_SLEPT_NS > now);
}

static void *loop_main(void *arg)
{
	struct sd_engthr *et = arg;
	struct epoll_event evs[64];
	int timeout = -1, busy, unarmed = 0; /* unarmed: the provider's last turn skipped its arm */
	int yielded = 0;                      /* turns left to a polling application in a row */
	uint64_t spin_until = 0, spin = sd_eng_spin_ns(), drain_until = 0;
	const struct sd_eng_hook *hook;

	pthread_setname_np(pthread_self(), "softdoca-engine"); /* ps -L, /proc/<pid>/task/<tid>/comm */
	for (;;) {
		int n = sd_eng_ep_wait(evs, 64, timeout);
		int nhook = 0; /* events of the provider's fd (its input: not a kick, not the native links) */
		uint64_t now, next, app_until, idle_since;

		/* a sleep that timed out while an application thread polls: that thread holds
		 * the lock often, and a blocking take here would stall it (a futex wait
		 * and wake per millisecond); this turn's timers wait for the next,
		 * at most LOOP_YIELD_TURNS in a row */
		if (n == 0 && timeout > 0 && yielded < LOOP_YIELD_TURNS && atomic_load(&loop.unwatched) &&
		    app_polls_now(sd_now_ns())) {
			if (sd_eng_trylock() != 0) {
				yielded++;
				timeout = 1;
				continue;
			}
		} else {
			sd_eng_lock();
		}
		yielded = 0;
		hook = sd_eng_get_hook();
		/* before anything of ours completes below */
		idle_since = hook && hook->idle_since ? hook->idle_since() : 0;
		if (et->stop) {
			/* a provider's closed connections finish flushing first, bounded */
			if (!drain_until)
				drain_until = sd_now_ns() + loop_drain_ns();
			if (hook && hook->live)
				hook->live(0, 0); /* no promise: the thread ends */
			if (hook && hook->drain && sd_now_ns() < drain_until && hook->drain()) {
				loop.sleep_until = sd_now_ns() + 1000000ull;
				sd_eng_unlock();
				timeout = 1;
				continue;
			}
			sd_eng_unlock();
			break;
		}
		for (int i = 0; i < n; i++) {
			struct sd_ep *ep = evs[i].data.ptr;

			if (sd_eng_is_hook_ep(ep))
				nhook++;
			if (ep->kind == SD_EP_EVENTFD) {
				uint64_t v;
				ssize_t r = read(ep->fd, &v, sizeof(v));
				(void)r;
			} else if (ep->kind == SD_EP_LINK) {
				link_on_event((struct sd_link *)ep, evs[i].events);
			} else if (ep->kind == SD_EP_LINK_OUT) {
				link_on_event((struct sd_link *)((char *)ep - offsetof(struct sd_link, wep)),
					      evs[i].events);
			} else {
				ep->on_event(ep, evs[i].events);
			}
		}
		for (struct sd_link_group *g = loop.groups; g; g = g->eng_next) {
			if (g->nparked && g->eng_ops)
				g->eng_ops->deliver_parked(g);
			for (struct sd_link *l = g->links, *nx; l; l = nx) {
				nx = l->next;
				if (l->rx_kick)
					link_on_event(l, EPOLLIN);
			}
		}
		now = sd_now_ns();
		next = loop_timers(now);
		sd_link_free_closed();
		hook = sd_eng_get_hook();
		busy = 0;
		app_until = 0;
		if (hook) { /* a provider (SOFTDOCA_PROVIDER): progress it, arm its fd before sleeping */
			int ms = -1, pn = hook->progress();

			atomic_fetch_add_explicit(&loop.prov_progress_n, 1, memory_order_relaxed);
			if (unarmed) { /* not armed since: its fd's readiness is stale, progress counts the input */
				n -= nhook;
				nhook = 0;
			}
			if (pn > 0 || (spin && hook->polled && hook->polled()))
				n = n > 0 ? n : 1;
			/* a provider whose progress counts what it served (SD_PROV_CAP_SPIN_UNARMED)
			 * is armed (progressed once more, its wake-up set) only on a turn that
			 * may sleep: a spinning turn looks again at once, and an arm costs system
			 * calls and makes peers signal (UCX on shared memory: an eventfd read and
			 * a socket drain here, a datagram from the next sender) */
			unarmed = hook->spin_unarmed && hook->spin_unarmed() &&
				  ((n > 0 && spin) || (spin_until && now < spin_until));
			if (!unarmed) {
				if (hook->arm(&ms))
					busy = 1;
				else if (ms >= 0)
					next = sd_min_deadline(next, now + (uint64_t)ms * 1000000ull);
			}
			/* served a peer: input, progress, or input pending at the arm (a
			 * provider whose progress serves a peer's one-sided operation
			 * reports no completion for it) */
			/* not on a polled provider: no turn can be told from an idle one there,
			 * and its progress holds shm's queue lock (ofi_shmlock.c) */
			if (idle_since && now - idle_since > 2 * loop_serve_spin_ns() && (nhook || pn > 0 || busy) &&
			    !(hook->polled && hook->polled())) {
				uint64_t w = loop_serve_window(now);

				if (w && now + w > spin_until)
					spin_until = now + w;
			}
			/* an application thread polls the provider (sd_eng_poll): its fd
			 * stays out of the set while it does, and the engine looks again
			 * APP_POLL_NS after the last such poll, watching it from then on */
			uint64_t polled = atomic_load(&loop.app_polled_ns);
			int app_polls = app_polls_now(now);

			if (app_polls) {
				sd_eng_hook_watch(0);
				atomic_store(&loop.unwatched, 1);
				/* the thread may have gone to sleep meanwhile (sd_eng_app_sleeps):
				 * it saw unwatched and kicked, or this sees its 0 */
				polled = atomic_load(&loop.app_polled_ns);
				app_polls = polled != 0;
				if (app_polls) {
					next = sd_min_deadline(next, polled + APP_POLL_NS);
					app_until = polled + APP_POLL_NS;
				}
			}
			if (!app_polls) {
				sd_eng_hook_watch(1);
				atomic_store(&loop.unwatched, 0);
			}
		}
		if (busy) {
			timeout = 0;
		} else {
			if (n > 0 && spin && now + spin > spin_until)
				spin_until = now + spin; /* never shorter than a serving window published */
			if (spin_until && now < spin_until) {
				timeout = 0;
			} else {
				spin_until = 0;
				/* with a provider open the sleep is bounded (LOOP_PROV_SLEEP_MS): a
				 * submit then needs no wake-up for its operation's deadline (see
				 * sd_eng_sleep_until_ns) */
				if (hook && (!next || next > now + LOOP_PROV_SLEEP_MS * 1000000ull))
					next = now + LOOP_PROV_SLEEP_MS * 1000000ull;
				if (!next) {
					timeout = -1;
				} else {
					now = sd_now_ns();
					timeout = next <= now ? 0 : (int)((next - now + 999999) / 1000000);
					if (timeout > 60000)
						timeout = 60000;
				}
			}
		}
		if (hook && hook->live) {
			/* a spinning turn: the next ones progress the provider, the last
			 * of them after spin_until (it samples the time, then progresses) */
			uint64_t serve = spin_until && timeout == 0 ? spin_until : 0;
			/* while the application polls, this thread publishes again at its next
			 * turn, which the millisecond sleep puts up to APP_POLL_NS past
			 * app_until: the promise covers that (a promise gap made every
			 * operation in it ring) */
			uint64_t self = app_until ? app_until + APP_POLL_NS : 0;

			hook->live(serve, serve > self ? serve : self);
		}
		/* published under the lock: a submitter holding it knows when this
		 * thread looks again without waking it (0 is never used: "now") */
		loop.sleep_until = timeout < 0 ? UINT64_MAX : sd_now_ns() + (uint64_t)timeout * 1000000ull;
		sd_eng_unlock();
		/* spinning: threads of this process waiting for the lock get it first
		 * (the mutex is not fair; a spinning engine would take it back at once) */
		for (int i = 0; timeout == 0 && spin_until && i < 64 && sd_eng_lock_waiters(); i++)
			sched_yield();
	}
	return NULL;
}

unsigned long sd_eng_prov_progress_calls(void)
{
	return atomic_load_explicit(&loop.prov_progress_n, memory_order_relaxed);
}

struct sd_link_group *sd_eng_groups(void)
{
	return loop.groups;
}

uint64_t sd_eng_sleep_until_ns(void)
{
	return loop.cur ? loop.sleep_until : 0;
}

doca_error_t sd_eng_attach(struct sd_link_group *g)
{
	doca_error_t rc = DOCA_SUCCESS;

	pthread_once(&loop_once, loop_init_once);
	pthread_mutex_lock(&loop.life);
	sd_eng_lock();
	if (!loop.cur) {
		struct sd_engthr *et = calloc(1, sizeof(*et));
		sigset_t all, old;

		if (!et) {
			rc = DOCA_ERROR_NO_MEMORY;
			goto out;
		}
		if (sd_eng_ep_open() != 0) {
			free(et);
			rc = DOCA_ERROR_OPERATING_SYSTEM;
			goto out;
		}
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		if (pthread_create(&et->thr, NULL, loop_main, et) != 0) {
			pthread_sigmask(SIG_SETMASK, &old, NULL);
			sd_eng_ep_close();
			free(et);
			rc = DOCA_ERROR_OPERATING_SYSTEM;
			goto out;
		}
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		loop.cur = et;
		loop.sleep_until = UINT64_MAX; /* its first wait has no limit */
	}
	g->running = 1;
	g->eng_next = loop.groups;
	loop.groups = g;
out:
	sd_eng_unlock();
	pthread_mutex_unlock(&loop.life);
	return rc;
}

void sd_eng_detach_locked(struct sd_link_group *g, doca_error_t status)
{
	struct sd_link_group **pp;

	while (g->links)
		sd_link_close(g->links, status);
	if (g->eng_ops)
		g->eng_ops->detach(g, status);
	if (g->running) {
		for (pp = &loop.groups; *pp; pp = &(*pp)->eng_next) {
			if (*pp == g) {
				*pp = g->eng_next;
				break;
			}
		}
	}
	g->running = 0;
}

void sd_eng_rdma_created(void)
{
	pthread_once(&loop_once, loop_init_once);
	sd_eng_lock();
	loop.nrdma++;
	sd_eng_unlock();
}

void sd_eng_rdma_destroyed(void)
{
	struct sd_engthr *et = NULL;

	pthread_mutex_lock(&loop.life);
	sd_eng_lock();
	if (loop.nrdma > 0)
		loop.nrdma--;
	if (loop.nrdma == 0 && loop.cur) {
		et = loop.cur;
		et->stop = 1;
		sd_eng_kick();
	}
	sd_eng_unlock();
	if (et) {
		pthread_join(et->thr, NULL);
		sd_eng_lock();
		sd_link_free_closed();
		sd_eng_ep_close();
		loop.cur = NULL;
		sd_eng_unlock();
		free(et);
	}
	pthread_mutex_unlock(&loop.life);
}
