/*
 * softdoca RDMA CM flavour and sockets: listeners, the RDMA CM calls
 * (listen / accept / reject / connect_to_addr) and address objects. The
 * handshake itself is in rdma_conn.c. The engine thread serves a listener
 * through its sd_ep.on_event handler; links it accepts get the connection
 * layer's handlers (sd_conn_link_ops).
 *
 * Sockets: non-blocking, close-on-exec, TCP_NODELAY, keepalive (idle T/3,
 * interval T/6, 3 probes) and TCP_USER_TIMEOUT T, where T is
 * SOFTDOCA_TIMEOUT_MS. Listeners bind the device's address: the IPv4 one
 * and/or the IPv6 one (IPV6_V6ONLY), never a wildcard.
 */
#define _GNU_SOURCE
#include "rdma.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* ---------------------------------------------------------------- sockets */
void sd_sock_tune(int fd)
{
	int one = 1;
	uint64_t ms = sd_eng_timeout_ns() / 1000000ull;
	int idle = (int)(ms / 3000), intvl = (int)(ms / 6000), cnt = 3;
	unsigned int ut = (unsigned int)ms;

	if (idle < 1)
		idle = 1;
	if (intvl < 1)
		intvl = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut));
}

socklen_t sd_dev_sockaddr(const struct doca_devinfo *info, int v6, uint16_t port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (!v6) {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;
		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		memcpy(&a->sin_addr, info->ipv4, 4);
		return sizeof(*a);
	} else {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		memcpy(&a->sin6_addr, info->ipv6, 16);
		if (info->ipv6[0] == 0xfe && (info->ipv6[1] & 0xc0) == 0x80)
			a->sin6_scope_id = info->iface_index;
		return sizeof(*a);
	}
}

void sd_addr_from_sockaddr(struct doca_rdma_addr *a, const struct sockaddr_storage *ss, socklen_t len)
{
	memset(a, 0, sizeof(*a));
	memcpy(&a->ss, ss, len);
	a->sslen = len;
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)ss;
		a->type = DOCA_RDMA_ADDR_TYPE_IPv4;
		a->port = ntohs(s->sin_port);
		inet_ntop(AF_INET, &s->sin_addr, a->str, sizeof(a->str));
	} else {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)ss;
		a->type = DOCA_RDMA_ADDR_TYPE_IPv6;
		a->port = ntohs(s->sin6_port);
		inet_ntop(AF_INET6, &s->sin6_addr, a->str, sizeof(a->str));
	}
}

static void listener_on_event(struct sd_ep *ep, uint32_t events);

int sd_open_listener(struct doca_rdma *rdma, int v6, uint16_t port, int oob, doca_error_t *err)
{
	struct sockaddr_storage ss;
	socklen_t len = sd_dev_sockaddr(&rdma->dev->info, v6, port, &ss);
	int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	struct sd_listener *l;

	if (fd < 0) {
		*err = DOCA_ERROR_OPERATING_SYSTEM;
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (v6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 128) != 0) {
		*err = errno == EADDRINUSE ? DOCA_ERROR_IN_USE : DOCA_ERROR_CONNECTION_ABORTED;
		close(fd);
		return -1;
	}
	l = calloc(1, sizeof(*l));
	if (!l) {
		close(fd);
		*err = DOCA_ERROR_NO_MEMORY;
		return -1;
	}
	l->ep.kind = SD_EP_LISTENER;
	l->ep.fd = fd;
	l->ep.on_event = listener_on_event;
	l->rdma = rdma;
	l->port = port;
	l->oob = oob;
	if (sd_eng_ep_add(&l->ep, EPOLLIN) != 0) {
		close(fd);
		free(l);
		*err = DOCA_ERROR_OPERATING_SYSTEM;
		return -1;
	}
	SD_LIVE_INC(SD_LIVE_LISTENER);
	rdma->lg.eng_ops = &sd_conn_rdma_ops; /* the engine now has work of ours to do for rdma */
	l->next = rdma->listeners;
	rdma->listeners = l;
	if (oob)
		rdma->oob = l;
	return 0;
}

