/*
 * softdoca providers: the interface between the DOCA RDMA layer (connections,
 * tasks, mmaps; the engine thread that "plays the NIC") and whatever moves the
 * bytes: `native` (softdoca's own wire over TCP, and the same-host path),
 * `ucx` (UCP), later `ofi` (libfabric).
 *
 * One ops table per provider (struct sd_provider_ops); all objects are opaque
 * handles owned by the provider. A provider never calls the DOCA layers: it
 * reports through the callbacks given to open() (struct sd_prov_cbs).
 *
 * General contract (every op):
 *  - Threading: the caller serializes every call on one instance and its
 *    objects (softdoca: under sd_eng_lock; the engine thread calls progress()
 *    and application threads submit). A provider may be built on a thread-safe
 *    library but must not rely on more than this. (ucx: UCS_THREAD_MODE_SERIALIZED,
 *    see ucx/ucx_provider.c.)
 *  - Callbacks run only inside progress() (never inside a submit, close or
 *    accept call), so the caller may hold its locks across a submit.
 *  - An op that returns DOCA_SUCCESS has been accepted and reports exactly one
 *    completion (cbs.op_done) later, success or error. An op that returns an
 *    error reports nothing and changed nothing remote.
 *  - Errors are doca_error_t; where the provider can say more, it writes a
 *    NUL-terminated reason into the optional struct sd_prov_why.
 *  - Nothing waits unbounded: connection set-up, CM handshakes and each
 *    outstanding op have a deadline (sd_prov_open_params.timeout_ms); past it
 *    the connection fails and every op outstanding on it completes with an
 *    error (peer death included).
 *
 * Blobs (remote keys, connection addresses) start with a common header
 * (struct sd_prov_blob_hdr below, little-endian) that names the provider; a
 * provider refuses blobs of another provider with DOCA_ERROR_NOT_SUPPORTED and
 * a reason naming both, malformed / truncated / corrupted blobs with
 * DOCA_ERROR_INVALID_VALUE, other format versions with
 * DOCA_ERROR_UNSUPPORTED_VERSION. Never a crash.
 */
#ifndef SOFTDOCA_PROVIDER_H
#define SOFTDOCA_PROVIDER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "doca_all.h" /* doca_error_t, enum doca_access_flag */

#define SD_PROV_ABI 1           /* bumped when a member is added or a rule changes */
#define SD_PROV_NAME_LEN 16     /* provider name in blobs, NUL-padded */
#define SD_PROV_MAX_PRIV 255u   /* CM private data (as DOCA / RDMA CM) */
#define SD_PROV_WHY_LEN 256

/* -------------------------------------------------------------- handles */
struct sd_prov;          /* an instance: one per engine */
struct sd_prov_mr;       /* a local registration */
struct sd_prov_rkey;     /* an imported remote key */
struct sd_prov_conn;     /* a connection (reliable, ordered for two-sided ops) */
struct sd_prov_listener; /* a CM listener */

struct sd_prov_why {
	char msg[SD_PROV_WHY_LEN];
};

/* A local buffer of a data op. mr: the registration covering it, or NULL
 * (the provider registers or bounces as it needs). */
struct sd_prov_iov {
	void *addr;
	size_t len;
	struct sd_prov_mr *mr;
};

/* -------------------------------------------------------------- blobs */
/*
 * Common blob header, 32 bytes, little-endian:
 *   0 magic u32 "SDPB"   4 format version u16   6 kind u8 (enum sd_prov_blob_kind)
 *   7 reserved u8 (0)    8 provider name[16] (NUL-padded)
 *  24 total length u32 (header + body)   28 crc32 u32 (IEEE, over the whole
 *     blob with this field as zero)
 * The body is the provider's (see its header).
 */
#define SD_PROV_BLOB_MAGIC 0x42504453u /* "SDPB" */
#define SD_PROV_BLOB_VERSION 1
#define SD_PROV_BLOB_HDR_LEN 32
#define SD_PROV_BLOB_MAX (64u << 10)

enum sd_prov_blob_kind {
	SD_PROV_BLOB_RKEY = 1, /* from reg_mem: remote key + the range and its access */
	SD_PROV_BLOB_ADDR = 2, /* from conn_export: where and how to reach a connection */
};

