/*
 * ofi over shm: when a doorbell need not ring.
 *
 * shm has no completion wait object, so a peer rings this instance's
 * doorbell after posting what needs this side's progress, and this side
 * answers once it progressed (ofi_provider.c). A ring and its answer cost
 * four system calls on the path of every operation: most of an 8 B write's
 * time while the target's engine is polling anyway (its serving spin,
 * rdma_loop.c).
 *
 * So each instance with a doorbell publishes, in a page of its own in
 * /dev/shm ("sdofi-<pid>-<uid>-awake", removed at close, and by the next
 * instance's reap when its process died), the time until which its engine
 * promised to keep progressing (the provider op live(): it calls progress()
 * at least once after that time before it sleeps). A sender that posted
 * before that time (its clock read after the post) needs no ring: the
 * promised progress serves what it posted. It skips the ring only while its
 * own side is progressed without a wake-up too (its spin, or its
 * application polling), since the answer is what wakes it otherwise. Both
 * sides read CLOCK_MONOTONIC: the page names its owner's time namespace, and
 * a page of another one is not read.
 * A ring left out is owed: if what it was for is still outstanding 1 ms
 * later (a promise not kept, a sender that stopped polling), progress and
 * arm send it then, and arm bounds the sleep to that; so a wrong skip costs
 * at most about a millisecond, never a hang.
 * A sender that leaves a ring out counts that in the peer's page (a cache
 * line apart from the promise), so the peer's progress can tell it served
 * someone (ofi_awake_served): its engine keeps its serving spin going on
 * that, where without a ring it would see no sign of a one-sided operation
 * it served and let the promise lapse (every lapse made the next operation
 * ring and wait for the wake-up).
 * A peer also counts every datagram it sends to this doorbell (after the
 * send), so this side reads the doorbell only when the count moved, instead
 * of one recv() in every progress call (most of a polling turn's cost); it
 * still reads it at least every DRAIN_NS, for a peer that counts nowhere.
 */
#define _GNU_SOURCE
#include "ofi_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define AWAKE_PAGE 4096
/* the page: [0] the promise (ns), [1] the owner's time namespace (inode; 0: none); [AWAKE_SERVED], on a
 * cache line of its own (peers write it, the owner's promise stores would bounce with it): rings peers left
 * out under the promise (each adds one) */
#define AWAKE_SERVED 16
/* [AWAKE_RANG], a cache line further: datagrams peers sent to our doorbell (each adds one after sending) */
#define AWAKE_RANG 24
#define DRAIN_NS 50000ull
#define OWED_NS 1000000ull

unsigned long ofi_awake_skips; /* rings left out, in this process (tests read it) */
static int awake_barrier;
unsigned long ofi_awake_unpaid; /* rings left out and sent later after all (tests read it) */
int ofi_awake_pages;           /* instances publishing a page (tests read it) */

/* this process's time namespace (CLOCK_MONOTONIC is per time namespace); 0
 * where the kernel has none (one clock for all) */
