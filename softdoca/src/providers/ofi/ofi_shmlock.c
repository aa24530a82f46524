/*
 * softdoca provider `ofi`: shm's queue locks held by dead processes.
 *
 * shm (libfabric 1.17 to 1.19: region format versions 4 and 5) guards each
 * endpoint's command queue with a pthread spinlock inside the endpoint's
 * shared region (struct smr_region's `lock`, 24 bytes in, after the version
 * byte at 0 and the owner's pid at 4). The owner takes it while it
 * progresses, every sender while it posts to that endpoint. A process killed
 * while it held one leaves it held for good: whoever posts there next (or,
 * for our own region, our own progress) spins inside libfabric for ever,
 * under the engine lock, past every deadline softdoca sets.
 *
 * The watch: a thread per shm instance (on those versions) maps the first
 * page of the regions that can stop this process: its own receiving
 * endpoint's (senders lock it) and each peer's receiving endpoint it posts to.
 * Every LW_TICK_MS it reads their lock words (no libfabric call, no engine
 * lock). A lock still held after a look of LW_LOOK_US, sampled every 100 us
 * (a live holder keeps it for microseconds), is released with the store
 * pthread_spin_unlock makes, on this process's mapping, when
 *  - it is a peer's region and the peer's process has exited (a pidfd taken
 *    while it was alive, so a reused pid is not mistaken for it), or
 *  - it is our own region, it has been held for LW_OWN_MS, and a peer
 *    process of ours exited after it was first seen held (the holder was a
 *    sender that died while posting; our own progress holds it across its
 *    copies, for far less than LW_OWN_MS). shm commits a command before it
 *    counts it (cmd_cnt), so a death between the two leaves the count one
 *    too high: one command slot less, nothing inconsistent.
 * Peers are watched only when the process with their pid here is theirs
 * (it maps their region: /proc/<pid>/maps), not a namesake in another pid
 * namespace.
 * The progress of the instance then fails the connections to a peer whose
 * lock it released (ofi_lockwatch_take), at once rather than at their deadline.
 * A region whose version or pid is not what was expected is never touched:
 * other libfabric versions are not watched, and the doorbell stays opt-in
 * there (ofi_provider.c, bell_open).
 */
#define _GNU_SOURCE
#include "ofi_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LW_TICK_MS 50
#define LW_LOOK_US 20000
#define LW_OWN_MS 3000
#define LW_MAX 512           /* regions watched per instance (shm keeps 256 peers at most) */
#define LW_LOCK_OFF 24       /* smr_region.lock in versions 4 and 5 */
#define LW_PID_OFF 4
#define LW_MAP_LEN 4096
#define LW_SIZE_OFF 40       /* smr_region.total_size: the region file's size */
_Static_assert(sizeof(void *) == 8, "the smr_region offsets above are those of 64-bit builds");

struct lw_region {
	struct lw_region *next;
	char name[128];          /* the shm object ("/sdofi-...") */
	uint64_t peer_uid;       /* 0: our own region */
	pid_t pid;
	int pidfd;               /* peers: exited when readable; -1: ours, or no pidfd (kill()) */
	volatile int *lock;      /* in our mapping of the region */
	void *map;
	uint64_t held_since;     /* first look that found it held (ns), 0: free */
	int exited;
	uint64_t exit_ns;        /* when the watch saw it exited */
	int released;            /* (atomic) released by the watch, not yet taken by progress */
};

/* Regions are only added (at the head, published with a release store, by the
 * provider's calls, which the caller serializes) while the thread runs, and
 * freed after it left, so it walks them without a lock. */
struct ofi_lockwatch {
	pthread_t thread;
	int stop_fd;             /* eventfd: close asks the thread to leave */
	struct lw_region *regions;
	int n;
	uint64_t peer_exit_ns;   /* when a peer's process was last seen to have exited */
	int unlocked_value;      /* a free pthread spinlock's word (glibc x86-64: 1, generic: 0) */
	int pending;             /* (atomic) some region was released and not yet taken */
};

unsigned long ofi_lockwatch_releases; /* locks released, in this process (tests read it) */
int ofi_lockwatch_instances;          /* instances with a running watch (tests read it) */

static int pidfd_of(pid_t pid)
{
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, pid, 0);
#else
	(void)pid;
	errno = ENOSYS;
	return -1;
#endif
}

/* Does the process with this pid (in our pid namespace) map the region? */
static int maps_region(pid_t pid, const char *obj)
{
	char path[64], line[512];
	size_t n = strlen(obj);
	int found = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/maps", (long)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		char *s = strstr(line, "/dev/shm");

		found = s && !strncmp(s + 8, obj, n) && (s[8 + n] == '\n' || s[8 + n] == ' ');
	}
	fclose(f);
	return found;
}

