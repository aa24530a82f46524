/*
 * softdoca same-host transport: one-sided writes and reads between two
 * processes of one host move bytes directly between the initiator's buffers
 * and the target's registered memory with cross-memory attach
 * (process_vm_writev / process_vm_readv), on the submitting thread, without
 * a round trip. Everything else (atomics, sends, write with immediate,
 * refusals, zero-length ops) stays on the TCP link of the connection.
 *
 * Registration table: every process that may be a target publishes its
 * started local mmaps (id, key, base, length, permissions) in a shared
 * table, a memfd of SD_XT_SLOTS 64-byte slots. Its pid, the memfd's fd
 * number, a random table token, the host identity (boot id + pid namespace)
 * and the context's permissions travel in header fields of the handshake
 * frames (HELLO / HELLO_ACK / CM_REQ / CM_ACCEPT) that older softdoca
 * versions ignore. The peer, on the same host and in the same pid namespace,
 * opens /proc/<pid>/fd/<fd>, maps the table, checks its magic, token and
 * instance and probes cross-memory attach once (a 16-byte read of the token
 * in the target's memory: ptrace restrictions show here); any failure and
 * the connection stays on TCP.
 *
 * An operation goes over the table only when the link is idle (nothing
 * queued or outstanding: ordering with the TCP path is kept, completions
 * stay in order), the remote descriptor was issued by the peer's process
 * instance, and the slot checks pass: state VALID, map id and key, bounds,
 * the map's and the target context's permissions. Otherwise, or if the copy
 * fails (peer gone, memory unmapped), the task goes over TCP, where the
 * target refuses it with the usual reason and breaks the connection (RC
 * semantics), or the dead link fails it.
 *
 * Revocation (doca_mmap_stop / destroy, before the registry drain): the
 * slot goes REVOKED, then the target waits until no peer copy is in
 * progress (in-use counter, incremented by a peer before it checks the
 * state: with sequentially consistent atomics either the peer sees REVOKED
 * or the target sees the count), bounded by SOFTDOCA_TIMEOUT_MS (a peer
 * killed in the middle of a copy: the slot is then retired for good).
 *
 * Shared mappings: when a published map's memory lies in a shared mapping
 * of a memfd sealed against shrinking (F_SEAL_SHRINK: what
 * pydoca.memory.shared_memory allocates), the target keeps an fd of that
 * file open and names it in the slot (fd + 1, file offset of the base). A
 * peer maps the file once (through /proc/<pid>/fd, under the same inuse
 * hold as a copy) and from then on copies with memcpy, no system call per
 * operation; every check above still runs per operation. The seal makes a
 * target unable to shrink the file under a peer (no SIGBUS); a file without
 * it is reached with cross-memory attach as before.
 *
 * Trust: cross-memory attach needs the rights of a debugger over the target
 * (same uid, ptrace policy), so the checks protect against stale
 * descriptors and bugs, not against a hostile peer of the same uid.
 *
 * SOFTDOCA_TRANSPORT=tcp|shm|auto (default auto): tcp never publishes nor
 * offers; shm and auto use the table when possible (shm warns when not).
 *
 * This module knows no DOCA object (tests/test_softdoca_layers.py checks it):
 * a local map reaches it as a region (rdma_ctx.c adapts doca_mmap_start and
 * stop), an operation as a remote key, a direction, an iovec and an address
 * (rdma_tasks.c picks the tasks, tests the link's idleness and completes
 * them); permission bits are DOCA's access flags, as on the wire.
 */
#define _GNU_SOURCE
#include "rdma.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SD_XT_MAGIC 0x54584453u /* "SDXT" */
#define SD_XT_VERSION 1u
#define SD_XT_SLOTS 4096u
#define SD_XOFFER_MAGIC 0x3154524f50584453ull /* "SDXPORT1" */

enum { XS_EMPTY = 0, XS_VALID = 1, XS_REVOKED = 2, XS_FREE = 3, XS_DEAD = 4, XS_WRITING = 5 };

