/*
 * softdoca provider `ucx`: the provider interface (../provider.h) on UCP.
 *
 * libucp.so.0 is dlopened at the first probe/open, so softdoca builds and runs
 * where UCX is absent; the build needs only <ucp/api/ucp.h> (libucx-dev) for
 * the types and constants.
 *
 * Instance: one ucp_context + one ucp_worker (RMA | AMO64 | AM | WAKEUP),
 * UCS_THREAD_MODE_SERIALIZED: the provider contract has the caller serialize
 * every call (softdoca's engine lock is held by the engine thread while it
 * progresses and by application threads while they submit), so UCP's own
 * locking (MULTI) would only add a lock per call; SINGLE is not enough since
 * the calls come from more than one thread.
 * UCX picks the transports; UCX_TLS / UCX_NET_DEVICES are read by UCX from the
 * environment and never set here.
 *
 * Messages: one AM id (SD_UCX_AM_ID) with a fixed header (struct am_hdr):
 * connection handshakes (OOB HELLO; CM REQ / ACCEPT / REJECT / RTU), sends,
 * the immediate of write-with-immediate, BYE. Every header names the
 * receiver's connection id, so several connections between the same two
 * workers are kept apart; sends carry a per-connection sequence and the
 * receiver delivers in that order whatever the lanes did.
 *
 * Endpoints: the connections between two instances share one endpoint, their
 * link (see "Links": UCP pairs address-made endpoints in creation order).
 * Connections within one instance and CM connections have their own.
 *
 * Ordering: UCP orders neither RMA against AM nor puts' remote completion
 * against anything. So a connection tracks whether puts were issued since its
 * last ucp_ep_flush_nbx ("dirty"); a send, the immediate of a
 * write-with-immediate, a read or an atomic that follows puts waits (in a FIFO
 * gate, preserving their order) until a flush issued after those puts
 * completed, i.e. the data is at the target. A write completes (DOCA: the
 * data is at the target) when its puts completed locally and a flush issued
 * after them completed; one flush per progress round covers every write of
 * the round.
 *
 * Remote keys: the rkey blob carries softdoca's base / length / access and the
 * owner instance's uid next to ucp_rkey_pack's bytes; ops are checked against
 * them before they leave (tcp, shared memory and cma enforce nothing at the
 * target, see caps). ucp_ep_rkey_unpack is per endpoint, so imported keys are
 * unpacked lazily per connection and cached on it.
 *
 * Failure: every endpoint uses UCP_ERR_HANDLING_MODE_PEER; its error callback
 * fails the connection (force close: UCP completes its outstanding requests
 * with an error). Connection set-up and every outstanding op also have a
 * deadline (timeout_ms): past it the connection is failed the same way, so
 * nothing waits on a peer that died where UCX does not notice (shared memory).
 */
#define _GNU_SOURCE
#include "../provider.h"

#include <ucp/api/ucp.h>

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#define PROV_NAME "ucx"
#define SD_UCX_AM_ID 0x5d
#define MAX_IOV 16
#define RKEY_BODY_FIXED 40   /* base, len, access, rsv, owner uid, packed len(u32)+rsv(u32) */
#define ADDR_BODY_FIXED 24   /* owner uid, conn id, addr len u32, host id u32 (0: unknown) */
#define AM_MAGIC 0x41554453u /* "SDUA" */

/* ------------------------------------------------------------------ dlopen */
static struct ucx_api {
	int loaded;
	char err[200];
	unsigned major, minor, release;
	ucs_status_t (*config_read)(const char *, const char *, ucp_config_t **);
	void (*config_release)(ucp_config_t *);
	ucs_status_t (*init_version)(unsigned, unsigned, const ucp_params_t *, const ucp_config_t *, ucp_context_h *);
	void (*cleanup)(ucp_context_h);
	ucs_status_t (*worker_create)(ucp_context_h, const ucp_worker_params_t *, ucp_worker_h *);
	void (*worker_destroy)(ucp_worker_h);
	ucs_status_t (*worker_get_address)(ucp_worker_h, ucp_address_t **, size_t *);
	void (*worker_release_address)(ucp_worker_h, ucp_address_t *);
	unsigned (*worker_progress)(ucp_worker_h);
	ucs_status_t (*worker_get_efd)(ucp_worker_h, int *);
	ucs_status_t (*worker_arm)(ucp_worker_h);
	ucs_status_t (*worker_set_am_recv_handler)(ucp_worker_h, const ucp_am_handler_param_t *);
	ucs_status_t (*ep_create)(ucp_worker_h, const ucp_ep_params_t *, ucp_ep_h *);
	ucs_status_ptr_t (*ep_close_nbx)(ucp_ep_h, const ucp_request_param_t *);
	ucs_status_ptr_t (*ep_flush_nbx)(ucp_ep_h, const ucp_request_param_t *);
	void (*ep_print_info)(ucp_ep_h, FILE *);
	ucs_status_t (*mem_map)(ucp_context_h, const ucp_mem_map_params_t *, ucp_mem_h *);
	ucs_status_t (*mem_unmap)(ucp_context_h, ucp_mem_h);
	ucs_status_t (*rkey_pack)(ucp_context_h, ucp_mem_h, void **, size_t *);
	void (*rkey_buffer_release)(void *);
	ucs_status_t (*ep_rkey_unpack)(ucp_ep_h, const void *, ucp_rkey_h *);
	void (*rkey_destroy)(ucp_rkey_h);
	ucs_status_ptr_t (*put_nbx)(ucp_ep_h, const void *, size_t, uint64_t, ucp_rkey_h, const ucp_request_param_t *);
	ucs_status_ptr_t (*get_nbx)(ucp_ep_h, void *, size_t, uint64_t, ucp_rkey_h, const ucp_request_param_t *);
	ucs_status_ptr_t (*atomic_op_nbx)(ucp_ep_h, ucp_atomic_op_t, const void *, size_t, uint64_t, ucp_rkey_h,
					  const ucp_request_param_t *);
	ucs_status_ptr_t (*am_send_nbx)(ucp_ep_h, unsigned, const void *, size_t, const void *, size_t,
					const ucp_request_param_t *);
	ucs_status_ptr_t (*am_recv_data_nbx)(ucp_worker_h, void *, void *, size_t, const ucp_request_param_t *);
	void (*am_data_release)(ucp_worker_h, void *);
	void (*request_free)(void *);
	ucs_status_t (*listener_create)(ucp_worker_h, const ucp_listener_params_t *, ucp_listener_h *);
	void (*listener_destroy)(ucp_listener_h);
	ucs_status_t (*listener_query)(ucp_listener_h, ucp_listener_attr_t *);
	ucs_status_t (*listener_reject)(ucp_listener_h, ucp_conn_request_h);
	ucs_status_t (*conn_request_query)(ucp_conn_request_h, ucp_conn_request_attr_t *);
	void (*get_version)(unsigned *, unsigned *, unsigned *);
	const char *(*status_string)(ucs_status_t);
} U;
static pthread_once_t u_once = PTHREAD_ONCE_INIT;

static void u_load(void)
{
	void *h = dlopen("libucp.so.0", RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		snprintf(U.err, sizeof(U.err), "libucp.so.0 not found (%s): install UCX (Debian: libucx0)", dlerror());
		return;
	}
#define SYM(field, name)                                                                              \
	do {                                                                                          \
		U.field = (__typeof__(U.field))dlsym(h, name);                                         \
		if (!U.field) {                                                                       \
			snprintf(U.err, sizeof(U.err), "libucp.so.0 lacks %s: UCX >= 1.12 needed", name); \
			return;                                                                       \
		}                                                                                     \
	} while (0)
	SYM(config_read, "ucp_config_read");
	SYM(config_release, "ucp_config_release");
	SYM(init_version, "ucp_init_version");
	SYM(cleanup, "ucp_cleanup");
	SYM(worker_create, "ucp_worker_create");
	SYM(worker_destroy, "ucp_worker_destroy");
	SYM(worker_get_address, "ucp_worker_get_address");
	SYM(worker_release_address, "ucp_worker_release_address");
	SYM(worker_progress, "ucp_worker_progress");
	SYM(worker_get_efd, "ucp_worker_get_efd");
	SYM(worker_arm, "ucp_worker_arm");
	SYM(worker_set_am_recv_handler, "ucp_worker_set_am_recv_handler");
	SYM(ep_create, "ucp_ep_create");
	SYM(ep_close_nbx, "ucp_ep_close_nbx");
	SYM(ep_flush_nbx, "ucp_ep_flush_nbx");
	SYM(ep_print_info, "ucp_ep_print_info");
	SYM(mem_map, "ucp_mem_map");
	SYM(mem_unmap, "ucp_mem_unmap");
	SYM(rkey_pack, "ucp_rkey_pack");
	SYM(rkey_buffer_release, "ucp_rkey_buffer_release");
	SYM(ep_rkey_unpack, "ucp_ep_rkey_unpack");
	SYM(rkey_destroy, "ucp_rkey_destroy");
	SYM(put_nbx, "ucp_put_nbx");
	SYM(get_nbx, "ucp_get_nbx");
	SYM(atomic_op_nbx, "ucp_atomic_op_nbx");
	SYM(am_send_nbx, "ucp_am_send_nbx");
	SYM(am_recv_data_nbx, "ucp_am_recv_data_nbx");
	SYM(am_data_release, "ucp_am_data_release");
	SYM(request_free, "ucp_request_free");
	SYM(listener_create, "ucp_listener_create");
	SYM(listener_destroy, "ucp_listener_destroy");
	SYM(listener_query, "ucp_listener_query");
	SYM(listener_reject, "ucp_listener_reject");
	SYM(conn_request_query, "ucp_conn_request_query");
	SYM(get_version, "ucp_get_version");
	SYM(status_string, "ucs_status_string");
#undef SYM
	U.get_version(&U.major, &U.minor, &U.release);
	U.loaded = 1; /* never dlclosed: UCX keeps global state (memory hooks, modules) */
}

static doca_error_t u_probe(struct sd_prov_why *why)
{
	pthread_once(&u_once, u_load);
	if (!U.loaded) {
		if (why)
			snprintf(why->msg, sizeof(why->msg), "provider ucx: %s", U.err);
		return DOCA_ERROR_NOT_SUPPORTED;
	}
	return DOCA_SUCCESS;
}

/* ------------------------------------------------------------------ objects */
enum op_type { OP_WRITE = 1, OP_READ, OP_FADD, OP_CSWAP, OP_SEND, OP_WIMM, OP_FLUSH, OP_CTRL, OP_IFLUSH };

struct am_hdr {
	uint32_t magic;
	uint8_t type;    /* enum am_type */
	uint8_t flags;   /* AMF_* */
	uint16_t priv_len;
	uint32_t imm;
	uint32_t rsv;
	uint64_t dst;    /* the receiver's connection id (0: CM request) */
	uint64_t src;    /* the sender's connection id */
	uint64_t uid;    /* the sender instance's uid */
	uint64_t seq;    /* SEND / WIMM: per-connection sequence */
};
enum am_type { AM_HELLO = 1, AM_CM_REQ, AM_CM_ACCEPT, AM_CM_REJECT, AM_CM_RTU, AM_SEND, AM_WIMM, AM_BYE,
	       AM_UNLINK, AM_UNLINK_OK, AM_UNLINK_BUSY };
#define AMF_IMM 1u

struct uconn;
struct uop {
	struct uop *next, *prev;   /* conn's outstanding list, then the done list */
	struct uop *gnext;         /* gate queue / await list */
	struct sd_prov *p;
	struct uconn *c;
	void *op_ctx;
	enum op_type type;
	int pending;               /* sub-requests in flight (+1 while issuing) */
	int gate_ref;              /* write-with-immediate: its guard is held until the gate issues it */
	int gated;                 /* waits in the gate queue for flush wait_seq */
	int need_remote;           /* write: done once a flush issued after it completed */
	int on_list;
	int early;                 /* reported (failed) before UCX gave its requests back */
	int orphan;                /* reported and drained; freed when pending reaches 0 */
	doca_error_t status;
	uint64_t wait_seq;         /* flush sequence this op waits for */
	uint64_t start_ns;
	uint64_t flush_seq;        /* OP_IFLUSH: its sequence */
	/* gated issue parameters */
	struct am_hdr hdr;
	ucp_dt_iov_t uiov[MAX_IOV];
	int niov;
	size_t total;
	struct sd_prov_rkey *rk;
	uint64_t raddr;
	uint64_t operand, cmp_result;
	uint64_t *result;
	uint8_t priv[SD_PROV_MAX_PRIV];
	struct sd_prov_iov liov[MAX_IOV]; /* read: the local list */
};

struct urx {                      /* an incoming message held by the provider */
	struct urx *next;
	struct am_hdr h;
	void *data;                   /* eager: persistent UCX data or our copy; rndv: the descriptor */
	size_t len;
	int rndv, ucx_owned;
};

enum cstate { CS_NEW = 0, CS_CONNECTING, CS_CM_WAIT_REQ, CS_CM_REQUESTED, CS_CM_ACCEPTED, CS_ESTABLISHED,
	      CS_FAILED, CS_CLOSING };

/* The one endpoint from this instance to another instance's worker, shared by every
 * connection between the two that was set up from worker addresses (see "Links"). */
