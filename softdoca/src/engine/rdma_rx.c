/*
 * softdoca RDMA rx framing: what the engine reads from a link. One recv into
 * the link's staging buffer (rb) brings many small frames, which are parsed
 * and copied out of it; a payload of at least SD_RX_DIRECT_MIN bytes is read
 * straight into its destination, with the staging buffer as the last piece
 * of the same readv (whatever follows the frame lands there).
 *
 * Each decoded header goes to the link's on_header handler, which says where
 * the payload goes (rx_iov, or rx_discard to drain it); once the payload is
 * in, on_payload_done acts on the frame. A header the handler defers (an RNR
 * park holds the peer's next request) is kept, at most one, the link paused,
 * and handed to it again before anything else once the link resumes. Engine
 * lock held.
 */
#include "rdma.h"

#include <errno.h>
#include <string.h>

static uint8_t scratch[65536]; /* draining links read into it (engine lock) */

static void iov_advance(struct iovec **iov, int *cnt, size_t n)
{
	while (n > 0 && *cnt > 0) {
		if (n >= (*iov)->iov_len) {
			n -= (*iov)->iov_len;
			(*iov)++;
			(*cnt)--;
		} else {
			(*iov)->iov_base = (uint8_t *)(*iov)->iov_base + n;
			(*iov)->iov_len -= n;
			n = 0;
		}
	}
	while (*cnt > 0 && (*iov)->iov_len == 0) {
		(*iov)++;
		(*cnt)--;
	}
}

/* Payload bytes from the staging buffer into their destination: registered
 * application memory for a write, a posted receive or a read's destination.
 * The NIC-side copy of one-sided RDMA (softdoca/tsan.supp names it). */
__attribute__((noinline)) static void sd_eng_rx_copy(struct sd_link *l, const uint8_t *p, size_t n)
{
	while (n > 0 && l->rx_iovcnt > 0) {
		size_t c = l->rx_iov->iov_len < n ? l->rx_iov->iov_len : n;

		memcpy(l->rx_iov->iov_base, p, c);
		p += c;
		n -= c;
		iov_advance(&l->rx_iov, &l->rx_iovcnt, c);
	}
}

static int frame_done(struct sd_link *l, doca_error_t *st)
{
	int rc;

	l->rx_state = SD_RX_HDR;
	rc = l->ops->on_payload_done(l, st);
	l->rx_action = SD_RXA_NONE;
	l->rx_discard = 0;
	return rc;
}

static int header_done(struct sd_link *l, doca_error_t *st)
{
	int rc;

	l->rx_hdr_got = 0;
	if (sd_hdr_decode(l->rx_hdr_buf, &l->rx) != 0) {
		SD_WARN("rdma: malformed frame header, closing link");
		*st = DOCA_ERROR_CONNECTION_RESET;
		return -1;
	}
	rc = l->ops->on_header(l, st);
	if (rc < 0)
		return -1;
	if (rc > 0) {
		/* deferred: keep the header, read nothing behind it until the layer above resumes the link */
		l->rx_held = 1;
		sd_link_set_rx_paused(l, 1);
		return 0;
	}
	l->rx_left = l->rx.payload_len;
	if (l->rx_left == 0)
		return frame_done(l, st);
	l->rx_state = SD_RX_PAYLOAD;
	return 0;
}

static int rx_stop(const struct sd_link *l)
{
	return l->dead || l->rx_paused || l->draining;
}

/* Process the staged bytes (all of them unless the link pauses, dies or
 * drains). Returns -1 when the link must be closed with *st. */
static int rx_consume(struct sd_link *l, doca_error_t *st, int *frames)
{
	if (l->rx_held && !rx_stop(l)) { /* the header deferred while paused comes first */
		l->rx_held = 0;
		if (header_done(l, st) != 0)
			return -1;
	}
	while (l->rb_pos < l->rb_end && !rx_stop(l)) {
		size_t avail = l->rb_end - l->rb_pos;
		const uint8_t *p = l->rb + l->rb_pos;

		if (l->rx_state == SD_RX_HDR) {
			size_t take = SD_HDR_LEN - l->rx_hdr_got;

			if (take > avail)
				take = avail;
			memcpy(l->rx_hdr_buf + l->rx_hdr_got, p, take);
			l->rb_pos += take;
			l->rx_hdr_got += take;
			if (l->rx_hdr_got < SD_HDR_LEN)
				break;
			(*frames)++;
			if (header_done(l, st) != 0)
				return -1;
		} else {
			size_t take = l->rx_left < avail ? l->rx_left : avail;

			if (!l->rx_discard && l->rx_iovcnt)
				sd_eng_rx_copy(l, p, take);
			l->rb_pos += take;
			l->rx_left -= take;
			if (l->rx_left == 0 && frame_done(l, st) != 0)
				return -1;
		}
	}
	if (l->draining)
		l->rb_pos = l->rb_end;
	if (l->rb_pos == l->rb_end)
		l->rb_pos = l->rb_end = 0;
	return 0;
}