void sd_listener_close(struct sd_listener *l)
{
	struct sd_listener **pp;

	for (pp = &l->rdma->listeners; *pp; pp = &(*pp)->next) {
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	}
	if (l->rdma->oob == l)
		l->rdma->oob = NULL;
	sd_eng_ep_del(&l->ep);
	close(l->ep.fd);
	SD_LIVE_DEC(SD_LIVE_LISTENER);
	free(l);
}

/* Readable listener: accept what waits (epoll registration, engine thread). */
static void listener_on_event(struct sd_ep *ep, uint32_t events SD_UNUSED)
{
	struct sd_listener *lst = (struct sd_listener *)ep;
	uint64_t T = sd_eng_timeout_ns(), req = (uint64_t)lst->rdma->timeout_ms * 1000000ull;

	for (int i = 0; i < 64; i++) {
		int fd = accept4(lst->ep.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct sd_link *l;

		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				/* level-triggered: stop listening for a moment instead of spinning */
				SD_WARN("rdma: accept failed: %s; pausing the listener", strerror(errno));
				sd_eng_ep_mod(&lst->ep, 0);
				lst->retry_ns = sd_now_ns() + 100000000ull;
			}
			return;
		}
		sd_sock_tune(fd);
		l = sd_link_new(&lst->rdma->lg, fd, 0, &sd_conn_link_ops);
		if (!l) {
			close(fd);
			continue;
		}
		l->from_listener = lst->oob ? 1 : 2;
		l->deadline_ns = sd_now_ns() + (req > T ? req : T);
	}
}

uint64_t sd_listener_timers(struct doca_rdma *rdma, uint64_t now)
{
	uint64_t next = 0;

	for (struct sd_listener *ls = rdma->listeners; ls; ls = ls->next) {
		if (ls->retry_ns && now >= ls->retry_ns) {
			ls->retry_ns = 0;
			sd_eng_ep_mod(&ls->ep, EPOLLIN);
		}
		next = sd_min_deadline(next, ls->retry_ns);
	}
	return next;
}

/* ---------------------------------------------------------------- CM API */
SD_EXPORT doca_error_t doca_rdma_start_listen_to_port(struct doca_rdma *rdma, uint16_t port)
{
	doca_error_t rc = DOCA_SUCCESS, rc6 = DOCA_SUCCESS;
	const struct doca_devinfo *in;
	int ok = 0;

	if (!rdma || port == 0)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_rdma_live(rdma))
		return DOCA_ERROR_BAD_STATE;
	in = &rdma->dev->info;
	sd_eng_lock();
	if (!sd_rdma_ctx_usable(rdma)) {
		rc = DOCA_ERROR_BAD_STATE;
		goto out;
	}
	for (struct sd_listener *l = rdma->listeners; l; l = l->next) {
		if (!l->oob && l->port == port) {
			rc = DOCA_ERROR_ALREADY_EXIST;
			goto out;
		}
	}
	if (in->has_ipv4 && sd_open_listener(rdma, 0, port, 0, &rc) == 0)
		ok = 1;
	if (in->has_ipv6 && sd_open_listener(rdma, 1, port, 0, &rc6) == 0)
		ok = 1;
	if (ok && ((in->has_ipv4 && rc == DOCA_ERROR_IN_USE) || (in->has_ipv6 && rc6 == DOCA_ERROR_IN_USE))) {
		/* one of the device's addresses is taken on that port: the
		 * port is not ours, whatever the other family got */
		struct sd_listener *l, *nx;

		for (l = rdma->listeners; l; l = nx) {
			nx = l->next;
			if (!l->oob && l->port == port)
				sd_listener_close(l);
		}
		ok = 0;
		rc = DOCA_ERROR_IN_USE;
	}
	if (ok)
		rc = DOCA_SUCCESS;
	else if (!in->has_ipv4 && !in->has_ipv6)
		rc = DOCA_ERROR_NOT_SUPPORTED;
	else if (!in->has_ipv4 || rc6 == DOCA_ERROR_IN_USE)
		rc = rc6;