enum lstate { LK_OPEN = 0, LK_UNLINKING, LK_CLOSING };
struct ulink {
	struct ulink *next;
	struct sd_prov *p;
	uint64_t uid;                 /* the peer instance */
	uint64_t nonce;               /* names this link in UNLINK / OK / BUSY */
	ucp_ep_h ep;
	void *close_req;
	enum lstate state;
	int refs;                     /* connections using ep */
	int same_host;
	int sends;                    /* UNLINK / answers UCX still holds */
	int force;                    /* LK_CLOSING: close the ep without flushing it */
	uint64_t deadline_ns;         /* UNLINKING: the answer's; OPEN and idle: when to ask again */
};

struct rkcache {
	struct sd_prov_rkey *rk;
	ucp_rkey_h h;
};

struct uconn {
	struct uconn *next, *prev;    /* instance's list */
	struct sd_prov *p;
	void *ctx;
	uint64_t id, peer_id, peer_uid;
	enum cstate state;
	int is_cm, cm_client, connected_local, hello_seen, closed_by_user, event_failed_sent;
	int same_host;                /* ep without UCX peer-failure handling, so UCX may use shared memory */
	ucp_ep_h ep;                  /* its own (CM, loopback) or its link's */
	struct ulink *link;           /* set up from worker addresses: the shared endpoint it uses */
	uint8_t *paddr;               /* waiting for its link (UNLINKING): the peer's worker address */
	void *close_req;              /* ucp_ep_close_nbx in flight */
	uint64_t close_seq;           /* closing: force-close once this flush (after BYE / REJECT) is done */
	uint64_t deadline_ns;         /* set-up deadline */
	struct sd_prov_listener *listener;
	/* tx */
	uint64_t tx_seq;
	int dirty;                    /* puts since the last flush issued */
	uint64_t flush_issued, flush_done;
	int flush_inflight;
	struct uop *outstanding;      /* list head (oldest first) */
	struct uop *outstanding_tail;
	struct uop *gate_head, *gate_tail;
	struct uop *await_head;       /* writes waiting for a flush */
	/* rx */
	uint64_t rx_expect;
	struct urx *rxq;              /* sorted by seq */
	int rx_held, rx_placing, kicked;
	/* CM */
	uint8_t priv[SD_PROV_MAX_PRIV];
	size_t priv_len;
	int cm_pending_event;         /* request / accept / reject / rtu / hello seen, to report */
	int pending_ev;               /* SD_PROV_EV_* to emit in pump */
	doca_error_t fail_status;
	enum sd_prov_fail fail_reason;
	char why[160];
	struct rkcache *rkc;
	int nrkc, caprkc;
	char transport[64];
	struct sockaddr_storage peer_ss; /* CM server: the client's address */
};

struct sd_prov_mr {
	ucp_mem_h memh;
	void *addr;
	size_t len;
	uint32_t access;
};

struct sd_prov_rkey {
	uint64_t base, len, owner;
	uint32_t access;
	size_t packed_len;
	uint8_t packed[];
};

struct sd_prov_listener {
	struct sd_prov *p;
	ucp_listener_h l;
	void *ctx;
};

struct sd_prov {
	struct sd_prov_cbs cbs;
	uint64_t timeout_ns;
	uint64_t uid;
	uint32_t host;             /* host_id(): same value = shared memory reaches the peer */
	ucp_context_h ctx;
	ucp_worker_h worker;
	int efd;
	struct uconn *conns;
	struct ulink *links;
	int link_waiters;          /* connections waiting for a link that is being unlinked */
	struct uconn **slots;
	uint32_t nslots;
	uint32_t *gens;
	struct uop *done_head, *done_tail;
	struct uop *free_ops;
	struct uop *orphans;       /* reported ops UCX still holds requests of */
	long nmr, nrkey;
	int kick_any;
	struct uplace *place_done;
	char transport[64];
};

static uint32_t host_id(void);

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define WHY(w, ...) do { if (w) snprintf((w)->msg, sizeof((w)->msg), __VA_ARGS__); } while (0)

static const char *ustr(ucs_status_t s) { return U.status_string ? U.status_string(s) : "?"; }

static doca_error_t map_status(ucs_status_t s)
{
	switch (s) {
	case UCS_OK: return DOCA_SUCCESS;
	case UCS_ERR_NO_MEMORY: return DOCA_ERROR_NO_MEMORY;
	case UCS_ERR_INVALID_PARAM: return DOCA_ERROR_INVALID_VALUE;
	case UCS_ERR_UNREACHABLE: case UCS_ERR_REJECTED: case UCS_ERR_NOT_CONNECTED:
		return DOCA_ERROR_CONNECTION_ABORTED;
	case UCS_ERR_TIMED_OUT: case UCS_ERR_ENDPOINT_TIMEOUT: return DOCA_ERROR_TIME_OUT;
	case UCS_ERR_CONNECTION_RESET: case UCS_ERR_CANCELED: return DOCA_ERROR_CONNECTION_RESET;
	case UCS_ERR_UNSUPPORTED: return DOCA_ERROR_NOT_SUPPORTED;
	case UCS_ERR_MESSAGE_TRUNCATED: return DOCA_ERROR_TOO_BIG;
	default: return DOCA_ERROR_IO_FAILED;
	}
}

/* little-endian codecs for the blobs */
static void put64(uint8_t *b, uint64_t v) { for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i)); }
static void put32(uint8_t *b, uint32_t v) { for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i)); }
static uint64_t get64(const uint8_t *b) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = (v << 8) | b[i]; return v; }
static uint32_t get32(const uint8_t *b) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = (v << 8) | b[i]; return v; }

/* ------------------------------------------------------------------ conns */
static struct uconn *conn_lookup(struct sd_prov *p, uint64_t id)
{
	uint32_t idx = (uint32_t)id, gen = (uint32_t)(id >> 32);

	if (idx == 0 || idx > p->nslots)
		return NULL;
	if (p->gens[idx - 1] != gen || !p->slots[idx - 1])
		return NULL;
	return p->slots[idx - 1];
}

static struct uconn *conn_alloc(struct sd_prov *p, void *ctx)
{
	struct uconn *c = calloc(1, sizeof(*c));
	uint32_t idx = 0;

	if (!c)
		return NULL;
	for (uint32_t i = 0; i < p->nslots; i++)
		if (!p->slots[i]) {
			idx = i + 1;
			break;
		}
	if (!idx) {
		uint32_t n = p->nslots ? p->nslots * 2 : 16;
		struct uconn **s = realloc(p->slots, n * sizeof(*s));
		uint32_t *g;

		if (!s) {
			free(c);
			return NULL;
		}
		p->slots = s;
		g = realloc(p->gens, n * sizeof(*g));
		if (!g) {
			free(c);
			return NULL;
		}
		p->gens = g;
		for (uint32_t i = p->nslots; i < n; i++) {
			p->slots[i] = NULL;
			p->gens[i] = (uint32_t)(p->uid >> 7) + i;
		}
		idx = p->nslots + 1;
		p->nslots = n;
	}
	p->gens[idx - 1]++;
	p->slots[idx - 1] = c;
	c->id = ((uint64_t)p->gens[idx - 1] << 32) | idx;
	c->p = p;
	c->ctx = ctx;
	c->rx_expect = 1;
	c->next = p->conns;
	if (p->conns)
		p->conns->prev = c;
	p->conns = c;
	return c;
}

static void conn_kick(struct uconn *c)
{
	c->kicked = 1;
	c->p->kick_any = 1;
}

/* ------------------------------------------------------------------ ops */
static struct uop *op_new(struct sd_prov *p, struct uconn *c, enum op_type t, void *op_ctx)
{
	struct uop *o = p->free_ops;

	if (o)
		p->free_ops = o->next;
	else if (!(o = malloc(sizeof(*o))))
		return NULL;
	memset(o, 0, offsetof(struct uop, priv));
	o->p = p;
	o->c = c;
	o->type = t;
	o->op_ctx = op_ctx;
	o->start_ns = now_ns();
	/* on the conn's outstanding list, oldest first */
	o->prev = c->outstanding_tail;
	if (c->outstanding_tail)
		c->outstanding_tail->next = o;
	else
		c->outstanding = o;
	c->outstanding_tail = o;
	o->on_list = 1;
	return o;
}

static void op_unlink(struct uop *o)
{
	struct uconn *c = o->c;

	if (!o->on_list)
		return;
	if (o->prev)
		o->prev->next = o->next;
	else
		c->outstanding = o->next;
	if (o->next)
		o->next->prev = o->prev;
	else
		c->outstanding_tail = o->prev;
	o->next = o->prev = NULL;
	o->on_list = 0;
}

static void op_to_done(struct uop *o)
{
	struct sd_prov *p = o->p;

	op_unlink(o);
	o->next = NULL;
	if (p->done_tail)
		p->done_tail->next = o;
	else
		p->done_head = o;
	p->done_tail = o;
}

static void op_finish_local(struct uop *o)
{
	struct uconn *c = o->c;

	if (o->type == OP_IFLUSH) {
		if (o->status == DOCA_SUCCESS && o->flush_seq > c->flush_done)
			c->flush_done = o->flush_seq;
		c->flush_inflight--;
		conn_kick(c);
	}
	if (o->need_remote && o->status == DOCA_SUCCESS && c->flush_done < o->wait_seq &&
	    c->state != CS_FAILED) {
		/* locally complete; wait for a flush issued after it */
		o->gnext = c->await_head;
		c->await_head = o;
		conn_kick(c);
		return;
	}
	if (c->state == CS_FAILED && o->status == DOCA_SUCCESS && o->type != OP_IFLUSH && o->need_remote)
		o->status = c->fail_status;
	op_to_done(o);
}

static void sub_done(struct uop *o, ucs_status_t s)
{
	if (o->orphan || o->early) {
		o->pending--; /* already reported: only the memory is left (see u_progress) */
		return;
	}
	if (s != UCS_OK && o->status == DOCA_SUCCESS)
		o->status = (o->c->state == CS_FAILED && o->c->fail_status) ? o->c->fail_status : map_status(s);
	if (--o->pending == 0)
		op_finish_local(o);
}

static void send_cb(void *req, ucs_status_t s, void *user)
{
	U.request_free(req);
	sub_done(user, s);
}

/* Account the result of an *_nbx call. */
static void track(struct uop *o, ucs_status_ptr_t r)
{
	if (r == NULL)
		return;
	if (UCS_PTR_IS_ERR(r)) {
		if (o->status == DOCA_SUCCESS)
			o->status = map_status(UCS_PTR_STATUS(r));
		return;
	}
	o->pending++;
}

static void param_init(ucp_request_param_t *rp, struct uop *o)
{
	memset(rp, 0, sizeof(*rp));
	rp->op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	rp->cb.send = send_cb;
	rp->user_data = o;
}

static void issue_flush(struct uconn *c)
{
	struct uop *o;
	ucp_request_param_t rp;

	if (!c->ep || c->state == CS_FAILED)
		return;
	o = op_new(c->p, c, OP_IFLUSH, NULL);
	if (!o)
		return; /* retried at the next progress */
	o->flush_seq = ++c->flush_issued;
	c->dirty = 0;
	c->flush_inflight++;
	o->pending = 1;
	param_init(&rp, o);
	track(o, U.ep_flush_nbx(c->ep, &rp));
	sub_done(o, UCS_OK);
}

static ucp_rkey_h rkey_for(struct uconn *c, struct sd_prov_rkey *rk, doca_error_t *err)
{
	ucs_status_t s;
	ucp_rkey_h h;

	for (int i = 0; i < c->nrkc; i++)
		if (c->rkc[i].rk == rk)
			return c->rkc[i].h;
	if (c->nrkc == c->caprkc) {
		int n = c->caprkc ? c->caprkc * 2 : 8;
		struct rkcache *r = realloc(c->rkc, (size_t)n * sizeof(*r));
		if (!r) {
			*err = DOCA_ERROR_NO_MEMORY;
			return NULL;
		}
		c->rkc = r;
		c->caprkc = n;
	}
	s = U.ep_rkey_unpack(c->ep, rk->packed, &h);
	if (s != UCS_OK) {
		*err = DOCA_ERROR_INVALID_VALUE;
		return NULL;
	}
	c->rkc[c->nrkc].rk = rk;
	c->rkc[c->nrkc].h = h;
	c->nrkc++;
	return h;
}

static void rkc_clear(struct uconn *c)
{
	for (int i = 0; i < c->nrkc; i++)
		U.rkey_destroy(c->rkc[i].h);
	free(c->rkc);
	c->rkc = NULL;
	c->nrkc = c->caprkc = 0;
}