/* While a large payload is read straight into place, wake only when a good
 * part of it can be read at once (SO_RCVLOWAT): fewer wake-ups and reads per
 * payload. Never more than what is still due, so a live sender always meets it. */
#define SD_RX_LOWAT (1024u << 10)
static void rx_lowat(struct sd_link *l)
{
	int want = 0;

	if (!l->dead && !l->rx_paused && !l->draining && l->rx_state == SD_RX_PAYLOAD && !l->rx_discard &&
	    l->rx_iovcnt && l->rx_left >= 2 * SD_RX_DIRECT_MIN)
		want = (int)(l->rx_left < SD_RX_LOWAT ? l->rx_left : SD_RX_LOWAT);
	if (want == l->rx_lowat)
		return;
	int v = want ? want : 1;

	if (setsockopt(l->ep.fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)) == 0)
		l->rx_lowat = want;
}

static int rx_read_turn(struct sd_link *l, doca_error_t *st);

/* The link's input ended (r == 0) or failed (r < 0, errno): its cause, for the
 * connection's error detail (a link being drained was closed here: no cause) */
static void rx_lost(struct sd_link *l, ssize_t r)
{
	if (r == 0)
		sd_link_set_why(l, "the peer closed the connection (its process exited, or it closed it)");
	else if (errno == ECONNRESET)
		sd_link_set_why(l, "the peer reset the connection (its process died, or its host dropped it)");
	else if (errno == ETIMEDOUT || errno == EHOSTUNREACH)
		sd_link_set_why(l, "the kernel gave up on the connection (the peer's host stopped answering)");
	else
		sd_link_set_why(l, "the connection's socket failed (errno %d)", errno);
}

/* One turn of reading; whatever ended it (EAGAIN, the per-turn budget, a
 * pause, a finished payload), the low-water mark then matches the state the
 * link is left in, so epoll never waits for bytes that are not due. */
int sd_rx_read(struct sd_link *l, doca_error_t *st)
{
	int rc = rx_read_turn(l, st);

	if (l->ep.fd >= 0)
		rx_lowat(l);
	return rc;
}

static int rx_read_turn(struct sd_link *l, doca_error_t *st)
{
	int frames = 0, drained = 0;
	size_t bytes = 0;

	l->rx_kick = 0;
	while (!l->dead && !l->rx_paused) {
		ssize_t r;
		size_t direct = 0;

		if (l->draining) {
			l->rb_pos = l->rb_end = 0;
			r = recv(l->ep.fd, scratch, sizeof(scratch), 0);
			if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
				*st = DOCA_ERROR_CONNECTION_RESET;
				return -1;
			}
			if (r < 0 && errno != EINTR)
				return 0;
			bytes += r > 0 ? (size_t)r : 0;
			if (bytes >= (8u << 20))
				return 0;
			continue;
		}
		if (rx_consume(l, st, &frames) != 0)
			return -1;
		if (rx_stop(l))
			continue;
		if (drained)
			return 0; /* a short read between payloads: the socket was empty (no EAGAIN read needed) */
		if (frames >= 1024 || bytes >= (8u << 20))
			return 0; /* level-triggered: the rest on the next turn */
		if (l->rx_state == SD_RX_PAYLOAD && !l->rx_discard && l->rx_iovcnt && l->rx_left >= SD_RX_DIRECT_MIN) {
			/* never read past this frame into the destination: the
			 * destination may be larger than the payload; what follows
			 * lands in the staging buffer */
			struct iovec clip[65];
			int cnt = 0;
			size_t want = l->rx_left;

			for (int k = 0; k < l->rx_iovcnt && cnt < 64 && want; k++) {
				clip[cnt] = l->rx_iov[k];
				if (clip[cnt].iov_len > want)
					clip[cnt].iov_len = want;
				want -= clip[cnt].iov_len;
				direct += clip[cnt].iov_len;
				cnt++;
			}
			clip[cnt].iov_base = l->rb;
			clip[cnt].iov_len = SD_RB_CAP;
			cnt++;
			r = readv(l->ep.fd, clip, cnt);
		} else {
			r = recv(l->ep.fd, l->rb, SD_RB_CAP, 0);
		}
		if (r == 0) {
			rx_lost(l, r);
			*st = DOCA_ERROR_CONNECTION_RESET;
			return -1;
		}
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			rx_lost(l, r);
			*st = DOCA_ERROR_CONNECTION_RESET;
			return -1;
		}
		l->last_rx_ns = sd_now_ns();
		bytes += (size_t)r;
		drained = !direct && (size_t)r < SD_RB_CAP; /* into a payload: read on while it streams in */
		if (direct) {
			size_t d = (size_t)r < direct ? (size_t)r : direct;

			l->rx_left -= d;
			iov_advance(&l->rx_iov, &l->rx_iovcnt, d);
			l->rb_pos = 0;
			l->rb_end = (size_t)r - d;
			if (l->rx_left == 0 && frame_done(l, st) != 0)
				return -1;
		} else {
			l->rb_pos = 0;
			l->rb_end = (size_t)r;
		}
	}
	return 0;
}
