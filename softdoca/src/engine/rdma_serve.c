/*
 * softdoca engine: the responder of one-sided requests. A WRITE (or
 * WRITE_IMM) header gets its payload's destination, a READ its answer queued
 * straight out of target memory, a compare-and-swap / fetch-and-add its 8
 * bytes changed and answered, as a NIC serves them without the target
 * application. Each is validated first by the link's owner (sd_link_ops
 * mem_acquire: the target context's permissions, the process instance, the
 * map registry), which hands back a reference that holds the map while its
 * bytes move (released through sd_link_ops.release_ref).
 *
 * This module knows no DOCA object (tests/test_softdoca_layers.py checks
 * it): a refusal is returned to the caller with its reason (struct
 * sd_prov_nak), and the caller answers it and breaks the connection (RC
 * semantics, rdma/rdma_wire.c).
 */
#include "rdma.h"

#include <stdlib.h>
#include <string.h>

/* The 8-byte atomic a remote compare-and-swap / fetch-and-add performs on
 * registered application memory, as a NIC would: the target application is
 * not synchronized with it (softdoca/tsan.supp names this function). */
__attribute__((noinline)) static uint64_t sd_wire_remote_atomic(uint64_t *p, uint8_t op, uint64_t a0, uint64_t a1)
{
	uint64_t old;

	if (op == SD_OP_CMP_SWP) {
		old = a0;
		__atomic_compare_exchange_n(p, &old, a1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	} else {
		old = __atomic_fetch_add(p, a0, __ATOMIC_SEQ_CST);
	}
	return old;
}

void sd_serve_write(struct sd_link *l, const struct sd_hdr *h)
{
	void *ref = NULL;

	l->rx_action = SD_RXA_WRITE;
	l->rx_status = l->ops->mem_acquire(l, h, h->payload_len, DOCA_ACCESS_FLAG_RDMA_WRITE, &ref, &l->rx_nak);
	if (l->rx_status == DOCA_SUCCESS && h->payload_len) {
		l->rx_ref = ref;
		sd_link_rx_into(l, (void *)(uintptr_t)h->raddr, h->payload_len);
	} else {
		if (ref)
			l->ops->release_ref(ref);
		l->rx_discard = 1;
	}
}

void sd_serve_release(struct sd_link *l)
{
	if (l->rx_ref) {
		l->ops->release_ref(l->rx_ref);
		l->rx_ref = NULL;
	}
}

int sd_serve_read(struct sd_link *l, const struct sd_hdr *h, doca_error_t *st, struct sd_prov_nak *nak)
{
	struct sd_hdr r = {.opcode = SD_OP_READ_RESP, .req_id = h->req_id};
	struct sd_txitem *it;
	void *ref = NULL;

	*st = l->ops->mem_acquire(l, h, h->rlen, DOCA_ACCESS_FLAG_RDMA_READ, &ref, nak);
	if (*st != DOCA_SUCCESS)
		return 1;
	if (h->rlen == 0) {
		if (ref)
			l->ops->release_ref(ref);
		return sd_link_send_ctrl(l, &r, NULL, 0);
	}
	it = calloc(1, sizeof(*it));
	if (!it) {
		l->ops->release_ref(ref);
		return -1;
	}
	SD_LIVE_INC(SD_LIVE_CTRL);
	r.payload_len = (uint32_t)h->rlen;
	sd_hdr_encode(&r, it->hdr);
	it->ref = ref;
	it->iov1.iov_base = (void *)(uintptr_t)h->raddr;
	it->iov1.iov_len = h->rlen;
	it->iov = &it->iov1;
	it->iovcnt = 1;
	it->total = SD_HDR_LEN + h->rlen;
	sd_link_queue(l, it);
	return 0;
}

int sd_serve_atomic(struct sd_link *l, const struct sd_hdr *h, doca_error_t *st, struct sd_prov_nak *nak)
{
	struct sd_hdr r = {.opcode = SD_OP_ATOMIC_RESP, .req_id = h->req_id};
	uint8_t val[8];
	uint64_t old;
	void *ref = NULL;

	if (h->raddr % 8 != 0) {
		*st = DOCA_ERROR_INVALID_VALUE;
		memset(nak, 0, sizeof(*nak));
		nak->code = SD_PROV_NAK_ALIGN;
		nak->map_id = h->map_id;
		return 1;
	}
	*st = l->ops->mem_acquire(l, h, 8, DOCA_ACCESS_FLAG_RDMA_ATOMIC, &ref, nak);
	if (*st != DOCA_SUCCESS)
		return 1;
	old = sd_wire_remote_atomic((uint64_t *)(uintptr_t)h->raddr, h->opcode, h->arg0, h->arg1);
	if (ref)
		l->ops->release_ref(ref);
	sd_put_le64(val, old);
	return sd_link_send_ctrl(l, &r, val, 8);
}
