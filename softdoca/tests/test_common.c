/* test_common: errors, devices, mmap/buf/inventory, export descriptors, pe/ctx.
 * Plain C, no framework: one line per check, a summary line, non-zero exit on
 * failure. Links the core objects directly so it can use internal.h. */
#include "check.h"

#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------------ errors */
static void test_errors(void)
{
	int all_ok = 1;

	for (int e = DOCA_SUCCESS; e <= DOCA_ERROR_DEVICE_FATAL_ERROR; e++) {
		const char *n = doca_error_get_name((doca_error_t)e);
		const char *d = doca_error_get_descr((doca_error_t)e);
		if (!n || strncmp(n, "DOCA_", 5) != 0 || !d || !*d || strstr(n, "UNKNOWN_CODE"))
			all_ok = 0;
	}
	CHECK(all_ok, "every doca_error_t has a name and a description");
	CHECK(!strcmp(doca_error_get_name(DOCA_ERROR_BAD_STATE), "DOCA_ERROR_BAD_STATE"), "name of BAD_STATE");
	CHECK(!strcmp(doca_error_get_name(DOCA_SUCCESS), "DOCA_SUCCESS"), "name of SUCCESS");
	CHECK(!strcmp(doca_error_get_name(DOCA_ERROR_DEVICE_FATAL_ERROR), "DOCA_ERROR_DEVICE_FATAL_ERROR"),
	      "name of last code");
	CHECK(doca_error_get_name((doca_error_t)999) != NULL && doca_error_get_descr((doca_error_t)999) != NULL,
	      "unknown code 999: never NULL");
	CHECK(doca_error_get_name((doca_error_t)-1) != NULL && doca_error_get_descr((doca_error_t)-1) != NULL,
	      "unknown code -1: never NULL");
	CHECK(!strcmp(doca_version_runtime(), "3.3.0 (softdoca)"), "runtime version");
}

/* ------------------------------------------------------------------ devices */
static struct doca_dev *test_devices(void)
{
	struct doca_devinfo **list = NULL, *lo = NULL;
	struct doca_dev *dev = NULL;
	uint32_t n = 0, prev_idx = 0, idx = 0;
	int ordered = 1;
	char name[DOCA_DEVINFO_IFACE_NAME_SIZE], ib[DOCA_DEVINFO_IBDEV_NAME_SIZE];
	char pci[DOCA_DEVINFO_PCI_ADDR_SIZE];
	uint8_t ip4[4], ip6[16], mac[6], eq = 9;
	uint16_t lid = 7;
	uint64_t rate = 0;

	RC(doca_devinfo_create_list(NULL, &n), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_create_list(&list, &n), DOCA_SUCCESS);
	CHECK(n >= 1, "device list has %u devices", n);
	for (uint32_t i = 0; i < n; i++) {
		RC(doca_devinfo_get_iface_index(list[i], &idx), DOCA_SUCCESS);
		if (i && idx <= prev_idx)
			ordered = 0;
		prev_idx = idx;
		if (doca_devinfo_get_ibdev_name(list[i], ib, sizeof(ib)) == DOCA_SUCCESS && !strcmp(ib, "soft_lo"))
			lo = list[i];
	}
	CHECK(ordered, "devices ordered by ifindex");
	CHECK(lo != NULL, "loopback present as soft_lo");
	if (!lo) {
		doca_devinfo_destroy_list(list);
		return NULL;
	}
	RC(doca_devinfo_get_iface_name(lo, name, sizeof(name)), DOCA_SUCCESS);
	CHECK(!strcmp(name, "lo"), "iface name lo (%s)", name);
	RC(doca_devinfo_get_iface_name(lo, name, 8), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_get_ibdev_name(lo, ib, 10), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_get_iface_index(lo, &idx), DOCA_SUCCESS);
	CHECK(idx == if_nametoindex("lo"), "iface index of lo is %u", idx);
	RC(doca_devinfo_get_ipv4_addr(lo, ip4, sizeof(ip4)), DOCA_SUCCESS);
	CHECK(ip4[0] == 127 && ip4[3] == 1, "lo ipv4 %u.%u.%u.%u", ip4[0], ip4[1], ip4[2], ip4[3]);
	RC(doca_devinfo_get_ipv4_addr(lo, ip4, 3), DOCA_ERROR_INVALID_VALUE);
	doca_error_t r6 = doca_devinfo_get_ipv6_addr(lo, ip6, sizeof(ip6));
	CHECK(r6 == DOCA_SUCCESS || r6 == DOCA_ERROR_NOT_FOUND, "lo ipv6: %s", doca_error_get_name(r6));
	RC(doca_devinfo_get_ipv6_addr(lo, ip6, 15), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_get_mac_addr(lo, mac, sizeof(mac)), DOCA_SUCCESS);
	CHECK(!mac[0] && !mac[1] && !mac[2] && !mac[3] && !mac[4] && !mac[5], "lo mac is zero");
	RC(doca_devinfo_get_mac_addr(lo, mac, 5), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_get_lid(lo, &lid), DOCA_SUCCESS);
	CHECK(lid == 0, "lid 0");
	RC(doca_devinfo_get_active_rate(lo, &rate), DOCA_SUCCESS);
	CHECK(rate > 0, "active rate %llu bit/s", (unsigned long long)rate);
	RC(doca_devinfo_get_pci_addr_str(lo, pci), DOCA_SUCCESS);
	CHECK(strlen(pci) == 12 && pci[4] == ':' && pci[7] == ':' && pci[10] == '.', "pci addr %s", pci);
	RC(doca_devinfo_is_equal_pci_addr(lo, pci, &eq), DOCA_SUCCESS);
	CHECK(eq == 1, "pci equal (full form)");
	RC(doca_devinfo_is_equal_pci_addr(lo, pci + 5, &eq), DOCA_SUCCESS);
	CHECK(eq == 1, "pci equal (bus:dev.fn form)");
	RC(doca_devinfo_is_equal_pci_addr(lo, "0000:00:1f.7", &eq), DOCA_SUCCESS);
	CHECK(eq == 0, "pci not equal");
	RC(doca_devinfo_is_equal_pci_addr(lo, "garbage", &eq), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_is_equal_pci_addr(lo, NULL, &eq), DOCA_ERROR_INVALID_VALUE);

