/*
 * softdoca RDMA: private structures shared by the modules of engine/ and
 * rdma/.
 *
 * softdoca/src has one folder per layer, lowest first: providers/ (the
 * provider interface, providers/provider.h, one folder per provider; a
 * provider calls nothing outside providers/), common/ (the DOCA Common
 * objects, internal.h), engine/ (layers 1-6 below) and rdma/ (the DOCA RDMA
 * context layer, layers 7-9). Module map of engine/ and rdma/, lowest layer
 * first. A module calls only modules of its own layer or of the layers below
 * it, a folder only its own or the folders below, and only the provider
 * bridge (rdma_prov.c) calls into providers/, through the provider interface
 * (tests/test_softdoca_layers.py checks it with nm); a lower layer reaches an
 * upper one only through the handlers the upper one registers with it
 * (common/mmap.c: struct sd_mmap_hooks, installed by rdma_ctx.c; the engine:
 * struct sd_link_ops, struct sd_rdma_ops, struct sd_eng_hook).
 * 1 engine services [engine/]
 *   rdma_engine.c    the engine lock and its completion batch (the
 *                    task-completion hand-off), the engine's epoll set and
 *                    its wake-up (sd_eng_kick), the engine timeout, the
 *                    live-object counters
 * 2 same-host transport [engine/]
 *   rdma_xport.c     registration table (regions published / revoked),
 *                    cross-memory attach and shared memfds for one-sided
 *                    writes/reads, the peer's table offered in handshake
 *                    frames. It knows no DOCA object: regions, remote keys
 *                    and its peer state (struct sd_xpeer) only; the DOCA
 *                    layer adapts maps and tasks (rdma_ctx.c, rdma_tasks.c)
 * 3 links [engine/]
 *   rdma_link.c      frame header codec; links: tx queue, control-frame
 *                    blobs, gather sendmsg, the submit doorbell (FLUSH /
 *                    deferral), close / drain, freeing closed links. A link
 *                    reports to its owner through the struct sd_link_ops
 *                    given to sd_link_new
 * 4 rx framing [engine/]
 *   rdma_rx.c        reads: staging buffer, direct payload reads; hands each
 *                    frame to the link's on_header / on_payload_done
 * 5 frames [engine/]
 *   rdma_frames.c    a link's frames: handshake buffers, keepalive, RNR_WAIT,
 *                    DISCONNECT, RNR parking and the requests held behind a
 *                    parked message; the rest handed to the one-sided
 *                    responder or to the link's owner (answers, messages,
 *                    refusals, control)
 *   rdma_serve.c     WRITE payload destinations, READ answers out of target
 *                    memory, remote atomics; each validated by the link's
 *                    owner (sd_link_ops.mem_acquire), refusals returned to it
 * 6 engine thread [engine/]
 *   rdma_loop.c      the epoll loop, adaptive spin, link readiness (connect
 *                    completion, rx, tx), keepalive and park timers, inline
 *                    polling, group attach / detach. It serves listeners
 *                    through their sd_ep.on_event and the connections of a
 *                    context through its group's eng_ops (struct
 *                    sd_rdma_ops); like the links it knows no DOCA object
 * 7 connections, data operations, tasks, context (call one another) [rdma/]
 *   rdma_wire.c      the DOCA side of the frames: answers complete tasks,
 *                    messages fill posted receives or park (RNR), the
 *                    responder's validation and refusals, error details
 *   rdma_conn.c      connection objects, export/connect (OOB) handshake,
 *                    HELLO / CM frames, deadlines, disconnect; the handlers
 *                    of this layer: sd_conn_link_ops (given to every link)
 *                    and sd_conn_rdma_ops (installed on a context with its
 *                    first connection or listener)
 *   rdma_cm.c        sockets, listeners, RDMA CM calls (listen / accept /
 *                    reject / connect_to_addr), address objects
 *   rdma_tasks.c     task pools, validation, submit
 *   rdma_sync_event.c  remote-net sync-event tasks (over the data operations)
 *   rdma_ctx.c       context, configuration, capabilities, event delivery;
 *                    installs struct sd_mmap_hooks in common/mmap.c
 *   rdma_prov.c      the provider bridge (SOFTDOCA_PROVIDER): one-sided
 *                    operations and sent messages through a provider of
 *                    providers/ (ucx, ofi), its connection beside the native
 *                    link, registrations (maps, through struct
 *                    sd_mmap_hooks), the engine hook that progresses it
 *                    (struct sd_eng_hook)
 *   rdma_pmsg.c      messages arriving through the provider: into posted
 *                    receives, parked (RNR), acknowledged (rdma_pmsg.h)
 * 8 task API [rdma/]
 *   rdma_task_api.c  per-type public task API
 * 9 softdoca extensions [rdma/]
 *   ext.c            softdoca_* facts DOCA keeps internal (failure reasons,
 *                    private data, error details, live objects, the
 *                    transports of a connection)
 *
 * Locking: one process-wide engine lock (sd_eng_lock) protects every runtime
 * field of every started doca_rdma (connections, links, queues, listeners).
 * The engine thread holds it while it moves data (all sockets are
 * non-blocking, so hold times are bounded by the socket buffers); application
 * threads take it to queue work, to send (submit doorbell) and to read
 * responses inline (doca_pe_progress). Task completions made under it are
 * batched and handed to their progress engines by sd_eng_unlock (one pe lock
 * and one notification per pe). Per-ctx leaf locks: pool_lock (task pools) and
 * ev_lock (connection events waiting for doca_pe_progress); nothing is called
 * while holding a leaf lock.
 */
#ifndef SOFTDOCA_RDMA_H
#define SOFTDOCA_RDMA_H

#include "internal.h"
#include "providers/provider.h" /* struct sd_prov_nak: the refusal vocabulary of every path */

#include <sys/socket.h>
#include <sys/uio.h>
#include <arpa/inet.h>

struct epoll_event;

/* ---------------------------------------------------------------- limits */
#define SD_RDMA_MAX_MSG (1u << 30)          /* max message size (1 GiB) */
#define SD_RDMA_MAX_QUEUE 32768u            /* max send / recv queue size */
#define SD_RDMA_MAX_BUF_LIST 16u            /* max gather / scatter list length */
#define SD_RDMA_MAX_PRIV 255u               /* RDMA CM private data */
#define SD_RDMA_MAX_PARK (64u << 20)        /* largest message held while no receive is posted */
#define SD_RDMA_TOKEN_LEN 16
#define SD_RB_CAP (64u << 10)               /* per-link rx staging buffer */
#define SD_RX_DIRECT_MIN (16u << 10)        /* payloads this large are read straight into place */

/* ---------------------------------------------------------------- wire */
/*
 * Every frame: a fixed SD_HDR_LEN-byte little-endian header, then payload_len
 * payload bytes. Offsets:
 *   0 magic u32 "SDRW"   4 version u8   5 opcode u8   6 flags u16 (0)
 *   8 req_id u64        16 payload_len u32   20 imm (4 raw bytes, big-endian
 *   as given by the app)  24 status u32 (doca_error_t, responses)
 *  28 budget_ms u32 (RNR budget of two-sided ops)   32 target instance u64
 *  40 map id u64   48 remote addr u64   56 length u64 (read)   64 key[16]
 *  80 arg0 u64 (compare / add)   88 arg1 u64 (swap)
 * Error responses (RESP / READ_RESP / ATOMIC_RESP with a status) say why in
 * fields requests use and responses did not: arg0 = enum sd_prov_nak_code (0: no
 * detail, what an older softdoca sends), arg1 = the refusing object's
 * permission bits, map_id / raddr / rlen = the refusing map's id, base and
 * length (sent only once the key matched). Backward compatible: decoders
 * ignore these fields in responses, so no version bump.
 */
