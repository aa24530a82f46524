/*
 * softdoca RDMA tasks: the public per-type API (set_conf, allocate_init,
 * as_task, getters and setters). Pools, validation and submission are in
 * rdma_tasks.c.
 */
#include "rdma.h"

/* ---------------------------------------------------------------- API */
#define T(x) (&(x)->t)

#define COMMON(name, TYPE)                                                                                 \
	SD_EXPORT doca_error_t doca_rdma_task_##name##_set_conf(                                             \
		struct doca_rdma *rdma, doca_rdma_task_##name##_completion_cb_t ok,                          \
		doca_rdma_task_##name##_completion_cb_t err, uint32_t num)                                    \
	{                                                                                                  \
		return sd_rtask_set_conf(rdma, TYPE, (sd_fnptr)ok, (sd_fnptr)err, num);                               \
	}                                                                                                  \
	SD_EXPORT struct doca_task *doca_rdma_task_##name##_as_task(struct doca_rdma_task_##name *task)     \
	{                                                                                                  \
		return task ? &task->t.base : NULL;                                                        \
	}

#define CONN(name)                                                                                         \
	SD_EXPORT void doca_rdma_task_##name##_set_rdma_connection(struct doca_rdma_task_##name *task,       \
								  struct doca_rdma_connection *c)            \
	{                                                                                                  \
		if (task && task->t.conn != c) {                                                           \
			sd_conn_ref(c);                                                                    \
			sd_conn_unref(task->t.conn);                                                       \
			task->t.conn = c;                                                                  \
		}                                                                                          \
	}                                                                                                  \
	SD_EXPORT const struct doca_rdma_connection *doca_rdma_task_##name##_get_rdma_connection(            \
		const struct doca_rdma_task_##name *task)                                                    \
	{                                                                                                  \
		return task ? task->t.conn : NULL;                                                         \
	}

#define SRC(name)                                                                                          \
	SD_EXPORT void doca_rdma_task_##name##_set_src_buf(struct doca_rdma_task_##name *task,               \
							  const struct doca_buf *b)                          \
	{                                                                                                  \
		if (task)                                                                                  \
			task->t.src = (struct doca_buf *)b;                                                \
	}                                                                                                  \
	SD_EXPORT const struct doca_buf *doca_rdma_task_##name##_get_src_buf(                                \
		const struct doca_rdma_task_##name *task)                                                    \
	{                                                                                                  \
		return task ? task->t.src : NULL;                                                          \
	}

#define DST(name)                                                                                          \
	SD_EXPORT void doca_rdma_task_##name##_set_dst_buf(struct doca_rdma_task_##name *task,               \
							  struct doca_buf *b)                                \
	{                                                                                                  \
		if (task)                                                                                  \
			task->t.dst = b;                                                                   \
	}                                                                                                  \
	SD_EXPORT struct doca_buf *doca_rdma_task_##name##_get_dst_buf(const struct doca_rdma_task_##name *task) \
	{                                                                                                  \
		return task ? task->t.dst : NULL;                                                          \
	}

#define IMM(name)                                                                                          \
	SD_EXPORT void doca_rdma_task_##name##_set_immediate_data(struct doca_rdma_task_##name *task,        \
								 doca_be32_t imm)                            \
	{                                                                                                  \
		if (task)                                                                                  \
			task->t.imm = imm;                                                                 \
	}                                                                                                  \
	SD_EXPORT doca_be32_t doca_rdma_task_##name##_get_immediate_data(const struct doca_rdma_task_##name *task) \
	{                                                                                                  \
		return task ? task->t.imm : 0;                                                             \
	}

#define RESULT(name)                                                                                       \
	SD_EXPORT void doca_rdma_task_##name##_set_result_buf(struct doca_rdma_task_##name *task,            \
							     struct doca_buf *b)                             \
	{                                                                                                  \
		if (task)                                                                                  \
			task->t.result = b;                                                                \
	}                                                                                                  \
	SD_EXPORT struct doca_buf *doca_rdma_task_##name##_get_result_buf(                                   \
		const struct doca_rdma_task_##name *task)                                                    \
	{                                                                                                  \
		return task ? task->t.result : NULL;                                                       \
	}