static int has_exited(struct lw_region *r)
{
	if (r->exited)
		return 1;
	if (r->pidfd >= 0) {
		struct pollfd pf = { .fd = r->pidfd, .events = POLLIN };

		r->exited = poll(&pf, 1, 0) == 1;
		return r->exited;
	}
	return r->exited = ofi_pid_gone(r->pid); /* no pidfd (kernel < 5.3): gone, or a zombie */
}

static int held(struct ofi_lockwatch *w, struct lw_region *r)
{
	return __atomic_load_n(r->lock, __ATOMIC_ACQUIRE) != w->unlocked_value;
}

/* held through a whole look (every 100 us for LW_LOOK_US)? */
static int stays_held(struct ofi_lockwatch *w, struct lw_region *r)
{
	for (int i = 0; i < LW_LOOK_US / 100; i++) {
		struct timespec ts = { 0, 100000 };

		if (!held(w, r))
			return 0;
		nanosleep(&ts, NULL);
	}
	return held(w, r);
}

/* the store its holder's pthread_spin_unlock would make (glibc: x86-64 and generic alike) */
static void release(struct ofi_lockwatch *w, struct lw_region *r)
{
	__atomic_store_n(r->lock, w->unlocked_value, __ATOMIC_RELEASE);
	r->held_since = 0;
	__atomic_store_n(&r->released, 1, __ATOMIC_RELEASE);
	__atomic_add_fetch(&ofi_lockwatch_releases, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&w->pending, 1, __ATOMIC_RELEASE);
}

static void look(struct ofi_lockwatch *w)
{
	struct lw_region *head = __atomic_load_n(&w->regions, __ATOMIC_ACQUIRE);
	uint64_t now = ofi_now_ns();

	for (struct lw_region *r = head; r; r = r->next)
		if (r->peer_uid && !r->exited && has_exited(r))
			r->exit_ns = w->peer_exit_ns = now;
	for (struct lw_region *r = head; r; r = r->next) {
		if (!held(w, r)) {
			r->held_since = 0;
			continue;
		}
		if (!r->held_since)
			r->held_since = now;
		if (r->peer_uid) {
			if (r->exited && stays_held(w, r))
				release(w, r);
		} else if (now - r->held_since >= LW_OWN_MS * 1000000ull && w->peer_exit_ns >= r->held_since &&
			   stays_held(w, r)) {
			release(w, r);
		}
	}
}

static void *watch_main(void *arg)
{
	struct ofi_lockwatch *w = arg;
	struct pollfd pf = { .fd = w->stop_fd, .events = POLLIN };

	for (;;) {
		int n = poll(&pf, 1, LW_TICK_MS);

		if (n > 0 || (n < 0 && errno != EINTR))
			return NULL; /* asked to leave (or the eventfd is gone) */
		if (n == 0)
			look(w);
	}
}

/* map a region's first page and check that it is what we expect */
static int region_map(struct lw_region *r, pid_t pid)
{
	int fd = shm_open(r->name, O_RDWR | O_CLOEXEC, 0);
	struct stat st;
	uint8_t *m;

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) != 0 || st.st_size < LW_MAP_LEN) {
		close(fd);
		return -1;
	}
	m = mmap(NULL, LW_MAP_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -1;
	/* format 4 or 5, the owner's pid, and total_size the file's size */
	if ((m[0] != 4 && m[0] != 5) || *(volatile int *)(m + LW_PID_OFF) != (int)pid ||
	    *(volatile uint64_t *)(m + LW_SIZE_OFF) != (uint64_t)st.st_size) {
		munmap(m, LW_MAP_LEN);
		return -1;
	}
	r->map = m;
	r->lock = (volatile int *)(m + LW_LOCK_OFF);
	r->pid = pid;
	return 0;
}

/* "fi_shm://sdofi-<pid>-<uid>:0:0" -> "/sdofi-<pid>-<uid>:0:0" and the pid
 * (the names ofi_provider.c gives shm endpoints); -1: not such a name */
int ofi_shm_object(const uint8_t *name, size_t len, char *out, size_t n, pid_t *pid)
{
	static const char pre[] = "fi_shm://";
	char buf[128], *end;
	long v;

	while (len && name[len - 1] == 0)
		len--;
	if (len <= sizeof(pre) - 1 || len >= sizeof(buf) || memcmp(name, pre, sizeof(pre) - 1))
		return -1;
	memcpy(buf, name + sizeof(pre) - 1, len - (sizeof(pre) - 1));
	buf[len - (sizeof(pre) - 1)] = 0;
	if (strncmp(buf, "sdofi-", 6) || strchr(buf, '/') || buf[6] < '1' || buf[6] > '9')
		return -1;
	v = strtol(buf + 6, &end, 10);
	if (v <= 0 || v > INT_MAX || *end != '-')
		return -1;
	*pid = (pid_t)v;
	return snprintf(out, n, "/%s", buf) < (int)n ? 0 : -1;
}