struct sd_xt_slot {
	_Atomic uint32_t state;
	_Atomic uint32_t inuse;
	uint64_t id, base, len;
	uint32_t perms;
	uint32_t fdp1;  /* shared mapping: the target's fd of the file + 1 (0: none) */
	uint8_t key[SD_KEY_LEN];
	uint64_t foff;  /* shared mapping: file offset of base */
};

struct sd_xt_hdr {
	uint32_t magic, version;
	uint64_t instance;
	uint8_t token[16];
	uint64_t probe_addr;
	uint32_t nslots, pad;
	uint8_t pad2[16];
};

_Static_assert(sizeof(struct sd_xt_slot) == 64, "slot size");
_Static_assert(sizeof(struct sd_xt_hdr) == 64, "hdr size");

#define SD_XT_SIZE (sizeof(struct sd_xt_hdr) + SD_XT_SLOTS * sizeof(struct sd_xt_slot))

#define SD_XP_MAPS 16

/* A peer's shared file, mapped here: base..base+len of map id at addr. */
struct sd_xpmap {
	uint64_t id, base, len;
	uint8_t *addr;   /* NULL: unused; MAP_FAILED: this map cannot be mapped (CMA) */
	size_t maplen;   /* what munmap releases, from addr - skew */
	size_t skew;     /* page alignment of the file offset */
	uint64_t used;   /* LRU clock */
};

struct sd_xpeer {
	int ready;
	uint64_t clock;
	struct sd_xpmap maps[SD_XP_MAPS];
	pid_t pid;
	int fd;
	uint64_t instance;
	uint64_t host;
	uint32_t ctx_perms;
	uint8_t token[16];
	struct sd_xt_hdr *hdr;
	struct sd_xt_slot *slots;
};

/* ---------------------------------------------------------------- mode, host */
enum { XM_AUTO = 0, XM_TCP, XM_SHM };
static pthread_once_t x_once = PTHREAD_ONCE_INIT;
static int x_mode;
static uint64_t x_host;
static pthread_mutex_t x_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sd_xt_hdr *x_tab; /* our table (x_lock for creation) */
static int x_fd = -1;
static uint8_t x_probe[16];     /* the token, read by peers to probe CMA */
static atomic_int x_logged;
static int x_slot_fd[SD_XT_SLOTS]; /* shared file of slot k: fd + 1, kept open while published (x_lock) */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 1099511628211ull;
	}
	return h;
}

static void x_atfork_child(void)
{
	/* the table is shared with the parent: the child publishes nothing there */
	pthread_mutex_init(&x_lock, NULL);
	if (x_tab)
		munmap(x_tab, SD_XT_SIZE);
	if (x_fd >= 0)
		close(x_fd);
	x_tab = NULL;
	x_fd = -1;
	for (uint32_t k = 0; k < SD_XT_SLOTS; k++) { /* the parent's shared files stay the parent's */
		if (x_slot_fd[k] > 0)
			close(x_slot_fd[k] - 1);
		x_slot_fd[k] = 0;
	}
}

static void x_init(void)
{
	const char *e = getenv("SOFTDOCA_TRANSPORT");
	char buf[128];
	uint64_t h = 1469598103934665603ull;
	int fd;
	ssize_t n;
	struct stat st;

	if (!e || !*e || !strcmp(e, "auto"))
		x_mode = XM_AUTO;
	else if (!strcmp(e, "tcp"))
		x_mode = XM_TCP;
	else if (!strcmp(e, "shm"))
		x_mode = XM_SHM;
	else {
		SD_WARN("SOFTDOCA_TRANSPORT=%s: unknown (tcp, shm or auto); using auto", e);
		x_mode = XM_AUTO;
	}
	fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, buf, sizeof(buf));
		if (n > 0)
			h = fnv(h, buf, (size_t)n);
		close(fd);
	}
	if (stat("/proc/self/ns/pid", &st) == 0) {
		h = fnv(h, &st.st_ino, sizeof(st.st_ino));
		h = fnv(h, &st.st_dev, sizeof(st.st_dev));
	}
	x_host = h;
	pthread_atfork(NULL, NULL, x_atfork_child);
}

