/*
 * softdoca provider `ucx`: what its files share (ucx_provider.c: loading, instance, progress,
 * memory; ucx_worker.c: workers, the receive-queue probe, the swap; ucx_amw.c: small writes as
 * batches; ucx_conn.c: connections and their set-up; ucx_link.c: the endpoint shared by a pair of
 * instances; ucx_rx.c: incoming active messages; ucx_ops.c: data operations and their ordering).
 * Nothing here is seen outside this folder.
 */
#ifndef SOFTDOCA_UCX_INTERNAL_H
#define SOFTDOCA_UCX_INTERNAL_H

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

struct ucx_api {
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
};
extern struct ucx_api UX;

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
	       AM_UNLINK, AM_UNLINK_OK, AM_UNLINK_BUSY, AM_PROBE, AM_WRITEV, AM_WACK };
#define AMF_IMM 1u

/* A UCP worker of the instance. New connections, links and listeners use the current one
 * (sd_prov.w); one retired by a swap (ucx_worker.c) serves what it
 * already carries and is destroyed once nothing uses it. */
struct uworker {
	struct uworker *next;
	struct sd_prov *p;
	ucp_worker_h h;
	uint32_t ahash;            /* hash of its address: peers tell its links from an earlier worker's */
	int listeners;             /* its ucp_listeners */
};

struct uconn;
struct uop {
	struct uop *next, *prev;   /* conn's outstanding list, then the done list */
	struct uop *gnext;         /* gate queue / await list */
	struct sd_prov *p;
	struct uconn *c;
	struct uworker *w;         /* the worker its requests are on */
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
	uint64_t amw_seq;          /* a small write sent as an active message: its batch (ucx_amw.c) */
	uint32_t amw_idx;          /* and its entry in it */
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
	struct uworker *w;            /* ours, the ep's */
	uint64_t uid;                 /* the peer instance */
	uint32_t ahash;               /* the peer worker's address (ux_addr_hash) */
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
	struct uworker *w;            /* the worker it was created on: its blob's address, its ep */
	void *ctx;
	uint64_t id, peer_id, peer_uid;
	enum cstate state;
	int is_cm, cm_client, connected_local, hello_seen, closed_by_user, event_failed_sent;
	int bye_seen;                 /* the peer said it closes (else, same host: probe our queue at close) */
	int same_host;                /* ep without UCX peer-failure handling, so UCX may use shared memory */
	ucp_ep_h ep;                  /* its own (CM, loopback) or its link's */
	struct ulink *link;           /* set up from worker addresses: the shared endpoint it uses */
	uint8_t *paddr;               /* waiting for its link (UNLINKING): the peer's worker address */
	size_t paddr_len;
	uint32_t peer_ahash;          /* the peer worker's address hash (its link's key) */
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
	char why[200];
	struct rkcache *rkc;
	int nrkc, caprkc;
	/* small writes as active messages (ucx_amw.c) */
	int amw_ok;                   /* this connection sends its small writes so (not over verbs) */
	struct amw_batch *wb, *wb_tail; /* batches not sent yet, oldest first; the last one fills */
	uint32_t amw_queued;          /* how many */
	uint64_t amw_sent, amw_acked; /* batches sent, and acknowledged by the target (cumulative) */
	struct uop *amw_head, *amw_tail; /* writes waiting for their batch's acknowledgement (gnext) */
	uint64_t amw_applied;         /* target: every batch up to this one is applied here */
	uint64_t amw_ooo;             /* target: batches applied beyond it (bit k: amw_applied + k + 1) */
	int amw_ack_due;              /* target: an acknowledgement to send */
	int amw_ack_inflight;         /* target: one UCX still holds (the next waits: one per connection) */
	uint64_t amw_fail_seq;        /* target: the first refused entry since the last acknowledgement */
	uint32_t amw_fail_idx;
	doca_error_t amw_fail_st;
	char transport[64];
	struct sockaddr_storage peer_ss; /* CM server: the client's address */
};

struct sd_prov_mr {
	struct sd_prov_mr *next, *prev; /* the instance's registrations (ucx_amw.c checks against them) */
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
	struct uworker *w;
	ucp_listener_h l;
	void *ctx;
};

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