/* Start watching our own region (the instance's RDM endpoint, named
 * p->name): only where it is an shm region of a version we know. */
void ofi_lockwatch_start(struct sd_prov *p)
{
	const char *e = getenv("SOFTDOCA_OFI_LOCKWATCH");
	struct ofi_lockwatch *w;
	struct lw_region *r;
	pthread_spinlock_t probe;
	pid_t pid;

	if ((e && !strcmp(e, "0")) || strcmp(p->ch.prov, "shm"))
		return;
	r = calloc(1, sizeof(*r));
	w = calloc(1, sizeof(*w));
	if (!r || !w)
		goto fail;
	r->pidfd = -1;
	if (ofi_shm_object(p->name, p->name_len, r->name, sizeof(r->name), &pid) || pid != getpid() ||
	    region_map(r, pid))
		goto fail;
	pthread_spin_init(&probe, PTHREAD_PROCESS_PRIVATE);
	w->unlocked_value = *(volatile int *)&probe;
	pthread_spin_destroy(&probe);
	w->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->stop_fd < 0)
		goto fail;
	w->regions = r;
	w->n = 1;
	if (pthread_create(&w->thread, NULL, watch_main, w)) {
		close(w->stop_fd);
		goto fail;
	}
	pthread_setname_np(w->thread, "softdoca-shmlock");
	p->lockwatch = w;
	__atomic_add_fetch(&ofi_lockwatch_instances, 1, __ATOMIC_RELAXED);
	return;
fail:
	if (r && r->map)
		munmap(r->map, LW_MAP_LEN);
	free(r);
	free(w);
}

/* A peer's receiving endpoint we post to (its name from the address blob). */
void ofi_lockwatch_peer(struct sd_prov *p, uint64_t peer_uid, const uint8_t *name, size_t len)
{
	struct ofi_lockwatch *w = p->lockwatch;
	struct lw_region *r;
	char obj[128];
	pid_t pid;

	if (!w || ofi_shm_object(name, len, obj, sizeof(obj), &pid) || pid == getpid())
		return;
	for (r = w->regions; r; r = r->next)
		if (r->peer_uid == peer_uid && !strcmp(r->name, obj))
			break;
	if (!r && w->n < LW_MAX && (r = calloc(1, sizeof(*r)))) {
		snprintf(r->name, sizeof(r->name), "%s", obj);
		r->peer_uid = peer_uid;
		r->pidfd = pidfd_of(pid);
		/* ESRCH: gone already, or not in our pid namespace; and a namesake
		 * that does not map the region is not the peer: not watched */
		if ((r->pidfd < 0 && errno != ENOSYS) || !maps_region(pid, obj) || region_map(r, pid)) {
			if (r->pidfd >= 0)
				close(r->pidfd);
			free(r);
		} else {
			r->next = w->regions;
			__atomic_store_n(&w->regions, r, __ATOMIC_RELEASE);
			w->n++;
		}
	}
}

/* Progress: the peer instances whose lock the watch released since the last
 * call (their connections fail now). Returns how many it wrote into uids. */
int ofi_lockwatch_take(struct sd_prov *p, uint64_t *uids, int max)
{
	struct ofi_lockwatch *w = p->lockwatch;
	int k = 0;

	if (!w || !__atomic_exchange_n(&w->pending, 0, __ATOMIC_ACQ_REL))
		return 0;
	for (struct lw_region *r = __atomic_load_n(&w->regions, __ATOMIC_ACQUIRE); r; r = r->next) {
		if (k == max) {
			__atomic_store_n(&w->pending, 1, __ATOMIC_RELEASE); /* the rest at the next call */
			break;
		}
		if (__atomic_exchange_n(&r->released, 0, __ATOMIC_ACQ_REL) && r->peer_uid)
			uids[k++] = r->peer_uid;
	}
	return k;
}

void ofi_lockwatch_stop(struct sd_prov *p)
{
	struct ofi_lockwatch *w = p->lockwatch;
	uint64_t one = 1;

	if (!w)
		return;
	if (write(w->stop_fd, &one, sizeof(one)) < 0) {
		/* an eventfd write fails only on overflow: the thread is leaving anyway */
	}
	pthread_join(w->thread, NULL);
	close(w->stop_fd);
	while (w->regions) {
		struct lw_region *r = w->regions;

		w->regions = r->next;
		munmap(r->map, LW_MAP_LEN);
		if (r->pidfd >= 0)
			close(r->pidfd);
		free(r);
	}
	free(w);
	p->lockwatch = NULL;
	__atomic_sub_fetch(&ofi_lockwatch_instances, 1, __ATOMIC_RELAXED);
}