	RC(doca_dev_open(lo, &dev), DOCA_SUCCESS);
	RC(doca_devinfo_destroy_list(list), DOCA_SUCCESS);
	struct doca_devinfo *di = doca_dev_as_devinfo(dev);
	CHECK(di != NULL, "dev_as_devinfo");
	RC(doca_devinfo_get_ibdev_name(di, ib, sizeof(ib)), DOCA_SUCCESS);
	CHECK(!strcmp(ib, "soft_lo"), "devinfo copy outlives the list");
	CHECK(doca_dev_as_devinfo(NULL) == NULL, "dev_as_devinfo(NULL)");
	return dev;
}

/* ------------------------------------------------------------------ mmap + bufs */
static void test_mmap_bufs(struct doca_dev *dev)
{
	static uint8_t mem[4096];
	struct doca_mmap *m;
	struct doca_buf_inventory *inv;
	struct doca_buf *b1, *b2, *b3, *d;
	uint16_t rc16;
	uint32_t n32;
	size_t sz;
	void *p;
	uint8_t flag;

	RC(doca_mmap_create(&m), DOCA_SUCCESS);
	RC(doca_mmap_start(m), DOCA_ERROR_BAD_STATE);
	RC(doca_mmap_set_memrange(m, NULL, 10), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_set_memrange(m, mem, 0), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_set_memrange(m, (void *)(uintptr_t)(UINTPTR_MAX - 10), 100), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_set_memrange(m, mem, sizeof(mem)), DOCA_SUCCESS);
	RC(doca_mmap_start(m), DOCA_ERROR_BAD_STATE);
	RC(doca_mmap_set_permissions(m, 0x80), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_set_permissions(m, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ |
						DOCA_ACCESS_FLAG_RDMA_WRITE),
	   DOCA_SUCCESS);
	RC(doca_mmap_add_dev(m, dev), DOCA_SUCCESS);
	RC(doca_mmap_add_dev(m, dev), DOCA_ERROR_ALREADY_EXIST);
	RC(doca_mmap_set_user_data(m, (union doca_data){.u64 = 42}), DOCA_SUCCESS);
	union doca_data ud;
	RC(doca_mmap_get_user_data(m, &ud), DOCA_SUCCESS);
	CHECK(ud.u64 == 42, "mmap user data");
	RC(doca_mmap_start(m), DOCA_SUCCESS);
	RC(doca_mmap_start(m), DOCA_ERROR_BAD_STATE);
	RC(doca_mmap_set_memrange(m, mem, 16), DOCA_ERROR_BAD_STATE);
	RC(doca_mmap_set_permissions(m, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE), DOCA_ERROR_BAD_STATE);
	RC(doca_mmap_add_dev(m, dev), DOCA_ERROR_BAD_STATE);
	RC(doca_mmap_set_max_num_devices(m, 8), DOCA_ERROR_NOT_PERMITTED); /* after start: doca_mmap.h */
	RC(doca_dev_close(dev), DOCA_ERROR_IN_USE);
	RC(doca_mmap_get_memrange(m, &p, &sz), DOCA_SUCCESS);
	CHECK(p == mem && sz == sizeof(mem), "get_memrange");

	RC(doca_buf_inventory_create(0, &inv), DOCA_ERROR_INVALID_VALUE);
	RC(doca_buf_inventory_create(2, &inv), DOCA_SUCCESS);
	RC(doca_buf_inventory_buf_get_by_args(inv, m, mem, 64, mem, 10, &b1), DOCA_ERROR_BAD_STATE);
	RC(doca_buf_inventory_start(inv), DOCA_SUCCESS);
	RC(doca_buf_inventory_buf_get_by_args(inv, m, mem + 4090, 64, mem + 4090, 1, &b1),
	   DOCA_ERROR_INVALID_VALUE);
	RC(doca_buf_inventory_buf_get_by_args(inv, m, mem, 64, mem + 60, 10, &b1), DOCA_ERROR_INVALID_VALUE);
	RC(doca_buf_inventory_buf_get_by_args(inv, m, mem, 64, mem + 8, 16, &b1), DOCA_SUCCESS);
	RC(doca_buf_inventory_buf_get_by_args(inv, m, mem + 64, 64, mem + 64, 0, &b2), DOCA_SUCCESS);
	RC(doca_buf_inventory_buf_get_by_args(inv, m, mem, 64, mem, 0, &b3), DOCA_ERROR_NO_MEMORY);
	RC(doca_buf_inventory_get_num_free_elements(inv, &n32), DOCA_SUCCESS);
	CHECK(n32 == 0, "no free elements");
	RC(doca_mmap_stop(m), DOCA_ERROR_NOT_PERMITTED);    /* DOCA: buffers outstanding */
	RC(doca_mmap_destroy(m), DOCA_ERROR_NOT_PERMITTED);
	RC(doca_buf_inventory_stop(inv), DOCA_ERROR_IN_USE);
	RC(doca_buf_inventory_destroy(inv), DOCA_ERROR_IN_USE);

	/* data placement */
	RC(doca_buf_get_refcount(b1, &rc16), DOCA_SUCCESS);
	CHECK(rc16 == 1, "refcount starts at 1");
	RC(doca_buf_get_head(b1, &p), DOCA_SUCCESS);
	CHECK(p == mem, "head");
	RC(doca_buf_get_len(b1, &sz), DOCA_SUCCESS);
	CHECK(sz == 64, "len");
	RC(doca_buf_set_data(b1, mem + 60, 5), DOCA_ERROR_INVALID_VALUE);
	RC(doca_buf_set_data(b1, mem + 60, 4), DOCA_SUCCESS);
	RC(doca_buf_set_data_len(b1, 5), DOCA_ERROR_INVALID_VALUE);
	RC(doca_buf_set_data_len(b1, 2), DOCA_SUCCESS);
	RC(doca_buf_get_data_len(b1, &sz), DOCA_SUCCESS);
	CHECK(sz == 2, "data_len");
	RC(doca_buf_reset_data_len(b1), DOCA_SUCCESS);
	RC(doca_buf_get_data(b1, &p), DOCA_SUCCESS);
	RC(doca_buf_get_data_len(b1, &sz), DOCA_SUCCESS);
	CHECK(p == mem + 60 && sz == 0, "reset_data_len keeps data, length 0");
	RC(doca_buf_inc_refcount(b1, &rc16), DOCA_SUCCESS);
	CHECK(rc16 == 1, "inc returns previous count");
	RC(doca_buf_inventory_buf_reuse_by_args(b1, mem + 128, 32, mem + 130, 4), DOCA_SUCCESS);
	RC(doca_buf_inventory_buf_reuse_by_args(b1, mem + 4090, 32, mem + 4090, 4), DOCA_ERROR_INVALID_VALUE);

	/* lists */
	RC(doca_buf_chain_list(b2, b1), DOCA_ERROR_NOT_PERMITTED); /* b1 refcount 2 */
	RC(doca_buf_dec_refcount(b1, &rc16), DOCA_SUCCESS);
	RC(doca_buf_chain_list(b1, b1), DOCA_ERROR_INVALID_VALUE);
	RC(doca_buf_chain_list(b1, b2), DOCA_SUCCESS);
	RC(doca_buf_get_list_len(b1, &n32), DOCA_SUCCESS);
	CHECK(n32 == 2, "list len 2");
	RC(doca_buf_get_list_len(b2, &n32), DOCA_ERROR_NOT_PERMITTED);
	struct doca_buf *x;
	RC(doca_buf_get_next_in_list(b1, &x), DOCA_SUCCESS);
	CHECK(x == b2, "next in list");
	RC(doca_buf_get_last_in_list(b1, &x), DOCA_SUCCESS);
	CHECK(x == b2, "last in list");
	RC(doca_buf_is_first_in_list(b2, &flag), DOCA_SUCCESS);
	CHECK(flag == 0, "b2 not first");
	RC(doca_buf_is_last_in_list(b2, &flag), DOCA_SUCCESS);
	CHECK(flag == 1, "b2 last");
	RC(doca_buf_is_in_list(b1, &flag), DOCA_SUCCESS);
	CHECK(flag == 1, "b1 in list");
	RC(doca_buf_dec_refcount(b2, NULL), DOCA_ERROR_NOT_PERMITTED);
	RC(doca_buf_inc_refcount(b2, NULL), DOCA_ERROR_NOT_PERMITTED);
	RC(doca_buf_unchain_list(b1, b2), DOCA_SUCCESS);
	RC(doca_buf_unchain_list(b1, b2), DOCA_ERROR_INVALID_VALUE);
	RC(doca_buf_get_list_len(b1, &n32), DOCA_SUCCESS);
	CHECK(n32 == 1, "list len 1 after unchain");
	RC(doca_buf_is_in_list(b2, &flag), DOCA_SUCCESS);
	CHECK(flag == 0, "b2 not in list after unchain");
	RC(doca_buf_chain_list(b1, b2), DOCA_SUCCESS);
	RC(doca_buf_dec_refcount(b1, NULL), DOCA_SUCCESS); /* releases the whole list */
	RC(doca_buf_inventory_get_num_free_elements(inv, &n32), DOCA_SUCCESS);
	CHECK(n32 == 2, "list released back to inventory");

	/* expand and dup */
	RC(doca_buf_inventory_expand(inv, 3), DOCA_SUCCESS);
	RC(doca_buf_inventory_get_num_elements(inv, &n32), DOCA_SUCCESS);
	CHECK(n32 == 5, "expanded to 5");
	RC(doca_buf_inventory_buf_get_by_args(inv, m, mem, 100, mem + 1, 9, &b1), DOCA_SUCCESS);
	RC(doca_buf_inventory_buf_dup(inv, b1, &d), DOCA_SUCCESS);
	RC(doca_buf_get_data(d, &p), DOCA_SUCCESS);
	RC(doca_buf_get_data_len(d, &sz), DOCA_SUCCESS);
	CHECK(p == mem + 1 && sz == 9 && d != b1, "dup copies placement");
	RC(doca_buf_dec_refcount(d, NULL), DOCA_SUCCESS);
	RC(doca_buf_dec_refcount(d, NULL), DOCA_ERROR_BAD_STATE);
	RC(doca_buf_dec_refcount(b1, NULL), DOCA_SUCCESS);

	RC(doca_buf_inventory_stop(inv), DOCA_SUCCESS);
	RC(doca_mmap_stop(m), DOCA_SUCCESS);
	RC(doca_mmap_stop(m), DOCA_ERROR_BAD_STATE);
	RC(doca_buf_inventory_start(inv), DOCA_SUCCESS);
	RC(doca_buf_inventory_buf_get_by_args(inv, m, mem, 64, mem, 0, &b1), DOCA_ERROR_BAD_STATE);
	RC(doca_buf_inventory_stop(inv), DOCA_SUCCESS);
	RC(doca_buf_inventory_destroy(inv), DOCA_SUCCESS);
	RC(doca_buf_inventory_start(inv), DOCA_ERROR_BAD_STATE);
	RC(doca_mmap_destroy(m), DOCA_SUCCESS);
	RC(doca_mmap_start(m), DOCA_ERROR_BAD_STATE);
	RC(doca_mmap_destroy(m), DOCA_ERROR_BAD_STATE);

	/* DOCA: destroy stops a started mmap / inventory implicitly */
	RC(doca_mmap_create(&m), DOCA_SUCCESS);
	RC(doca_mmap_set_memrange(m, mem, sizeof(mem)), DOCA_SUCCESS);
	RC(doca_mmap_add_dev(m, dev), DOCA_SUCCESS);
	RC(doca_mmap_start(m), DOCA_SUCCESS);
	RC(doca_buf_inventory_create(2, &inv), DOCA_SUCCESS);
	RC(doca_buf_inventory_start(inv), DOCA_SUCCESS);
	RC(doca_buf_inventory_destroy(inv), DOCA_SUCCESS);
	RC(doca_mmap_destroy(m), DOCA_SUCCESS);
}