/* The probe of the current worker's shared-memory receive queue (ucx_worker.c). */
struct uprobe {
	ucp_worker_h h;            /* a small worker of its own, created at the first probe */
	ucp_ep_h ep;               /* to `to` */
	struct uworker *to;
	struct am_hdr hdr;
	uint64_t nonce;
	uint64_t due_ns;           /* a probe under way: it must arrive by then */
	int sends;                 /* sends UCX still holds */
};

struct sd_prov {
	struct sd_prov_cbs cbs;
	uint64_t timeout_ns;
	uint64_t uid;
	uint32_t host;             /* ux_host_id(): same value = shared memory reaches the peer */
	ucp_context_h ctx;
	struct uworker *w;         /* the current worker */
	struct uworker *workers;   /* every worker, the current one first */
	int efd;                   /* an epoll fd every worker reports its events into (get_fd) */
	unsigned swaps;            /* workers swapped so far */
	unsigned probes;           /* receive-queue probes sent so far */
	struct sd_prov_mr *mrs;
	int amw_env;               /* SOFTDOCA_UCX_AM_WRITES: -1 unset, 0 off, 1 on */
	int cm;                    /* ux_cm_enabled() at open: client-server connections can work */
	int amw_fill;              /* connections with a batch being filled */
	unsigned long amw_batches, amw_writes; /* batches sent, and the writes in them */
	struct uprobe probe;
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
	long eps;                  /* UCP endpoints created and not closed yet (counter "live_eps") */
	unsigned long ep_graceful; /* forced closes UCX refused, done after a flush instead (ux_ep_close) */
	int kick_any;
	struct uplace *place_done;
	char transport[64];
};

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define WHY(w, ...) do { if (w) snprintf((w)->msg, sizeof((w)->msg), __VA_ARGS__); } while (0)

static inline const char *ustr(ucs_status_t s) { return UX.status_string ? UX.status_string(s) : "?"; }

static inline doca_error_t map_status(ucs_status_t s)
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
static inline void put64(uint8_t *b, uint64_t v) { for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i)); }
static inline void put32(uint8_t *b, uint32_t v) { for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i)); }
static inline uint64_t get64(const uint8_t *b) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = (v << 8) | b[i]; return v; }
static inline uint32_t get32(const uint8_t *b) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = (v << 8) | b[i]; return v; }

/* ucx_provider.c */
int ux_progress(struct sd_prov *p);

/* ucx_worker.c */
uint32_t ux_addr_hash(const void *addr, size_t len);
struct uworker *ux_worker_new(struct sd_prov *p, struct sd_prov_why *why);
void ux_worker_sweep(struct sd_prov *p);
void ux_worker_suspect(struct uworker *w);
void ux_probe_start(struct uworker *w);
void ux_probe_on_msg(struct uworker *w, const struct am_hdr *h);
void ux_probe_pump(struct sd_prov *p, uint64_t now);
void ux_probe_close(struct sd_prov *p);

