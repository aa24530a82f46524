/*
 * softdoca RDMA: two-sided messages through a provider (the receiving half,
 * rdma_pmsg.c; the sending half is in rdma_prov.c, which includes this), where
 * both sides take them (unless SOFTDOCA_PROVIDER_MESSAGES=0; docs/providers.md).
 *
 * Every message the bridge sends through the provider (send, send with
 * immediate, and the notice of a write with immediate, which follows its write
 * on the same connection) starts with a 24-byte header; the receiver answers
 * each with an acknowledgement (the same header, type ACK) once a posted
 * receive took it, which is when the sender's task completes, as an RC NIC
 * completes a send on the responder's ACK. A message that finds no receive is
 * parked (copied out of the provider, so the provider never holds a
 * connection's later traffic, acknowledgements included); it waits at most
 * the sender's RNR budget, then the sender's task fails with TIME_OUT and the
 * connection breaks. The sender keeps at most SD_PM_WINDOW messages and
 * SD_RDMA_MAX_PARK bytes unacknowledged per connection, so what a receiver
 * parks is bounded; a peer that sends more is broken off.
 *
 * Header, little-endian:
 *   0 type u8 (enum sd_pm_type)   1 flags u8 (SD_PM_F_IMM)   2 status u16 (ACK: DOCA error, 0 ok)
 *   4 seq u32 (the message's; ACK: the last message it covers)
 *   8 imm u32 (raw, in memory order)   12 reserved u32 (0)
 *  16 info u64 (WIMM: the written length; ACK of TOO_BIG: the receive's room)
 */
#ifndef SOFTDOCA_RDMA_PMSG_H
#define SOFTDOCA_RDMA_PMSG_H

#include "rdma.h"
#include "providers/provider.h"

#define SD_PM_HDR 24
#define SD_PM_WINDOW 256u

enum sd_pm_type {
	SD_PM_SEND = 1, /* send / send with immediate: the payload follows */
	SD_PM_WIMM = 2, /* a write with immediate's receive (its write went first) */
	SD_PM_ACK = 3,
};
#define SD_PM_F_IMM 1u

struct sd_pm_hdr {
	uint8_t type, flags;
	uint16_t status;
	uint32_t seq;
	uint32_t imm;
	uint64_t info;
};

void sd_pm_encode(const struct sd_pm_hdr *h, uint8_t out[SD_PM_HDR]);
void sd_pm_decode(const uint8_t in[SD_PM_HDR], struct sd_pm_hdr *h);

/* An application message (not an ACK) arrived on c (inside the provider's
 * progress): into a posted receive, or parked. h: its header when the payload
 * is here (rx->data), NULL for a large one still to be fetched (PLACE into a
 * buffer of its own). *brk: c must break (its reason is set). */
enum sd_prov_rx_answer sd_pm_rx(struct doca_rdma_connection *c, const struct sd_pm_hdr *h,
				const struct sd_prov_rx *rx, struct sd_prov_iov *dst, int *ndst, void **rx_ctx,
				int *brk);
/* The payload of a PLACE answer arrived (the provider reports every PLACE,
 * even after the connection closed). Returns a connection the caller must
 * break and then sd_conn_unref, or NULL. */
struct doca_rdma_connection *sd_pm_rx_done(void *rx_ctx, doca_error_t status, size_t len);
/* The next acknowledgement due (1: *c_out and out filled and removed from the
 * connection, which stays referenced until the next sd_pm_timers; 0: none). */
int sd_pm_ack_next(struct doca_rdma_connection **c_out, uint8_t out[SD_PM_HDR]);
/* Parked messages past their budget get their verdict; returns the next
 * deadline (0: none). */
uint64_t sd_pm_timers(uint64_t now);
/* The provider connection of c ended: drop what is parked or arriving. */
void sd_pm_conn_end(struct doca_rdma_connection *c, doca_error_t status);

#endif
