/*
 * softdoca RDMA: the provider bridge. With SOFTDOCA_PROVIDER=ucx|ofi the bytes
 * of one-sided operations (write, read, atomics) and of two-sided messages
 * (send, immediates: rdma_pmsg.h) move through a provider
 * (providers/provider.h) instead of softdoca's own wire; the rest keeps the
 * connection's native link: the handshake (OOB and RDMA CM), keepalive,
 * disconnect and remote sync events.
 *
 * Set-up: one provider instance per process (opened by the first mmap start
 * or rdma ctx start that needs it, kept for the life of the process). Its fd
 * sits in the engine's epoll set and the engine thread progresses it (a
 * one-sided operation completes without the target calling doca_pe_progress).
 * A local mmap registers its range at start; its export carries the
 * provider's remote-key blob after the native descriptor. Once a connection is
 * established on its native link, both sides create a provider connection and
 * send its address blob in a PROV_ADDR frame; the provider connection becomes
 * usable when the provider reports it established.
 *
 * Ordering (DOCA's RC order on a connection): at most one path is active. An
 * eligible operation (one-sided on a remote map with a provider key, or a
 * message where both sides take them there; provider connection up) takes
 * the provider only when the native link has nothing
 * queued or outstanding; any operation that must take the native link while
 * provider operations are outstanding waits in the connection's hold queue,
 * released in order once they all completed. A provider write completes when
 * its data is at the target (the provider flushes), so what follows on the
 * native link sees it.
 *
 * Selection: SOFTDOCA_PROVIDER=native (default) | auto (= native today) | ucx | ofi.
 * A provider that was asked for and cannot start fails the mmap or context
 * start with a reason naming the cause and the fix; never a silent fallback.
 */
#define _GNU_SOURCE
#include "rdma_pmsg.h"

#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

static struct {
	int decided;                          /* SOFTDOCA_PROVIDER read */
	const struct sd_provider_ops *ops;    /* NULL: native */
	struct sd_prov *p;                    /* open instance */
	doca_error_t err;                     /* why the asked-for provider cannot start */
	char why[SD_PROV_WHY_LEN];
	struct sd_ep ep;                      /* its fd in the engine's set */
	int ep_added;
	uint32_t max_iov;                     /* the instance's caps.max_iov */
	int in_progress;                      /* inside the provider's progress (its callbacks run) */
	uint64_t msgs_sent, msgs_answered;    /* two-sided messages through the provider (a test reads them) */
	uint64_t table_refused;               /* one-sided ops a same-host target's table refused (native link) */
	uint64_t revoke_refused;              /* one-sided ops on a map its target revoked (native link) */
	uint64_t revoke_seq;                  /* the last revocation this process sent (engine lock) */
	uint64_t revoke_gens;                 /* revocations received, all connections (engine lock) */
	uint64_t check_seq;                   /* the last PROV_CHECK this process sent (engine lock) */
	uint64_t conn_serials;                /* connections that asked one (doca_rdma_connection.pserial) */
	uint64_t chk_epoch;                   /* bumped when confirmations are forgotten (doca_mmap.prov_ok_epoch) */
	uint64_t checks_sent;                 /* PROV_CHECKs sent (a test reads them) */
	uint64_t check_native;                /* one-sided ops on a descriptor its target had not confirmed (native link) */
	uint64_t one_sided;                   /* one-sided ops the provider took (a test reads them) */
	int no_msg;                           /* messages stay on the native link (see prov_open) */
	int msg_env;                          /* SOFTDOCA_PROVIDER_MESSAGES: 0, 1, or -1 unset */
	int polled;                           /* caps: SD_PROV_CAP_POLLED */
	int spin_unarmed;                     /* caps: SD_PROV_CAP_SPIN_UNARMED */
	int arm_signals;                      /* caps: SD_PROV_CAP_ARM_SIGNALS (queried again as connections come up) */
	int kicked;                           /* a submit woke the engine since the provider was last progressed */
	int defer_kick;                       /* inside sd_prov_try: sd_prov_submit_end decides */
	int kick_due;                         /* a deferred submit left work: decided at the flush */
	long nout;                            /* operations of this process outstanding on the provider */
	uint64_t out_end_ns;                  /* when the last of them ended (0: none yet) */
} P = {.ep = {.fd = -1}};

/* A submit needs the engine to progress the provider (and re-arm its fd):
 * one wake-up until the provider is next progressed is enough (under the
 * engine lock; prov_progress and prov_arm clear it), not one eventfd write
 * per operation. An application's submit defers the decision to the end of
 * its burst (sd_prov_submit_end). */
static void kick_engine(void)
{
	if (P.kicked)
		return;
	if (P.defer_kick) {
		P.kick_due = 1;
		return;
	}
	P.kicked = 1;
	sd_eng_kick();
}

static void prov_atfork_child(void)
{
	/* the parent's instance is not ours: forget it (never close it here) */
	P.p = NULL;
	P.ep_added = 0;
	P.ep.fd = -1;
	P.kicked = 0;
	P.nout = 0;
}

static void decide_once(void)
{
	const char *e;

	P.decided = 1;
	pthread_atfork(NULL, NULL, prov_atfork_child);
	e = getenv("SOFTDOCA_PROVIDER_MESSAGES");
	P.msg_env = !e || !*e ? -1 : strcmp(e, "0") != 0;
	e = getenv("SOFTDOCA_PROVIDER");
	if (!e || !*e || !strcmp(e, "native") || !strcmp(e, "auto"))
		return;
	P.ops = sd_provider_find(e);
	if (!P.ops) {
		P.err = DOCA_ERROR_NOT_SUPPORTED;
		snprintf(P.why, sizeof(P.why),
			 "SOFTDOCA_PROVIDER=%s: no such provider in this softdoca (built in: %s; ucx needs Debian's "
			 "libucx-dev and ofi libfabric-dev when pydoca is built); set SOFTDOCA_PROVIDER=native or unset it",
			 e, softdoca_providers_built());
		return;
	}
	{
		struct sd_prov_why w = {{0}};
		doca_error_t rc = sd_prov_ops_check(P.ops, &w);

		if (rc != DOCA_SUCCESS) {
			P.err = rc;
			snprintf(P.why, sizeof(P.why), "SOFTDOCA_PROVIDER=%s is not a provider this softdoca can drive: %s",
				 e, w.msg);
			P.ops = NULL;
			return;
		}
		rc = P.ops->probe(&w);

		if (rc != DOCA_SUCCESS) {
			P.err = rc;
			snprintf(P.why, sizeof(P.why), "SOFTDOCA_PROVIDER=%s cannot start: %s", e, w.msg);
			P.ops = NULL;
		}
	}
}

static void decide(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, decide_once);
}

/* The engine lock is held by the caller of every function below unless said. */

int sd_prov_asked(void)
{
	decide();
	return P.ops != NULL || P.err != DOCA_SUCCESS;
}

const char *sd_prov_name(void)
{
	decide();
	return P.ops ? P.ops->name : "native";
}

static void on_ep(struct sd_ep *ep, uint32_t events);

static struct doca_rdma_connection *pm_tx_list; /* connections with messages awaiting an answer */
static struct doca_rdma_connection *plinger_head; /* native link ended, answers still due (sd_prov_conn_end) */
static void plinger_sweep(void);
static uint64_t plinger_next_ns(void);

/* Connections whose provider operation failed: broken after progress (a
 * failed operation breaks an RC connection; not from inside a callback). */
static struct doca_rdma_connection *broken_head;

static void break_later(struct doca_rdma_connection *c)
{
	if (c->pbroken || c->state != SDC_ESTABLISHED)
		return;
	c->pbroken = 1;
	sd_conn_ref(c);
	c->pbroken_next = broken_head;
	broken_head = c;
}

static void break_now(void)
{
	while (broken_head) {
		struct doca_rdma_connection *c = broken_head;

		broken_head = c->pbroken_next;
		c->pbroken_next = NULL;
		if (c->state == SDC_ESTABLISHED) {
			sd_conn_set_why(c, "an operation failed (the connection breaks, as RC does)");
			sd_conn_fail(c, SD_FAIL_LOST);
		}
		sd_conn_unref(c);
	}
}

/* A provider connection whose wire-up failed while nothing went through it:
 * the usual cause is a peer that is leaving (its process exited after its
 * last native operation; UCX then cannot reach its shared memory), which the
 * native link reports within moments, letting native operations in flight
 * finish as they would. The connection breaks only if it is still up after a
 * grace period; meanwhile one-sided operations wait (never silently on the
 * native link). */
#define PLOST_GRACE_NS (500ull * 1000000ull)
static struct doca_rdma_connection *plost_head;

static void plost_later(struct doca_rdma_connection *c, const char *why)
{
	if (c->plost_ns)
		return;
	c->plost_ns = sd_now_ns() + PLOST_GRACE_NS;
	snprintf(c->plost_why, sizeof(c->plost_why), "%s", why);
	sd_conn_ref(c);
	c->plost_next = plost_head;
	plost_head = c;
}

