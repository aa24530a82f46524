/*
 * softdoca RDMA tasks: the eight task types (receive, send, send_imm, read,
 * write, write_imm, atomic cmp_swp, atomic fetch_add), their pools,
 * accessors and the submit path.
 *
 * Pools: sized by *_set_conf (IDLE only) and allocated at ctx start;
 * allocate_init needs the ctx RUNNING (else DOCA_ERROR_BAD_STATE) and returns
 * DOCA_ERROR_NO_MEMORY once the pool of that type is exhausted (or was never
 * configured).
 *
 * Buffers: local buffers must come from a started local mmap; destinations
 * (read dst, receive dst, atomic result) need LOCAL_READ_WRITE. Remote
 * buffers come from doca_mmap_create_from_export; their data address is in
 * the peer's address space. Sources are [data, data+data_len) of each buffer
 * of the list; local destinations are filled after their current data
 * (data_len grows by the bytes received). A remote write lands at the remote
 * buffer's data address; a read reads the remote buffer's data. Atomics
 * operate on the 8 bytes at the remote buffer's data address (8-byte
 * aligned) and append the original value (8 bytes, host order) to the
 * result buffer.
 *
 * Submit-time errors (returned by doca_task_submit): DOCA_ERROR_INVALID_VALUE
 * for missing/ill-formed buffers, lists longer than configured, a message
 * larger than the max message size, a destination too small, a misaligned
 * atomic target; DOCA_ERROR_NOT_PERMITTED for a local buffer whose mmap is
 * not started / not local / not writable where it must be;
 * DOCA_ERROR_NOT_CONNECTED for a connection that was never connected
 * (exported but not connected, CM request not accepted) or is closed.
 * Tasks on a connection whose handshake is still running wait for it.
 */
#include "rdma.h"
#include "rdma_sync_event.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- buffers */
int sd_buf_gather(const struct doca_buf *b, struct iovec *iov, uint32_t max, uint64_t *total)
{
	uint32_t n = 0;

	*total = 0;
	for (; b; b = b->next) {
		if (n >= max)
			return -1;
		iov[n].iov_base = b->data;
		iov[n].iov_len = b->data_len;
		*total += b->data_len;
		n++;
	}
	return (int)n;
}

int sd_buf_tail(const struct doca_buf *b, struct iovec *iov, uint32_t max, uint64_t *total)
{
	uint32_t n = 0;

	*total = 0;
	for (; b; b = b->next) {
		uint8_t *start = b->data + b->data_len, *end = b->head + b->len;

		if (n >= max || start > end)
			return -1;
		iov[n].iov_base = start;
		iov[n].iov_len = (size_t)(end - start);
		*total += iov[n].iov_len;
		n++;
	}
	return (int)n;
}

void sd_buf_tail_commit(struct doca_buf *b, uint64_t n)
{
	for (; b && n; b = b->next) {
		uint64_t room = (uint64_t)((b->head + b->len) - (b->data + b->data_len));
		uint64_t take = n < room ? n : room;

		b->data_len += take;
		n -= take;
	}
}

/* ---------------------------------------------------------------- details */
const char *sd_access_str(uint32_t perms, char *buf, size_t len)
{
	static const char *const names[] = {"LOCAL_READ_WRITE", "RDMA_READ", "RDMA_WRITE", "RDMA_ATOMIC",
					    "PCI_READ_ONLY", "PCI_READ_WRITE", "PCI_RELAXED_ORDERING"};
	size_t off = 0;

	buf[0] = 0;
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!(perms & (1u << i)))
			continue;
		off += (size_t)snprintf(buf + off, off < len ? len - off : 0, "%s%s", off ? "|" : "", names[i]);
	}
	if (!off)
		snprintf(buf, len, "LOCAL_READ_ONLY");
	return buf;
}

static void vdetail(struct sd_rtask *t, const char *fmt, va_list ap)
{
	vsnprintf(t->detail, sizeof(t->detail), fmt, ap);
}

void sd_rtask_fail(struct sd_rtask *t, doca_error_t status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdetail(t, fmt, ap);
	va_end(ap);
	sd_eng_complete(&t->base, status);
}