static int x_enabled(void)
{
	pthread_once(&x_once, x_init);
	return x_mode != XM_TCP;
}

/* Our table, created on first use. NULL when disabled or it failed. */
static struct sd_xt_hdr *x_table(void)
{
	struct sd_xt_hdr *t;

	if (!x_enabled())
		return NULL;
	pthread_mutex_lock(&x_lock);
	if (!x_tab && x_fd != -2) {
		int fd = memfd_create("softdoca-xport", MFD_CLOEXEC);
		void *p = MAP_FAILED;

		if (fd >= 0 && ftruncate(fd, (off_t)SD_XT_SIZE) == 0)
			p = mmap(NULL, SD_XT_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			SD_DBG("rdma: same-host transport unavailable (memfd: %s)", strerror(errno));
			if (fd >= 0)
				close(fd);
			x_fd = -2; /* do not retry */
		} else {
			t = p;
			t->magic = SD_XT_MAGIC;
			t->version = SD_XT_VERSION;
			t->instance = sd_instance_id();
			if (sd_random_bytes(t->token, sizeof(t->token)) != 0) {
				munmap(p, SD_XT_SIZE);
				close(fd);
				x_fd = -2;
			} else {
				memcpy(x_probe, t->token, sizeof(x_probe));
				t->probe_addr = (uint64_t)(uintptr_t)x_probe;
				t->nslots = SD_XT_SLOTS;
				x_fd = fd;
				x_tab = t;
			}
		}
	}
	t = x_tab;
	pthread_mutex_unlock(&x_lock);
	return t;
}

static struct sd_xt_slot *slots_of(struct sd_xt_hdr *h)
{
	return (struct sd_xt_slot *)(h + 1);
}

/* ---------------------------------------------------------------- shared mappings (target) */

/* If [addr, addr+len) lies in one shared mapping of a memfd sealed against
 * shrinking, an fd of that file (caller closes) and the offset of addr in it;
 * else -1. The fd is found among ours by device and inode (Python's mmap
 * keeps a duplicate of the memfd it maps). */
static int x_shared_fd(const void *addr, size_t len, uint64_t *foff)
{
	uintptr_t a = (uintptr_t)addr;
	char line[512], path[64];
	unsigned long lo, hi, off, ino, dmaj, dmin;
	char perms[8];
	FILE *f = fopen("/proc/self/maps", "re");
	DIR *dir;
	struct dirent *de;
	int fd = -1, found = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx %7s %lx %lx:%lx %lu", &lo, &hi, perms, &off, &dmaj, &dmin, &ino) != 7)
			continue;
		if (a >= lo && a < hi) {
			found = a + len <= hi && perms[3] == 's' && ino != 0 && strstr(line, "/memfd:") != NULL;
			break;
		}
	}
	fclose(f);
	if (!found)
		return -1;
	dir = opendir("/proc/self/fd");
	while (dir && fd < 0 && (de = readdir(dir)) != NULL) {
		struct stat st;
		int n = atoi(de->d_name), seals;

		if (de->d_name[0] < '0' || de->d_name[0] > '9' || n == dirfd(dir) || fstat(n, &st) != 0)
			continue;
		if (st.st_ino != ino || dmaj != major(st.st_dev) || dmin != minor(st.st_dev))
			continue;
		seals = fcntl(n, F_GET_SEALS);
		if (seals < 0 || !(seals & F_SEAL_SHRINK) || (uint64_t)st.st_size < off + (a - lo) + len)
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%d", n);
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd >= 0 && (fstat(fd, &st) != 0 || st.st_ino != ino)) { /* n was closed and reused meanwhile */
			close(fd);
			fd = -1;
		}
	}
	if (dir)
		closedir(dir);
	*foff = off + (a - lo);
	return fd;
}

