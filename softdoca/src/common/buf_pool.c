/*
 * doca_buf_pool: num_elements doca_bufs, each fixed to its own element_size
 * slice of an mmap's memory range for its whole life.
 *
 * Layout (computed at start): the first element begins at the first address
 * of the mmap's range aligned to element_alignment (default 1); elements
 * follow every round_up(element_size, element_alignment) bytes. A range too
 * small for that layout fails the start with DOCA_ERROR_INITIALIZATION.
 *
 * The bufs live in an internal doca_buf_inventory of num_elements
 * descriptors; the element of a buf is its index in that inventory, so a buf
 * always describes the same element. doca_buf_pool_buf_alloc hands out a buf
 * whose data section is empty (data = head, data_len 0, len = element_size);
 * doca_buf_dec_refcount to 0 returns it. Errors: stopped pool BAD_STATE, all
 * bufs out DOCA_ERROR_EMPTY (as doca_buf_pool.h documents), a pool (stop or
 * destroy) with bufs out DOCA_ERROR_IN_USE, setters while started BAD_STATE.
 * Destroy stops a started pool implicitly.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define SD_POOL_MAGIC 0x42504f4cu
#define SD_POOL_MAX_ELEMENTS (1u << 30)

struct doca_buf_pool {
	uint32_t magic;
	pthread_mutex_t lock;
	int started;
	size_t num, elem_size, align;
	struct doca_mmap *mmap;
	union doca_data user_data;
	struct doca_buf_inventory *inv;  /* num descriptors, one per element */
	struct doca_buf *first;          /* the inventory's descriptor array */
	uint8_t *base;                   /* first element (set at start) */
	size_t stride;
};

static int pool_live(const struct doca_buf_pool *p)
{
	return p && sd_handle_live_kind(p, SD_H_OTHER) && p->magic == SD_POOL_MAGIC;
}

#define CHECK_POOL(p) SD_CHECK_HANDLE(p, pool_live)

SD_EXPORT doca_error_t doca_buf_pool_create(size_t num_elements, size_t element_size, const struct doca_mmap *mmap,
					    struct doca_buf_pool **buf_pool)
{
	struct doca_buf_pool *p;
	doca_error_t rc;

	if (!mmap || !buf_pool || num_elements == 0 || element_size == 0 || num_elements > SD_POOL_MAX_ELEMENTS)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_handle_live_kind(mmap, SD_H_MMAP))
		return DOCA_ERROR_BAD_STATE;
	if (!mmap->addr || !mmap->len)
		return DOCA_ERROR_INVALID_VALUE;        /* not populated with a memory range */
	p = calloc(1, sizeof(*p));
	if (!p)
		return DOCA_ERROR_NO_MEMORY;
	rc = doca_buf_inventory_create(num_elements, &p->inv);
	if (rc != DOCA_SUCCESS) {
		free(p);
		return rc;
	}
	p->magic = SD_POOL_MAGIC;
	p->num = num_elements;
	p->elem_size = element_size;
	p->align = 1;
	p->mmap = (struct doca_mmap *)mmap;
	p->first = p->inv->chunks[0];
	pthread_mutex_init(&p->lock, NULL);
	if (sd_handle_add_kind(p, SD_H_OTHER) != 0) {
		doca_buf_inventory_destroy(p->inv);
		pthread_mutex_destroy(&p->lock);
		free(p);
		return DOCA_ERROR_NO_MEMORY;
	}
	*buf_pool = p;
	return DOCA_SUCCESS;
}

/* Caller holds p->lock. */
static doca_error_t stop_locked(struct doca_buf_pool *p)
{
	doca_error_t rc;

	if (!p->started)
		return DOCA_ERROR_BAD_STATE;
	rc = doca_buf_inventory_stop(p->inv);   /* IN_USE while bufs are out */
	if (rc == DOCA_SUCCESS)
		p->started = 0;
	return rc;
}

