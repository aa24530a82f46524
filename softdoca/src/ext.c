/*
 * softdoca extensions: facts DOCA 3.3 keeps internal, exported under a
 * softdoca_ prefix so pydoca can surface them when running on softdoca.
 */
#include "internal.h"
#include "rdma.h"

SD_EXPORT int softdoca_rdma_connection_get_fail_reason(const struct doca_rdma_connection *conn);
SD_EXPORT int softdoca_rdma_connection_get_private_data(const struct doca_rdma_connection *conn, const uint8_t **data,
							 uint8_t *len);

/* 0 none, 1 rejected by the peer, 2 timed out, 3 refused (nothing listening), 4 lost; -1 bad handle */
SD_EXPORT int softdoca_rdma_connection_get_fail_reason(const struct doca_rdma_connection *conn)
{
	if (!conn)
		return -1;
	return (int)sd_rdma_conn_fail_reason(conn);
}

/* The private data the peer passed to doca_rdma_connection_accept (requester side). */
SD_EXPORT int softdoca_rdma_connection_get_private_data(const struct doca_rdma_connection *conn, const uint8_t **data,
							 uint8_t *len)
{
	if (!conn || !data || !len)
		return -1;
	*data = sd_rdma_conn_private_data(conn, len);
	return 0;
}
