/*
 * ofi provider: capability negotiation, a pure function over fi_info lists
 * (no libfabric calls), so that shapes this machine lacks (verbs, efa) are
 * unit-tested with synthetic lists (tests/providers/test_ofi_negotiate.c).
 *
 * Asked (ofi_fill_hints): FI_MSG | FI_RMA (+ FI_ATOMIC in a second query, see
 * ofi_provider.c), FI_REMOTE_READ / WRITE, send-after-send order; MR modes we
 * can honour: FI_MR_LOCAL (descriptors for every local buffer: registered by
 * the caller's mr, else a temporary registration per op), FI_MR_VIRT_ADDR
 * (absent: remote addresses are offsets into the MR), FI_MR_ALLOCATED (we only
 * register allocated memory), FI_MR_PROV_KEY (absent: we pick unique keys),
 * FI_MR_ENDPOINT (RDM only: every MR is bound to the one shared endpoint; MSG
 * endpoints are per connection, so an MSG candidate that demands it is
 * skipped). Not honoured: FI_MR_RAW (keys larger than 64 bits; those
 * candidates are skipped), FI_MSG_PREFIX.
 *
 * Choice: the first candidate (libfabric's order, FI_PROVIDER honoured by
 * libfabric itself) of the best endpoint type: FI_EP_MSG where the provider
 * has it (tcp, verbs: a connection per peer, CM with private data), else
 * FI_EP_RDM (shm, efa, rxm layered over an MSG provider). Among equals of one
 * provider, one offering FI_ATOMIC wins.
 */
#include "ofi_internal.h"

#include <stdio.h>
#include <string.h>

#define WANT_CAPS (FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_SEND | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE)
#define OK_MODES (FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA)
#define OK_MR (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT)

void ofi_fill_hints(struct fi_info *h)
{
	h->caps = WANT_CAPS;
	h->mode = OK_MODES;
	h->ep_attr->type = FI_EP_UNSPEC;
	h->domain_attr->mr_mode = OK_MR;
	h->domain_attr->threading = FI_THREAD_DOMAIN; /* the caller serializes every call */
	h->tx_attr->msg_order = FI_ORDER_SAS;
	h->rx_attr->msg_order = FI_ORDER_SAS;
}

/*
 * What the target enforces, per core provider (the first name of a layered
 * "tcp;ofi_rxm"):
 *  - verbs, efa, psm3, cxi, opx, usnic: the NIC checks the MR key, its range
 *    and its access flags, and a closed MR's key is dead (hardware MRs).
 *  - tcp: the target's progress checks every incoming RMA against the
 *    domain's MR map (libfabric 1.17 logs it: ofi_mr_map_verify() "invalid
 *    access", tcpx_op_write() "invalid rma iov received"): key, range,
 *    FI_REMOTE_READ / WRITE; fi_close(mr) takes the key out of the map.
 *    test_ofi_provider checks all three with forged key blobs (refused at once).
 *  - shm: the target processes the RMA command against its MR map; the test's
 *    forged writes (64 B, 8000 B, 1 MiB: inline and CMA protocols) never land,
 *    but shm 1.17 sends the requester no error (the op fails at the deadline);
 *    revocation assumed from the same MR map, not tested. Same host, same uid.
 *  - anything else: nothing assumed (the requester checks, CAP_CHECK_REQUESTER).
 */
static uint32_t enforce_of(const char *prov)
{
	static const char *const hw[] = { "verbs", "efa", "psm3", "cxi", "opx", "usnic" };
	char core[64];
	size_t n = strcspn(prov, ";");

	if (n >= sizeof(core))
		n = sizeof(core) - 1;
	memcpy(core, prov, n);
	core[n] = 0;
	for (size_t i = 0; i < sizeof(hw) / sizeof(hw[0]); i++)
		if (!strcmp(core, hw[i]))
			return SD_PROV_ENF_BOUNDS | SD_PROV_ENF_ACCESS | SD_PROV_ENF_REVOKE;
	if (!strcmp(core, "tcp") || !strcmp(core, "shm"))
		return SD_PROV_ENF_BOUNDS | SD_PROV_ENF_ACCESS | SD_PROV_ENF_REVOKE;
	return 0;
}