/* Write a header for a blob of total length len (the body follows at
 * out + SD_PROV_BLOB_HDR_LEN), then seal it (crc) once the body is written. */
void sd_prov_blob_begin(uint8_t *out, const char *provider, enum sd_prov_blob_kind kind, uint32_t len);
void sd_prov_blob_seal(uint8_t *blob, uint32_t len);
/* Check a blob's header and crc against what provider expects; on success
 * *body / *body_len point into blob. Errors as described above, with reasons
 * that name both providers when they differ. */
doca_error_t sd_prov_blob_check(const void *blob, size_t len, const char *provider,
				enum sd_prov_blob_kind kind, const uint8_t **body, size_t *body_len,
				struct sd_prov_why *why);
/* The provider a blob names ("" if the header is not readable). */
void sd_prov_blob_provider(const void *blob, size_t len, char out[SD_PROV_NAME_LEN + 1]);
uint32_t sd_prov_crc32(const void *data, size_t len);

/* -------------------------------------------------------------- refusals */
/* Why a target refused an operation. One vocabulary for every path: native's
 * error responses carry the code on its wire (arg0; softdoca/src/rdma/rdma.h),
 * and the checks the DOCA layer makes for a provider that cannot enforce
 * (caps.enforce) report the same codes, so a task's failure detail reads the
 * same whichever provider moved it. The values are part of native's wire:
 * never renumber. */
enum sd_prov_nak_code {
	SD_PROV_NAK_NONE = 0,        /* no detail (an older peer) */
	SD_PROV_NAK_CTX_PERM = 1,    /* the target's RDMA context lacks the permission; perms = its permissions */
	SD_PROV_NAK_INSTANCE = 2,    /* a descriptor issued by another process instance */
	SD_PROV_NAK_NO_MAP = 3,      /* no such map registered (stopped, destroyed or forged) */
	SD_PROV_NAK_KEY = 4,         /* wrong access key */
	SD_PROV_NAK_BOUNDS = 5,      /* range outside the map; base / len = the map's */
	SD_PROV_NAK_MAP_PERM = 6,    /* the map lacks the permission; perms = its permissions */
	SD_PROV_NAK_NOT_STARTED = 7, /* the map is not started */
	SD_PROV_NAK_ALIGN = 8,       /* an atomic's target is not 8-byte aligned */
	SD_PROV_NAK_RECV_ROOM = 9,   /* the posted receive is too small; len = its room */
	SD_PROV_NAK_NUM
};

/* A refusal: its code and what the refusing object said of itself. */
struct sd_prov_nak {
	uint32_t code;               /* enum sd_prov_nak_code */
	uint32_t perms;              /* the refusing object's access bits (enum doca_access_flag) */
	uint64_t map_id, base, len;  /* the refusing map (BOUNDS: its range; RECV_ROOM: len) */
};

/* -------------------------------------------------------------- caps */
/* What the fabric itself enforces at the target (else the DOCA layer checks,
 * as softdoca does today). */
enum sd_prov_enforce {
	SD_PROV_ENF_BOUNDS = 1u << 0, /* a remote op outside a registration is refused by the target */
	SD_PROV_ENF_ACCESS = 1u << 1, /* a remote op without the access bit is refused by the target */
	SD_PROV_ENF_REVOKE = 1u << 2, /* after dereg_mem, old remote keys are refused by the target */
};

