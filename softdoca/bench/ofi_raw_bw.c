/*
 * Raw libfabric baseline for the ofi provider's bench (no softdoca): the same
 * fabric and endpoint set-up the provider chooses (FI_PROVIDER honoured;
 * FI_EP_MSG where the provider has it, else FI_EP_RDM; the same MR modes), two
 * processes (fork, addresses over a socketpair), then
 *   8 B fi_write round trips (write, wait for its completion), and
 *   1 MiB fi_write bandwidth, 16 in flight, 512 writes,
 * medians of 3 rounds, one line: RAW prov=... write8_us_median=... write1M_MBps_median=...
 * Plain fi_write (the provider's default completion: transmit-complete); with
 * --dc, fi_writemsg with FI_DELIVERY_COMPLETE, the semantics the ofi provider's
 * writes have (a DOCA write completes once its data is at the target).
 * Links libfabric directly (a bench, not part of pydoca).
 */
#define _GNU_SOURCE
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } while (0)
#define TRY(x) do { int _r = (int)(x); if (_r) DIE("%s: %s", #x, fi_strerror(-_r)); } while (0)
#define MB (1u << 20)

static struct fi_info *info;
static struct fid_fabric *fab;
static struct fid_domain *dom;
static struct fid_eq *eq;
static struct fid_ep *ep;
static struct fid_pep *pep;
static struct fid_av *av;
static struct fid_cq *cq;
static fi_addr_t peer = FI_ADDR_UNSPEC;

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void xw(int fd, const void *b, size_t n) { if (write(fd, b, n) != (ssize_t)n) DIE("socket write"); }
static void xr(int fd, void *b, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t k = read(fd, (char *)b + got, n - got);
		if (k <= 0)
			DIE("socket read");
		got += (size_t)k;
	}
}

static void get_info(void)
{
	struct fi_info *h = fi_allocinfo();
	int types[2] = { FI_EP_MSG, FI_EP_RDM };

	for (int t = 0; t < 2; t++) {
		h->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_SEND | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE;
		h->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
		h->ep_attr->type = (enum fi_ep_type)types[t];
		h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
		h->domain_attr->threading = FI_THREAD_DOMAIN;
		h->tx_attr->msg_order = FI_ORDER_SAS;
		h->rx_attr->msg_order = FI_ORDER_SAS;
		if (fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, h, &info) == 0)
			break;
		info = NULL;
	}
	if (!info)
		DIE("no provider");
	fi_freeinfo(h);
	TRY(fi_fabric(info->fabric_attr, &fab, NULL));
	TRY(fi_domain(fab, info, &dom, NULL));
	{
		struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_NONE };
		TRY(fi_cq_open(dom, &ca, &cq, NULL));
	}
	if (info->ep_attr->type == FI_EP_MSG) {
		struct fi_eq_attr ea = { .wait_obj = FI_WAIT_UNSPEC };
		TRY(fi_eq_open(fab, &ea, &eq, NULL));
	}
}