/* Return rc after recording why (submit-time errors). */
static doca_error_t why(struct sd_rtask *t, doca_error_t rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static doca_error_t why(struct sd_rtask *t, doca_error_t rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdetail(t, fmt, ap);
	va_end(ap);
	return rc;
}

static doca_error_t local_ok(struct sd_rtask *t, const struct doca_buf *b, int need_write, const char *what)
{
	for (; b; b = b->next) {
		const struct doca_mmap *m = b->mmap;

		if (!m)
			return why(t, DOCA_ERROR_NOT_PERMITTED, "local refused: the %s has no mmap", what);
		if (m->remote)
			return why(t, DOCA_ERROR_NOT_PERMITTED,
				   "local refused: the %s belongs to a remote mmap (from an export), not to local memory",
				   what);
		if (!m->started)
			return why(t, DOCA_ERROR_NOT_PERMITTED, "local refused: the %s's mmap is not started", what);
		if (need_write && !(m->permissions & DOCA_ACCESS_FLAG_LOCAL_READ_WRITE)) {
			char p[128];
			return why(t, DOCA_ERROR_NOT_PERMITTED,
				   "local refused: the %s's mmap lacks LOCAL_READ_WRITE (has %s); grant it on the local "
				   "MemoryMap", what, sd_access_str(m->permissions, p, sizeof(p)));
		}
	}
	return DOCA_SUCCESS;
}

static int remote_ok(const struct doca_buf *b)
{
	return b && b->mmap && b->mmap->remote;
}

static uint64_t remote_room(const struct doca_buf *b)
{
	uintptr_t end = (uintptr_t)b->head + b->len, d = (uintptr_t)b->data;

	return end >= d ? (uint64_t)(end - d) : 0;
}

/* ---------------------------------------------------------------- pools */
static void pool_free(struct sd_pool *p)
{
	if (!p)
		return;
	free(p->tasks);
	free(p->free);
	free(p->iovs);
	free(p);
}

static const struct sd_task_ops rtask_ops;

static struct sd_pool *pool_new(struct doca_rdma *rdma, enum sd_task_type type, uint32_t count)
{
	struct sd_pool *p = calloc(1, sizeof(*p));
	uint32_t cap = rdma->max_send_buf_list_len;

	if (rdma->recv_buf_list_len > cap)
		cap = rdma->recv_buf_list_len;
	if (!p)
		return NULL;
	p->count = count;
	p->tasks = calloc(count, sizeof(*p->tasks));
	p->free = calloc(count, sizeof(*p->free));
	p->iovs = calloc((size_t)count * cap, sizeof(*p->iovs));
	if (!p->tasks || !p->free || !p->iovs) {
		pool_free(p);
		return NULL;
	}
	for (uint32_t i = 0; i < count; i++) {
		struct sd_rtask *t = &p->tasks[i];

		t->type = type;
		t->pool = p;
		t->rdma = rdma;
		t->iov = &p->iovs[(size_t)i * cap];
		t->iov_cap = cap;
		p->free[count - 1 - i] = t;
	}
	p->nfree = count;
	return p;
}

doca_error_t sd_rdma_pools_create(struct doca_rdma *rdma)
{
	struct sd_pool *fresh[SD_T_NUM] = {0};

	for (int i = 0; i < SD_T_NUM; i++) {
		if (!rdma->tconf[i].set || !rdma->tconf[i].num)
			continue;
		fresh[i] = pool_new(rdma, (enum sd_task_type)i, rdma->tconf[i].num);
		if (!fresh[i]) {
			for (int j = 0; j < i; j++)
				pool_free(fresh[j]);
			return DOCA_ERROR_NO_MEMORY;
		}
	}
	pthread_mutex_lock(&rdma->pool_lock);
	for (int i = 0; i < SD_T_NUM; i++) {
		struct sd_pool *old = rdma->pool[i];

		if (old && old->nfree == old->count) {
			pool_free(old);
		} else if (old) { /* tasks still held by the app: keep until destroy */
			old->next = rdma->retired;
			rdma->retired = old;
		}
		rdma->pool[i] = fresh[i];
	}
	pthread_mutex_unlock(&rdma->pool_lock);
	return sd_rdma_se_pools_create(rdma); /* remote-net sync-event task pools (rdma_sync_event.c) */
}

void sd_rdma_pools_destroy(struct doca_rdma *rdma)
{
	for (int i = 0; i < SD_T_NUM; i++) {
		pool_free(rdma->pool[i]);
		rdma->pool[i] = NULL;
	}
	while (rdma->retired) {
		struct sd_pool *p = rdma->retired;
		rdma->retired = p->next;
		pool_free(p);
	}
	sd_rdma_se_destroy(rdma);
}

doca_error_t sd_rtask_set_conf(struct doca_rdma *rdma, enum sd_task_type type, sd_fnptr ok, sd_fnptr err,
			     uint32_t num)
{
	if (!rdma || !ok || !err || num == 0 || num > 4 * SD_RDMA_MAX_QUEUE)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_rdma_live(rdma))
		return DOCA_ERROR_BAD_STATE;
	if (rdma->ctx.state != DOCA_CTX_STATE_IDLE)
		return DOCA_ERROR_BAD_STATE;
	rdma->tconf[type].ok_cb = ok;
	rdma->tconf[type].err_cb = err;
	rdma->tconf[type].num = num;
	rdma->tconf[type].set = 1;
	return DOCA_SUCCESS;
}