/* ------------------------------------------------------------------ export */
struct holder {
	struct doca_mmap *map;
	int hold_ms;
};

static void *hold_thread(void *arg)
{
	struct holder *h = arg;

	usleep((useconds_t)h->hold_ms * 1000);
	sd_mmap_release(h->map);
	return NULL;
}

static void recrc(uint8_t *d)
{
	sd_put_le32(d + SD_MMAP_DESC_LEN - 4, sd_crc32(d, SD_MMAP_DESC_LEN - 4));
}

static void test_export(struct doca_dev *dev)
{
	static uint8_t mem[8192];
	struct doca_mmap *m, *r = NULL, *acq;
	const void *desc, *desc2;
	size_t dlen, dlen2, sz;
	struct sd_mmap_desc pd;
	uint8_t buf[SD_MMAP_DESC_LEN + 16];
	void *p;
	int bad;

	RC(doca_mmap_create(&m), DOCA_SUCCESS);
	RC(doca_mmap_set_memrange(m, mem, sizeof(mem)), DOCA_SUCCESS);
	RC(doca_mmap_set_permissions(m, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ),
	   DOCA_SUCCESS);
	RC(doca_mmap_add_dev(m, dev), DOCA_SUCCESS);
	RC(doca_mmap_export_rdma(m, dev, &desc, &dlen), DOCA_ERROR_BAD_STATE);
	RC(doca_mmap_start(m), DOCA_SUCCESS);
	RC(doca_mmap_export_rdma(m, dev, &desc, &dlen), DOCA_SUCCESS);
	CHECK(dlen == SD_MMAP_DESC_LEN, "descriptor length %zu", dlen);
	RC(doca_mmap_export_rdma(m, dev, &desc2, &dlen2), DOCA_SUCCESS);
	CHECK(desc2 == desc && dlen2 == dlen, "second export returns the same buffer");
	RC(sd_mmap_desc_parse(desc, dlen, &pd), DOCA_SUCCESS);
	CHECK(pd.instance == sd_instance_id() && pd.addr == (uint64_t)(uintptr_t)mem && pd.len == sizeof(mem),
	      "descriptor identity");
	CHECK(pd.ip[10] == 0xff && pd.ip[11] == 0xff && pd.ip[12] == 127, "descriptor ip is ::ffff:127.x");

	RC(doca_mmap_create_from_export(NULL, desc, dlen, dev, &r), DOCA_SUCCESS);
	RC(doca_mmap_get_memrange(r, &p, &sz), DOCA_SUCCESS);
	CHECK(p == mem && sz == sizeof(mem), "remote memrange equals local");
	RC(doca_mmap_export_rdma(r, dev, &desc2, &dlen2), DOCA_ERROR_NOT_PERMITTED);
	RC(doca_mmap_set_memrange(r, mem, 8), DOCA_ERROR_BAD_STATE);
	RC(doca_mmap_destroy(r), DOCA_SUCCESS);

	/* engine registry */
	RC(sd_mmap_acquire(pd.id, pd.key, pd.addr + 100, 100, DOCA_ACCESS_FLAG_RDMA_READ, &acq), DOCA_SUCCESS);
	CHECK(acq == m, "acquire returns the map");
	sd_mmap_release(acq);
	uint8_t wrong[SD_KEY_LEN];
	memcpy(wrong, pd.key, SD_KEY_LEN);
	wrong[3] ^= 1;
	RC(sd_mmap_acquire(pd.id, wrong, pd.addr, 1, 0, &acq), DOCA_ERROR_NOT_PERMITTED);
	RC(sd_mmap_acquire(pd.id + 1000, pd.key, pd.addr, 1, 0, &acq), DOCA_ERROR_NOT_FOUND);
	RC(sd_mmap_acquire(pd.id, pd.key, pd.addr + 8000, 193, 0, &acq), DOCA_ERROR_NOT_PERMITTED);
	RC(sd_mmap_acquire(pd.id, pd.key, pd.addr - 1, 2, 0, &acq), DOCA_ERROR_NOT_PERMITTED);
	RC(sd_mmap_acquire(pd.id, pd.key, pd.addr + 1, UINT64_MAX, 0, &acq), DOCA_ERROR_NOT_PERMITTED);
	RC(sd_mmap_acquire(pd.id, pd.key, pd.addr, 8, DOCA_ACCESS_FLAG_RDMA_WRITE, &acq), DOCA_ERROR_NOT_PERMITTED);
	RC(sd_mmap_acquire_inst(pd.instance + 1, pd.id, pd.key, pd.addr, 8, 0, &acq), DOCA_ERROR_NOT_PERMITTED);
	RC(sd_mmap_acquire_inst(pd.instance, pd.id, pd.key, pd.addr, 8, 0, &acq), DOCA_SUCCESS);
	/* stop waits for the engine reference */
	pthread_t th;
	struct holder h = {.map = acq, .hold_ms = 150};
	pthread_create(&th, NULL, hold_thread, &h);
	uint64_t t0 = sd_now_ns();
	RC(doca_mmap_stop(m), DOCA_SUCCESS);
	uint64_t waited = (sd_now_ns() - t0) / 1000000;
	pthread_join(th, NULL);
	CHECK(waited >= 100, "mmap_stop waited %llu ms for the engine", (unsigned long long)waited);
	RC(sd_mmap_acquire(pd.id, pd.key, pd.addr, 8, 0, &acq), DOCA_ERROR_NOT_FOUND);

	/* malformed descriptors */
	memcpy(buf, desc, dlen);
	bad = 0;
	for (size_t l = 0; l < dlen; l++)
		if (doca_mmap_create_from_export(NULL, buf, l, dev, &r) != DOCA_ERROR_INVALID_VALUE)
			bad++;
	CHECK(bad == 0, "every truncation rejected (%d accepted)", bad);
	buf[dlen] = 0;
	RC(doca_mmap_create_from_export(NULL, buf, dlen + 1, dev, &r), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_create_from_export(NULL, buf, SIZE_MAX, dev, &r), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_create_from_export(NULL, NULL, dlen, dev, &r), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_create_from_export(NULL, buf, dlen, NULL, &r), DOCA_ERROR_INVALID_VALUE);
	bad = 0;
	for (size_t bit = 0; bit < dlen * 8; bit++) {
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		if (doca_mmap_create_from_export(NULL, buf, dlen, dev, &r) != DOCA_ERROR_INVALID_VALUE)
			bad++;
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
	CHECK(bad == 0, "every single-bit flip rejected (%d accepted)", bad);
	sd_put_le16(buf + 4, 2), recrc(buf);
	RC(doca_mmap_create_from_export(NULL, buf, dlen, dev, &r), DOCA_ERROR_INVALID_VALUE);
	memcpy(buf, desc, dlen);
	sd_put_le16(buf + 6, 0xffff), recrc(buf);
	RC(doca_mmap_create_from_export(NULL, buf, dlen, dev, &r), DOCA_ERROR_INVALID_VALUE);
	memcpy(buf, desc, dlen);
	sd_put_le64(buf + 24, UINT64_MAX - 10), recrc(buf); /* addr + len overflows */
	RC(doca_mmap_create_from_export(NULL, buf, dlen, dev, &r), DOCA_ERROR_INVALID_VALUE);
	memcpy(buf, desc, dlen);
	sd_put_le64(buf + 32, 0), recrc(buf); /* zero length */
	RC(doca_mmap_create_from_export(NULL, buf, dlen, dev, &r), DOCA_ERROR_INVALID_VALUE);
	memcpy(buf, desc, dlen);
	sd_put_le32(buf + 40, 0x100), recrc(buf); /* unknown permission bit */
	RC(doca_mmap_create_from_export(NULL, buf, dlen, dev, &r), DOCA_ERROR_INVALID_VALUE);
	bad = 0;
	for (int i = 0; i < 2000; i++) {
		sd_random_bytes(buf, sizeof(buf));
		if (doca_mmap_create_from_export(NULL, buf, (size_t)(buf[0] % sizeof(buf)), dev, &r) !=
		    DOCA_ERROR_INVALID_VALUE)
			bad++;
	}
	CHECK(bad == 0, "random garbage rejected");
	RC(doca_mmap_destroy(m), DOCA_SUCCESS);
}

/* ------------------------------------------------------------------ pe + ctx */
struct tctx {
	struct doca_ctx base;
	int fail_submit;
	struct doca_task *outstanding[512];
	int num_out;
	int stopped_calls;
};

struct ttask {
	struct doca_task base;
	int invoked, success;
};

static int cb_count, cb_bad_order;
static enum doca_ctx_states cb_last;
static int task_done;

static void state_cb(const union doca_data ud, struct doca_ctx *ctx, enum doca_ctx_states prev,
		     enum doca_ctx_states next)
{
	(void)ud;
	(void)ctx;
	if (cb_count && prev != cb_last)
		cb_bad_order++;
	cb_last = next;
	cb_count++;
}

static doca_error_t t_submit(struct doca_task *task)
{
	struct tctx *c = (struct tctx *)task->ctx;

	if (c->fail_submit)
		return DOCA_ERROR_AGAIN;
	c->outstanding[c->num_out++] = task;
	return DOCA_SUCCESS;
}

static void t_invoke(struct doca_task *task, int success)
{
	struct ttask *t = (struct ttask *)task;

	t->invoked++;
	t->success = success;
	task_done++;
}

static void t_release(struct doca_task *task)
{
	free(task);
}

static void c_stop(struct doca_ctx *ctx)
{
	struct tctx *c = (struct tctx *)ctx;

	for (int i = 0; i < c->num_out; i++)
		sd_task_complete(c->outstanding[i], DOCA_ERROR_CONNECTION_ABORTED);
	c->num_out = 0;
}

static void c_stopped(struct doca_ctx *ctx)
{
	((struct tctx *)ctx)->stopped_calls++;
}

static const struct sd_task_ops tops = {.name = "test", .submit = t_submit, .invoke = t_invoke,
					 .release = t_release};
static const struct sd_ctx_ops cops = {.name = "test", .stop = c_stop, .stopped = c_stopped};

static int readable(int fd, int timeout_ms)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};

	return poll(&pfd, 1, timeout_ms) == 1 && (pfd.revents & POLLIN);
}