/* ucx_conn.c */
struct uconn *ux_conn_lookup(struct sd_prov *p, uint64_t id);
void ux_conn_kick(struct uconn *c);
ucp_ep_params_t ux_ep_params_for(int same_host, ucp_err_handler_cb_t cb, void *arg);
void *ux_ep_close(struct sd_prov *p, ucp_ep_h ep, int force, ucp_send_nbx_callback_t cb, void *user);
void ux_conn_fail(struct uconn *c, int force, doca_error_t st, enum sd_prov_fail reason, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
doca_error_t ux_send_ctrl(struct uconn *c, enum am_type t, const void *priv, size_t priv_len);
int ux_conn_pump(struct uconn *c, uint64_t now);
void ux_conn_free(struct uconn *c);
int ux_conn_freeable(const struct uconn *c);
uint32_t ux_host_id(void);
doca_error_t ux_conn_create(struct sd_prov *p, void *ctx, struct sd_prov_conn **out);
doca_error_t ux_conn_export(struct sd_prov_conn *pc, void **blob, size_t *len);
doca_error_t ux_conn_connect(struct sd_prov_conn *pc, const void *blob, size_t len, struct sd_prov_why *why);
doca_error_t ux_listen(struct sd_prov *p, struct sockaddr_storage *addr, socklen_t *alen, void *ctx,
		       struct sd_prov_listener **out, struct sd_prov_why *why);
void ux_listener_close(struct sd_prov_listener *l);
doca_error_t ux_accept(struct sd_prov_conn *pc, const void *priv, size_t priv_len);
doca_error_t ux_reject(struct sd_prov_conn *pc, const void *priv, size_t priv_len);
doca_error_t ux_connect_addr(struct sd_prov *p, const struct sockaddr *addr, socklen_t alen, const void *priv,
			     size_t priv_len, void *ctx, struct sd_prov_conn **out, struct sd_prov_why *why);
int ux_closing(struct sd_prov *p);
int ux_cm_enabled(void); /* UCX_TLS leaves a network transport for client-server connections */
void ux_conn_set_ctx(struct sd_prov_conn *pc, void *ctx);
void ux_conn_transport(struct sd_prov_conn *pc, char *out, size_t n);
void ux_conn_close(struct sd_prov_conn *pc);

/* ucx_link.c */
struct ulink *ux_link_find(struct uworker *w, uint64_t uid, uint32_t ahash);
void ux_link_close(struct ulink *l, int force);
void ux_link_close_ep(struct ulink *l);
void ux_link_put(struct uconn *c);
struct ulink *ux_link_open(struct uworker *w, uint64_t uid, int same_host, const void *addr, size_t alen,
			   struct sd_prov_why *why);
void ux_link_attach(struct uconn *c, struct ulink *l);
void ux_link_fail(struct ulink *l, ucs_status_t s, const char *why);
void ux_link_on_msg(struct uworker *w, const struct am_hdr *h, const ucp_am_recv_param_t *param);
void ux_link_pump(struct sd_prov *p, uint64_t now);

/* ucx_amw.c */
int ux_amw_eligible(struct uconn *c, size_t total);
doca_error_t ux_amw_write(struct uconn *c, const struct sd_prov_iov *iov, int niov, struct sd_prov_rkey *rk,
			  uint64_t raddr, size_t total, void *op_ctx);
void ux_amw_send(struct uconn *c);
void ux_amw_send_now(struct uconn *c);
void ux_amw_send_all(struct sd_prov *p);
int ux_amw_ready(struct sd_prov *p);
void ux_amw_on_msg(struct uconn *c, const struct am_hdr *h, const void *data, size_t len);
void ux_amw_pump(struct uconn *c);
void ux_amw_drop(struct uconn *c);

/* ucx_rx.c */
ucs_status_t ux_am_cb(void *arg, const void *header, size_t hlen, void *data, size_t len,
		      const ucp_am_recv_param_t *param);
int ux_rx_pump(struct uconn *c);

/* ucx_ops.c */
struct uop *ux_op_new(struct sd_prov *p, struct uconn *c, enum op_type t, void *op_ctx);
void ux_op_unlink(struct uop *o);
void ux_op_to_done(struct uop *o);
void ux_issue_flush(struct uconn *c);
void ux_rkc_clear(struct uconn *c);
void ux_issue_gated(struct uop *o);
void ux_gate_pump(struct uconn *c);
doca_error_t ux_write(struct sd_prov_conn *pc, const struct sd_prov_iov *iov, int niov, struct sd_prov_rkey *rk,
		      uint64_t raddr, void *op_ctx);
doca_error_t ux_read(struct sd_prov_conn *pc, const struct sd_prov_iov *iov, int niov, struct sd_prov_rkey *rk,
		     uint64_t raddr, void *op_ctx);
doca_error_t ux_fadd(struct sd_prov_conn *pc, struct sd_prov_rkey *rk, uint64_t raddr, uint64_t add,
		     uint64_t *result, void *op_ctx);
doca_error_t ux_cswap(struct sd_prov_conn *pc, struct sd_prov_rkey *rk, uint64_t raddr, uint64_t cmp,
		      uint64_t swap, uint64_t *result, void *op_ctx);
doca_error_t ux_send(struct sd_prov_conn *pc, const struct sd_prov_iov *iov, int niov, const uint32_t *imm,
		     void *op_ctx);
doca_error_t ux_write_imm(struct sd_prov_conn *pc, const struct sd_prov_iov *iov, int niov,
			  struct sd_prov_rkey *rk, uint64_t raddr, uint32_t imm, void *op_ctx);
doca_error_t ux_flush(struct sd_prov_conn *pc, void *op_ctx);
void ux_rx_resume(struct sd_prov_conn *pc);

#endif