enum sd_prov_cap_flag {
	SD_PROV_CAP_ATOMIC_NATIVE = 1u << 0, /* atomics by the fabric; else emulated by the target's progress */
	SD_PROV_CAP_REMOTE_CQ_DATA = 1u << 1,/* write-with-immediate in one fabric op; else write + flush + message */
	SD_PROV_CAP_OOB = 1u << 2,           /* conn_export / conn_connect */
	SD_PROV_CAP_CM = 1u << 3,            /* listen / accept / reject / connect_addr */
	SD_PROV_CAP_FD = 1u << 4,            /* get_fd / arm */
	SD_PROV_CAP_CHECK_REQUESTER = 1u << 5, /* the provider checks bounds and access from the rkey
						* blob before an op leaves (a faithful requester) */
	SD_PROV_CAP_ONE_SIDED_NO_TARGET = 1u << 6, /* one-sided ops complete without the target calling
						    * progress(); else the target's engine must progress */
	SD_PROV_CAP_POLLED = 1u << 7,        /* nothing wakes a sleeping engine for what a peer sends: arm()
					      * bounds its sleep (ofi over shm without a doorbell), so every
					      * round trip may cost that bound */
	SD_PROV_CAP_SPIN_UNARMED = 1u << 8,  /* progress() counts what it served peers, and the fd signals
					      * only after arm() (an eventfd it clears): an engine that polls
					      * progress() need not arm on each turn, and ignores the fd's
					      * readiness until it arms again */
	SD_PROV_CAP_ARM_SIGNALS = 1u << 9,   /* once armed, a peer's next message signals this instance (a
					      * system call on each side: UCX's shared-memory FIFO, ofi shm's
					      * doorbell): a caller that progresses it anyway leaves it unarmed.
					      * Depends on the transports in use: query again once connected */
};

struct sd_prov_caps {
	char name[SD_PROV_NAME_LEN + 1];  /* "native", "ucx", ... */
	char version[32];                 /* the library version in use, e.g. "1.13.1" */
	char transport[64];               /* transports actually in use (e.g. "tcp", "posix,cma", "rc_mlx5"):
					   * where the library picks them per connection (ucx), those of
					   * the connections seen so far, "" before the first; where the
					   * fabric is fixed at open (ofi), that fabric from open on */
	uint32_t enforce;                 /* enum sd_prov_enforce, for transport */
	uint32_t flags;                   /* enum sd_prov_cap_flag */
	uint64_t max_msg;                 /* largest send / write / read */
	uint32_t max_iov;                 /* longest iov list */
	uint32_t max_priv;                /* CM private data */
	uint32_t thread_mode;             /* 0: serialized by the caller (the contract above); 1: multi */
};

/* -------------------------------------------------------------- callbacks */
enum sd_prov_conn_ev {
	SD_PROV_EV_ESTABLISHED = 1, /* data ops may flow; priv: the acceptor's private data (CM client) */
	SD_PROV_EV_REJECTED = 2,    /* CM client: the server rejected; priv: its private data */
	SD_PROV_EV_FAILED = 3,      /* set-up failed or the connection broke (status, reason) */
	SD_PROV_EV_DISCONNECTED = 4,/* the peer closed it (conn_close on its side) */
};

enum sd_prov_fail {
	SD_PROV_FAIL_NONE = 0,
	SD_PROV_FAIL_TIMEOUT = 1,  /* no answer within timeout_ms (address pointing nowhere, dead peer) */
	SD_PROV_FAIL_REFUSED = 2,  /* nobody listens there / unreachable */
	SD_PROV_FAIL_LOST = 3,     /* an established connection broke (peer died, link error) */
};

struct sd_prov_conn_event {
	enum sd_prov_conn_ev ev;
	doca_error_t status;       /* FAILED, paired with reason: CONNECTION_RESET (LOST), TIME_OUT (TIMEOUT),
				    * CONNECTION_ABORTED (REFUSED) */
	enum sd_prov_fail reason;
	const void *priv;          /* valid during the callback */
	size_t priv_len;
	const char *why;           /* text, valid during the callback */
};

/* Kind of an incoming message. */
enum sd_prov_rx_kind {
	SD_PROV_RX_SEND = 1,       /* send / send-with-immediate: consumes a posted receive */
	SD_PROV_RX_WRITE_IMM = 2,  /* write-with-immediate: consumes a posted receive, no payload;
				    * the written data is visible before this is delivered */
};

struct sd_prov_rx {
	enum sd_prov_rx_kind kind;
	int has_imm;
	uint32_t imm;              /* raw 4 bytes as given to the sender, in memory order */
	size_t len;                /* payload length */
	const void *data;          /* the payload when it is here already (valid during the
				    * callback), NULL when it must be fetched (large messages) */
};

/* What the rx callback answers. */
enum sd_prov_rx_answer {
	SD_PROV_RX_TAKEN = 0,      /* consumed now (data copied out, or nothing to place) */
	SD_PROV_RX_PLACE = 1,      /* place the payload into dst[0..ndst) and then call cbs.rx_done(rx_ctx) */
	SD_PROV_RX_HOLD = 2,       /* no receive posted: keep it (and every later message of this
				    * connection) until ops->rx_resume(conn) */
};

