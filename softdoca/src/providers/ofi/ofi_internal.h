/*
 * softdoca provider `ofi` (libfabric): internal declarations shared by
 * ofi_provider.c (instance, memory, progress), ofi_ops.c (data ops, messages),
 * ofi_conn.c (OOB and CM connection set-up) and ofi_negotiate.c (the pure
 * capability negotiation). See ofi_provider.c for the design.
 */
#ifndef SOFTDOCA_OFI_INTERNAL_H
#define SOFTDOCA_OFI_INTERNAL_H

#include "../provider.h"

#include <sys/types.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define OFI_PROV_NAME "ofi"
#define OFI_API_VERSION FI_VERSION(1, 9) /* the oldest API whose semantics we rely on */
#define OFI_MAX_IOV 16
#define OFI_EAGER 16384u          /* receive buffer: header + eager payload */
#define OFI_RX_RDM 128            /* posted receives on the shared RDM endpoint */
#define OFI_RX_MSG 32             /* posted receives per MSG endpoint */
#define OFI_MAGIC 0x4f464453u     /* "SDFO" */

/* ------------------------------------------------------------ negotiation */
/* What ofi_negotiate() decides from a list of fi_info candidates (pure: no
 * libfabric calls, so synthetic lists can be tested). */
struct ofi_choice {
	const struct fi_info *info;  /* the chosen candidate (points into the list), NULL: none */
	enum fi_ep_type ep_type;     /* FI_EP_MSG preferred, else FI_EP_RDM */
	uint64_t mr_mode;            /* the provider's demands we honour */
	int offset_mode;             /* no FI_MR_VIRT_ADDR: remote addresses are offsets into the MR */
	int mr_local;                /* FI_MR_LOCAL: every local buffer needs a descriptor */
	int prov_key;                /* FI_MR_PROV_KEY: keys come from the provider (else we pick) */
	int mr_raw;                  /* FI_MR_RAW: raw keys (refused: see ofi_negotiate.c) */
	int native_cq_data;          /* write-with-immediate by fi_writedata; else write + message */
	int atomic_cap;              /* FI_ATOMIC offered (fi_query_atomic decides at open) */
	int order_saw, order_raw;    /* send / read after write ordered by the provider */
	int rx_cq_data;              /* FI_RX_CQ_DATA mode: remote CQ data consumes a receive */
	int cm;                      /* listen / connect_addr (MSG endpoints) */
	uint32_t enforce;            /* enum sd_prov_enforce for this provider */
	size_t iov_limit, rma_iov_limit, max_msg;
	char prov[64];               /* fabric_attr->prov_name */
	char why[256];               /* when none fits, or the notes of the choice */
};
int ofi_negotiate(const struct fi_info *list, struct ofi_choice *out);
/* the hints ofi_negotiate expects fi_getinfo to have been asked with */
void ofi_fill_hints(struct fi_info *hints);

/* ------------------------------------------------------------ dlopen */
struct ofi_api {
	int loaded;
	char err[200];
	uint32_t version;
	int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *, struct fi_info **);
	void (*freeinfo)(struct fi_info *);
	struct fi_info *(*dupinfo)(const struct fi_info *);
	int (*fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
	const char *(*strerror)(int);
	uint32_t (*fversion)(void);
};
extern struct ofi_api OFI;
doca_error_t ofi_load(struct sd_prov_why *why);

/* ------------------------------------------------------------ objects */
enum ofi_ctx_kind { CTX_OP = 1, CTX_RX = 2, CTX_OPMSG = 3 };

enum op_type { OP_WRITE = 1, OP_READ, OP_FADD, OP_CSWAP, OP_SEND, OP_WIMM, OP_FLUSH, OP_CTRL, OP_RNDV_READ };

/* message header (every FI_MSG message starts with it) */
struct ohdr {
	uint32_t magic;
	uint8_t type;      /* enum msg_type */
	uint8_t flags;     /* MF_* */
	uint16_t rsv;
	uint32_t imm;
	uint32_t dst;      /* the receiver's connection id */
	uint32_t src;      /* the sender's connection id */
	uint32_t rsv2;
	uint64_t uid;      /* the sender instance */
	uint64_t a, b, c, d; /* type-specific words */
};
enum msg_type { M_HELLO = 1, M_BYE, M_SEND, M_WIMM, M_RTS, M_FIN, M_AREQ, M_ARESP };
#define MF_IMM 1u