doca_error_t sd_rtask_alloc(struct doca_rdma *rdma, enum sd_task_type type, struct doca_rdma_connection *conn,
			       union doca_data ud, void *out)
{
	struct sd_pool *p;
	struct sd_rtask *t = NULL;

	if (!rdma || !out)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_rdma_live(rdma))
		return DOCA_ERROR_BAD_STATE;
	if (rdma->ctx.state != DOCA_CTX_STATE_RUNNING)
		return DOCA_ERROR_BAD_STATE;
	pthread_mutex_lock(&rdma->pool_lock);
	p = rdma->pool[type];
	if (p && p->nfree) {
		t = p->free[--p->nfree];
		t->allocated = 1;
	}
	pthread_mutex_unlock(&rdma->pool_lock);
	if (!t)
		return DOCA_ERROR_NO_MEMORY;
	sd_rtask_reset(t, rdma, conn, ud);
	*(struct sd_rtask **)out = t;
	return DOCA_SUCCESS;
}

void sd_rtask_reset(struct sd_rtask *t, struct doca_rdma *rdma, struct doca_rdma_connection *conn, union doca_data ud)
{
	memset(&t->base, 0, sizeof(t->base));
	t->base.ops = &rtask_ops;
	t->base.ctx = &rdma->ctx;
	t->base.user_data = ud;
	t->conn = conn;
	sd_conn_ref(conn);
	t->detail[0] = 0;
	t->src = t->dst = t->result = NULL;
	t->imm = 0;
	t->arg0 = t->arg1 = 0;
	t->res_len = 0;
	t->res_imm = 0;
	t->res_opcode = DOCA_RDMA_OPCODE_RECV_SEND;
	t->res_conn = NULL;
	t->qnext = NULL;
	memset(&t->tx, 0, sizeof(t->tx));
	t->iovn = 0;
	t->xfer_len = 0;
}

/* ---------------------------------------------------------------- task ops */
void sd_rtask_complete(struct sd_rtask *t, doca_error_t status)
{
	sd_eng_complete(&t->base, status);
}

static void rtask_release(struct doca_task *task)
{
	struct sd_rtask *t = (struct sd_rtask *)task;
	struct doca_rdma *rdma = t->rdma;

	pthread_mutex_lock(&rdma->pool_lock);
	if (t->allocated) {
		t->allocated = 0;
		sd_conn_unref(t->conn);
		sd_conn_unref(t->res_conn);
		t->conn = t->res_conn = NULL;
		t->pool->free[t->pool->nfree++] = t;
	}
	pthread_mutex_unlock(&rdma->pool_lock);
}

static void rtask_invoke(struct doca_task *task, int success)
{
	struct sd_rtask *t = (struct sd_rtask *)task;
	struct sd_task_conf *c = &t->rdma->tconf[t->type];
	sd_fnptr cb = success ? c->ok_cb : c->err_cb;
	union doca_data ud = t->base.user_data, cud = t->rdma->ctx.user_data;

	if (!cb)
		return;
	switch (t->type) {
	case SD_T_RECV:
		((doca_rdma_task_receive_completion_cb_t)cb)((struct doca_rdma_task_receive *)t, ud, cud);
		break;
	case SD_T_SEND:
		((doca_rdma_task_send_completion_cb_t)cb)((struct doca_rdma_task_send *)t, ud, cud);
		break;
	case SD_T_SEND_IMM:
		((doca_rdma_task_send_imm_completion_cb_t)cb)((struct doca_rdma_task_send_imm *)t, ud, cud);
		break;
	case SD_T_READ:
		((doca_rdma_task_read_completion_cb_t)cb)((struct doca_rdma_task_read *)t, ud, cud);
		break;
	case SD_T_WRITE:
		((doca_rdma_task_write_completion_cb_t)cb)((struct doca_rdma_task_write *)t, ud, cud);
		break;
	case SD_T_WRITE_IMM:
		((doca_rdma_task_write_imm_completion_cb_t)cb)((struct doca_rdma_task_write_imm *)t, ud,
									 cud);
		break;
	case SD_T_CMP_SWP:
		((doca_rdma_task_atomic_cmp_swp_completion_cb_t)cb)(
			(struct doca_rdma_task_atomic_cmp_swp *)t, ud, cud);
		break;
	case SD_T_FETCH_ADD:
		((doca_rdma_task_atomic_fetch_add_completion_cb_t)cb)(
			(struct doca_rdma_task_atomic_fetch_add *)t, ud, cud);
		break;
	default:
		break;
	}
}