struct sd_prov_cbs {
	void *arg;
	/* A submitted op finished (ctx as given to it). For reads / atomics the
	 * result is in place before this is called. */
	void (*op_done)(void *arg, void *op_ctx, doca_error_t status);
	/* A message arrived on conn. Called in the sender's order, one message at
	 * a time per connection; on HOLD the same message is offered again after
	 * rx_resume. On PLACE the callback fills dst (at most *ndst entries, total
	 * room >= rx->len, else the message is dropped with rx_done(..., TOO_BIG))
	 * and rx_ctx. */
	enum sd_prov_rx_answer (*rx)(void *arg, struct sd_prov_conn *conn, void *conn_ctx,
				     const struct sd_prov_rx *rx, struct sd_prov_iov *dst, int *ndst,
				     void **rx_ctx);
	/* The payload of a PLACE answer is in place (or failed). In order per conn.
	 * Called for every PLACE answer, also once the connection was closed
	 * (then with an error): until it is, the provider may still write into dst. */
	void (*rx_done)(void *arg, void *rx_ctx, doca_error_t status, size_t len);
	/* A connection changed state. */
	void (*conn_event)(void *arg, struct sd_prov_conn *conn, void *conn_ctx,
			   const struct sd_prov_conn_event *ev);
	/* CM server: a client asks to connect (priv: its private data). The
	 * connection exists (conn_set_ctx may name it); answer later with accept or
	 * reject. Undecided requests fail after timeout_ms. */
	void (*conn_request)(void *arg, struct sd_prov_listener *l, void *listener_ctx,
			     struct sd_prov_conn *conn, const void *priv, size_t priv_len,
			     const struct sockaddr *peer, socklen_t peer_len);
};

enum sd_prov_open_flag {
	SD_PROV_OPEN_SPINS = 1u << 0, /* the caller polls progress() without sleeping while it runs (softdoca:
				       * SOFTDOCA_SPIN_US): wake-ups for what peers post buy nothing */
};

struct sd_prov_open_params {
	const struct sd_prov_cbs *cbs;
	uint32_t timeout_ms;       /* connect / handshake / op deadline (0: 5000, as SOFTDOCA_TIMEOUT_MS) */
	uint32_t flags;            /* enum sd_prov_open_flag */
};

/* -------------------------------------------------------------- the ops */
struct sd_provider_ops {
	const char *name;
	uint32_t abi;              /* SD_PROV_ABI as built (sd_prov_ops_check refuses another) */

	/* Can this provider start here (its library found, usable)? 0: yes; else
	 * an error and a reason naming the cause and the fix. Cheap; no instance. */
	doca_error_t (*probe)(struct sd_prov_why *why);

	/* An instance per engine. close fails every outstanding op and connection
	 * (their callbacks are not called any more) and frees everything;
	 * registrations and imported keys must be released first
	 * (DOCA_ERROR_IN_USE otherwise, nothing freed). */
	doca_error_t (*open)(const struct sd_prov_open_params *params, struct sd_prov **out,
			     struct sd_prov_why *why);
	doca_error_t (*close)(struct sd_prov *p);
	void (*query_caps)(struct sd_prov *p, struct sd_prov_caps *caps);

	/* Progress: runs the callbacks that are due (completions, messages,
	 * connection events, deadlines). Returns how many it ran, plus work it
	 * can tell it did for peers (their one-sided operations served: no
	 * callback tells of those); 0: nothing. Non-blocking. */
	int (*progress)(struct sd_prov *p);
	/* Blocking progress: get_fd gives an fd that becomes readable when
	 * progress() has work. arm() before sleeping on it: DOCA_SUCCESS: sleep
	 * (at most *max_sleep_ms, -1: no limit, for the provider's deadlines);
	 * DOCA_ERROR_AGAIN: call progress() first, do not sleep. */
	doca_error_t (*get_fd)(struct sd_prov *p, int *fd);
	doca_error_t (*arm)(struct sd_prov *p, int *max_sleep_ms);

