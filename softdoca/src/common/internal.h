/*
 * softdoca internal contract: the bodies of DOCA's opaque structs and the
 * calls the modules of softdoca make into each other.
 *
 * Module map (one .c file each):
 *   error.c      doca_error_get_name/descr, version
 *   dev.c        devinfo list (one soft device per interface with an address), dev open/close
 *   mmap.c       local and remote (from export) memory maps, export descriptor, registry
 *   buf.c        doca_buf and the buffer list functions
 *   inventory.c  doca_buf_inventory
 *   pe.c         progress engine, completion queue, notification fd, tasks (generic part)
 *   ctx.c        generic context: state machine, state-changed callbacks
 *   log.c        doca_log: application/SDK backends, levels, sources (sd_log feeds the SDK ones)
 *   argp.c       doca_argp (built into libdoca_argp only, not libdoca_common)
 *   rdma*.c      DOCA RDMA context, connections, tasks, engine thread (the "NIC")
 *
 * Threads: the application thread(s) call DOCA functions; the engine thread
 * (rdma) moves data. Every user callback (task completion, ctx state change,
 * connection events) runs only inside doca_pe_progress on the caller's thread.
 */
#ifndef SOFTDOCA_INTERNAL_H
#define SOFTDOCA_INTERNAL_H

#include "doca_all.h"
#pragma GCC visibility push(default)
#include "softdoca_ext.h" /* softdoca_* extensions, exported */
#pragma GCC visibility pop

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>
#include <netinet/in.h>

#define SD_EXPORT __attribute__((visibility("default")))
#define SD_UNUSED __attribute__((unused))

/* ---------------------------------------------------------------- logging */
/* SOFTDOCA_LOG=debug|info|warn|error -> stderr (unset: silent; pydoca logs itself). */
void sd_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
enum { SD_LOG_DEBUG = 0, SD_LOG_INFO = 1, SD_LOG_WARN = 2, SD_LOG_ERROR = 3 };
/* log.c: hand a message to the doca_log SDK backends; 0 when there are none
 * (then sd_log prints per SOFTDOCA_LOG). sd_log_sdk_wanted: any SDK backend. */
int sd_log_sdk(int level, const char *msg);
int sd_log_sdk_wanted(void);
#define SD_DBG(...) sd_log(SD_LOG_DEBUG, __VA_ARGS__)
#define SD_WARN(...) sd_log(SD_LOG_WARN, __VA_ARGS__)
#define SD_ERR(...) sd_log(SD_LOG_ERROR, __VA_ARGS__)

/* ---------------------------------------------------------------- utils */
/* Fill buf with len cryptographically random bytes (getrandom). 0 on success. */
int sd_random_bytes(void *buf, size_t len);
/* CRC-32 (IEEE) of data. */
uint32_t sd_crc32(const void *data, size_t len);
/* Monotonic clock in nanoseconds. */
uint64_t sd_now_ns(void);
/* Random 64-bit id of this process instance (stable for the process lifetime,
 * renewed after fork). Goes into every descriptor so that a descriptor is only
 * honoured by the process that issued it. */
uint64_t sd_instance_id(void);
/* Env var as milliseconds with default; e.g. SOFTDOCA_TIMEOUT_MS. */
uint64_t sd_env_ms(const char *name, uint64_t dflt);

/* Registry of live handles (pe, ctx, mmap, inventory, dev, ...): lets the API
 * detect use after destroy without dereferencing a freed pointer. A handle may
 * carry a kind so that a recycled address of another type is not mistaken for
 * a live handle. sd_handle_add returns 0 on success, -1 on allocation failure. */
enum { SD_H_ANY = 0, SD_H_PE, SD_H_CTX, SD_H_MMAP, SD_H_INV, SD_H_DEV, SD_H_OTHER, SD_H_CONN };
/* doca_task_batch (pe.c); far from the list above so other kinds can be appended there. */
enum { SD_H_TASK_BATCH = 64 };
int sd_handle_add(void *h);                       /* kind SD_H_OTHER */
int sd_handle_add_kind(void *h, int kind);
void sd_handle_del(void *h);
int sd_handle_live(const void *h);                /* any kind */
int sd_handle_live_kind(const void *h, int kind); /* that kind only */