/* Validate buffers and prepare t->iov / xfer_len. */
static doca_error_t prepare(struct sd_rtask *t)
{
	struct doca_rdma *rdma = t->rdma;
	uint64_t total = 0;
	doca_error_t rc;
	int n;

	switch (t->type) {
	case SD_T_RECV:
		if (!t->dst)
			return DOCA_SUCCESS;
		if (sd_buf_tail(t->dst, t->iov, rdma->recv_buf_list_len, &total) < 0)
			return why(t, DOCA_ERROR_INVALID_VALUE,
				   "the receive buffer list is longer than the configured %u buffers (or malformed)",
				   rdma->recv_buf_list_len);
		return local_ok(t, t->dst, 1, "receive buffer");
	case SD_T_SEND:
	case SD_T_SEND_IMM:
	case SD_T_WRITE:
	case SD_T_WRITE_IMM:
		t->iovn = 0;
		if (t->src) {
			n = sd_buf_gather(t->src, t->iov, rdma->max_send_buf_list_len, &total);
			if (n < 0)
				return why(t, DOCA_ERROR_INVALID_VALUE,
					   "the source buffer list is longer than max_send_buf_list_len %u",
					   rdma->max_send_buf_list_len);
			if (total > SD_RDMA_MAX_MSG)
				return why(t, DOCA_ERROR_INVALID_VALUE,
					   "the message (%llu bytes) is larger than the maximum message size %u",
					   (unsigned long long)total, SD_RDMA_MAX_MSG);
			rc = local_ok(t, t->src, 0, "local source");
			if (rc != DOCA_SUCCESS)
				return rc;
			t->iovn = n;
		}
		t->xfer_len = total;
		if (t->type == SD_T_WRITE || t->type == SD_T_WRITE_IMM) {
			if (!t->dst)
				return total ? why(t, DOCA_ERROR_INVALID_VALUE, "no remote destination buffer")
					     : DOCA_SUCCESS;
			if (!remote_ok(t->dst))
				return why(t, DOCA_ERROR_INVALID_VALUE,
					   "the destination is not a remote buffer (its mmap was not created from an "
					   "export)");
			if (remote_room(t->dst) < total)
				return why(t, DOCA_ERROR_INVALID_VALUE,
					   "local buffer holds %llu bytes but the remote buffer is %llu bytes (from its "
					   "data address to its end)",
					   (unsigned long long)total, (unsigned long long)remote_room(t->dst));
		}
		return DOCA_SUCCESS;
	case SD_T_READ: {
		uint64_t want, acc = 0;

		if (!t->src) {
			t->xfer_len = 0;
			t->iovn = 0;
			return DOCA_SUCCESS;
		}
		if (!remote_ok(t->src))
			return why(t, DOCA_ERROR_INVALID_VALUE,
				   "the read source is not a remote buffer (its mmap was not created from an export)");
		if (!t->dst)
			return why(t, DOCA_ERROR_INVALID_VALUE, "no local destination buffer");
		want = t->src->data_len;
		if (want > SD_RDMA_MAX_MSG)
			return why(t, DOCA_ERROR_INVALID_VALUE,
				   "the read (%llu bytes) is larger than the maximum message size %u",
				   (unsigned long long)want, SD_RDMA_MAX_MSG);
		n = sd_buf_tail(t->dst, t->iov, rdma->max_send_buf_list_len, &total);
		if (n < 0)
			return why(t, DOCA_ERROR_INVALID_VALUE,
				   "the destination buffer list is longer than max_send_buf_list_len %u",
				   rdma->max_send_buf_list_len);
		if (total < want)
			return why(t, DOCA_ERROR_INVALID_VALUE,
				   "the remote buffer holds %llu bytes but the local destination has room for %llu",
				   (unsigned long long)want, (unsigned long long)total);
		rc = local_ok(t, t->dst, 1, "local destination");
		if (rc != DOCA_SUCCESS)
			return rc;
		/* trim the scatter list to exactly the read length */
		t->iovn = 0;
		for (int i = 0; i < n && acc < want; i++) {
			if (t->iov[i].iov_len > want - acc)
				t->iov[i].iov_len = want - acc;
			acc += t->iov[i].iov_len;
			t->iovn = i + 1;
		}
		t->xfer_len = want;
		return DOCA_SUCCESS;
	}
	case SD_T_CMP_SWP:
	case SD_T_FETCH_ADD: {
		const struct doca_buf *r = t->result;

		if (!remote_ok(t->dst))
			return why(t, DOCA_ERROR_INVALID_VALUE, "the atomic target is not a remote buffer");
		if (!r)
			return why(t, DOCA_ERROR_INVALID_VALUE, "no result buffer");
		if ((uintptr_t)t->dst->data % 8 != 0)
			return why(t, DOCA_ERROR_INVALID_VALUE, "the atomic target 0x%llx is not 8-byte aligned",
				   (unsigned long long)(uintptr_t)t->dst->data);
		if (remote_room(t->dst) < 8)
			return why(t, DOCA_ERROR_INVALID_VALUE, "the remote atomic target holds %llu bytes, needs 8",
				   (unsigned long long)remote_room(t->dst));
		if ((size_t)((r->head + r->len) - (r->data + r->data_len)) < 8)
			return why(t, DOCA_ERROR_INVALID_VALUE, "the result buffer has room for %llu bytes, needs 8",
				   (unsigned long long)((r->head + r->len) - (r->data + r->data_len)));
		t->xfer_len = 8;
		return local_ok(t, r, 1, "result buffer");
	}
	default:
		return DOCA_ERROR_INVALID_VALUE;
	}
}