/* ---------------------------------------------------------------- publish / revoke (target) */
void sd_xport_publish(const struct sd_xregion *m)
{
	struct sd_xt_hdr *t = x_table();
	struct sd_xt_slot *s;

	uint64_t foff = 0;
	int sfd = -1;

	if (!t)
		return;
	if (m->perms & (DOCA_ACCESS_FLAG_RDMA_READ | DOCA_ACCESS_FLAG_RDMA_WRITE))
		sfd = x_shared_fd((const void *)(uintptr_t)m->base, m->len, &foff);
	s = slots_of(t);
	pthread_mutex_lock(&x_lock);
	for (uint32_t k = 0; k < SD_XT_SLOTS; k++) {
		uint32_t i = (uint32_t)((m->id + k) % SD_XT_SLOTS);
		struct sd_xt_slot *e = &s[i];
		uint32_t st = atomic_load(&e->state);

		if (st != XS_EMPTY && st != XS_FREE)
			continue;
		atomic_store(&e->state, XS_WRITING);
		e->id = m->id;
		e->base = m->base;
		e->len = m->len;
		e->perms = m->perms;
		e->fdp1 = sfd >= 0 ? (uint32_t)sfd + 1 : 0;
		e->foff = foff;
		x_slot_fd[i] = sfd + 1;
		memcpy(e->key, m->key, SD_KEY_LEN);
		atomic_store(&e->state, XS_VALID);
		pthread_mutex_unlock(&x_lock);
		return;
	}
	pthread_mutex_unlock(&x_lock);
	if (sfd >= 0)
		close(sfd);
	SD_DBG("rdma: same-host registration table full: mmap 0x%llx reachable over TCP only",
	       (unsigned long long)m->id);
}

/* The shared file's fd of a slot no peer can use any more. */
static void x_slot_close(struct sd_xt_slot *e)
{
	uint32_t i = (uint32_t)(e - slots_of(x_tab));

	pthread_mutex_lock(&x_lock);
	if (x_slot_fd[i] > 0)
		close(x_slot_fd[i] - 1);
	x_slot_fd[i] = 0;
	pthread_mutex_unlock(&x_lock);
}

void sd_xport_revoke(uint64_t id)
{
	struct sd_xt_hdr *t;
	struct sd_xt_slot *s, *e = NULL;
	uint64_t deadline;

	pthread_mutex_lock(&x_lock);
	t = x_tab;
	if (!t) {
		pthread_mutex_unlock(&x_lock);
		return;
	}
	s = slots_of(t);
	for (uint32_t k = 0; k < SD_XT_SLOTS; k++) {
		struct sd_xt_slot *c = &s[(id + k) % SD_XT_SLOTS];
		uint32_t st = atomic_load(&c->state);

		if (st == XS_EMPTY)
			break;
		if (st == XS_VALID && c->id == id) {
			e = c;
			break;
		}
	}
	if (!e) {
		pthread_mutex_unlock(&x_lock);
		return;
	}
	atomic_store(&e->state, XS_REVOKED); /* seq_cst: pairs with the peer's inuse increment */
	pthread_mutex_unlock(&x_lock);
	deadline = sd_now_ns() + sd_eng_timeout_ns();
	for (unsigned spins = 0; atomic_load(&e->inuse) != 0; spins++) {
		if (sd_now_ns() >= deadline) {
			SD_WARN("rdma: a peer still holds mmap 0x%llx in a same-host copy after %llu ms (did it die "
				"mid-copy?); retiring its table slot",
				(unsigned long long)id, (unsigned long long)(sd_eng_timeout_ns() / 1000000));
			atomic_store(&e->state, XS_DEAD);
			/* its shared file's fd stays open for good: a stalled peer holding the slot may still
			 * open /proc/<pid>/fd/<n>, which must not name a reused fd */
			return;
		}
		if (spins < 1000) {
			sched_yield();
		} else {
			struct timespec ts = {0, 100000};
			nanosleep(&ts, NULL);
		}
	}
	x_slot_close(e);
	atomic_store(&e->state, XS_FREE);
}