static void conn_lost(struct doca_rdma_connection *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void plost_sweep(void)
{
	uint64_t now = sd_now_ns();

	for (struct doca_rdma_connection **pp = &plost_head; *pp;) {
		struct doca_rdma_connection *c = *pp;

		if (c->state == SDC_ESTABLISHED && now < c->plost_ns) {
			pp = &c->plost_next;
			continue;
		}
		*pp = c->plost_next;
		c->plost_next = NULL;
		if (c->state == SDC_ESTABLISHED)
			conn_lost(c, "provider %s: %s", P.ops->name, c->plost_why);
		sd_conn_unref(c);
	}
}

static void pm_flush(void);
static uint64_t pm_timers(uint64_t now);

static int prov_progress(void)
{
	int n = 0;

	P.kicked = P.kick_due = 0; /* progressed here; a later submit kicks the engine again */
	if (P.p) {
		P.in_progress++;
		n = P.ops->progress(P.p);
		P.in_progress--;
		pm_flush();
		pm_timers(sd_now_ns());
	}
	break_now();
	if (plost_head)
		plost_sweep();
	if (plinger_head)
		plinger_sweep();
	return n;
}

/* Progress the provider, then (arm) arm its fd for a sleep. 1: progress again before sleeping. */
static int prov_turn(int *sleep_ms, int arm)
{
	uint64_t now, due;

	P.kicked = P.kick_due = 0; /* what was submitted so far is progressed here; a later submit kicks again */
	if (!P.p)
		return 0;
	P.in_progress++;
	P.ops->progress(P.p);
	P.in_progress--;
	pm_flush();
	if (broken_head)
		return 1; /* progress again first: it breaks them */
	if (!arm)
		return 0;
	if (P.ops->arm(P.p, sleep_ms) != DOCA_SUCCESS)
		return 1;
	now = sd_now_ns();
	due = sd_min_deadline(pm_timers(now), plinger_next_ns());
	if (due) { /* a parked message's budget, a message's answer: wake for it */
		int ms = due <= now ? 0 : (int)((due - now + 999999) / 1000000);

		if (*sleep_ms < 0 || ms < *sleep_ms)
			*sleep_ms = ms;
	}
	return 0;
}

static int prov_arm(int *sleep_ms)
{
	return prov_turn(sleep_ms, 1);
}

/* The engine stops: what closed connections still send (acknowledgements of
 * receives this side completed, BYEs) must reach the peers before the
 * process may leave, as an RC NIC answers before the receive completes. */
static int prov_drain(void)
{
	prov_progress();
	/* a UCX endpoint still in its wire-up counts here until it is over (ucx_conn.c, close_after_flush):
	 * leaving before can abort the peer's UCX (wireup_ep.c assertion) */
	return P.p && P.ops->closing ? P.ops->closing(P.p) : 0;
}

static int prov_polled(void)
{
	return P.p && P.polled;
}

static int prov_spin_unarmed(void)
{
	return P.p && P.spin_unarmed;
}

static uint64_t prov_idle_since(void)
{
	return P.nout ? 0 : P.out_end_ns ? P.out_end_ns : 1;
}

static void prov_live(uint64_t serve_until_ns, uint64_t self_until_ns)
{
	if (P.p && P.ops->live)
		P.ops->live(P.p, serve_until_ns, self_until_ns);
}

static const struct sd_eng_hook prov_hook = {.progress = prov_progress, .arm = prov_arm, .drain = prov_drain,
					     .polled = prov_polled, .spin_unarmed = prov_spin_unarmed,
					     .idle_since = prov_idle_since,
					     .live = prov_live};

static void on_ep(struct sd_ep *ep, uint32_t events)
{
	(void)ep;
	(void)events;
	prov_progress();
}

static void op_done(void *arg, void *op_ctx, doca_error_t status);
static enum sd_prov_rx_answer on_rx(void *arg, struct sd_prov_conn *conn, void *conn_ctx, const struct sd_prov_rx *rx,
				    struct sd_prov_iov *dst, int *ndst, void **rx_ctx);
static void on_rx_done(void *arg, void *rx_ctx, doca_error_t status, size_t len);
static void on_conn_event(void *arg, struct sd_prov_conn *conn, void *conn_ctx, const struct sd_prov_conn_event *ev);
static void on_conn_request(void *arg, struct sd_prov_listener *l, void *listener_ctx, struct sd_prov_conn *conn,
			    const void *priv, size_t priv_len, const struct sockaddr *peer, socklen_t peer_len);

static const struct sd_prov_cbs cbs = {
	.op_done = op_done,
	.rx = on_rx,
	.rx_done = on_rx_done,
	.conn_event = on_conn_event,
	.conn_request = on_conn_request,
};

/* Open the instance (once). It stays open for the life of the process: UCX
 * 1.13 aborts the process when a worker is destroyed while one of its
 * endpoints is still in its wire-up (ucp_worker_destroy -> "got REP
 * message"), which a peer can cause at any time; the engine keeps
 * progressing it while it runs. */
static doca_error_t prov_open(void)
{
	decide();
	if (P.err != DOCA_SUCCESS) {
		SD_ERR("%s", P.why);
		return P.err;
	}
	if (!P.ops)
		return DOCA_SUCCESS;
	if (!P.p) {
		struct sd_prov_open_params op = {.cbs = &cbs, .timeout_ms = (uint32_t)(sd_eng_timeout_ns() / 1000000ull),
						  .flags = sd_eng_spin_ns() ? SD_PROV_OPEN_SPINS : 0};
		struct sd_prov_why w = {{0}};
		doca_error_t rc = P.ops->open(&op, &P.p, &w);

		if (rc != DOCA_SUCCESS) {
			SD_ERR("SOFTDOCA_PROVIDER=%s: the provider did not open: %s", P.ops->name, w.msg);
			P.p = NULL;
			return rc;
		}
		{
			struct sd_prov_caps caps;

			memset(&caps, 0, sizeof(caps));
			P.ops->query_caps(P.p, &caps);
			/* the bridge connects out of band (addresses over the native link) and sleeps on the fd */
			rc = sd_prov_caps_check(P.ops, &caps, SD_PROV_CAP_OOB | SD_PROV_CAP_FD, &w);
			if (rc != DOCA_SUCCESS) {
				/* decided for the process, as a provider that cannot start: every later start says so */
				P.err = rc;
				snprintf(P.why, sizeof(P.why), "SOFTDOCA_PROVIDER=%s cannot serve softdoca: %s", P.ops->name,
					 w.msg);
				SD_ERR("%s", P.why);
				if (P.ops->close(P.p) != DOCA_SUCCESS)
					SD_WARN("SOFTDOCA_PROVIDER=%s: closing it failed", P.ops->name);
				P.p = NULL;
				P.ops = NULL;
				return rc;
			}
			P.max_iov = caps.max_iov;
			P.polled = !!(caps.flags & SD_PROV_CAP_POLLED);
			P.spin_unarmed = !!(caps.flags & SD_PROV_CAP_SPIN_UNARMED);
			P.arm_signals = !!(caps.flags & SD_PROV_CAP_ARM_SIGNALS);
			/* messages through the provider unless SOFTDOCA_PROVIDER_MESSAGES=0, or unset
			 * where the provider is polled: each message and its answer would wait for
			 * the peer's polling (ofi shm without its doorbell: ~1 ms; docs/providers.md) */
			P.no_msg = P.msg_env == 0 || (P.msg_env < 0 && (caps.flags & SD_PROV_CAP_POLLED));
			if (P.msg_env == 1 && (caps.flags & SD_PROV_CAP_POLLED))
				SD_WARN("SOFTDOCA_PROVIDER_MESSAGES=1 on a polled provider (%s): every message waits for "
					"the peer's polling", caps.transport);
		}
		P.ep.kind = 0;
		P.ep.on_event = on_ep;
		if (P.ops->get_fd(P.p, &P.ep.fd) != DOCA_SUCCESS)
			P.ep.fd = -1;
		P.ep_added = 0;
		sd_eng_set_hook(&prov_hook, P.ep.fd >= 0 ? &P.ep : NULL);
	}
	return DOCA_SUCCESS;
}

doca_error_t sd_prov_rdma_start(void)
{
	return prov_open();
}

/* ---------------------------------------------------------------- memory */
static void lock_engine(int *took)
{
	*took = !sd_eng_held();
	if (*took)
		sd_eng_lock();
}

static void unlock_engine(int took)
{
	if (took)
		sd_eng_unlock();
}

doca_error_t sd_prov_mmap_publish(struct doca_mmap *m)
{
	doca_error_t rc;
	int took;

	decide();
	if (!P.ops && P.err == DOCA_SUCCESS)
		return DOCA_SUCCESS;
	lock_engine(&took);
	rc = prov_open();
	if (rc == DOCA_SUCCESS && P.p) {
		void *blob = NULL;
		size_t blen = 0;
		struct sd_prov_mr *mr = NULL;

		rc = P.ops->reg_mem(P.p, m->addr, m->len, m->permissions, &mr, &blob, &blen);
		if (rc != DOCA_SUCCESS) {
			SD_ERR("doca_mmap_start: provider %s could not register %zu bytes: %s", P.ops->name, m->len,
			       sd_prov_strerror(rc));
		} else {
			m->prov_mr = mr;
			m->prov_blob = blob;
			m->prov_blob_len = blen;
			m->prov_revoking = 0;
		}
	}
	unlock_engine(took);
	return rc;
}

static void revoke_notify(struct doca_mmap *m, int took);

void sd_prov_mmap_revoke(struct doca_mmap *m)
{
	int took;

	if (!m->prov_mr && !m->prov_rkey) {
		free(m->prov_blob);
		m->prov_blob = NULL;
		m->prov_blob_len = 0;
		return;
	}
	lock_engine(&took);
	m->prov_revoking = 1; /* no PROV_CHECK confirms it from now on */
	if (m->prov_mr && P.p && m->exported && !m->remote)
		revoke_notify(m, took);
	if (m->prov_mr && P.p) {
		doca_error_t rc = P.ops->dereg_mem(P.p, m->prov_mr);

		if (rc != DOCA_SUCCESS)
			SD_WARN("doca_mmap_stop: provider %s could not deregister the map: %s", P.ops->name,
				sd_prov_strerror(rc));
		m->prov_mr = NULL;
	}
	if (m->prov_rkey && P.p) {
		P.ops->rkey_release(P.p, m->prov_rkey);
		m->prov_rkey = NULL;
	}
	unlock_engine(took);
	free(m->prov_blob);
	m->prov_blob = NULL;
	m->prov_blob_len = 0;
}

/* The provider section of an export after the native descriptor: checked
 * here, kept as it is, imported at the first operation. */
doca_error_t sd_prov_mmap_import(struct doca_mmap *m, const uint8_t *tail, size_t len)
{
	char named[SD_PROV_NAME_LEN + 1];
	struct sd_prov_why w = {{0}};
	const uint8_t *body;
	size_t body_len;
	doca_error_t rc;

	decide();
	sd_prov_blob_provider(tail, len, named);
	if (!named[0])
		return DOCA_ERROR_INVALID_VALUE; /* not a provider section: a malformed descriptor */
	if (!P.ops) {
		SD_ERR("doca_mmap_create_from_export: the descriptor carries a key of provider '%s', this process "
		       "uses provider native (set SOFTDOCA_PROVIDER=%s on both sides, or export from a native process)",
		       named[0] ? named : "?", named[0] ? named : "?");
		return DOCA_ERROR_NOT_SUPPORTED;
	}
	rc = sd_prov_blob_check(tail, len, P.ops->name, SD_PROV_BLOB_RKEY, &body, &body_len, &w);
	if (rc != DOCA_SUCCESS) {
		SD_ERR("doca_mmap_create_from_export: %s", w.msg);
		return rc;
	}
	m->prov_blob = malloc(len);
	if (!m->prov_blob)
		return DOCA_ERROR_NO_MEMORY;
	memcpy(m->prov_blob, tail, len);
	m->prov_blob_len = len;
	return DOCA_SUCCESS;
}

/* The imported key of a remote map (NULL: none, go native). */
static struct sd_prov_rkey *rkey_of(struct doca_mmap *m)
{
	if (m->prov_rkey || !m->prov_blob || !m->remote || !P.p)
		return m->prov_rkey;
	{
		struct sd_prov_why w = {{0}};

		if (P.ops->rkey_import(P.p, m->prov_blob, m->prov_blob_len, &m->prov_rkey, NULL, NULL, NULL, &w) !=
		    DOCA_SUCCESS) {
			SD_WARN("rdma: provider %s: remote key not usable, operations on this map use the native link: %s",
				P.ops->name, w.msg);
			free(m->prov_blob);
			m->prov_blob = NULL;
			m->prov_blob_len = 0;
			m->prov_rkey = NULL;
			return NULL;
		}
	}
	return m->prov_rkey;
}

/* ---------------------------------------------------------------- connections */
#define PA_MAGIC 0x41504453u  /* "SDPA": magic u32, context permissions u32, process instance u64 */
#define PA_HDR 16
#define PA_MAGIC2 0x32504453u /* "SDP2": the same, then flags u32 (PA_F_*), RNR budget ms u32 */
#define PA_HDR2 24
#define PA_F_MSG 1u           /* this side takes two-sided messages through the provider */
#define PA_F_REVOKE 2u        /* this side knows PROV_REVOKE (and answers it) */
#define PA_F_CHECK 4u         /* this side answers PROV_CHECK */

static void conn_lost(struct doca_rdma_connection *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void conn_lost(struct doca_rdma_connection *c, const char *fmt, ...)
{
	char why[SD_DETAIL_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	SD_WARN("rdma: connection %u: %s", c->id, why);
	sd_conn_set_why(c, why);
	c->pbroken = 1; /* broken here: what is in flight fails now (no linger) */
	sd_conn_fail(c, SD_FAIL_LOST);
}

void sd_prov_conn_start(struct doca_rdma_connection *c)
{
	void *blob = NULL;
	size_t len = 0;
	doca_error_t rc;

	if (!P.p || c->pconn || !c->link)
		return;
	rc = P.ops->conn_create(P.p, c, &c->pconn);
	if (rc == DOCA_SUCCESS)
		rc = P.ops->conn_export(c->pconn, &blob, &len);
	if (rc == DOCA_SUCCESS) {
		/* PROV_ADDR: magic, this context's permissions (checked by the peer before its
		 * operations leave, as the target would), then the provider's address blob */
		uint8_t *msg = malloc(PA_HDR2 + len);

		if (!msg) {
			rc = DOCA_ERROR_NO_MEMORY;
		} else {
			sd_put_le32(msg, PA_MAGIC2);
			sd_put_le32(msg + 4, c->rdma->permissions);
			sd_put_le64(msg + 8, sd_instance_id());
			sd_put_le32(msg + 16, (P.no_msg ? 0 : PA_F_MSG) | PA_F_REVOKE | PA_F_CHECK);
			sd_put_le32(msg + 20, sd_rnr_budget_ms(c->rdma));
			memcpy(msg + PA_HDR2, blob, len);
			if (sd_conn_send_ctrl(c->link, SD_OP_PROV_ADDR, msg, PA_HDR2 + len) != 0)
				rc = DOCA_ERROR_NO_MEMORY;
			free(msg);
		}
	}
	free(blob);
	if (rc != DOCA_SUCCESS) {
		conn_lost(c, "provider %s: cannot set up the connection: %s", P.ops->name, sd_prov_strerror(rc));
		return;
	}
	sd_link_flush(c->link);
}

int sd_prov_on_addr(struct doca_rdma_connection *c, const void *blob, size_t len)
{
	struct sd_prov_why w = {{0}};
	const uint8_t *b = blob;
	size_t hl = PA_HDR;
	doca_error_t rc;

	if (!P.p) {
		SD_WARN("rdma: connection %u: the peer uses a provider, this process uses native (SOFTDOCA_PROVIDER)",
			c->id);
		return -1;
	}
	if (!c->pconn)
		sd_prov_conn_start(c);
	if (len > PA_HDR && sd_get_le32(b) == PA_MAGIC2)
		hl = PA_HDR2;
	else if (len <= PA_HDR || sd_get_le32(b) != PA_MAGIC) /* an older peer's has no flags: messages stay native */
		return -1;
	if (!c->pconn || c->paddr_seen || len <= hl)
		return -1;
	c->paddr_seen = 1;
	c->peer_perms = sd_get_le32(b + 4);
	c->pinstance = sd_get_le64(b + 8);
	if (hl == PA_HDR2) {
		c->pmsg = !P.no_msg && (sd_get_le32(b + 16) & PA_F_MSG);
		c->prevoke = (sd_get_le32(b + 16) & PA_F_REVOKE) != 0;
		c->pcheck = (sd_get_le32(b + 16) & PA_F_CHECK) != 0;
		c->peer_budget_ms = sd_get_le32(b + 20);
	}
	rc = P.ops->conn_connect(c->pconn, b + hl, len - hl, &w);
	if (rc == DOCA_ERROR_CONNECTION_ABORTED) {
		/* unreachable: usually a peer that left right after its last native
		 * operation, whose answer the native link still brings (plost_later) */
		char why[sizeof(c->plost_why)];

		snprintf(why, sizeof(why), "cannot connect to the peer's address: %s", w.msg);
		P.ops->conn_close(c->pconn);
		c->pconn = NULL;
		plost_later(c, why);
	} else if (rc != DOCA_SUCCESS) {
		conn_lost(c, "provider %s: cannot connect to the peer's address: %s", P.ops->name, w.msg);
	}
	return 0;
}

static void fail_ops(struct doca_rdma_connection *c, doca_error_t status);

/* The native link ended before the provider connection (linger): the
 * peer's answers already on their way there (acknowledgements of its
 * receives, read and atomic responses) complete their operations, as an RC
 * NIC completes what its peer acknowledged before a disconnect; the rest
 * fails once the provider connection ends too, or after at most 2 s. */
#define PLINGER_MAX_NS (2000ull * 1000000ull)

static void plinger_sweep(void)
{
	uint64_t now = sd_now_ns();

	for (struct doca_rdma_connection *c = plinger_head, *nx; c; c = nx) {
		nx = c->plinger_next;
		if (!c->ptoks || !c->pconn || now >= c->plinger_ns) {
			sd_prov_conn_end(c, c->plinger_status, 0); /* unlinks c */
			nx = plinger_head; /* the list changed: again from its head (it is short) */
		}
	}
}

static uint64_t plinger_next_ns(void)
{
	uint64_t next = 0;

	for (struct doca_rdma_connection *c = plinger_head; c; c = c->plinger_next)
		next = sd_min_deadline(next, c->plinger_ns);
	return next;
}

static void fail_held(struct doca_rdma_connection *c, doca_error_t status);

void sd_prov_conn_end(struct doca_rdma_connection *c, doca_error_t status, int linger)
{
	if (linger && !c->plinger_ns && !c->pbroken && c->pconn && c->pready && c->ptoks && P.p) {
		uint64_t t = sd_eng_timeout_ns();

		c->plinger_ns = sd_now_ns() + (t < PLINGER_MAX_NS ? t : PLINGER_MAX_NS);
		c->plinger_status = status;
		fail_held(c, status); /* never sent: nothing can answer them */
		sd_pm_conn_end(c, status); /* nothing more is received or acknowledged here */
		sd_conn_ref(c);
		c->plinger_next = plinger_head;
		plinger_head = c;
		return;
	}
	if (c->plinger_ns) { /* now, not later: a context destroyed right after frees its connections */
		SD_CONN_LIST_REMOVE(&plinger_head, c, plinger_next);
		c->plinger_ns = 0;
		sd_conn_unref(c);
	}
	if (c->pconn && P.p) {
		/* closed now, also in the middle of its wire-up: the provider's close waits for that to be
		 * over where its library needs it (ucx: UCX 1.13 aborts on an endpoint closed before the
		 * wire-up's reply, so ucx_conn.c closes it after a flush, which UCP holds until then). The
		 * bridge deferred such closes by the engine timeout until 2026-12-07: in a connect / close
		 * loop (test_rdma.c's cycles) 300-1,000 were open at once, and the freed heap of that peak
		 * stayed in RSS (ucx over tcp +0.3-1.0 kB per cycle). */
		P.ops->conn_close(c->pconn);
		c->pconn = NULL;
	}
	c->pready = 0;
	fail_ops(c, status);
	sd_pm_conn_end(c, status);
	if (c->pm_tx_listed) { /* a context destroyed right after frees its connections whatever their references */
		SD_CONN_LIST_REMOVE(&pm_tx_list, c, pm_tx_next);
		c->pm_tx_listed = 0;
		sd_conn_unref(c);
	}
}

static void on_conn_event(void *arg, struct sd_prov_conn *conn, void *conn_ctx, const struct sd_prov_conn_event *ev)
{
	struct doca_rdma_connection *c = conn_ctx;
	(void)arg;
	if (!c || c->pconn != conn)
		return;
	switch (ev->ev) {
	case SD_PROV_EV_ESTABLISHED:
		c->pready = 1;
		if (P.ops->conn_transport)
			P.ops->conn_transport(conn, c->ptransport, sizeof(c->ptransport));
		if (!P.arm_signals) { /* the transports in use decide it */
			struct sd_prov_caps caps;

			memset(&caps, 0, sizeof(caps));
			P.ops->query_caps(P.p, &caps);
			P.arm_signals = !!(caps.flags & SD_PROV_CAP_ARM_SIGNALS);
		}
		break;
	case SD_PROV_EV_REJECTED:
	case SD_PROV_EV_FAILED:
	case SD_PROV_EV_DISCONNECTED: {
		/* the peer closed it (the native link says why, or closes with it) or it broke (fatal here) */
		int idle = !c->pready && !c->ptoks && !c->prov_out;
		const char *why = ev->why && ev->why[0] ? ev->why : "connection lost";

		c->pready = 0;
		P.ops->conn_close(conn);
		c->pconn = NULL;
		if (ev->ev == SD_PROV_EV_DISCONNECTED || c->state != SDC_ESTABLISHED) {
			fail_ops(c, DOCA_ERROR_CONNECTION_RESET);
		} else if (idle) {
			plost_later(c, why);
		} else {
			fail_ops(c, DOCA_ERROR_CONNECTION_RESET);
			conn_lost(c, "provider %s: %s", P.ops->name, why);
		}
		break;
	}
	}
}

static void on_conn_request(void *arg, struct sd_prov_listener *l, void *listener_ctx, struct sd_prov_conn *conn,
			    const void *priv, size_t priv_len, const struct sockaddr *peer, socklen_t peer_len)
{
	/* the bridge never listens through the provider (RDMA CM stays on the native link) */
	(void)arg;
	(void)l;
	(void)listener_ctx;
	(void)priv;
	(void)priv_len;
	(void)peer;
	(void)peer_len;
	P.ops->reject(conn, NULL, 0);
}

static void on_ack(struct doca_rdma_connection *c, const struct sd_pm_hdr *h);

static enum sd_prov_rx_answer on_rx(void *arg, struct sd_prov_conn *conn, void *conn_ctx, const struct sd_prov_rx *rx,
				    struct sd_prov_iov *dst, int *ndst, void **rx_ctx)
{
	struct doca_rdma_connection *c = conn_ctx;
	struct sd_pm_hdr h;
	enum sd_prov_rx_answer a;
	int brk = 0;

	(void)arg;
	*ndst = 0;
	if (!c || c->pconn != conn || (c->state != SDC_ESTABLISHED && !c->plinger_ns))
		return SD_PROV_RX_TAKEN; /* its connection is going: nothing takes it any more */
	if (!c->pmsg) { /* this side said messages travel on the native link */
		SD_WARN("rdma: connection %u: unexpected provider message dropped", c->id);
		return SD_PROV_RX_TAKEN;
	}
	if (rx->data && rx->len >= SD_PM_HDR) {
		sd_pm_decode(rx->data, &h);
		if (h.type == SD_PM_ACK) {
			if (rx->len == SD_PM_HDR && rx->kind == SD_PROV_RX_SEND) {
				on_ack(c, &h);
				return SD_PROV_RX_TAKEN;
			}
			h.type = 0; /* malformed: refused below */
		}
	}
	if (c->plinger_ns)
		return SD_PROV_RX_TAKEN; /* lingering (sd_prov_conn_end): only the peer's answers count */
	a = sd_pm_rx(c, rx->data && rx->len >= SD_PM_HDR ? &h : NULL, rx, dst, ndst, rx_ctx, &brk);
	if (brk)
		break_later(c);
	return a;
}

static void on_rx_done(void *arg, void *rx_ctx, doca_error_t status, size_t len)
{
	struct doca_rdma_connection *c = sd_pm_rx_done(rx_ctx, status, len);

	(void)arg;
	if (c) {
		break_later(c);
		sd_conn_unref(c);
	}
}

/* ---------------------------------------------------------------- operations */
/* The provider's handle of an operation. Once the connection ends the task
 * is failed at once and the token is dead: a report that comes later only
 * frees it, and nothing the provider writes afterwards reaches the task.
 * A message (PK_MSG) completes on its op_done and on the peer's
 * acknowledgement, whichever comes last; it waits for the latter in the
 * connection's pm_head list. PK_SUB: the write of a write with immediate
 * (no task of its own); PK_ACK: an acknowledgement being sent (no connection);
 * PK_REVOKE: the flush behind which a revocation is answered (res: its sequence). */
enum { PK_OP = 0, PK_MSG, PK_SUB, PK_ACK, PK_REVOKE };

struct ptok {
	struct ptok *prev, *next;
	struct sd_rtask *t;
	struct doca_rdma_connection *c;
	uint64_t res;
	int dead;
	uint8_t kind, op_seen, acked, linked;
	doca_error_t st_op, st_ack;
	uint64_t info;                 /* the acknowledgement's (TOO_BIG: the receive's room) */
	uint32_t seq;
	uint64_t len;
	struct ptok *mnext;
	uint8_t hdr[SD_PM_HDR];
};

static struct ptok *tok_new(struct doca_rdma_connection *c, struct sd_rtask *t, uint8_t kind)
{
	struct ptok *k = calloc(1, sizeof(*k));

	if (!k)
		return NULL;
	k->t = t;
	k->kind = kind;
	if (kind == PK_ACK)
		return k;
	k->c = c;
	k->linked = 1;
	k->next = c->ptoks;
	if (c->ptoks)
		c->ptoks->prev = k;
	c->ptoks = k;
	c->prov_out++;
	P.nout++;
	return k;
}

static void tok_unlink(struct ptok *k)
{
	struct doca_rdma_connection *c = k->c;

	if (!k->linked)
		return;
	if (k->prev)
		k->prev->next = k->next;
	else
		c->ptoks = k->next;
	if (k->next)
		k->next->prev = k->prev;
	k->prev = k->next = NULL;
	k->linked = 0;
	c->prov_out--;
	if (--P.nout == 0)
		P.out_end_ns = sd_now_ns();
}

static void release_held(struct doca_rdma_connection *c);

static const char *task_name(const struct sd_rtask *t)
{
	switch (t->type) {
	case SD_T_WRITE: return "write";
	case SD_T_READ: return "read";
	case SD_T_SEND: return "send";
	case SD_T_SEND_IMM: return "send with immediate";
	case SD_T_WRITE_IMM: return "write with immediate";
	default: return "atomic";
	}
}

static void finish(struct sd_rtask *t, doca_error_t status, uint64_t res)
{
	if (status == DOCA_SUCCESS) {
		if (t->type == SD_T_READ) {
			sd_buf_tail_commit(t->dst, t->xfer_len);
			t->res_len = (uint32_t)t->xfer_len;
		} else if (t->type == SD_T_CMP_SWP || t->type == SD_T_FETCH_ADD) {
			struct doca_buf *res_buf = t->result;

			memcpy(res_buf->data + res_buf->data_len, &res, 8);
			res_buf->data_len += 8;
		}
		sd_rtask_complete(t, DOCA_SUCCESS);
	} else {
		sd_rtask_fail(t, status, "provider %s: %s failed: %s", P.ops ? P.ops->name : "?", task_name(t),
			      sd_prov_strerror(status));
	}
}

/* A message's task, once both its op_done and the peer's answer came. */
static void msg_settle(struct ptok *k)
{
	struct doca_rdma_connection *c = k->c;
	struct sd_rtask *t = k->t;

	/* The peer's answer settles it, even before the local completion: a
	 * message it acknowledged arrived, as an RC send completes on the ACK
	 * (the provider may report its op after the peer's answer and even after
	 * the peer's close; the header must live until then). */
	if (!k->acked)
		return;
	tok_unlink(k);
	k->t = NULL;
	if (t && k->op_seen && k->st_op != DOCA_SUCCESS) {
		finish(t, k->st_op, 0);
	} else if (t && k->st_ack == DOCA_ERROR_TIME_OUT) {
		sd_rtask_fail(t, DOCA_ERROR_TIME_OUT,
			      "RNR retry exceeded: the peer had no receive posted within the budget (%u ms)",
			      sd_rnr_budget_ms(t->rdma));
		SD_WARN("rdma: connection %u: peer reported RNR retry exceeded, breaking the connection", c->id);
		sd_conn_set_why(c, "RNR retry exceeded on an earlier task (no receive posted at the peer)");
		break_later(c);
	} else if (t && k->st_ack == DOCA_ERROR_TOO_BIG) {
		struct sd_prov_nak nak = {.code = SD_PROV_NAK_RECV_ROOM, .len = k->info};
		char d[SD_DETAIL_LEN];

		sd_nak_describe(d, sizeof(d), 1, t->type == SD_T_SEND ? SD_OP_SEND : SD_OP_SEND_IMM, 0, t->xfer_len,
				&nak);
		sd_rtask_fail(t, DOCA_ERROR_TOO_BIG, "%s", d);
	} else if (t && k->st_ack != DOCA_SUCCESS) {
		sd_rtask_fail(t, k->st_ack, "the peer refused the message: %s", sd_prov_strerror(k->st_ack));
		break_later(c);
	} else if (t) {
		sd_rtask_complete(t, DOCA_SUCCESS);
	}
	if (k->op_seen)
		free(k);
	else
		k->dead = 1; /* op_done frees it */
}

/* ---------------------------------------------------------------- revocations between hosts */
/*
 * Where the fabric does not refuse a stopped map's old key (UCX's tcp, shared
 * memory and cma, libfabric's tcp: docs/providers.md), the target tells its
 * peers: doca_mmap_stop of an exported map sends PROV_REVOKE (its id) on the
 * native link of every connection with a provider to a peer that knows it,
 * and waits (bounded: revoke_wait_ns) until each answered or is gone. A
 * peer records the id, flushes its provider connection (what it had in flight
 * to the map is then complete at the target) and answers; from then on its
 * operations on that map take the native link, where the target refuses them
 * as a stopped map (NOT_PERMITTED, the connection breaks), as under native.
 * The ids are kept per peer process (struct revset), each in an array that
 * grows to SD_PREVOKED_MAX, then a ring: a descriptor of a map revoked longer
 * ago than that, or by a process forgotten (SD_REVSETS_MAX), is not caught
 * (the requester's descriptor checks still hold).
 */
#define SD_PREVOKED_MAX 4096u

static void revoke_answer(struct doca_rdma_connection *c, uint64_t seq)
{
	struct sd_hdr h = {.opcode = SD_OP_PROV_REVOKE_ACK, .req_id = seq};

	if (c->link && sd_link_send_ctrl(c->link, &h, NULL, 0) == 0)
		sd_link_flush(c->link);
}

/* The maps one peer process (its instance) revoked: shared by every connection to it, so a connection
 * made later (a reconnect after the first one broke) still refuses a descriptor kept from before. At most
 * SD_REVSETS_MAX processes are remembered (the least recently revoking one goes first). */
#define SD_REVSETS_MAX 64u

/* A descriptor of a peer's map as this process asked its target, on one connection, to confirm it (PROV_CHECK). */
enum { CHK_PENDING = 0, CHK_OK = 1, CHK_BAD = 2 };

struct pcheck {
	uint64_t map_id, lo, len;
	uint8_t key[SD_KEY_LEN];
	uint32_t perms;
	int state;
	int again;                     /* pending: the target said "not yet"; the native link until asked again */
	uint64_t seq;                  /* the request's (P.check_seq) */
	uint64_t sent_ns;              /* pending: when asked (0: ask at the next operation) */
};

struct revset {
	struct revset *next;
	uint64_t instance;
	uint64_t *ids;                 /* grown to SD_PREVOKED_MAX, then a ring (at: the oldest) */
	uint32_t n, cap, at;
	uint64_t gen;                  /* its last revocation (P.revoke_gens: unique in the process) */
};

/* A revocation of instance's map map_id (all: of every map) is being forgotten (the bounds above): the
 * confirmations its connections hold for it go too, or a stale descriptor could take the provider again;
 * the maps' caches are dropped (P.chk_epoch) and the next operation asks again (the target refuses a
 * stopped map). */
static void forget_confirmations(uint64_t instance, int all, uint64_t map_id)
{
	P.chk_epoch++;
	for (struct sd_link_group *g = sd_eng_groups(); g; g = g->eng_next)
		for (struct doca_rdma_connection *c = sd_group_rdma(g)->conns; c; c = c->next) {
			struct pcheck *chk = c->pchk;

			if (c->pinstance != instance)
				continue;
			for (uint32_t i = 0; i < c->nchk; i++)
				if (chk[i].state == CHK_OK && (all || chk[i].map_id == map_id))
					memset(&chk[i], 0, sizeof(chk[i])); /* CHK_PENDING, never sent: asked again */
		}
}

static struct revset *revsets;
static uint32_t nrevsets;
static uint64_t revsets_ver;       /* bumped when a set comes or goes (connections cache their lookup) */

/* The set of a peer instance, made (evicting the least recently revoking) when create. Engine lock held. */
static struct revset *revset_of(uint64_t instance, int create)
{
	struct revset *s, **pp, **oldest = NULL;

	for (s = revsets; s; s = s->next)
		if (s->instance == instance)
			return s;
	if (!create)
		return NULL;
	if (nrevsets >= SD_REVSETS_MAX) {
		for (pp = &revsets; *pp; pp = &(*pp)->next)
			if (!oldest || (*pp)->gen < (*oldest)->gen)
				oldest = pp;
		s = *oldest;
		*oldest = s->next;
		forget_confirmations(s->instance, 1, 0);
		free(s->ids);
		free(s);
		nrevsets--;
		revsets_ver++; /* connections cached it */
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->instance = instance;
	s->next = revsets;
	revsets = s;
	nrevsets++;
	revsets_ver++;
	return s;
}

/* The set of c's peer, looked up once per change of the sets (NULL: it revoked nothing we remember). */
static struct revset *conn_revset(struct doca_rdma_connection *c)
{
	if (c->prevset_ver != revsets_ver + 1) {
		c->prevset = revset_of(c->pinstance, 0);
		c->prevset_ver = revsets_ver + 1;
	}
	return c->prevset;
}

static int revset_add(struct revset *s, uint64_t map_id)
{
	if (s->n == s->cap && s->cap < SD_PREVOKED_MAX) {
		uint32_t cap = s->cap ? 2 * s->cap : 16;
		uint64_t *ids = realloc(s->ids, cap * sizeof(*ids));

		if (!ids)
			return -1;
		s->ids = ids;
		s->cap = cap;
	}
	if (s->n < s->cap) {
		s->ids[s->n++] = map_id;
	} else { /* full: the oldest goes */
		forget_confirmations(s->instance, 0, s->ids[s->at]);
		s->ids[s->at] = map_id;
		s->at = (s->at + 1) % s->cap;
	}
	s->gen = ++P.revoke_gens;
	return 0;
}

int sd_prov_on_revoke(struct doca_rdma_connection *c, const struct sd_hdr *h)
{
	struct revset *s = revset_of(c->pinstance, 1);
	struct ptok *k;

	if (!s || revset_add(s, h->map_id) != 0)
		return -1; /* cannot keep it: the connection breaks, nothing reaches the map */
	if (!P.p || !c->pconn || !c->pready || c->pbroken || !c->ptoks) {
		revoke_answer(c, h->req_id); /* nothing of ours in flight through the provider */
		return 0;
	}
	k = tok_new(c, NULL, PK_REVOKE);
	if (!k)
		return -1;
	k->res = h->req_id;
	if (P.ops->flush(c->pconn, k) != DOCA_SUCCESS) {
		tok_unlink(k);
		free(k);
		return -1; /* no flush, no answer: the connection breaks and the target stops waiting */
	}
	return 0;
}

/* An answer covers every revocation sent before it on the connection (its flush came after them all),
 * so one may overtake an older one; an answer to a revocation never sent is a protocol error. */
int sd_prov_on_revoke_ack(struct doca_rdma_connection *c, const struct sd_hdr *h)
{
	if (h->req_id > c->revoke_sent)
		return -1;
	if (h->req_id > c->revoke_acked)
		c->revoke_acked = h->req_id;
	return 0;
}

/* Whether c's peer revoked remote map m (engine lock held). A map found live is remembered with the
 * set's last revocation then, so the ids are scanned again only after a new one. */
static int peer_revoked(struct doca_rdma_connection *c, struct doca_mmap *m)
{
	const struct revset *s = conn_revset(c);

	if (!s || (m->prov_rset == (const void *)s && m->prov_rgen == s->gen))
		return 0;
	for (uint32_t i = 0; i < s->n; i++)
		if (s->ids[i] == m->id)
			return 1;
	m->prov_rset = s;
	m->prov_rgen = s->gen;
	return 0;
}

/*
 * Confirmation of a descriptor between hosts. Over a fabric that does not
 * check an operation against the target's live registrations (UCX's tcp and
 * shared memory, libfabric's tcp) and with no same-host table mapped, the
 * requester's checks against the descriptor were all that stood between a
 * stale or forged descriptor and the target's memory: a process that
 * connected after the map stopped (the revocation notice never reached it),
 * or a descriptor whose range or key was edited. So before the first
 * operation on a descriptor takes the provider over a connection, the
 * requester asks the target on that connection (PROV_CHECK on its native
 * link: map id, key, range and access as the descriptor says them). Until the
 * answer, the connection's operations wait in its hold queue (one round trip,
 * in order); a confirmation lets them take the provider; a refusal sends
 * those on that descriptor to the native link, where the target refuses them
 * with its reason (NOT_PERMITTED, the connection breaks), as under native.
 * The target confirms only a started map, not being stopped, that grants all
 * the descriptor claims, and only to a peer that its later stop will notify
 * on this connection (PROV_REVOKE): the confirmation holds for the life of
 * the connection, and what follows is the revocation notice's. Kept per
 * connection, at most SD_PCHECK_MAX descriptors (an older one is asked about
 * again); each map caches the last SD_PROV_OK_WAYS connections that confirmed
 * it (a descriptor used in turn on several connections: the transfer engine's
 * connections per peer), so its operations do not scan the records.
 */
#define SD_PCHECK_MAX 1024u

static struct pcheck *check_find(struct doca_rdma_connection *c, const struct doca_mmap *m)
{
	struct pcheck *chk = c->pchk;

	for (uint32_t i = 0; i < c->nchk; i++) {
		struct pcheck *r = &chk[i];

		if (r->map_id == m->id && r->lo == (uint64_t)(uintptr_t)m->addr && r->len == m->len &&
		    r->perms == m->permissions && !memcmp(r->key, m->key, SD_KEY_LEN))
			return r;
	}
	return NULL;
}

static struct pcheck *check_new(struct doca_rdma_connection *c)
{
	struct pcheck *r;

	if (c->nchk == c->chkcap && c->chkcap < SD_PCHECK_MAX) {
		uint32_t cap = c->chkcap ? 2 * c->chkcap : 8;
		struct pcheck *chk = realloc(c->pchk, cap * sizeof(*chk));

		if (!chk)
			return NULL;
		c->pchk = chk;
		c->chkcap = cap;
	}
	if (c->nchk < c->chkcap) {
		r = &((struct pcheck *)c->pchk)[c->nchk++];
	} else { /* full: the oldest goes */
		r = &((struct pcheck *)c->pchk)[c->chkat];
		c->chkat = (c->chkat + 1) % c->chkcap;
	}
	memset(r, 0, sizeof(*r));
	return r;
}

void sd_prov_conn_free(struct doca_rdma_connection *c)
{
	free(c->pchk);
	c->pchk = NULL;
	c->nchk = c->chkcap = c->chkat = 0;
}

/* Whether c's target confirmed remote map m's descriptor on c: 1 yes, 0 no (the native link), -1 not yet
 * (held for the answer); if it was not asked on c yet, ask now. Engine lock held. */
static int descriptor_confirmed(struct doca_rdma_connection *c, struct doca_mmap *m)
{
	struct pcheck *r;
	uint64_t now;

	if (!c->pserial)
		c->pserial = ++P.conn_serials;
	if (m->prov_ok_epoch == P.chk_epoch) {
		for (uint32_t i = 0; i < SD_PROV_OK_WAYS; i++)
			if (m->prov_ok_conn[i] == c->pserial)
				return 1;
	}
	r = check_find(c, m);
	if (r && r->state == CHK_OK) {
		if (m->prov_ok_epoch != P.chk_epoch) {
			memset(m->prov_ok_conn, 0, sizeof(m->prov_ok_conn));
			m->prov_ok_epoch = P.chk_epoch;
			m->prov_ok_next = 0;
		}
		m->prov_ok_conn[m->prov_ok_next] = c->pserial;
		m->prov_ok_next = (m->prov_ok_next + 1) % SD_PROV_OK_WAYS;
		return 1;
	}
	now = sd_now_ns();
	if (r && r->state == CHK_BAD)
		return 0;
	if (r && r->sent_ns && (!r->again || now - r->sent_ns < sd_eng_timeout_ns()))
		return r->again ? 0 : -1; /* the answer comes (the link is ordered) or the connection breaks */
	if ((!r && !(r = check_new(c))) || !c->link)
		return 0;
	{
		struct sd_hdr h = {.opcode = SD_OP_PROV_CHECK, .req_id = ++P.check_seq, .instance = m->peer_instance,
				   .map_id = m->id, .raddr = (uint64_t)(uintptr_t)m->addr, .rlen = m->len,
				   .arg0 = m->permissions};

		memcpy(h.key, m->key, SD_KEY_LEN);
		r->map_id = m->id;
		r->lo = h.raddr;
		r->len = m->len;
		r->perms = m->permissions;
		memcpy(r->key, m->key, SD_KEY_LEN);
		r->state = CHK_PENDING;
		r->again = 0;
		r->seq = h.req_id;
		r->sent_ns = 0;
		if (sd_link_send_ctrl(c->link, &h, NULL, 0) != 0)
			return 0; /* no memory: the native link, asked again at the next operation */
		r->sent_ns = now ? now : 1;
		P.checks_sent++;
		c->link->awaited = 1; /* the keepalive watches the answer */
		sd_link_flush(c->link);
	}
	return -1;
}

int sd_prov_on_check(struct doca_rdma_connection *c, const struct sd_hdr *h)
{
	struct sd_hdr a = {.opcode = SD_OP_PROV_CHECK_ACK, .req_id = h->req_id, .map_id = h->map_id};
	struct doca_mmap *m = NULL;
	doca_error_t rc;

	if (!c->link)
		return -1;
	if (c->state != SDC_ESTABLISHED || !c->prevoke || c->pbroken) {
		rc = DOCA_ERROR_AGAIN; /* a later stop would not tell it: not yet */
	} else if (h->instance != sd_instance_id()) {
		rc = DOCA_ERROR_NOT_PERMITTED;
	} else {
		rc = sd_mmap_acquire_why(h->map_id, h->key, h->raddr, h->rlen, (uint32_t)h->arg0, &m, NULL);
		/* a map being stopped is not confirmed: its notice may have passed this connection already */
		if (rc != DOCA_SUCCESS || !m || m->remote || !m->started || !m->prov_mr || m->prov_revoking)
			rc = DOCA_ERROR_NOT_PERMITTED;
		if (m)
			sd_mmap_release(m);
	}
	a.status = (uint32_t)rc;
	if (sd_link_send_ctrl(c->link, &a, NULL, 0) != 0)
		return -1;
	sd_link_flush(c->link);
	return 0;
}

int sd_prov_on_check_ack(struct doca_rdma_connection *c, const struct sd_hdr *h)
{
	struct pcheck *chk = c->pchk;

	if (!h->req_id || h->req_id > P.check_seq)
		return -1; /* an answer to nothing this process asked */
	if (c->link) /* one at a time per connection: its hold queue stops at the first that waits */
		c->link->awaited = 0;
	for (uint32_t i = 0; i < c->nchk; i++) {
		struct pcheck *r = &chk[i];

		if (r->seq != h->req_id || r->map_id != h->map_id || r->state != CHK_PENDING || r->again)
			continue;
		if (h->status == DOCA_SUCCESS)
			r->state = CHK_OK;
		else if (h->status == DOCA_ERROR_AGAIN)
			r->again = 1; /* the native link meanwhile; asked again after the engine timeout */
		else
			r->state = CHK_BAD;
		break;
	}
	/* what waited for it goes on (an answer whose question a full ring forgot: its operation asks again) */
	if (c->hold_head && !c->pbroken && !c->plinger_ns)
		release_held(c);
	return 0;
}

/* How long a stop waits for the answers: a live peer's engine thread answers within a round trip and a
 * flush; one that does not (SIGSTOPped, dead but not yet noticed) must not hold every other peer's
 * stops for the whole engine timeout: a twentieth of it (250 ms by default), at least 50 ms. */
static uint64_t revoke_wait_ns(void)
{
	uint64_t t = sd_eng_timeout_ns() / 20;

	return t < 50000000ull ? 50000000ull : t;
}

static int revoke_waits(const struct doca_rdma_connection *c, uint64_t seq)
{
	return c->state == SDC_ESTABLISHED && c->link && !c->pbroken && c->revoke_sent >= seq && c->revoke_acked < seq;
}

/* Tell the peers that map m (local, exported, registered with the provider)
 * stops, and wait until they answered. Engine lock held (took: by us, so we
 * may let it go and wait). */
static void revoke_notify(struct doca_mmap *m, int took)
{
	uint64_t seq = ++P.revoke_seq, deadline;
	int sent = 0, waiting = 1;

	for (struct sd_link_group *g = sd_eng_groups(); g; g = g->eng_next) {
		for (struct doca_rdma_connection *c = sd_group_rdma(g)->conns; c; c = c->next) {
			struct sd_hdr h = {.opcode = SD_OP_PROV_REVOKE, .req_id = seq, .map_id = m->id};

			if (c->state != SDC_ESTABLISHED || !c->link || !c->prevoke || c->pbroken)
				continue;
			memcpy(h.key, m->key, SD_KEY_LEN);
			if (sd_link_send_ctrl(c->link, &h, NULL, 0) != 0)
				continue; /* no memory: the link fails it */
			sd_link_flush(c->link);
			c->revoke_sent = seq;
			sent++;
		}
	}
	if (!sent || !took)
		return; /* nobody to wait for, or we hold the engine: the answers come without us */
	sd_eng_kick();
	deadline = sd_now_ns() + revoke_wait_ns();
	for (uint32_t spin = 0; waiting && sd_now_ns() < deadline; spin++) {
		struct timespec ts = {0, spin < 20 ? 20000 : 500000};

		sd_eng_unlock();
		nanosleep(&ts, NULL);
		sd_eng_lock();
		waiting = 0;
		for (struct sd_link_group *g = sd_eng_groups(); g && !waiting; g = g->eng_next)
			for (struct doca_rdma_connection *c = sd_group_rdma(g)->conns; c && !waiting; c = c->next)
				waiting = revoke_waits(c, seq);
	}
	if (waiting)
		SD_WARN("doca_mmap_stop: a peer did not confirm the revocation of map %llu within %llu ms (frozen or "
			"dead?): an operation it had queued to the map may still land",
			(unsigned long long)m->id, (unsigned long long)(revoke_wait_ns() / 1000000));
}

static void op_done(void *arg, void *op_ctx, doca_error_t status)
{
	struct ptok *k = op_ctx;
	struct doca_rdma_connection *c = k->c;

	(void)arg;
	if (k->kind == PK_ACK || k->dead) {
		free(k);
		return;
	}
	if (k->kind == PK_MSG) {
		k->op_seen = 1;
		k->st_op = status;
		if (status != DOCA_SUCCESS) {
			if (k->t)
				finish(k->t, status, 0);
			k->t = NULL;
			break_later(c);
		}
		msg_settle(k); /* frees k once acknowledged too */
	} else {
		tok_unlink(k);
		if (k->t)
			finish(k->t, status, k->res);
		if (k->kind == PK_REVOKE && status == DOCA_SUCCESS)
			revoke_answer(c, k->res);
		free(k);
		if (status != DOCA_SUCCESS)
			break_later(c);
	}
	if (c->hold_head && !c->pbroken && !c->plinger_ns)
		release_held(c);
}

/* The peer's answer to messages up to h->seq (the last one with h->status). */
static void on_ack(struct doca_rdma_connection *c, const struct sd_pm_hdr *h)
{
	int n = 0;

	while (c->pm_head && (int32_t)(h->seq - c->pm_head->seq) >= 0 && n++ < (int)SD_PM_WINDOW) {
		struct ptok *k = c->pm_head;

		c->pm_head = k->mnext;
		if (!c->pm_head)
			c->pm_tail = NULL;
		k->mnext = NULL;
		c->pm_unacked--;
		c->pm_unacked_bytes -= k->len;
		k->acked = 1;
		P.msgs_answered++;
		if (k->seq == h->seq) {
			k->st_ack = (doca_error_t)h->status;
			k->info = h->info;
		}
		msg_settle(k);
	}
	c->pm_head_ns = sd_now_ns();
	if (c->hold_head && !c->pbroken && !c->plinger_ns)
		release_held(c);
}

static void fail_ops(struct doca_rdma_connection *c, doca_error_t status)
{
	while (c->ptoks) {
		struct ptok *k = c->ptoks;

		tok_unlink(k);
		k->c = NULL;
		k->mnext = NULL;
		if (k->t)
			finish(k->t, status, 0);
		k->t = NULL;
		if (k->kind == PK_MSG && k->op_seen)
			free(k); /* its op_done came already: nothing refers to it */
		else
			k->dead = 1;
	}
	c->pm_head = c->pm_tail = NULL;
	c->pm_unacked = 0;
	c->pm_unacked_bytes = 0;
	fail_held(c, status);
}

static void fail_held(struct doca_rdma_connection *c, doca_error_t status)
{
	while (c->hold_head) {
		struct sd_rtask *t = c->hold_head;

		c->hold_head = t->qnext;
		t->qnext = NULL;
		sd_rtask_fail(t, status, "connection %u closed while the operation waited for the provider's", c->id);
	}
	c->hold_tail = NULL;
}

/* Acknowledgements of what the receives here took, and the senders' own
 * deadline: a message unanswered past the peer's budget and the engine
 * timeout fails, as an RC send whose retries ran out. */
static void pm_flush(void)
{
	struct doca_rdma_connection *c;
	uint8_t hdr[SD_PM_HDR];

	while (sd_pm_ack_next(&c, hdr)) {
		struct ptok *k;
		struct sd_prov_iov iov;

		if (!c->pconn || !c->pready || !(k = tok_new(c, NULL, PK_ACK)))
			continue;
		memcpy(k->hdr, hdr, SD_PM_HDR);
		iov = (struct sd_prov_iov){.addr = k->hdr, .len = SD_PM_HDR};
		if (P.ops->send(c->pconn, &iov, 1, NULL, k) != DOCA_SUCCESS)
			free(k);
	}
}

static uint64_t pm_timers(uint64_t now)
{
	uint64_t next = sd_pm_timers(now), T = sd_eng_timeout_ns();

	for (struct doca_rdma_connection **pp = &pm_tx_list; *pp;) {
		struct doca_rdma_connection *c = *pp;

		if (c->pm_head && c->state == SDC_ESTABLISHED) {
			uint64_t due = c->pm_head_ns + (uint64_t)sd_rnr_budget_ms(c->rdma) * 1000000ull + T;

			if (now < due) {
				next = sd_min_deadline(next, due);
				pp = &c->pm_tx_next;
				continue;
			}
			if (!c->pbroken) {
				SD_WARN("rdma: connection %u: the peer answered no message within %llu ms", c->id,
					(unsigned long long)((now - c->pm_head_ns) / 1000000ull));
				sd_conn_set_why(c, "the peer did not answer a message within its RNR budget and the "
						   "timeout (SOFTDOCA_TIMEOUT_MS)");
				break_later(c);
			}
		}
		*pp = c->pm_tx_next;
		c->pm_tx_next = NULL;
		c->pm_tx_listed = 0;
		sd_conn_unref(c);
	}
	return next;
}

static int link_idle(const struct sd_link *l)
{
	return !l->txq_head && !l->out_head && !l->parked && !l->dead && !l->draining;
}

/* What the target would refuse, known from the handshake (its context's
 * permissions) and the descriptor (the map's range and permissions): failed
 * here with the target's words, and the connection breaks as at a target.
 * (On fabrics that enforce access, the fabric checks again; on tcp, shared
 * memory and cma nothing else does: see docs/softdoca-contract.md.) */
/* The right a one-sided operation needs at the target, and the bytes it reaches there. */
static uint32_t op_need(const struct sd_rtask *t)
{
	return t->type == SD_T_WRITE || t->type == SD_T_WRITE_IMM ? DOCA_ACCESS_FLAG_RDMA_WRITE
	       : t->type == SD_T_READ ? DOCA_ACCESS_FLAG_RDMA_READ : DOCA_ACCESS_FLAG_RDMA_ATOMIC;
}

static uint64_t op_len(const struct sd_rtask *t)
{
	return t->type == SD_T_CMP_SWP || t->type == SD_T_FETCH_ADD ? 8 : t->xfer_len;
}

static int refused(struct sd_rtask *t, struct doca_rdma_connection *c, const struct doca_mmap *m, uint64_t raddr)
{
	static const uint8_t opcode[SD_T_NUM] = {[SD_T_WRITE] = SD_OP_WRITE, [SD_T_READ] = SD_OP_READ,
						 [SD_T_CMP_SWP] = SD_OP_CMP_SWP, [SD_T_FETCH_ADD] = SD_OP_FETCH_ADD,
						 [SD_T_WRITE_IMM] = SD_OP_WRITE_IMM};
	uint32_t need = op_need(t);
	uint64_t len = op_len(t);
	uint64_t base = (uint64_t)(uintptr_t)m->addr;
	struct sd_prov_nak nak = {.code = SD_PROV_NAK_NONE, .map_id = m->id, .base = base, .len = m->len};
	char d[SD_DETAIL_LEN];

	if ((c->peer_perms & need) != need) {
		nak.code = SD_PROV_NAK_CTX_PERM;
		nak.perms = c->peer_perms;
	} else if (m->peer_instance != c->pinstance) {
		nak.code = SD_PROV_NAK_INSTANCE;
	} else if (raddr < base || raddr + len < raddr || len > m->len || raddr - base > m->len - len) {
		nak.code = SD_PROV_NAK_BOUNDS;
	} else if ((m->permissions & need) != need) {
		nak.code = SD_PROV_NAK_MAP_PERM;
		nak.perms = m->permissions;
	} else if (len == 8 && (t->type == SD_T_CMP_SWP || t->type == SD_T_FETCH_ADD) && (raddr & 7)) {
		nak.code = SD_PROV_NAK_ALIGN;
	}
	if (nak.code == SD_PROV_NAK_NONE)
		return 0;
	sd_nak_describe(d, sizeof(d), 1, opcode[t->type], raddr, len, &nak);
	sd_rtask_fail(t, DOCA_ERROR_NOT_PERMITTED, "%s", d);
	break_later(c);
	if (!P.in_progress) /* not from inside a provider callback: the engine breaks it after */
		break_now();
	return 1;
}

/* Whether the target would refuse the operation although the descriptor's
 * checks above pass: a map it revoked (PROV_REVOKE), or, on a peer of this
 * host whose registration table is mapped, what its live table does not grant
 * (a stopped map, a forged key or range), as for a same-host copy. Such an
 * operation leaves the provider and takes the native link, where the target
 * refuses it with its reason and the connection breaks (RC semantics)
 * (docs/providers.md, "What each provider enforces"). */
static int target_refuses(const struct sd_rtask *t, struct doca_rdma_connection *c, struct doca_mmap *m,
			  uint64_t raddr)
{
	int x, ok;

	if (revsets && peer_revoked(c, m)) { /* its target stopped it (PROV_REVOKE) */
		P.revoke_refused++;
		return 1;
	}
	x = -1;
	if (m && m->remote && c->link)
		x = sd_xport_check(c->link->xpeer, &m->rkey, raddr, op_len(t), op_need(t));
	if (x < 0) { /* no live table (between hosts): the target confirms the descriptor first */
		ok = c->pcheck ? descriptor_confirmed(c, m) : 1;
		if (ok > 0)
			return 0;
		if (ok < 0)
			return -1; /* held until the answer */
		P.check_native++;
		return 1;
	}
	if (x)
		return 0;
	P.table_refused++;
	return 1;
}

/* The local buffers of t, with their registration with the provider where
 * they lie in a started local map (every one has one), so the library need
 * not register or bounce them per operation. */
static int local_iov(const struct sd_rtask *t, struct sd_prov_iov *iov, int max)
{
	const struct doca_buf *lb = t->type == SD_T_READ ? t->dst : t->src;
	const struct doca_mmap *lm = lb ? lb->mmap : NULL;
	uintptr_t lo = lm ? (uintptr_t)lm->addr : 0, hi = lm ? lo + lm->len : 0;
	int n = t->iovn;

	if (n > max)
		return -1;
	for (int i = 0; i < n; i++) {
		uintptr_t a = (uintptr_t)t->iov[i].iov_base;

		iov[i].addr = t->iov[i].iov_base;
		iov[i].len = t->iov[i].iov_len;
		iov[i].mr = lm && lm->prov_mr && !lm->remote && a >= lo && a <= hi && t->iov[i].iov_len <= hi - a
				    ? lm->prov_mr
				    : NULL;
	}
	return n;
}

/* A submit refused before it left (the requester's checks): fatal, as at a target. */
static void refused_at_submit(struct ptok *k, struct sd_rtask *t, struct doca_rdma_connection *c, doca_error_t rc)
{
	tok_unlink(k);
	free(k);
	finish(t, rc, 0);
	break_later(c);
	if (!P.in_progress)
		break_now();
}

/* A message: its header first, then (send) the payload; a write with
 * immediate's write goes first, and the provider keeps the message behind it.
 * 1 taken, 0 not eligible (native link), -1 wait (the window is full). */
static int msg_submit(struct sd_rtask *t, struct doca_rdma_connection *c)
{
	struct sd_prov_iov iov[SD_RDMA_MAX_BUF_LIST + 1];
	struct sd_pm_hdr h = {.type = t->type == SD_T_WRITE_IMM ? SD_PM_WIMM : SD_PM_SEND};
	uint64_t len = t->type == SD_T_WRITE_IMM ? 0 : t->xfer_len;
	struct ptok *k;
	doca_error_t rc;
	int n = 0, tr;

	if (!c->pmsg || P.max_iov < 2)
		return 0;
	if (c->pm_unacked && (c->pm_unacked >= SD_PM_WINDOW || c->pm_unacked_bytes + len > SD_RDMA_MAX_PARK))
		return -1;
	if (t->type == SD_T_WRITE_IMM && t->xfer_len) {
		const struct doca_buf *r = t->dst;
		struct sd_prov_rkey *rk;
		struct ptok *w;
		uint64_t raddr;

		if (!r || !r->mmap || !r->mmap->remote || !(rk = rkey_of(r->mmap)))
			return 0;
		n = local_iov(t, iov, (int)SD_RDMA_MAX_BUF_LIST);
		if (n < 0 || (uint32_t)n > P.max_iov)
			return 0;
		raddr = (uint64_t)(uintptr_t)r->data;
		if (refused(t, c, r->mmap, raddr))
			return 1;
		if ((tr = target_refuses(t, c, r->mmap, raddr)) != 0)
			return tr > 0 ? 0 : -1;
		w = tok_new(c, NULL, PK_SUB);
		if (!w) {
			sd_rtask_fail(t, DOCA_ERROR_NO_MEMORY, "provider %s: no memory for the operation", P.ops->name);
			return 1;
		}
		rc = P.ops->write(c->pconn, iov, n, rk, raddr, w);
		if (rc != DOCA_SUCCESS) {
			refused_at_submit(w, t, c, rc);
			return 1;
		}
		h.info = t->xfer_len;
		n = 0;
	} else if (t->type != SD_T_WRITE_IMM) {
		n = local_iov(t, iov + 1, (int)SD_RDMA_MAX_BUF_LIST);
		if (n < 0 || (uint32_t)n + 1 > P.max_iov)
			return 0;
	}
	if (t->type != SD_T_SEND) {
		h.flags = SD_PM_F_IMM;
		h.imm = t->imm;
	}
	k = tok_new(c, t, PK_MSG);
	if (!k) {
		sd_rtask_fail(t, DOCA_ERROR_NO_MEMORY, "provider %s: no memory for the operation", P.ops->name);
		break_later(c); /* a write with immediate's write may be on its way: RC would break */
		return 1;
	}
	h.seq = c->pm_tx_seq;
	sd_pm_encode(&h, k->hdr);
	iov[0] = (struct sd_prov_iov){.addr = k->hdr, .len = SD_PM_HDR};
	rc = P.ops->send(c->pconn, iov, n + 1, NULL, k);
	if (rc != DOCA_SUCCESS) {
		refused_at_submit(k, t, c, rc);
		return 1;
	}
	c->pm_tx_seq++;
	P.msgs_sent++;
	k->seq = h.seq;
	k->len = len;
	if (c->pm_tail)
		c->pm_tail->mnext = k;
	else {
		c->pm_head = k;
		c->pm_head_ns = sd_now_ns();
	}
	c->pm_tail = k;
	c->pm_unacked++;
	c->pm_unacked_bytes += len;
	if (!c->pm_tx_listed) {
		c->pm_tx_listed = 1;
		sd_conn_ref(c);
		c->pm_tx_next = pm_tx_list;
		pm_tx_list = c;
	}
	kick_engine(); /* the engine progresses the provider (and re-arms its fd) */
	return 1;
}

/* Submit t to the provider: 1 taken (or failed at once, completed), 0 not
 * eligible (native link), -1 eligible but it must wait (message window). */
static int prov_submit(struct sd_rtask *t, struct doca_rdma_connection *c)
{
	struct doca_buf *r;
	struct sd_prov_rkey *rk;
	struct sd_prov_iov iov[SD_RDMA_MAX_BUF_LIST];
	struct ptok *k;
	uint64_t raddr;
	doca_error_t rc;
	int n, tr;

	if (!c->pready || !c->pconn)
		return 0;
	switch (t->type) {
	case SD_T_WRITE:
	case SD_T_CMP_SWP:
	case SD_T_FETCH_ADD:
		r = t->dst;
		break;
	case SD_T_READ:
		r = t->src;
		break;
	case SD_T_SEND:
	case SD_T_SEND_IMM:
	case SD_T_WRITE_IMM:
		return msg_submit(t, c);
	default:
		return 0;
	}
	if (!r || !r->mmap || !r->mmap->remote || ((t->type == SD_T_WRITE || t->type == SD_T_READ) && !t->xfer_len))
		return 0; /* zero-length: nothing to move, the native link answers it */
	rk = rkey_of(r->mmap);
	if (!rk)
		return 0;
	raddr = (uint64_t)(uintptr_t)r->data;
	if (refused(t, c, r->mmap, raddr))
		return 1;
	if ((tr = target_refuses(t, c, r->mmap, raddr)) != 0)
		return tr > 0 ? 0 : -1;
	n = local_iov(t, iov, (int)SD_RDMA_MAX_BUF_LIST);
	if (n < 0)
		return 0;
	k = tok_new(c, t, PK_OP);
	if (!k) {
		sd_rtask_fail(t, DOCA_ERROR_NO_MEMORY, "provider %s: no memory for the operation", P.ops->name);
		return 1;
	}
	switch (t->type) {
	case SD_T_WRITE:
		rc = P.ops->write(c->pconn, iov, n, rk, raddr, k);
		break;
	case SD_T_READ:
		rc = P.ops->read(c->pconn, iov, n, rk, raddr, k);
		break;
	case SD_T_CMP_SWP:
		rc = P.ops->atomic_cswap(c->pconn, rk, raddr, t->arg0, t->arg1, &k->res, k);
		break;
	default:
		rc = P.ops->atomic_fadd(c->pconn, rk, raddr, t->arg0, &k->res, k);
		break;
	}
	if (rc != DOCA_SUCCESS) {
		refused_at_submit(k, t, c, rc);
	} else {
		P.one_sided++;
		kick_engine(); /* the engine progresses the provider (and re-arms its fd) */
	}
	return 1;
}

/* Whether t would take the provider's path (a one-sided operation on a map of
 * a peer, or a message where both sides take them there). */
static int prov_eligible(const struct sd_rtask *t, const struct doca_rdma_connection *c)
{
	const struct doca_buf *r = t->type == SD_T_READ ? t->src : t->dst;

	if (t->type == SD_T_SEND || t->type == SD_T_SEND_IMM || t->type == SD_T_WRITE_IMM)
		return c->pmsg;
	if (t->type != SD_T_WRITE && t->type != SD_T_READ && t->type != SD_T_CMP_SWP && t->type != SD_T_FETCH_ADD)
		return 0;
	return r && r->mmap && r->mmap->remote;
}

static void hold(struct doca_rdma_connection *c, struct sd_rtask *t)
{
	t->qnext = NULL;
	if (c->hold_tail)
		c->hold_tail->qnext = t;
	else
		c->hold_head = t;
	c->hold_tail = t;
}

int sd_prov_try(struct sd_rtask *t, struct doca_rdma_connection *c, struct sd_link *l)
{
	int r;

	if (!P.p)
		return 0;
	if (c->hold_head || (c->plost_ns && !c->pconn && prov_eligible(t, c))) {
		hold(c, t);
		return 1;
	}
	P.defer_kick = !P.in_progress;
	r = link_idle(l) ? prov_submit(t, c) : 0;
	P.defer_kick = 0;
	if (r == 1)
		return 1;
	if (r < 0 || c->prov_out) { /* the window is full, or the native link must wait for the provider */
		hold(c, t);
		return 1;
	}
	return 0;
}

/* The end of an application's submit burst (a task submitted with
 * DOCA_TASK_SUBMIT_FLAG_FLUSH; engine lock held) that left work for the
 * provider. Waking the engine thread costs a context switch and the engine
 * lock's hand-over on every operation, and a polling application races it:
 * instead this thread progresses and arms the provider itself, as the engine
 * would before it sleeps, and wakes the engine only where the provider needs
 * progress now (arm() says AGAIN) or a deadline before the engine's own
 * wake-up (sd_eng_sleep_until_ns: it sleeps at most a second while a
 * provider is open). What comes from the peer wakes the engine through the
 * armed fd, as it would after its own arm. While the application polls the
 * provider itself (sd_eng_app_polls) even work for now waits for that poll,
 * for its going to sleep (which hands the provider back) or for the engine's
 * look a millisecond later at most; and as the engine does not watch the
 * provider's fd meanwhile, this thread only progresses a provider whose arm
 * makes peers signal it (SD_PROV_CAP_ARM_SIGNALS): the arm would buy nothing
 * and cost, per operation, system calls here and a signal from the peer's
 * next message (UCX on shared memory: an eventfd read and a socket drain
 * here, a datagram there). (Over tcp the arm costs no peer anything, and
 * leaving it out measured ~20% fewer batched small writes.) A polled
 * provider (nothing wakes the engine for what peers post) is woken as
 * before. */
void sd_prov_submit_end(void)
{
	uint64_t until;
	int ms = -1, app, noarm;

	if (!P.kick_due || P.kicked)
		return;
	P.kick_due = 0;
	until = sd_eng_sleep_until_ns();
	app = sd_eng_app_polls(); /* engine lock held: the engine changes it under it */
	noarm = app && P.arm_signals;
	if (!until || !P.p || P.polled || P.in_progress || (prov_turn(&ms, !noarm) && !app) || plost_head ||
	    plinger_head || (ms >= 0 && sd_now_ns() + (uint64_t)ms * 1000000ull < until)) {
		P.kicked = 1;
		sd_eng_kick();
	}
}

/* Held tasks, in order, as far as they can go now. */
static void release_held(struct doca_rdma_connection *c)
{
	struct sd_link *l = c->link;
	int started = 0;

	while (c->hold_head) {
		struct sd_rtask *t = c->hold_head;
		int r;

		if (!l || c->state != SDC_ESTABLISHED) {
			c->hold_head = t->qnext;
			if (!c->hold_head)
				c->hold_tail = NULL;
			t->qnext = NULL;
			sd_rtask_fail(t, DOCA_ERROR_CONNECTION_RESET, "connection %u closed", c->id);
			continue;
		}
		if (c->plost_ns && !c->pconn && prov_eligible(t, c))
			break;
		c->hold_head = t->qnext;
		if (!c->hold_head)
			c->hold_tail = NULL;
		t->qnext = NULL;
		r = link_idle(l) ? prov_submit(t, c) : 0;
		if (r == 1)
			continue;
		if (r < 0 || c->prov_out) { /* back at the head: it waits */
			t->qnext = c->hold_head;
			c->hold_head = t;
			if (!c->hold_tail)
				c->hold_tail = t;
			break;
		}
		sd_rtask_start(t, l);
		started = 1;
	}
	if (started)
		sd_link_flush(l);
}

long sd_prov_counter(const char *name)
{
	/* the bridge's own counters, then the provider's */
	static const struct {
		const char *name;
		size_t off;
	} own[] = {{"table_refused", offsetof(__typeof__(P), table_refused)},
		   {"revoke_refused", offsetof(__typeof__(P), revoke_refused)},
		   {"check_native", offsetof(__typeof__(P), check_native)},
		   {"checks_sent", offsetof(__typeof__(P), checks_sent)},
		   {"one_sided", offsetof(__typeof__(P), one_sided)}};
	const uint64_t *mine = NULL;
	long v = -1;
	int took;

	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
		if (!strcmp(name, own[i].name))
			mine = (const uint64_t *)((const char *)&P + own[i].off);
	if (!P.p || (!mine && !P.ops->counter))
		return -1;
	lock_engine(&took);
	if (P.p)
		v = mine ? (long)*mine : P.ops->counter(P.p, name);
	unlock_engine(took);
	return v;
}

const char *sd_prov_conn_transport(const struct doca_rdma_connection *c)
{
	return c->pready ? c->ptransport : NULL;
}

/* ---------------------------------------------------------------- extension */
SD_EXPORT const char *softdoca_providers_built(void)
{
	int ucx = sd_provider_find("ucx") != NULL, ofi = sd_provider_find("ofi") != NULL;

	return ucx && ofi ? "native,ucx,ofi" : ucx ? "native,ucx" : ofi ? "native,ofi" : "native";
}

/* Two-sided messages this process sent through the provider (answered: the
 * peer acknowledged them), for tests that check which path messages took. */
SD_EXPORT unsigned long long softdoca_provider_messages(int answered)
{
	unsigned long long n;
	int took = !sd_eng_held();

	if (took)
		sd_eng_lock();
	n = answered ? P.msgs_answered : P.msgs_sent;
	if (took)
		sd_eng_unlock();
	return n;
}