out:
	sd_eng_unlock();
	return rc;
}

SD_EXPORT doca_error_t doca_rdma_stop_listen_to_port(struct doca_rdma *rdma, uint16_t port)
{
	int found = 0;
	struct sd_listener *l, *nx;

	if (!rdma || port == 0)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_rdma_live(rdma))
		return DOCA_ERROR_BAD_STATE;
	sd_eng_lock();
	for (l = rdma->listeners; l; l = nx) {
		nx = l->next;
		if (!l->oob && l->port == port) {
			sd_listener_close(l);
			found = 1;
		}
	}
	sd_eng_unlock();
	return found ? DOCA_SUCCESS : DOCA_ERROR_INVALID_VALUE;
}

SD_EXPORT doca_error_t doca_rdma_connection_accept(struct doca_rdma_connection *c, void *priv, uint8_t len)
{
	doca_error_t rc = DOCA_SUCCESS;

	if (!c || (len && !priv))
		return DOCA_ERROR_INVALID_VALUE;
	sd_eng_lock();
	if (!sd_conn_live(c) || !c->is_cm || c->cm_client) {
		rc = DOCA_ERROR_INVALID_VALUE;
	} else if (c->state != SDC_REQUESTED || !c->link || !c->rdma->lg.running) {
		rc = c->state == SDC_CLOSED ? DOCA_ERROR_CONNECTION_ABORTED : DOCA_ERROR_BAD_STATE;
	} else if (sd_conn_send_ctrl(c->link, SD_OP_CM_ACCEPT, priv, len) != 0) {
		rc = DOCA_ERROR_NO_MEMORY;
	} else {
		c->state = SDC_ACCEPTING;
		c->deadline_ns = sd_now_ns() + (uint64_t)c->rdma->timeout_ms * 1000000ull;
		sd_link_flush(c->link);
	}
	sd_eng_unlock();
	return rc;
}

SD_EXPORT doca_error_t doca_rdma_connection_reject(struct doca_rdma_connection *c)
{
	doca_error_t rc = DOCA_SUCCESS;

	if (!c)
		return DOCA_ERROR_INVALID_VALUE;
	sd_eng_lock();
	if (!sd_conn_live(c) || !c->is_cm || c->cm_client) {
		rc = DOCA_ERROR_INVALID_VALUE;
	} else if (c->state != SDC_REQUESTED) {
		rc = c->state == SDC_CLOSED ? DOCA_ERROR_CONNECTION_ABORTED : DOCA_ERROR_BAD_STATE;
	} else if (c->link) {
		struct sd_link *l = c->link;
		sd_conn_send_ctrl(l, SD_OP_CM_REJECT, NULL, 0);
		sd_link_drain(l, DOCA_ERROR_CONNECTION_ABORTED);
	} else {
		sd_conn_on_link_closed(c, DOCA_ERROR_CONNECTION_ABORTED, 0);
	}
	sd_eng_unlock();
	return rc;
}

SD_EXPORT doca_error_t doca_rdma_connect_to_addr(struct doca_rdma *rdma, struct doca_rdma_addr *addr,
						 union doca_data user_data)
{
	struct doca_rdma_connection *c;
	doca_error_t rc = DOCA_SUCCESS;