/* ---------------------------------------------------------------- offer (handshake) */
void sd_xport_offer(uint32_t ctx_perms, struct sd_hdr *h)
{
	struct sd_xt_hdr *t = x_table();

	if (!t || x_fd < 0)
		return;
	h->arg0 = SD_XOFFER_MAGIC;
	h->arg1 = x_host;
	h->instance = sd_instance_id();
	h->map_id = ((uint64_t)(uint32_t)getpid() << 32) | (uint32_t)x_fd;
	h->budget_ms = ctx_perms;
	memcpy(h->key, t->token, SD_KEY_LEN);
}

void sd_xport_on_offer(struct sd_xpeer **xp, const struct sd_hdr *h)
{
	struct sd_xpeer *x;

	if (h->arg0 != SD_XOFFER_MAGIC || !x_enabled() || *xp)
		return;
	if (h->arg1 != x_host) {
		SD_DBG("rdma: peer on another host (or pid namespace): TCP only");
		return;
	}
	x = calloc(1, sizeof(*x));
	if (!x)
		return;
	x->pid = (pid_t)(h->map_id >> 32);
	x->fd = (int)(uint32_t)h->map_id;
	x->instance = h->instance;
	x->host = h->arg1;
	x->ctx_perms = h->budget_ms;
	memcpy(x->token, h->key, sizeof(x->token));
	*xp = x;
}

static void xpmap_drop(struct sd_xpmap *pm)
{
	if (pm->addr && pm->addr != MAP_FAILED)
		munmap(pm->addr - pm->skew, pm->maplen);
	memset(pm, 0, sizeof(*pm));
}

static void peer_unmap(struct sd_xpeer *x)
{
	for (int i = 0; i < SD_XP_MAPS; i++)
		xpmap_drop(&x->maps[i]);
	if (x->hdr)
		munmap(x->hdr, SD_XT_SIZE);
	x->hdr = NULL;
	x->slots = NULL;
	x->ready = 0;
}

void sd_xport_peer_free(struct sd_xpeer *x)
{
	if (!x)
		return;
	peer_unmap(x);
	free(x);
}

/* The connection is established: open the peer's table if it offered one. */
void sd_xport_attach(struct sd_xpeer *x, uint64_t peer_instance)
{
	char path[64];
	int fd;
	void *p;
	uint8_t got[16];
	struct iovec li = {got, sizeof(got)}, ri;
	const char *why = NULL;

	if (!x_enabled())
		return;
	if (!x) {
		if (x_mode == XM_SHM)
			SD_WARN("rdma: SOFTDOCA_TRANSPORT=shm but the peer offers no same-host transport (another host, "
				"pid namespace or an older softdoca): TCP");
		return;
	}
	if (x->ready)
		return;
	if (peer_instance && peer_instance != x->instance) {
		why = "instance mismatch";
		goto fail;
	}
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)x->pid, x->fd);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		why = "cannot open the peer's table";
		goto fail;
	}
	p = mmap(NULL, SD_XT_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		why = "cannot map the peer's table";
		goto fail;
	}
	x->hdr = p;
	x->slots = slots_of(x->hdr);
	if (x->hdr->magic != SD_XT_MAGIC || x->hdr->version != SD_XT_VERSION || x->hdr->nslots != SD_XT_SLOTS ||
	    x->hdr->instance != x->instance || memcmp(x->hdr->token, x->token, 16) != 0) {
		why = "the peer's table does not match its offer";
		goto fail;
	}
	ri.iov_base = (void *)(uintptr_t)x->hdr->probe_addr;
	ri.iov_len = sizeof(got);
	if (process_vm_readv(x->pid, &li, 1, &ri, 1, 0) != (ssize_t)sizeof(got) || memcmp(got, x->token, 16) != 0) {
		why = "cross-memory attach refused (ptrace policy?)";
		goto fail;
	}
	x->ready = 1;
	if (atomic_exchange(&x_logged, 1) == 0)
		sd_log(SD_LOG_INFO,
		       "rdma: peer on this host: one-sided writes and reads over cross-memory attach "
		       "(SOFTDOCA_TRANSPORT=%s)", x_mode == XM_SHM ? "shm" : "auto");
	return;