/* Issue a gated op now (its flush has completed). */
static void issue_gated(struct uop *o)
{
	struct uconn *c = o->c;
	ucp_request_param_t rp;
	doca_error_t e = DOCA_SUCCESS;
	ucp_rkey_h h;

	if (o->gate_ref)
		o->gate_ref = 0; /* the submitter's guard becomes this one */
	else
		o->pending++; /* guard */
	param_init(&rp, o);
	switch (o->type) {
	case OP_SEND:
	case OP_WIMM:
	case OP_CTRL:
		if (o->niov > 0 && o->total > 0) {
			rp.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
			rp.datatype = ucp_dt_make_iov();
			track(o, U.am_send_nbx(c->ep, SD_UCX_AM_ID, &o->hdr, sizeof(o->hdr), o->uiov, (size_t)o->niov, &rp));
		} else {
			if (o->hdr.type == AM_CM_REQ) {
				rp.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
				rp.flags = UCP_AM_SEND_FLAG_REPLY;
			}
			track(o, U.am_send_nbx(c->ep, SD_UCX_AM_ID, &o->hdr, sizeof(o->hdr),
					       o->hdr.priv_len ? o->priv : NULL, o->hdr.priv_len, &rp));
		}
		break;
	case OP_READ: {
		uint64_t off = 0;

		h = rkey_for(c, o->rk, &e);
		if (!h)
			break;
		for (int i = 0; i < o->niov; i++) {
			if (!o->liov[i].len)
				continue;
			track(o, U.get_nbx(c->ep, o->liov[i].addr, o->liov[i].len, o->raddr + off, h, &rp));
			off += o->liov[i].len;
		}
		break;
	}
	case OP_FADD:
	case OP_CSWAP:
		h = rkey_for(c, o->rk, &e);
		if (!h)
			break;
		rp.op_attr_mask |= UCP_OP_ATTR_FIELD_REPLY_BUFFER | UCP_OP_ATTR_FIELD_DATATYPE;
		rp.datatype = ucp_dt_make_contig(8);
		rp.reply_buffer = o->result;
		if (o->type == OP_CSWAP)
			*o->result = o->cmp_result; /* in: compare; out: the old value */
		track(o, U.atomic_op_nbx(c->ep, o->type == OP_FADD ? UCP_ATOMIC_OP_ADD : UCP_ATOMIC_OP_CSWAP,
					 &o->operand, 1, o->raddr, h, &rp));
		break;
	case OP_FLUSH:
		track(o, U.ep_flush_nbx(c->ep, &rp));
		break;
	default:
		break;
	}
	if (e != DOCA_SUCCESS && o->status == DOCA_SUCCESS)
		o->status = e;
	sub_done(o, UCS_OK);
}

static void gate_push(struct uconn *c, struct uop *o)
{
	if (c->dirty)
		issue_flush(c);
	o->wait_seq = c->flush_issued;
	o->gated = 1;
	o->gnext = NULL;
	if (c->gate_tail)
		c->gate_tail->gnext = o;
	else
		c->gate_head = o;
	c->gate_tail = o;
}

static void gate_pump(struct uconn *c)
{
	while (c->gate_head && c->gate_head->wait_seq <= c->flush_done && c->ep && c->state != CS_FAILED) {
		struct uop *o = c->gate_head;

		c->gate_head = o->gnext;
		if (!c->gate_head)
			c->gate_tail = NULL;
		o->gated = 0;
		o->gnext = NULL;
		issue_gated(o);
	}
}

/* Submit an op that must follow earlier writes / queued ops. */
static void submit_ordered(struct uconn *c, struct uop *o)
{
	if (!c->dirty && !c->gate_head && c->state != CS_FAILED && c->ep) {
		issue_gated(o);
		return;
	}
	gate_push(c, o);
	gate_pump(c);
}

/* ------------------------------------------------------------------ failure */
/* Endpoint parameters: a same-host peer (shared memory may serve it) gets no UCX peer-failure handling unless
 * SOFTDOCA_UCX_PEER_ERRORS is set (docs/providers.md, "Shared memory on one host"). */
static ucp_ep_params_t ep_params_for(int same_host, ucp_err_handler_cb_t cb, void *arg)
{
	ucp_ep_params_t ep;

	memset(&ep, 0, sizeof(ep));
	if (same_host && !getenv("SOFTDOCA_UCX_PEER_ERRORS")) {
		ep.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
		ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
		return ep;
	}
	ep.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
	ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
	ep.err_handler.cb = cb;
	ep.err_handler.arg = arg;
	return ep;
}

/* ucp_ep_close_nbx: forced or after a flush; the request UCX still holds, or NULL. */
static void *ep_close(ucp_ep_h ep, int force, ucp_send_nbx_callback_t cb, void *user)
{
	ucp_request_param_t rp;
	ucs_status_ptr_t r;

	memset(&rp, 0, sizeof(rp));
	rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	rp.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
	rp.cb.send = cb;
	rp.user_data = user;
	r = U.ep_close_nbx(ep, &rp);
	return r && !UCS_PTR_IS_ERR(r) ? r : NULL;
}

static void close_cb(void *req, ucs_status_t s, void *user)
{
	struct uconn *c = user;

	(void)s;
	U.request_free(req);
	c->close_req = NULL;
	c->p->kick_any = 1;
}

static void link_put(struct uconn *c);

static void close_ep(struct uconn *c, int force)
{
	if (c->link || c->paddr) {
		link_put(c); /* the link's endpoint stays for the other connections */
		return;
	}
	if (!c->ep)
		return;
	c->close_req = ep_close(c->ep, force, close_cb, c);
	c->ep = NULL;
}

static void rxq_free(struct uconn *c)
{
	while (c->rxq) {
		struct urx *x = c->rxq;

		c->rxq = x->next;
		if (x->ucx_owned)
			U.am_data_release(c->p->worker, x->data);
		else
			free(x->data);
		free(x);
	}
}