static uint64_t time_ns_id(void)
{
	struct stat st;

	return stat("/proc/self/ns/time", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static void awake_name(char *out, size_t n, long pid, uint64_t uid)
{
	snprintf(out, n, "/sdofi-%ld-%016llx-awake", pid, (unsigned long long)uid);
}

/* after the doorbell is bound: the page peers read (none: they always ring) */
void ofi_awake_open(struct sd_prov *p)
{
	const char *e = getenv("SOFTDOCA_OFI_AWAKE");
	char name[96];
	void *m;
	int fd;

	if ((e && !strcmp(e, "0")) || p->bell_fd < 0)
		return;
	awake_name(name, sizeof(name), (long)getpid(), p->uid);
	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	if (ftruncate(fd, AWAKE_PAGE) != 0 ||
	    (m = mmap(NULL, AWAKE_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		close(fd);
		shm_unlink(name);
		return;
	}
	close(fd);
	p->awake = m;
	__atomic_store_n(&p->awake[1], time_ns_id(), __ATOMIC_RELAXED);
	__atomic_add_fetch(&ofi_awake_pages, 1, __ATOMIC_RELAXED);
}

void ofi_awake_close(struct sd_prov *p)
{
	char name[96];

	if (!p->awake)
		return;
	__atomic_store_n(p->awake, 0, __ATOMIC_RELEASE);
	munmap(p->awake, AWAKE_PAGE);
	awake_name(name, sizeof(name), (long)getpid(), p->uid); /* the instance closes in its own process */
	shm_unlink(name);
	p->awake = NULL;
	__atomic_sub_fetch(&ofi_awake_pages, 1, __ATOMIC_RELAXED);
}

/* a peer instance we post to, with a doorbell: map its page if it has one */
void ofi_awake_peer(struct sd_prov *p, struct ofi_txe *t, const uint8_t *peer_name, size_t len)
{
	char obj[128], name[96];
	struct stat st;
	pid_t pid;
	void *m;
	int fd;

	/* mapped whether or not this side publishes a page: the count of our datagrams is for the peer */
	if (t->page || !t->bell || ofi_shm_object(peer_name, len, obj, sizeof(obj), &pid) || pid == getpid())
		return;
	awake_name(name, sizeof(name), (long)pid, t->peer_uid);
	/* non-blocking: nothing else of that name (a FIFO) may stall the caller */
	fd = shm_open(name, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0);
	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && st.st_size == AWAKE_PAGE &&
	    (m = mmap(NULL, AWAKE_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) != MAP_FAILED) {
		uint64_t *w = m;

		t->page = w;
		/* its promise is in its clock: read only where that is ours, and only where ours is published */
		if (p->awake && __atomic_load_n(&w[1], __ATOMIC_RELAXED) == time_ns_id())
			t->awake = w;
	}
	close(fd);
}

void ofi_awake_unmap(struct sd_prov *p, struct ofi_txe *t)
{
	if (t->owed_ns) {
		t->owed_ns = 0;
		p->owed--;
	}
	if (t->page)
		munmap(t->page, AWAKE_PAGE);
	t->page = t->awake = NULL;
}

/* the ring due to t may be left out: everything posted so far is served by
 * the peer's promised progress, and this side collects the completions */
int ofi_awake_skip(struct sd_prov *p, struct ofi_txe *t)
{
	uint64_t now;

	if (!t->awake || !p->self_until)
		return 0;
	/* the posts before the clock read (weakly ordered CPUs): a full barrier,
	 * as a locked RMW (TSan takes no bare fences) */
	(void)__atomic_fetch_add(&awake_barrier, 0, __ATOMIC_SEQ_CST);
	now = ofi_now_ns();
	if (now < p->self_until && now < __atomic_load_n(t->awake, __ATOMIC_ACQUIRE)) {
		ofi_awake_skips++; /* the provider's calls are serialized */
		__atomic_fetch_add(&t->awake[AWAKE_SERVED], 1, __ATOMIC_RELAXED); /* the peer sees it served someone */
		if (!t->owed_ns) {
			t->owed_ns = now;
			p->owed++;
		}
		return 1;
	}
	return 0;
}

/* rings left out whose operations are still outstanding OWED_NS later: send
 * them now (the peer did not serve them, or this side stopped polling); the
 * deadline of the next one, UINT64_MAX: none */
uint64_t ofi_awake_owed(struct sd_prov *p, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	if (!p->owed)
		return next;
	for (struct ofi_txe *t = p->txes; t; t = t->next) {
		if (!t->owed_ns)
			continue;
		if (!ofi_txe_busy(p, t)) {
			t->owed_ns = 0; /* served */
			p->owed--;
		} else if (now >= t->owed_ns + OWED_NS) {
			t->owed_ns = 0;
			p->owed--;
			ofi_awake_unpaid++;
			ofi_ring_txe(p, t, 1);
		} else if (t->owed_ns + OWED_NS < next) {
			next = t->owed_ns + OWED_NS;
		}
	}
	return next;
}

/* the provider op live() */
void ofi_live(struct sd_prov *p, uint64_t serve_until_ns, uint64_t self_until_ns)
{
	p->self_until = self_until_ns;
	if (p->awake && __atomic_load_n(p->awake, __ATOMIC_RELAXED) != serve_until_ns)
		__atomic_store_n(p->awake, serve_until_ns, __ATOMIC_RELEASE);
}

/* peers left rings out under our promise since the last call: 1 (progress
 * counts it as work done for them), else 0 */
int ofi_awake_served(struct sd_prov *p)
{
	uint64_t v;

	if (!p->awake)
		return 0;
	v = __atomic_load_n(&p->awake[AWAKE_SERVED], __ATOMIC_RELAXED);
	if (v == p->awake_seen)
		return 0;
	p->awake_seen = v;
	return 1;
}

/* a datagram went to t's doorbell: count it in its page (after the send, so
 * an owner that sees the count finds the datagram queued) */
void ofi_awake_rang(struct ofi_txe *t)
{
	if (t->page)
		__atomic_fetch_add(&t->page[AWAKE_RANG], 1, __ATOMIC_RELEASE);
}

/* may the doorbell hold datagrams? 1 where peers' count moved since the
 * last read, where it was not read for DRAIN_NS, or where this side has no
 * page; the count is taken then, before the caller reads the doorbell */
int ofi_bell_due(struct sd_prov *p, uint64_t now)
{
	uint64_t v;

	if (!p->awake)
		return 1;
	v = __atomic_load_n(&p->awake[AWAKE_RANG], __ATOMIC_ACQUIRE);
	if (v == p->rang_seen && now < p->drain_next_ns)
		return 0;
	p->rang_seen = v;
	p->drain_next_ns = now + DRAIN_NS;
	return 1;
}
