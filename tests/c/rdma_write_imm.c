/* RDMA write with immediate: the responder learns of the write by a receive completion carrying the immediate. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "rdma_common.h"

DOCA_LOG_REGISTER(RDMA_TEST::WRITE_IMM);

static void write_imm_ok(struct doca_rdma_task_write_imm *task, union doca_data task_ud, union doca_data ctx_ud)
{
	(void)task_ud;
	rt_task_done(doca_rdma_task_write_imm_as_task(task), ctx_ud, true);
}

static void write_imm_err(struct doca_rdma_task_write_imm *task, union doca_data task_ud, union doca_data ctx_ud)
{
	(void)task_ud;
	rt_task_done(doca_rdma_task_write_imm_as_task(task), ctx_ud, false);
}

static doca_error_t configure(struct rt *rt)
{
	doca_error_t rc = doca_rdma_task_write_imm_set_conf(rt->rdma, write_imm_ok, write_imm_err, 4);

	if (rc == DOCA_SUCCESS)
		rc = rt_receive_set_conf(rt);
	return rc;
}

static doca_error_t responder(struct rt *rt)
{
	struct doca_rdma_task_receive *task;
	/* the receive the write_imm consumes: its buffer is not written */
	doca_error_t rc = rt_post_receive(rt, rt->mem + 2048, 64, &task);

	if (rc == DOCA_SUCCESS)
		rc = rt_export_mmap(rt, "responder.mmap");
	if (rc == DOCA_SUCCESS)
		rc = rt_wait_tasks(rt, 1);
	if (rc == DOCA_SUCCESS &&
	    (doca_rdma_task_receive_get_result_opcode(task) != DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM ||
	     ntohl(doca_rdma_task_receive_get_result_immediate_data(task)) != 0xBEEF0042)) {
		DOCA_LOG_ERR("wrong opcode or immediate");
		rc = DOCA_ERROR_UNEXPECTED;
	}
	rt_free_receive(task);
	if (rc != DOCA_SUCCESS)
		return rc;
	DOCA_LOG_INFO("responder: immediate 0xbeef0042, memory holds \"%s\"", rt->mem);
	if (strcmp(rt->mem, rt->cfg->message))
		return DOCA_ERROR_UNEXPECTED;
	return rt_signal(rt, "done");
}

static doca_error_t requester(struct rt *rt)
{
	struct doca_buf *src = NULL, *dst = NULL;
	struct doca_rdma_task_write_imm *task;
	union doca_data ud = {.u64 = 0};
	void *raddr;
	size_t rlen;
	doca_error_t rc;

	strcpy(rt->mem, rt->cfg->message);
	rc = rt_import_mmap(rt, "responder.mmap");
	if (rc != DOCA_SUCCESS)
		return rc;
	doca_mmap_get_memrange(rt->remote, &raddr, &rlen);
	rc = doca_buf_inventory_buf_get_by_data(rt->inv, rt->mmap, rt->mem, strlen(rt->mem) + 1, &src);
	if (rc == DOCA_SUCCESS)
		rc = doca_buf_inventory_buf_get_by_addr(rt->inv, rt->remote, raddr, 1024, &dst);
	if (rc == DOCA_SUCCESS)
		rc = doca_rdma_task_write_imm_allocate_init(rt->rdma, rt->conn, src, dst, htonl(0xBEEF0042), ud, &task);
	if (rc == DOCA_SUCCESS) {
		rc = rt_submit(rt, doca_rdma_task_write_imm_as_task(task));
		doca_task_free(doca_rdma_task_write_imm_as_task(task));
	}
	if (src)
		doca_buf_dec_refcount(src, NULL);
	if (dst)
		doca_buf_dec_refcount(dst, NULL);
	if (rc == DOCA_SUCCESS)
		DOCA_LOG_INFO("requester: wrote \"%s\" with immediate", rt->mem);
	return rc == DOCA_SUCCESS ? rt_wait(rt, "done") : rc;
}

int main(int argc, char **argv)
{
	struct rt_cfg cfg;
	struct rt rt;
	doca_error_t rc = rt_args(argc, argv, &cfg);

	if (rc != DOCA_SUCCESS)
		return 2;
	rc = rt_open(&rt, &cfg, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_WRITE,
		     DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_WRITE, configure);
	if (rc == DOCA_SUCCESS)
		rc = rt_connect(&rt);
	if (rc == DOCA_SUCCESS)
		rc = rt.responder ? responder(&rt) : requester(&rt);
	rt_close(&rt);
	if (rc != DOCA_SUCCESS) {
		DOCA_LOG_ERR("%s failed: %s", cfg.role, doca_error_get_descr(rc));
		return 1;
	}
	return 0;
}
