/* RDMA read: the requester reads the message from the responder's exported memory. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "rdma_common.h"

DOCA_LOG_REGISTER(RDMA_TEST::READ);

static void read_ok(struct doca_rdma_task_read *task, union doca_data task_ud, union doca_data ctx_ud)
{
	(void)task_ud;
	rt_task_done(doca_rdma_task_read_as_task(task), ctx_ud, true);
}

static void read_err(struct doca_rdma_task_read *task, union doca_data task_ud, union doca_data ctx_ud)
{
	(void)task_ud;
	rt_task_done(doca_rdma_task_read_as_task(task), ctx_ud, false);
}

static doca_error_t configure(struct rt *rt)
{
	return doca_rdma_task_read_set_conf(rt->rdma, read_ok, read_err, 4);
}

static doca_error_t responder(struct rt *rt)
{
	doca_error_t rc;

	strcpy(rt->mem, rt->cfg->message);
	rc = rt_export_mmap(rt, "responder.mmap");
	if (rc == DOCA_SUCCESS)
		rc = rt_wait(rt, "done");
	return rc;
}

static doca_error_t requester(struct rt *rt)
{
	struct doca_buf *src = NULL, *dst = NULL;
	struct doca_rdma_task_read *task;
	union doca_data ud = {.u64 = 0};
	size_t len = strlen(rt->cfg->message) + 1;
	void *raddr;
	size_t rlen;
	doca_error_t rc = rt_import_mmap(rt, "responder.mmap");

	if (rc != DOCA_SUCCESS)
		return rc;
	doca_mmap_get_memrange(rt->remote, &raddr, &rlen);
	rc = doca_buf_inventory_buf_get_by_data(rt->inv, rt->remote, raddr, len, &src);
	if (rc == DOCA_SUCCESS)
		rc = doca_buf_inventory_buf_get_by_addr(rt->inv, rt->mmap, rt->mem, RT_MEM_SIZE, &dst);
	if (rc == DOCA_SUCCESS)
		rc = doca_rdma_task_read_allocate_init(rt->rdma, rt->conn, src, dst, ud, &task);
	if (rc == DOCA_SUCCESS) {
		rc = rt_submit(rt, doca_rdma_task_read_as_task(task));
		if (rc == DOCA_SUCCESS && doca_rdma_task_read_get_result_len(task) != len)
			rc = DOCA_ERROR_UNEXPECTED;
		doca_task_free(doca_rdma_task_read_as_task(task));
	}
	if (src)
		doca_buf_dec_refcount(src, NULL);
	if (dst)
		doca_buf_dec_refcount(dst, NULL);
	if (rc != DOCA_SUCCESS)
		return rc;
	DOCA_LOG_INFO("requester: read \"%s\"", rt->mem);
	if (strcmp(rt->mem, rt->cfg->message))
		return DOCA_ERROR_UNEXPECTED;
	return rt_signal(rt, "done");
}

int main(int argc, char **argv)
{
	struct rt_cfg cfg;
	struct rt rt;
	doca_error_t rc = rt_args(argc, argv, &cfg);

	if (rc != DOCA_SUCCESS)
		return 2;
	rc = rt_open(&rt, &cfg, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ,
		     DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ, configure);
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
