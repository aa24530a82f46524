/*
 * softdoca provider `ofi`: the provider interface (../provider.h) on libfabric.
 *
 * libfabric.so.1 is dlopened at the first probe/open, so softdoca builds and
 * runs where libfabric is absent; the build needs only <rdma/fabric.h>
 * (libfabric-dev) for the types, constants and the static inline wrappers
 * (fi_domain, fi_endpoint, fi_mr_reg, fi_write, ... go through the ops tables
 * of the objects and need no symbol). The exported functions we call, hence
 * dlsym: fi_getinfo, fi_freeinfo, fi_dupinfo (fi_allocinfo is an inline
 * fi_dupinfo(NULL)), fi_fabric, fi_strerror, fi_version. FI_PROVIDER and the
 * other FI_* variables are read by libfabric itself; never set here.
 *
 * Instance: fi_getinfo twice (with FI_ATOMIC, then without), ofi_negotiate()
 * picks the candidate (ofi_negotiate.c); one fabric, one domain, one EQ (MSG:
 * CM events). FI_EP_MSG (tcp, verbs): an endpoint and a CQ per connection
 * (the CQ tells the connection, so 4 bytes of remote CQ data suffice);
 * FI_EP_RDM (shm, efa, rxm): one endpoint, one AV and one CQ for the
 * instance; every message names the receiver's connection id.
 *
 * Threading: FI_THREAD_DOMAIN; the contract has the caller serialize every
 * call. Callbacks only inside progress().
 *
 * Wake-ups: every CQ / EQ is opened with FI_WAIT_FD where the provider has it
 * (fi_control(FI_GETWAIT)); their fds sit in one epoll fd, which get_fd()
 * returns; arm() runs fi_trywait() over them (AGAIN when it fails) and bounds
 * the sleep by the nearest deadline; without wait fds it bounds it to 1 ms.
 *
 * Memory: fi_mr_reg with FI_REMOTE_READ / FI_REMOTE_WRITE from the DOCA bits
 * (ATOMIC: both), local FI_READ | FI_WRITE | FI_SEND | FI_RECV always. The
 * rkey blob body: base, length, access, owner uid, MR key, offset-mode flag.
 * The requester checks owner, bounds and access before an op leaves
 * (SD_PROV_CAP_CHECK_REQUESTER); caps.enforce says what the target checks
 * (ofi_negotiate.c: enforce_of).
 *
 * Data ops, messages, emulations: ofi_ops.c. Connections: ofi_conn.c.
 */
#define _GNU_SOURCE
#include "ofi_internal.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

struct ofi_api OFI;
static pthread_once_t ofi_once = PTHREAD_ONCE_INIT;

static void load_once(void)
{
	void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		snprintf(OFI.err, sizeof(OFI.err),
			 "libfabric.so.1 not found (%s): install libfabric (Debian: libfabric1)", dlerror());
		return;
	}
#define SYM(field, name)                                                                                   \
	do {                                                                                               \
		OFI.field = (__typeof__(OFI.field))dlsym(h, name);                                          \
		if (!OFI.field) {                                                                          \
			snprintf(OFI.err, sizeof(OFI.err), "libfabric.so.1 lacks %s: libfabric >= 1.9 needed", name); \
			return;                                                                            \
		}                                                                                          \
	} while (0)
	SYM(getinfo, "fi_getinfo");
	SYM(freeinfo, "fi_freeinfo");
	SYM(dupinfo, "fi_dupinfo");
	SYM(fabric, "fi_fabric");
	SYM(strerror, "fi_strerror");
	SYM(fversion, "fi_version");
#undef SYM
	OFI.version = OFI.fversion();
	if (FI_MAJOR(OFI.version) != 1 || FI_MINOR(OFI.version) < 9) {
		snprintf(OFI.err, sizeof(OFI.err), "libfabric %u.%u found, >= 1.9 needed", FI_MAJOR(OFI.version),
			 FI_MINOR(OFI.version));
		return;
	}
	OFI.loaded = 1; /* never dlclosed: providers keep global state */
}

doca_error_t ofi_load(struct sd_prov_why *why)
{
	pthread_once(&ofi_once, load_once);
	if (!OFI.loaded) {
		OFI_WHY(why, "provider ofi: %s", OFI.err);
		return DOCA_ERROR_NOT_SUPPORTED;
	}
	return DOCA_SUCCESS;
}

static doca_error_t o_probe(struct sd_prov_why *why) { return ofi_load(why); }

/* ------------------------------------------------------------ helpers */
uint64_t ofi_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Is the process gone (no such pid, or a zombie)? */
int ofi_pid_gone(long pid)
{
	char path[64], line[512], st = 0;
	FILE *f;

	if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
		return 1;
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	f = fopen(path, "r");
	if (f) { /* "pid (comm) S ...": the state follows the last ')' */
		char *rp = fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;

		if (rp && rp[1] == ' ')
			st = rp[2];
		fclose(f);
	}
	return st == 'Z' || st == 'X';
}

const char *ofi_str(int rc) { return OFI.strerror ? OFI.strerror(rc < 0 ? -rc : rc) : "?"; }

doca_error_t ofi_err(int rc)
{
	switch (rc < 0 ? -rc : rc) {
	case 0: return DOCA_SUCCESS;
	case FI_ENOMEM: return DOCA_ERROR_NO_MEMORY;
	case FI_EINVAL: return DOCA_ERROR_INVALID_VALUE;
	case FI_EAGAIN: return DOCA_ERROR_AGAIN;
	case FI_ENOSYS: case FI_EOPNOTSUPP: case FI_ENODATA: return DOCA_ERROR_NOT_SUPPORTED;
	case FI_ECONNREFUSED: case FI_EHOSTUNREACH: case FI_ENETUNREACH: case FI_EADDRNOTAVAIL:
		return DOCA_ERROR_CONNECTION_ABORTED;
	case FI_ETIMEDOUT: return DOCA_ERROR_TIME_OUT;
	case FI_ECONNRESET: case FI_ECONNABORTED: case FI_ECANCELED: case FI_ENOTCONN:
	case FI_ESHUTDOWN:
		return DOCA_ERROR_CONNECTION_RESET;
	case FI_EACCES: case FI_EPERM: case FI_EKEYREJECTED: return DOCA_ERROR_NOT_PERMITTED;
	case FI_ETOOSMALL: case FI_EMSGSIZE: case FI_ETRUNC: return DOCA_ERROR_TOO_BIG;
	default: return DOCA_ERROR_IO_FAILED;
	}
}