/* The connection is broken: every op fails, the ep goes (forced). */
static void conn_fail(struct uconn *c, int force, doca_error_t st, enum sd_prov_fail reason, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static void conn_fail(struct uconn *c, int force, doca_error_t st, enum sd_prov_fail reason, const char *fmt, ...)
{
	va_list ap;

	if (c->state == CS_FAILED)
		return;
	c->state = CS_FAILED;
	c->fail_status = st;
	c->fail_reason = reason;
	va_start(ap, fmt);
	vsnprintf(c->why, sizeof(c->why), fmt, ap);
	va_end(ap);
	/* every op of the connection (queued, awaiting a flush, or with requests
	 * in UCX) fails now; requests UCX gives back later only free memory */
	c->gate_head = c->gate_tail = NULL;
	c->await_head = NULL;
	while (c->outstanding) {
		struct uop *o = c->outstanding;

		o->gnext = NULL;
		o->gated = 0;
		if (o->status == DOCA_SUCCESS)
			o->status = st;
		o->early = 1;
		op_to_done(o);
	}
	close_ep(c, force);
	rxq_free(c);
	c->rx_held = 0;
	if (!c->closed_by_user)
		c->pending_ev = SD_PROV_EV_FAILED;
	conn_kick(c);
}

static void err_cb(void *arg, ucp_ep_h ep, ucs_status_t s)
{
	struct uconn *c = arg;

	(void)ep;
	if (c->state == CS_FAILED || c->state == CS_CLOSING)
		return;
	if (c->state == CS_ESTABLISHED)
		conn_fail(c, 1, DOCA_ERROR_CONNECTION_RESET, SD_PROV_FAIL_LOST, "connection lost: %s", ustr(s));
	else
		conn_fail(c, 1, s == UCS_ERR_TIMED_OUT || s == UCS_ERR_ENDPOINT_TIMEOUT ? DOCA_ERROR_TIME_OUT
										      : DOCA_ERROR_CONNECTION_ABORTED,
			  SD_PROV_FAIL_REFUSED, "connection refused or unreachable: %s", ustr(s));
}

/* ------------------------------------------------------------------ links
 * UCP pairs the endpoints that two workers create to each other's address in
 * the order each side created them (per remote worker: the k-th on one side
 * is connected to the k-th on the other). Two processes that set up several
 * connections at once create them in different orders, so one endpoint per
 * connection would cross them: connection X's puts would be served, and
 * acknowledged, by the endpoint of another connection Z, and X would hang
 * once Z closed (seen: a write of the transfer engine waiting for a flush
 * that never completed). So every connection set up from worker addresses
 * between two instances uses one endpoint: the link. Both sides create their
 * link endpoints in step (the k-th link with the k-th), which holds because a
 * link closes only when both sides agree: the side whose last connection left
 * asks (UNLINK, naming its link), the other answers OK (it has none left
 * either, and closes its own) or BUSY (a new connection uses it: both keep
 * it). A connection that comes while its side asks waits for the answer.
 * Both asking at once is agreement. No answer within timeout_ms: the peer is
 * gone and the link closes. Where only one side sees a link fail (UCX's peer
 * error, an op's deadline), the two may be out of step once: the next
 * connection's ops get no completion, their deadline fails that link too, and
 * both sides start again in step. Loopback (the same instance) and CM
 * connections keep endpoints of their own: UCP pairs neither by order. */
static doca_error_t send_ctrl(struct uconn *c, enum am_type t, const void *priv, size_t priv_len);

static struct ulink *link_find(struct sd_prov *p, uint64_t uid)
{
	for (struct ulink *l = p->links; l; l = l->next)
		if (l->uid == uid && l->state != LK_CLOSING)
			return l;
	return NULL;
}

struct lmsg {
	struct am_hdr h;
	struct ulink *l;              /* NULL: an answer sent on a reply ep (nothing to count) */
};

static void lmsg_cb(void *req, ucs_status_t s, void *user)
{
	struct lmsg *m = user;

	(void)s;
	U.request_free(req);
	if (m->l) {
		m->l->sends--;
		m->l->p->kick_any = 1;
	}
	free(m);
}

/* A link message (UNLINK with the reply flag; answers on the ep UNLINK came on). */
static void link_msg(struct sd_prov *p, ucp_ep_h ep, struct ulink *l, enum am_type t, uint64_t nonce)
{
	struct lmsg *m = calloc(1, sizeof(*m));
	ucp_request_param_t rp;
	ucs_status_ptr_t r;

	if (!m)
		return; /* unanswered: the asking side's deadline closes the link */
	m->h.magic = AM_MAGIC;
	m->h.type = (uint8_t)t;
	m->h.uid = p->uid;
	m->h.seq = nonce;
	m->l = l;
	memset(&rp, 0, sizeof(rp));
	rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	rp.cb.send = lmsg_cb;
	rp.user_data = m;
	if (t == AM_UNLINK) {
		rp.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
		rp.flags = UCP_AM_SEND_FLAG_REPLY;
	}
	r = U.am_send_nbx(ep, SD_UCX_AM_ID, &m->h, sizeof(m->h), NULL, 0, &rp);
	if (r == NULL || UCS_PTR_IS_ERR(r)) {
		free(m);
		return;
	}
	if (l)
		l->sends++;
}

static void link_close_cb(void *req, ucs_status_t s, void *user)
{
	struct ulink *l = user;

	(void)s;
	U.request_free(req);
	l->close_req = NULL;
	l->p->kick_any = 1;
}

/* Close the link (its ep is closed by link_pump: never inside a UCX callback). */
static void link_close(struct ulink *l, int force)
{
	l->state = LK_CLOSING;
	l->force |= force;
	l->p->kick_any = 1;
}

static void link_close_ep(struct ulink *l)
{
	l->close_req = ep_close(l->ep, l->force, link_close_cb, l);
	l->ep = NULL;
}

/* The link's last connection left: ask the peer whether it may close. */
static void link_unlink(struct ulink *l)
{
	l->state = LK_UNLINKING;
	l->deadline_ns = now_ns() + l->p->timeout_ns;
	link_msg(l->p, l->ep, l, AM_UNLINK, l->nonce);
}

static void link_put(struct uconn *c)
{
	struct ulink *l = c->link;

	if (c->paddr) { /* it never got its link */
		free(c->paddr);
		c->paddr = NULL;
		c->p->link_waiters--;
	}
	c->ep = NULL;
	c->link = NULL;
	if (!l)
		return;
	/* UCX may still hold requests of its ops: they only free memory now (see u_progress) */
	while (c->outstanding) {
		struct uop *o = c->outstanding;

		o->gnext = NULL;
		o->gated = 0;
		if (o->status == DOCA_SUCCESS)
			o->status = DOCA_ERROR_CONNECTION_RESET;
		o->early = 1;
		op_to_done(o);
	}
	if (--l->refs == 0 && l->state == LK_OPEN)
		link_unlink(l);
}

static void link_err_cb(void *arg, ucp_ep_h ep, ucs_status_t s);

static struct ulink *link_open(struct sd_prov *p, uint64_t uid, int same_host, const void *addr,
			       struct sd_prov_why *why)
{
	struct ulink *l = calloc(1, sizeof(*l));
	ucp_ep_params_t ep;
	ucs_status_t s;
	static uint64_t seq;

	if (!l) {
		WHY(why, "out of memory");
		return NULL;
	}
	l->p = p;
	l->uid = uid;
	l->same_host = same_host;
	l->nonce = p->uid ^ (++seq * 0x9e3779b97f4a7c15ull) ^ now_ns();
	ep = ep_params_for(same_host, link_err_cb, l);
	ep.field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
	ep.address = (const ucp_address_t *)addr;
	s = U.ep_create(p->worker, &ep, &l->ep);
	if (s != UCS_OK) {
		WHY(why, "ucx: cannot reach the peer's worker address: %s", ustr(s));
		free(l);
		return NULL;
	}
	l->next = p->links;
	p->links = l;
	return l;
}

static void link_attach(struct uconn *c, struct ulink *l)
{
	c->link = l;
	c->ep = l->ep;
	l->refs++;
	l->deadline_ns = 0;
}

/* A link failed (UCX reported the peer gone, or an op of one of its connections got no completion): every
 * connection on it fails. */
static void link_fail(struct ulink *l, ucs_status_t s, const char *why)
{
	if (l->state == LK_CLOSING)
		return;
	l->state = LK_CLOSING; /* its connections' link_put must not ask the peer */
	for (struct uconn *c = l->p->conns; c; c = c->next) {
		if (c->link != l)
			continue;
		if (c->state == CS_FAILED || c->state == CS_CLOSING)
			link_put(c);
		else if (c->state == CS_ESTABLISHED)
			conn_fail(c, 1, DOCA_ERROR_CONNECTION_RESET, SD_PROV_FAIL_LOST, "%s%s", why, s ? ustr(s) : "");
		else
			conn_fail(c, 1, s == UCS_ERR_TIMED_OUT || s == UCS_ERR_ENDPOINT_TIMEOUT ? DOCA_ERROR_TIME_OUT
											  : DOCA_ERROR_CONNECTION_ABORTED,
				  SD_PROV_FAIL_REFUSED, "connection refused or unreachable: %s", s ? ustr(s) : why);
	}
	link_close(l, 1);
}

static void link_err_cb(void *arg, ucp_ep_h ep, ucs_status_t s)
{
	struct ulink *l = arg;

	(void)ep;
	if (l->state == LK_UNLINKING && !l->refs) { /* the peer closed its side: that is an answer too */
		link_close(l, 1);
		return;
	}
	link_fail(l, s, "connection lost: ");
}

/* UNLINK / OK / BUSY arrived (in the AM callback). */
static void link_on_msg(struct sd_prov *p, const struct am_hdr *h, const ucp_am_recv_param_t *param)
{
	struct ulink *l = link_find(p, h->uid);

	if (h->type == AM_UNLINK) {
		ucp_ep_h reply = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : NULL;
		int busy;

		if (!reply)
			return;
		/* ours is the endpoint it came on (the steps match): busy while a connection uses it; not ours or
		 * none: we have nothing to keep */
		busy = l && l->ep == reply && l->refs > 0;
		link_msg(p, reply, NULL, busy ? AM_UNLINK_BUSY : AM_UNLINK_OK, h->seq);
		if (l && l->ep == reply && !busy)
			link_close(l, 0); /* both agree (or both asked): the answer leaves first */
		return;
	}
	if (!l || l->state != LK_UNLINKING || l->nonce != h->seq)
		return;
	if (h->type == AM_UNLINK_OK) {
		link_close(l, 0);
	} else {
		l->state = LK_OPEN;
		l->deadline_ns = now_ns() + p->timeout_ns; /* idle still: ask again later */
	}
	p->kick_any = 1;
}

/* Links' deadlines, closes that finished, and connections waiting for their link. */
static void link_pump(struct sd_prov *p, uint64_t now)
{
	for (struct ulink **pp = &p->links; *pp;) {
		struct ulink *l = *pp;

		if (l->state == LK_CLOSING && l->ep)
			link_close_ep(l);
		if (l->state == LK_CLOSING && !l->close_req && !l->sends) {
			*pp = l->next;
			free(l);
			continue;
		}
		if (l->state == LK_UNLINKING && now > l->deadline_ns)
			link_close(l, 1); /* no answer: the peer is gone */
		else if (l->state == LK_OPEN && !l->refs && l->deadline_ns && now > l->deadline_ns)
			link_unlink(l);
		pp = &l->next;
	}
	if (!p->link_waiters)
		return;
	for (struct uconn *c = p->conns; c; c = c->next) {
		struct sd_prov_why why = {{0}};
		struct ulink *l;

		if (!c->paddr)
			continue;
		l = link_find(p, c->peer_uid);
		if (l && l->state == LK_UNLINKING)
			continue;
		if (!l)
			l = link_open(p, c->peer_uid, c->same_host, c->paddr, &why);
		free(c->paddr);
		c->paddr = NULL;
		p->link_waiters--;
		if (!l) {
			conn_fail(c, 1, DOCA_ERROR_CONNECTION_ABORTED, SD_PROV_FAIL_REFUSED, "%s", why.msg);
			continue;
		}
		link_attach(c, l);
		send_ctrl(c, AM_HELLO, NULL, 0);
		conn_kick(c);
	}
}

/* ------------------------------------------------------------------ AM rx */
static void rxq_insert(struct uconn *c, struct urx *x)
{
	struct urx **pp = &c->rxq;

	while (*pp && (*pp)->h.seq < x->h.seq)
		pp = &(*pp)->next;
	x->next = *pp;
	*pp = x;
}

/* Offer an eager message now (we are inside progress()). 0: held, queue it. */
static int deliver_now(struct uconn *c, const struct am_hdr *h, const void *data, size_t len)
{
	struct sd_prov *p = c->p;
	struct sd_prov_rx rx = {
		.kind = h->type == AM_WIMM ? SD_PROV_RX_WRITE_IMM : SD_PROV_RX_SEND,
		.has_imm = !!(h->flags & AMF_IMM),
		.imm = h->imm,
		.len = len,
		.data = data,
	};
	struct sd_prov_iov dst[MAX_IOV];
	int ndst = MAX_IOV;
	void *rx_ctx = NULL;
	enum sd_prov_rx_answer a = p->cbs.rx(p->cbs.arg, (struct sd_prov_conn *)c, c->ctx, &rx, dst, &ndst, &rx_ctx);
	size_t room = 0, off = 0;

	if (a == SD_PROV_RX_HOLD) {
		c->rx_held = 1;
		return 0;
	}
	c->rx_expect++;
	if (a != SD_PROV_RX_PLACE)
		return 1;
	if (ndst < 0 || ndst > MAX_IOV)
		ndst = 0;
	for (int i = 0; i < ndst; i++)
		room += dst[i].len;
	if (room < len) {
		p->cbs.rx_done(p->cbs.arg, rx_ctx, DOCA_ERROR_TOO_BIG, 0);
		return 1;
	}
	for (int i = 0; i < ndst && off < len; i++) {
		size_t k = dst[i].len < len - off ? dst[i].len : len - off;

		memcpy(dst[i].addr, (const uint8_t *)data + off, k);
		off += k;
	}
	p->cbs.rx_done(p->cbs.arg, rx_ctx, DOCA_SUCCESS, off);
	return 1;
}

static ucs_status_t am_cb(void *arg, const void *header, size_t hlen, void *data, size_t len,
			  const ucp_am_recv_param_t *param)
{
	struct sd_prov *p = arg;
	struct am_hdr h;
	struct uconn *c = NULL;
	int rndv = !!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV);
	int persist = !!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA);
	struct urx *x;

	if (hlen != sizeof(h))
		return UCS_OK; /* not ours: drop */
	memcpy(&h, header, sizeof(h));
	if (h.magic != AM_MAGIC)
		return UCS_OK;
	if (h.type >= AM_UNLINK && h.type <= AM_UNLINK_BUSY) {
		link_on_msg(p, &h, param);
		return UCS_OK;
	}
	if (h.type == AM_CM_REQ) {
		/* the server's conn is the one whose ep is the reply ep */
		if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP))
			return UCS_OK;
		for (struct uconn *k = p->conns; k; k = k->next)
			if (k->ep == param->reply_ep && k->state == CS_CM_WAIT_REQ) {
				c = k;
				break;
			}
		if (!c || rndv || len > SD_PROV_MAX_PRIV)
			return UCS_OK;
		c->peer_id = h.src;
		c->peer_uid = h.uid;
		c->priv_len = len;
		memcpy(c->priv, data, len);
		c->state = CS_CM_REQUESTED;
		c->cm_pending_event = AM_CM_REQ;
		conn_kick(c);
		return UCS_OK;
	}
	c = conn_lookup(p, h.dst);
	if (!c || c->state == CS_FAILED || c->state == CS_CLOSING)
		return UCS_OK;
	switch (h.type) {
	case AM_HELLO:
		if (c->is_cm || rndv)
			return UCS_OK;
		if (c->peer_uid && c->peer_uid != h.uid)
			return UCS_OK;
		c->hello_seen = 1;
		c->peer_uid = h.uid;
		c->peer_id = h.src;
		conn_kick(c);
		return UCS_OK;
	case AM_CM_ACCEPT:
	case AM_CM_REJECT:
		if (!c->cm_client || c->state != CS_CONNECTING || rndv || len > SD_PROV_MAX_PRIV)
			return UCS_OK;
		c->peer_id = h.src;
		c->peer_uid = h.uid;
		c->priv_len = len;
		memcpy(c->priv, data, len);
		c->cm_pending_event = h.type;
		conn_kick(c);
		return UCS_OK;
	case AM_CM_RTU:
		if (c->state == CS_CM_ACCEPTED) {
			c->cm_pending_event = AM_CM_RTU;
			conn_kick(c);
		}
		return UCS_OK;
	case AM_BYE:
		c->cm_pending_event = AM_BYE;
		conn_kick(c);
		return UCS_OK;
	case AM_SEND:
	case AM_WIMM:
		break;
	default:
		return UCS_OK;
	}
	if (h.seq < c->rx_expect)
		return UCS_OK; /* duplicate */
	if (!rndv && h.seq == c->rx_expect && !c->rxq && !c->rx_held && !c->rx_placing && c->state == CS_ESTABLISHED &&
	    deliver_now(c, &h, data, len))
		return UCS_OK; /* the common case: in order, a receive posted, no copy kept */
	x = calloc(1, sizeof(*x));
	if (!x)
		return UCS_OK; /* dropped: the sender's op still completes; a receive times out upstairs */
	x->h = h;
	x->len = len;
	x->rndv = rndv;
	if (rndv || persist) {
		x->data = data;
		x->ucx_owned = 1;
	} else if (len) {
		x->data = malloc(len);
		if (!x->data) {
			free(x);
			return UCS_OK;
		}
		memcpy(x->data, data, len);
	}
	rxq_insert(c, x);
	conn_kick(c);
	return x->ucx_owned ? UCS_INPROGRESS : UCS_OK;
}

/* Placement of a rndv payload finished. */
struct uplace {
	struct uconn *c;
	uint64_t conn_id;
	void *rx_ctx;
	size_t len;
	ucp_dt_iov_t iov[MAX_IOV];
	struct sd_prov *p;
	struct uplace *next;
	ucs_status_t st;
};

static void place_cb(void *req, ucs_status_t s, size_t len, void *user)
{
	struct uplace *pl = user;

	(void)len;
	U.request_free(req);
	pl->st = s;
	pl->next = pl->p->place_done;
	pl->p->place_done = pl;
	pl->p->kick_any = 1;
}

/* Offer queued messages of c, in order, one at a time. Returns callbacks run. */
static int rx_pump(struct uconn *c)
{
	struct sd_prov *p = c->p;
	int n = 0;

	while (c->rxq && c->rxq->h.seq == c->rx_expect && !c->rx_held && !c->rx_placing &&
	       c->state != CS_FAILED && c->state != CS_CLOSING) {
		struct urx *x = c->rxq;
		struct sd_prov_rx rx = {
			.kind = x->h.type == AM_WIMM ? SD_PROV_RX_WRITE_IMM : SD_PROV_RX_SEND,
			.has_imm = !!(x->h.flags & AMF_IMM),
			.imm = x->h.imm,
			.len = x->len,
			.data = x->rndv ? NULL : x->data,
		};
		struct sd_prov_iov dst[MAX_IOV];
		int ndst = MAX_IOV;
		void *rx_ctx = NULL;
		enum sd_prov_rx_answer a;

		a = p->cbs.rx(p->cbs.arg, (struct sd_prov_conn *)c, c->ctx, &rx, dst, &ndst, &rx_ctx);
		n++;
		if (a == SD_PROV_RX_HOLD) {
			c->rx_held = 1;
			break;
		}
		c->rxq = x->next;
		c->rx_expect++;
		if (a == SD_PROV_RX_PLACE) {
			size_t room = 0;

			if (ndst < 0 || ndst > MAX_IOV)
				ndst = 0;
			for (int i = 0; i < ndst; i++)
				room += dst[i].len;
			if (room < x->len) {
				if (x->ucx_owned)
					U.am_data_release(p->worker, x->data);
				else
					free(x->data);
				free(x);
				p->cbs.rx_done(p->cbs.arg, rx_ctx, DOCA_ERROR_TOO_BIG, 0);
				continue;
			}
			if (!x->rndv) {
				size_t off = 0;

				for (int i = 0; i < ndst && off < x->len; i++) {
					size_t k = dst[i].len < x->len - off ? dst[i].len : x->len - off;
					memcpy(dst[i].addr, (uint8_t *)x->data + off, k);
					off += k;
				}
				if (x->ucx_owned)
					U.am_data_release(p->worker, x->data);
				else
					free(x->data);
				free(x);
				p->cbs.rx_done(p->cbs.arg, rx_ctx, DOCA_SUCCESS, off);
				continue;
			}
			/* rendezvous: fetch straight into place */
			{
				struct uplace *pl = calloc(1, sizeof(*pl));
				ucp_request_param_t rp;
				ucs_status_ptr_t r;
				size_t left = x->len;
				int k = 0;

				if (!pl) {
					U.am_data_release(p->worker, x->data);
					free(x);
					p->cbs.rx_done(p->cbs.arg, rx_ctx, DOCA_ERROR_NO_MEMORY, 0);
					continue;
				}
				for (int i = 0; i < ndst && left; i++) {
					size_t m = dst[i].len < left ? dst[i].len : left;
					pl->iov[k].buffer = dst[i].addr;
					pl->iov[k].length = m;
					left -= m;
					k++;
				}
				pl->c = c;
				pl->conn_id = c->id;
				pl->rx_ctx = rx_ctx;
				pl->len = x->len;
				pl->p = p;
				memset(&rp, 0, sizeof(rp));
				rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
						  UCP_OP_ATTR_FIELD_DATATYPE;
				rp.cb.recv_am = place_cb;
				rp.user_data = pl;
				if (k == 1) { /* one buffer: contiguous (the common case) */
					rp.datatype = ucp_dt_make_contig(1);
					r = U.am_recv_data_nbx(p->worker, x->data, pl->iov[0].buffer, pl->iov[0].length, &rp);
				} else {
					rp.datatype = ucp_dt_make_iov();
					r = U.am_recv_data_nbx(p->worker, x->data, pl->iov, (size_t)k, &rp);
				}
				free(x);
				if (r == NULL || UCS_PTR_IS_ERR(r)) {
					doca_error_t st = r ? map_status(UCS_PTR_STATUS(r)) : DOCA_SUCCESS;
					size_t got = st ? 0 : pl->len;

					free(pl);
					p->cbs.rx_done(p->cbs.arg, rx_ctx, st, got);
					continue;
				}
				c->rx_placing = 1;
			}
			continue;
		}
		/* TAKEN */
		if (x->ucx_owned)
			U.am_data_release(p->worker, x->data);
		else
			free(x->data);
		free(x);
	}
	return n;
}