fail:
	if (x_mode == XM_SHM)
		SD_WARN("rdma: SOFTDOCA_TRANSPORT=shm but %s: TCP", why);
	else
		SD_DBG("rdma: same-host transport not used: %s", why);
	peer_unmap(x);
}

/* ---------------------------------------------------------------- operations (initiator) */
static int key_eq(const uint8_t *a, const uint8_t *b)
{
	uint8_t d = 0;

	for (int i = 0; i < SD_KEY_LEN; i++)
		d |= (uint8_t)(a[i] ^ b[i]);
	return d == 0;
}

static struct sd_xt_slot *peer_lookup(struct sd_xpeer *x, uint64_t id)
{
	for (uint32_t k = 0; k < SD_XT_SLOTS; k++) {
		struct sd_xt_slot *e = &x->slots[(id + k) % SD_XT_SLOTS];
		uint32_t st = atomic_load_explicit(&e->state, memory_order_acquire);

		if (st == XS_EMPTY)
			return NULL;
		if (st == XS_VALID && e->id == id)
			return e;
	}
	return NULL;
}

/* Whether slot e (found for rk's id) grants len bytes at raddr with the rights
 * need: VALID for that id, rk's key, inside the range, the map's rights.
 * Inlined: it is on every same-host operation (make bench-native-ir). */
static inline __attribute__((always_inline)) int slot_grants(const struct sd_xt_slot *e, const struct sd_rkey *rk,
							     uint64_t raddr, uint64_t len, uint32_t need)
{
	uint64_t base = e->base, elen = e->len;

	return atomic_load(&e->state) == XS_VALID && e->id == rk->id && key_eq(e->key, rk->key) && raddr >= base &&
	       raddr + len >= raddr && len <= elen && raddr - base <= elen - len && (e->perms & need) == need;
}

/* The copy itself: application memory of two processes, by design outside
 * any synchronisation TSan can see (softdoca/tsan.supp). */
__attribute__((noinline)) static ssize_t sd_xport_copy(pid_t pid, int write, const struct iovec *liov, int ln,
						       const struct iovec *riov)
{
	return write ? process_vm_writev(pid, liov, (unsigned long)ln, riov, 1, 0)
		     : process_vm_readv(pid, liov, (unsigned long)ln, riov, 1, 0);
}

/* The peer's shared file of slot e (map id), mapped here; NULL: use CMA.
 * Called with e held (inuse), so its fd stays open meanwhile. */
static uint8_t *peer_shared(struct sd_xpeer *x, const struct sd_xt_slot *e, uint64_t id)
{
	struct sd_xpmap *pm = NULL, *victim = &x->maps[0];
	uint32_t fdp1 = e->fdp1;
	uint64_t foff = e->foff, len = e->len;
	long page = sysconf(_SC_PAGESIZE);
	char path[64];
	int fd, seals;
	void *p;

	for (int i = 0; i < SD_XP_MAPS; i++) {
		if (x->maps[i].addr && x->maps[i].id == id) {
			pm = &x->maps[i];
			break;
		}
		if (x->maps[i].used < victim->used)
			victim = &x->maps[i];
	}
	if (pm) {
		pm->used = ++x->clock;
		return pm->addr == MAP_FAILED || pm->base != e->base || pm->len != len ? NULL : pm->addr;
	}
	if (fdp1 == 0)
		return NULL;
	xpmap_drop(victim);
	pm = victim;
	pm->id = id;
	pm->base = e->base;
	pm->len = len;
	pm->used = ++x->clock;
	pm->addr = MAP_FAILED;
	snprintf(path, sizeof(path), "/proc/%d/fd/%u", (int)x->pid, fdp1 - 1);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	seals = fcntl(fd, F_GET_SEALS);
	pm->skew = (size_t)(foff % (uint64_t)page);
	pm->maplen = (size_t)len + pm->skew;
	p = seals >= 0 && (seals & F_SEAL_SHRINK)
		    ? mmap(NULL, pm->maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)(foff - pm->skew))
		    : MAP_FAILED;
	close(fd);
	if (p == MAP_FAILED)
		return NULL;
	pm->addr = (uint8_t *)p + pm->skew;
	SD_DBG("rdma: peer mmap 0x%llx is a shared file: same-host copies with memcpy", (unsigned long long)id);
	return pm->addr;
}