static struct ttask *new_task(struct tctx *c)
{
	struct ttask *t = calloc(1, sizeof(*t));

	t->base.ops = &tops;
	t->base.ctx = &c->base;
	return t;
}

struct completer {
	struct doca_task *task;
	int delay_ms;
};

static void *complete_thread(void *arg)
{
	struct completer *cp = arg;

	usleep((useconds_t)cp->delay_ms * 1000);
	sd_task_complete(cp->task, DOCA_SUCCESS);
	return NULL;
}

static void *span_thread(void *arg)
{
	struct {
		struct ttask **t;
		int n;
	} *sp = arg;

	for (int i = 0; i < sp->n; i++)
		sd_task_complete(&sp->t[i]->base, DOCA_SUCCESS);
	return NULL;
}

static void test_fork_instance(void)
{
	uint64_t mine = sd_instance_id();
	int fds[2];
	uint64_t child = mine;

	if (pipe(fds) != 0)
		return;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		uint64_t v = sd_instance_id();
		ssize_t w = write(fds[1], &v, sizeof(v));
		_exit(w == sizeof(v) ? 0 : 1);
	}
	close(fds[1]);
	CHECK(read(fds[0], &child, sizeof(child)) == sizeof(child) && child != mine && child != 0,
	      "instance id renewed after fork");
	close(fds[0]);
	waitpid(pid, NULL, 0);
	CHECK(sd_instance_id() == mine, "instance id stable in the parent");
}