/* ------------------------------------------------------------------ transport */
/* The transports an endpoint's lanes use, from ucp_ep_print_info (UCX 1.13
 * has no ucp_ep_query field for them): lines "lane[N]: <rsc>:<tl>/<dev>...". */
static void ep_transport(ucp_ep_h ep, char *out, size_t n)
{
	char *buf = NULL, *line, *save = NULL;
	size_t blen = 0;
	FILE *f;

	out[0] = 0;
	if (!ep || !(f = open_memstream(&buf, &blen)))
		return;
	U.ep_print_info(ep, f);
	fclose(f);
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *l = strstr(line, "lane["), *q, *slash, tl[32];
		size_t k;

		if (!l || !(q = strchr(l, ':')))
			continue;
		q++;
		while (*q == ' ')
			q++;
		/* "<rsc index>:<tl>/<dev>" */
		while (*q >= '0' && *q <= '9')
			q++;
		if (*q == ':')
			q++;
		slash = strchr(q, '/');
		if (!slash || (size_t)(slash - q) >= sizeof(tl))
			continue;
		k = (size_t)(slash - q);
		memcpy(tl, q, k);
		tl[k] = 0;
		if (!tl[0])
			continue;
		/* add once */
		{
			char *hit = strstr(out, tl);
			size_t ol = strlen(out);

			if (hit && (hit == out || hit[-1] == ',') && (hit[k] == 0 || hit[k] == ','))
				continue;
			if (ol + k + 2 > n)
				break;
			if (ol)
				out[ol++] = ',';
			memcpy(out + ol, tl, k + 1);
		}
	}
	free(buf);
}

static void merge_transport(char *dst, size_t n, const char *src)
{
	char tmp[64], *save = NULL;

	snprintf(tmp, sizeof(tmp), "%s", src);
	for (char *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		size_t k = strlen(t), ol = strlen(dst);
		char *hit = strstr(dst, t);

		if (hit && (hit == dst || hit[-1] == ',') && (hit[k] == 0 || hit[k] == ','))
			continue;
		if (ol + k + 2 > n)
			return;
		if (ol)
			dst[ol++] = ',';
		memcpy(dst + ol, t, k + 1);
	}
}

/* ------------------------------------------------------------------ control messages */
static doca_error_t send_ctrl(struct uconn *c, enum am_type t, const void *priv, size_t priv_len)
{
	struct uop *o;

	if (!c->ep)
		return DOCA_ERROR_NOT_CONNECTED;
	o = op_new(c->p, c, OP_CTRL, NULL);
	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	o->hdr.magic = AM_MAGIC;
	o->hdr.type = (uint8_t)t;
	o->hdr.dst = c->peer_id;
	o->hdr.src = c->id;
	o->hdr.uid = c->p->uid;
	o->hdr.priv_len = (uint16_t)priv_len;
	if (priv_len)
		memcpy(o->priv, priv, priv_len);
	issue_gated(o);
	return DOCA_SUCCESS;
}

static void emit(struct uconn *c, enum sd_prov_conn_ev ev, doca_error_t st, enum sd_prov_fail reason,
		 const void *priv, size_t priv_len, const char *why)
{
	struct sd_prov *p = c->p;
	struct sd_prov_conn_event e = {
		.ev = ev, .status = st, .reason = reason, .priv = priv, .priv_len = priv_len, .why = why ? why : "",
	};

	if (c->closed_by_user || !p->cbs.conn_event)
		return;
	p->cbs.conn_event(p->cbs.arg, (struct sd_prov_conn *)c, c->ctx, &e);
}

static void established(struct uconn *c, const void *priv, size_t priv_len)
{
	c->state = CS_ESTABLISHED;
	ep_transport(c->ep, c->transport, sizeof(c->transport));
	merge_transport(c->p->transport, sizeof(c->p->transport), c->transport);
	emit(c, SD_PROV_EV_ESTABLISHED, DOCA_SUCCESS, SD_PROV_FAIL_NONE, priv, priv_len, NULL);
}

static int conn_pump(struct uconn *c, uint64_t now)
{
	struct sd_prov *p = c->p;
	int n = 0;
	int ev = c->cm_pending_event;

	c->kicked = 0;
	c->cm_pending_event = 0;
	if (c->state == CS_CLOSING) {
		/* our last message (BYE / REJECT) is at the peer, or the peer is gone */
		if (c->ep && (c->flush_done >= c->close_seq || now > c->deadline_ns))
			close_ep(c, 1);
		return 0;
	}
	/* both HELLOs seen: established, before a BYE that came in the same round (the peer
	 * was established when it sent it; the user sees established, then disconnected) */
	if (c->state == CS_CONNECTING && !c->is_cm && c->connected_local && c->hello_seen && c->ep) {
		n++;
		established(c, NULL, 0);
	}
	switch (ev) {
	case AM_CM_REQ:
		if (c->state == CS_CM_REQUESTED && p->cbs.conn_request) {
			struct sd_prov_listener *l = c->listener;
			struct sockaddr_storage ss;
			socklen_t sl = 0;

			ss = c->peer_ss;
			sl = ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
			     : ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) : 0;
			n++;
			p->cbs.conn_request(p->cbs.arg, l, l ? l->ctx : NULL, (struct sd_prov_conn *)c, c->priv,
					    c->priv_len, sl ? (struct sockaddr *)&ss : NULL, sl);
		}
		break;
	case AM_CM_ACCEPT:
		if (c->state == CS_CONNECTING) {
			send_ctrl(c, AM_CM_RTU, NULL, 0);
			n++;
			established(c, c->priv, c->priv_len);
		}
		break;
	case AM_CM_REJECT:
		if (c->state == CS_CONNECTING) {
			c->state = CS_FAILED;
			c->fail_status = DOCA_ERROR_CONNECTION_ABORTED;
			c->fail_reason = SD_PROV_FAIL_REFUSED;
			snprintf(c->why, sizeof(c->why), "the connection request was rejected by the peer");
			close_ep(c, 1);
			n++;
			emit(c, SD_PROV_EV_REJECTED, DOCA_ERROR_CONNECTION_ABORTED, SD_PROV_FAIL_REFUSED, c->priv,
			     c->priv_len, c->why);
			return n;
		}
		break;
	case AM_CM_RTU:
		if (c->state == CS_CM_ACCEPTED) {
			n++;
			established(c, NULL, 0);
		}
		break;
	case AM_BYE:
		if (c->state != CS_FAILED) {
			conn_fail(c, 1, DOCA_ERROR_CONNECTION_RESET, SD_PROV_FAIL_LOST, "the peer closed the connection");
			if (c->pending_ev)
				c->pending_ev = SD_PROV_EV_DISCONNECTED;
		}
		break;
	default:
		break;
	}
	/* deadlines */
	if ((c->state == CS_CONNECTING || c->state == CS_CM_WAIT_REQ || c->state == CS_CM_REQUESTED ||
	     c->state == CS_CM_ACCEPTED || (c->state == CS_NEW && c->deadline_ns)) && c->deadline_ns && now > c->deadline_ns)
		conn_fail(c, 1, DOCA_ERROR_TIME_OUT, SD_PROV_FAIL_TIMEOUT,
			  "no answer from the peer within %llu ms (address pointing nowhere, or the peer is gone)",
			  (unsigned long long)(p->timeout_ns / 1000000));
	else if (c->outstanding && c->state != CS_FAILED && now - c->outstanding->start_ns > p->timeout_ns) {
		char why[96];

		snprintf(why, sizeof(why), "an operation got no completion within %llu ms: the peer is taken as gone",
			 (unsigned long long)(p->timeout_ns / 1000000));
		if (c->link) /* the endpoint is the link's: its other connections are as stuck */
			link_fail(c->link, UCS_OK, why);
		else
			conn_fail(c, 1, DOCA_ERROR_CONNECTION_RESET, SD_PROV_FAIL_LOST, "%s", why);
	}
	if (c->pending_ev) {
		int e = c->pending_ev;

		c->pending_ev = 0;
		n++;
		emit(c, (enum sd_prov_conn_ev)e, c->fail_status, c->fail_reason, NULL, 0, c->why);
	}
	if (c->state == CS_FAILED)
		return n;
	/* writes waiting for their remote completion */
	if (c->await_head) {
		struct uop **pp = &c->await_head;
		int need = 0;

		while (*pp) {
			struct uop *o = *pp;

			if (o->wait_seq <= c->flush_done) {
				*pp = o->gnext;
				o->gnext = NULL;
				op_to_done(o);
			} else {
				if (o->wait_seq > c->flush_issued)
					need = 1;
				pp = &o->gnext;
			}
		}
		if (need && !c->flush_inflight)
			issue_flush(c);
	}
	gate_pump(c);
	n += rx_pump(c);
	return n;
}

static void conn_free(struct uconn *c)
{
	struct sd_prov *p = c->p;
	uint32_t idx = (uint32_t)c->id;

	if (idx && idx <= p->nslots && p->slots[idx - 1] == c)
		p->slots[idx - 1] = NULL;
	if (c->prev)
		c->prev->next = c->next;
	else
		p->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->paddr)
		link_put(c); /* closed while it waited for its link */
	rkc_clear(c);
	rxq_free(c);
	free(c);
}

static int conn_freeable(const struct uconn *c)
{
	return c->closed_by_user && !c->ep && !c->close_req && !c->outstanding && !c->rx_placing;
}

/* ------------------------------------------------------------------ progress */
static int u_progress(struct sd_prov *p)
{
	int n = 0;
	uint64_t now;

	for (int i = 0; i < 256; i++) {
		unsigned k = U.worker_progress(p->worker);

		if (!k)
			break;
		n += (int)k;
	}
	while (p->place_done) {
		struct uplace *pl = p->place_done;
		doca_error_t st = map_status(pl->st);

		p->place_done = pl->next;
		pl->c->rx_placing = 0;
		conn_kick(pl->c);
		if (pl->c->closed_by_user && st == DOCA_SUCCESS)
			st = DOCA_ERROR_CONNECTION_RESET;
		/* even after conn_close: the owner of dst gets it back only here */
		p->cbs.rx_done(p->cbs.arg, pl->rx_ctx, st, st ? 0 : pl->len);
		free(pl);
		n++;
	}
	p->kick_any = 0;
	now = now_ns();
	if (p->links)
		link_pump(p, now);
	for (struct uconn *c = p->conns; c; c = c->next)
		n += conn_pump(c, now);
	while (p->done_head) {
		struct uop *o = p->done_head;

		p->done_head = o->next;
		if (!p->done_head)
			p->done_tail = NULL;
		if (o->type != OP_CTRL && o->type != OP_IFLUSH) {
			p->cbs.op_done(p->cbs.arg, o->op_ctx, o->status);
			n++;
		}
		if (o->pending > 0) {
			o->orphan = 1;
			o->next = p->orphans;
			p->orphans = o;
		} else {
			o->next = p->free_ops;
			p->free_ops = o;
		}
	}
	for (struct uop **pp = &p->orphans; *pp;) {
		struct uop *o = *pp;

		if (o->pending > 0) {
			pp = &o->next;
			continue;
		}
		*pp = o->next;
		o->next = p->free_ops;
		p->free_ops = o;
	}
	for (struct uconn *c = p->conns, *nx; c; c = nx) {
		nx = c->next;
		if (conn_freeable(c))
			conn_free(c);
	}
	return n;
}

static doca_error_t u_get_fd(struct sd_prov *p, int *fd)
{
	*fd = p->efd;
	return p->efd >= 0 ? DOCA_SUCCESS : DOCA_ERROR_NOT_SUPPORTED;
}

