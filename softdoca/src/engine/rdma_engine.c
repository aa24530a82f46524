/*
 * softdoca RDMA engine services: the lowest RDMA layer. The links, the rx
 * framing, the engine thread (rdma_loop.c) and everything above use them;
 * they call nothing of those layers.
 *
 *   - the engine lock, and the completion batch it carries: task completions
 *     made under it reach their progress engines in one batch when it is
 *     released (the task-completion hand-off);
 *   - the engine's epoll set and the eventfd that wakes the engine thread
 *     (sd_eng_kick); other modules register their sockets in it;
 *   - the engine timeout (SOFTDOCA_TIMEOUT_MS);
 *   - the live-object counters.
 *
 * After fork() the child forgets the parent's epoll set (pthread_atfork): it
 * opens its own with its own engine thread when needed.
 */
#include "rdma.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

atomic_long sd_live[SD_LIVE_NUM];

static struct {
	pthread_mutex_t lock;
	int epfd;            /* -1: no engine thread */
	struct sd_ep efd;    /* wakes the engine thread */
	uint64_t timeout_ns;
	atomic_int waiters;  /* threads blocked in sd_eng_lock (a spinning engine lets them in) */
} eng = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.epfd = -1,
	.efd = {.kind = SD_EP_EVENTFD, .fd = -1},
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

static void eng_atfork_child(void)
{
	/* The parent's engine thread does not exist here: forget its epoll set
	 * (its fds stay open in the child; closing the copies is not needed). */
	pthread_mutex_init(&eng.lock, NULL);
	eng.epfd = -1;
	eng.efd.fd = -1;
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
	if (pthread_mutex_trylock(&eng.lock) != 0) {
		atomic_fetch_add_explicit(&eng.waiters, 1, memory_order_relaxed);
		pthread_mutex_lock(&eng.lock);
		atomic_fetch_sub_explicit(&eng.waiters, 1, memory_order_relaxed);
	}
	eng_held = 1;
}

int sd_eng_lock_waiters(void)
{
	return atomic_load_explicit(&eng.waiters, memory_order_relaxed);
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

/* provider hook (sd_eng_set_hook): engine lock */
static const struct sd_eng_hook *eng_hook;
static struct sd_ep *eng_hook_ep;
static int eng_hook_added;
static int eng_hook_watched;   /* its fd's events are EPOLLIN (else 0: see sd_eng_hook_watch) */

/* ---------------------------------------------------------------- epoll set */
int sd_eng_ep_open(void)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &eng.efd};

	pthread_once(&eng_once, eng_init_once);
	eng.epfd = epoll_create1(EPOLL_CLOEXEC);
	eng.efd.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (eng.epfd < 0 || eng.efd.fd < 0 || epoll_ctl(eng.epfd, EPOLL_CTL_ADD, eng.efd.fd, &ev) != 0) {
		sd_eng_ep_close();
		return -1;
	}
	return 0;
}

void sd_eng_ep_close(void)
{
	eng_hook_added = 0; /* the provider's fd joins the next engine's set (sd_eng_get_hook) */
	if (eng.epfd >= 0)
		close(eng.epfd);
	if (eng.efd.fd >= 0)
		close(eng.efd.fd);
	eng.epfd = -1;
	eng.efd.fd = -1;
}

/* The set is opened before the engine thread is created and closed after it
 * has been joined: the thread reads epfd without the lock. */
int sd_eng_ep_wait(struct epoll_event *evs, int max, int timeout_ms)
{
	return epoll_wait(eng.epfd, evs, max, timeout_ms);
}

int sd_eng_ep_add(struct sd_ep *ep, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = ep};

	if (eng.epfd < 0)
		return -1;
	return epoll_ctl(eng.epfd, EPOLL_CTL_ADD, ep->fd, &ev);
}

void sd_eng_ep_mod(struct sd_ep *ep, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = ep};

	if (eng.epfd >= 0 && ep->fd >= 0)
		epoll_ctl(eng.epfd, EPOLL_CTL_MOD, ep->fd, &ev);
}

void sd_eng_ep_del(struct sd_ep *ep)
{
	if (eng.epfd >= 0 && ep->fd >= 0)
		epoll_ctl(eng.epfd, EPOLL_CTL_DEL, ep->fd, NULL);
}

int sd_eng_held(void)
{
	return eng_held;
}

/* ---------------------------------------------------------------- provider hook */

void sd_eng_set_hook(const struct sd_eng_hook *hook, struct sd_ep *ep)
{
	if (eng_hook_ep && eng_hook_added)
		sd_eng_ep_del(eng_hook_ep);
	eng_hook = hook;
	eng_hook_ep = hook ? ep : NULL;
	eng_hook_added = 0;
	if (eng_hook_ep && eng.epfd >= 0 && sd_eng_ep_add(eng_hook_ep, EPOLLIN) == 0)
		eng_hook_added = eng_hook_watched = 1;
	if (hook)
		sd_eng_kick();
}

/* Whether the engine's epoll set watches the provider's fd (engine lock held):
 * while an application thread progresses the provider itself the engine
 * leaves it (rdma_loop.c: every completion would wake the engine thread only
 * to find the work done and contend for the engine lock). */
void sd_eng_hook_watch(int on)
{
	if (!eng_hook_ep || !eng_hook_added || eng.epfd < 0 || eng_hook_watched == !!on)
		return;
	sd_eng_ep_mod(eng_hook_ep, on ? EPOLLIN : 0);
	eng_hook_watched = !!on;
}

int sd_eng_is_hook_ep(const struct sd_ep *ep)
{
	return ep && ep == eng_hook_ep;
}

const struct sd_eng_hook *sd_eng_get_hook(void)
{
	if (eng_hook_ep && !eng_hook_added && eng.epfd >= 0 && sd_eng_ep_add(eng_hook_ep, EPOLLIN) == 0)
		eng_hook_added = eng_hook_watched = 1;
	return eng_hook;
}

void sd_eng_kick(void)
{
	uint64_t one = 1;

	if (eng.efd.fd >= 0) {
		ssize_t r = write(eng.efd.fd, &one, sizeof(one));
		(void)r;
	}
}