#define U64(name, what, field)                                                                             \
	SD_EXPORT void doca_rdma_task_##name##_set_##what(struct doca_rdma_task_##name *task, uint64_t v)    \
	{                                                                                                  \
		if (task)                                                                                  \
			task->t.field = v;                                                                 \
	}                                                                                                  \
	SD_EXPORT uint64_t doca_rdma_task_##name##_get_##what(const struct doca_rdma_task_##name *task)      \
	{                                                                                                  \
		return task ? task->t.field : 0;                                                           \
	}

/* receive */
COMMON(receive, SD_T_RECV)
DST(receive)

SD_EXPORT doca_error_t doca_rdma_task_receive_allocate_init(struct doca_rdma *rdma, struct doca_buf *dst,
							    union doca_data ud, struct doca_rdma_task_receive **task)
{
	struct sd_rtask *t;
	doca_error_t rc = sd_rtask_alloc(rdma, SD_T_RECV, NULL, ud, task ? &t : NULL);

	if (rc == DOCA_SUCCESS) {
		t->dst = dst;
		*task = (struct doca_rdma_task_receive *)t;
	}
	return rc;
}

SD_EXPORT enum doca_rdma_opcode doca_rdma_task_receive_get_result_opcode(const struct doca_rdma_task_receive *task)
{
	return task ? task->t.res_opcode : DOCA_RDMA_OPCODE_RECV_SEND;
}

SD_EXPORT uint32_t doca_rdma_task_receive_get_result_len(const struct doca_rdma_task_receive *task)
{
	return task ? task->t.res_len : 0;
}

SD_EXPORT doca_be32_t doca_rdma_task_receive_get_result_immediate_data(const struct doca_rdma_task_receive *task)
{
	return task ? task->t.res_imm : 0;
}

SD_EXPORT const struct doca_rdma_connection *
doca_rdma_task_receive_get_result_rdma_connection(const struct doca_rdma_task_receive *task)
{
	return task ? task->t.res_conn : NULL;
}

/* send */
COMMON(send, SD_T_SEND)
SRC(send)
CONN(send)

SD_EXPORT doca_error_t doca_rdma_task_send_allocate_init(struct doca_rdma *rdma, struct doca_rdma_connection *c,
							 const struct doca_buf *src, union doca_data ud,
							 struct doca_rdma_task_send **task)
{
	struct sd_rtask *t;
	doca_error_t rc = sd_rtask_alloc(rdma, SD_T_SEND, c, ud, task ? &t : NULL);

	if (rc == DOCA_SUCCESS) {
		t->src = (struct doca_buf *)src;
		*task = (struct doca_rdma_task_send *)t;
	}
	return rc;
}

/* send_imm */
COMMON(send_imm, SD_T_SEND_IMM)
SRC(send_imm)
IMM(send_imm)
CONN(send_imm)

SD_EXPORT doca_error_t doca_rdma_task_send_imm_allocate_init(struct doca_rdma *rdma,
							     struct doca_rdma_connection *c,
							     const struct doca_buf *src, doca_be32_t imm,
							     union doca_data ud,
							     struct doca_rdma_task_send_imm **task)
{
	struct sd_rtask *t;
	doca_error_t rc = sd_rtask_alloc(rdma, SD_T_SEND_IMM, c, ud, task ? &t : NULL);

	if (rc == DOCA_SUCCESS) {
		t->src = (struct doca_buf *)src;
		t->imm = imm;
		*task = (struct doca_rdma_task_send_imm *)t;
	}
	return rc;
}

/* read */
COMMON(read, SD_T_READ)
SRC(read)
DST(read)
CONN(read)

SD_EXPORT doca_error_t doca_rdma_task_read_allocate_init(struct doca_rdma *rdma, struct doca_rdma_connection *c,
							 const struct doca_buf *src, struct doca_buf *dst,
							 union doca_data ud, struct doca_rdma_task_read **task)
{
	struct sd_rtask *t;
	doca_error_t rc = sd_rtask_alloc(rdma, SD_T_READ, c, ud, task ? &t : NULL);

