/* doca_buf_inventory: a growable pool of doca_buf descriptors. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define SD_INV_MAX_ELEMENTS (1u << 30)

static int inv_live(const struct doca_buf_inventory *inv)
{
	return inv && sd_handle_live_kind(inv, SD_H_INV);
}

#define CHECK_INV(inv) SD_CHECK_HANDLE(inv, inv_live)

/* Caller holds inv->lock. */
static doca_error_t add_chunk_locked(struct doca_buf_inventory *inv, size_t num)
{
	struct doca_buf *chunk, **chunks;

	if (num == 0 || num > SD_INV_MAX_ELEMENTS || inv->num_elements + num > SD_INV_MAX_ELEMENTS)
		return DOCA_ERROR_INVALID_VALUE;
	chunk = calloc(num, sizeof(*chunk));
	if (!chunk)
		return DOCA_ERROR_NO_MEMORY;
	chunks = realloc(inv->chunks, (inv->num_chunks + 1) * sizeof(*chunks));
	if (!chunks) {
		free(chunk);
		return DOCA_ERROR_NO_MEMORY;
	}
	inv->chunks = chunks;
	inv->chunks[inv->num_chunks++] = chunk;
	for (size_t i = num; i-- > 0;) {
		chunk[i].inv = inv;
		atomic_init(&chunk[i].refcount, 0);
		chunk[i].free_next = inv->free_list;
		inv->free_list = &chunk[i];
	}
	inv->num_elements += num;
	inv->num_free += num;
	return DOCA_SUCCESS;
}

static void inv_free(struct doca_buf_inventory *inv)
{
	for (size_t i = 0; i < inv->num_chunks; i++)
		free(inv->chunks[i]);
	free(inv->chunks);
	pthread_mutex_destroy(&inv->lock);
	free(inv);
}

SD_EXPORT doca_error_t doca_buf_inventory_create(size_t num_elements, struct doca_buf_inventory **inventory)
{
	struct doca_buf_inventory *inv;
	doca_error_t rc;

	if (!inventory || num_elements == 0)
		return DOCA_ERROR_INVALID_VALUE;
	inv = calloc(1, sizeof(*inv));
	if (!inv)
		return DOCA_ERROR_NO_MEMORY;
	pthread_mutex_init(&inv->lock, NULL);
	rc = add_chunk_locked(inv, num_elements);
	if (rc == DOCA_SUCCESS && sd_handle_add_kind(inv, SD_H_INV) != 0)
		rc = DOCA_ERROR_NO_MEMORY;
	if (rc != DOCA_SUCCESS) {
		inv_free(inv);
		return rc;
	}
	*inventory = inv;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_inventory_destroy(struct doca_buf_inventory *inventory)
{
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_INV(inventory);
	pthread_mutex_lock(&inventory->lock);
	if (inventory->num_free != inventory->num_elements)
		rc = DOCA_ERROR_IN_USE;       /* DOCA: elements not returned */
	else
		sd_handle_del(inventory);     /* destroy stops a started inventory implicitly (DOCA) */
	pthread_mutex_unlock(&inventory->lock);
	if (rc == DOCA_SUCCESS)
		inv_free(inventory);
	return rc;
}

SD_EXPORT doca_error_t doca_buf_inventory_start(struct doca_buf_inventory *inventory)
{
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_INV(inventory);
	pthread_mutex_lock(&inventory->lock);
	if (inventory->started)
		rc = DOCA_ERROR_BAD_STATE;
	else
		inventory->started = 1;
	pthread_mutex_unlock(&inventory->lock);
	return rc;
}

SD_EXPORT doca_error_t doca_buf_inventory_stop(struct doca_buf_inventory *inventory)
{
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_INV(inventory);
	pthread_mutex_lock(&inventory->lock);
	if (!inventory->started)
		rc = DOCA_ERROR_BAD_STATE;
	else if (inventory->num_free != inventory->num_elements)
		rc = DOCA_ERROR_IN_USE;
	else
		inventory->started = 0;
	pthread_mutex_unlock(&inventory->lock);
	return rc;
}

SD_EXPORT doca_error_t doca_buf_inventory_expand(struct doca_buf_inventory *inventory, uint32_t num_elements)
{
	doca_error_t rc;

	CHECK_INV(inventory);
	if (num_elements == 0)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&inventory->lock);
	rc = add_chunk_locked(inventory, num_elements);
	pthread_mutex_unlock(&inventory->lock);
	return rc;
}