void ofi_put64(uint8_t *b, uint64_t v) { for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i)); }
void ofi_put32(uint8_t *b, uint32_t v) { for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i)); }
uint64_t ofi_get64(const uint8_t *b) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = (v << 8) | b[i]; return v; }
uint32_t ofi_get32(const uint8_t *b) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = (v << 8) | b[i]; return v; }

/* add a CQ / EQ's wait fd to the epoll set; 0 and *fd_out = -1 when it has none */
int ofi_watch_fd(struct sd_prov *p, struct fid *f, int *fd_out)
{
	int fd = -1;
	struct epoll_event ev = { .events = EPOLLIN };

	*fd_out = -1;
	if (fi_control(f, FI_GETWAIT, &fd) != 0 || fd < 0) {
		p->poll_only = 1;
		return 0;
	}
	ev.data.fd = fd;
	if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &ev) != 0 && errno != EEXIST)
		return -errno;
	*fd_out = fd;
	return 0;
}

void ofi_unwatch_fd(struct sd_prov *p, int fd)
{
	if (fd >= 0)
		epoll_ctl(p->epfd, EPOLL_CTL_DEL, fd, NULL);
}

/* a temporary registration of a local buffer (FI_MR_LOCAL without the caller's mr, rendezvous sources) */
int ofi_reg_tmp(struct sd_prov *p, void *addr, size_t len, uint64_t access, struct fid_mr **mr, void **desc)
{
	int rc;

	rc = fi_mr_reg(p->domain, addr, len, access, 0, p->ch.prov_key ? 0 : ++p->next_key, 0, mr, NULL);
	if (rc)
		return rc;
	if ((p->ch.mr_mode & FI_MR_ENDPOINT) && p->ep) {
		rc = fi_mr_bind(*mr, &p->ep->fid, 0);
		if (!rc)
			rc = fi_mr_enable(*mr);
		if (rc) {
			fi_close(&(*mr)->fid);
			return rc;
		}
	}
	if (desc)
		*desc = fi_mr_desc(*mr);
	return 0;
}

/* ------------------------------------------------------------ connection slots */
struct sd_prov_conn *ofi_conn_lookup(struct sd_prov *p, uint32_t id)
{
	uint32_t idx = id & 0xffffu, gen = id >> 16;

	if (idx == 0 || idx > p->nslots || p->gens[idx - 1] != gen)
		return NULL;
	return p->slots[idx - 1];
}

int ofi_conn_live(struct sd_prov *p, struct sd_prov_conn *c)
{
	for (struct sd_prov_conn *x = p->conns; x; x = x->next)
		if (x == c)
			return 1;
	return 0;
}

struct sd_prov_conn *ofi_conn_alloc(struct sd_prov *p, void *ctx)
{
	struct sd_prov_conn *c;
	uint32_t idx = 0;