#define SD_WIRE_MAGIC 0x57524453u /* "SDRW" */
#define SD_WIRE_VERSION 1
#define SD_HDR_LEN 96

enum sd_wire_op {
	SD_OP_HELLO = 1,      /* OOB: dialer -> acceptor, payload struct hello */
	SD_OP_HELLO_ACK = 2,  /* OOB: acceptor -> dialer */
	SD_OP_CM_REQ = 3,     /* CM: client -> server, payload instance+token */
	SD_OP_CM_ACCEPT = 4,  /* CM: server -> client, payload private data */
	SD_OP_CM_REJECT = 5,  /* CM: server -> client */
	SD_OP_CM_RTU = 6,     /* CM: client -> server, ready to use */
	SD_OP_WRITE = 16,
	SD_OP_WRITE_IMM = 17,
	SD_OP_SEND = 18,
	SD_OP_SEND_IMM = 19,
	SD_OP_READ = 20,
	SD_OP_CMP_SWP = 21,
	SD_OP_FETCH_ADD = 22,
	SD_OP_RESP = 32,        /* status of write / write_imm / send / send_imm */
	SD_OP_READ_RESP = 33,   /* status, payload = data on success */
	SD_OP_ATOMIC_RESP = 34, /* status, payload = 8-byte original value */
	SD_OP_PING = 48,
	SD_OP_PONG = 49,
	SD_OP_RNR_WAIT = 50,    /* responder is holding a message for a receive */
	SD_OP_DISCONNECT = 51,
	SD_OP_PROV_ADDR = 52,   /* provider connection address (SOFTDOCA_PROVIDER), after establishment */
	SD_OP_PROV_REVOKE = 53, /* a provider's map was stopped (map_id, key; req_id: the revocation's sequence):
				 * only to a peer that said it knows it (PROV_ADDR flag) */
	SD_OP_PROV_REVOKE_ACK = 54, /* answer (req_id): nothing of ours is in flight to that map any more */
	SD_OP_PROV_CHECK = 55,  /* requester -> target: is this descriptor (instance, map_id, key, raddr/rlen: its
				 * range, arg0: its access) live and will you revoke it to me? (req_id: its sequence);
				 * only to a peer that said it answers (PROV_ADDR flag) */
	SD_OP_PROV_CHECK_ACK = 56, /* answer (req_id, map_id; status: DOCA_SUCCESS, NOT_PERMITTED, or AGAIN: ask later) */
};

/* Why the target refused an operation (arg0 of an error response; arg1 its perms,
 * map_id / raddr / rlen its map_id / base / len): enum sd_prov_nak_code and
 * struct sd_prov_nak, in providers/provider.h. */
/* Describe a refusal of op (SD_OP_*) on [raddr, +len) from the requester's
 * side (target = 1: "target refused: ...") or the target's. */
void sd_nak_describe(char *out, size_t n, int requester, uint8_t op, uint64_t raddr, uint64_t len,
		     const struct sd_prov_nak *nak);

/* Live-object counters (softdoca_debug_live_objects): leak checks. */
enum sd_live_kind { SD_LIVE_CONN = 0, SD_LIVE_LINK, SD_LIVE_EVENT, SD_LIVE_LISTENER, SD_LIVE_CTRL, SD_LIVE_NUM };
extern atomic_long sd_live[SD_LIVE_NUM];
#define SD_LIVE_INC(k) atomic_fetch_add_explicit(&sd_live[k], 1, memory_order_relaxed)
#define SD_LIVE_DEC(k) atomic_fetch_sub_explicit(&sd_live[k], 1, memory_order_relaxed)

/* Closed connections kept per context (their handles stay valid for the
 * application) before the oldest are freed. */
#define SD_CONN_KEEP_CLOSED 32u
#define SD_DETAIL_LEN 256

#define SD_HELLO_LEN (8 + 2 * SD_RDMA_TOKEN_LEN)  /* dialer instance, dialer token, target token */
#define SD_CMREQ_LEN (8 + SD_RDMA_TOKEN_LEN)

struct sd_hdr {
	uint8_t opcode;
	uint16_t flags;
	uint64_t req_id;
	uint32_t payload_len;
	uint8_t imm[4];
	uint32_t status;
	uint32_t budget_ms;
	uint64_t instance;
	uint64_t map_id;
	uint64_t raddr;
	uint64_t rlen;
	uint8_t key[SD_KEY_LEN];
	uint64_t arg0, arg1;
};

/* Header codec (rdma_link.c). Decoding is strict: 0 on success, -1 on a
 * malformed header. */
void sd_hdr_encode(const struct sd_hdr *h, uint8_t out[SD_HDR_LEN]);
int sd_hdr_decode(const uint8_t in[SD_HDR_LEN], struct sd_hdr *h);

/* Connection details blob (doca_rdma_export), little-endian:
 *   0 magic u32 "SDRC"  4 version u16  6 length u16 (64)  8 instance u64
 *  16 token[16]  32 addr[16] (IPv4-mapped or IPv6)  48 port u16  50 family u8
 *  (4 or 6)  51 reserved u8 (0)  52 scope id u32  56 reserved u32 (0)
 *  60 crc32 over bytes 0..59 */
#define SD_BLOB_MAGIC 0x43524453u /* "SDRC" */
#define SD_BLOB_VERSION 1
#define SD_BLOB_LEN 64

/* ---------------------------------------------------------------- objects */
struct doca_rdma_addr {
	enum doca_rdma_addr_type type;
	char str[64];
	uint16_t port;
	struct sockaddr_storage ss;
	socklen_t sslen;
};

enum sd_task_type {
	SD_T_RECV = 0,
	SD_T_SEND,
	SD_T_SEND_IMM,
	SD_T_READ,
	SD_T_WRITE,
	SD_T_WRITE_IMM,
	SD_T_CMP_SWP,
	SD_T_FETCH_ADD,
	SD_T_NUM
};

struct sd_rtask;

/* One frame queued for transmission on a link. */
struct sd_txitem {
	struct sd_txitem *next;
	uint8_t hdr[SD_HDR_LEN];
	struct iovec *iov;      /* payload pieces */
	int iovcnt;
	size_t total;           /* header + payload */
	size_t sent;
	void *op;               /* request of an operation of the owner (not freed; flushed through
				 * sd_link_ops.on_flush), NULL: control frame (freed) */
	void *ref;              /* the owner's reference, released once sent or dropped (sd_link_ops.release_ref) */
	struct iovec iov1;      /* single-piece payload of control frames */
	uint32_t blob_cap;      /* >0: control blob, more small frames may be appended behind iov1 */
};

struct sd_pool;

struct sd_rtask {
	struct doca_task base;
	enum sd_task_type type;
	struct sd_pool *pool;
	int allocated;
	struct doca_rdma *rdma;
	struct doca_rdma_connection *conn;
	struct doca_buf *src;
	struct doca_buf *dst;
	struct doca_buf *result;
	doca_be32_t imm;
	uint64_t arg0, arg1;
	/* results */
	enum doca_rdma_opcode res_opcode;
	uint32_t res_len;
	doca_be32_t res_imm;
	struct doca_rdma_connection *res_conn;
	/* engine */
	struct sd_rtask *qnext;  /* connection wait queue / posted receive queue */
	struct sd_txitem tx;
	struct iovec *iov;       /* iov_cap entries from the pool */
	uint32_t iov_cap;
	int iovn;                /* entries of iov in use (gather or scatter list) */
	uint64_t xfer_len;       /* expected read length / payload length */
	uint8_t atomic_val[8];
	/* why the task failed (softdoca_task_get_error_detail), "" if unknown */
	char detail[SD_DETAIL_LEN];
};

