/*
 * ofi provider: the capability negotiation (ofi_negotiate, a pure function)
 * on synthetic fi_info lists for shapes this machine lacks: verbs-like
 * (FI_EP_MSG, RMA, atomics, remote CQ data, FI_MR_LOCAL | VIRT_ADDR |
 * ALLOCATED | PROV_KEY), efa-like (FI_EP_RDM, no atomics, no VIRT_ADDR, maybe
 * no remote CQ data), a tcp-like + rxm list, shm-like, and lists with nothing
 * usable. Needs no libfabric at run time (the structs are built by hand).
 */
#include "providers/ofi/ofi_internal.h"

#include <stdio.h>
#include <string.h>

static int fails;
#define CHECK(c, ...)                                                                 \
	do {                                                                          \
		if (!(c)) {                                                           \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #c);  \
			fprintf(stderr, __VA_ARGS__);                                 \
			fprintf(stderr, "\n");                                        \
			fails++;                                                      \
		}                                                                     \
	} while (0)

struct shape {
	struct fi_info info;
	struct fi_ep_attr ep;
	struct fi_domain_attr dom;
	struct fi_tx_attr tx;
	struct fi_rx_attr rx;
	struct fi_fabric_attr fab;
};

static struct fi_info *mk(struct shape *s, const char *prov, enum fi_ep_type t, uint64_t caps, uint64_t mr_mode,
			  size_t cq_data, uint64_t order, uint64_t mode)
{
	memset(s, 0, sizeof(*s));
	s->info.ep_attr = &s->ep;
	s->info.domain_attr = &s->dom;
	s->info.tx_attr = &s->tx;
	s->info.rx_attr = &s->rx;
	s->info.fabric_attr = &s->fab;
	s->fab.prov_name = (char *)prov;
	s->ep.type = t;
	s->ep.max_msg_size = 1u << 30;
	s->info.caps = caps;
	s->info.mode = mode;
	s->dom.mr_mode = (int)mr_mode;
	s->dom.cq_data_size = cq_data;
	s->tx.msg_order = order;
	s->tx.iov_limit = 4;
	s->tx.rma_iov_limit = 1;
	return &s->info;
}

#define BASE (FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_SEND | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE)
#define HWMR (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY)