/* The first check of every function taking a handle: NULL is INVALID_VALUE,
 * a destroyed (or foreign) handle BAD_STATE (docs/softdoca-contract.md). */
#define SD_CHECK_HANDLE(h, live)                         \
	do {                                             \
		if (!(h))                                \
			return DOCA_ERROR_INVALID_VALUE; \
		if (!live(h))                            \
			return DOCA_ERROR_BAD_STATE;     \
	} while (0)

/* Little-endian wire helpers (descriptors, protocol headers). */
static inline void sd_put_le16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void sd_put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline void sd_put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t sd_get_le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t sd_get_le32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}
static inline uint64_t sd_get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* ---------------------------------------------------------------- devices */
#define SD_IFNAME_MAX 64
struct doca_devinfo {
	char ibdev_name[64];      /* "soft_<iface>" */
	char iface_name[SD_IFNAME_MAX];
	uint32_t iface_index;
	int has_ipv4, has_ipv6;
	uint8_t ipv4[4];          /* network order */
	uint8_t ipv6[16];
	uint8_t mac[6];
	char pci_addr[32];        /* "0000:ff:00.<n>"-like, stable per iface index */
	uint16_t lid;             /* 0 for RoCE */
	double active_rate;       /* Gb/s */
};

struct doca_dev {
	struct doca_devinfo info;  /* copy: outlives the devinfo list */
	atomic_int refs;           /* mmaps / rdma contexts using it */
};

/* ---------------------------------------------------------------- mmap */
#define SD_KEY_LEN 16
#define SD_MAX_DEVS_DEFAULT 4

/* A remote key: what a peer's export descriptor names of its map (the
 * issuing process instance, the map id, its access key). */
struct sd_rkey {
	uint64_t instance, id;
	uint8_t key[SD_KEY_LEN];
};

struct doca_mmap {
	pthread_mutex_t lock;
	int started;
	int remote;                /* created from an export: describes peer memory */
	uint8_t *addr;
	size_t len;
	uint32_t permissions;      /* enum doca_access_flag bits */
	uint32_t max_devs;
	uint32_t num_devs;
	struct doca_dev **devs;
	union doca_data user_data;
	atomic_int num_bufs;       /* live doca_bufs pointing into this map */

	/* local maps: set at start (export identity) */
	uint64_t id;               /* process-unique */
	uint8_t key[SD_KEY_LEN];   /* random access key */
	int exported;
	/* engine ops currently touching this map's memory (remote reads/writes/atomics) */
	atomic_int engine_refs;

	/* remote maps: peer identity from the descriptor */
	uint64_t peer_instance;
	struct sd_rkey rkey;       /* peer_instance, id, key together (the same-host transport's key) */
	uint8_t peer_addr[16];     /* IPv4-mapped or IPv6 */
	uint16_t peer_port;

	uint8_t *export_blob;      /* owned by the map, freed at destroy */
	size_t export_len;
	int registered;            /* local map currently in the registry */

	/* doca_mmap_set_free_cb: called by destroy when the map was ever started */
	doca_mmap_memrange_free_cb_t *free_cb;
	void *free_opaque;
	int was_started;
	/* doca_mmap_enable_thread_safety: destroy succeeds with bufs out; the
	 * struct then lives on until the last buf is released (SD_MMAP_DEAD) */
	int thread_safe;
	/* doca_mmap_set_export_access_token: the key used instead of a random
	 * one (zero-padded to SD_KEY_LEN); one token per map */
	int token_set;
	const struct doca_dev *token_dev;
	uint8_t token[SD_KEY_LEN];
	/* provider (rdma/rdma_prov.c, SOFTDOCA_PROVIDER): local maps: the registration
	 * and its remote-key blob, appended to the export; remote maps: the blob
	 * from the export and the key imported from it at the first operation */
	struct sd_prov_mr *prov_mr;
	struct sd_prov_rkey *prov_rkey;
	uint8_t *prov_blob;
	size_t prov_blob_len;
	/* remote: found not revoked in its target's revocation set prov_rset after prov_rgen (rdma_prov.c) */
	const void *prov_rset;
	uint64_t prov_rgen;
	/* remote, between hosts: the last SD_PROV_OK_WAYS connections (their pserial) on which its target
	 * confirmed this descriptor (PROV_CHECK), for the confirmation epoch prov_ok_epoch; local: its stop
	 * began (no confirmation any more) */
#define SD_PROV_OK_WAYS 8
	uint64_t prov_ok_conn[SD_PROV_OK_WAYS], prov_ok_epoch;
	uint32_t prov_ok_next;
	int prov_revoking;
};