void sd_rtask_start(struct sd_rtask *t, struct sd_link *l)
{
	struct sd_hdr h;
	const struct doca_buf *r = NULL;
	int payload = 0;

	memset(&h, 0, sizeof(h));
	h.req_id = l->next_req_id++;
	switch (t->type) {
	case SD_T_SEND:
		h.opcode = SD_OP_SEND;
		payload = 1;
		h.budget_ms = sd_rnr_budget_ms(t->rdma);
		break;
	case SD_T_SEND_IMM:
		h.opcode = SD_OP_SEND_IMM;
		payload = 1;
		h.budget_ms = sd_rnr_budget_ms(t->rdma);
		break;
	case SD_T_WRITE:
		h.opcode = SD_OP_WRITE;
		payload = 1;
		r = t->dst;
		break;
	case SD_T_WRITE_IMM:
		h.opcode = SD_OP_WRITE_IMM;
		payload = 1;
		r = t->dst;
		h.budget_ms = sd_rnr_budget_ms(t->rdma);
		break;
	case SD_T_READ:
		h.opcode = SD_OP_READ;
		r = t->src;
		h.rlen = t->xfer_len;
		break;
	case SD_T_CMP_SWP:
		h.opcode = SD_OP_CMP_SWP;
		r = t->dst;
		h.arg0 = t->arg0;
		h.arg1 = t->arg1;
		break;
	case SD_T_FETCH_ADD:
		h.opcode = SD_OP_FETCH_ADD;
		r = t->dst;
		h.arg0 = t->arg0;
		break;
	default:
		break;
	}
	memcpy(h.imm, &t->imm, 4);
	if (r) {
		h.instance = r->mmap->peer_instance;
		h.map_id = r->mmap->id;
		memcpy(h.key, r->mmap->key, SD_KEY_LEN);
		h.raddr = (uint64_t)(uintptr_t)r->data;
	}
	memset(&t->tx, 0, sizeof(t->tx));
	if (payload) {
		h.payload_len = (uint32_t)t->xfer_len;
		t->tx.iov = t->iov;
		t->tx.iovcnt = t->iovn;
	}
	sd_hdr_encode(&h, t->tx.hdr);
	t->tx.total = SD_HDR_LEN + (payload ? t->xfer_len : 0);
	t->tx.op = t;
	sd_link_queue(l, &t->tx);
}