struct sd_prov_conn;
struct ofi_txe;
struct oop {
	struct fi_context2 fctx;    /* first: the libfabric context */
	int kind;                   /* CTX_OP */
	struct oop *next;           /* conn's outstanding list / pending queue / orphans */
	struct sd_prov_conn *c;
	void *op_ctx;
	enum op_type type;
	uint64_t serial;
	uint64_t start_ns;
	int posted;                 /* fabric requests in flight */
	int wait_writes;            /* must wait until earlier writes completed (no provider order) */
	int reported;               /* op_done called (orphan while posted) */
	int internal;               /* no op_done (control messages) */
	int sub_pending;            /* write_imm emulation: the message still to send */
	doca_error_t status;
	/* parameters kept for (re)posting */
	struct iovec iov[OFI_MAX_IOV];
	void *desc[OFI_MAX_IOV];
	struct fid_mr *tmp_mr[OFI_MAX_IOV + 1];
	int niov, ntmp;
	int next_iov;               /* chunked RMA: the next entry to post (after EAGAIN) */
	uint64_t next_off;
	int unused_stage;
	int wait_all;               /* flush: waits until nothing earlier is outstanding */
	int is_write;               /* counts in writes_out until its RMA part completed */
	int need_rma, need_msg;     /* parts of the op */
	int msg_state;              /* 0 not posted, 1 posted, 2 completed */
	int needs_repost;           /* the message part met EAGAIN: pump posts it */
	int in_out, queued;         /* on the outstanding list / the pending queue */
	struct { struct fi_context2 f; int kind; struct oop *o; } m; /* the message part's context */
	uint64_t raddr, rkey, total;
	uint32_t imm;
	uint64_t abuf, operand, compare; /* atomics: result, operand, compare (contiguous) */
	uint64_t *result;
	uint8_t *msg;               /* a message's bytes (header + payload), malloc'd */
	size_t msg_len;
	void *msg_desc;
	uint8_t *stage;             /* rendezvous: contiguous copy of a multi-iov send */
	struct sd_prov_rx_place *place; /* OP_RNDV_READ: the placement */
	struct ofi_txe *txe;        /* an orphan: the transmit endpoint that still holds it */
};

/* an incoming message kept by the provider (held, or waiting its turn) */
struct orx {
	struct orx *next;
	struct ohdr h;
	uint8_t *data;              /* eager payload (malloc), or rendezvous staging once fetched */
	size_t len;
	int rndv, fetched, fetching, borrowed;
	doca_error_t fetch_st;
};

struct orxbuf {                     /* a posted receive buffer */
	struct fi_context2 fctx;
	int kind;                   /* CTX_RX */
	struct sd_prov_conn *c;            /* MSG: its connection; RDM: NULL */
	uint8_t *buf;
	void *desc;
	struct fid_mr *mr;          /* FI_MR_LOCAL: its registration */
	int posted;                 /* 1 posted; 2 a repost met -FI_EAGAIN: progress retries it */
};

/*
 * RDM: a transmit endpoint and the doorbell state of one peer instance (ofi_provider.c).
 * shm: an endpoint of its own per peer instance: shm 1.17 answers the operations
 * of an endpoint in one FIFO (its response queue), and an answer that never
 * comes (the peer died, the target refused an RMA) blocks every later answer
 * of that endpoint; so a peer's failure stays with that peer, and an endpoint
 * that holds such an operation is "wedged": later connections to the peer get
 * a fresh one, the old one is closed once no connection uses it. Other RDM
 * providers: every peer's txe sends on the shared endpoint (p->ep).
 */
struct ofi_txe {
	struct ofi_txe *next;
	struct fid_ep *ep;          /* own endpoint (own = 1), or p->ep */
	int own;
	uint64_t peer_uid;
	int refs;                   /* connections bound to it */
	int wedged;                 /* the fabric holds ops of a failed connection: no new connection uses it */
	int gone;                   /* the peer instance is gone (its doorbell closed) */
	int orphans;                /* ops it still holds whose connection is gone */
	int bell;                   /* the peer has a doorbell (its address blob says so) */
	int bell_ok;                /* a ring reached it once (later ECONNREFUSED: the peer is gone) */
	int ring_due, answer_due;   /* send at the end of this submit / progress round */
	uint64_t probe_ns;          /* when its doorbell was last probed */
	uint64_t *page;             /* its page (ofi_awake.c), mapped where it has one: our datagrams counted there */
	uint64_t *awake;            /* that page where its promise is in our clock (our posts under it); NULL: none */
	uint64_t owed_ns;           /* a ring left out then (0: none owed) */
	int ring_force;             /* the ring due is owed: never left out */
};