/* Bit of doca_mmap.num_bufs set by the destroy of a thread-safe map with bufs
 * out: the buf that drops the count to 0 frees the map (sd_mmap_buf_put). */
#define SD_MMAP_DEAD (1 << 30)
/* A doca_buf of map m was released (inventory.c): drops m->num_bufs. */
void sd_mmap_buf_put(struct doca_mmap *m);

/* Registry of started local maps, consulted by the engine for remote ops.
 * sd_mmap_acquire validates id/key/instance, range [addr, addr+len) (with
 * overflow checks) and that (map->permissions & need_perm) is set; on success
 * it increments engine_refs and returns the map; sd_mmap_release drops it.
 * Returns DOCA_ERROR_NOT_FOUND / NOT_PERMITTED / INVALID_VALUE otherwise.
 * doca_mmap_stop removes the map from the registry and then waits (bounded)
 * until engine_refs is 0, so no engine op touches memory after stop returns. */
doca_error_t sd_mmap_acquire(uint64_t id, const uint8_t key[SD_KEY_LEN], uint64_t addr,
			     uint64_t len, uint32_t need_perm, struct doca_mmap **out);
void sd_mmap_release(struct doca_mmap *map);
/* Same as sd_mmap_acquire, saying why it refused: code, and once the key
 * matched the map's base, length and permissions. */
enum { SD_ACQ_OK = 0, SD_ACQ_NO_MAP, SD_ACQ_KEY, SD_ACQ_BOUNDS, SD_ACQ_PERM };
struct sd_acquire_why {
	int code;
	uint64_t base, len;
	uint32_t perms;
};
doca_error_t sd_mmap_acquire_why(uint64_t id, const uint8_t key[SD_KEY_LEN], uint64_t addr, uint64_t len,
				 uint32_t need_perm, struct doca_mmap **out, struct sd_acquire_why *why);
/* Same as sd_mmap_acquire, but first checks that instance is this process's
 * sd_instance_id() (DOCA_ERROR_NOT_PERMITTED otherwise: stale descriptor). */
doca_error_t sd_mmap_acquire_inst(uint64_t instance, uint64_t id, const uint8_t key[SD_KEY_LEN],
				  uint64_t addr, uint64_t len, uint32_t need_perm,
				  struct doca_mmap **out);

/* The RDMA layer's handlers of map events. Common is below the RDMA layer
 * (rdma/) and never calls it: rdma/rdma_ctx.c installs these when the library
 * loads (before any map can start); none installed (the core objects alone,
 * test_common) is a map with neither a same-host transport nor a provider.
 * Same-host transport (rdma/rdma_xport.c): xport_publish publishes a started
 * local map in the process's shared registration table (doca_mmap_start,
 * after it is registered); xport_revoke revokes it before the registry drain
 * of doca_mmap_stop / destroy (waits, bounded, for peer copies in progress).
 * Provider bridge (rdma/rdma_prov.c, SOFTDOCA_PROVIDER=ucx): prov_publish
 * registers a started local map with the provider (an error fails
 * doca_mmap_start: a provider asked for is never skipped); prov_revoke
 * deregisters it (local) or releases its imported key (remote); prov_import
 * checks the provider section that follows the native descriptor in an
 * export. */