static doca_error_t u_arm(struct sd_prov *p, int *max_sleep_ms)
{
	uint64_t now = now_ns(), next = UINT64_MAX;
	ucs_status_t s;

	if (p->done_head || p->kick_any || p->place_done)
		return DOCA_ERROR_AGAIN;
	for (struct uconn *c = p->conns; c; c = c->next) {
		if (c->kicked || c->pending_ev || c->cm_pending_event)
			return DOCA_ERROR_AGAIN;
		if (c->deadline_ns && c->state != CS_ESTABLISHED && c->state != CS_FAILED && c->deadline_ns < next)
			next = c->deadline_ns;
		if (c->outstanding && c->state != CS_FAILED && c->outstanding->start_ns + p->timeout_ns < next)
			next = c->outstanding->start_ns + p->timeout_ns;
	}
	for (struct ulink *l = p->links; l; l = l->next) {
		if (l->state == LK_CLOSING && (l->ep || (!l->close_req && !l->sends)))
			return DOCA_ERROR_AGAIN;
		if (l->state != LK_CLOSING && l->deadline_ns && l->deadline_ns < next)
			next = l->deadline_ns;
	}
	s = U.worker_arm(p->worker);
	if (s == UCS_ERR_BUSY)
		return DOCA_ERROR_AGAIN;
	if (s != UCS_OK)
		return map_status(s);
	if (max_sleep_ms)
		*max_sleep_ms = next == UINT64_MAX ? -1 : next <= now ? 0 : (int)((next - now) / 1000000 + 1);
	return DOCA_SUCCESS;
}

/* ------------------------------------------------------------------ open / close */
static doca_error_t u_open(const struct sd_prov_open_params *prm, struct sd_prov **out, struct sd_prov_why *why)
{
	struct sd_prov *p;
	ucp_config_t *cfg = NULL;
	ucp_params_t up;
	ucp_worker_params_t wp;
	ucp_am_handler_param_t ap;
	ucs_status_t s;
	doca_error_t e;
	FILE *ur;

	if (!prm || !prm->cbs || !prm->cbs->op_done || !prm->cbs->rx || !prm->cbs->rx_done || !out)
		return DOCA_ERROR_INVALID_VALUE;
	e = u_probe(why);
	if (e)
		return e;
	p = calloc(1, sizeof(*p));
	if (!p)
		return DOCA_ERROR_NO_MEMORY;
	p->cbs = *prm->cbs;
	p->efd = -1;
	p->timeout_ns = (uint64_t)(prm->timeout_ms ? prm->timeout_ms : 5000) * 1000000ull;
	ur = fopen("/dev/urandom", "rb");
	if (!ur || fread(&p->uid, sizeof(p->uid), 1, ur) != 1)
		p->uid = now_ns() ^ ((uint64_t)getpid() << 32);
	if (ur)
		fclose(ur);
	p->uid |= 1;
	p->host = host_id();
	s = U.config_read(NULL, NULL, &cfg);
	if (s != UCS_OK) {
		WHY(why, "provider ucx: ucp_config_read: %s (check the UCX_* environment)", ustr(s));
		free(p);
		return DOCA_ERROR_BAD_CONFIG;
	}
	memset(&up, 0, sizeof(up));
	up.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
	up.features = UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
	up.name = "softdoca";
	s = U.init_version(UCP_API_MAJOR, UCP_API_MINOR, &up, cfg, &p->ctx);
	U.config_release(cfg);
	if (s != UCS_OK) {
		WHY(why, "provider ucx: ucp_init: %s (UCX_TLS=%s: does it name a transport present here?)", ustr(s),
		    getenv("UCX_TLS") ? getenv("UCX_TLS") : "(unset)");
		free(p);
		return DOCA_ERROR_INITIALIZATION;
	}
	memset(&wp, 0, sizeof(wp));
	wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
	s = U.worker_create(p->ctx, &wp, &p->worker);
	if (s != UCS_OK) {
		WHY(why, "provider ucx: ucp_worker_create: %s", ustr(s));
		U.cleanup(p->ctx);
		free(p);
		return DOCA_ERROR_INITIALIZATION;
	}
	memset(&ap, 0, sizeof(ap));
	ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
			UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
	ap.id = SD_UCX_AM_ID;
	ap.flags = UCP_AM_FLAG_WHOLE_MSG;
	ap.cb = am_cb;
	ap.arg = p;
	s = U.worker_set_am_recv_handler(p->worker, &ap);
	if (s == UCS_OK)
		s = U.worker_get_efd(p->worker, &p->efd);
	if (s != UCS_OK) {
		WHY(why, "provider ucx: worker set-up: %s", ustr(s));
		U.worker_destroy(p->worker);
		U.cleanup(p->ctx);
		free(p);
		return DOCA_ERROR_INITIALIZATION;
	}
	*out = p;
	return DOCA_SUCCESS;
}

static doca_error_t u_close(struct sd_prov *p)
{
	if (!p)
		return DOCA_ERROR_INVALID_VALUE;
	if (p->nmr || p->nrkey)
		return DOCA_ERROR_IN_USE;
	for (struct ulink *l = p->links; l; l = l->next)
		link_close(l, 1); /* before the connections leave them: no UNLINK */
	for (struct uconn *c = p->conns; c; c = c->next) {
		c->closed_by_user = 1;
		if (c->state != CS_FAILED)
			conn_fail(c, 1, DOCA_ERROR_CONNECTION_RESET, SD_PROV_FAIL_LOST, "provider closed");
		if (c->link || c->paddr)
			link_put(c);
	}
	for (struct ulink *l = p->links; l; l = l->next)
		if (l->ep)
			link_close_ep(l);
	/* let the closes finish, bounded */
	for (uint64_t end = now_ns() + (p->timeout_ns < 2000000000ull ? p->timeout_ns : 2000000000ull); now_ns() < end;) {
		int busy = 0;

		U.worker_progress(p->worker);
		for (struct uconn *c = p->conns; c; c = c->next)
			busy |= c->close_req != NULL || c->rx_placing;
		for (struct ulink *l = p->links; l; l = l->next)
			busy |= l->close_req != NULL || l->sends;
		if (!busy)
			break;
	}
	for (struct uconn *c = p->conns; c; c = c->next)
		rkc_clear(c);
	U.worker_destroy(p->worker); /* before freeing what UCX callbacks may touch */
	U.cleanup(p->ctx);
	while (p->done_head) {
		struct uop *o = p->done_head;

		p->done_head = o->next;
		free(o);
	}
	while (p->orphans) {
		struct uop *o = p->orphans;

		p->orphans = o->next;
		free(o);
	}
	while (p->place_done) {
		struct uplace *pl = p->place_done;

		p->place_done = pl->next;
		free(pl);
	}
	while (p->conns) {
		struct uconn *c = p->conns;

		/* ops still listed (UCX did not complete them): free them */
		while (c->outstanding) {
			struct uop *o = c->outstanding;

			op_unlink(o);
			free(o);
		}
		c->nrkc = 0; /* the rkeys went with the context */
		conn_free(c);
	}
	while (p->free_ops) {
		struct uop *o = p->free_ops;

		p->free_ops = o->next;
		free(o);
	}
	while (p->links) { /* what UCX still held went with the worker */
		struct ulink *l = p->links;

		p->links = l->next;
		free(l);
	}
	free(p->slots);
	free(p->gens);
	free(p);
	return DOCA_SUCCESS;
}

static void u_caps(struct sd_prov *p, struct sd_prov_caps *caps)
{
	int verbs;

	memset(caps, 0, sizeof(*caps));
	snprintf(caps->name, sizeof(caps->name), PROV_NAME);
	snprintf(caps->version, sizeof(caps->version), "%u.%u.%u", U.major, U.minor, U.release);
	snprintf(caps->transport, sizeof(caps->transport), "%s", p->transport);
	verbs = strstr(p->transport, "rc") || strstr(p->transport, "dc") || strstr(p->transport, "ud");
	/* verbs memory regions bound remote access; UCX 1.13 registers them with
	 * every remote right, so access bits are softdoca's to check */
	caps->enforce = verbs ? SD_PROV_ENF_BOUNDS | SD_PROV_ENF_REVOKE : 0;
	caps->flags = SD_PROV_CAP_OOB | SD_PROV_CAP_CM | SD_PROV_CAP_FD | SD_PROV_CAP_CHECK_REQUESTER |
		      (verbs ? SD_PROV_CAP_ATOMIC_NATIVE | SD_PROV_CAP_ONE_SIDED_NO_TARGET : 0);
	caps->max_msg = 1ull << 30;
	caps->max_iov = MAX_IOV;
	caps->max_priv = SD_PROV_MAX_PRIV;
	caps->thread_mode = 0;
}

/* ------------------------------------------------------------------ memory */
#define ACCESS_MASK 0x7fu

static doca_error_t u_reg_mem(struct sd_prov *p, void *addr, size_t len, uint32_t access, struct sd_prov_mr **out,
			      void **blob, size_t *blob_len)
{
	struct sd_prov_mr *mr;
	ucp_mem_map_params_t mp;
	void *packed = NULL;
	size_t plen = 0;
	ucs_status_t s;
	uint8_t *b;
	uint32_t total;

	if (!p || !addr || !len || (access & ~ACCESS_MASK) || !out || !blob || !blob_len)
		return DOCA_ERROR_INVALID_VALUE;
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return DOCA_ERROR_NO_MEMORY;
	memset(&mp, 0, sizeof(mp));
	mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
	mp.address = addr;
	mp.length = len;
	s = U.mem_map(p->ctx, &mp, &mr->memh);
	if (s != UCS_OK) {
		free(mr);
		return map_status(s);
	}
	s = U.rkey_pack(p->ctx, mr->memh, &packed, &plen);
	if (s != UCS_OK || plen > SD_PROV_BLOB_MAX - SD_PROV_BLOB_HDR_LEN - RKEY_BODY_FIXED) {
		if (s == UCS_OK)
			U.rkey_buffer_release(packed);
		U.mem_unmap(p->ctx, mr->memh);
		free(mr);
		return s != UCS_OK ? map_status(s) : DOCA_ERROR_TOO_BIG;
	}
	total = (uint32_t)(SD_PROV_BLOB_HDR_LEN + RKEY_BODY_FIXED + plen);
	b = malloc(total);
	if (!b) {
		U.rkey_buffer_release(packed);
		U.mem_unmap(p->ctx, mr->memh);
		free(mr);
		return DOCA_ERROR_NO_MEMORY;
	}
	sd_prov_blob_begin(b, PROV_NAME, SD_PROV_BLOB_RKEY, total);
	put64(b + 32, (uint64_t)(uintptr_t)addr);
	put64(b + 40, len);
	put32(b + 48, access);
	put32(b + 52, 0);
	put64(b + 56, p->uid);
	put32(b + 64, (uint32_t)plen);
	put32(b + 68, 0);
	memcpy(b + 72, packed, plen);
	sd_prov_blob_seal(b, total);
	U.rkey_buffer_release(packed);
	mr->addr = addr;
	mr->len = len;
	mr->access = access;
	p->nmr++;
	*out = mr;
	*blob = b;
	*blob_len = total;
	return DOCA_SUCCESS;
}

static doca_error_t u_dereg_mem(struct sd_prov *p, struct sd_prov_mr *mr)
{
	ucs_status_t s;

	if (!p || !mr)
		return DOCA_ERROR_INVALID_VALUE;
	s = U.mem_unmap(p->ctx, mr->memh);
	free(mr);
	p->nmr--;
	return map_status(s);
}