enum cstate { CS_NEW = 0, CS_CONNECTING, CS_CM_REQUESTED, CS_ACCEPTING, CS_ESTABLISHED, CS_FAILED,
	      CS_CLOSING, CS_DEAD };

struct sd_prov_rx_place {
	struct orx *rx;
	struct sd_prov_iov dst[OFI_MAX_IOV];
	int ndst;
	void *rx_ctx;
	uint64_t sender_op;
};

struct sd_prov_conn {
	struct sd_prov_conn *next;  /* instance's list */
	struct sd_prov *p;
	void *ctx;
	uint32_t id, peer_id;
	uint64_t peer_uid;
	enum cstate state;
	int is_cm, cm_client, active, connected_local, hello_seen, user_closed, failed_reported;
	/* MSG: own endpoint and CQ; RDM: the instance's, and an AV address */
	struct fid_ep *ep;
	struct fid_cq *cq;
	int cq_fd;
	fi_addr_t dest;
	struct ofi_txe *txe;        /* RDM: where its ops are posted (NULL before conn_connect) */
	struct fi_info *info;       /* MSG: a pending connection request's info; its handle is the
				     * provider's (tcp: 40 bytes and the accepted socket) until a
				     * successful fi_accept or an fi_reject: ofi_conn_drop_request */
	struct sd_prov_listener *listener;
	uint8_t peer_name[128];
	size_t peer_name_len;
	uint64_t deadline_ns;       /* set-up / closing deadline */
	/* tx */
	struct oop *out_head, *out_tail;     /* posted, oldest first */
	struct oop *pend_head, *pend_tail;   /* waiting (order, EAGAIN) */
	int writes_out;
	/* rx */
	struct orxbuf *rxb;
	int nrxb;
	struct orx *rxq_head, *rxq_tail;
	int rx_held, rx_placing;
	struct sd_prov_rx_place *placing;
	/* events to emit */
	int ev_pending;             /* SD_PROV_EV_* */
	doca_error_t fail_status;
	enum sd_prov_fail fail_reason;
	uint8_t priv[SD_PROV_MAX_PRIV + 64];
	size_t priv_len;
	char why[200];
};

/* RDM: a peer address inserted into the AV, kept until the instance closes
 * (ofi_av_addr, ofi_conn.c) */
struct ofi_avent {
	struct ofi_avent *next;
	fi_addr_t addr;
	size_t len;
	uint8_t name[128];
};

struct sd_prov_mr {
	struct fid_mr *mr;
	void *addr;
	size_t len;
	uint32_t access;
	uint64_t key;
	struct sd_prov_mr *next;
};

struct sd_prov_rkey {
	uint64_t base, len, owner, key;
	uint32_t access;
	int offset_mode;
};

struct sd_prov_listener {
	struct sd_prov *p;
	struct fid_pep *pep;
	void *ctx;
	struct sd_prov_listener *next;
};