	if (!rdma || !addr)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_rdma_live(rdma))
		return DOCA_ERROR_BAD_STATE;
	if (!sd_handle_live(addr) || addr->port == 0)
		return DOCA_ERROR_INVALID_VALUE;
	sd_eng_lock();
	rc = sd_rdma_conn_slot_check(rdma);
	if (rc != DOCA_SUCCESS)
		goto out;
	c = sd_conn_new(rdma);
	if (!c) {
		rc = DOCA_ERROR_NO_MEMORY;
		goto out;
	}
	c->is_cm = 1;
	c->cm_client = 1;
	c->dialer = 1;
	c->user_data = user_data;
	c->peer = *addr;
	c->state = SDC_CONNECTING;
	c->deadline_ns = sd_now_ns() + (uint64_t)rdma->timeout_ms * 1000000ull;
	sd_conn_dial(c, &addr->ss, addr->sslen);
out:
	sd_eng_unlock();
	return rc;
}

/* ---------------------------------------------------------------- addresses */
SD_EXPORT doca_error_t doca_rdma_addr_create(enum doca_rdma_addr_type type, const char *address, uint16_t port,
					     struct doca_rdma_addr **addr)
{
	struct addrinfo hints, *res = NULL;
	struct doca_rdma_addr *a;
	char buf[80];

	if (!address || !addr || strlen(address) >= sizeof(buf))
		return DOCA_ERROR_INVALID_VALUE;
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = AI_NUMERICHOST;
	hints.ai_socktype = SOCK_STREAM;
	switch (type) {
	case DOCA_RDMA_ADDR_TYPE_IPv4:
		hints.ai_family = AF_INET;
		break;
	case DOCA_RDMA_ADDR_TYPE_IPv6:
	case DOCA_RDMA_ADDR_TYPE_GID:
		hints.ai_family = AF_INET6;
		break;
	default:
		return DOCA_ERROR_INVALID_VALUE;
	}
	strcpy(buf, address);
	if (getaddrinfo(buf, NULL, &hints, &res) != 0 || !res)
		return DOCA_ERROR_INVALID_VALUE;
	a = calloc(1, sizeof(*a));
	if (!a) {
		freeaddrinfo(res);
		return DOCA_ERROR_NO_MEMORY;
	}
	memcpy(&a->ss, res->ai_addr, res->ai_addrlen);
	a->sslen = (socklen_t)res->ai_addrlen;
	freeaddrinfo(res);
	if (a->ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&a->ss;
		static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

		if (type == DOCA_RDMA_ADDR_TYPE_GID && memcmp(&s6->sin6_addr, mapped, 12) == 0) {
			/* IPv4-mapped GID (RoCE v2): reach the IPv4 address */
			struct sockaddr_in s4;
			memset(&s4, 0, sizeof(s4));
			s4.sin_family = AF_INET;
			memcpy(&s4.sin_addr, (uint8_t *)&s6->sin6_addr + 12, 4);
			memset(&a->ss, 0, sizeof(a->ss));
			memcpy(&a->ss, &s4, sizeof(s4));
			a->sslen = sizeof(s4);
		} else {
			s6->sin6_port = htons(port);
		}
	}
	if (a->ss.ss_family == AF_INET)
		((struct sockaddr_in *)&a->ss)->sin_port = htons(port);
	a->type = type;
	a->port = port;
	snprintf(a->str, sizeof(a->str), "%s", address);
	if (sd_handle_add(a) != 0) {
		free(a);
		return DOCA_ERROR_NO_MEMORY;
	}
	*addr = a;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_addr_destroy(struct doca_rdma_addr *addr)
{
	if (!addr)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_handle_live(addr))
		return DOCA_ERROR_BAD_STATE; /* not created by doca_rdma_addr_create (or destroyed) */
	sd_handle_del(addr);
	free(addr);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_rdma_addr_get_params(struct doca_rdma_addr *addr, enum doca_rdma_addr_type *type,
						 const char **address, uint16_t *port)
{
	if (!addr || !type || !address || !port)
		return DOCA_ERROR_INVALID_VALUE;
	*type = addr->type;
	*address = addr->str;
	*port = addr->port;
	return DOCA_SUCCESS;
}