struct doca_rdma_task_receive { struct sd_rtask t; };
struct doca_rdma_task_send { struct sd_rtask t; };
struct doca_rdma_task_send_imm { struct sd_rtask t; };
struct doca_rdma_task_read { struct sd_rtask t; };
struct doca_rdma_task_write { struct sd_rtask t; };
struct doca_rdma_task_write_imm { struct sd_rtask t; };
struct doca_rdma_task_atomic_cmp_swp { struct sd_rtask t; };
struct doca_rdma_task_atomic_fetch_add { struct sd_rtask t; };

struct sd_pool {
	struct sd_pool *next;    /* retired pools */
	uint32_t count, nfree;
	struct sd_rtask *tasks;
	struct sd_rtask **free;  /* stack of free tasks */
	struct iovec *iovs;
};

/* epoll registrations (sd_eng_ep_add). The engine thread serves its eventfd
 * and links itself; any other kind through its on_event handler. A link is
 * registered twice: its socket for input (EPOLLIN | EPOLLEXCLUSIVE, after the
 * pe's registration of the same socket: see sd_pe_watch) and a duplicate of
 * it for output and errors (SD_EP_LINK_OUT: EPOLLOUT while frames wait). */
enum { SD_EP_EVENTFD = 1, SD_EP_LISTENER, SD_EP_LINK, SD_EP_LINK_OUT };
struct sd_ep {
	int kind;
	int fd;
	void (*on_event)(struct sd_ep *ep, uint32_t events);
};

struct sd_listener {
	struct sd_ep ep;
	struct doca_rdma *rdma;
	uint16_t port;
	int oob;                 /* export/connect listener (else RDMA CM) */
	uint64_t retry_ns;       /* paused after a resource error until then */
	struct sd_listener *next;
};

enum sd_rx_state { SD_RX_HDR = 0, SD_RX_PAYLOAD };

/* What to do with an incoming payload once it has been received. */
enum sd_rx_action {
	SD_RXA_NONE = 0,
	SD_RXA_WRITE,     /* into target memory (or drained on error) */
	SD_RXA_SEND,      /* into a posted receive (or drained on error) */
	SD_RXA_PARK,      /* into a heap buffer: no receive posted */
	SD_RXA_PARK_DEFER,/* no receive posted and no room to park: the payload waits in the socket */
	SD_RXA_READ_RESP, /* into the local destination of a read */
	SD_RXA_ATOMIC_RESP,
	SD_RXA_CTRL,      /* small control payload into ctrl_buf */
};

struct sd_link;

/* What a link reports to its owner, the connection layer, which hands these
 * handlers to sd_link_new. Every member is set; engine lock held. */
struct sd_link_ops {
	/* The outgoing TCP connect of link completed (err 0) or failed (errno). */
	void (*on_connected)(struct sd_link *link, int err);
	/* A frame header was decoded into link->rx: say where its payload goes
	 * (rx_iov / rx_discard). -1: close the link with *st. 1: not now (an RNR
	 * park holds the peer's next request): the link keeps the header
	 * (rx_held), pauses (SD_RXP_APP) and hands it here again first once the
	 * layer above unpauses it. */
	int (*on_header)(struct sd_link *link, doca_error_t *st);
	/* The payload of that frame was received (or drained). -1: close. */
	int (*on_payload_done)(struct sd_link *link, doca_error_t *st);
	/* link closes or drains: let go of the frame being received, failing
	 * its receive with status. */
	void (*on_abort_rx)(struct sd_link *link, doca_error_t status);
	/* link no longer carries its connection (closed or drained with
	 * status): the owner lets go of it (link->conn). */
	void (*on_detached)(struct sd_link *link, doca_error_t status);
	/* link is about to be freed. */
	void (*on_free)(struct sd_link *link);
	/* The link can no longer carry operation op (a request queued or
	 * awaiting its response: sd_txitem.op): fail it with status, saying why
	 * (link->why, or what status means). */
	void (*on_flush)(struct sd_link *link, void *op, doca_error_t status);
	/* A frame that held the owner's reference (sd_txitem.ref) was sent or dropped. */
	void (*release_ref)(void *ref);
	/* Validate a one-sided request h touching len bytes with the rights
	 * need (engine/rdma_serve.c): DOCA_SUCCESS with *ref holding the target
	 * memory (NULL when nothing is touched), else why in *nak. */
	doca_error_t (*mem_acquire)(struct sd_link *link, const struct sd_hdr *h, uint64_t len, uint32_t need,
				    void **ref, struct sd_prov_nak *nak);
	/* Frames the engine dispatches to the owner (engine/rdma_frames.c): the
	 * answer to this side's oldest request (its header: set rx_task and
	 * where the payload goes; then its payload read), a SEND / SEND_IMM
	 * (header; then its payload, or a WRITE_IMM's immediate once its data
	 * landed, or a message parked), a one-sided request refused (answer it
	 * with nak, break the connection), a handshake / provider control frame
	 * with its payload. Each: 0, or -1 to close the link. */
	int (*on_response_header)(struct sd_link *link, const struct sd_hdr *h);
	int (*on_response_done)(struct sd_link *link);
	int (*on_message_header)(struct sd_link *link, const struct sd_hdr *h);
	int (*on_message_done)(struct sd_link *link);
	int (*on_refused)(struct sd_link *link, uint8_t resp_op, const struct sd_hdr *h, uint64_t len,
			  doca_error_t st, const struct sd_prov_nak *nak);
	int (*on_ctrl)(struct sd_link *link, const struct sd_hdr *h);
	/* Whether the keepalive watches link: its connection is established. */
	int (*established)(const struct sd_link *link);
	/* Watch (on) or stop watching (!on) link's input for the owner's waiters
	 * (a thread blocked there reads the input itself), registered before the
	 * engine's. on: 0 when watched. */
	int (*rx_watch)(struct sd_link *link, int on);
};

/* What the engine serves of one owner (a DOCA RDMA context, which embeds it:
 * sd_group_rdma): its links (the submit doorbell walks them), and, while
 * attached (running), the owner's handlers. */
struct sd_link_group {
	struct sd_link *links;
	int nparked;                       /* messages parked (RNR) on them, and in the provider path above */
	int running;                       /* attached to the engine (sd_eng_attach .. sd_eng_detach_locked) */
	const struct sd_rdma_ops *eng_ops; /* the connection layer's handlers (NULL: none yet) */
	struct sd_link_group *eng_next;    /* the engine's attached groups */
};

