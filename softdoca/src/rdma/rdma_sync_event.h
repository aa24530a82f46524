/*
 * softdoca RDMA remote-net sync-event tasks (rdma_sync_event.c) and the hooks
 * they use in rdma_tasks.c. The three task types ride on the RDMA data
 * operations: an sd_rtask of type SD_T_READ (get), SD_T_WRITE (notify_set) or
 * SD_T_FETCH_ADD (notify_add) whose remote buffer is the 8-byte value of the
 * doca_sync_event_remote_net, with its own task ops (typed callbacks, pools).
 */
#ifndef SOFTDOCA_RDMA_SYNC_EVENT_H
#define SOFTDOCA_RDMA_SYNC_EVENT_H

#include "rdma.h"

/* rdma_tasks.c */
/* Initialise an allocated task (ops = the rdma task ops, ctx, user data, conn
 * reference, results cleared). */
void sd_rtask_reset(struct sd_rtask *t, struct doca_rdma *rdma, struct doca_rdma_connection *conn,
		    union doca_data ud);
/* The rdma task ops' submit and release (validation, transport, pool return). */
doca_error_t sd_rtask_submit(struct doca_task *task);
void sd_rtask_release(struct doca_task *task);

/* rdma_sync_event.c */
/* ctx start (end of sd_rdma_pools_create): pools of the configured types. */
doca_error_t sd_rdma_se_pools_create(struct doca_rdma *rdma);
/* doca_rdma_destroy (sd_rdma_pools_destroy): free configuration and pools. */
void sd_rdma_se_destroy(struct doca_rdma *rdma);
/* Is task a remote-net sync-event task (an sd_rtask with a detail)? */
int sd_rdma_se_is_task(const struct doca_task *task);

#endif