struct sd_prov_mr;
struct sd_prov_rkey;
struct sd_mmap_hooks {
	void (*xport_publish)(const struct doca_mmap *m);
	void (*xport_revoke)(const struct doca_mmap *m);
	doca_error_t (*prov_publish)(struct doca_mmap *m);
	void (*prov_revoke)(struct doca_mmap *m);
	doca_error_t (*prov_import)(struct doca_mmap *m, const uint8_t *tail, size_t len);
};
/* hooks lives as long as the process; NULL removes them. */
void sd_mmap_set_hooks(const struct sd_mmap_hooks *hooks);

/* Export descriptor (doca_mmap_export_rdma), little-endian, no padding:
 *   u32 magic "SDMM" | u16 version | u16 total length | u64 instance | u64 map id
 *   | u64 addr | u64 len | u32 permissions | key[16] | ip[16] (IPv4-mapped or IPv6)
 *   | u16 port (reserved, 0) | u32 CRC-32 of all preceding bytes            */
#define SD_MMAP_DESC_MAGIC 0x4d4d4453u   /* "SDMM" */
#define SD_MMAP_DESC_VERSION 1
#define SD_MMAP_DESC_LEN 82
struct sd_mmap_desc {
	uint64_t instance;
	uint64_t id;
	uint64_t addr;
	uint64_t len;
	uint32_t permissions;
	uint8_t key[SD_KEY_LEN];
	uint8_t ip[16];
	uint16_t port;
};
/* Writes SD_MMAP_DESC_LEN bytes to out. */
void sd_mmap_desc_encode(const struct sd_mmap_desc *d, uint8_t out[SD_MMAP_DESC_LEN]);
/* Strict parse: DOCA_ERROR_INVALID_VALUE on any malformation. */
doca_error_t sd_mmap_desc_parse(const void *buf, size_t len, struct sd_mmap_desc *out);
/* Mask of valid enum doca_access_flag bits. */
#define SD_ACCESS_MASK 0x7fu

/* ---------------------------------------------------------------- buffers */
struct doca_buf {
	struct doca_buf_inventory *inv;
	struct doca_mmap *mmap;
	uint8_t *head;             /* start of buffer (may be a remote address) */
	size_t len;                /* buffer length */
	uint8_t *data;             /* start of data, head <= data <= head + len */
	size_t data_len;
	atomic_uint refcount;
	struct doca_buf *next;     /* list chaining (doca_buf_chain_list) */
	struct doca_buf *last;     /* valid in the list head */
	uint32_t list_len;         /* valid in the list head */
	int in_use;
	int in_tail;               /* chained behind some list head (not first) */
	struct doca_buf *free_next;
};

/* Return a buf (refcount reached 0) to its inventory; drops mmap->num_bufs. */
void sd_buf_release(struct doca_buf *buf);
/* Take a free buf from inv (started) for mmap (started) and initialise it
 * with refcount 1. BAD_STATE / NO_MEMORY on failure. Ranges are not checked. */
doca_error_t sd_inv_take(struct doca_buf_inventory *inv, struct doca_mmap *mmap, struct doca_buf **out);

struct doca_buf_inventory {
	pthread_mutex_t lock;
	int started;
	size_t num_elements;
	size_t num_free;
	struct doca_buf **chunks;  /* arrays of doca_buf, grown by expand */
	size_t num_chunks;
	struct doca_buf *free_list;
	union doca_data user_data;
};

/* ---------------------------------------------------------------- tasks */
struct doca_task;

/* Per task-type operations, provided by the module owning the type. */
struct sd_task_ops {
	const char *name;
	/* Called by doca_task_submit* on the caller's thread with the ctx RUNNING.
	 * Validates and hands the task to the transport. Returns DOCA_SUCCESS if
	 * the task is now in flight (its completion will come via sd_task_complete). */
	doca_error_t (*submit)(struct doca_task *task);
	/* Invoke the typed success or error completion callback of the task.
	 * Called only from doca_pe_progress on the progressing thread. */
	void (*invoke)(struct doca_task *task, int success);
	/* Return the task to its owner's pool (doca_task_free). */
	void (*release)(struct doca_task *task);
};