/* A TCP connection between two engines. */
struct sd_link {
	struct sd_ep ep;
	const struct sd_link_ops *ops;     /* its owner's handlers */
	struct sd_link_group *group;       /* its owner's links */
	struct doca_rdma_connection *conn; /* NULL while an incoming link is unidentified (the owner's) */
	struct sd_link *next;              /* group->links */
	int from_listener;                 /* accepted: 1 = OOB listener, 2 = CM listener */
	int connecting;                    /* TCP connect in progress */
	int dead;                          /* closed, waiting to be freed by the engine */
	int draining;                      /* detached: flush, discard input, close on EOF */
	uint64_t deadline_ns;              /* unidentified links: handshake bound */
	uint32_t ep_events;                /* of wep: EPOLLOUT or 0 */
	struct sd_ep wep;                  /* dup of ep.fd: output readiness, errors */
	uint64_t serial;                   /* nonzero id: its tag in the pe's set */
	int rx_registered;                 /* input watched (engine, and the pe's waiter) */
	int pe_watched;                    /* the pe's set holds the socket */
	uint64_t sweep_ns;                 /* engine reads it at least this often */
	/* rx */
	enum sd_rx_state rx_state;
	uint8_t rx_hdr_buf[SD_HDR_LEN];
	size_t rx_hdr_got;
	int rx_held;                       /* rx_hdr_buf holds a whole header on_header deferred (returned 1) */
	struct sd_hdr rx;
	enum sd_rx_action rx_action;
	doca_error_t rx_status;
	struct sd_prov_nak rx_nak;         /* why rx_status refused the frame */
	struct iovec *rx_iov;
	int rx_iovcnt;
	struct iovec rx_iov1;
	size_t rx_left;                    /* payload bytes still to receive */
	int rx_lowat;                      /* SO_RCVLOWAT in force (0: the default, 1 byte) */
	int rx_discard;                    /* drain payload into scratch */
	void *rx_ref;                      /* a write's target held while its payload arrives (mem_acquire) */
	struct sd_rtask *rx_task;
	uint8_t ctrl_buf[SD_RDMA_MAX_PRIV + 1];
	int rx_paused;                     /* SD_RXP_* bits: input not read while any is set */
	size_t ctrl_q;                     /* bytes held by control items queued and not yet sent (answers mostly) */
	int awaited;                       /* the layer above awaits the answer to a control frame it sent (a
					    * PROV_CHECK's): outstanding work, as a task's, for the keepalive */
	/* rx staging: bytes read ahead of the current frame (small frames are
	 * parsed from here, one recv for many; large payloads are read straight
	 * into their destination) */
	uint8_t *rb;
	size_t rb_pos, rb_end;
	int rx_kick;                       /* unpaused with bytes staged (or a header held): the engine processes them */
	/* parked message (RNR): while it waits the link reads on, past it, the
	 * answers to this side's requests; the peer's next request is held
	 * (rx_held) and the link paused until the parked one is taken or expires */
	int parked;
	int park_defer;                    /* its payload waits in the socket (sd_link_park_bytes) */
	struct sd_hdr park;
	uint8_t *park_buf;
	size_t park_len, park_cap;         /* park_cap: park_buf's size (sd_link_park_alloc) */
	uint64_t park_since_ns, park_deadline_ns, park_nak_ns;
	/* stashed OOB hello (acceptor side, connect not called yet) */
	int have_hello;
	uint64_t hello_instance;
	uint8_t hello_token[SD_RDMA_TOKEN_LEN], hello_target[SD_RDMA_TOKEN_LEN];
	/* tx */
	struct sd_txitem *txq_head, *txq_tail;
	struct sd_txitem *out_head, *out_tail;   /* requests awaiting a response */
	size_t out_count;
	uint64_t last_rx_ns, last_ping_ns;
	uint64_t last_tx_ns;                     /* last progress sending task frames */
	int close_after_flush;
	int unflushed;                           /* tasks queued without DOCA_TASK_SUBMIT_FLAG_FLUSH */
	uint64_t next_req_id;
	/* provider (rdma_prov.c): the PROV_ADDR payload being received */
	uint8_t *prov_buf;
	/* same-host transport (rdma_xport.c): the peer's registration table */
	struct sd_xpeer *xpeer;
	/* why the link is being closed: the detail of the tasks it flushes */
	char why[SD_DETAIL_LEN];
};

enum sd_conn_state {
	SDC_EXPORTED = 0,  /* doca_rdma_export done, doca_rdma_connect not yet */
	SDC_CONNECTING,    /* handshake running */
	SDC_REQUESTED,     /* CM server: waiting for accept/reject */
	SDC_ACCEPTING,     /* CM server: accepted, waiting for the client's RTU */
	SDC_ESTABLISHED,
	SDC_CLOSED,
};

enum sd_fail_reason { SD_FAIL_NONE = 0, SD_FAIL_REJECTED, SD_FAIL_TIMEOUT, SD_FAIL_REFUSED, SD_FAIL_LOST };

struct doca_rdma_connection {
	struct doca_rdma *rdma;
	struct doca_rdma_connection *next;
	uint32_t id;
	union doca_data user_data;
	enum sd_conn_state state;
	int is_cm, cm_client, dialer;
	int ever_established;
	uint8_t token[SD_RDMA_TOKEN_LEN];
	uint8_t peer_token[SD_RDMA_TOKEN_LEN];
	uint64_t peer_instance;
	uint8_t blob[SD_BLOB_LEN];
	struct doca_rdma_addr peer;
	uint8_t priv[SD_RDMA_MAX_PRIV];
	uint8_t priv_len;
	struct sd_link *link;
	struct sd_rtask *wq_head, *wq_tail;  /* tasks waiting for the link */
	uint64_t deadline_ns;                /* handshake bound (also: the app's accept decision) */
	uint64_t requested_ns;               /* CM server: when the request arrived */
	doca_error_t close_status;           /* status for tasks submitted after close */
	enum sd_fail_reason fail_reason;
	/* lifetime of a closed connection: freed once no event for it is
	 * pending, no task refers to it and SD_CONN_KEEP_CLOSED newer ones
	 * closed after it */
	atomic_int ev_pending;               /* queued connection events naming it */
	atomic_int task_refs;                /* tasks whose conn / result conn it is */
	uint64_t closed_seq;                 /* rdma->close_seq when it closed (0: open) */
	char why[SD_DETAIL_LEN];             /* why it broke ("" unknown) */
	/* provider (rdma_prov.c): its connection, usable once pready; operations
	 * in flight there; operations waiting for them to finish before they take
	 * the native link (hold queue, through qnext) */
	struct sd_prov_conn *pconn;
	int pready, paddr_seen, pbroken;
	uint32_t peer_perms;                 /* the peer context's permissions (PROV_ADDR) */
	uint64_t pinstance;                  /* the peer's process instance (PROV_ADDR) */
	struct doca_rdma_connection *pbroken_next;
	uint64_t plost_ns;                   /* provider wire-up failed: the verdict falls then (0: none) */
	struct doca_rdma_connection *plost_next;
	char plost_why[128];
	uint32_t prov_out;
	struct ptok *ptoks;
	struct sd_rtask *hold_head, *hold_tail;
	/* the native link ended first (the peer disconnected, or died): what the
	 * peer answered on the provider connection before that still completes,
	 * until the provider connection ends too or plinger_ns (rdma_prov.c) */
	uint64_t plinger_ns;
	doca_error_t plinger_status;
	struct doca_rdma_connection *plinger_next;
	char ptransport[64];
	/* two-sided messages through the provider (rdma_prov.c sends them and
	 * settles them on the peer's acknowledgements; rdma_pmsg.c receives,
	 * parks and acknowledges them) */
	int pmsg;                            /* both sides take messages through the provider */
	/* revocations between hosts (rdma_prov.c): the peer understands them; as
	 * target, the last one sent / answered on this connection; as requester,
	 * the peer's maps stopped */
	int prevoke;
	int pcheck;                          /* the peer answers PROV_CHECK (between hosts: a descriptor is confirmed
					      * by its target on this connection before operations on it take the
					      * provider here) */
	uint64_t pserial;                    /* process-unique, once it asked (doca_mmap.prov_ok_conn) */
	void *pchk;                          /* its descriptors asked about (rdma_prov.c struct pcheck) */
	uint32_t nchk, chkcap, chkat;
	uint64_t revoke_sent, revoke_acked;
	void *prevset;                       /* the peer process's revoked maps (looked up at prevset_ver) */
	uint64_t prevset_ver;
	uint32_t peer_budget_ms;             /* the peer's RNR budget (PROV_ADDR) */
	uint32_t pm_tx_seq;                  /* the next message's sequence */
	struct ptok *pm_head, *pm_tail;      /* sent and not yet acknowledged, in order */
	uint32_t pm_unacked;
	uint64_t pm_unacked_bytes;
	uint64_t pm_head_ns;                 /* when the oldest unacknowledged one became the oldest */
	struct doca_rdma_connection *pm_tx_next;
	int pm_tx_listed;
	uint32_t pm_rx_seq;                  /* the next incoming message's sequence */
	struct sd_pm_park *pm_park_head, *pm_park_tail; /* arrived while no receive was posted */
	uint32_t pm_parked;
	uint64_t pm_parked_bytes;
	uint64_t pm_park_ns;                 /* when the oldest parked one became the oldest */
	int pm_dead;                         /* an RNR verdict was given: later messages are dropped */
	struct sd_pm_place *pm_placing;      /* a large message on its way into place */
	struct sd_pm_ack *pm_acks, *pm_acks_tail; /* acknowledgements to send, in order */
	struct doca_rdma_connection *pm_next;
	int pm_listed;
};