	if (rc == DOCA_SUCCESS) {
		t->src = (struct doca_buf *)src;
		t->dst = dst;
		*task = (struct doca_rdma_task_read *)t;
	}
	return rc;
}

SD_EXPORT uint32_t doca_rdma_task_read_get_result_len(const struct doca_rdma_task_read *task)
{
	return task ? task->t.res_len : 0;
}

/* write */
COMMON(write, SD_T_WRITE)
SRC(write)
DST(write)
CONN(write)

SD_EXPORT doca_error_t doca_rdma_task_write_allocate_init(struct doca_rdma *rdma, struct doca_rdma_connection *c,
							  const struct doca_buf *src, struct doca_buf *dst,
							  union doca_data ud, struct doca_rdma_task_write **task)
{
	struct sd_rtask *t;
	doca_error_t rc = sd_rtask_alloc(rdma, SD_T_WRITE, c, ud, task ? &t : NULL);

	if (rc == DOCA_SUCCESS) {
		t->src = (struct doca_buf *)src;
		t->dst = dst;
		*task = (struct doca_rdma_task_write *)t;
	}
	return rc;
}

/* write_imm */
COMMON(write_imm, SD_T_WRITE_IMM)
SRC(write_imm)
DST(write_imm)
IMM(write_imm)
CONN(write_imm)

SD_EXPORT doca_error_t doca_rdma_task_write_imm_allocate_init(struct doca_rdma *rdma,
							      struct doca_rdma_connection *c,
							      const struct doca_buf *src, struct doca_buf *dst,
							      doca_be32_t imm, union doca_data ud,
							      struct doca_rdma_task_write_imm **task)
{
	struct sd_rtask *t;
	doca_error_t rc = sd_rtask_alloc(rdma, SD_T_WRITE_IMM, c, ud, task ? &t : NULL);

	if (rc == DOCA_SUCCESS) {
		t->src = (struct doca_buf *)src;
		t->dst = dst;
		t->imm = imm;
		*task = (struct doca_rdma_task_write_imm *)t;
	}
	return rc;
}

/* atomic cmp_swp */
COMMON(atomic_cmp_swp, SD_T_CMP_SWP)
DST(atomic_cmp_swp)
RESULT(atomic_cmp_swp)
U64(atomic_cmp_swp, cmp_data, arg0)
U64(atomic_cmp_swp, swap_data, arg1)
CONN(atomic_cmp_swp)

SD_EXPORT doca_error_t doca_rdma_task_atomic_cmp_swp_allocate_init(struct doca_rdma *rdma,
								   struct doca_rdma_connection *c,
								   struct doca_buf *dst, struct doca_buf *result,
								   uint64_t cmp, uint64_t swp, union doca_data ud,
								   struct doca_rdma_task_atomic_cmp_swp **task)
{
	struct sd_rtask *t;
	doca_error_t rc = sd_rtask_alloc(rdma, SD_T_CMP_SWP, c, ud, task ? &t : NULL);

	if (rc == DOCA_SUCCESS) {
		t->dst = dst;
		t->result = result;
		t->arg0 = cmp;
		t->arg1 = swp;
		*task = (struct doca_rdma_task_atomic_cmp_swp *)t;
	}
	return rc;
}

/* atomic fetch_add */
COMMON(atomic_fetch_add, SD_T_FETCH_ADD)
DST(atomic_fetch_add)
RESULT(atomic_fetch_add)
U64(atomic_fetch_add, add_data, arg0)
CONN(atomic_fetch_add)

SD_EXPORT doca_error_t doca_rdma_task_atomic_fetch_add_allocate_init(struct doca_rdma *rdma,
								     struct doca_rdma_connection *c,
								     struct doca_buf *dst, struct doca_buf *result,
								     uint64_t add, union doca_data ud,
								     struct doca_rdma_task_atomic_fetch_add **task)
{
	struct sd_rtask *t;
	doca_error_t rc = sd_rtask_alloc(rdma, SD_T_FETCH_ADD, c, ud, task ? &t : NULL);

	if (rc == DOCA_SUCCESS) {
		t->dst = dst;
		t->result = result;
		t->arg0 = add;
		*task = (struct doca_rdma_task_atomic_fetch_add *)t;
	}
	return rc;
}