/* A one-sided write or read on the same-host transport of link l, when the
 * link is idle (nothing queued or awaiting a response: ordering with the TCP
 * path, completions in order): 1 when done (its completion is queued), 0 to
 * go over TCP. Engine lock held. */
static int xport_try(struct sd_rtask *t, struct sd_link *l)
{
	const struct doca_buf *r;
	const struct doca_mmap *m;
	int write;

	if (!l->xpeer || l->txq_head || l->out_head || l->parked || l->dead || l->draining)
		return 0;
	if (t->type == SD_T_WRITE)
		write = 1;
	else if (t->type == SD_T_READ)
		write = 0;
	else
		return 0;
	r = write ? t->dst : t->src;
	m = r ? r->mmap : NULL;
	if (!m || !m->remote)
		return 0;
	if (!sd_xport_op(l->xpeer, write, t->iov, t->iovn, t->xfer_len, &m->rkey, (uint64_t)(uintptr_t)r->data))
		return 0;
	if (!write) {
		sd_buf_tail_commit(t->dst, t->xfer_len);
		t->res_len = (uint32_t)t->xfer_len;
	}
	sd_rtask_complete(t, DOCA_SUCCESS);
	return 1;
}

static doca_error_t rtask_submit(struct doca_task *task)
{
	struct sd_rtask *t = (struct sd_rtask *)task;
	struct doca_rdma *rdma = t->rdma;
	struct doca_rdma_connection *c = t->conn;
	doca_error_t rc;

	t->detail[0] = 0;
	rc = prepare(t);
	if (rc != DOCA_SUCCESS)
		return rc;
	if (t->type != SD_T_RECV && !c)
		return why(t, DOCA_ERROR_INVALID_VALUE, "no connection");
	if (t->type != SD_T_RECV && c->rdma != rdma)
		return why(t, DOCA_ERROR_INVALID_VALUE, "the connection belongs to another RDMA context");
	sd_eng_lock();
	if (!rdma->lg.running) {
		rc = DOCA_ERROR_BAD_STATE;
	} else if (t->type == SD_T_RECV) {
		t->qnext = NULL;
		if (rdma->rq_tail)
			rdma->rq_tail->qnext = t;
		else
			rdma->rq_head = t;
		rdma->rq_tail = t;
		if (rdma->lg.nparked)
			sd_eng_kick();
	} else if (c->state == SDC_ESTABLISHED && c->link) {
		struct sd_link *l = c->link;

		if (sd_prov_try(t, c, l)) {
			/* taken by the provider (SOFTDOCA_PROVIDER), or held behind its operations */
		} else if (xport_try(t, l)) {
			/* done over the same-host transport (completion queued) */
		} else {
			sd_rtask_start(t, l);
			if (sd_submit_flags & DOCA_TASK_SUBMIT_FLAG_FLUSH)
				sd_link_submit_flush(l);
			else
				l->unflushed = 1;
		}
	} else if (c->state == SDC_CONNECTING || c->state == SDC_ACCEPTING) {
		t->qnext = NULL;
		if (c->wq_tail)
			c->wq_tail->qnext = t;
		else
			c->wq_head = t;
		c->wq_tail = t;
	} else {
		rc = why(t, DOCA_ERROR_NOT_CONNECTED, "connection %u is %s%s%s", c->id,
			 c->state == SDC_CLOSED ? "closed" : c->state == SDC_EXPORTED ? "exported but not connected"
											 : "not yet accepted",
			 c->why[0] ? ": " : "", c->why);
	}
	if (sd_submit_flags & DOCA_TASK_SUBMIT_FLAG_FLUSH)
		sd_prov_submit_end(); /* the burst's provider work: progressed here, or the engine woken */
	sd_eng_unlock();
	return rc;
}

doca_error_t sd_rtask_submit(struct doca_task *task)
{
	return rtask_submit(task);
}

void sd_rtask_release(struct doca_task *task)
{
	rtask_release(task);
}

const char *sd_rtask_detail(const struct doca_task *task)
{
	if (!task || (task->ops != &rtask_ops && !sd_rdma_se_is_task(task)))
		return NULL;
	return ((const struct sd_rtask *)task)->detail;
}

static const struct sd_task_ops rtask_ops = {
	.name = "rdma",
	.submit = rtask_submit,
	.invoke = rtask_invoke,
	.release = rtask_release,
};