enum sd_event_type { SD_EV_REQUEST = 1, SD_EV_ESTABLISHED, SD_EV_FAILURE, SD_EV_DISCONNECT };
struct sd_event {
	struct sd_event *next;
	enum sd_event_type type;
	struct doca_rdma_connection *conn;
};

typedef void (*sd_fnptr)(void);  /* matches any function type in casts */

struct sd_task_conf {
	sd_fnptr ok_cb, err_cb;  /* typed callbacks stored untyped */
	uint32_t num;
	int set;
};

#define SD_RDMA_MAGIC 0x52444d41u

/* What the engine thread asks of the connection layer for a started context
 * (its group's eng_ops, installed with the context's first connection or
 * listener: until then there is nothing for it to do). Engine lock held. */
struct sd_rdma_ops {
	/* Act on the deadlines of its connections and listeners that passed at
	 * now; returns the next one (0: none). */
	uint64_t (*timers)(struct sd_link_group *group, uint64_t now);
	/* Messages wait parked (group->nparked): hand them to receives posted since, if any. */
	void (*deliver_parked)(struct sd_link_group *group);
	/* ctx stop, once its links are closed: close its connections (no
	 * events) and listeners. */
	void (*detach)(struct sd_link_group *group, doca_error_t status);
};

struct doca_rdma {
	uint32_t magic;          /* keeps the ctx at a different address than rdma */
	struct doca_ctx ctx;
	struct doca_dev *dev;
	/* config (IDLE only) */
	uint32_t permissions;
	uint32_t gid_index;
	uint32_t sl;
	uint32_t sq_size, rq_size;
	uint32_t max_send_buf_list_len;
	uint32_t recv_buf_list_len;
	uint8_t grh;
	uint8_t rnr;
	enum doca_rdma_transport_type transport;
	enum doca_mtu_size mtu;
	uint16_t max_conns;
	uint16_t timeout_ms;
	doca_rdma_connection_request_cb_t request_cb;
	doca_rdma_connection_established_cb_t established_cb;
	doca_rdma_connection_failure_cb_t failure_cb;
	doca_rdma_connection_disconnection_cb_t disconnect_cb;
	struct sd_task_conf tconf[SD_T_NUM];
	/* task pools */
	pthread_mutex_t pool_lock;
	struct sd_pool *pool[SD_T_NUM];
	struct sd_pool *retired;
	/* runtime, engine lock */
	struct doca_rdma_connection *conns;
	uint32_t next_conn_id;
	uint32_t nconns_active;
	uint64_t close_seq;                   /* connections closed so far */
	uint32_t nconns_closed;               /* closed ones still allocated */
	struct sd_rtask *rq_head, *rq_tail;   /* posted receives */
	struct sd_listener *listeners;
	struct sd_listener *oob;
	struct sd_link_group lg;              /* its links (sd_link_rdma) */
	/* events for doca_pe_progress */
	pthread_mutex_t ev_lock;
	struct sd_event *ev_head, *ev_tail;
};

/* The payload of the frame being read goes into one buffer (none when len is 0). */
static inline void sd_link_rx_into(struct sd_link *link, void *buf, size_t len)
{
	link->rx_iov1.iov_base = buf;
	link->rx_iov1.iov_len = len;
	link->rx_iov = &link->rx_iov1;
	link->rx_iovcnt = len ? 1 : 0;
}

/* The context of a group, of the group of a link. */
static inline struct doca_rdma *sd_group_rdma(const struct sd_link_group *group)
{
	return (struct doca_rdma *)(void *)((char *)group - offsetof(struct doca_rdma, lg));
}

static inline struct doca_rdma *sd_link_rdma(const struct sd_link *link)
{
	return sd_group_rdma(link->group);
}

/* ---------------------------------------------------------------- engine services (rdma_engine.c) */
/* Engine lock. sd_eng_unlock first hands the completions collected while it
 * was held to their progress engines (one batch, one notification each). */
void sd_eng_lock(void);
int sd_eng_trylock(void);  /* 0: taken */
/* Threads blocked in sd_eng_lock now (a spinning engine thread gives way). */
int sd_eng_lock_waiters(void);
void sd_eng_unlock(void);
/* Complete a task: batched while this thread holds the engine lock. */
void sd_eng_complete(struct doca_task *task, doca_error_t status);
void sd_eng_flush_completions(void);
/* SOFTDOCA_TIMEOUT_MS in nanoseconds (at least 100 ms). */
uint64_t sd_eng_timeout_ns(void);
/* SOFTDOCA_SPIN_US in ns: how long the engine polls after a turn with events (0: it sleeps at once) */
uint64_t sd_eng_spin_ns(void);
/* The engine's epoll set with its wake-up eventfd: opened when the engine
 * thread starts, closed once it has been joined (engine lock held). */
int sd_eng_ep_open(void);
void sd_eng_ep_close(void);
/* epoll_wait on it: the engine thread, without the engine lock. */
int sd_eng_ep_wait(struct epoll_event *evs, int max, int timeout_ms);
/* Register / change / remove ep (engine lock held): fail or do nothing while
 * no engine thread runs. */
int sd_eng_ep_add(struct sd_ep *ep, uint32_t events);
void sd_eng_ep_mod(struct sd_ep *ep, uint32_t events);
void sd_eng_ep_del(struct sd_ep *ep);
/* Wake the engine thread. */
void sd_eng_kick(void);
/* Engine lock held: when the engine thread next looks at its work at the
 * latest without a wake-up (UINT64_MAX: not before an fd event or a kick;
 * 0: no engine thread). */
uint64_t sd_eng_sleep_until_ns(void);
/* Engine lock held: the groups of the started rdma contexts (through eng_next). */
struct sd_link_group *sd_eng_groups(void);
/* How often the engine thread progressed the provider (softdoca_debug_counter). */
unsigned long sd_eng_prov_progress_calls(void);
/* Whether this thread holds the engine lock. */
int sd_eng_held(void);
/* A provider the engine thread progresses (rdma_prov.c): progress() every
 * turn; arm() before it sleeps (nonzero: do not sleep; *sleep_ms >= 0: wake
 * by then); drain() when the engine stops (the last context destroyed):
 * nonzero while closed connections still flush, and the engine keeps turning
 * (bounded); ep (its fd, on_event set) joins the epoll set while an engine
 * runs. NULL removes it. Engine lock held. */
