/* doca_buf: data placement, reference counting and buffer lists. */
#include "internal.h"

#include <stdlib.h>

/* [a, a+alen) inside [b, b+blen), without overflow. */
static int range_inside(uintptr_t a, size_t alen, uintptr_t b, size_t blen)
{
	if (a + alen < a || b + blen < b)
		return 0;
	return a >= b && alen <= blen && a - b <= blen - alen;
}

static doca_error_t check_args(const struct doca_mmap *mmap, void *addr, size_t len, void *data,
			       size_t data_len)
{
	if (!addr || !data)
		return DOCA_ERROR_INVALID_VALUE;
	if (!range_inside((uintptr_t)addr, len, (uintptr_t)mmap->addr, mmap->len))
		return DOCA_ERROR_INVALID_VALUE;
	if (!range_inside((uintptr_t)data, data_len, (uintptr_t)addr, len))
		return DOCA_ERROR_INVALID_VALUE;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_inventory_buf_get_by_args(struct doca_buf_inventory *inventory,
							  struct doca_mmap *mmap, void *addr, size_t len,
							  void *data, size_t data_len, struct doca_buf **buf)
{
	struct doca_buf *b;
	doca_error_t rc;

	if (!inventory || !mmap || !buf)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_handle_live_kind(inventory, SD_H_INV) || !sd_handle_live_kind(mmap, SD_H_MMAP))
		return DOCA_ERROR_BAD_STATE;
	rc = check_args(mmap, addr, len, data, data_len);
	if (rc != DOCA_SUCCESS)
		return rc;
	rc = sd_inv_take(inventory, mmap, &b);
	if (rc != DOCA_SUCCESS)
		return rc;
	b->head = addr;
	b->len = len;
	b->data = data;
	b->data_len = data_len;
	*buf = b;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_inventory_buf_reuse_by_args(struct doca_buf *buf, void *addr, size_t len,
							    void *data, size_t data_len)
{
	doca_error_t rc;

	if (!buf || !buf->in_use || !buf->mmap)
		return DOCA_ERROR_INVALID_VALUE;
	if (buf->in_tail || buf->next)
		return DOCA_ERROR_NOT_PERMITTED;
	rc = check_args(buf->mmap, addr, len, data, data_len);
	if (rc != DOCA_SUCCESS)
		return rc;
	buf->head = addr;
	buf->len = len;
	buf->data = data;
	buf->data_len = data_len;
	return DOCA_SUCCESS;
}

/* Release a whole list (head refcount reached 0). */
static void release_list(struct doca_buf *head)
{
	struct doca_buf *b = head;

	while (b) {
		struct doca_buf *next = b->next;
		atomic_store(&b->refcount, 0);
		sd_buf_release(b);
		b = next;
	}
}

SD_EXPORT doca_error_t doca_buf_inventory_buf_dup(struct doca_buf_inventory *inventory,
						  const struct doca_buf *src_buf, struct doca_buf **dst_buf)
{
	struct doca_buf *head = NULL, *tail = NULL;

	if (!inventory || !src_buf || !dst_buf || !src_buf->in_use)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_handle_live_kind(inventory, SD_H_INV))
		return DOCA_ERROR_BAD_STATE;
	if (src_buf->in_tail)
		return DOCA_ERROR_NOT_PERMITTED;
	for (const struct doca_buf *s = src_buf; s; s = s->next) {
		struct doca_buf *d;
		doca_error_t rc = sd_inv_take(inventory, s->mmap, &d);
		if (rc != DOCA_SUCCESS) {
			if (head)
				release_list(head);
			return rc;
		}
		d->head = s->head;
		d->len = s->len;
		d->data = s->data;
		d->data_len = s->data_len;
		if (!head) {
			head = d;
		} else {
			tail->next = d;
			d->in_tail = 1;
			head->list_len++;
		}
		tail = d;
		head->last = d;
	}
	*dst_buf = head;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_inc_refcount(struct doca_buf *buf, uint16_t *refcount)
{
	unsigned int cur;

	if (!buf)
		return DOCA_ERROR_INVALID_VALUE;
	if (buf->in_tail)
		return DOCA_ERROR_NOT_PERMITTED;
	cur = atomic_load(&buf->refcount);
	do {
		if (cur == 0)
			return DOCA_ERROR_BAD_STATE;
		if (cur >= UINT16_MAX)
			return DOCA_ERROR_TOO_BIG;
	} while (!atomic_compare_exchange_weak(&buf->refcount, &cur, cur + 1));
	if (refcount)
		*refcount = (uint16_t)cur;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_dec_refcount(struct doca_buf *buf, uint16_t *refcount)
{
	unsigned int cur;

	if (!buf)
		return DOCA_ERROR_INVALID_VALUE;
	if (buf->in_tail)
		return DOCA_ERROR_NOT_PERMITTED;
	cur = atomic_load(&buf->refcount);
	do {
		if (cur == 0)
			return DOCA_ERROR_BAD_STATE;
	} while (!atomic_compare_exchange_weak(&buf->refcount, &cur, cur - 1));
	if (refcount)
		*refcount = (uint16_t)cur;
	if (cur == 1)
		release_list(buf);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_get_refcount(const struct doca_buf *buf, uint16_t *refcount)
{
	if (!buf || !refcount)
		return DOCA_ERROR_INVALID_VALUE;
	*refcount = (uint16_t)atomic_load(&((struct doca_buf *)buf)->refcount);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_get_len(const struct doca_buf *buf, size_t *len)
{
	if (!buf || !len)
		return DOCA_ERROR_INVALID_VALUE;
	*len = buf->len;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_get_head(const struct doca_buf *buf, void **head)
{
	if (!buf || !head)
		return DOCA_ERROR_INVALID_VALUE;
	*head = buf->head;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_get_data_len(const struct doca_buf *buf, size_t *data_len)
{
	if (!buf || !data_len)
		return DOCA_ERROR_INVALID_VALUE;
	*data_len = buf->data_len;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_get_data(const struct doca_buf *buf, void **data)
{
	if (!buf || !data)
		return DOCA_ERROR_INVALID_VALUE;
	*data = buf->data;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_set_data(struct doca_buf *buf, void *data, size_t data_len)
{
	if (!buf || !data)
		return DOCA_ERROR_INVALID_VALUE;
	if (!range_inside((uintptr_t)data, data_len, (uintptr_t)buf->head, buf->len))
		return DOCA_ERROR_INVALID_VALUE;
	buf->data = data;
	buf->data_len = data_len;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_set_data_len(struct doca_buf *buf, size_t data_len)
{
	if (!buf)
		return DOCA_ERROR_INVALID_VALUE;
	if (!range_inside((uintptr_t)buf->data, data_len, (uintptr_t)buf->head, buf->len))
		return DOCA_ERROR_INVALID_VALUE;
	buf->data_len = data_len;
	return DOCA_SUCCESS;
}

/* DOCA: "reset the data length to 0; data keeps pointing to the same place". */
SD_EXPORT doca_error_t doca_buf_reset_data_len(struct doca_buf *buf)
{
	if (!buf)
		return DOCA_ERROR_INVALID_VALUE;
	buf->data_len = 0;
	return DOCA_SUCCESS;
}

/* ---------------------------------------------------------------- lists */
SD_EXPORT doca_error_t doca_buf_get_next_in_list(struct doca_buf *buf, struct doca_buf **next_buf)
{
	if (!buf || !next_buf)
		return DOCA_ERROR_INVALID_VALUE;
	*next_buf = buf->next;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_get_last_in_list(struct doca_buf *buf, struct doca_buf **last_buf)
{
	struct doca_buf *b;

	if (!buf || !last_buf)
		return DOCA_ERROR_INVALID_VALUE;
	if (!buf->in_tail) {
		*last_buf = buf->last ? buf->last : buf;
		return DOCA_SUCCESS;
	}
	for (b = buf; b->next; b = b->next)
		;
	*last_buf = b;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_is_last_in_list(const struct doca_buf *buf, uint8_t *is_last)
{
	if (!buf || !is_last)
		return DOCA_ERROR_INVALID_VALUE;
	*is_last = buf->next == NULL;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_is_first_in_list(const struct doca_buf *buf, uint8_t *is_first)
{
	if (!buf || !is_first)
		return DOCA_ERROR_INVALID_VALUE;
	*is_first = !buf->in_tail;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_is_in_list(const struct doca_buf *buf, uint8_t *is_in_list)
{
	if (!buf || !is_in_list)
		return DOCA_ERROR_INVALID_VALUE;
	*is_in_list = buf->in_tail || buf->next != NULL;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_get_list_len(const struct doca_buf *buf, uint32_t *num_elements)
{
	if (!buf || !num_elements)
		return DOCA_ERROR_INVALID_VALUE;
	if (buf->in_tail)
		return DOCA_ERROR_NOT_PERMITTED;
	*num_elements = buf->list_len;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_buf_chain_list(struct doca_buf *list1, struct doca_buf *list2)
{
	if (!list1 || !list2 || list1 == list2 || !list1->in_use || !list2->in_use)
		return DOCA_ERROR_INVALID_VALUE;
	if (list1->in_tail || list2->in_tail)
		return DOCA_ERROR_NOT_PERMITTED;
	if (atomic_load(&list2->refcount) != 1)
		return DOCA_ERROR_NOT_PERMITTED;
	list1->last->next = list2;
	list1->last = list2->last;
	list1->list_len += list2->list_len;
	list2->in_tail = 1;
	return DOCA_SUCCESS;
}

/* doca_buf_chain_list with list1's tail given by the caller (DOCA skips the
 * walk to it); softdoca keeps the tail in the head and checks the two agree. */
SD_EXPORT doca_error_t doca_buf_chain_list_tail(struct doca_buf *list1_head, struct doca_buf *list1_tail,
						struct doca_buf *list2)
{
	if (!list1_head || !list1_tail || !list2 || list1_head == list2 || !list1_head->in_use ||
	    !list1_tail->in_use || !list2->in_use)
		return DOCA_ERROR_INVALID_VALUE;
	if (list1_head->in_tail || list2->in_tail)
		return DOCA_ERROR_NOT_PERMITTED;
	if (list1_head->last != list1_tail)
		return DOCA_ERROR_INVALID_VALUE;
	return doca_buf_chain_list(list1_head, list2);
}

SD_EXPORT doca_error_t doca_buf_unchain_list(struct doca_buf *list1, struct doca_buf *list2)
{
	struct doca_buf *prev;
	uint32_t n2 = 0;

	if (!list1 || !list2 || list1 == list2 || list1->in_tail)
		return DOCA_ERROR_INVALID_VALUE;
	for (prev = list1; prev && prev->next != list2; prev = prev->next)
		;
	if (!prev)
		return DOCA_ERROR_INVALID_VALUE;
	for (struct doca_buf *b = list2; b; b = b->next)
		n2++;
	prev->next = NULL;
	list2->last = list1->last;
	list2->list_len = n2;
	list2->in_tail = 0;
	atomic_store(&list2->refcount, 1);
	list1->last = prev;
	list1->list_len -= n2;
	return DOCA_SUCCESS;
}