/* The copy through a shared mapping (memory of two processes, as above). */
__attribute__((noinline)) static void sd_xport_memcpy(uint8_t *shared, int write, const struct iovec *liov, int ln)
{
	for (int i = 0; i < ln; i++) {
		if (write)
			memcpy(shared, liov[i].iov_base, liov[i].iov_len);
		else
			memcpy(liov[i].iov_base, shared, liov[i].iov_len);
		shared += liov[i].iov_len;
	}
}

/* A one-sided write (write != 0: iov -> raddr) or read (raddr -> iov) of len
 * bytes through peer x's table, with the rights need: 1 when the bytes moved,
 * 0 when it must go over TCP (no table, not granted, or the copy failed: the
 * target refuses it there with its reason, or the dead link fails it). The
 * caller keeps the order with the link (it asks only when the link is idle). */
int sd_xport_op(struct sd_xpeer *x, int write, const struct iovec *iov, int iovn, uint64_t len,
		const struct sd_rkey *rk, uint64_t raddr)
{
	uint32_t need = write ? DOCA_ACCESS_FLAG_RDMA_WRITE : DOCA_ACCESS_FLAG_RDMA_READ;
	struct sd_xt_slot *e;
	uint64_t base;
	struct iovec ri;
	ssize_t n;
	int ok;

	if (!x || !x->ready || len == 0 || iovn <= 0 || (x->ctx_perms & need) != need || rk->instance != x->instance)
		return 0;
	e = peer_lookup(x, rk->id);
	if (!e)
		return 0;
	atomic_fetch_add(&e->inuse, 1); /* seq_cst: pairs with the target's REVOKED store */
	base = e->base;
	ok = slot_grants(e, rk, raddr, len, need);
	n = -1;
	if (ok) {
		uint8_t *shared = peer_shared(x, e, rk->id);

		if (shared) {
			sd_xport_memcpy(shared + (raddr - base), write, iov, iovn);
			n = (ssize_t)len;
		} else {
			ri.iov_base = (void *)(uintptr_t)raddr;
			ri.iov_len = len;
			n = sd_xport_copy(x->pid, write, iov, iovn, &ri);
		}
	}
	atomic_fetch_sub(&e->inuse, 1);
	return ok && n == (ssize_t)len;
}

/* ---------------------------------------------------------------- the provider bridge's check */
/* A one-sided operation a provider is to carry to a peer of this host whose
 * table is mapped (SOFTDOCA_PROVIDER with SOFTDOCA_TRANSPORT auto or shm):
 * whether the target's live table grants it (map published and VALID, map id
 * and key, bounds, the map's and the target context's permissions), as a
 * same-host copy checks. 1: granted; 0: refused (the caller sends it over the
 * native link, where the target refuses it with its reason, as it does for a
 * same-host copy); -1: no table for this peer (the descriptor's checks stand).
 * Unlike a copy, the operation is not held against the map's revocation while
 * the provider carries it: a stop racing an operation in flight may still see
 * it land (docs/providers.md). Engine lock held. */
int sd_xport_check(const struct sd_xpeer *x, const struct sd_rkey *rk, uint64_t raddr, uint64_t len,
		   uint32_t need)
{
	struct sd_xt_slot *e;

	if (!x || !x->ready || rk->instance != x->instance)
		return -1;
	if ((x->ctx_perms & need) != need)
		return 0;
	e = peer_lookup((struct sd_xpeer *)x, rk->id);
	return e && slot_grants(e, rk, raddr, len, need);
}

int sd_xport_ready(const struct sd_xpeer *x)
{
	return x && x->ready;
}