struct doca_task {
	const struct sd_task_ops *ops;
	struct doca_ctx *ctx;
	union doca_data user_data;
	doca_error_t status;
	int in_flight;
	struct doca_task *cq_next;   /* completion queue link */
	/* member of a submitted doca_task_batch: its completion goes to the
	 * batch (slot batch_idx), not to the task's own callback */
	struct doca_task_batch *batch;
	uint16_t batch_idx;
};

/* A batch of tasks of one ctx submitted as one unit (pe.c; allocated with the
 * softdoca_task_batch_allocate extension). */
#define SD_TASK_BATCH_MAX 128    /* DOCA_TASK_BATCH_MAX_TASKS_NUMBER_128 */
struct doca_task_batch {
	struct doca_ctx *ctx;
	uint16_t num;
	union doca_data user_data;
	softdoca_task_batch_completion_cb_t ok_cb, err_cb;
	struct doca_task **tasks;    /* num slots, filled by the application */
	doca_error_t *status;        /* per slot, set as the tasks complete */
	doca_error_t result;         /* DOCA_SUCCESS or the first failed slot's status */
	int in_flight;
	atomic_uint remaining;       /* tasks of the submitted batch not yet delivered */
};

/* Mark task done with status (DOCA_SUCCESS or an error) from any thread: the
 * task is queued on its ctx's progress engine, the engine's notification fd
 * is signalled, and the ctx's in-flight count drops when the completion is
 * delivered by doca_pe_progress. Thread-safe, never blocks for long. */
void sd_task_complete(struct doca_task *task, doca_error_t status);
/* Same for a list of tasks of one pe (cq_next-linked, head..tail, status
 * already set): one lock, one notification. */
void sd_task_complete_list(struct doca_pe *pe, struct doca_task *head, struct doca_task *tail);
/* Flags of the doca_task_submit* call running on this thread
 * (DOCA_TASK_SUBMIT_FLAG_*; FLUSH for doca_task_submit / try_submit). */
extern _Thread_local uint32_t sd_submit_flags;
/* Completions queued for pe and not yet delivered? (Ending connection events
 * wait for them: a peer's last message is seen before its disconnect, also
 * when it arrived while doca_pe_progress was running callbacks.) */
int sd_pe_has_completions(struct doca_pe *pe);

/* ---------------------------------------------------------------- contexts */
struct sd_ctx_ops {
	const char *name;
	/* doca_ctx_start: validate config, allocate. DOCA_SUCCESS -> STARTING,
	 * RUNNING on the next progress once start_done() reports 1. */
	doca_error_t (*start)(struct doca_ctx *ctx);
	/* 1 when an asynchronous start has finished (NULL: immediately). */
	int (*start_done)(struct doca_ctx *ctx);
	/* doca_ctx_stop: begin stopping (tear down connections, fail/flush
	 * outstanding tasks via sd_task_complete with DOCA_ERROR_IO_FAILED or
	 * DOCA_ERROR_CONNECTION_ABORTED). IDLE follows once no task is in flight. */
	void (*stop)(struct doca_ctx *ctx);
	/* Called after the ctx reached IDLE from STOPPING (release runtime state). */
	void (*stopped)(struct doca_ctx *ctx);
	/* Called from doca_pe_progress: deliver ctx-specific events (connection
	 * callbacks). Returns number of events delivered. May be NULL. */
	int (*progress)(struct doca_ctx *ctx);
	/* doca_ctx_flush_tasks */
	void (*flush)(struct doca_ctx *ctx);
	/* A thread waiting on the pe was woken by fds this ctx registered with
	 * sd_pe_watch (their tags): read them now, on that thread. May be NULL. */
	void (*service)(struct doca_ctx *ctx, const uint64_t *tags, int ntags);
	/* A thread is about to sleep on the pe (softdoca_pe_wait,
	 * doca_pe_request_notification): whatever it progressed itself must be
	 * someone else's job again. May be NULL. */
	void (*sleeping)(struct doca_ctx *ctx);
};