int main(void)
{
	struct shape a, b, c, d;
	struct ofi_choice ch;
	const uint32_t all = SD_PROV_ENF_BOUNDS | SD_PROV_ENF_ACCESS | SD_PROV_ENF_REVOKE;

	/* verbs-like: MSG preferred over its rxm RDM, native everything */
	mk(&a, "verbs;ofi_rxm", FI_EP_RDM, BASE | FI_ATOMIC, HWMR, 4, FI_ORDER_SAS | FI_ORDER_SAW, FI_CONTEXT);
	a.info.next = mk(&b, "verbs", FI_EP_MSG, BASE | FI_ATOMIC, HWMR, 4,
			 FI_ORDER_SAS | FI_ORDER_SAW | FI_ORDER_RAW, FI_CONTEXT | FI_RX_CQ_DATA);
	CHECK(ofi_negotiate(&a.info, &ch) == 0, "verbs: %s", ch.why);
	CHECK(ch.info == &b.info && ch.ep_type == FI_EP_MSG, "verbs: the MSG endpoint chosen");
	CHECK(ch.mr_local && ch.prov_key && !ch.offset_mode, "verbs: MR_LOCAL, provider keys, virtual addresses");
	CHECK(ch.native_cq_data, "verbs: 4 bytes of CQ data suffice on MSG (a CQ per connection)");
	CHECK(ch.atomic_cap && ch.cm && ch.rx_cq_data && ch.order_saw && ch.order_raw, "verbs: atomics, CM, orders");
	CHECK(ch.enforce == all, "verbs: the HCA enforces bounds, access, revocation (0x%x)", ch.enforce);
	printf("verbs-like: %s\n", ch.why);

	/* efa-like: RDM, no atomics, offsets, no remote CQ data */
	mk(&a, "efa", FI_EP_RDM, BASE, FI_MR_LOCAL | FI_MR_PROV_KEY | FI_MR_ALLOCATED, 0, FI_ORDER_SAS, 0);
	CHECK(ofi_negotiate(&a.info, &ch) == 0, "efa: %s", ch.why);
	CHECK(ch.ep_type == FI_EP_RDM && ch.offset_mode && ch.mr_local && ch.prov_key, "efa: RDM, offsets, MR_LOCAL");
	CHECK(!ch.native_cq_data && !ch.atomic_cap && !ch.cm && !ch.order_saw, "efa: immediate + atomics emulated, no CM");
	CHECK(ch.enforce == all, "efa: the NIC enforces (0x%x)", ch.enforce);
	printf("efa-like (no CQ data): %s\n", ch.why);
	/* efa with 4 bytes of CQ data: not enough on a shared RDM CQ (the connection id rides along) */
	mk(&a, "efa", FI_EP_RDM, BASE, FI_MR_LOCAL | FI_MR_PROV_KEY | FI_MR_ALLOCATED, 4, FI_ORDER_SAS, 0);
	CHECK(ofi_negotiate(&a.info, &ch) == 0 && !ch.native_cq_data, "efa, 4 B CQ data: emulated on RDM");
	mk(&a, "efa", FI_EP_RDM, BASE, FI_MR_LOCAL | FI_MR_PROV_KEY | FI_MR_ALLOCATED, 8, FI_ORDER_SAS, 0);
	CHECK(ofi_negotiate(&a.info, &ch) == 0 && ch.native_cq_data, "efa, 8 B CQ data: native");
	/* FI_MR_ENDPOINT: fine on RDM (one endpoint), refused on MSG */
	mk(&a, "cxi", FI_EP_RDM, BASE | FI_ATOMIC, FI_MR_ENDPOINT | FI_MR_ALLOCATED | FI_MR_PROV_KEY, 8, FI_ORDER_SAS, 0);
	CHECK(ofi_negotiate(&a.info, &ch) == 0 && (ch.mr_mode & FI_MR_ENDPOINT), "MR_ENDPOINT on RDM accepted");
	mk(&a, "x", FI_EP_MSG, BASE, FI_MR_ENDPOINT, 8, FI_ORDER_SAS, 0);
	CHECK(ofi_negotiate(&a.info, &ch) != 0 && strstr(ch.why, "FI_MR_ENDPOINT"), "MR_ENDPOINT on MSG refused: %s",
	      ch.why);

	/* tcp-like: rxm RDM with atomics listed first, tcp MSG without: MSG wins, atomics emulated */
	mk(&a, "tcp;ofi_rxm", FI_EP_RDM, BASE | FI_ATOMIC, 0, 8, FI_ORDER_SAS | FI_ORDER_SAW | FI_ORDER_RAW, 0);
	a.info.next = mk(&b, "tcp", FI_EP_MSG, BASE, 0, 8, FI_ORDER_SAS | FI_ORDER_SAW | FI_ORDER_RAW, 0);
	CHECK(ofi_negotiate(&a.info, &ch) == 0 && ch.info == &b.info, "tcp: MSG chosen");
	CHECK(ch.offset_mode && !ch.prov_key && !ch.mr_local && !ch.atomic_cap && ch.native_cq_data && ch.cm,
	      "tcp: offsets, our keys, atomics emulated, CQ data native, CM");
	CHECK(ch.enforce == all, "tcp: the target's MR map check");
	printf("tcp-like: %s\n", ch.why);

	/* shm-like: RDM, atomics, VIRT_ADDR, only send-after-send order on tx */
	mk(&a, "shm", FI_EP_RDM, BASE | FI_ATOMIC, FI_MR_VIRT_ADDR, 8, FI_ORDER_SAS, 0);
	a.info.next = mk(&b, "shm", FI_EP_RDM, BASE, FI_MR_VIRT_ADDR, 8, FI_ORDER_SAS, 0);
	CHECK(ofi_negotiate(&a.info, &ch) == 0 && ch.info == &a.info && ch.atomic_cap && !ch.order_saw &&
	      !ch.offset_mode && ch.native_cq_data, "shm: the atomic entry, writes fenced by completion");
	printf("shm-like: %s\n", ch.why);

	/* an earlier provider is not displaced by a later one that only adds atomics */
	mk(&a, "sockets", FI_EP_RDM, BASE, 0, 8, FI_ORDER_SAS, 0);
	a.info.next = mk(&b, "udp;ofi_rxd", FI_EP_RDM, BASE | FI_ATOMIC, 0, 8, FI_ORDER_SAS, 0);
	CHECK(ofi_negotiate(&a.info, &ch) == 0 && ch.info == &a.info, "libfabric's order kept across providers");

	/* nothing usable: typed reasons */
	mk(&a, "p1", FI_EP_DGRAM, BASE, 0, 0, FI_ORDER_SAS, 0);
	a.info.next = mk(&b, "p2", FI_EP_RDM, FI_MSG, 0, 0, FI_ORDER_SAS, 0);
	b.info.next = mk(&c, "p3", FI_EP_RDM, BASE, FI_MR_RAW, 0, FI_ORDER_SAS, 0);
	c.info.next = mk(&d, "p4", FI_EP_RDM, BASE, 0, 0, 0, FI_MSG_PREFIX);
	CHECK(ofi_negotiate(&a.info, &ch) != 0 && ch.info == NULL && ch.why[0], "none usable: %s", ch.why);
	mk(&a, "p3", FI_EP_RDM, BASE, FI_MR_RAW, 0, FI_ORDER_SAS, 0);
	CHECK(ofi_negotiate(&a.info, &ch) != 0 && strstr(ch.why, "FI_MR_RAW"), "MR_RAW refused: %s", ch.why);
	mk(&a, "p5", FI_EP_RDM, BASE, 0, 0, FI_ORDER_RAW, 0);
	CHECK(ofi_negotiate(&a.info, &ch) != 0 && strstr(ch.why, "send-after-send"), "no SAS refused: %s", ch.why);
	CHECK(ofi_negotiate(NULL, &ch) != 0, "empty list");
	/* an unknown provider: nothing assumed enforced at the target */
	mk(&a, "newfab", FI_EP_RDM, BASE, 0, 8, FI_ORDER_SAS, 0);
	CHECK(ofi_negotiate(&a.info, &ch) == 0 && ch.enforce == 0, "unknown provider: enforce 0");

	printf("%s\n", fails ? "test_ofi_negotiate: FAILED" : "test_ofi_negotiate: ok");
	return fails ? 1 : 0;
}