	/* Memory. reg_mem registers [addr, addr+len) with DOCA access bits
	 * (enum doca_access_flag) and returns a local handle; rkey_blob (malloc'd,
	 * the caller frees it) lets a peer reach the range within those rights:
	 * the body carries at least the base, length and access so that the
	 * importing side can check bounds and rights where the fabric does not
	 * (caps.enforce). dereg_mem: outstanding local ops on the range must be
	 * done; remote access ends where caps.enforce has SD_PROV_ENF_REVOKE. */
	doca_error_t (*reg_mem)(struct sd_prov *p, void *addr, size_t len, uint32_t access,
				struct sd_prov_mr **mr, void **rkey_blob, size_t *rkey_len);
	doca_error_t (*dereg_mem)(struct sd_prov *p, struct sd_prov_mr *mr);
	/* Import a peer's rkey blob (validated: see Blobs). The key is usable on
	 * any connection of this instance to the blob's owner. base/len/access:
	 * what the blob grants (may be NULL). */
	doca_error_t (*rkey_import)(struct sd_prov *p, const void *blob, size_t len,
				    struct sd_prov_rkey **rkey, uint64_t *base, uint64_t *rlen,
				    uint32_t *access, struct sd_prov_why *why);
	void (*rkey_release)(struct sd_prov *p, struct sd_prov_rkey *rkey);

	/* Connections, OOB style (doca_rdma_export / doca_rdma_connect): each side
	 * creates a connection, exports its blob (malloc'd, the caller frees it),
	 * gives it to the peer out of band, and connects it with the peer's blob.
	 * ESTABLISHED follows on both sides once both have connected (or FAILED
	 * within timeout_ms). ctx: the caller's, given back in callbacks. */
	doca_error_t (*conn_create)(struct sd_prov *p, void *ctx, struct sd_prov_conn **conn);
	doca_error_t (*conn_export)(struct sd_prov_conn *c, void **blob, size_t *len);
	doca_error_t (*conn_connect)(struct sd_prov_conn *c, const void *peer_blob, size_t len,
				     struct sd_prov_why *why);
	/* Connections, CM style. listen binds addr (port 0: any; the bound address
	 * is written back into *addr); requests arrive as cbs.conn_request. */
	doca_error_t (*listen)(struct sd_prov *p, struct sockaddr_storage *addr, socklen_t *addr_len,
			       void *ctx, struct sd_prov_listener **l, struct sd_prov_why *why);
	void (*listener_close)(struct sd_prov_listener *l);
	/* Answer a request: ESTABLISHED follows on both sides (the client's event
	 * carries priv); reject: the client gets REJECTED with priv, the server's
	 * connection is gone when this returns (no event). */
	doca_error_t (*accept)(struct sd_prov_conn *c, const void *priv, size_t priv_len);
	doca_error_t (*reject)(struct sd_prov_conn *c, const void *priv, size_t priv_len);
	/* CM client: connect to a listener with private data. */
	doca_error_t (*connect_addr)(struct sd_prov *p, const struct sockaddr *addr, socklen_t addr_len,
				     const void *priv, size_t priv_len, void *ctx,
				     struct sd_prov_conn **conn, struct sd_prov_why *why);
	void (*conn_set_ctx)(struct sd_prov_conn *c, void *ctx);
	/* Transports this connection uses (e.g. "tcp", "cma,posix"). */
	void (*conn_transport)(struct sd_prov_conn *c, char *out, size_t n);
	/* Close: the peer gets DISCONNECTED once what was sent reached it (bounded
	 * by timeout_ms). Ops still outstanding complete through op_done (success
	 * if they made it, else an error); no conn_event / rx for this conn after
	 * it returns, and the handle is invalid. */
	void (*conn_close)(struct sd_prov_conn *c);
	/* How many closed connections still have something on its way to the
	 * peer (their close flushes it, within timeout_ms). Before the process
	 * may leave (the last context destroyed), the caller progresses until
	 * this is 0: what the peer was told arrived (a receive's acknowledgement,
	 * a BYE) is not lost with the process. */
	int (*closing)(struct sd_prov *p);