struct sd_prov {
	struct sd_prov_cbs cbs;
	uint64_t timeout_ns;
	uint32_t open_flags;        /* enum sd_prov_open_flag */
	uint64_t uid;
	struct fi_info *infos, *info; /* the getinfo list and the chosen entry */
	struct ofi_choice ch;
	int atomic_native;
	int dc_ok;                  /* FI_DELIVERY_COMPLETE accepted on writes */
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_eq *eq;          /* MSG: CM events */
	struct fid_pep *oob_pep;    /* MSG: the OOB listener (lazily) */
	uint8_t oob_name[128];
	size_t oob_name_len;
	struct fid_ep *ep;          /* RDM: the shared endpoint */
	struct fid_av *av;
	struct ofi_avent *avents;   /* RDM: the addresses inserted into av, each once */
	long navents;
	struct fid_cq *cq;          /* RDM: the shared CQ */
	uint8_t name[128];
	size_t name_len;
	struct orxbuf *rxb;
	int nrxb;
	int epfd;                   /* what get_fd returns (epoll over the wait fds) */
	int poll_only;              /* some CQ / EQ has no wait fd: arm() bounds the sleep */
	int kick;                   /* internal work pending: arm() says AGAIN */
	int rx_unposted;            /* receive buffers whose repost met -FI_EAGAIN */
	int in_progress;
	/* RDM transmit endpoints, one per peer instance (struct ofi_txe) */
	struct ofi_txe *txes;
	int tx_per_peer;            /* shm: an endpoint per peer (else all on p->ep) */
	int ntx_own;
	long nwedged;               /* transmit endpoints wedged so far (counter "txe_wedged") */
	/* the doorbell (poll-only providers: shm has no CQ wait object): an abstract
	 * AF_UNIX datagram socket named after uid, in the epoll set; peers ring it
	 * after posting what needs this instance's progress, and are answered after it */
	int bell_fd;
	int bells_due;              /* txes with ring_due / answer_due */
	uint64_t next_probe_ns;
	struct ofi_lockwatch *lockwatch; /* shm: locks of dead processes (ofi_shmlock.c), NULL: none */
	uint64_t *awake;            /* with a doorbell: our serving promise, for peers (ofi_awake.c) */
	uint64_t self_until;        /* progressed without a wake-up till about then (live()) */
	uint64_t awake_seen;        /* peers' posts under our promise as last counted (ofi_awake_served) */
	uint64_t rang_seen;         /* peers' datagrams to our doorbell as last counted (ofi_bell_due) */
	uint64_t drain_next_ns;     /* read the doorbell by then even if the count did not move */
	int owed;                   /* txes with owed_ns */
	struct sd_prov_conn *conns;
	struct sd_prov_conn **slots;
	uint16_t *gens;
	uint32_t nslots;
	struct sd_prov_mr *mrs;
	struct sd_prov_listener *listeners;
	struct oop *orphans;
	long nmr, nrkey;
	uint64_t next_key, next_serial;
	size_t max_priv;
	char transport[64];
};

/* ofi_provider.c */
uint64_t ofi_now_ns(void);
int ofi_pid_gone(long pid);
doca_error_t ofi_err(int fi_rc);
const char *ofi_str(int fi_rc);
void ofi_put64(uint8_t *b, uint64_t v);
void ofi_put32(uint8_t *b, uint32_t v);
uint64_t ofi_get64(const uint8_t *b);
uint32_t ofi_get32(const uint8_t *b);
int ofi_watch_fd(struct sd_prov *p, struct fid *f, int *fd_out);
void ofi_unwatch_fd(struct sd_prov *p, int fd);
int ofi_reg_tmp(struct sd_prov *p, void *addr, size_t len, uint64_t access, struct fid_mr **mr, void **desc);
struct sd_prov_conn *ofi_conn_lookup(struct sd_prov *p, uint32_t id);
struct sd_prov_conn *ofi_conn_alloc(struct sd_prov *p, void *ctx);
void ofi_conn_free(struct sd_prov_conn *c);
/* ofi_conn.c: the AV address of a peer's endpoint name (inserted once per instance) */
int ofi_av_addr(struct sd_prov *p, const uint8_t *name, size_t len, fi_addr_t *out);
void ofi_av_forget(struct sd_prov *p);
int ofi_conn_live(struct sd_prov *p, struct sd_prov_conn *c);
/* RDM transmit endpoints and the doorbell */
struct ofi_txe *ofi_txe_get(struct sd_prov *p, uint64_t peer_uid, int bell, int *rc);
void ofi_txe_put(struct sd_prov *p, struct ofi_txe *t);
void ofi_ring(struct sd_prov_conn *c);
void ofi_ring_txe(struct sd_prov *p, struct ofi_txe *t, int force);
int ofi_txe_busy(struct sd_prov *p, struct ofi_txe *t);
void ofi_bell_flush(struct sd_prov *p);
#define OFI_WHY(w, ...) do { if (w) snprintf((w)->msg, sizeof((w)->msg), __VA_ARGS__); } while (0)

/* ofi_awake.c: rings a peer's serving promise makes needless */
void ofi_awake_open(struct sd_prov *p);
void ofi_awake_close(struct sd_prov *p);
void ofi_awake_peer(struct sd_prov *p, struct ofi_txe *t, const uint8_t *peer_name, size_t len);
void ofi_awake_unmap(struct sd_prov *p, struct ofi_txe *t);
int ofi_awake_skip(struct sd_prov *p, struct ofi_txe *t);
uint64_t ofi_awake_owed(struct sd_prov *p, uint64_t now);
int ofi_awake_served(struct sd_prov *p);
void ofi_awake_rang(struct ofi_txe *t);
int ofi_bell_due(struct sd_prov *p, uint64_t now);
void ofi_live(struct sd_prov *p, uint64_t serve_until_ns, uint64_t self_until_ns);

