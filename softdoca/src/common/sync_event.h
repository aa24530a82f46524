/*
 * softdoca sync events: what sync_event.c shares with rdma_sync_event.c.
 *
 * A doca_sync_event is a 64-bit value (8-byte aligned) in local memory. When
 * it is exported to a remote peer (doca_sync_event_export_to_remote_net) the
 * value is registered as an internal 8-byte doca_mmap with LOCAL_READ_WRITE |
 * RDMA_READ | RDMA_WRITE | RDMA_ATOMIC, and the export blob carries that
 * map's ordinary export descriptor:
 *
 *   0 magic u32 "SDSE"  4 version u16 (1)  6 total length u16 (94)
 *   8 mmap export descriptor (SD_MMAP_DESC_LEN = 82 bytes, see internal.h)
 *  90 CRC-32 (IEEE) of bytes 0..89
 *
 * The peer's doca_sync_event_remote_net is a remote map created from that
 * descriptor plus one doca_buf describing the 8 bytes, so the RDMA remote-net
 * sync-event tasks are plain RDMA read (get), write (notify_set) and atomic
 * fetch-add (notify_add) on it, over either transport, with every check of
 * those operations (instance, map id, key, bounds, permissions of the map and
 * of the target's rdma context).
 */
#ifndef SOFTDOCA_SYNC_EVENT_H
#define SOFTDOCA_SYNC_EVENT_H

#include "internal.h"

#define SD_SE_BLOB_MAGIC 0x45534453u /* "SDSE" */
#define SD_SE_BLOB_VERSION 1
#define SD_SE_BLOB_LEN (8 + SD_MMAP_DESC_LEN + 4)

#define SD_SE_REMOTE_MAGIC 0x52455345u

struct doca_sync_event_remote_net {
	uint32_t magic;
	struct doca_dev *dev;
	struct doca_mmap *map;     /* remote map of the peer's 8-byte value */
	struct doca_buf buf;       /* [value, value + 8) of the peer, data = the whole value */
	atomic_int task_refs;      /* rdma tasks naming this event (destroy: IN_USE while > 0) */
};

/* Is ev a live remote-net sync event (not destroyed)? */
int sd_se_remote_live(const struct doca_sync_event_remote_net *ev);
/* Task references (rdma_sync_event.c); ev may be NULL. */
void sd_se_remote_ref(struct doca_sync_event_remote_net *ev);
void sd_se_remote_unref(struct doca_sync_event_remote_net *ev);

#endif