static int usable(const struct fi_info *fi, char *why, size_t n)
{
	const char *pn = fi->fabric_attr && fi->fabric_attr->prov_name ? fi->fabric_attr->prov_name : "?";
	uint64_t mr = fi->domain_attr ? (uint64_t)fi->domain_attr->mr_mode : 0;
	enum fi_ep_type t = fi->ep_attr ? fi->ep_attr->type : FI_EP_UNSPEC;

	if (t != FI_EP_MSG && t != FI_EP_RDM)
		return snprintf(why, n, "%s: endpoint type %d is neither MSG nor RDM", pn, (int)t), 0;
	if ((fi->caps & (FI_MSG | FI_RMA)) != (FI_MSG | FI_RMA))
		return snprintf(why, n, "%s: lacks FI_MSG | FI_RMA", pn), 0;
	if (fi->mode & ~(uint64_t)OK_MODES)
		return snprintf(why, n, "%s: demands mode 0x%llx (e.g. FI_MSG_PREFIX), not handled", pn,
				(unsigned long long)(fi->mode & ~(uint64_t)OK_MODES)), 0;
	if (mr & FI_MR_RAW)
		return snprintf(why, n, "%s: demands FI_MR_RAW keys, not handled", pn), 0;
	if (mr & ~(uint64_t)(OK_MR | FI_MR_BASIC | FI_MR_SCALABLE | FI_MR_MMU_NOTIFY | FI_MR_HMEM | FI_MR_COLLECTIVE))
		return snprintf(why, n, "%s: demands mr_mode 0x%llx, not handled", pn, (unsigned long long)mr), 0;
	if ((mr & FI_MR_ENDPOINT) && t == FI_EP_MSG)
		return snprintf(why, n, "%s: FI_MR_ENDPOINT on MSG endpoints (one MR per connection) not handled", pn), 0;
	if (fi->tx_attr && !(fi->tx_attr->msg_order & FI_ORDER_SAS))
		return snprintf(why, n, "%s: no send-after-send order", pn), 0;
	return 1;
}

int ofi_negotiate(const struct fi_info *list, struct ofi_choice *out)
{
	const struct fi_info *best = NULL;
	int best_score = 0;
	char first_why[128] = "";

	memset(out, 0, sizeof(*out));
	for (const struct fi_info *fi = list; fi; fi = fi->next) {
		char why[128];
		int score;

		if (!usable(fi, why, sizeof(why))) {
			if (!first_why[0])
				memcpy(first_why, why, sizeof(first_why));
			continue;
		}
		score = (fi->ep_attr->type == FI_EP_MSG ? 4 : 2) + ((fi->caps & FI_ATOMIC) ? 1 : 0);
		/* a later entry of another provider never beats an earlier one of equal type */
		if (best && score > best_score && strcmp(best->fabric_attr->prov_name, fi->fabric_attr->prov_name) &&
		    (score & ~1) == (best_score & ~1))
			continue;
		if (score > best_score) {
			best = fi;
			best_score = score;
		}
	}
	if (!best) {
		snprintf(out->why, sizeof(out->why), "no libfabric provider offers what softdoca needs%s%s",
			 first_why[0] ? ": " : " (FI_MSG | FI_RMA, MSG or RDM endpoints)", first_why);
		return -1;
	}
	out->info = best;
	out->ep_type = best->ep_attr->type;
	out->mr_mode = (uint64_t)best->domain_attr->mr_mode;
	/* FI_MR_BASIC (old API) means VIRT_ADDR | PROV_KEY | ALLOCATED */
	if (out->mr_mode & FI_MR_BASIC)
		out->mr_mode |= FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
	out->offset_mode = !(out->mr_mode & FI_MR_VIRT_ADDR);
	out->mr_local = !!(out->mr_mode & FI_MR_LOCAL);
	out->prov_key = !!(out->mr_mode & FI_MR_PROV_KEY);
	out->mr_raw = 0;
	out->rx_cq_data = !!(best->mode & FI_RX_CQ_DATA);
	/* the CQ data carries the immediate (4 bytes); on a shared RDM CQ also the
	 * receiver's connection id in the upper 4 (so 8 needed); MSG has a CQ per
	 * connection */
	out->native_cq_data = best->domain_attr->cq_data_size >= (out->ep_type == FI_EP_MSG ? 4u : 8u);
	out->atomic_cap = !!(best->caps & FI_ATOMIC);
	out->order_saw = best->tx_attr && (best->tx_attr->msg_order & FI_ORDER_SAW);
	out->order_raw = best->tx_attr && (best->tx_attr->msg_order & FI_ORDER_RAW);
	out->cm = out->ep_type == FI_EP_MSG;
	out->iov_limit = best->tx_attr && best->tx_attr->iov_limit ? best->tx_attr->iov_limit : 1;
	out->rma_iov_limit = best->tx_attr && best->tx_attr->rma_iov_limit ? best->tx_attr->rma_iov_limit : 1;
	if (out->iov_limit > OFI_MAX_IOV)
		out->iov_limit = OFI_MAX_IOV;
	out->max_msg = best->ep_attr->max_msg_size ? best->ep_attr->max_msg_size : (1ull << 30);
	snprintf(out->prov, sizeof(out->prov), "%s", best->fabric_attr->prov_name);
	out->enforce = enforce_of(out->prov);
	snprintf(out->why, sizeof(out->why), "%s %s: %s, %s, atomics %s, write-with-immediate %s", out->prov,
		 out->ep_type == FI_EP_MSG ? "FI_EP_MSG" : "FI_EP_RDM", out->offset_mode ? "offsets" : "virtual addresses",
		 out->prov_key ? "provider keys" : "our keys", out->atomic_cap ? "offered" : "emulated",
		 out->native_cq_data ? "native" : "emulated");
	return 0;
}