static doca_error_t u_rkey_import(struct sd_prov *p, const void *blob, size_t len, struct sd_prov_rkey **out,
				  uint64_t *base, uint64_t *rlen, uint32_t *access, struct sd_prov_why *why)
{
	const uint8_t *b;
	size_t bl;
	doca_error_t e;
	struct sd_prov_rkey *rk;
	uint64_t rb, rl;
	uint32_t acc, plen;

	if (!p || !out)
		return DOCA_ERROR_INVALID_VALUE;
	e = sd_prov_blob_check(blob, len, PROV_NAME, SD_PROV_BLOB_RKEY, &b, &bl, why);
	if (e)
		return e;
	if (bl < RKEY_BODY_FIXED) {
		WHY(why, "ucx remote key blob: body of %zu bytes, at least %u expected", bl, RKEY_BODY_FIXED);
		return DOCA_ERROR_INVALID_VALUE;
	}
	rb = get64(b);
	rl = get64(b + 8);
	acc = get32(b + 16);
	plen = get32(b + 32);
	if (plen == 0 || plen != bl - RKEY_BODY_FIXED || rl == 0 || rb + rl < rb || (acc & ~ACCESS_MASK) ||
	    get64(b + 24) == 0) {
		WHY(why, "ucx remote key blob: inconsistent fields (range 0x%llx+%llu, access 0x%x, key %u of %zu bytes)",
		    (unsigned long long)rb, (unsigned long long)rl, acc, plen, bl - RKEY_BODY_FIXED);
		return DOCA_ERROR_INVALID_VALUE;
	}
	rk = malloc(sizeof(*rk) + plen);
	if (!rk)
		return DOCA_ERROR_NO_MEMORY;
	rk->base = rb;
	rk->len = rl;
	rk->access = acc;
	rk->owner = get64(b + 24);
	rk->packed_len = plen;
	memcpy(rk->packed, b + RKEY_BODY_FIXED, plen);
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

static void u_rkey_release(struct sd_prov *p, struct sd_prov_rkey *rk)
{
	if (!p || !rk)
		return;
	for (struct uconn *c = p->conns; c; c = c->next)
		for (int i = 0; i < c->nrkc; i++)
			if (c->rkc[i].rk == rk) {
				U.rkey_destroy(c->rkc[i].h);
				c->rkc[i] = c->rkc[--c->nrkc];
				break;
			}
	free(rk);
	p->nrkey--;
}

/* ------------------------------------------------------------------ connections */
/*
 * UCX 1.13's shared-memory transports (posix, sysv, cma) have no peer-failure
 * support: an endpoint created with UCP_ERR_HANDLING_MODE_PEER is unreachable
 * over them, and where tcp is also enabled UCX silently picks tcp instead. So a
 * connection whose peer shares this host (same boot, same IPC, mount and PID
 * namespaces, same uid: what posix shm and cma need) gets an endpoint without
 * UCX error handling. Peer death is then seen by the deadlines of this
 * provider (every op and set-up) and by the DOCA connection above it, which
 * fail the connection with a forced close.
 */
static uint32_t host_id(void)
{
	static const char *const ns[] = { "/proc/self/ns/ipc", "/proc/self/ns/mnt", "/proc/self/ns/pid" };
	char boot[64] = { 0 };
	uint32_t h = 2166136261u;
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	struct stat st;
	uint64_t v[4];

	if (!f)
		return 0;
	if (!fgets(boot, sizeof(boot), f))
		boot[0] = 0;
	fclose(f);
	if (!boot[0])
		return 0;
	for (size_t i = 0; i < 3; i++)
		v[i] = stat(ns[i], &st) == 0 ? (uint64_t)st.st_ino : 0;
	v[3] = (uint64_t)getuid();
	for (const char *b = boot; *b; b++)
		h = (h ^ (uint8_t)*b) * 16777619u;
	for (size_t i = 0; i < sizeof(v); i++)
		h = (h ^ ((const uint8_t *)v)[i]) * 16777619u;
	return h ? h : 1;
}

/* Whether UCX_TLS leaves a shared-memory transport enabled (UCX's default
 * does). Where it does not, a same-host peer keeps peer-failure handling: it
 * would gain nothing without it, and lose UCX's own error reports. */
static int shm_enabled(void)
{
	static const char *const shm[] = { "all", "sm", "shm", "posix", "sysv", "cma", "knem", "xpmem", "mm" };
	const char *t = getenv("UCX_TLS");
	char buf[256], *save = NULL;
	int exclude, hit = 0;

	if (!t || !*t)
		return 1;
	exclude = t[0] == '^';
	snprintf(buf, sizeof(buf), "%s", t + exclude);
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		for (size_t i = 0; i < sizeof(shm) / sizeof(shm[0]); i++)
			if (!strcmp(tok, shm[i]) && (!exclude || !strcmp(tok, "sm") || !strcmp(tok, "shm")))
				hit = 1;
	}
	return exclude ? !hit : hit;
}

static ucp_ep_params_t ep_params(struct uconn *c)
{
	return ep_params_for(c->same_host, err_cb, c);
}

static doca_error_t u_conn_create(struct sd_prov *p, void *ctx, struct sd_prov_conn **out)
{
	struct uconn *c;

	if (!p || !out)
		return DOCA_ERROR_INVALID_VALUE;
	c = conn_alloc(p, ctx);
	if (!c)
		return DOCA_ERROR_NO_MEMORY;
	*out = (struct sd_prov_conn *)c;
	return DOCA_SUCCESS;
}

static doca_error_t u_conn_export(struct sd_prov_conn *pc, void **blob, size_t *len)
{
	struct uconn *c = (struct uconn *)pc;
	ucp_address_t *a = NULL;
	size_t alen = 0;
	ucs_status_t s;
	uint8_t *b;
	uint32_t total;

	if (!c || !blob || !len || c->is_cm)
		return DOCA_ERROR_INVALID_VALUE;
	s = U.worker_get_address(c->p->worker, &a, &alen);
	if (s != UCS_OK)
		return map_status(s);
	total = (uint32_t)(SD_PROV_BLOB_HDR_LEN + ADDR_BODY_FIXED + alen);
	b = malloc(total);
	if (!b) {
		U.worker_release_address(c->p->worker, a);
		return DOCA_ERROR_NO_MEMORY;
	}
	sd_prov_blob_begin(b, PROV_NAME, SD_PROV_BLOB_ADDR, total);
	put64(b + 32, c->p->uid);
	put64(b + 40, c->id);
	put32(b + 48, (uint32_t)alen);
	put32(b + 52, c->p->host); /* 0: unknown (never the same host) */
	memcpy(b + 56, a, alen);
	sd_prov_blob_seal(b, total);
	U.worker_release_address(c->p->worker, a);
	*blob = b;
	*len = total;
	return DOCA_SUCCESS;
}

static doca_error_t u_conn_connect(struct sd_prov_conn *pc, const void *blob, size_t len, struct sd_prov_why *why)
{
	struct uconn *c = (struct uconn *)pc;
	const uint8_t *b;
	size_t bl;
	doca_error_t e;
	uint32_t alen;
	ucp_ep_params_t ep;
	ucs_status_t s;

	if (!c)
		return DOCA_ERROR_INVALID_VALUE;
	if (c->state != CS_NEW || c->is_cm) {
		WHY(why, "ucx connection already connected");
		return DOCA_ERROR_BAD_STATE;
	}
	e = sd_prov_blob_check(blob, len, PROV_NAME, SD_PROV_BLOB_ADDR, &b, &bl, why);
	if (e)
		return e;
	alen = bl >= ADDR_BODY_FIXED ? get32(b + 16) : 0;
	if (bl < ADDR_BODY_FIXED || alen == 0 || alen != bl - ADDR_BODY_FIXED || get64(b) == 0 || get64(b + 8) == 0) {
		WHY(why, "ucx connection blob: inconsistent fields");
		return DOCA_ERROR_INVALID_VALUE;
	}
	c->peer_uid = get64(b);
	c->peer_id = get64(b + 8);
	c->same_host = c->p->host && get32(b + 20) == c->p->host && shm_enabled();
	if (c->peer_uid != c->p->uid) { /* another instance: the link to it (see "Links") */
		struct ulink *l = link_find(c->p, c->peer_uid);

		if (l && l->state == LK_UNLINKING) { /* wait for the peer's answer (link_pump) */
			c->paddr = malloc(alen);
			if (!c->paddr) {
				c->peer_uid = c->peer_id = 0;
				return DOCA_ERROR_NO_MEMORY;
			}
			memcpy(c->paddr, b + ADDR_BODY_FIXED, alen);
			c->p->link_waiters++;
		} else {
			if (!l)
				l = link_open(c->p, c->peer_uid, c->same_host, b + ADDR_BODY_FIXED, why);
			if (!l) {
				c->peer_uid = c->peer_id = 0;
				return DOCA_ERROR_CONNECTION_ABORTED;
			}
			link_attach(c, l);
		}
	} else {
		ep = ep_params(c); /* loopback: UCP connects the endpoint to itself */
		ep.field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
		ep.address = (const ucp_address_t *)(b + ADDR_BODY_FIXED);
		s = U.ep_create(c->p->worker, &ep, &c->ep);
		if (s != UCS_OK) {
			c->ep = NULL;
			WHY(why, "ucx: cannot reach the peer's worker address: %s", ustr(s));
			c->peer_uid = c->peer_id = 0;
			return DOCA_ERROR_CONNECTION_ABORTED;
		}
	}
	c->state = CS_CONNECTING;
	c->connected_local = 1;
	c->deadline_ns = now_ns() + c->p->timeout_ns;
	e = c->ep ? send_ctrl(c, AM_HELLO, NULL, 0) : DOCA_SUCCESS; /* a waiting one says HELLO once attached */
	conn_kick(c);
	return e;
}

static void conn_handler(ucp_conn_request_h req, void *arg)
{
	struct sd_prov_listener *l = arg;
	struct sd_prov *p = l->p;
	struct uconn *c = conn_alloc(p, NULL);
	ucp_conn_request_attr_t ra;
	ucp_ep_params_t ep;

	if (!c) {
		U.listener_reject(l->l, req);
		return;
	}
	memset(&ra, 0, sizeof(ra));
	ra.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
	if (U.conn_request_query(req, &ra) == UCS_OK)
		c->peer_ss = ra.client_address;
	c->is_cm = 1;
	c->listener = l;
	ep = ep_params(c);
	ep.field_mask |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
	ep.conn_request = req;
	if (U.ep_create(p->worker, &ep, &c->ep) != UCS_OK) {
		c->ep = NULL;
		c->closed_by_user = 1; /* never reported: freed at the next progress */
		c->state = CS_FAILED;
		return;
	}
	c->state = CS_CM_WAIT_REQ;
	c->deadline_ns = now_ns() + p->timeout_ns;
}

static doca_error_t u_listen(struct sd_prov *p, struct sockaddr_storage *addr, socklen_t *alen, void *ctx,
			     struct sd_prov_listener **out, struct sd_prov_why *why)
{
	struct sd_prov_listener *l;
	ucp_listener_params_t lp;
	ucp_listener_attr_t la;
	ucs_status_t s;

	if (!p || !addr || !alen || !out)
		return DOCA_ERROR_INVALID_VALUE;
	l = calloc(1, sizeof(*l));
	if (!l)
		return DOCA_ERROR_NO_MEMORY;
	l->p = p;
	l->ctx = ctx;
	memset(&lp, 0, sizeof(lp));
	lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
	lp.sockaddr.addr = (const struct sockaddr *)addr;
	lp.sockaddr.addrlen = *alen;
	lp.conn_handler.cb = conn_handler;
	lp.conn_handler.arg = l;
	s = U.listener_create(p->worker, &lp, &l->l);
	if (s != UCS_OK) {
		WHY(why, "ucx: cannot listen: %s", ustr(s));
		free(l);
		return s == UCS_ERR_BUSY ? DOCA_ERROR_IN_USE : map_status(s);
	}
	memset(&la, 0, sizeof(la));
	la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
	if (U.listener_query(l->l, &la) == UCS_OK) {
		memcpy(addr, &la.sockaddr, sizeof(*addr));
		*alen = la.sockaddr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	}
	*out = l;
	return DOCA_SUCCESS;
}

static void u_listener_close(struct sd_prov_listener *l)
{
	if (!l)
		return;
	U.listener_destroy(l->l);
	for (struct uconn *c = l->p->conns; c; c = c->next)
		if (c->listener == l)
			c->listener = NULL;
	free(l);
}

static doca_error_t u_accept(struct sd_prov_conn *pc, const void *priv, size_t priv_len)
{
	struct uconn *c = (struct uconn *)pc;
	doca_error_t e;

	if (!c || priv_len > SD_PROV_MAX_PRIV || (priv_len && !priv))
		return DOCA_ERROR_INVALID_VALUE;
	if (c->state != CS_CM_REQUESTED)
		return c->state == CS_FAILED ? c->fail_status : DOCA_ERROR_BAD_STATE;
	e = send_ctrl(c, AM_CM_ACCEPT, priv, priv_len);
	if (e == DOCA_SUCCESS) {
		c->state = CS_CM_ACCEPTED;
		c->deadline_ns = now_ns() + c->p->timeout_ns;
	}
	return e;
}

/* Close once what was sent is at the peer (ucp_ep_flush_nbx), bounded by
 * timeout_ms; then a forced close (a graceful ucp_ep_close_nbx waits for the
 * peer's side, which may be closing too). */
static void close_after_flush(struct uconn *c)
{
	c->state = CS_CLOSING;
	c->deadline_ns = now_ns() + c->p->timeout_ns;
	issue_flush(c);
	c->close_seq = c->flush_issued;
	conn_kick(c);
}

static doca_error_t u_reject(struct sd_prov_conn *pc, const void *priv, size_t priv_len)
{
	struct uconn *c = (struct uconn *)pc;

	if (!c || priv_len > SD_PROV_MAX_PRIV || (priv_len && !priv))
		return DOCA_ERROR_INVALID_VALUE;
	if (c->state != CS_CM_REQUESTED)
		return c->state == CS_FAILED ? c->fail_status : DOCA_ERROR_BAD_STATE;
	send_ctrl(c, AM_CM_REJECT, priv, priv_len);
	c->closed_by_user = 1;
	close_after_flush(c); /* the REJECT reaches the client first */
	return DOCA_SUCCESS;
}