static void ep_up(struct fi_info *i)
{
	TRY(fi_endpoint(dom, i, &ep, NULL));
	if (av)
		TRY(fi_ep_bind(ep, &av->fid, 0));
	if (eq)
		TRY(fi_ep_bind(ep, &eq->fid, 0));
	TRY(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	TRY(fi_enable(ep));
}

static void wait_event(uint32_t want)
{
	struct fi_eq_cm_entry e;
	uint32_t ev;
	ssize_t k;

	do
		k = fi_eq_sread(eq, &ev, &e, sizeof(e), 5000, 0);
	while (k == -FI_EAGAIN);
	if (k < 0 || ev != want)
		DIE("eq event %u (want %u): %zd", ev, want, k);
	if (want == FI_CONNREQ) {
		ep_up(e.info);
		TRY(fi_accept(ep, NULL, 0));
		fi_freeinfo(e.info);
		wait_event(FI_CONNECTED);
	}
}

/* connect: server = the target (passive), client = the initiator */
static void connect_peers(int sock, int server)
{
	char name[256];
	size_t nl = sizeof(name);
	uint32_t l;

	if (info->ep_attr->type == FI_EP_MSG) {
		if (server) {
			TRY(fi_passive_ep(fab, info, &pep, NULL));
			TRY(fi_pep_bind(pep, &eq->fid, 0));
			TRY(fi_listen(pep));
			TRY(fi_getname(&pep->fid, name, &nl));
			l = (uint32_t)nl;
			xw(sock, &l, 4);
			xw(sock, name, nl);
			wait_event(FI_CONNREQ);
		} else {
			struct fi_info *ci = fi_dupinfo(info);
			xr(sock, &l, 4);
			xr(sock, name, l);
			free(ci->src_addr);
			ci->src_addr = NULL;
			ci->src_addrlen = 0;
			ep_up(ci);
			fi_freeinfo(ci);
			TRY(fi_connect(ep, name, NULL, 0));
			wait_event(FI_CONNECTED);
		}
		return;
	}
	{
		struct fi_av_attr aa = { .type = FI_AV_MAP };
		TRY(fi_av_open(dom, &aa, &av, NULL));
	}
	ep_up(info);
	TRY(fi_getname(&ep->fid, name, &nl));
	l = (uint32_t)nl;
	xw(sock, &l, 4);
	xw(sock, name, nl);
	xr(sock, &l, 4);
	xr(sock, name, l);
	if (fi_av_insert(av, name, 1, &peer, 0, NULL) != 1)
		DIE("av_insert");
}

static int cq_poll(void)
{
	struct fi_cq_data_entry e[16];
	ssize_t k = fi_cq_read(cq, e, 16);

	if (k == -FI_EAVAIL) {
		struct fi_cq_err_entry ee = {0};
		fi_cq_readerr(cq, &ee, 0);
		DIE("cq error %s", fi_strerror(ee.err));
	}
	return k > 0 ? (int)k : 0;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int dc; /* --dc: FI_DELIVERY_COMPLETE, the provider's write semantics (data at the target) */

static ssize_t wr(void *buf, size_t len, void *desc, uint64_t raddr, uint64_t key)
{
	struct iovec iov = { buf, len };
	struct fi_rma_iov riov = { raddr, len, key };
	struct fi_msg_rma m = { .msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = peer, .rma_iov = &riov,
				.rma_iov_count = 1 };

	if (!dc)
		return fi_write(ep, buf, len, desc, peer, raddr, key, NULL);
	return fi_writemsg(ep, &m, FI_COMPLETION | FI_DELIVERY_COMPLETE);
}

int main(int argc, char **argv)
{
	int sv[2];
	pid_t pid;
	uint8_t *buf = aligned_alloc(4096, MB);
	struct fid_mr *mr;
	uint64_t rinfo[2];
	void *desc;
	enum { ROUNDS = 3, LAT_N = 5000, BW_N = 512, WIN = 16 };
	double lat[ROUNDS], bw[ROUNDS];

	dc = argc > 1 && !strcmp(argv[1], "--dc");
	memset(buf, 1, MB);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 1;
	pid = fork();
	get_info();
	connect_peers(pid == 0 ? sv[1] : sv[0], pid == 0);
	TRY(fi_mr_reg(dom, buf, MB, FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, pid == 0 ? 7 : 8, 0, &mr,
		      NULL));
	desc = fi_mr_desc(mr);
	if (pid == 0) { /* the target: progress until told to stop */
		struct pollfd pf = { .fd = sv[1], .events = POLLIN };
		char c;
		rinfo[0] = (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)buf : 0;
		rinfo[1] = fi_mr_key(mr);
		xw(sv[1], rinfo, sizeof(rinfo));
		for (;;) {
			cq_poll();
			if (poll(&pf, 1, 0) == 1)
				break;
		}
		xr(sv[1], &c, 1);
		fi_close(&ep->fid);
		_exit(0);
	}
	xr(sv[0], rinfo, sizeof(rinfo));
	for (int r = 0; r < ROUNDS; r++) {
		double t0 = 0;
		for (int i = -500; i < LAT_N; i++) {
			if (i == 0)
				t0 = now_us();
			while (wr(buf, 8, desc, rinfo[0], rinfo[1]) == -FI_EAGAIN)
				cq_poll();
			while (!cq_poll())
				;
		}
		lat[r] = (now_us() - t0) / LAT_N;
	}
	for (int r = 0; r < ROUNDS; r++) {
		int issued = 0, done = 0;
		double t0 = now_us();
		while (done < BW_N) {
			while (issued < BW_N && issued - done < WIN) {
				ssize_t k = wr(buf, MB, desc, rinfo[0], rinfo[1]);
				if (k == -FI_EAGAIN)
					break;
				if (k)
					DIE("fi_write %s", fi_strerror((int)-k));
				issued++;
			}
			done += cq_poll();
		}
		bw[r] = (double)BW_N * MB / (now_us() - t0);
	}
	qsort(lat, ROUNDS, sizeof(double), cmp_d);
	qsort(bw, ROUNDS, sizeof(double), cmp_d);
	printf("RAW%s prov=%s ep=%s write8_us_median=%.3f (min %.3f max %.3f) write1M_MBps_median=%.1f (min %.1f max %.1f)\n",
	       dc ? "(delivery-complete)" : "(plain fi_write)", info->fabric_attr->prov_name, info->ep_attr->type == FI_EP_MSG ? "msg" : "rdm", lat[1], lat[0], lat[2],
	       bw[1], bw[0], bw[2]);
	xw(sv[0], "q", 1);
	waitpid(pid, NULL, 0);
	return 0;
}