struct doca_ctx {
	const struct sd_ctx_ops *ops;
	void *impl;                         /* e.g. struct doca_rdma * */
	struct doca_pe *pe;
	enum doca_ctx_states state;
	union doca_data user_data;
	doca_ctx_state_changed_callback_t state_cb;
	atomic_uint inflight;               /* submitted, completion not yet delivered */
	int stop_requested;
	struct doca_ctx *pe_next;           /* list of ctxs connected to pe */
	/* State transitions not yet reported to state_cb (delivered in order by
	 * doca_pe_progress); protected by pe->lock. */
#define SD_CTX_MAX_PENDING 32
	struct { uint8_t prev, next; } pending[SD_CTX_MAX_PENDING];
	unsigned pending_head, pending_count;
	uint32_t comp_vector;               /* doca_ctx_set_completion_vector */
};

/* Completion vectors of a soft device (doca_ctx_cap_get_num_completion_vectors):
 * completions come from one engine thread. */
#define SD_NUM_COMP_VECTORS 1

/* Initialise a ctx base (state IDLE) and register it as a live handle.
 * Returns DOCA_SUCCESS or DOCA_ERROR_NO_MEMORY (registry). */
doca_error_t sd_ctx_init(struct doca_ctx *ctx, const struct sd_ctx_ops *ops, void *impl);
/* Tear down a ctx base before its memory is freed (e.g. doca_rdma_destroy):
 * disconnects it from its pe, drops undelivered completions of its tasks and
 * unregisters the handle. The ctx must be IDLE (caller checks: BAD_STATE). */
void sd_ctx_fini(struct doca_ctx *ctx);
/* Queue a state transition for delivery by progress and set ctx->state
 * (caller holds no pe lock). */
void sd_ctx_set_state(struct doca_ctx *ctx, enum doca_ctx_states next);
/* Drive state transitions; called by doca_pe_progress. Returns events handled. */
int sd_ctx_progress(struct doca_ctx *ctx);
/* One phase of sd_ctx_progress: deliver queued state callbacks, finish
 * STARTING / STOPPING transitions, and (run_ops) call ops->progress. */
int sd_ctx_progress_phase(struct doca_ctx *ctx, int run_ops);
/* Generic submit path used by doca_task_submit & co. */
doca_error_t sd_task_submit(struct doca_task *task);

/* ---------------------------------------------------------------- pe */
struct doca_pe {
	pthread_mutex_t lock;
	struct doca_task *cq_head, *cq_tail;  /* completed, not yet delivered */
	int efd;                              /* eventfd: wakes a waiter (in epfd) */
	int epfd;                             /* notification handle: efd + watched fds */
	atomic_int armed;                     /* doca_pe_request_notification called */
	atomic_int wake_pending;              /* sd_pe_wake called since last progress */
	uint64_t spin_ns;                     /* softdoca_pe_wait's adaptive spin window */
	struct doca_ctx *ctxs;
	int event_mode;
	int destroyed;
};

/* Which part of doca_pe_progress is running on this thread: ctx event hooks
 * deliver connection-opening events BEFORE task completions and
 * connection-ending events (failure, disconnect) AFTER them. */
enum { SD_PE_PHASE_ANY = 0, SD_PE_PHASE_BEFORE = 1, SD_PE_PHASE_AFTER = 2 };
extern _Thread_local int sd_pe_phase;
/* The ctx whose task completion callback runs on this thread (inside
 * doca_pe_progress), else NULL: doca_ctx_stop of that ctx from its own
 * callback answers DOCA_ERROR_IN_PROGRESS and finishes after the callback
 * returns (the task is still being retired), as DOCA does. */
extern _Thread_local struct doca_ctx *sd_cb_ctx;

/* Signal the pe's notification fd (any thread), e.g. when a ctx event is
 * queued for delivery in progress. */
void sd_pe_wake(struct doca_pe *pe);

/* Direct wake-up: a ctx registers an fd whose input its pe's waiting thread
 * should handle itself (a link socket), tagged with a nonzero id. The pe's
 * registration is exclusive and made before the engine's, so the kernel wakes
 * a thread blocked in epoll_wait on the pe (softdoca_pe_wait) instead of the
 * engine thread; with nobody waiting there the engine is woken as before. */
int sd_pe_watch(struct doca_pe *pe, int fd, uint64_t tag);
void sd_pe_unwatch(struct doca_pe *pe, int fd);

#endif