/* ofi_shmlock.c: shm's queue locks held by dead processes */
struct ofi_lockwatch;
void ofi_lockwatch_start(struct sd_prov *p);
void ofi_lockwatch_peer(struct sd_prov *p, uint64_t peer_uid, const uint8_t *name, size_t len);
int ofi_lockwatch_take(struct sd_prov *p, uint64_t *uids, int max);
void ofi_lockwatch_stop(struct sd_prov *p);
int ofi_shm_object(const uint8_t *name, size_t len, char *out, size_t n, pid_t *pid);
extern unsigned long ofi_lockwatch_releases;
extern int ofi_lockwatch_instances;

/* ofi_ops.c */
struct oop *ofi_op_new(struct sd_prov_conn *c, enum op_type t, void *op_ctx);
int ofi_local_descs(struct oop *o, const struct sd_prov_iov *iov, int niov, uint64_t acc);
doca_error_t ofi_submit(struct sd_prov_conn *c, struct oop *o, int bypass);
struct oop *ofi_find_out(struct sd_prov_conn *c, uint64_t serial);
void ofi_maybe_done(struct oop *o);
void ofi_op_part_done(struct sd_prov *p, struct oop *o, int msg_part, doca_error_t st);
/* ofi_rx.c */
void ofi_rndv_read_done(struct oop *o, doca_error_t st);
int ofi_rx_pump(struct sd_prov_conn *c);
/* ofi_ops.c (cont.) */
int ofi_post_rx(struct sd_prov *p, struct orxbuf *b);
void ofi_repost_rx(struct sd_prov *p);
int ofi_alloc_rx(struct sd_prov *p, struct sd_prov_conn *c, int n, struct orxbuf **out);
void ofi_free_rx(struct sd_prov *p, struct orxbuf *b, int n);
int ofi_read_cq(struct sd_prov *p, struct fid_cq *cq);
int ofi_conn_pump(struct sd_prov_conn *c);
void ofi_fail_ops(struct sd_prov_conn *c, doca_error_t st, int detach);
doca_error_t ofi_send_ctrl(struct sd_prov_conn *c, int type, uint64_t a, uint64_t b, uint64_t cc, uint64_t d);
void ofi_free_op(struct sd_prov *p, struct oop *o);
void ofi_rx_free_queue(struct sd_prov_conn *c);
extern const struct sd_provider_ops sd_provider_ofi;

/* ofi_conn.c */
int ofi_read_eq(struct sd_prov *p);
void ofi_conn_fail(struct sd_prov_conn *c, doca_error_t st, enum sd_prov_fail reason, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void ofi_conn_established(struct sd_prov_conn *c);
void ofi_rx_hello(struct sd_prov *p, const struct ohdr *h);
int ofi_msg_ep_setup(struct sd_prov_conn *c, struct fi_info *info);
void ofi_msg_ep_teardown(struct sd_prov_conn *c);
void ofi_conn_drop_request(struct sd_prov_conn *c);
int ofi_conn_deadlines(struct sd_prov *p);
int ofi_conn_step(struct sd_prov_conn *c);
int ofi_msg_init(struct sd_prov *p);
doca_error_t ofi_conn_create(struct sd_prov *p, void *ctx, struct sd_prov_conn **out);
doca_error_t ofi_conn_export(struct sd_prov_conn *c, void **blob, size_t *len);
doca_error_t ofi_conn_connect(struct sd_prov_conn *c, const void *blob, size_t len, struct sd_prov_why *why);
doca_error_t ofi_listen(struct sd_prov *p, struct sockaddr_storage *addr, socklen_t *addr_len, void *ctx,
			struct sd_prov_listener **l, struct sd_prov_why *why);
void ofi_listener_close(struct sd_prov_listener *l);
doca_error_t ofi_accept(struct sd_prov_conn *c, const void *priv, size_t priv_len);
doca_error_t ofi_reject(struct sd_prov_conn *c, const void *priv, size_t priv_len);
doca_error_t ofi_connect_addr(struct sd_prov *p, const struct sockaddr *addr, socklen_t addr_len, const void *priv,
			      size_t priv_len, void *ctx, struct sd_prov_conn **conn, struct sd_prov_why *why);
void ofi_conn_close(struct sd_prov_conn *c);
int ofi_conn_closing(struct sd_prov *p);

#endif
