"""The DOCA 3.3 functions of the DOCA Common headers bound in cdefs/ beyond what
pydoca's classes use: called through ``pydoca._native`` (ffi/lib), checking the
codes and values softdoca answers (docs/softdoca-contract.md, "Functions
answered as on a host without the hardware"); and a C program built against
softdoca's runtime headers using DOCA's static inline inventory helpers and the
softdoca_ext.h task-batch allocator.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any, Iterator, List

import pytest

from pydoca._native import backend, ffi, lib
from pydoca.device import Device

pytestmark = pytest.mark.skipif(backend.name != "soft", reason="softdoca's answers")

SUCCESS = 0
NOT_PERMITTED = int(lib.DOCA_ERROR_NOT_PERMITTED)
NOT_SUPPORTED = int(lib.DOCA_ERROR_NOT_SUPPORTED)
INVALID_VALUE = int(lib.DOCA_ERROR_INVALID_VALUE)
NOT_FOUND = int(lib.DOCA_ERROR_NOT_FOUND)
BAD_STATE = int(lib.DOCA_ERROR_BAD_STATE)


@pytest.fixture
def devinfo(dev: Device) -> Any:
    return lib.doca_dev_as_devinfo(dev.handle)


@pytest.fixture
def mmap_handle() -> Iterator[Any]:
    out = ffi.new("struct doca_mmap **")
    assert lib.doca_mmap_create(out) == SUCCESS
    yield out[0]
    lib.doca_mmap_destroy(out[0])      # BAD_STATE when a test destroyed it already


def test_capabilities_answer_no(devinfo: Any) -> None:
    for name in ("doca_devinfo_cap_is_hotplug_manager_supported",
                 "doca_devinfo_cap_is_notification_moderation_supported",
                 "doca_devinfo_cap_is_accelerate_resource_reclaim_supported",
                 "doca_devinfo_rep_cap_is_filter_all_supported", "doca_devinfo_rep_cap_is_filter_net_supported",
                 "doca_devinfo_rep_cap_is_filter_emulated_supported", "doca_mmap_cap_is_export_pci_supported",
                 "doca_mmap_cap_is_create_from_export_pci_supported"):
        cap = ffi.new("uint8_t *", 7)
        assert getattr(lib, name)(devinfo, cap) == SUCCESS, name
        assert cap[0] == 0, name
        assert getattr(lib, name)(ffi.NULL, cap) == INVALID_VALUE, name
    size = ffi.new("size_t *")
    assert lib.doca_mmap_cap_get_max_export_access_token_size(devinfo, size) == SUCCESS and size[0] == 16
    num = ffi.new("uint32_t *")
    assert lib.doca_ctx_cap_get_num_completion_vectors(devinfo, num) == SUCCESS and num[0] == 1
    assert lib.doca_ctx_cap_get_num_completion_vectors(devinfo, ffi.NULL) == INVALID_VALUE


def test_device_identity(devinfo: Any) -> None:
    ftype = ffi.new("enum doca_pci_func_type *", lib.DOCA_PCI_FUNC_TYPE_VF)
    assert lib.doca_devinfo_get_pci_func_type(devinfo, ftype) == SUCCESS
    assert ftype[0] == lib.DOCA_PCI_FUNC_TYPE_PF
    port = ffi.new("uint16_t *")
    assert lib.doca_devinfo_get_uplink_ib_port(devinfo, port) == SUCCESS and port[0] == 1
    vhca = ffi.new("uint16_t *")
    index = ffi.new("uint32_t *")
    assert lib.doca_devinfo_get_vhca_id(devinfo, vhca) == SUCCESS
    assert lib.doca_devinfo_get_iface_index(devinfo, index) == SUCCESS
    assert vhca[0] == index[0] & 0xFFFF == socket.if_nametoindex("lo")
    sf = ffi.new("uint32_t *", 5)
    assert lib.doca_devinfo_get_sf_index(devinfo, sf) == NOT_SUPPORTED and sf[0] == 5
    pci = ffi.new("char[]", 16)
    assert lib.doca_devinfo_get_data_direct_pci_dev(devinfo, pci) == NOT_FOUND
    assert lib.doca_devinfo_get_data_direct_pci_dev(ffi.NULL, pci) == INVALID_VALUE


def test_no_representors(dev: Device) -> None:
    reps = ffi.new("struct doca_devinfo_rep ***")
    count = ffi.new("uint32_t *", 3)
    assert lib.doca_devinfo_rep_create_list(dev.handle, lib.DOCA_DEVINFO_REP_FILTER_ALL, reps, count) \
        == NOT_SUPPORTED
    assert count[0] == 3 and reps[0] == ffi.NULL
    assert lib.doca_devinfo_rep_create_list(dev.handle, 1, reps, count) == INVALID_VALUE   # no such filter bit
    assert lib.doca_devinfo_rep_create_list(ffi.NULL, 0, reps, count) == INVALID_VALUE
    assert lib.doca_devinfo_rep_destroy_list(ffi.NULL) == INVALID_VALUE
    rep = ffi.new("struct doca_dev_rep **")
    assert lib.doca_dev_rep_open(ffi.NULL, rep) == INVALID_VALUE
    assert lib.doca_dev_rep_close(ffi.NULL) == INVALID_VALUE
    assert lib.doca_dev_rep_as_devinfo(ffi.NULL) == ffi.NULL
    out = ffi.new("char[]", 128)
    assert lib.doca_devinfo_rep_get_vuid(ffi.NULL, out, 128) == INVALID_VALUE
    assert lib.doca_devinfo_rep_get_pf_vuid(ffi.NULL, out, 128) == INVALID_VALUE
    assert lib.doca_dev_accelerate_resource_reclaim(dev.handle) == NOT_SUPPORTED
    assert lib.doca_dev_accelerate_resource_reclaim(ffi.NULL) == INVALID_VALUE


def test_mmap_counters_free_callback_and_hardware_paths(dev: Device, mmap_handle: Any) -> None:
    mem = bytearray(4096)
    pin = ffi.from_buffer(mem)
    freed: List[int] = []

    def _on_free(addr: Any, length: int, cookie: Any) -> None:
        freed.append(length)
    on_free = ffi.callback("void(void *, size_t, void *)", _on_free)

    m = mmap_handle
    num = ffi.new("uint32_t *")
    assert lib.doca_mmap_get_max_num_devices(m, num) == SUCCESS and num[0] == 4
    assert lib.doca_mmap_set_dmabuf_memrange(m, 3, pin, 0, len(mem)) == NOT_SUPPORTED
    assert lib.doca_mmap_set_dpa_memrange(m, ffi.NULL, 0x1000, 64) == INVALID_VALUE
    assert lib.doca_mmap_set_free_cb(m, on_free, ffi.NULL) == SUCCESS
    assert lib.doca_mmap_set_memrange(m, pin, len(mem)) == SUCCESS
    assert lib.doca_mmap_add_dev(m, dev.handle) == SUCCESS
    assert lib.doca_mmap_start(m) == SUCCESS
    assert lib.doca_mmap_enable_thread_safety(m) == NOT_PERMITTED            # started
    mkey = ffi.new("uint32_t *")
    assert lib.doca_mmap_get_mkey(m, dev.handle, mkey) == NOT_SUPPORTED
    desc = ffi.new("void **")
    desc_len = ffi.new("size_t *")
    assert lib.doca_mmap_export_pci(m, dev.handle, ffi.cast("const void **", desc), desc_len) == NOT_SUPPORTED
    flag = ffi.new("uint8_t *", 9)
    assert lib.doca_mmap_get_exported(m, flag) == SUCCESS and flag[0] == 0
    assert lib.doca_mmap_export_rdma(m, dev.handle, ffi.cast("const void **", desc), desc_len) == SUCCESS
    assert lib.doca_mmap_get_exported(m, flag) == SUCCESS and flag[0] == 1
    assert lib.doca_mmap_get_from_export(m, flag) == SUCCESS and flag[0] == 0
    inv_out = ffi.new("struct doca_buf_inventory **")
    assert lib.doca_buf_inventory_create(2, inv_out) == SUCCESS
    inv = inv_out[0]
    assert lib.doca_buf_inventory_start(inv) == SUCCESS
    buf = ffi.new("struct doca_buf **")
    assert lib.doca_buf_inventory_buf_get_by_args(inv, m, pin, 100, pin, 10, buf) == SUCCESS
    assert lib.doca_mmap_get_num_bufs(m, num) == SUCCESS and num[0] == 1
    assert lib.doca_mmap_destroy(m) == NOT_PERMITTED                       # a buf points into it
    assert lib.doca_buf_dec_refcount(buf[0], ffi.NULL) == SUCCESS
    assert lib.doca_mmap_get_num_bufs(m, num) == SUCCESS and num[0] == 0
    assert lib.doca_buf_inventory_destroy(inv) == SUCCESS
    assert freed == []
    assert lib.doca_mmap_destroy(m) == SUCCESS
    assert freed == [len(mem)]
    assert lib.doca_mmap_get_num_bufs(m, num) == BAD_STATE


def test_pe_and_batch_answers() -> None:
    pe_out = ffi.new("struct doca_pe **")
    assert lib.doca_pe_create(pe_out) == SUCCESS
    try:
        assert lib.doca_task_batch_submit(ffi.NULL) == INVALID_VALUE
        assert lib.doca_task_batch_try_submit(ffi.NULL) == INVALID_VALUE
        assert lib.doca_task_batch_get_status(ffi.NULL) == INVALID_VALUE
        assert lib.doca_task_batch_get_ctx(ffi.NULL) == ffi.NULL
        assert lib.doca_task_batch_get_tasks_num(ffi.NULL) == 0
        assert lib.doca_task_batch_get_user_data(ffi.NULL).u64 == 0
        lib.doca_task_batch_free(ffi.NULL)
    finally:
        assert lib.doca_pe_destroy(pe_out[0]) == SUCCESS


def test_ctx_setters(dev: Device) -> None:
    rdma = ffi.new("struct doca_rdma **")
    assert lib.doca_rdma_create(dev.handle, rdma) == SUCCESS
    try:
        ctx = lib.doca_rdma_as_ctx(rdma[0])
        assert lib.doca_ctx_set_completion_vector(ctx, 0) == SUCCESS
        assert lib.doca_ctx_set_completion_vector(ctx, 1) == INVALID_VALUE
        assert lib.doca_ctx_set_datapath_on_gpu(ctx, ffi.NULL) == INVALID_VALUE
        assert lib.doca_ctx_set_datapath_on_gpu(ctx, ffi.cast("struct doca_gpu *", 0x1000)) == NOT_SUPPORTED
        assert lib.doca_ctx_set_datapath_on_dpa(ctx, ffi.cast("struct doca_dpa *", 0x1000)) == NOT_SUPPORTED
        assert lib.doca_ctx_profiler_set_max_nranges(ctx, 8) == NOT_SUPPORTED
    finally:
        assert lib.doca_rdma_destroy(rdma[0]) == SUCCESS


PROGRAM = r'''
#include <doca_buf.h>
#include <doca_buf_inventory.h>
#include <doca_dev.h>
#include <doca_mmap.h>
#include <doca_pe.h>
#include <softdoca_ext.h>
#include <stdio.h>
#include <string.h>

#define EXPECT(call, want) do { doca_error_t r_ = (call); if (r_ != (want)) { \
	printf("FAIL %s = %s\n", #call, doca_error_get_name(r_)); return 1; } } while (0)

int main(void)
{
	static char mem[1024];
	struct doca_devinfo **list; struct doca_dev *dev; struct doca_mmap *m;
	struct doca_buf_inventory *inv; struct doca_buf *b; uint32_t n; void *p; size_t len;

	EXPECT(doca_devinfo_create_list(&list, &n), DOCA_SUCCESS);
	EXPECT(doca_dev_open(list[0], &dev), DOCA_SUCCESS);
	EXPECT(doca_devinfo_destroy_list(list), DOCA_SUCCESS);
	EXPECT(doca_mmap_create(&m), DOCA_SUCCESS);
	EXPECT(doca_mmap_set_memrange(m, mem, sizeof(mem)), DOCA_SUCCESS);
	EXPECT(doca_mmap_add_dev(m, dev), DOCA_SUCCESS);
	EXPECT(doca_mmap_start(m), DOCA_SUCCESS);
	EXPECT(doca_buf_inventory_create(4, &inv), DOCA_SUCCESS);
	EXPECT(doca_buf_inventory_start(inv), DOCA_SUCCESS);
	/* DOCA's static inline helpers (doca_buf_inventory.h) */
	EXPECT(doca_buf_inventory_buf_get_by_data(inv, m, mem + 8, 16, &b), DOCA_SUCCESS);
	EXPECT(doca_buf_get_data_len(b, &len), DOCA_SUCCESS);
	if (len != 16) { printf("FAIL data len %zu\n", len); return 1; }
	EXPECT(doca_buf_inventory_buf_reuse_by_addr(b, mem + 100, 50), DOCA_SUCCESS);
	EXPECT(doca_buf_get_head(b, &p), DOCA_SUCCESS);
	EXPECT(doca_buf_get_data_len(b, &len), DOCA_SUCCESS);
	if (p != mem + 100 || len != 0) { printf("FAIL reuse_by_addr\n"); return 1; }
	EXPECT(doca_buf_inventory_buf_reuse_by_data(b, mem + 200, 30), DOCA_SUCCESS);
	EXPECT(doca_buf_get_data(b, &p), DOCA_SUCCESS);
	EXPECT(doca_buf_get_data_len(b, &len), DOCA_SUCCESS);
	if (p != mem + 200 || len != 30) { printf("FAIL reuse_by_data\n"); return 1; }
	EXPECT(doca_buf_inventory_buf_reuse_by_data(b, mem + 1000, 100), DOCA_ERROR_INVALID_VALUE);
	EXPECT(doca_mmap_get_num_bufs(m, &n), DOCA_SUCCESS);
	if (n != 1) { printf("FAIL num bufs %u\n", n); return 1; }
	doca_buf_dec_refcount(b, NULL);
	EXPECT(softdoca_task_batch_allocate(NULL, 1, (union doca_data){.u64 = 0}, NULL, NULL, NULL, NULL),
	       DOCA_ERROR_INVALID_VALUE);
	EXPECT(doca_buf_inventory_destroy(inv), DOCA_SUCCESS);
	EXPECT(doca_mmap_destroy(m), DOCA_SUCCESS);
	EXPECT(doca_dev_close(dev), DOCA_SUCCESS);
	printf("PROGRAM OK\n");
	return 0;
}
'''


@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("pkg-config") is None,
                    reason="gcc and pkg-config are needed")
def test_rdma_hardware_only_functions(dev: Device) -> None:
    """The RDMA bridge (a librdmacm cm_id), DPA and GPU handles: NOT_SUPPORTED after the argument
    checks; a destroyed context is BAD_STATE."""
    import pydoca
    with pydoca.ProgressEngine() as pe, pydoca.Rdma(dev, pe) as rdma:
        r = rdma._rdma
        conn = ffi.new("struct doca_rdma_connection **")
        cm_id = ffi.cast("struct rdma_cm_id *", 0x1000)          # never dereferenced
        assert lib.doca_rdma_bridge_prepare_connection(r, cm_id, conn) == NOT_SUPPORTED
        assert lib.doca_rdma_bridge_prepare_connection(r, ffi.NULL, conn) == INVALID_VALUE
        assert lib.doca_rdma_bridge_prepare_connection(r, cm_id, ffi.NULL) == INVALID_VALUE
        fake = ffi.cast("struct doca_rdma_connection *", 0x1000)
        assert lib.doca_rdma_bridge_accept(r, ffi.NULL, 0, fake) == NOT_SUPPORTED
        assert lib.doca_rdma_bridge_accept(r, ffi.NULL, 4, fake) == INVALID_VALUE
        assert lib.doca_rdma_bridge_established(r, fake) == NOT_SUPPORTED
        assert lib.doca_rdma_bridge_established(ffi.NULL, fake) == INVALID_VALUE
        assert lib.doca_rdma_get_dpa_handle(r, ffi.new("doca_dpa_dev_rdma_t *")) == NOT_SUPPORTED
        assert lib.doca_rdma_get_gpu_handle(r, ffi.new("struct doca_gpu_dev_rdma **")) == NOT_SUPPORTED
        assert lib.doca_rdma_get_gpu_handle(r, ffi.NULL) == INVALID_VALUE
        comp = ffi.cast("struct doca_dpa_completion *", 0x1000)
        assert lib.doca_rdma_dpa_completion_attach(r, comp) == NOT_SUPPORTED
    assert lib.doca_rdma_dpa_completion_attach(r, comp) == BAD_STATE     # destroyed


def test_c_program_on_the_runtime_headers(tmp_path: Path) -> None:
    from pydoca.cli import softdoca as sd_cli

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYDOCA_", "LD_PRELOAD", "ASAN", "UBSAN"))}
    env["PKG_CONFIG_PATH"] = sd_cli.paths()["pkg_config_path"]
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "doca-common"], env=env, capture_output=True,
                           text=True, check=True).stdout.split()
    src = tmp_path / "extra.c"
    src.write_text(PROGRAM)
    exe = tmp_path / "extra"
    built = subprocess.run(["gcc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(src), *flags],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    ran = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=60)
    assert ran.returncode == 0 and "PROGRAM OK" in ran.stdout, ran.stdout + ran.stderr
