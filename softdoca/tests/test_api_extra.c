/* test_api_extra: the DOCA 3.3 functions of doca_dev.h, doca_mmap.h, doca_buf.h,
 * doca_pe.h and doca_ctx.h that softdoca answers as a host without a DPU,
 * representors, DPA or GPU would, and the ones it implements for real
 * (capabilities, completion vectors, mmap free callback / thread safety /
 * access token / counters, buf_chain_list_tail). One line per check, a
 * summary line, non-zero exit on failure. Links against libsoftdoca. */
#include "check.h"

#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Declared by DOCA's headers for Windows only; softdoca exports it (NOT_SUPPORTED). */
doca_error_t doca_pe_set_notification_handle(struct doca_pe *pe, doca_notification_handle_t handle,
					     union doca_data completion_key);

/* ------------------------------------------------------------------ devices */
static void test_devinfo(struct doca_dev *dev)
{
	struct doca_devinfo *di = doca_dev_as_devinfo(dev);
	enum doca_pci_func_type ft = DOCA_PCI_FUNC_TYPE_SF;
	uint32_t u32 = 77;
	uint16_t u16 = 77;
	uint8_t cap = 9;
	char pci[DOCA_DEVINFO_PCI_ADDR_SIZE] = "unchanged";

	RC(doca_devinfo_get_pci_func_type(di, &ft), DOCA_SUCCESS);
	CHECK(ft == DOCA_PCI_FUNC_TYPE_PF, "soft device is a PF (%d)", (int)ft);
	RC(doca_devinfo_get_pci_func_type(NULL, &ft), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_get_pci_func_type(di, NULL), DOCA_ERROR_INVALID_VALUE);

	RC(doca_devinfo_get_sf_index(di, &u32), DOCA_ERROR_NOT_SUPPORTED);
	CHECK(u32 == 77, "sf_index untouched");
	RC(doca_devinfo_get_sf_index(NULL, &u32), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_get_sf_index(di, NULL), DOCA_ERROR_INVALID_VALUE);

	RC(doca_devinfo_get_vhca_id(di, &u16), DOCA_SUCCESS);
	CHECK(u16 == (uint16_t)if_nametoindex("lo"), "vhca_id %u = ifindex of lo", u16);
	RC(doca_devinfo_get_vhca_id(di, NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_get_vhca_id(NULL, &u16), DOCA_ERROR_INVALID_VALUE);

	u16 = 0;
	RC(doca_devinfo_get_uplink_ib_port(di, &u16), DOCA_SUCCESS);
	CHECK(u16 == 1, "uplink ib port 1 (%u)", u16);
	RC(doca_devinfo_get_uplink_ib_port(NULL, &u16), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_get_uplink_ib_port(di, NULL), DOCA_ERROR_INVALID_VALUE);

	RC(doca_devinfo_get_data_direct_pci_dev(di, pci), DOCA_ERROR_NOT_FOUND);
	CHECK(!strcmp(pci, "unchanged"), "data direct address untouched");
	RC(doca_devinfo_get_data_direct_pci_dev(NULL, pci), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_get_data_direct_pci_dev(di, NULL), DOCA_ERROR_INVALID_VALUE);

#define CAP0(fn)                                                      \
	do {                                                          \
		cap = 9;                                              \
		RC(fn(di, &cap), DOCA_SUCCESS);                       \
		CHECK(cap == 0, #fn " answers 0");                    \
		RC(fn(NULL, &cap), DOCA_ERROR_INVALID_VALUE);         \
		RC(fn(di, NULL), DOCA_ERROR_INVALID_VALUE);           \
	} while (0)
	CAP0(doca_devinfo_cap_is_hotplug_manager_supported);
	CAP0(doca_devinfo_cap_is_notification_moderation_supported);
	CAP0(doca_devinfo_rep_cap_is_filter_all_supported);
	CAP0(doca_devinfo_rep_cap_is_filter_net_supported);
	CAP0(doca_devinfo_rep_cap_is_filter_emulated_supported);
	CAP0(doca_devinfo_cap_is_accelerate_resource_reclaim_supported);
	CAP0(doca_mmap_cap_is_export_pci_supported);
	CAP0(doca_mmap_cap_is_create_from_export_pci_supported);
#undef CAP0
	{
		size_t max = 0;

		RC(doca_mmap_cap_get_max_export_access_token_size(di, &max), DOCA_SUCCESS);
		CHECK(max == SD_KEY_LEN, "max export access token %zu bytes", max);
		RC(doca_mmap_cap_get_max_export_access_token_size(NULL, &max), DOCA_ERROR_INVALID_VALUE);
		RC(doca_mmap_cap_get_max_export_access_token_size(di, NULL), DOCA_ERROR_INVALID_VALUE);
	}
	u32 = 0;
	RC(doca_ctx_cap_get_num_completion_vectors(di, &u32), DOCA_SUCCESS);
	CHECK(u32 == 1, "one completion vector (%u)", u32);
	RC(doca_ctx_cap_get_num_completion_vectors(NULL, &u32), DOCA_ERROR_INVALID_VALUE);
	RC(doca_ctx_cap_get_num_completion_vectors(di, NULL), DOCA_ERROR_INVALID_VALUE);
}

static void test_representors(struct doca_dev *dev)
{
	struct doca_devinfo_rep **reps = (void *)0x1;
	struct doca_dev_rep *rep = NULL;
	uint32_t n = 99, u32 = 0;
	uint16_t u16 = 0;
	uint8_t u8 = 0;
	char s[DOCA_DEVINFO_REP_VUID_SIZE];
	enum doca_pci_func_type ft;
	/* any non-NULL pointer: no doca_devinfo_rep exists in softdoca */
	struct doca_devinfo_rep *bogus = (struct doca_devinfo_rep *)(void *)s;

	RC(doca_devinfo_rep_create_list(dev, DOCA_DEVINFO_REP_FILTER_ALL, &reps, &n), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_devinfo_rep_create_list(dev, DOCA_DEVINFO_REP_FILTER_NET, &reps, &n), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_devinfo_rep_create_list(dev, DOCA_DEVINFO_REP_FILTER_EMULATED, &reps, &n), DOCA_ERROR_NOT_SUPPORTED);
	CHECK(n == 99 && reps == (void *)0x1, "outputs untouched on failure");
	RC(doca_devinfo_rep_create_list(dev, 0x1, &reps, &n), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_create_list(NULL, 0, &reps, &n), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_create_list(dev, 0, NULL, &n), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_create_list(dev, 0, &reps, NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_destroy_list(NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_dev_rep_open(NULL, &rep), DOCA_ERROR_INVALID_VALUE);
	RC(doca_dev_rep_open(bogus, &rep), DOCA_ERROR_INVALID_VALUE);
	CHECK(rep == NULL, "no representor opened");
	RC(doca_dev_rep_close(NULL), DOCA_ERROR_INVALID_VALUE);
	CHECK(doca_dev_rep_as_devinfo(NULL) == NULL, "dev_rep_as_devinfo(NULL) is NULL");
	RC(doca_dev_accelerate_resource_reclaim(dev), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_dev_accelerate_resource_reclaim(NULL), DOCA_ERROR_INVALID_VALUE);

	RC(doca_devinfo_rep_get_vuid(bogus, s, sizeof(s)), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_get_pci_addr_str(bogus, s), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_get_pci_func_type(bogus, &ft), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_get_is_hotplug(bogus, &u8), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_get_iface_name(bogus, s, sizeof(s)), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_get_iface_index(bogus, &u32), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_get_ib_port(bogus, &u16), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_get_host_index(bogus, &u32), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_get_pf_index(bogus, &u32), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_get_vf_index(bogus, &u32), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_get_sf_index(bogus, &u32), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_get_vhca_id(bogus, &u16), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_get_total_vfs(bogus, &u32), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_get_pf_vuid(bogus, s, sizeof(s)), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_get_data_direct_pci_dev(bogus, s), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_get_is_uplink_representor(bogus, &u8), DOCA_ERROR_INVALID_VALUE);
	RC(doca_devinfo_rep_is_equal_pci_addr(bogus, "0000:00:00.0", &u8), DOCA_ERROR_INVALID_VALUE);
}

/* ------------------------------------------------------------------ mmap */
struct freed {
	int calls;
	void *addr;
	size_t len;
	void *opaque;
};

static void on_free(void *addr, size_t len, void *cookie)
{
	struct freed *f = cookie;

	f->calls++;
	f->addr = addr;
	f->len = len;
	f->opaque = cookie;
}

static void test_mmap(struct doca_dev *dev)
{
	static uint8_t mem[8192];
	struct doca_mmap *m = NULL, *r = NULL;
	struct doca_buf_inventory *inv = NULL;
	struct doca_buf *b1 = NULL, *b2 = NULL;
	struct freed f = {0};
	uint32_t u32 = 0;
	uint8_t u8 = 9;
	doca_dpa_dev_mmap_t dpa_h = 0;
	const void *desc = NULL;
	size_t desc_len = 0;
	void *data = NULL;

	RC(doca_mmap_create(&m), DOCA_SUCCESS);
	RC(doca_mmap_get_max_num_devices(m, &u32), DOCA_SUCCESS);
	CHECK(u32 == SD_MAX_DEVS_DEFAULT, "default max devices %u", u32);
	RC(doca_mmap_set_max_num_devices(m, 7), DOCA_SUCCESS);
	RC(doca_mmap_get_max_num_devices(m, &u32), DOCA_SUCCESS);
	CHECK(u32 == 7, "max devices 7 after set (%u)", u32);
	RC(doca_mmap_get_max_num_devices(m, NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_get_max_num_devices(NULL, &u32), DOCA_ERROR_INVALID_VALUE);

	/* hardware memory ranges */
	RC(doca_mmap_set_dmabuf_memrange(m, 3, mem, 0, sizeof(mem)), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_mmap_set_dmabuf_memrange(m, -1, mem, 0, sizeof(mem)), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_set_dmabuf_memrange(m, 3, NULL, 0, sizeof(mem)), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_set_dmabuf_memrange(NULL, 3, mem, 0, sizeof(mem)), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_set_dpa_memrange(m, (struct doca_dpa *)(void *)mem, 0x1000, 64), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_mmap_set_dpa_memrange(m, NULL, 0x1000, 64), DOCA_ERROR_INVALID_VALUE);

	RC(doca_mmap_set_free_cb(m, NULL, &f), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_set_free_cb(NULL, on_free, &f), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_set_free_cb(m, on_free, &f), DOCA_SUCCESS);
	RC(doca_mmap_set_memrange(m, mem, sizeof(mem)), DOCA_SUCCESS);
	RC(doca_mmap_set_permissions(m, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_WRITE), DOCA_SUCCESS);
	RC(doca_mmap_add_dev(m, dev), DOCA_SUCCESS);
	RC(doca_mmap_get_exported(m, &u8), DOCA_SUCCESS);
	CHECK(u8 == 0, "not exported yet");
	RC(doca_mmap_get_from_export(m, &u8), DOCA_SUCCESS);
	CHECK(u8 == 0, "local map is not from export");
	RC(doca_mmap_get_exported(m, NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_get_from_export(NULL, &u8), DOCA_ERROR_INVALID_VALUE);

	RC(doca_mmap_start(m), DOCA_SUCCESS);
	RC(doca_mmap_set_free_cb(m, on_free, &f), DOCA_ERROR_BAD_STATE);
	RC(doca_mmap_set_dmabuf_memrange(m, 3, mem, 0, sizeof(mem)), DOCA_ERROR_BAD_STATE);
	RC(doca_mmap_enable_thread_safety(m), DOCA_ERROR_NOT_PERMITTED);
	RC(doca_mmap_export_pci(m, dev, &desc, &desc_len), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_mmap_export_pci(m, NULL, &desc, &desc_len), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_dev_get_dpa_handle(m, dev, &dpa_h), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_mmap_dev_get_dpa_handle(m, dev, NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_get_mkey(m, dev, &u32), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_mmap_get_mkey(m, NULL, &u32), DOCA_ERROR_INVALID_VALUE);

	/* num_bufs counts the doca_bufs pointing into the map */
	RC(doca_buf_inventory_create(4, &inv), DOCA_SUCCESS);
	RC(doca_buf_inventory_start(inv), DOCA_SUCCESS);
	RC(doca_mmap_get_num_bufs(m, &u32), DOCA_SUCCESS);
	CHECK(u32 == 0, "no bufs yet (%u)", u32);
	RC(doca_buf_inventory_buf_get_by_args(inv, m, mem, 4096, mem, 0, &b1), DOCA_SUCCESS);
	RC(doca_buf_inventory_buf_get_by_args(inv, m, mem + 4096, 4096, mem + 4096, 10, &b2), DOCA_SUCCESS);
	RC(doca_mmap_get_num_bufs(m, &u32), DOCA_SUCCESS);
	CHECK(u32 == 2, "two bufs (%u)", u32);
	RC(doca_mmap_get_num_bufs(m, NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_buf_dec_refcount(b2, NULL), DOCA_SUCCESS);
	RC(doca_mmap_get_num_bufs(m, &u32), DOCA_SUCCESS);
	CHECK(u32 == 1, "one buf after a release (%u)", u32);
	RC(doca_mmap_destroy(m), DOCA_ERROR_NOT_PERMITTED);   /* no thread safety: bufs out */
	RC(doca_buf_dec_refcount(b1, NULL), DOCA_SUCCESS);

	/* export flags */
	RC(doca_mmap_export_rdma(m, dev, &desc, &desc_len), DOCA_SUCCESS);
	RC(doca_mmap_get_exported(m, &u8), DOCA_SUCCESS);
	CHECK(u8 == 1, "exported after export_rdma");
	RC(doca_mmap_set_export_access_token(m, dev, (const uint8_t *)"k", 1), DOCA_ERROR_NOT_PERMITTED);
	RC(doca_mmap_create_from_export(NULL, desc, desc_len, dev, &r), DOCA_SUCCESS);
	RC(doca_mmap_get_from_export(r, &u8), DOCA_SUCCESS);
	CHECK(u8 == 1, "remote map is from export");
	RC(doca_mmap_get_exported(r, &u8), DOCA_SUCCESS);
	CHECK(u8 == 0, "remote map is not exported");
	RC(doca_mmap_set_free_cb(r, on_free, &f), DOCA_ERROR_BAD_STATE);
	RC(doca_mmap_enable_thread_safety(r), DOCA_ERROR_NOT_PERMITTED);
	RC(doca_mmap_destroy(r), DOCA_SUCCESS);

	CHECK(f.calls == 0, "free callback not called before destroy");
	RC(doca_mmap_destroy(m), DOCA_SUCCESS);
	CHECK(f.calls == 1 && f.addr == mem && f.len == sizeof(mem) && f.opaque == &f,
	      "free callback called once on destroy with the range (%d calls)", f.calls);
	RC(doca_mmap_get_num_bufs(m, &u32), DOCA_ERROR_BAD_STATE);
	RC(doca_mmap_get_exported(m, &u8), DOCA_ERROR_BAD_STATE);

	/* never started: the free callback is not called */
	f.calls = 0;
	RC(doca_mmap_create(&m), DOCA_SUCCESS);
	RC(doca_mmap_set_free_cb(m, on_free, &f), DOCA_SUCCESS);
	RC(doca_mmap_set_memrange(m, mem, sizeof(mem)), DOCA_SUCCESS);
	RC(doca_mmap_destroy(m), DOCA_SUCCESS);
	CHECK(f.calls == 0, "free callback not called for a map never started");

	/* thread safety: destroy succeeds with bufs out; they stay usable */
	RC(doca_mmap_create(&m), DOCA_SUCCESS);
	RC(doca_mmap_enable_thread_safety(NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_enable_thread_safety(m), DOCA_SUCCESS);
	RC(doca_mmap_set_memrange(m, mem, sizeof(mem)), DOCA_SUCCESS);
	RC(doca_mmap_add_dev(m, dev), DOCA_SUCCESS);
	RC(doca_mmap_set_free_cb(m, on_free, &f), DOCA_SUCCESS);
	RC(doca_mmap_start(m), DOCA_SUCCESS);
	RC(doca_buf_inventory_buf_get_by_args(inv, m, mem, 100, mem + 10, 20, &b1), DOCA_SUCCESS);
	RC(doca_buf_inventory_buf_get_by_args(inv, m, mem, 100, mem, 0, &b2), DOCA_SUCCESS);
	RC(doca_mmap_stop(m), DOCA_ERROR_NOT_PERMITTED);
	RC(doca_mmap_destroy(m), DOCA_SUCCESS);
	CHECK(f.calls == 1, "free callback on destroy of a thread-safe map with bufs out");
	RC(doca_mmap_get_num_bufs(m, &u32), DOCA_ERROR_BAD_STATE);
	RC(doca_buf_inventory_buf_get_by_args(inv, m, mem, 100, mem, 0, &b2), DOCA_ERROR_BAD_STATE);
	RC(doca_buf_get_data(b1, &data), DOCA_SUCCESS);
	CHECK(data == mem + 10, "buf of the destroyed map still answers");
	RC(doca_buf_dec_refcount(b1, NULL), DOCA_SUCCESS);
	RC(doca_buf_dec_refcount(b2, NULL), DOCA_SUCCESS); /* last one: frees the map (ASan: no leak) */
	RC(doca_buf_inventory_destroy(inv), DOCA_SUCCESS);

	/* access token: validation (the RDMA path is in test_pe_batch) */
	RC(doca_mmap_create(&m), DOCA_SUCCESS);
	RC(doca_mmap_set_memrange(m, mem, sizeof(mem)), DOCA_SUCCESS);
	RC(doca_mmap_set_export_access_token(m, dev, (const uint8_t *)"token", 5), DOCA_ERROR_NOT_FOUND);
	RC(doca_mmap_add_dev(m, dev), DOCA_SUCCESS);
	RC(doca_mmap_set_export_access_token(m, dev, NULL, 5), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_set_export_access_token(m, dev, (const uint8_t *)"token", 0), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_set_export_access_token(m, dev, (const uint8_t *)"0123456789abcdefX", SD_KEY_LEN + 1),
	   DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_set_export_access_token(m, NULL, (const uint8_t *)"token", 5), DOCA_ERROR_INVALID_VALUE);
	RC(doca_mmap_set_export_access_token(m, dev, (const uint8_t *)"token", 5), DOCA_SUCCESS);
	RC(doca_mmap_start(m), DOCA_SUCCESS);
	CHECK(!memcmp(m->key, "token\0\0\0\0\0\0\0\0\0\0\0", SD_KEY_LEN), "the token is the map's key");
	RC(doca_mmap_set_export_access_token(m, dev, (const uint8_t *)"token", 5), DOCA_ERROR_BAD_STATE);
	RC(doca_mmap_export_rdma(m, dev, &desc, &desc_len), DOCA_SUCCESS);
	CHECK(desc_len >= SD_MMAP_DESC_LEN && !memcmp((const uint8_t *)desc + 44, m->key, SD_KEY_LEN),
	      "the descriptor carries the token");
	RC(doca_mmap_destroy(m), DOCA_SUCCESS);
}

/* ------------------------------------------------------------------ bufs */
static void test_chain_tail(struct doca_dev *dev)
{
	static uint8_t mem[4096];
	struct doca_mmap *m = NULL;
	struct doca_buf_inventory *inv = NULL;
	struct doca_buf *b[5] = {0}, *last = NULL;
	uint32_t n = 0;

	doca_mmap_create(&m);
	doca_mmap_set_memrange(m, mem, sizeof(mem));
	doca_mmap_add_dev(m, dev);
	RC(doca_mmap_start(m), DOCA_SUCCESS);
	RC(doca_buf_inventory_create(8, &inv), DOCA_SUCCESS);
	RC(doca_buf_inventory_start(inv), DOCA_SUCCESS);
	for (int i = 0; i < 5; i++)
		RC(doca_buf_inventory_buf_get_by_args(inv, m, mem + i * 100, 100, mem + i * 100, 100, &b[i]),
		   DOCA_SUCCESS);
	/* list1 = b0 -> b1 -> b2, list2 = b3 -> b4 */
	RC(doca_buf_chain_list(b[0], b[1]), DOCA_SUCCESS);
	RC(doca_buf_chain_list_tail(b[0], b[1], b[2]), DOCA_SUCCESS);
	RC(doca_buf_chain_list(b[3], b[4]), DOCA_SUCCESS);
	RC(doca_buf_chain_list_tail(b[0], b[1], b[3]), DOCA_ERROR_INVALID_VALUE); /* b1 is not the tail */
	RC(doca_buf_chain_list_tail(b[1], b[2], b[3]), DOCA_ERROR_NOT_PERMITTED); /* b1 is not a head */
	RC(doca_buf_chain_list_tail(b[0], b[2], b[4]), DOCA_ERROR_NOT_PERMITTED); /* b4 is not a head */
	RC(doca_buf_chain_list_tail(NULL, b[2], b[3]), DOCA_ERROR_INVALID_VALUE);
	RC(doca_buf_chain_list_tail(b[0], NULL, b[3]), DOCA_ERROR_INVALID_VALUE);
	RC(doca_buf_chain_list_tail(b[0], b[2], NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_buf_inc_refcount(b[3], NULL), DOCA_SUCCESS);
	RC(doca_buf_chain_list_tail(b[0], b[2], b[3]), DOCA_ERROR_NOT_PERMITTED); /* list2 refcount 2 */
	RC(doca_buf_dec_refcount(b[3], NULL), DOCA_SUCCESS);
	RC(doca_buf_chain_list_tail(b[0], b[2], b[3]), DOCA_SUCCESS);
	RC(doca_buf_get_list_len(b[0], &n), DOCA_SUCCESS);
	CHECK(n == 5, "list of 5 after chain_list_tail (%u)", n);
	RC(doca_buf_get_last_in_list(b[0], &last), DOCA_SUCCESS);
	CHECK(last == b[4], "tail is b4");
	{
		struct doca_buf *x = b[0];
		int order = 1;

		for (int i = 0; i < 5; i++, doca_buf_get_next_in_list(x, &x))
			order &= x == b[i];
		CHECK(order, "order b0..b4");
	}
	RC(doca_buf_dec_refcount(b[0], NULL), DOCA_SUCCESS); /* releases the whole list */
	RC(doca_mmap_get_num_bufs(m, &n), DOCA_SUCCESS);
	CHECK(n == 0, "whole list released (%u bufs left)", n);
	RC(doca_buf_inventory_destroy(inv), DOCA_SUCCESS);
	RC(doca_mmap_destroy(m), DOCA_SUCCESS);
}

/* ------------------------------------------------------------------ pe / ctx */
static void batch_cb(struct doca_task_batch *b, uint16_t n, union doca_data cud, union doca_data bud,
		     struct doca_task **tasks, doca_error_t *st)
{
	(void)b, (void)n, (void)cud, (void)bud, (void)tasks, (void)st;
}

static void test_pe_ctx(struct doca_dev *dev)
{
	struct doca_pe *pe = NULL;
	struct doca_rdma *r = NULL;
	struct doca_ctx *ctx;
	doca_notification_handle_t h = -1;
	union doca_data key = {.u64 = 1};
	struct doca_task_batch *tb = NULL;
	struct doca_task **slots = NULL;

	RC(doca_pe_create(&pe), DOCA_SUCCESS);
	RC(doca_pe_get_notification_handle(pe, &h), DOCA_SUCCESS);
	RC(doca_pe_set_notification_handle(pe, h, key), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_pe_set_notification_handle(NULL, h, key), DOCA_ERROR_INVALID_VALUE);

	/* batch functions on NULL (no crash, documented answers) */
	RC(doca_task_batch_submit(NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_task_batch_try_submit(NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_task_batch_get_status(NULL), DOCA_ERROR_INVALID_VALUE);
	doca_task_batch_free(NULL);
	doca_task_batch_set_user_data(NULL, key);
	CHECK(doca_task_batch_get_user_data(NULL).u64 == 0, "batch user data of NULL is 0");
	CHECK(doca_task_batch_get_ctx(NULL) == NULL, "batch ctx of NULL is NULL");
	CHECK(doca_task_batch_get_ctx_user_data(NULL).u64 == 0, "batch ctx user data of NULL is 0");
	CHECK(doca_task_batch_get_tasks_num(NULL) == 0, "batch tasks of NULL is 0");

	RC(doca_rdma_create(dev, &r), DOCA_SUCCESS);
	ctx = doca_rdma_as_ctx(r);
	RC(softdoca_task_batch_allocate(ctx, 4, key, NULL, NULL, &slots, &tb), DOCA_ERROR_INVALID_VALUE);

	RC(doca_ctx_set_completion_vector(ctx, 0), DOCA_SUCCESS);
	CHECK(ctx->comp_vector == 0, "completion vector 0 stored");
	RC(doca_ctx_set_completion_vector(ctx, 1), DOCA_ERROR_INVALID_VALUE);
	RC(doca_ctx_set_completion_vector(NULL, 0), DOCA_ERROR_INVALID_VALUE);
	RC(doca_ctx_set_datapath_on_gpu(ctx, (struct doca_gpu *)(void *)&h), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_ctx_set_datapath_on_gpu(ctx, NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_ctx_set_datapath_on_gpu(NULL, (struct doca_gpu *)(void *)&h), DOCA_ERROR_INVALID_VALUE);
	RC(doca_ctx_set_datapath_on_dpa(ctx, (struct doca_dpa *)(void *)&h), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_ctx_set_datapath_on_dpa(ctx, NULL), DOCA_ERROR_INVALID_VALUE);
	RC(doca_ctx_profiler_set_max_nranges(ctx, 4), DOCA_ERROR_NOT_SUPPORTED);
	RC(doca_ctx_profiler_set_max_nranges(ctx, 0), DOCA_ERROR_INVALID_VALUE);
	RC(doca_ctx_profiler_set_max_nranges(NULL, 4), DOCA_ERROR_INVALID_VALUE);

	RC(softdoca_task_batch_allocate(ctx, 4, key, batch_cb, batch_cb, &slots, &tb), DOCA_ERROR_NOT_CONNECTED);
	RC(doca_pe_connect_ctx(pe, ctx), DOCA_SUCCESS);
	RC(softdoca_task_batch_allocate(ctx, 4, key, batch_cb, batch_cb, &slots, &tb), DOCA_ERROR_BAD_STATE); /* idle */
	CHECK(tb == NULL && slots == NULL, "no batch allocated");
	RC(doca_rdma_destroy(r), DOCA_SUCCESS);
	RC(doca_ctx_set_completion_vector(ctx, 0), DOCA_ERROR_BAD_STATE); /* destroyed */
	RC(doca_ctx_profiler_set_max_nranges(ctx, 4), DOCA_ERROR_BAD_STATE);
	RC(doca_pe_destroy(pe), DOCA_SUCCESS);
	RC(doca_pe_set_notification_handle(pe, h, key), DOCA_ERROR_BAD_STATE);
}

int main(void)
{
	struct doca_dev *dev = open_soft_lo();

	CHECK(dev != NULL, "soft_lo opened");
	if (!dev)
		return 1;
	test_devinfo(dev);
	test_representors(dev);
	test_mmap(dev);
	test_chain_tail(dev);
	test_pe_ctx(dev);
	RC(doca_dev_close(dev), DOCA_SUCCESS);
	RC(doca_dev_accelerate_resource_reclaim(dev), DOCA_ERROR_BAD_STATE);
	return check_summary("test_api_extra");
}
