/* test_buf_pool: doca_buf_pool over softdoca (soft_lo): layout, alignment,
 * exhaustion, lifecycle and error codes. One line per check, a summary line,
 * non-zero exit on failure. */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct doca_mmap *map_of(struct doca_dev *dev, void *mem, size_t len, int start)
{
	struct doca_mmap *m = NULL;

	RC(doca_mmap_create(&m), DOCA_SUCCESS);
	RC(doca_mmap_set_memrange(m, mem, len), DOCA_SUCCESS);
	RC(doca_mmap_set_permissions(m, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_WRITE), DOCA_SUCCESS);
	RC(doca_mmap_add_dev(m, dev), DOCA_SUCCESS);
	if (start)
		RC(doca_mmap_start(m), DOCA_SUCCESS);
	return m;
}

static void test_args(struct doca_mmap *m)
{
	struct doca_buf_pool *p = NULL;
	struct doca_mmap *empty = NULL;

	RC(doca_buf_pool_create(0, 64, m, &p), DOCA_ERROR_INVALID_VALUE);
	RC(doca_buf_pool_create(4, 0, m, &p), DOCA_ERROR_INVALID_VALUE);
	RC(doca_buf_pool_create(4, 64, NULL, &p), DOCA_ERROR_INVALID_VALUE);
	RC(doca_buf_pool_create(4, 64, m, NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_create(&empty), DOCA_SUCCESS);
	RC(doca_buf_pool_create(4, 64, empty, &p), DOCA_ERROR_INVALID_VALUE); /* no memory range */
	RC(doca_mmap_destroy(empty), DOCA_SUCCESS);
	RC(doca_buf_pool_create(4, 64, empty, &p), DOCA_ERROR_BAD_STATE);     /* destroyed mmap */
	RC(doca_buf_pool_destroy(NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_buf_pool_start(NULL), DOCA_ERROR_INVALID_VALUE);
}

static void test_pool(struct doca_mmap *m, uint8_t *mem, size_t memlen)
{
	enum { N = 10, SZ = 100, AL = 64, STRIDE = 128 };
	struct doca_buf_pool *p = NULL;
	struct doca_buf *bufs[N + 1] = {0}, *extra = NULL;
	uint32_t u32 = 0;
	size_t sz = 0, len = 0;
	union doca_data ud = {.u64 = 0};
	void *head = NULL, *data = NULL;
	int distinct = 1, placed = 1;

	(void)memlen;
	RC(doca_buf_pool_create(N, SZ, m, &p), DOCA_SUCCESS);
	RC(doca_buf_pool_get_num_elements(p, &u32), DOCA_SUCCESS);
	CHECK(u32 == N, "num elements %u", u32);
	RC(doca_buf_pool_get_num_elements(p, NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_buf_pool_get_element_alignment(p, &sz), DOCA_SUCCESS);
	CHECK(sz == 1, "default alignment 1 (got %zu)", sz);
	RC(doca_buf_pool_get_user_data(p, &ud), DOCA_SUCCESS);
	CHECK(ud.u64 == 0, "default user data 0");
	RC(doca_buf_pool_set_user_data(p, (union doca_data){.u64 = 42}), DOCA_SUCCESS);
	RC(doca_buf_pool_get_user_data(p, &ud), DOCA_SUCCESS);
	CHECK(ud.u64 == 42, "user data 42");
	RC(doca_buf_pool_set_element_alignment(p, 0), DOCA_ERROR_INVALID_VALUE);
	RC(doca_buf_pool_set_element_alignment(p, 48), DOCA_ERROR_INVALID_VALUE);
	RC(doca_buf_pool_set_element_alignment(p, AL), DOCA_SUCCESS);
	RC(doca_buf_pool_get_element_alignment(p, &sz), DOCA_SUCCESS);
	CHECK(sz == AL, "alignment %zu", sz);
	RC(doca_buf_pool_buf_alloc(p, &bufs[0]), DOCA_ERROR_BAD_STATE);   /* not started */
	RC(doca_buf_pool_stop(p), DOCA_ERROR_BAD_STATE);
	RC(doca_buf_pool_start(p), DOCA_SUCCESS);
	RC(doca_buf_pool_start(p), DOCA_ERROR_BAD_STATE);
	RC(doca_buf_pool_set_element_alignment(p, 8), DOCA_ERROR_BAD_STATE);
	RC(doca_buf_pool_set_user_data(p, (union doca_data){.u64 = 7}), DOCA_ERROR_BAD_STATE);
	RC(doca_buf_pool_buf_alloc(p, NULL), DOCA_ERROR_INVALID_VALUE);
	for (int i = 0; i < N; i++) {
		RC(doca_buf_pool_buf_alloc(p, &bufs[i]), DOCA_SUCCESS);
		doca_buf_get_head(bufs[i], &head);
		doca_buf_get_data(bufs[i], &data);
		doca_buf_get_len(bufs[i], &len);
		doca_buf_get_data_len(bufs[i], &sz);
		/* mem is 4096-aligned: element k starts at mem + k * 128 */
		if ((uintptr_t)head % AL || ((uint8_t *)head - mem) % STRIDE || (uint8_t *)head - mem >= N * STRIDE ||
		    data != head || len != SZ || sz != 0)
			placed = 0;
		for (int j = 0; j < i; j++) {
			void *other = NULL;
			doca_buf_get_head(bufs[j], &other);
			if (other == head)
				distinct = 0;
		}
		RC(doca_buf_pool_get_num_free_elements(p, &u32), DOCA_SUCCESS);
		CHECK(u32 == (uint32_t)(N - 1 - i), "free elements %u after %d allocations", u32, i + 1);
	}
	CHECK(placed, "every buf: its own 64-aligned element (stride 128), data = head, len 100, data_len 0");
	CHECK(distinct, "the %d bufs describe %d distinct elements", N, N);
	RC(doca_buf_pool_buf_alloc(p, &bufs[N]), DOCA_ERROR_EMPTY);
	RC(doca_buf_pool_stop(p), DOCA_ERROR_IN_USE);
	RC(doca_buf_pool_destroy(p), DOCA_ERROR_IN_USE);
	RC(doca_mmap_stop(m), DOCA_ERROR_NOT_PERMITTED);        /* bufs still point into it */
	/* use the memory of one element */
	doca_buf_get_head(bufs[3], &head);
	memset(head, 0xab, SZ);
	RC(doca_buf_set_data_len(bufs[3], SZ), DOCA_SUCCESS);
	doca_buf_get_data_len(bufs[3], &sz);
	CHECK(sz == SZ && ((uint8_t *)head)[SZ - 1] == 0xab, "element memory written through its buf");
	/* return one and take it again: the same element, empty again */
	RC(doca_buf_dec_refcount(bufs[3], NULL), DOCA_SUCCESS);
	RC(doca_buf_pool_get_num_free_elements(p, &u32), DOCA_SUCCESS);
	CHECK(u32 == 1, "one free after a buf was returned");
	RC(doca_buf_pool_buf_alloc(p, &extra), DOCA_SUCCESS);
	doca_buf_get_head(extra, &data);
	doca_buf_get_data_len(extra, &sz);
	CHECK(data == head && sz == 0, "re-allocated buf: the returned element, data_len 0");
	bufs[3] = extra;
	/* refcount: an extra reference keeps it out of the pool */
	RC(doca_buf_inc_refcount(bufs[0], NULL), DOCA_SUCCESS);
	RC(doca_buf_dec_refcount(bufs[0], NULL), DOCA_SUCCESS);
	RC(doca_buf_pool_get_num_free_elements(p, &u32), DOCA_SUCCESS);
	CHECK(u32 == 0, "a buf with a second reference stays allocated");
	for (int i = 0; i < N; i++)
		doca_buf_dec_refcount(bufs[i], NULL);
	RC(doca_buf_pool_get_num_free_elements(p, &u32), DOCA_SUCCESS);
	CHECK(u32 == N, "all %d returned", N);
	RC(doca_buf_pool_stop(p), DOCA_SUCCESS);
	RC(doca_buf_pool_buf_alloc(p, &extra), DOCA_ERROR_BAD_STATE);
	RC(doca_buf_pool_set_element_alignment(p, 8), DOCA_SUCCESS);   /* stopped: settable again */
	RC(doca_buf_pool_start(p), DOCA_SUCCESS);
	RC(doca_buf_pool_destroy(p), DOCA_SUCCESS);                      /* destroy stops implicitly */
	RC(doca_buf_pool_get_num_elements(p, &u32), DOCA_ERROR_BAD_STATE); /* destroyed handle */
	RC(doca_buf_pool_destroy(p), DOCA_ERROR_BAD_STATE);
}

static void test_layout_limits(struct doca_dev *dev, struct doca_mmap *m, uint8_t *mem, size_t memlen)
{
	struct doca_buf_pool *p = NULL;
	struct doca_mmap *stopped = map_of(dev, mem, memlen, 0);
	struct doca_buf *b = NULL;
	void *head = NULL;

	/* 4096 bytes: 64 x 64 fit exactly, 65 do not */
	RC(doca_buf_pool_create(64, 64, m, &p), DOCA_SUCCESS);
	RC(doca_buf_pool_start(p), DOCA_SUCCESS);
	RC(doca_buf_pool_destroy(p), DOCA_SUCCESS);
	RC(doca_buf_pool_create(65, 64, m, &p), DOCA_SUCCESS);
	RC(doca_buf_pool_start(p), DOCA_ERROR_INITIALIZATION);
	RC(doca_buf_pool_destroy(p), DOCA_SUCCESS);
	/* 2 x 2048 with alignment 4096 on a range starting 8 bytes in: the first element moves up */
	{
		struct doca_mmap *off = NULL;

		RC(doca_mmap_create(&off), DOCA_SUCCESS);
		RC(doca_mmap_set_memrange(off, mem + 8, memlen - 8), DOCA_SUCCESS);
		RC(doca_mmap_add_dev(off, dev), DOCA_SUCCESS);
		RC(doca_mmap_start(off), DOCA_SUCCESS);
		RC(doca_buf_pool_create(1, 100, off, &p), DOCA_SUCCESS);
		RC(doca_buf_pool_set_element_alignment(p, 4096), DOCA_SUCCESS);
		RC(doca_buf_pool_start(p), DOCA_ERROR_INITIALIZATION);  /* the aligned start is past the range */
		RC(doca_buf_pool_set_element_alignment(p, 16), DOCA_SUCCESS);
		RC(doca_buf_pool_start(p), DOCA_SUCCESS);
		RC(doca_buf_pool_buf_alloc(p, &b), DOCA_SUCCESS);
		doca_buf_get_head(b, &head);
		CHECK((uint8_t *)head == mem + 16, "first element at the first 16-aligned address of the range");
		doca_buf_dec_refcount(b, NULL);
		RC(doca_buf_pool_destroy(p), DOCA_SUCCESS);
		RC(doca_mmap_destroy(off), DOCA_SUCCESS);
	}
	/* an mmap that is not started */
	RC(doca_buf_pool_create(2, 64, stopped, &p), DOCA_SUCCESS);
	RC(doca_buf_pool_start(p), DOCA_ERROR_BAD_STATE);
	RC(doca_mmap_start(stopped), DOCA_SUCCESS);
	RC(doca_buf_pool_start(p), DOCA_SUCCESS);
	RC(doca_buf_pool_destroy(p), DOCA_SUCCESS);
	RC(doca_mmap_destroy(stopped), DOCA_SUCCESS);
}

int main(void)
{
	struct doca_dev *dev;
	size_t memlen = 4096;
	uint8_t *mem = aligned_alloc(4096, memlen);
	struct doca_mmap *m;

	setvbuf(stdout, NULL, _IOLBF, 0);
	dev = open_soft_lo();
	CHECK(dev != NULL, "opened soft_lo");
	if (!dev)
		return 1;
	m = map_of(dev, mem, memlen, 1);
	test_args(m);
	test_pool(m, mem, memlen);
	test_layout_limits(dev, m, mem, memlen);
	RC(doca_mmap_stop(m), DOCA_SUCCESS);
	RC(doca_mmap_destroy(m), DOCA_SUCCESS);
	RC(doca_dev_close(dev), DOCA_SUCCESS);
	free(mem);
	return check_summary("test_buf_pool");
}