SD_EXPORT doca_error_t doca_buf_pool_destroy(struct doca_buf_pool *buf_pool)
{
	struct doca_buf_pool *p = buf_pool;
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_POOL(p);
	pthread_mutex_lock(&p->lock);
	if (p->started)
		rc = stop_locked(p);
	if (rc == DOCA_SUCCESS)
		rc = doca_buf_inventory_destroy(p->inv);
	if (rc == DOCA_SUCCESS)
		sd_handle_del(p);
	pthread_mutex_unlock(&p->lock);
	if (rc != DOCA_SUCCESS)
		return rc;
	pthread_mutex_destroy(&p->lock);
	p->magic = 0;
	free(p);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_pool_start(struct doca_buf_pool *buf_pool)
{
	struct doca_buf_pool *p = buf_pool;
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_POOL(p);
	pthread_mutex_lock(&p->lock);
	if (p->started) {
		rc = DOCA_ERROR_BAD_STATE;
	} else if (!sd_handle_live_kind(p->mmap, SD_H_MMAP) || !p->mmap->started) {
		rc = DOCA_ERROR_BAD_STATE;              /* the mmap must be started first */
	} else {
		uintptr_t start = (uintptr_t)p->mmap->addr, end = start + p->mmap->len;
		uintptr_t first = (start + p->align - 1) & ~(uintptr_t)(p->align - 1);
		size_t stride = (p->elem_size + p->align - 1) & ~(p->align - 1);
		int fits = first >= start && first <= end && stride >= p->elem_size &&
			   (p->num - 1) <= (SIZE_MAX - p->elem_size) / stride &&
			   (p->num - 1) * stride + p->elem_size <= end - first;

		if (!fits) {
			rc = DOCA_ERROR_INITIALIZATION;
		} else {
			rc = doca_buf_inventory_start(p->inv);
			if (rc == DOCA_SUCCESS) {
				p->base = (uint8_t *)first;
				p->stride = stride;
				p->started = 1;
			}
		}
	}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

SD_EXPORT doca_error_t doca_buf_pool_stop(struct doca_buf_pool *buf_pool)
{
	struct doca_buf_pool *p = buf_pool;
	doca_error_t rc;

	CHECK_POOL(p);
	pthread_mutex_lock(&p->lock);
	rc = stop_locked(p);
	pthread_mutex_unlock(&p->lock);
	return rc;
}

SD_EXPORT doca_error_t doca_buf_pool_buf_alloc(struct doca_buf_pool *buf_pool, struct doca_buf **buf)
{
	struct doca_buf_pool *p = buf_pool;
	struct doca_buf *b;
	uint8_t *elem;
	doca_error_t rc;

	CHECK_POOL(p);
	if (!buf)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&p->lock);
	if (!p->started) {
		pthread_mutex_unlock(&p->lock);
		return DOCA_ERROR_BAD_STATE;
	}
	rc = sd_inv_take(p->inv, p->mmap, &b);
	if (rc == DOCA_SUCCESS) {
		elem = p->base + (size_t)(b - p->first) * p->stride;
		b->head = b->data = elem;
		b->len = p->elem_size;
		b->data_len = 0;
		*buf = b;
	}
	pthread_mutex_unlock(&p->lock);
	if (rc == DOCA_ERROR_NO_MEMORY)
		return DOCA_ERROR_EMPTY;
	return rc;
}

SD_EXPORT doca_error_t doca_buf_pool_set_user_data(struct doca_buf_pool *buf_pool, union doca_data user_data)
{
	struct doca_buf_pool *p = buf_pool;
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_POOL(p);
	pthread_mutex_lock(&p->lock);
	if (p->started)
		rc = DOCA_ERROR_BAD_STATE;
	else
		p->user_data = user_data;
	pthread_mutex_unlock(&p->lock);
	return rc;
}

SD_EXPORT doca_error_t doca_buf_pool_set_element_alignment(struct doca_buf_pool *buf_pool, size_t element_alignment)
{
	struct doca_buf_pool *p = buf_pool;
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_POOL(p);
	if (element_alignment == 0 || (element_alignment & (element_alignment - 1)) != 0)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&p->lock);
	if (p->started)
		rc = DOCA_ERROR_BAD_STATE;
	else
		p->align = element_alignment;
	pthread_mutex_unlock(&p->lock);
	return rc;
}

SD_EXPORT doca_error_t doca_buf_pool_get_num_elements(const struct doca_buf_pool *buf_pool, uint32_t *num_of_elements)
{
	CHECK_POOL(buf_pool);
	if (!num_of_elements)
		return DOCA_ERROR_INVALID_VALUE;
	*num_of_elements = (uint32_t)buf_pool->num;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_pool_get_num_free_elements(const struct doca_buf_pool *buf_pool,
							   uint32_t *num_of_free_elements)
{
	CHECK_POOL(buf_pool);
	if (!num_of_free_elements)
		return DOCA_ERROR_INVALID_VALUE;
	return doca_buf_inventory_get_num_free_elements(buf_pool->inv, num_of_free_elements);
}

SD_EXPORT doca_error_t doca_buf_pool_get_user_data(const struct doca_buf_pool *buf_pool, union doca_data *user_data)
{
	struct doca_buf_pool *p = (struct doca_buf_pool *)buf_pool;

	CHECK_POOL(p);
	if (!user_data)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&p->lock);
	*user_data = p->user_data;
	pthread_mutex_unlock(&p->lock);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_pool_get_element_alignment(const struct doca_buf_pool *buf_pool,
							   size_t *element_alignment)
{
	struct doca_buf_pool *p = (struct doca_buf_pool *)buf_pool;

	CHECK_POOL(p);
	if (!element_alignment)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&p->lock);
	*element_alignment = p->align;
	pthread_mutex_unlock(&p->lock);
	return DOCA_SUCCESS;
}