static void test_pe_ctx(void)
{
	struct doca_pe *pe;
	struct tctx c;
	doca_notification_handle_t fd = -1;
	enum doca_ctx_states st;
	size_t inflight;
	struct ttask *t;

	memset(&c, 0, sizeof(c));
	RC(doca_pe_create(&pe), DOCA_SUCCESS);
	RC(doca_pe_get_notification_handle(pe, &fd), DOCA_SUCCESS);
	CHECK(fd >= 0 && fcntl(fd, F_GETFD) >= 0, "notification handle is a valid fd");
	CHECK(!readable(fd, 0), "fd not readable when idle");
	RC(doca_pe_request_notification(pe), DOCA_SUCCESS);
	CHECK(!readable(fd, 0), "armed fd not readable with nothing pending");
	RC(doca_pe_set_event_mode(pe, (enum doca_pe_event_mode)7), DOCA_ERROR_INVALID_VALUE);

	RC(sd_ctx_init(&c.base, &cops, &c), DOCA_SUCCESS);
	RC(doca_ctx_start(&c.base), DOCA_ERROR_NOT_CONNECTED); /* no pe: doca_ctx.h */
	RC(doca_ctx_set_state_changed_cb(&c.base, state_cb), DOCA_SUCCESS);
	RC(doca_pe_connect_ctx(pe, &c.base), DOCA_SUCCESS);
	RC(doca_pe_connect_ctx(pe, &c.base), DOCA_ERROR_BAD_STATE);
	RC(doca_ctx_stop(&c.base), DOCA_SUCCESS); /* idle: nothing to stop */
	t = new_task(&c);
	RC(doca_task_submit(&t->base), DOCA_ERROR_BAD_STATE);

	RC(doca_pe_clear_notification(pe, fd), DOCA_SUCCESS);
	RC(doca_ctx_start(&c.base), DOCA_SUCCESS);
	RC(doca_ctx_get_state(&c.base, &st), DOCA_SUCCESS);
	CHECK(st == DOCA_CTX_STATE_RUNNING, "RUNNING right after start");
	CHECK(cb_count == 0, "no callback outside progress");
	CHECK(!readable(fd, 0), "not readable while not armed");
	RC(doca_pe_request_notification(pe), DOCA_SUCCESS);
	CHECK(readable(fd, 0), "request_notification signals pending state change");
	CHECK(doca_pe_progress(pe) == 1, "progress delivers state changes");
	CHECK(cb_count == 2 && cb_last == DOCA_CTX_STATE_RUNNING && !cb_bad_order, "IDLE->STARTING->RUNNING");
	RC(doca_pe_clear_notification(pe, fd), DOCA_SUCCESS);
	CHECK(!readable(fd, 0), "clear drains the fd");
	CHECK(doca_pe_progress(pe) == 0, "progress with nothing to do returns 0");
	RC(doca_pe_request_notification(pe), DOCA_SUCCESS);
	CHECK(!readable(fd, 0), "armed, nothing pending");

	/* completion from another thread wakes the fd */
	RC(doca_task_submit(&t->base), DOCA_SUCCESS);
	RC(doca_task_submit(&t->base), DOCA_ERROR_BAD_STATE); /* already in flight */
	RC(doca_ctx_get_num_inflight_tasks(&c.base, &inflight), DOCA_SUCCESS);
	CHECK(inflight == 1, "ctx inflight 1");
	c.num_out = 0; /* the "engine thread" owns it now */
	pthread_t th;
	struct completer cp = {.task = &t->base, .delay_ms = 50};
	pthread_create(&th, NULL, complete_thread, &cp);
	CHECK(readable(fd, 3000), "fd readable after a completion from another thread");
	pthread_join(th, NULL);
	CHECK(t->invoked == 0, "completion not invoked before progress");
	RC(doca_pe_clear_notification(pe, fd), DOCA_SUCCESS);
	CHECK(doca_pe_progress(pe) == 1, "progress delivers completion");
	CHECK(t->invoked == 1 && t->success == 1, "completion invoked with success");
	RC(doca_task_get_status(&t->base), DOCA_SUCCESS);
	RC(doca_pe_get_num_inflight_tasks(pe, &inflight), DOCA_SUCCESS);
	CHECK(inflight == 0, "pe inflight 0");

	/* submit failure rolls back */
	c.fail_submit = 1;
	RC(doca_task_submit_ex(&t->base, DOCA_TASK_SUBMIT_FLAG_FLUSH), DOCA_ERROR_AGAIN);
	RC(doca_task_submit_ex(&t->base, 0x100), DOCA_ERROR_INVALID_VALUE);
	RC(doca_ctx_get_num_inflight_tasks(&c.base, &inflight), DOCA_SUCCESS);
	CHECK(inflight == 0, "failed submit not counted");
	c.fail_submit = 0;
	doca_task_free(&t->base);

	/* batches of at most 128 */
	struct ttask *many[300];
	for (int i = 0; i < 300; i++) {
		many[i] = new_task(&c);
		if (doca_task_try_submit(&many[i]->base) != DOCA_SUCCESS)
			failed++;
	}
	for (int i = 0; i < c.num_out; i++)
		sd_task_complete(c.outstanding[i], DOCA_SUCCESS);
	c.num_out = 0;
	task_done = 0;
	doca_pe_progress(pe);
	CHECK(task_done == 128, "one progress delivers 128 completions (%d)", task_done);
	while (doca_pe_progress(pe))
		;
	CHECK(task_done == 300, "all 300 completions delivered");
	for (int i = 0; i < 300; i++)
		doca_task_free(&many[i]->base);

	/* completions from 4 threads while this thread progresses */
	struct ttask *conc[400];
	for (int i = 0; i < 400; i++) {
		conc[i] = new_task(&c);
		if (doca_task_submit(&conc[i]->base) != DOCA_SUCCESS)
			failed++;
	}
	c.num_out = 0;
	pthread_t ths[4];
	struct span { struct ttask **t; int n; } spans[4];
	for (int k = 0; k < 4; k++) {
		spans[k].t = conc + k * 100;
		spans[k].n = 100;
		pthread_create(&ths[k], NULL, span_thread, &spans[k]);
	}
	task_done = 0;
	uint64_t deadline = sd_now_ns() + 5000000000ull;
	while (task_done < 400 && sd_now_ns() < deadline)
		doca_pe_progress(pe);
	for (int k = 0; k < 4; k++)
		pthread_join(ths[k], NULL);
	CHECK(task_done == 400, "400 completions from 4 threads delivered (%d)", task_done);
	RC(doca_ctx_get_num_inflight_tasks(&c.base, &inflight), DOCA_SUCCESS);
	CHECK(inflight == 0, "inflight back to 0");
	for (int i = 0; i < 400; i++)
		doca_task_free(&conc[i]->base);

	/* stop with a task in flight */
	t = new_task(&c);
	RC(doca_task_submit(&t->base), DOCA_SUCCESS);
	cb_count = 0;
	RC(doca_ctx_stop(&c.base), DOCA_ERROR_IN_PROGRESS);
	RC(doca_ctx_get_state(&c.base, &st), DOCA_SUCCESS);
	CHECK(st == DOCA_CTX_STATE_STOPPING, "STOPPING with a task in flight");
	RC(doca_pe_destroy(pe), DOCA_ERROR_IN_USE);
	while (doca_pe_progress(pe))
		;
	CHECK(t->invoked == 1 && t->success == 0, "in-flight task flushed with an error");
	RC(doca_task_get_status(&t->base), DOCA_ERROR_CONNECTION_ABORTED);
	RC(doca_ctx_get_state(&c.base, &st), DOCA_SUCCESS);
	CHECK(st == DOCA_CTX_STATE_IDLE && cb_last == DOCA_CTX_STATE_IDLE && c.stopped_calls == 1,
	      "IDLE after progress, stopped() called");
	doca_task_free(&t->base);

	/* stop with nothing in flight: IDLE at once */
	RC(doca_ctx_start(&c.base), DOCA_SUCCESS);
	RC(doca_ctx_stop(&c.base), DOCA_SUCCESS);
	RC(doca_ctx_get_state(&c.base, &st), DOCA_SUCCESS);
	CHECK(st == DOCA_CTX_STATE_IDLE, "IDLE at once");
	cb_count = 0;
	cb_bad_order = 0;
	cb_last = DOCA_CTX_STATE_IDLE;
	doca_pe_progress(pe);
	CHECK(cb_count == 4 && !cb_bad_order && cb_last == DOCA_CTX_STATE_IDLE, "four ordered callbacks (%d)",
	      cb_count);

	sd_ctx_fini(&c.base);
	RC(doca_ctx_start(&c.base), DOCA_ERROR_BAD_STATE);
	RC(doca_pe_destroy(pe), DOCA_SUCCESS);
	CHECK(doca_pe_progress(pe) == 0, "progress on a destroyed pe returns 0");
	RC(doca_pe_request_notification(pe), DOCA_ERROR_BAD_STATE);
	RC(doca_pe_destroy(pe), DOCA_ERROR_BAD_STATE);
	CHECK(doca_pe_progress(NULL) == 0, "progress(NULL) returns 0");
}

int main(void)
{
	struct doca_dev *dev;

	test_errors();
	dev = test_devices();
	if (dev) {
		test_mmap_bufs(dev);
		test_export(dev);
		RC(doca_dev_close(dev), DOCA_SUCCESS);
		RC(doca_dev_close(dev), DOCA_ERROR_BAD_STATE);
	}
	test_pe_ctx();
	test_fork_instance();
	return check_summary("test_common");
}
