/*
 * softdoca extensions: facts DOCA 3.3 keeps internal, exported under a
 * softdoca_ prefix so pydoca can surface them when running on softdoca.
 */
#include "internal.h"
#include "rdma.h"

#include <stdio.h>
#include <string.h>

SD_EXPORT int softdoca_rdma_connection_get_fail_reason(const struct doca_rdma_connection *conn);
SD_EXPORT int softdoca_rdma_connection_get_private_data(const struct doca_rdma_connection *conn, const uint8_t **data,
							 uint8_t *len);
SD_EXPORT const char *softdoca_task_get_error_detail(const struct doca_task *task);
SD_EXPORT const char *softdoca_rdma_connection_get_error_detail(const struct doca_rdma_connection *conn);
SD_EXPORT long softdoca_debug_live_objects(const char *kind);
SD_EXPORT long softdoca_debug_counter(const char *name);

/* 0 none, 1 rejected by the peer, 2 timed out, 3 refused (nothing listening), 4 lost; -1 bad handle */
SD_EXPORT int softdoca_rdma_connection_get_fail_reason(const struct doca_rdma_connection *conn)
{
	int r = -1;

	if (!conn)
		return -1;
	sd_eng_lock(); /* the engine thread writes it */
	if (sd_conn_live(conn))
		r = (int)sd_rdma_conn_fail_reason(conn);
	sd_eng_unlock();
	return r;
}

/* The private data the peer passed to doca_rdma_connection_accept (requester side). */
SD_EXPORT int softdoca_rdma_connection_get_private_data(const struct doca_rdma_connection *conn, const uint8_t **data,
							 uint8_t *len)
{
	if (!conn || !data || !len || !sd_conn_live(conn))
		return -1;
	*data = sd_rdma_conn_private_data(conn, len);
	return 0;
}

/* Why a task failed, in words naming the side and the cause, e.g. "target
 * refused: remote mmap 0x3 lacks RDMA_WRITE (has LOCAL_READ_WRITE|RDMA_READ);
 * grant RDMA_WRITE on the target's MemoryMap" or "local buffer holds 8192
 * bytes but the remote buffer is 4096 bytes (...)". Valid until the task is
 * submitted again or freed. NULL when there is none (success, unknown, not
 * an rdma task). */
SD_EXPORT const char *softdoca_task_get_error_detail(const struct doca_task *task)
{
	const char *d = sd_rtask_detail(task);

	return d && d[0] ? d : NULL;
}

/* Why an established connection broke (remote access error, RNR retry
 * exceeded, silent peer, ...) or why it failed to establish; NULL if
 * unknown or the handle is no longer valid. */
SD_EXPORT const char *softdoca_rdma_connection_get_error_detail(const struct doca_rdma_connection *conn)
{
	const char *why = NULL;

	if (!conn)
		return NULL;
	sd_eng_lock(); /* set once by the engine thread, never changed after */
	if (sd_conn_live(conn) && conn->why[0])
		why = conn->why;
	sd_eng_unlock();
	return why;
}

/* Live softdoca objects of a kind ("connection", "link", "event",
 * "listener", "ctrl_frame"), for leak checks; -1 for an unknown kind. */
SD_EXPORT long softdoca_debug_live_objects(const char *kind)
{
	static const char *const names[SD_LIVE_NUM] = {"connection", "link", "event", "listener", "ctrl_frame"};

	for (int i = 0; kind && i < SD_LIVE_NUM; i++)
		if (!strcmp(kind, names[i]))
			return atomic_load(&sd_live[i]);
	return -1;
}

/* A counter of softdoca's internals, for tests that check who does the work
 * ("engine_provider_progress": the engine thread's progress calls of the
 * provider in use; "provider:<name>": the provider's own, e.g. ucx's
 * "provider:worker_swaps"); -1 for an unknown name. */
SD_EXPORT long softdoca_debug_counter(const char *name)
{
	if (name && !strcmp(name, "engine_provider_progress"))
		return (long)sd_eng_prov_progress_calls();
	if (name && !strncmp(name, "provider:", 9))
		return sd_prov_counter(name + 9);
	if (name && !strcmp(name, "park_bytes")) { /* the heap of RNR parks: all links, and messages parked through a provider */
		long v;

		sd_eng_lock();
		v = (long)sd_link_park_bytes();
		sd_eng_unlock();
		return v;
	}
	return -1;
}

/* ---------------------------------------------------------------- transports of a connection */
SD_EXPORT const char *softdoca_transport_name(const struct doca_rdma_connection *conn)
{
	const char *name = "tcp";

	if (!conn)
		return name;
	sd_eng_lock();
	if (sd_conn_live(conn) && conn->link && sd_xport_ready(conn->link->xpeer))
		name = "shm";
	sd_eng_unlock();
	return name;
}

SD_EXPORT const char *softdoca_provider_name(void)
{
	return sd_prov_name();
}

SD_EXPORT const char *softdoca_provider_transport(const struct doca_rdma_connection *conn)
{
	static _Thread_local char out[64];
	const char *t = NULL;

	if (!conn)
		return NULL;
	sd_eng_lock();
	if (sd_conn_live(conn))
		t = sd_prov_conn_transport(conn);
	if (t)
		snprintf(out, sizeof(out), "%s", t);
	sd_eng_unlock();
	return t ? out : NULL;
}
