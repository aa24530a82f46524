/* RDMA send with immediate: the requester sends the message into a receive the responder posted. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "rdma_common.h"

DOCA_LOG_REGISTER(RDMA_TEST::SEND_IMM);

static void send_imm_ok(struct doca_rdma_task_send_imm *task, union doca_data task_ud, union doca_data ctx_ud)
{
	(void)task_ud;
	rt_task_done(doca_rdma_task_send_imm_as_task(task), ctx_ud, true);
}

static void send_imm_err(struct doca_rdma_task_send_imm *task, union doca_data task_ud, union doca_data ctx_ud)
{
	(void)task_ud;
	rt_task_done(doca_rdma_task_send_imm_as_task(task), ctx_ud, false);
}

static doca_error_t configure(struct rt *rt)
{
	doca_error_t rc = doca_rdma_task_send_imm_set_conf(rt->rdma, send_imm_ok, send_imm_err, 4);

	if (rc == DOCA_SUCCESS)
		rc = rt_receive_set_conf(rt);
	return rc;
}

static doca_error_t responder(struct rt *rt)
{
	struct doca_rdma_task_receive *task;
	doca_error_t rc = rt_post_receive(rt, rt->mem, RT_MEM_SIZE, &task);

	if (rc == DOCA_SUCCESS)
		rc = rt_signal(rt, "ready");
	if (rc == DOCA_SUCCESS)
		rc = rt_wait_tasks(rt, 1);
	if (rc == DOCA_SUCCESS && doca_rdma_task_receive_get_result_len(task) != strlen(rt->cfg->message) + 1)
		rc = DOCA_ERROR_UNEXPECTED;
	if (rc == DOCA_SUCCESS) {
	if (doca_rdma_task_receive_get_result_opcode(task) != DOCA_RDMA_OPCODE_RECV_SEND_WITH_IMM ||
	    ntohl(doca_rdma_task_receive_get_result_immediate_data(task)) != 0xC0FFEE01) {
		DOCA_LOG_ERR("wrong opcode or immediate");
		rc = DOCA_ERROR_UNEXPECTED;
	} else {
		DOCA_LOG_INFO("responder: immediate 0x%08x", ntohl(doca_rdma_task_receive_get_result_immediate_data(task)));
	}
	}
	rt_free_receive(task);
	if (rc != DOCA_SUCCESS)
		return rc;
	DOCA_LOG_INFO("responder: received \"%s\"", rt->mem);
	if (strcmp(rt->mem, rt->cfg->message))
		return DOCA_ERROR_UNEXPECTED;
	return rt_signal(rt, "done");
}

static doca_error_t requester(struct rt *rt)
{
	struct doca_buf *src = NULL;
	struct doca_rdma_task_send_imm *task;
	union doca_data ud = {.u64 = 0};
	doca_error_t rc;

	strcpy(rt->mem, rt->cfg->message);
	rc = rt_wait(rt, "ready");
	if (rc == DOCA_SUCCESS)
		rc = doca_buf_inventory_buf_get_by_data(rt->inv, rt->mmap, rt->mem, strlen(rt->mem) + 1, &src);
	if (rc == DOCA_SUCCESS)
		rc = doca_rdma_task_send_imm_allocate_init(rt->rdma, rt->conn, src, htonl(0xC0FFEE01), ud, &task);
	if (rc == DOCA_SUCCESS) {
		rc = rt_submit(rt, doca_rdma_task_send_imm_as_task(task));
		doca_task_free(doca_rdma_task_send_imm_as_task(task));
	}
	if (src)
		doca_buf_dec_refcount(src, NULL);
	if (rc == DOCA_SUCCESS)
		DOCA_LOG_INFO("requester: sent \"%s\"", rt->mem);
	/* stay connected until the responder has checked what arrived */
	return rc == DOCA_SUCCESS ? rt_wait(rt, "done") : rc;
}

int main(int argc, char **argv)
{
	struct rt_cfg cfg;
	struct rt rt;
	doca_error_t rc = rt_args(argc, argv, &cfg);

	if (rc != DOCA_SUCCESS)
		return 2;
	rc = rt_open(&rt, &cfg, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE,
		     DOCA_ACCESS_FLAG_LOCAL_READ_WRITE, configure);
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
