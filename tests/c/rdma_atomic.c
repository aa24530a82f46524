/* RDMA atomics: fetch-and-add then compare-and-swap on a 64-bit word of the responder. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "rdma_common.h"

DOCA_LOG_REGISTER(RDMA_TEST::ATOMIC);

static void atomic_fetch_add_ok(struct doca_rdma_task_atomic_fetch_add *task, union doca_data task_ud, union doca_data ctx_ud)
{
	(void)task_ud;
	rt_task_done(doca_rdma_task_atomic_fetch_add_as_task(task), ctx_ud, true);
}

static void atomic_fetch_add_err(struct doca_rdma_task_atomic_fetch_add *task, union doca_data task_ud, union doca_data ctx_ud)
{
	(void)task_ud;
	rt_task_done(doca_rdma_task_atomic_fetch_add_as_task(task), ctx_ud, false);
}

static void atomic_cmp_swp_ok(struct doca_rdma_task_atomic_cmp_swp *task, union doca_data task_ud, union doca_data ctx_ud)
{
	(void)task_ud;
	rt_task_done(doca_rdma_task_atomic_cmp_swp_as_task(task), ctx_ud, true);
}

static void atomic_cmp_swp_err(struct doca_rdma_task_atomic_cmp_swp *task, union doca_data task_ud, union doca_data ctx_ud)
{
	(void)task_ud;
	rt_task_done(doca_rdma_task_atomic_cmp_swp_as_task(task), ctx_ud, false);
}

static doca_error_t configure(struct rt *rt)
{
	doca_error_t rc = doca_rdma_task_atomic_fetch_add_set_conf(rt->rdma, atomic_fetch_add_ok,
								   atomic_fetch_add_err, 2);

	if (rc == DOCA_SUCCESS)
		rc = doca_rdma_task_atomic_cmp_swp_set_conf(rt->rdma, atomic_cmp_swp_ok, atomic_cmp_swp_err, 2);
	return rc;
}

static doca_error_t responder(struct rt *rt)
{
	uint64_t *word = (uint64_t *)rt->mem;
	doca_error_t rc;

	*word = 40;
	rc = rt_export_mmap(rt, "responder.mmap");
	if (rc == DOCA_SUCCESS)
		rc = rt_wait(rt, "done");
	if (rc != DOCA_SUCCESS)
		return rc;
	DOCA_LOG_INFO("responder: word is %" PRIu64, *word);
	return *word == 1000 ? DOCA_SUCCESS : DOCA_ERROR_UNEXPECTED;
}

static doca_error_t requester(struct rt *rt)
{
	struct doca_buf *dst = NULL, *res = NULL;
	struct doca_rdma_task_atomic_fetch_add *fa;
	struct doca_rdma_task_atomic_cmp_swp *cs;
	union doca_data ud = {.u64 = 0};
	uint64_t *result = (uint64_t *)rt->mem, before_add = 0;
	void *raddr;
	size_t rlen;
	doca_error_t rc = rt_import_mmap(rt, "responder.mmap");

	if (rc != DOCA_SUCCESS)
		return rc;
	doca_mmap_get_memrange(rt->remote, &raddr, &rlen);
	rc = doca_buf_inventory_buf_get_by_data(rt->inv, rt->remote, raddr, 8, &dst);
	if (rc == DOCA_SUCCESS)
		rc = doca_buf_inventory_buf_get_by_addr(rt->inv, rt->mmap, rt->mem, 8, &res);
	if (rc == DOCA_SUCCESS)
		rc = doca_rdma_task_atomic_fetch_add_allocate_init(rt->rdma, rt->conn, dst, res, 2, ud, &fa);
	if (rc == DOCA_SUCCESS) {
		rc = rt_submit(rt, doca_rdma_task_atomic_fetch_add_as_task(fa));
		doca_task_free(doca_rdma_task_atomic_fetch_add_as_task(fa));
		before_add = *result;
	}
	if (rc == DOCA_SUCCESS) {
		doca_buf_reset_data_len(res);
		rc = doca_rdma_task_atomic_cmp_swp_allocate_init(rt->rdma, rt->conn, dst, res, 42, 1000, ud, &cs);
	}
	if (rc == DOCA_SUCCESS) {
		rc = rt_submit(rt, doca_rdma_task_atomic_cmp_swp_as_task(cs));
		doca_task_free(doca_rdma_task_atomic_cmp_swp_as_task(cs));
	}
	if (dst)
		doca_buf_dec_refcount(dst, NULL);
	if (res)
		doca_buf_dec_refcount(res, NULL);
	if (rc != DOCA_SUCCESS)
		return rc;
	DOCA_LOG_INFO("requester: fetch_add saw %" PRIu64 ", cmp_swp saw %" PRIu64, before_add, *result);
	if (before_add != 40 || *result != 42)
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
	rc = rt_open(&rt, &cfg, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_ATOMIC,
		     DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_ATOMIC, configure);
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