	for (uint32_t i = 0; i < p->nslots; i++)
		if (!p->slots[i]) {
			idx = i + 1;
			break;
		}
	if (!idx) {
		uint32_t n = p->nslots ? p->nslots * 2 : 16;
		struct sd_prov_conn **s;
		uint16_t *g;

		if (n > 0xffffu)
			return NULL;
		s = realloc(p->slots, n * sizeof(*s));
		if (!s)
			return NULL;
		p->slots = s;
		g = realloc(p->gens, n * sizeof(*g));
		if (!g)
			return NULL;
		p->gens = g;
		for (uint32_t i = p->nslots; i < n; i++) {
			p->slots[i] = NULL;
			p->gens[i] = 1;
		}
		idx = p->nslots + 1;
		p->nslots = n;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->p = p;
	c->ctx = ctx;
	c->id = ((uint32_t)p->gens[idx - 1] << 16) | idx;
	c->cq_fd = -1;
	c->dest = FI_ADDR_UNSPEC;
	c->ep = p->ep;
	c->cq = p->cq;
	p->slots[idx - 1] = c;
	c->next = p->conns;
	p->conns = c;
	return c;
}

/* frees the conn (its fabric objects are gone, its ops reported / orphaned) */
void ofi_conn_free(struct sd_prov_conn *c)
{
	struct sd_prov *p = c->p;
	uint32_t idx = c->id & 0xffffu;

	for (struct sd_prov_conn **pp = &p->conns; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	if (idx && idx <= p->nslots && p->slots[idx - 1] == c) {
		p->slots[idx - 1] = NULL;
		p->gens[idx - 1] = (uint16_t)(p->gens[idx - 1] + 1 ? p->gens[idx - 1] + 1 : 1);
	}
	ofi_rx_free_queue(c);
	if (c->txe)
		ofi_txe_put(p, c->txe);
	c->txe = NULL;
	ofi_conn_drop_request(c); /* a request never answered: refused, its handle freed */
	free(c->placing);
	free(c);
}

/* ------------------------------------------------------------ RDM transmit endpoints */
static int open_ep(struct sd_prov *p, struct fi_info *info, struct fid_ep **ep)
{
	int rc = fi_endpoint(p->domain, info, ep, p);

	if (rc) {
		*ep = NULL;
		return rc;
	}
	rc = fi_ep_bind(*ep, &p->av->fid, 0);
	if (!rc)
		rc = fi_ep_bind(*ep, &p->cq->fid, FI_TRANSMIT | FI_RECV);
	if (!rc)
		rc = fi_enable(*ep);
	if (rc) {
		fi_close(&(*ep)->fid);
		*ep = NULL;
	}
	return rc;
}

/* the transmit endpoint for a peer instance: its live one, else a new one */
struct ofi_txe *ofi_txe_get(struct sd_prov *p, uint64_t peer_uid, int bell, int *rc)
{
	struct ofi_txe *t;

	*rc = 0;
	for (t = p->txes; t; t = t->next)
		if (t->peer_uid == peer_uid && !t->wedged && !t->gone)
			break;
	if (!t) {
		t = calloc(1, sizeof(*t));
		if (!t) {
			*rc = -FI_ENOMEM;
			return NULL;
		}
		t->peer_uid = peer_uid;
		t->ep = p->ep;
		if (p->tx_per_peer) {
			/* a small receive side: nobody sends to it (its answers come
			 * through its response queue) */
			struct fi_info *i = OFI.dupinfo(p->info);

			if (!i) {
				free(t);
				*rc = -FI_ENOMEM;
				return NULL;
			}
			if (i->rx_attr && i->rx_attr->size > 16)
				i->rx_attr->size = 16;
			*rc = open_ep(p, i, &t->ep);
			OFI.freeinfo(i);
			if (*rc) {
				free(t);
				return NULL;
			}
			t->own = 1;
			p->ntx_own++;
		}
		t->next = p->txes;
		p->txes = t;
	}
	t->bell = bell && p->bell_fd >= 0;
	t->refs++;
	return t;
}

void ofi_txe_put(struct sd_prov *p, struct ofi_txe *t)
{
	(void)p;
	if (t->refs > 0)
		t->refs--;
}

/* close a transmit endpoint: the CQ was just read, so nothing of it is queued
 * there; the ops it still held (orphans) never complete now */
static void txe_free(struct sd_prov *p, struct ofi_txe *t)
{
	for (struct ofi_txe **pp = &p->txes; *pp; pp = &(*pp)->next)
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	if (t->own && t->ep) {
		fi_close(&t->ep->fid);
		p->ntx_own--;
	}
	for (struct oop **pp = &p->orphans; *pp;) {
		struct oop *o = *pp;
		if (o->txe == t) {
			*pp = o->next;
			ofi_free_op(p, o);
		} else {
			pp = &o->next;
		}
	}
	ofi_awake_unmap(p, t);
	free(t);
}

/* after a CQ read: close what nobody uses and cannot be used again (wedged or
 * its peer gone), and the idle ones of peers with nothing left */
static void txe_gc(struct sd_prov *p)
{
	for (struct ofi_txe *t = p->txes, *nx; t; t = nx) {
		nx = t->next;
		if (t->refs)
			continue;
		if ((t->own && (t->wedged || t->gone)) || (!t->own && !t->orphans))
			txe_free(p, t);
	}
}

/* ------------------------------------------------------------ the doorbell */
#define BELL_MAGIC 0x42444453u /* "SDDB" */
enum { BELL_RING = 'R', BELL_ANSWER = 'A' };
struct bell_msg {
	uint32_t magic;
	uint8_t kind, rsv[3];
	uint64_t uid; /* the sender */
};

static socklen_t bell_addr(uint64_t uid, struct sockaddr_un *a)
{
	int n;

	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	/* abstract (sun_path[0] = 0): per network namespace, gone with the socket */
	n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "softdoca-ofi-bell-%016llx", (unsigned long long)uid);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static void bell_open(struct sd_prov *p)
{
	struct sockaddr_un a;
	socklen_t al = bell_addr(p->uid, &a);
	struct epoll_event ev = { .events = EPOLLIN };
	const char *e = getenv("SOFTDOCA_OFI_DOORBELL");
	int fd;

	/* On where the lock watch runs (SOFTDOCA_OFI_DOORBELL=0: off), else opt-in
	 * (=1). shm guards each endpoint's queue with a spinlock in shared memory
	 * that its owner holds while it progresses; a peer killed while it holds it
	 * leaves every process that then sends to it spinning inside fi_writemsg.
	 * Woken at once by the doorbell, a receiver progresses (holds its lock) far
	 * more often than polled every 1 ms: without the watch, the C test's
	 * peer-kill case hung in about 1 of 6 shm runs with the doorbell, none of
	 * 12 without. The watch (ofi_shmlock.c) releases such a lock; on libfabric
	 * versions it does not know, peers poll this instance (1 ms bound). Off too
	 * where the caller polls without sleeping (SD_PROV_OPEN_SPINS: a ring and
	 * its answer would cost four system calls per operation and wake nobody). */
	if (e ? strcmp(e, "1") != 0 : (!p->lockwatch || (p->open_flags & SD_PROV_OPEN_SPINS)))
		return;
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	ev.data.fd = fd;
	if (bind(fd, (struct sockaddr *)&a, al) != 0 || epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
		close(fd); /* no doorbell: arm() bounds the sleep as without one */
		return;
	}
	p->bell_fd = fd;
	ofi_awake_open(p);
}

/* a peer with outstanding ops was heard from (or its doorbell closed): the
 * connections to a gone peer fail now instead of at their deadline */
static void peer_gone(struct sd_prov *p, struct ofi_txe *t, const char *why)
{
	t->gone = 1;
	t->bell = 0;
	for (struct sd_prov_conn *c = p->conns; c; c = c->next)
		if (c->txe == t && (c->state == CS_ESTABLISHED || c->state == CS_CONNECTING))
			ofi_conn_fail(c, DOCA_ERROR_CONNECTION_RESET, SD_PROV_FAIL_LOST, "the peer instance is gone (%s)",
				      why);
}

/* the lock watch released the queue lock of peers whose process died holding it */
static void lock_releases(struct sd_prov *p)
{
	uint64_t uids[16];
	int k = ofi_lockwatch_take(p, uids, 16);

	for (int i = 0; i < k; i++)
		for (struct ofi_txe *t = p->txes; t; t = t->next)
			if (t->peer_uid == uids[i] && !t->gone)
				peer_gone(p, t, "its process died holding its shm queue lock, which softdoca released");
}

unsigned long ofi_bell_rings; /* rings sent, in this process (tests read it) */
unsigned long ofi_bell_reads; /* reads of the doorbell, in this process (tests read it) */

static void bell_send(struct sd_prov *p, struct ofi_txe *t, int kind)
{
	struct bell_msg m = { .magic = BELL_MAGIC, .kind = (uint8_t)kind, .uid = p->uid };
	struct sockaddr_un a;
	socklen_t al = bell_addr(t->peer_uid, &a);
	ssize_t k = sendto(p->bell_fd, &m, sizeof(m), MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&a, al);

	if (k == (ssize_t)sizeof(m)) {
		t->bell_ok = 1;
		ofi_awake_rang(t);
		if (kind == BELL_RING)
			ofi_bell_rings++;
		return;
	}
	/* a full queue (EAGAIN): the peer has rings unread, it is awake or wakes */
	if (errno == ECONNREFUSED || errno == ENOENT) {
		if (t->bell_ok) /* it answered before: the instance closed or its process died */
			peer_gone(p, t, "its doorbell closed");
		else            /* never reached (another network namespace?): the sleep bound stays */
			t->bell = 0;
	}
}

void ofi_ring_txe(struct sd_prov *p, struct ofi_txe *t, int force)
{
	if (!t || !t->bell)
		return;
	if (force)
		t->ring_force = 1;
	if (!t->ring_due) {
		t->ring_due = 1;
		p->bells_due++;
	}
}

void ofi_ring(struct sd_prov_conn *c)
{
	ofi_ring_txe(c->p, c->txe, 0);
}

/* one datagram per peer and round: a ring (answer wanted) or an answer */
void ofi_bell_flush(struct sd_prov *p)
{
	if (!p->bells_due)
		return;
	p->bells_due = 0;
	for (struct ofi_txe *t = p->txes; t; t = t->next) {
		if (!t->ring_due && !t->answer_due)
			continue;
		if (t->bell && !t->gone && !(t->ring_due && !t->answer_due && !t->ring_force && ofi_awake_skip(p, t)))
			bell_send(p, t, t->ring_due ? BELL_RING : BELL_ANSWER);
		t->ring_due = t->answer_due = t->ring_force = 0;
	}
}

/* read what rang (bounded; only where something may have: ofi_bell_due);
 * rings of known peers are answered after this progress */
static int bell_drain(struct sd_prov *p)
{
	struct bell_msg m[8];
	int n = 0;

	if (!ofi_bell_due(p, ofi_now_ns()))
		return 0;
	ofi_bell_reads++;
	for (int round = 0; round < 64; round++) {
		ssize_t k = recv(p->bell_fd, m, sizeof(m), MSG_DONTWAIT);

		if (k < (ssize_t)sizeof(m[0]))
			break;
		if (round == 63)
			p->drain_next_ns = 0; /* the bound: the rest next time */
		n++;
		if (m[0].magic != BELL_MAGIC || m[0].kind != BELL_RING)
			continue;
		for (struct ofi_txe *t = p->txes; t; t = t->next)
			if (t->peer_uid == m[0].uid && t->bell && !t->gone && !t->wedged) {
				if (!t->answer_due && !t->ring_due)
					p->bells_due++;
				t->answer_due = 1;
				break;
			}
	}
	return n;
}

/* liveness: a doorbell that answered once and is closed now means the peer
 * instance is gone (closed or died): connect() on a datagram socket asks the
 * kernel without waking the peer. Peers with outstanding ops every 200 ms,
 * the others every second. */
#define PROBE_BUSY_NS 200000000ull
#define PROBE_IDLE_NS 1000000000ull
int ofi_txe_busy(struct sd_prov *p, struct ofi_txe *t)
{
	for (struct sd_prov_conn *c = p->conns; c; c = c->next)
		if (c->txe == t && (c->out_head || c->pend_head))
			return 1;
	return 0;
}

static void bell_probe(struct sd_prov *p, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	if (now < p->next_probe_ns)
		return;
	for (struct ofi_txe *t = p->txes; t; t = t->next) {
		uint64_t due;

		if (!t->bell_ok || t->gone || (!t->refs && !t->own))
			continue;
		due = t->probe_ns + (ofi_txe_busy(p, t) ? PROBE_BUSY_NS : PROBE_IDLE_NS);
		if (now >= due) {
			struct sockaddr_un a;
			socklen_t al = bell_addr(t->peer_uid, &a);
			int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

			t->probe_ns = now;
			if (fd >= 0) {
				if (connect(fd, (struct sockaddr *)&a, al) != 0 && (errno == ECONNREFUSED || errno == ENOENT))
					peer_gone(p, t, "its doorbell closed");
				close(fd);
			}
			due = now + PROBE_BUSY_NS;
		}
		if (due < next)
			next = due;
	}
	p->next_probe_ns = next == UINT64_MAX ? now + PROBE_IDLE_NS : next;
}

/* ------------------------------------------------------------ shm endpoint names */
/*
 * shm names its endpoints "<pid>:<uid>:<n>" (files in /dev/shm) and refuses
 * (-FI_EBUSY) to create one whose file exists with a live pid recorded in it;
 * a process killed without closing leaves its file, and a later process with
 * the same pid then saw its fi_endpoint fail (DOCA_ERROR_IO_FAILED at a context
 * start). So the endpoints get a name of their own, "sdofi-<pid>-<uid>..."
 * (the instance uid is random), and files of that form whose process is gone
 * are removed at open.
 */
#define SHM_NAME_PREFIX "sdofi-"
static void shm_reap(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	int n = 0;

	if (!d)
		return;
	while ((e = readdir(d)) && n++ < 65536) {
		char *end;
		long pid;
		struct stat st;
		char path[300];

		if (strncmp(e->d_name, SHM_NAME_PREFIX, sizeof(SHM_NAME_PREFIX) - 1))
			continue;
		pid = strtol(e->d_name + sizeof(SHM_NAME_PREFIX) - 1, &end, 10);
		if (pid <= 0 || *end != '-' || pid == (long)getpid())
			continue;
		snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
		if (stat(path, &st) != 0 || st.st_uid != geteuid())
			continue;
		if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
			shm_unlink(e->d_name);
	}
	closedir(d);
}

static int shm_name(struct sd_prov *p)
{
	char name[96];
	char *s;

	if (strcmp(p->ch.prov, "shm") || p->info->addr_format != FI_ADDR_STR)
		return 0;
	shm_reap();
	snprintf(name, sizeof(name), "fi_shm://" SHM_NAME_PREFIX "%ld-%016llx", (long)getpid(),
		 (unsigned long long)p->uid);
	s = strdup(name);
	if (!s)
		return -FI_ENOMEM;
	free(p->info->src_addr);
	p->info->src_addr = s;
	p->info->src_addrlen = strlen(s) + 1;
	return 0;
}

/* ------------------------------------------------------------ open / close */
static doca_error_t o_close(struct sd_prov *p);

static struct fi_info *get_infos(struct sd_prov_why *why, int *rc_out)
{
	struct fi_info *h = OFI.dupinfo(NULL), *a = NULL, *b = NULL;
	int rc;

	if (!h)
		return NULL;
	ofi_fill_hints(h);
	h->caps |= FI_ATOMIC;
	rc = OFI.getinfo(OFI_API_VERSION, NULL, NULL, 0, h, &a);
	if (rc)
		a = NULL;
	h->caps &= ~(uint64_t)FI_ATOMIC;
	rc = OFI.getinfo(OFI_API_VERSION, NULL, NULL, 0, h, &b);
	if (rc)
		b = NULL;
	OFI.freeinfo(h);
	*rc_out = rc;
	if (!a)
		return b;
	{
		struct fi_info *t = a;
		while (t->next)
			t = t->next;
		t->next = b;
	}
	(void)why;
	return a;
}

static doca_error_t o_open(const struct sd_prov_open_params *prm, struct sd_prov **out, struct sd_prov_why *why)
{
	struct sd_prov *p;
	int rc = 0;
	doca_error_t e;
	struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_FD, .size = 0 };
	struct fi_eq_attr eqa = { .wait_obj = FI_WAIT_FD, .size = 64 };

	if (!prm || !prm->cbs || !out)
		return DOCA_ERROR_INVALID_VALUE;
	e = ofi_load(why);
	if (e)
		return e;
	p = calloc(1, sizeof(*p));
	if (!p)
		return DOCA_ERROR_NO_MEMORY;
	p->cbs = *prm->cbs;
	p->timeout_ns = (uint64_t)(prm->timeout_ms ? prm->timeout_ms : 5000) * 1000000ull;
	p->open_flags = prm->flags;
	p->epfd = epoll_create1(EPOLL_CLOEXEC);
	p->bell_fd = -1;
	{
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		p->uid = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
			 (uint64_t)(uintptr_t)p;
		if (!p->uid)
			p->uid = 1;
		p->next_key = (p->uid & 0xffff) << 20;
	}
	p->infos = get_infos(why, &rc);
	if (!p->infos) {
		OFI_WHY(why, "provider ofi: fi_getinfo found no provider with FI_MSG | FI_RMA (%s)%s%s", ofi_str(rc),
			getenv("FI_PROVIDER") ? ", FI_PROVIDER=" : "", getenv("FI_PROVIDER") ? getenv("FI_PROVIDER") : "");
		free(p);
		return DOCA_ERROR_NOT_SUPPORTED;
	}
	if (ofi_negotiate(p->infos, &p->ch)) {
		OFI_WHY(why, "provider ofi: %.200s", p->ch.why);
		OFI.freeinfo(p->infos);
		free(p);
		return DOCA_ERROR_NOT_SUPPORTED;
	}
	p->info = (struct fi_info *)p->ch.info;
	snprintf(p->transport, sizeof(p->transport), "%s", p->ch.prov);
	p->dc_ok = 1;
#define TRY(call, what)                                                                           \
	do {                                                                                      \
		rc = (call);                                                                      \
		if (rc) {                                                                         \
			OFI_WHY(why, "provider ofi (%s): %s: %s", p->ch.prov, what, ofi_str(rc)); \
			goto fail;                                                                \
		}                                                                                 \
	} while (0)
	/* shm 1.17's "fast RMA" (its domain's mr_mode has FI_MR_VIRT_ADDR and the
	 * tx order no RMA bit): a read without remote CQ data / delivery-complete is
	 * done by the requester alone (process_vm_readv of the target's memory) and
	 * the target checks nothing: bounds, rights and revocation of reads were
	 * the requester's check only (test_ofi_provider found it). Asking an RMA
	 * order (send after write) turns it off: every RMA goes through the
	 * target's MR map, as writes did; the order bit itself is not relied on. */
	if (!strcmp(p->ch.prov, "shm") && p->info->tx_attr)
		p->info->tx_attr->msg_order |= FI_ORDER_SAW;
	TRY(OFI.fabric(p->info->fabric_attr, &p->fabric, p), "fi_fabric");
	TRY(fi_domain(p->fabric, p->info, &p->domain, p), "fi_domain");
	if (p->ch.ep_type == FI_EP_MSG) {
		int fd;
		rc = fi_eq_open(p->fabric, &eqa, &p->eq, p);
		if (rc == -FI_ENOSYS || rc == -FI_EINVAL) {
			eqa.wait_obj = FI_WAIT_NONE;
			rc = fi_eq_open(p->fabric, &eqa, &p->eq, p);
		}
		TRY(rc, "fi_eq_open");
		if (eqa.wait_obj == FI_WAIT_FD)
			TRY(ofi_watch_fd(p, &p->eq->fid, &fd), "epoll");
		else
			p->poll_only = 1;
		TRY(ofi_msg_init(p), "the OOB passive endpoint");
	} else {
		struct fi_av_attr ava = { .type = FI_AV_MAP };
		int fd;

		rc = fi_cq_open(p->domain, &cqa, &p->cq, p);
		if (rc == -FI_ENOSYS || rc == -FI_EINVAL) {
			cqa.wait_obj = FI_WAIT_NONE;
			rc = fi_cq_open(p->domain, &cqa, &p->cq, p);
		}
		TRY(rc, "fi_cq_open");
		if (cqa.wait_obj == FI_WAIT_FD)
			TRY(ofi_watch_fd(p, &p->cq->fid, &fd), "epoll");
		else
			p->poll_only = 1;
		TRY(fi_av_open(p->domain, &ava, &p->av, p), "fi_av_open");
		TRY(shm_name(p), "naming the shm endpoint");
		TRY(open_ep(p, p->info, &p->ep), "the RDM endpoint");
		p->name_len = sizeof(p->name);
		TRY(fi_getname(&p->ep->fid, p->name, &p->name_len), "fi_getname");
		p->nrxb = OFI_RX_RDM;
		TRY(ofi_alloc_rx(p, NULL, p->nrxb, &p->rxb), "posting receives");
		/* shm: a transmit endpoint per peer (struct ofi_txe); not where MRs
		 * are bound to one endpoint */
		p->tx_per_peer = !strcmp(p->ch.prov, "shm") && !(p->ch.mr_mode & FI_MR_ENDPOINT) &&
				 !(getenv("SOFTDOCA_OFI_EMULATE") && strstr(getenv("SOFTDOCA_OFI_EMULATE"), "sharedtx"));
		ofi_lockwatch_start(p);
		if (p->poll_only)
			bell_open(p);
	}
	/* atomics: native only where fi_query_atomic says both ops on FI_UINT64 work */
	if (p->ch.atomic_cap) {
		struct fi_atomic_attr aa;
		p->atomic_native = fi_query_atomic(p->domain, FI_UINT64, FI_SUM, &aa, FI_FETCH_ATOMIC) == 0 &&
				   fi_query_atomic(p->domain, FI_UINT64, FI_CSWAP, &aa, FI_COMPARE_ATOMIC) == 0;
	}
#undef TRY
	/* test knob: force the emulations where the provider has the native path
	 * (SOFTDOCA_OFI_EMULATE=atomic,wimm,order,mrlocal), so they are tested here */
	{
		const char *em = getenv("SOFTDOCA_OFI_EMULATE");
		if (em && strstr(em, "atomic"))
			p->atomic_native = 0;
		if (em && strstr(em, "wimm"))
			p->ch.native_cq_data = 0;
		if (em && strstr(em, "order"))
			p->ch.order_saw = p->ch.order_raw = 0;
		if (em && strstr(em, "mrlocal")) /* descriptors everywhere, as FI_MR_LOCAL providers need */
			p->ch.mr_local = 1;
	}
	*out = p;
	return DOCA_SUCCESS;
fail:
	e = ofi_err(rc);
	o_close(p);
	return e == DOCA_SUCCESS ? DOCA_ERROR_INITIALIZATION : (e == DOCA_ERROR_INVALID_VALUE ? DOCA_ERROR_INITIALIZATION : e);
}

static doca_error_t o_close(struct sd_prov *p)
{
	if (!p)
		return DOCA_ERROR_INVALID_VALUE;
	if (p->nmr || p->nrkey)
		return DOCA_ERROR_IN_USE;
	while (p->listeners)
		ofi_listener_close(p->listeners);
	while (p->conns) {
		struct sd_prov_conn *c = p->conns;
		ofi_msg_ep_teardown(c); /* MSG: its endpoint closed first, then its ops freed */
		ofi_fail_ops(c, DOCA_ERROR_CONNECTION_RESET, 1); /* no callbacks: reported flags set quietly */
		ofi_conn_free(c);
	}
	while (p->txes) /* their connections are gone: closes the own endpoints, frees their orphans */
		txe_free(p, p->txes);
	if (p->ep)
		fi_close(&p->ep->fid);
	p->ep = NULL;
	/* the endpoint is gone: nothing completes into the orphans any more */
	while (p->orphans) {
		struct oop *o = p->orphans;
		p->orphans = o->next;
		ofi_free_op(p, o);
	}
	if (p->rxb)
		ofi_free_rx(p, p->rxb, p->nrxb);
	if (p->oob_pep)
		fi_close(&p->oob_pep->fid);
	if (p->av)
		fi_close(&p->av->fid);
	ofi_av_forget(p);
	if (p->cq)
		fi_close(&p->cq->fid);
	if (p->eq)
		fi_close(&p->eq->fid);
	if (p->domain)
		fi_close(&p->domain->fid);
	if (p->fabric)
		fi_close(&p->fabric->fid);
	if (p->infos)
		OFI.freeinfo(p->infos);
	ofi_lockwatch_stop(p); /* last: a close that spun on a dead peer's lock needed it */
	ofi_awake_close(p);
	if (p->bell_fd >= 0)
		close(p->bell_fd);
	if (p->epfd >= 0)
		close(p->epfd);
	free(p->slots);
	free(p->gens);
	free(p);
	return DOCA_SUCCESS;
}

static void o_query_caps(struct sd_prov *p, struct sd_prov_caps *caps)
{
	memset(caps, 0, sizeof(*caps));
	snprintf(caps->name, sizeof(caps->name), OFI_PROV_NAME);
	snprintf(caps->version, sizeof(caps->version), "%u.%u", FI_MAJOR(OFI.version), FI_MINOR(OFI.version));
	if (!p)
		return;
	snprintf(caps->transport, sizeof(caps->transport), "%s", p->transport);
	caps->enforce = p->ch.enforce;
	caps->flags = SD_PROV_CAP_OOB | SD_PROV_CAP_FD | SD_PROV_CAP_CHECK_REQUESTER |
		      (p->atomic_native ? SD_PROV_CAP_ATOMIC_NATIVE : 0) |
		      (p->ch.native_cq_data ? SD_PROV_CAP_REMOTE_CQ_DATA : 0) | (p->ch.cm ? SD_PROV_CAP_CM : 0);
	/* manual data progress (tcp, shm here): the target's engine must progress */
	if (p->info->domain_attr->data_progress == FI_PROGRESS_AUTO && p->atomic_native)
		caps->flags |= SD_PROV_CAP_ONE_SIDED_NO_TARGET;
	if (p->poll_only && p->bell_fd < 0)
		caps->flags |= SD_PROV_CAP_POLLED;
	if (p->bell_fd >= 0) /* shm's doorbell: an armed instance is rung by its peers */
		caps->flags |= SD_PROV_CAP_ARM_SIGNALS;
	caps->max_msg = p->ch.max_msg < (1ull << 30) ? p->ch.max_msg : (1ull << 30);
	caps->max_iov = OFI_MAX_IOV;
	caps->max_priv = p->ch.cm ? (uint32_t)p->max_priv : 0;
	caps->thread_mode = 0;
}

/* ------------------------------------------------------------ progress */
static int o_progress(struct sd_prov *p)
{
	int n = 0;

	if (!p)
		return 0;
	p->in_progress++;
	p->kick = 0;
	if (p->bell_fd >= 0)
		bell_drain(p); /* before the CQ read: what rang is served by it */
	if (p->lockwatch)
		lock_releases(p);
	if (p->eq)
		n += ofi_read_eq(p);
	if (p->cq) {
		int k = ofi_read_cq(p, p->cq);

		n += k;
		if (p->txes && k < 64 * 16) /* the CQ was read empty: nothing of a closed txe is left in it */
			txe_gc(p);
	}
	for (struct sd_prov_conn *c = p->conns, *nx; c; c = nx) {
		nx = c->next;
		if (c->cq && c->cq != p->cq)
			n += ofi_read_cq(p, c->cq);
	}
	if (p->rx_unposted > 0)
		ofi_repost_rx(p);
	n += ofi_awake_served(p); /* one-sided operations served: no completion here tells of them */
	n += ofi_conn_deadlines(p);
	for (struct sd_prov_conn *c = p->conns, *nx; c; c = nx) {
		nx = c->next;
		n += ofi_conn_pump(c); /* may free c */
	}
	if (p->bell_fd >= 0) {
		uint64_t now = ofi_now_ns();

		bell_probe(p, now);
		ofi_awake_owed(p, now); /* rings left out whose operations are still outstanding */
		ofi_bell_flush(p); /* rings for what this round posted, answers to what rang */
	}
	p->in_progress--;
	return n;
}

static doca_error_t o_get_fd(struct sd_prov *p, int *fd)
{
	if (!p || !fd)
		return DOCA_ERROR_INVALID_VALUE;
	*fd = p->epfd;
	return DOCA_SUCCESS;
}

static doca_error_t o_arm(struct sd_prov *p, int *max_sleep_ms)
{
	struct fid *fids[64];
	int n = 0;
	uint64_t now = ofi_now_ns(), next = UINT64_MAX;

	if (!p)
		return DOCA_ERROR_INVALID_VALUE;
	if (p->kick)
		return DOCA_ERROR_AGAIN;
	if (p->owed) {
		uint64_t due = ofi_awake_owed(p, now);

		if (p->bells_due)
			ofi_bell_flush(p);
		next = due; /* look again when the next owed ring is due */
	}
	if (p->eq)
		fids[n++] = &p->eq->fid;
	if (p->cq)
		fids[n++] = &p->cq->fid;
	for (struct sd_prov_conn *c = p->conns; c; c = c->next) {
		if (c->cq && c->cq != p->cq && c->cq_fd >= 0 && n < 64)
			fids[n++] = &c->cq->fid;
		if (c->deadline_ns && c->deadline_ns < next)
			next = c->deadline_ns;
		if (c->out_head && c->out_head->start_ns + p->timeout_ns < next)
			next = c->out_head->start_ns + p->timeout_ns;
		if (c->ev_pending || c->user_closed ||
		    (c->pend_head && !(c->pend_head->wait_writes && c->writes_out) &&
		     !(c->pend_head->wait_all && c->out_head)) ||
		    (c->rxq_head && !c->rx_held && !c->rx_placing && c->state == CS_ESTABLISHED))
			return DOCA_ERROR_AGAIN;
	}
	if (n && !p->poll_only && fi_trywait(p->fabric, fids, n) != 0)
		return DOCA_ERROR_AGAIN;
	if (max_sleep_ms) {
		int64_t ms, bound = -1;

		if (p->poll_only) {
			/* no wait object: the doorbell wakes this side for what peers post,
			 * and answers what it posted once the peer progressed. The 1 ms
			 * bound stays where no doorbell is known (none here, a peer without
			 * one or out of reach) while something is outstanding; with
			 * doorbells 10 ms while ops are outstanding (a safety net: shm's
			 * multi-round protocols continue inside progress, and a ring may
			 * be lost); idle: none (deadlines and liveness probes only). */
			if (p->bell_fd < 0)
				bound = 1;
			for (struct sd_prov_conn *c = p->conns; c && bound != 1; c = c->next)
				if (c->out_head || c->pend_head || c->state == CS_CONNECTING || c->state == CS_CLOSING)
					bound = c->txe && c->txe->bell ? 10 : 1;
			if (bound != 1 && p->orphans)
				bound = 10;
			if (bound < 0 && p->bell_fd >= 0 && p->txes && p->next_probe_ns < next)
				next = p->next_probe_ns;
		}
		ms = next == UINT64_MAX ? -1 : (int64_t)((next > now ? next - now : 0) / 1000000ull) + 1;
		if (bound >= 0 && (ms < 0 || ms > bound))
			ms = bound;
		*max_sleep_ms = (int)ms;
	}
	return DOCA_SUCCESS;
}

/* ------------------------------------------------------------ memory */
#define ACCESS_MASK 0x7fu
#define RKEY_BODY 48 /* base, len, access u32, flags u32 (bit0 offset mode), owner uid, key, rsv */

static doca_error_t o_reg_mem(struct sd_prov *p, void *addr, size_t len, uint32_t access, struct sd_prov_mr **out,
			      void **blob, size_t *blob_len)
{
	struct sd_prov_mr *mr;
	uint64_t acc = FI_READ | FI_WRITE | FI_SEND | FI_RECV;
	uint8_t *b;
	uint32_t total = SD_PROV_BLOB_HDR_LEN + RKEY_BODY;
	int rc;

	if (!p || !addr || !len || (access & ~ACCESS_MASK) || !out || !blob || !blob_len)
		return DOCA_ERROR_INVALID_VALUE;
	if (access & DOCA_ACCESS_FLAG_RDMA_READ)
		acc |= FI_REMOTE_READ;
	if (access & DOCA_ACCESS_FLAG_RDMA_WRITE)
		acc |= FI_REMOTE_WRITE;
	if (access & DOCA_ACCESS_FLAG_RDMA_ATOMIC)
		acc |= FI_REMOTE_READ | FI_REMOTE_WRITE;
	mr = calloc(1, sizeof(*mr));
	b = malloc(total);
	if (!mr || !b) {
		free(mr);
		free(b);
		return DOCA_ERROR_NO_MEMORY;
	}
	rc = ofi_reg_tmp(p, addr, len, acc, &mr->mr, NULL);
	if (rc) {
		free(mr);
		free(b);
		return ofi_err(rc);
	}
	mr->addr = addr;
	mr->len = len;
	mr->access = access;
	mr->key = fi_mr_key(mr->mr);
	if (mr->key == FI_KEY_NOTAVAIL) { /* FI_MR_RAW: not negotiated, cannot happen */
		fi_close(&mr->mr->fid);
		free(mr);
		free(b);
		return DOCA_ERROR_NOT_SUPPORTED;
	}
	sd_prov_blob_begin(b, OFI_PROV_NAME, SD_PROV_BLOB_RKEY, total);
	ofi_put64(b + 32, (uint64_t)(uintptr_t)addr);
	ofi_put64(b + 40, len);
	ofi_put32(b + 48, access);
	ofi_put32(b + 52, p->ch.offset_mode ? 1u : 0u);
	ofi_put64(b + 56, p->uid);
	ofi_put64(b + 64, mr->key);
	ofi_put64(b + 72, 0);
	sd_prov_blob_seal(b, total);
	mr->next = p->mrs;
	p->mrs = mr;
	p->nmr++;
	*out = mr;
	*blob = b;
	*blob_len = total;
	return DOCA_SUCCESS;
}

static doca_error_t o_dereg_mem(struct sd_prov *p, struct sd_prov_mr *mr)
{
	int rc;

	if (!p || !mr)
		return DOCA_ERROR_INVALID_VALUE;
	for (struct sd_prov_mr **pp = &p->mrs; *pp; pp = &(*pp)->next)
		if (*pp == mr) {
			*pp = mr->next;
			break;
		}
	rc = fi_close(&mr->mr->fid);
	free(mr);
	p->nmr--;
	return ofi_err(rc);
}

static doca_error_t o_rkey_import(struct sd_prov *p, const void *blob, size_t len, struct sd_prov_rkey **out,
				  uint64_t *base, uint64_t *rlen, uint32_t *access, struct sd_prov_why *why)
{
	const uint8_t *b;
	size_t bl;
	doca_error_t e;
	struct sd_prov_rkey *rk;
	uint64_t rb, rl, owner;
	uint32_t acc, flags;

	if (!p || !out)
		return DOCA_ERROR_INVALID_VALUE;
	e = sd_prov_blob_check(blob, len, OFI_PROV_NAME, SD_PROV_BLOB_RKEY, &b, &bl, why);
	if (e)
		return e;
	if (bl != RKEY_BODY) {
		OFI_WHY(why, "ofi remote key blob: body of %zu bytes, %u expected", bl, RKEY_BODY);
		return DOCA_ERROR_INVALID_VALUE;
	}
	rb = ofi_get64(b);
	rl = ofi_get64(b + 8);
	acc = ofi_get32(b + 16);
	flags = ofi_get32(b + 20);
	owner = ofi_get64(b + 24);
	if (rl == 0 || rb + rl < rb || (acc & ~ACCESS_MASK) || owner == 0 || (flags & ~1u) ||
	    (int)(flags & 1u) != p->ch.offset_mode) {
		OFI_WHY(why, "ofi remote key blob: inconsistent fields (range 0x%llx+%llu, access 0x%x, flags 0x%x; "
			"this side uses %s)", (unsigned long long)rb, (unsigned long long)rl, acc, flags,
			p->ch.offset_mode ? "offsets" : "virtual addresses");
		return DOCA_ERROR_INVALID_VALUE;
	}
	rk = calloc(1, sizeof(*rk));
	if (!rk)
		return DOCA_ERROR_NO_MEMORY;
	rk->base = rb;
	rk->len = rl;
	rk->access = acc;
	rk->owner = owner;
	rk->key = ofi_get64(b + 32);
	rk->offset_mode = (int)(flags & 1u);
	p->nrkey++;
	*out = rk;
	if (base)
		*base = rb;
	if (rlen)
		*rlen = rl;
	if (access)
		*access = acc;
	return DOCA_SUCCESS;
}

static void o_rkey_release(struct sd_prov *p, struct sd_prov_rkey *rk)
{
	if (!p || !rk)
		return;
	free(rk);
	p->nrkey--;
}

/* ------------------------------------------------------------ the table */
static void o_conn_set_ctx(struct sd_prov_conn *c, void *ctx)
{
	if (c)
		c->ctx = ctx;
}

static void o_conn_transport(struct sd_prov_conn *c, char *out, size_t n)
{
	if (out && n)
		snprintf(out, n, "%s", c ? c->p->transport : "");
}

doca_error_t ofi_op_write(struct sd_prov_conn *, const struct sd_prov_iov *, int, struct sd_prov_rkey *, uint64_t, void *);
doca_error_t ofi_op_read(struct sd_prov_conn *, const struct sd_prov_iov *, int, struct sd_prov_rkey *, uint64_t, void *);
doca_error_t ofi_op_fadd(struct sd_prov_conn *, struct sd_prov_rkey *, uint64_t, uint64_t, uint64_t *, void *);
doca_error_t ofi_op_cswap(struct sd_prov_conn *, struct sd_prov_rkey *, uint64_t, uint64_t, uint64_t, uint64_t *, void *);
doca_error_t ofi_op_send(struct sd_prov_conn *, const struct sd_prov_iov *, int, const uint32_t *, void *);
doca_error_t ofi_op_write_imm(struct sd_prov_conn *, const struct sd_prov_iov *, int, struct sd_prov_rkey *, uint64_t,
			      uint32_t, void *);
doca_error_t ofi_op_flush(struct sd_prov_conn *, void *);
void ofi_op_rx_resume(struct sd_prov_conn *);

/* Diagnostics (softdoca_debug_counter("provider:<name>")): "live_conns" (connections of the instance, closed
 * ones included until freed), "live_eps" (MSG: the connections' own endpoints, each with its CQ and its
 * OFI_RX_MSG receive buffers; -1 under RDM), "conn_requests" (peers' connection requests kept, each holding
 * the provider's handle: tcp, an accepted socket), "conns_new" (open connections that never got the peer's
 * address: conn_connect not called), "txe_wedged" (RDM: transmit endpoints wedged so far, each replaced for
 * its peer: a failed connection left ops the fabric still holds). */
static long o_counter(struct sd_prov *p, const char *name)
{
	int k = !strcmp(name, "live_conns")      ? 1
		: !strcmp(name, "live_eps")      ? 2
		: !strcmp(name, "conn_requests") ? 3
		: !strcmp(name, "conns_new")     ? 4
						 : 0;
	long n = 0;

	if (!strcmp(name, "txe_wedged"))
		return p->ch.ep_type == FI_EP_RDM ? p->nwedged : -1;
	if (!k || (k == 2 && p->ch.ep_type != FI_EP_MSG))
		return -1;
	for (struct sd_prov_conn *c = p->conns; c; c = c->next)
		n += k == 1 || (k == 2 && c->ep && c->ep != p->ep) || (k == 3 && c->info) ||
		     (k == 4 && c->state == CS_NEW && !c->user_closed);
	return n;
}

const struct sd_provider_ops sd_provider_ofi = {
	.name = OFI_PROV_NAME,
	.abi = SD_PROV_ABI,
	.probe = o_probe,
	.open = o_open,
	.close = o_close,
	.query_caps = o_query_caps,
	.progress = o_progress,
	.get_fd = o_get_fd,
	.arm = o_arm,
	.reg_mem = o_reg_mem,
	.dereg_mem = o_dereg_mem,
	.rkey_import = o_rkey_import,
	.rkey_release = o_rkey_release,
	.conn_create = ofi_conn_create,
	.conn_export = ofi_conn_export,
	.conn_connect = ofi_conn_connect,
	.listen = ofi_listen,
	.listener_close = ofi_listener_close,
	.accept = ofi_accept,
	.reject = ofi_reject,
	.connect_addr = ofi_connect_addr,
	.conn_set_ctx = o_conn_set_ctx,
	.conn_transport = o_conn_transport,
	.conn_close = ofi_conn_close,
	.closing = ofi_conn_closing,
	.write = ofi_op_write,
	.read = ofi_op_read,
	.atomic_fadd = ofi_op_fadd,
	.atomic_cswap = ofi_op_cswap,
	.send = ofi_op_send,
	.write_imm = ofi_op_write_imm,
	.flush = ofi_op_flush,
	.rx_resume = ofi_op_rx_resume,
	.live = ofi_live,
	.counter = o_counter,
};