	/* Data ops. Order (DOCA's RC order on one connection): sends and
	 * write-with-immediates are delivered in submission order; a send / send-
	 * with-immediate / write-with-immediate / read / atomic is executed at the
	 * target after every write submitted before it on the connection is
	 * visible there (write-with-immediate: its own data is visible before the
	 * receive completes). Writes may overlap one another. rkey / raddr: the
	 * remote range; the local list's total is the length. */
	doca_error_t (*write)(struct sd_prov_conn *c, const struct sd_prov_iov *iov, int niov,
			      struct sd_prov_rkey *rkey, uint64_t raddr, void *op_ctx);
	doca_error_t (*read)(struct sd_prov_conn *c, const struct sd_prov_iov *iov, int niov,
			     struct sd_prov_rkey *rkey, uint64_t raddr, void *op_ctx);
	/* 8-byte atomics at an 8-byte aligned raddr; *result gets the old value. */
	doca_error_t (*atomic_fadd)(struct sd_prov_conn *c, struct sd_prov_rkey *rkey, uint64_t raddr,
				    uint64_t add, uint64_t *result, void *op_ctx);
	doca_error_t (*atomic_cswap)(struct sd_prov_conn *c, struct sd_prov_rkey *rkey, uint64_t raddr,
				     uint64_t compare, uint64_t swap, uint64_t *result, void *op_ctx);
	/* Two-sided: the peer's cbs.rx. imm: NULL for a plain send. */
	doca_error_t (*send)(struct sd_prov_conn *c, const struct sd_prov_iov *iov, int niov,
			     const uint32_t *imm, void *op_ctx);
	doca_error_t (*write_imm)(struct sd_prov_conn *c, const struct sd_prov_iov *iov, int niov,
				  struct sd_prov_rkey *rkey, uint64_t raddr, uint32_t imm, void *op_ctx);
	/* Completes once everything submitted before on c is complete at the target. */
	doca_error_t (*flush)(struct sd_prov_conn *c, void *op_ctx);
	/* The application posted a receive: offer held messages again. */
	void (*rx_resume)(struct sd_prov_conn *c);

	/* Optional (NULL: nothing to do with it). The caller says, at the end of
	 * each of its turns, until when progress() keeps being called without a
	 * wake-up (CLOCK_MONOTONIC ns, 0: none): serve_until_ns is a promise (it
	 * calls progress() at least once after that time before it next sleeps:
	 * its spin), self_until_ns an expectation (the spin, or an application
	 * thread that polls; it may stop earlier). A provider whose peers must
	 * wake it for what they post (ofi over shm's doorbell) publishes the
	 * promise, and skips waking a peer that promised while it is itself
	 * progressed. */
	void (*live)(struct sd_prov *p, uint64_t serve_until_ns, uint64_t self_until_ns);

	/* Optional (NULL: none). A counter of the instance's internals by name, for tests and
	 * diagnostics (softdoca_debug_counter("provider:<name>")); -1 for an unknown name. */
	long (*counter)(struct sd_prov *p, const char *name);
};

/* The providers built in (NULL-terminated list) and lookup by name. */
const struct sd_provider_ops *sd_provider_find(const char *name);
extern const struct sd_provider_ops sd_provider_ucx;
extern const struct sd_provider_ops sd_provider_ofi;

/* Can softdoca drive this table? DOCA_SUCCESS, or an error and a reason:
 * UNSUPPORTED_VERSION (built for another SD_PROV_ABI), NOT_SUPPORTED (a member
 * every provider has is NULL), INVALID_VALUE (no name). Before probe(). */
doca_error_t sd_prov_ops_check(const struct sd_provider_ops *ops, struct sd_prov_why *why);
/* Do an instance's caps (query_caps after open) keep the rules: the name is
 * the table's, each capability's members are there (OOB: conn_export /
 * conn_connect; CM: listen, listener_close, accept, reject, connect_addr; FD:
 * get_fd / arm), max_iov and max_msg are >= 1, and every flag of need (enum
 * sd_prov_cap_flag: what the caller cannot do without) is set? */
doca_error_t sd_prov_caps_check(const struct sd_provider_ops *ops, const struct sd_prov_caps *caps, uint32_t need,
				struct sd_prov_why *why);

/* A readable name for a doca_error_t (no dependency on libsoftdoca). */
const char *sd_prov_strerror(doca_error_t e);

#endif