static doca_error_t u_connect_addr(struct sd_prov *p, const struct sockaddr *addr, socklen_t alen, const void *priv,
				   size_t priv_len, void *ctx, struct sd_prov_conn **out, struct sd_prov_why *why)
{
	struct uconn *c;
	ucp_ep_params_t ep;
	ucs_status_t s;
	doca_error_t e;

	if (!p || !addr || !out || priv_len > SD_PROV_MAX_PRIV || (priv_len && !priv))
		return DOCA_ERROR_INVALID_VALUE;
	c = conn_alloc(p, ctx);
	if (!c)
		return DOCA_ERROR_NO_MEMORY;
	c->is_cm = c->cm_client = 1;
	ep = ep_params(c);
	ep.field_mask |= UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_FLAGS;
	ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
	ep.sockaddr.addr = addr;
	ep.sockaddr.addrlen = alen;
	s = U.ep_create(p->worker, &ep, &c->ep);
	if (s != UCS_OK) {
		c->ep = NULL;
		WHY(why, "ucx: cannot connect: %s", ustr(s));
		c->closed_by_user = 1;
		c->state = CS_FAILED;
		return DOCA_ERROR_CONNECTION_ABORTED;
	}
	c->state = CS_CONNECTING;
	c->deadline_ns = now_ns() + p->timeout_ns;
	e = send_ctrl(c, AM_CM_REQ, priv, priv_len);
	if (e) {
		c->closed_by_user = 1;
		close_ep(c, 1);
		c->state = CS_FAILED;
		return e;
	}
	*out = (struct sd_prov_conn *)c;
	return DOCA_SUCCESS;
}

static int u_closing(struct sd_prov *p)
{
	int n = 0;

	for (struct uconn *c = p ? p->conns : NULL; c; c = c->next)
		n += c->closed_by_user && c->state == CS_CLOSING && c->ep != NULL; /* its flush is not done */
	for (struct ulink *l = p ? p->links : NULL; l; l = l->next)
		n += l->state == LK_UNLINKING || l->ep || l->close_req; /* the peer's answer, the close's flush */
	return n;
}

static void u_conn_set_ctx(struct sd_prov_conn *pc, void *ctx)
{
	if (pc)
		((struct uconn *)pc)->ctx = ctx;
}

static void u_conn_transport(struct sd_prov_conn *pc, char *out, size_t n)
{
	struct uconn *c = (struct uconn *)pc;

	if (!c->transport[0] && c->ep)
		ep_transport(c->ep, c->transport, sizeof(c->transport));
	snprintf(out, n, "%s", c->transport);
}

static void u_conn_close(struct sd_prov_conn *pc)
{
	struct uconn *c = (struct uconn *)pc;

	if (!c || c->closed_by_user)
		return;
	c->closed_by_user = 1;
	if (c->state == CS_ESTABLISHED)
		send_ctrl(c, AM_BYE, NULL, 0);
	if (c->state != CS_FAILED) {
		/* queued (gated) ops never left: they fail */
		while (c->gate_head) {
			struct uop *o = c->gate_head;

			c->gate_head = o->gnext;
			o->gnext = NULL;
			o->status = DOCA_ERROR_CONNECTION_RESET;
			op_to_done(o);
		}
		c->gate_tail = NULL;
		while (c->await_head) {
			struct uop *o = c->await_head;

			c->await_head = o->gnext;
			op_to_done(o); /* its data left; the close flushes it */
		}
		rxq_free(c);
		close_after_flush(c);
	}
	c->p->kick_any = 1;
}

/* ------------------------------------------------------------------ data ops */
static doca_error_t conn_ready(struct uconn *c)
{
	if (!c)
		return DOCA_ERROR_INVALID_VALUE;
	if (c->closed_by_user || c->state == CS_CLOSING)
		return DOCA_ERROR_BAD_STATE;
	if (c->state == CS_FAILED)
		return c->fail_status ? c->fail_status : DOCA_ERROR_CONNECTION_RESET;
	if (c->state != CS_ESTABLISHED)
		return DOCA_ERROR_NOT_CONNECTED;
	return DOCA_SUCCESS;
}

static doca_error_t iov_total(const struct sd_prov_iov *iov, int niov, size_t *total)
{
	size_t t = 0;

	if (niov < 0 || niov > MAX_IOV || (niov && !iov))
		return DOCA_ERROR_INVALID_VALUE;
	for (int i = 0; i < niov; i++) {
		if (iov[i].len && !iov[i].addr)
			return DOCA_ERROR_INVALID_VALUE;
		t += iov[i].len;
		if (t > (1ull << 30))
			return DOCA_ERROR_TOO_BIG;
	}
	*total = t;
	return DOCA_SUCCESS;
}

/* softdoca's checks where the transport has none: the key's owner, bounds, rights. */
static doca_error_t rcheck(struct uconn *c, struct sd_prov_rkey *rk, uint64_t raddr, uint64_t len, uint32_t need)
{
	if (!rk)
		return DOCA_ERROR_INVALID_VALUE;
	if (rk->owner != c->peer_uid)
		return DOCA_ERROR_NOT_PERMITTED; /* a key of another peer */
	if (raddr < rk->base || raddr + len < raddr || raddr - rk->base > rk->len || len > rk->len - (raddr - rk->base))
		return DOCA_ERROR_NOT_PERMITTED;
	if ((rk->access & need) != need)
		return DOCA_ERROR_NOT_PERMITTED;
	return DOCA_SUCCESS;
}

static void issue_puts(struct uop *o, const struct sd_prov_iov *iov, int niov, ucp_rkey_h h)
{
	struct uconn *c = o->c;
	ucp_request_param_t rp;
	uint64_t off = 0;

	param_init(&rp, o);
	for (int i = 0; i < niov; i++) {
		if (!iov[i].len)
			continue;
		if (iov[i].mr) {
			rp.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
			rp.memh = iov[i].mr->memh;
		} else {
			rp.op_attr_mask &= ~(uint32_t)UCP_OP_ATTR_FIELD_MEMH;
		}
		track(o, U.put_nbx(c->ep, iov[i].addr, iov[i].len, o->raddr + off, h, &rp));
		off += iov[i].len;
	}
	c->dirty = 1;
}

static doca_error_t u_write(struct sd_prov_conn *pc, const struct sd_prov_iov *iov, int niov, struct sd_prov_rkey *rk,
			    uint64_t raddr, void *op_ctx)
{
	struct uconn *c = (struct uconn *)pc;
	doca_error_t e = conn_ready(c);
	size_t total = 0;
	ucp_rkey_h h;
	struct uop *o;

	if (e || (e = iov_total(iov, niov, &total)) || (e = rcheck(c, rk, raddr, total, DOCA_ACCESS_FLAG_RDMA_WRITE)))
		return e;
	h = rkey_for(c, rk, &e);
	if (!h)
		return e;
	o = op_new(c->p, c, OP_WRITE, op_ctx);
	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	o->raddr = raddr;
	o->need_remote = 1;
	o->wait_seq = c->flush_issued + 1;
	o->pending = 1;
	issue_puts(o, iov, niov, h);
	sub_done(o, UCS_OK);
	return DOCA_SUCCESS;
}

static doca_error_t u_read(struct sd_prov_conn *pc, const struct sd_prov_iov *iov, int niov, struct sd_prov_rkey *rk,
			   uint64_t raddr, void *op_ctx)
{
	struct uconn *c = (struct uconn *)pc;
	doca_error_t e = conn_ready(c);
	size_t total = 0;
	struct uop *o;

	if (e || (e = iov_total(iov, niov, &total)) || (e = rcheck(c, rk, raddr, total, DOCA_ACCESS_FLAG_RDMA_READ)))
		return e;
	if (!rkey_for(c, rk, &e))
		return e;
	o = op_new(c->p, c, OP_READ, op_ctx);
	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	o->rk = rk;
	o->raddr = raddr;
	o->niov = niov;
	memcpy(o->liov, iov, (size_t)niov * sizeof(*iov));
	submit_ordered(c, o);
	return DOCA_SUCCESS;
}

static doca_error_t atomic(struct uconn *c, enum op_type t, struct sd_prov_rkey *rk, uint64_t raddr, uint64_t x,
			   uint64_t swap, uint64_t *result, void *op_ctx)
{
	doca_error_t e = conn_ready(c);
	struct uop *o;

	if (e)
		return e;
	if (!result || (raddr & 7))
		return DOCA_ERROR_INVALID_VALUE;
	if ((e = rcheck(c, rk, raddr, 8, DOCA_ACCESS_FLAG_RDMA_ATOMIC)))
		return e;
	if (!rkey_for(c, rk, &e))
		return e;
	o = op_new(c->p, c, t, op_ctx);
	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	o->rk = rk;
	o->raddr = raddr;
	o->operand = x;       /* add, or compare */
	o->cmp_result = swap; /* cswap: the swap value, loaded into the reply buffer */
	o->result = result;
	submit_ordered(c, o);
	return DOCA_SUCCESS;
}

static doca_error_t u_fadd(struct sd_prov_conn *pc, struct sd_prov_rkey *rk, uint64_t raddr, uint64_t add,
			   uint64_t *result, void *op_ctx)
{
	return atomic((struct uconn *)pc, OP_FADD, rk, raddr, add, 0, result, op_ctx);
}

static doca_error_t u_cswap(struct sd_prov_conn *pc, struct sd_prov_rkey *rk, uint64_t raddr, uint64_t cmp,
			    uint64_t swap, uint64_t *result, void *op_ctx)
{
	return atomic((struct uconn *)pc, OP_CSWAP, rk, raddr, cmp, swap, result, op_ctx);
}

static struct uop *msg_op(struct uconn *c, enum op_type t, enum am_type at, const uint32_t *imm, void *op_ctx)
{
	struct uop *o = op_new(c->p, c, t, op_ctx);

	if (!o)
		return NULL;
	o->hdr.magic = AM_MAGIC;
	o->hdr.type = (uint8_t)at;
	o->hdr.dst = c->peer_id;
	o->hdr.src = c->id;
	o->hdr.uid = c->p->uid;
	o->hdr.seq = ++c->tx_seq;
	if (imm) {
		o->hdr.flags = AMF_IMM;
		o->hdr.imm = *imm;
	}
	return o;
}

static doca_error_t u_send(struct sd_prov_conn *pc, const struct sd_prov_iov *iov, int niov, const uint32_t *imm,
			   void *op_ctx)
{
	struct uconn *c = (struct uconn *)pc;
	doca_error_t e = conn_ready(c);
	size_t total = 0;
	struct uop *o;

	if (e || (e = iov_total(iov, niov, &total)))
		return e;
	o = msg_op(c, OP_SEND, AM_SEND, imm, op_ctx);
	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	for (int i = 0; i < niov; i++) {
		o->uiov[i].buffer = iov[i].addr;
		o->uiov[i].length = iov[i].len;
	}
	o->niov = niov;
	o->total = total;
	submit_ordered(c, o);
	return DOCA_SUCCESS;
}

static doca_error_t u_write_imm(struct sd_prov_conn *pc, const struct sd_prov_iov *iov, int niov,
				struct sd_prov_rkey *rk, uint64_t raddr, uint32_t imm, void *op_ctx)
{
	struct uconn *c = (struct uconn *)pc;
	doca_error_t e = conn_ready(c);
	size_t total = 0;
	ucp_rkey_h h;
	struct uop *o;

	if (e || (e = iov_total(iov, niov, &total)) || (e = rcheck(c, rk, raddr, total, DOCA_ACCESS_FLAG_RDMA_WRITE)))
		return e;
	h = rkey_for(c, rk, &e);
	if (!h)
		return e;
	o = msg_op(c, OP_WIMM, AM_WIMM, &imm, op_ctx);
	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	o->raddr = raddr;
	o->pending = 1;          /* guard over the puts, held until the immediate is issued */
	o->gate_ref = 1;
	issue_puts(o, iov, niov, h);
	submit_ordered(c, o);    /* the immediate: after a flush that covers the puts */
	return DOCA_SUCCESS;
}

static doca_error_t u_flush(struct sd_prov_conn *pc, void *op_ctx)
{
	struct uconn *c = (struct uconn *)pc;
	doca_error_t e = conn_ready(c);
	struct uop *o;

	if (e)
		return e;
	o = op_new(c->p, c, OP_FLUSH, op_ctx);
	if (!o)
		return DOCA_ERROR_NO_MEMORY;
	submit_ordered(c, o);
	return DOCA_SUCCESS;
}

static void u_rx_resume(struct sd_prov_conn *pc)
{
	struct uconn *c = (struct uconn *)pc;

	if (!c)
		return;
	c->rx_held = 0;
	conn_kick(c);
}

const struct sd_provider_ops sd_provider_ucx = {
	.name = PROV_NAME,
	.abi = SD_PROV_ABI,
	.probe = u_probe,
	.open = u_open,
	.close = u_close,
	.query_caps = u_caps,
	.progress = u_progress,
	.get_fd = u_get_fd,
	.arm = u_arm,
	.reg_mem = u_reg_mem,
	.dereg_mem = u_dereg_mem,
	.rkey_import = u_rkey_import,
	.rkey_release = u_rkey_release,
	.conn_create = u_conn_create,
	.conn_export = u_conn_export,
	.conn_connect = u_conn_connect,
	.listen = u_listen,
	.listener_close = u_listener_close,
	.accept = u_accept,
	.reject = u_reject,
	.connect_addr = u_connect_addr,
	.conn_set_ctx = u_conn_set_ctx,
	.conn_transport = u_conn_transport,
	.conn_close = u_conn_close,
	.closing = u_closing,
	.write = u_write,
	.read = u_read,
	.atomic_fadd = u_fadd,
	.atomic_cswap = u_cswap,
	.send = u_send,
	.write_imm = u_write_imm,
	.flush = u_flush,
	.rx_resume = u_rx_resume,
};