struct sd_eng_hook {
	int (*progress)(void);
	int (*arm)(int *sleep_ms);
	int (*drain)(void);
	/* nonzero: nothing wakes the engine for what peers post (SD_PROV_CAP_POLLED), so
	 * progress() cannot tell a turn that served a peer from an idle one */
	int (*polled)(void);
	/* nonzero: a spinning engine need not arm (SD_PROV_CAP_SPIN_UNARMED) */
	int (*spin_unarmed)(void);
	/* none of this process's provider operations is outstanding: when the
	 * last of them ended (sd_now_ns; 1: never one), else 0. Input long after
	 * that is a peer's doing (the serving spin, rdma_loop.c); input soon after
	 * may be their own traffic's tail (acknowledgements, the fabric's own) */
	uint64_t (*idle_since)(void);
	/* the end of a turn: progress() runs again after serve_until_ns before the
	 * engine sleeps (its spin; 0: none); self_until_ns: without a wake-up till
	 * about then (the spin, or an application thread polling) */
	void (*live)(uint64_t serve_until_ns, uint64_t self_until_ns);
};
void sd_eng_set_hook(const struct sd_eng_hook *hook, struct sd_ep *ep);
/* Engine lock held: watch the provider's fd in the engine's set (1) or not (0). */
void sd_eng_hook_watch(int on);
const struct sd_eng_hook *sd_eng_get_hook(void);
/* ep is the provider's fd in the engine's set (engine lock held). */
int sd_eng_is_hook_ep(const struct sd_ep *ep);
/* The earlier of two deadlines, 0 meaning none. */
/* Unlink c from a singly linked list of connections threaded through its
 * field `next` (the bridge's lists; a context destroyed right after frees its
 * connections, so they leave those lists when they end). */
#define SD_CONN_LIST_REMOVE(head, c, next)                                                   \
	do {                                                                                 \
		for (struct doca_rdma_connection **pp_ = (head); *pp_; pp_ = &(*pp_)->next) \
			if (*pp_ == (c)) {                                                   \
				*pp_ = (c)->next;                                            \
				break;                                                       \
			}                                                                    \
		(c)->next = NULL;                                                            \
	} while (0)
static inline uint64_t sd_min_deadline(uint64_t a, uint64_t b)
{
	if (!a)
		return b;
	if (!b)
		return a;
	return a < b ? a : b;
}

/* ---------------------------------------------------------------- links (rdma_link.c) */
/* Engine lock held everywhere. A new link is registered with the engine and
 * reports to ops (struct sd_link_ops). */
struct sd_link *sd_link_new(struct sd_link_group *group, int fd, int connecting, const struct sd_link_ops *ops);
/* Tear the link down: every task queued or outstanding on it completes with
 * status; the link is freed at the end of the engine's turn. */
void sd_link_close(struct sd_link *link, doca_error_t status);
/* Break the connection of link as an RNR-retry-exceeded / reject does: the
 * connection fails now (status, callbacks), while the link still flushes the
 * frames already queued (e.g. the final response) before it closes. */
void sd_link_drain(struct sd_link *link, doca_error_t status);
/* Free the links closed so far (end of an engine turn). */
void sd_link_free_closed(void);
void sd_link_queue(struct sd_link *link, struct sd_txitem *it);
/* Queue a control frame with an optional small payload (copied). */
int sd_link_send_ctrl(struct sd_link *link, const struct sd_hdr *h, const void *payload, size_t len);
void sd_link_flush(struct sd_link *link);
/* Same, returns -1 on a fatal socket error (engine thread closes the link). */
int sd_link_flush_rc(struct sd_link *link);
/* The doorbell of a flushing submit on link (see rdma_link.c). */
void sd_link_submit_flush(struct sd_link *link);
void sd_link_update_events(struct sd_link *link);
/* Why a link's input is not read (sd_link.rx_paused bits): the layer above
 * holds it (the peer's request behind an RNR park, or a parked message's
 * payload left in the socket; an OOB hello waiting for doca_rdma_connect:
 * sd_link_set_rx_paused), or the peer does not read what it asked of us
 * (control items holding SD_CTRLQ_HIGH bytes queued, until SD_CTRLQ_LOW: a
 * peer that keeps asking without reading cannot grow this process's memory).
 * A legitimate peer reaches it with ~370,000 reads or ~650,000 writes
 * outstanding on one connection (a read's answer holds ~180 bytes, its data
 * stays in the map; 42 small answers share a 4 KiB blob), ~15,000 where
 * small answers interleave with read data (a blob each). */
#define SD_RXP_APP 1
#define SD_RXP_TX 2
#define SD_CTRLQ_HIGH (64u << 20)
#define SD_CTRLQ_LOW (16u << 20)
/* The process's bound: past SD_CTRLQ_PROC queued on all links together, a link
 * holding its share (SD_CTRLQ_PROC over the links open, between
 * SD_CTRLQ_SHARE_MIN and SD_CTRLQ_SHARE) waits as well, until it drained to
 * half of it. */
#define SD_CTRLQ_PROC (256u << 20)
#define SD_CTRLQ_SHARE (4u << 20)
#define SD_CTRLQ_SHARE_MIN (64u << 10)
void sd_link_set_rx_paused(struct sd_link *link, int paused);
/* The heap of RNR parks (park_buf), counted for the whole process (engine
 * lock): past SD_PARK_PROC a message that finds no receive posted is not read
 * into the heap; its payload waits in the socket (the link paused, TCP's flow
 * control holds the sender) until a receive is posted or its RNR budget ends.
 * Many peers that send while nothing is posted cannot add up to connections x
 * SD_RDMA_MAX_PARK. */
#define SD_PARK_PROC (256u << 20)
size_t sd_link_park_bytes(void);
uint8_t *sd_link_park_alloc(struct sd_link *link, size_t len);
void sd_link_park_free(struct sd_link *link);
/* The link's parked message is gone (taken, expired, or the link closes). */
void sd_link_unpark(struct sd_link *link);
/* The allowance: SD_PARK_PROC, or SOFTDOCA_PARK_MAX_MB (read once). Messages
 * parked through a provider (rdma_pmsg.c) are charged and credited here too. */