SD_EXPORT doca_error_t doca_buf_inventory_set_user_data(struct doca_buf_inventory *inventory,
							union doca_data user_data)
{
	CHECK_INV(inventory);
	pthread_mutex_lock(&inventory->lock);
	inventory->user_data = user_data;
	pthread_mutex_unlock(&inventory->lock);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_inventory_get_user_data(const struct doca_buf_inventory *inventory,
							union doca_data *user_data)
{
	CHECK_INV(inventory);
	if (!user_data)
		return DOCA_ERROR_INVALID_VALUE;
	*user_data = inventory->user_data;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_inventory_get_num_elements(const struct doca_buf_inventory *inventory,
							   uint32_t *num_of_elements)
{
	struct doca_buf_inventory *inv = (struct doca_buf_inventory *)inventory;

	CHECK_INV(inventory);
	if (!num_of_elements)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&inv->lock);
	*num_of_elements = (uint32_t)inv->num_elements;
	pthread_mutex_unlock(&inv->lock);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_inventory_get_num_free_elements(const struct doca_buf_inventory *inventory,
								uint32_t *num_of_free_elements)
{
	struct doca_buf_inventory *inv = (struct doca_buf_inventory *)inventory;

	CHECK_INV(inventory);
	if (!num_of_free_elements)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&inv->lock);
	*num_of_free_elements = (uint32_t)inv->num_free;
	pthread_mutex_unlock(&inv->lock);
	return DOCA_SUCCESS;
}

doca_error_t sd_inv_take(struct doca_buf_inventory *inv, struct doca_mmap *mmap, struct doca_buf **out)
{
	struct doca_buf *b = NULL;
	doca_error_t rc = DOCA_SUCCESS;

	if (!inv_live(inv) || !mmap || !sd_handle_live_kind(mmap, SD_H_MMAP))
		return DOCA_ERROR_BAD_STATE;
	pthread_mutex_lock(&inv->lock);
	if (!inv->started) {
		rc = DOCA_ERROR_BAD_STATE;
	} else if (!inv->free_list) {
		rc = DOCA_ERROR_NO_MEMORY;
	} else {
		b = inv->free_list;
		inv->free_list = b->free_next;
		inv->num_free--;
	}
	pthread_mutex_unlock(&inv->lock);
	if (rc != DOCA_SUCCESS)
		return rc;

	/* Pin the mmap: checked and counted under its lock so that a concurrent
	 * doca_mmap_stop either sees this buf (IN_USE) or we see it stopped. */
	pthread_mutex_lock(&mmap->lock);
	if (mmap->started)
		atomic_fetch_add(&mmap->num_bufs, 1);
	else
		rc = DOCA_ERROR_BAD_STATE;
	pthread_mutex_unlock(&mmap->lock);
	if (rc != DOCA_SUCCESS) {
		pthread_mutex_lock(&inv->lock);
		b->free_next = inv->free_list;
		inv->free_list = b;
		inv->num_free++;
		pthread_mutex_unlock(&inv->lock);
		return rc;
	}
	b->mmap = mmap;
	b->next = NULL;
	b->last = b;
	b->list_len = 1;
	b->in_tail = 0;
	b->in_use = 1;
	b->free_next = NULL;
	atomic_store(&b->refcount, 1);
	*out = b;
	return DOCA_SUCCESS;
}

void sd_buf_release(struct doca_buf *buf)
{
	struct doca_buf_inventory *inv = buf->inv;
	struct doca_mmap *mmap = buf->mmap;

	buf->in_use = 0;
	buf->next = NULL;
	buf->last = buf;
	buf->list_len = 1;
	buf->in_tail = 0;
	buf->mmap = NULL;
	if (mmap)
		sd_mmap_buf_put(mmap); /* may free a map destroyed with bufs out */
	pthread_mutex_lock(&inv->lock);
	buf->free_next = inv->free_list;
	inv->free_list = buf;
	inv->num_free++;
	pthread_mutex_unlock(&inv->lock);
}