size_t sd_link_park_limit(void);
void sd_link_park_charge(size_t len);
void sd_link_park_credit(size_t len);
/* Have the engine process staged rx bytes of a link that was unpaused. */
void sd_link_rx_kick(struct sd_link *link);
/* Record why link broke (first reason wins). */
void sd_link_set_why(struct sd_link *link, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---------------------------------------------------------------- rx framing (rdma_rx.c) */
/* Read what the socket of link holds, frame by frame, into the places its
 * handlers name (engine lock held). -1: close the link with *st. */
int sd_rx_read(struct sd_link *link, doca_error_t *st);

/* ---------------------------------------------------------------- engine thread (rdma_loop.c) */
/* Read waiting responses of rdma's links on the calling thread (doca_pe_progress). */
void sd_eng_poll(struct sd_link_group *group);
/* An application thread that progressed the provider itself (sd_eng_poll) is
 * about to sleep: the engine watches the provider's fd again (any thread, no
 * lock needed). */
void sd_eng_app_sleeps(void);
/* Whether the engine leaves the provider to a polling application thread now
 * (it looks again within a millisecond; the thread's sleep hands it back). */
int sd_eng_app_polls(void);
/* Read the input of the group's links whose serials are in tags, on the
 * calling thread (a pe waiter woken by them: sd_ctx_ops.service). */
void sd_eng_service(struct sd_link_group *group, const uint64_t *tags, int ntags);
/* Default of SOFTDOCA_SPIN_US (engine thread) and SOFTDOCA_POLL_SPIN_US (progress engine waits). */
#define SD_SPIN_US_DEFAULT 0
/* Default of SOFTDOCA_SERVE_SPIN_US: the engine's adaptive spin after serving a peer (providers). */
#define SD_SERVE_SPIN_US_DEFAULT 100
/* A doca_rdma was created / destroyed: the engine thread lives while any exists. */
void sd_eng_rdma_created(void);
void sd_eng_rdma_destroyed(void);
/* ctx start: make the engine run and serve the context's group. Engine lock NOT held. */
doca_error_t sd_eng_attach(struct sd_link_group *group);
/* ctx stop: tear down every link of the group (failing their tasks with
 * status), then its connections and listeners (eng_ops->detach). Engine lock
 * held. */
void sd_eng_detach_locked(struct sd_link_group *group, doca_error_t status);

/* ---------------------------------------------------------------- data operations (rdma_wire.c) */
/* The sd_link_ops handlers of an established link's answers, messages,
 * refusals and control frames (engine/rdma_frames.c calls them), RNR parking
 * and the posted receives waiting messages (engine lock held). */
int sd_wire_response_header(struct sd_link *link, const struct sd_hdr *h);
int sd_wire_response_done(struct sd_link *link);
int sd_wire_message_header(struct sd_link *link, const struct sd_hdr *h);
int sd_wire_message_done(struct sd_link *link);
int sd_wire_refused(struct sd_link *link, uint8_t resp_op, const struct sd_hdr *h, uint64_t len, doca_error_t st,
		    const struct sd_prov_nak *nak);
int sd_wire_ctrl(struct sd_link *link, const struct sd_hdr *h);
void sd_wire_deliver_parked(struct doca_rdma *rdma);
void sd_wire_abort_rx(struct sd_link *link, doca_error_t status);
doca_error_t sd_wire_mem_acquire(struct sd_link *link, const struct sd_hdr *h, uint64_t len, uint32_t need,
				 void **ref, struct sd_prov_nak *nak);

/* ---------------------------------------------------------------- connections (rdma_conn.c) */
/* The connection layer's handlers: given to every link it makes, installed
 * on every context it makes a connection or listener for. */
extern const struct sd_link_ops sd_conn_link_ops;
extern const struct sd_rdma_ops sd_conn_rdma_ops;
/* Handshake frames (engine lock held). Returns -1 to close the link. */
int sd_conn_on_handshake(struct sd_link *link, const struct sd_hdr *h, const uint8_t *payload);
/* The outgoing TCP connect of link completed (err 0) or failed. */
void sd_conn_on_connected(struct sd_link *link, int err);
/* The link was lost/closed with status; update the connection, queue events. */
void sd_conn_on_link_closed(struct doca_rdma_connection *conn, doca_error_t status, int notify);
void sd_conn_established(struct doca_rdma_connection *conn);
void sd_conn_fail_waiting(struct doca_rdma_connection *conn, doca_error_t status);
void sd_conn_free_all(struct doca_rdma *rdma);
/* Free closed connections nobody can still reach (engine lock held). */
void sd_conn_reap(struct doca_rdma *rdma);
/* Task references to a connection (any thread; conn may be NULL). */
void sd_conn_ref(struct doca_rdma_connection *conn);
void sd_conn_unref(struct doca_rdma_connection *conn);
/* Is conn a live connection object (not freed)? */
int sd_conn_live(const struct doca_rdma_connection *conn);
/* Record why conn broke (first reason wins). */
void sd_conn_set_why(struct doca_rdma_connection *conn, const char *why);
/* Private data received with the CM accept (requester side); NULL if none. */
const uint8_t *sd_rdma_conn_private_data(const struct doca_rdma_connection *conn, uint8_t *len);
/* Why a connection failed (for logs and tests). */
enum sd_fail_reason sd_rdma_conn_fail_reason(const struct doca_rdma_connection *conn);

/* internal helpers shared by rdma_conn.c and rdma_cm.c */
void sd_sock_tune(int fd);
socklen_t sd_dev_sockaddr(const struct doca_devinfo *info, int v6, uint16_t port, struct sockaddr_storage *ss);
void sd_addr_from_sockaddr(struct doca_rdma_addr *a, const struct sockaddr_storage *ss, socklen_t len);
int sd_open_listener(struct doca_rdma *rdma, int v6, uint16_t port, int oob, doca_error_t *err);
void sd_listener_close(struct sd_listener *l);
/* Resume listeners paused after a resource error; returns the next retry (0: none). */
uint64_t sd_listener_timers(struct doca_rdma *rdma, uint64_t now);
int sd_rdma_ctx_usable(struct doca_rdma *rdma);
/* BAD_STATE when the ctx cannot take connections, FULL at max_num_connections. */
doca_error_t sd_rdma_conn_slot_check(struct doca_rdma *rdma);
struct doca_rdma_connection *sd_conn_new(struct doca_rdma *rdma);
void sd_conn_fail(struct doca_rdma_connection *c, enum sd_fail_reason why);
int sd_conn_send_ctrl(struct sd_link *l, uint8_t op, const void *payload, size_t len);
/* Open an outgoing link for c to ss; failures end in the failure callback. */
void sd_conn_dial(struct doca_rdma_connection *c, const struct sockaddr_storage *ss, socklen_t sl);

/* ---------------------------------------------------------------- ctx (rdma_ctx.c) */
void sd_rdma_queue_event(struct doca_rdma *rdma, enum sd_event_type type, struct doca_rdma_connection *conn);
int sd_rdma_live(const struct doca_rdma *rdma);
uint32_t sd_rdma_gid_table(const struct doca_devinfo *info, struct doca_rdma_gid *out, uint32_t max);

/* ---------------------------------------------------------------- tasks (rdma_tasks.c) */
doca_error_t sd_rdma_pools_create(struct doca_rdma *rdma);
void sd_rdma_pools_destroy(struct doca_rdma *rdma);
/* Submit a task's frame on an established link (engine lock held). */
void sd_rtask_start(struct sd_rtask *t, struct sd_link *link);
/* Complete with engine lock held. */
void sd_rtask_complete(struct sd_rtask *t, doca_error_t status);
/* Same, with a detail (printf-style) for softdoca_task_get_error_detail. */
void sd_rtask_fail(struct sd_rtask *t, doca_error_t status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The detail of an rdma task ("" none), NULL if task is not an rdma task. */
const char *sd_rtask_detail(const struct doca_task *task);
/* "LOCAL_READ_WRITE|RDMA_READ" for permission bits. */
const char *sd_access_str(uint32_t perms, char *buf, size_t len);
uint32_t sd_rnr_budget_ms(const struct doca_rdma *rdma);
doca_error_t sd_rtask_set_conf(struct doca_rdma *rdma, enum sd_task_type type, sd_fnptr ok, sd_fnptr err,
			       uint32_t num);
/* out: struct sd_rtask ** */
doca_error_t sd_rtask_alloc(struct doca_rdma *rdma, enum sd_task_type type, struct doca_rdma_connection *conn,
			    union doca_data ud, void *out);

/* buffer helpers */
/* Gather [data, data+data_len) of each buffer of a list into iov; returns
 * count or -1 (too many / bad). *total gets the byte count. */
int sd_buf_gather(const struct doca_buf *b, struct iovec *iov, uint32_t max, uint64_t *total);
/* Free tail space [data+data_len, head+len) of each buffer of a list. */
int sd_buf_tail(const struct doca_buf *b, struct iovec *iov, uint32_t max, uint64_t *total);
/* After n bytes landed in the tails: grow data_len of the list in order. */
void sd_buf_tail_commit(struct doca_buf *b, uint64_t n);

/* ---------------------------------------------------------------- frames (rdma_frames.c) */
/* The on_header / on_payload_done of a link's frames (the handshake's
 * before it is established, the rest after): the
 * connection layer hands these to its links (struct sd_link_ops); what is
 * not the engine's goes to the owner's on_response_*, on_message_*,
 * on_refused and on_ctrl. */
int sd_frames_on_header(struct sd_link *link, doca_error_t *st);
int sd_frames_on_payload_done(struct sd_link *link, doca_error_t *st);
/* Whether a frame of this opcode waits while a message is parked on its link. */
int sd_frames_park_holds(uint8_t op);
/* RNR parking (a message with no receive posted): start (0, or -1: RNR at
 * once), enter (the link parked: counted in its group, paused when the
 * payload waits in the socket), leave, fail the sender (TIME_OUT answer,
 * the connection drained), the budget ran out (engine timers), the group's
 * oldest park. */
int sd_frames_park_start(struct sd_link *link, const struct sd_hdr *h, int with_payload);
void sd_frames_park_enter(struct sd_link *link);
void sd_frames_unpark(struct sd_link *link);
void sd_frames_rnr_fail(struct sd_link *link, const struct sd_hdr *h);
void sd_frames_park_expired(struct sd_link *link);
struct sd_link *sd_frames_oldest_parked(const struct sd_link_group *group);

/* ---------------------------------------------------------------- one-sided responder (rdma_serve.c) */
/* A WRITE / WRITE_IMM header: where its payload goes (l->rx_*), or
 * l->rx_status / rx_nak refuse it (its payload drained, then answered). */
void sd_serve_write(struct sd_link *link, const struct sd_hdr *h);
/* Let go of the write target a link holds (its payload arrived or was aborted). */
void sd_serve_release(struct sd_link *link);
/* A READ / CMP_SWP / FETCH_ADD: answered (0), -1 to close the link, 1
 * refused with *st and *nak (the caller answers and breaks the connection). */
int sd_serve_read(struct sd_link *link, const struct sd_hdr *h, doca_error_t *st, struct sd_prov_nak *nak);
int sd_serve_atomic(struct sd_link *link, const struct sd_hdr *h, doca_error_t *st, struct sd_prov_nak *nak);

/* ---------------------------------------------------------------- same-host transport (rdma_xport.c) */
/* The same-host transport knows no DOCA object: a map reaches it as a region
 * (published, target side) or a remote key (struct sd_rkey: what the peer's
 * descriptor names, initiator side); a link holds its peer's table (struct
 * sd_xpeer). Permission bits are DOCA's access flags, as on the wire. */
struct sd_xpeer;
struct sd_xregion {            /* a started local map */
	uint64_t id, base, len;
	uint32_t perms;
	const uint8_t *key;    /* SD_KEY_LEN bytes */
};
/* A one-sided write (write != 0) or read of len bytes between iov and raddr
 * through peer x's table, on the calling thread: 1 when the bytes moved, 0 to
 * go over TCP. Ask only while the link is idle (ordering). */
int sd_xport_op(struct sd_xpeer *x, int write, const struct iovec *iov, int iovn, uint64_t len,
		const struct sd_rkey *rk, uint64_t raddr);
/* Whether peer x's live table grants it: 1 yes, 0 refused, -1 no table. */
int sd_xport_check(const struct sd_xpeer *x, const struct sd_rkey *rk, uint64_t raddr, uint64_t len,
		   uint32_t need);
int sd_xport_ready(const struct sd_xpeer *x);
void sd_xport_peer_free(struct sd_xpeer *x);
/* Handshake frames (HELLO, HELLO_ACK, CM_REQ, CM_ACCEPT) carry this
 * process's table and the context's permissions in header fields older peers
 * ignore; the receiving side keeps the peer's offer in *xp. */
void sd_xport_offer(uint32_t ctx_perms, struct sd_hdr *h);
void sd_xport_on_offer(struct sd_xpeer **xp, const struct sd_hdr *h);
/* The connection is established (peer_instance: the peer's, 0 unknown): open
 * the peer's table. x may be NULL (no offer). */
void sd_xport_attach(struct sd_xpeer *x, uint64_t peer_instance);
/* A local map started / stopped or destroyed: publish it in this process's
 * table, revoke it (waits, bounded, for peers' copies in progress). */
void sd_xport_publish(const struct sd_xregion *r);
void sd_xport_revoke(uint64_t id);

/* ---------------------------------------------------------------- provider bridge (rdma_prov.c) */
/* Engine lock held. SOFTDOCA_PROVIDER: the provider in use ("native" when
 * none), and whether one other than native was asked for. */
const char *sd_prov_name(void);
int sd_prov_asked(void);
/* A context starts: open the provider if one is asked for (it stays open
 * for the process; one that cannot start fails the start, reason logged). */
doca_error_t sd_prov_rdma_start(void);
/* The connection's native link is established: create the provider
 * connection, send its address (PROV_ADDR). */
void sd_prov_conn_start(struct doca_rdma_connection *c);
/* The peer's PROV_ADDR arrived. -1: protocol error (close the link). */
int sd_prov_on_addr(struct doca_rdma_connection *c, const void *blob, size_t len);
/* Engine thread, a PROV_REVOKE / PROV_REVOKE_ACK frame on c's link: 0, or -1 (a protocol error). */
int sd_prov_on_revoke(struct doca_rdma_connection *c, const struct sd_hdr *h);
int sd_prov_on_revoke_ack(struct doca_rdma_connection *c, const struct sd_hdr *h);
/* Engine thread, a PROV_CHECK (as target) / PROV_CHECK_ACK (as requester) frame: 0, or -1 (a protocol error). */
int sd_prov_on_check(struct doca_rdma_connection *c, const struct sd_hdr *h);
int sd_prov_on_check_ack(struct doca_rdma_connection *c, const struct sd_hdr *h);
/* The connection is freed: what the bridge kept for it. */
void sd_prov_conn_free(struct doca_rdma_connection *c);
/* The connection closes: close its provider connection, fail what is in
 * flight there or held. */
void sd_prov_conn_end(struct doca_rdma_connection *c, doca_error_t status, int linger);
/* Try t on the provider (1: taken, held or completed; 0: native link). */
int sd_prov_try(struct sd_rtask *t, struct doca_rdma_connection *c, struct sd_link *link);
/* The end of a submit burst (engine lock held): the provider work it left is
 * progressed on this thread, or the engine woken for it. */
void sd_prov_submit_end(void);
/* The oldest posted receive of rdma, taken off its queue (NULL: none). Engine lock held. */
static inline struct sd_rtask *sd_rdma_pop_recv(struct doca_rdma *rdma)
{
	struct sd_rtask *t = rdma->rq_head;

	if (t) {
		rdma->rq_head = t->qnext;
		if (!rdma->rq_head)
			rdma->rq_tail = NULL;
		t->qnext = NULL;
	}
	return t;
}

/* Receives were posted: hand them the messages parked by the provider path
 * (rdma_pmsg.c; rdma->lg.nparked counts them with the native link's). */
void sd_pm_deliver(struct doca_rdma *rdma);
/* When the provider path's oldest parked message of rdma came (0: none), and
 * hand it to the oldest posted receive (0: nothing parked or posted). */
uint64_t sd_pm_oldest_ns(struct doca_rdma *rdma);
int sd_pm_deliver_one(struct doca_rdma *rdma);
/* The provider's transports of an established connection, NULL if none. */
const char *sd_prov_conn_transport(const struct doca_rdma_connection *c);
/* A counter of the provider in use (its ops->counter), -1: none or unknown. */
long sd_prov_counter(const char *name);
/* Maps (common/mmap.c, through struct sd_mmap_hooks, see internal.h):
 * register a started local map with the provider, deregister it or release
 * its imported key, import the provider section of an export. */
doca_error_t sd_prov_mmap_publish(struct doca_mmap *m);
void sd_prov_mmap_revoke(struct doca_mmap *m);
doca_error_t sd_prov_mmap_import(struct doca_mmap *m, const uint8_t *tail, size_t len);

#endif
