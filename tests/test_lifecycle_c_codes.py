"""Lifecycle misuse through raw DOCA calls returns the codes of docs/softdoca-contract.md (softdoca only)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any, Iterator

import pytest

from pydoca._native import backend, ffi, lib
from pydoca.device import Device

OK = lib.DOCA_SUCCESS
BAD_STATE = lib.DOCA_ERROR_BAD_STATE
INVALID = lib.DOCA_ERROR_INVALID_VALUE
IN_USE = lib.DOCA_ERROR_IN_USE
NO_MEMORY = lib.DOCA_ERROR_NO_MEMORY

soft_only = pytest.mark.skipif(backend.name != "soft", reason="softdoca contract")
pytestmark = soft_only  # real DOCA may answer misuse differently, or crash on NULL


class Raw:
    """Plain C objects with manual teardown, recorded for the fixture to undo."""

    def __init__(self, dev: Any) -> None:
        self.dev = dev
        self.memory = ffi.new("char[]", 4096)

    def mmap(self, *, start: bool = True) -> Any:
        out = ffi.new("struct doca_mmap **")
        assert lib.doca_mmap_create(out) == OK
        mm = out[0]
        assert lib.doca_mmap_set_memrange(mm, self.memory, 4096) == OK
        assert lib.doca_mmap_set_permissions(mm, lib.DOCA_ACCESS_FLAG_LOCAL_READ_WRITE) == OK
        assert lib.doca_mmap_add_dev(mm, self.dev) == OK
        if start:
            assert lib.doca_mmap_start(mm) == OK
        return mm

    def inventory(self, n: int = 4, *, start: bool = True) -> Any:
        out = ffi.new("struct doca_buf_inventory **")
        assert lib.doca_buf_inventory_create(n, out) == OK
        if start:
            assert lib.doca_buf_inventory_start(out[0]) == OK
        return out[0]

    def buf(self, inv: Any, mm: Any, length: int = 64) -> tuple[int, Any]:
        out = ffi.new("struct doca_buf **")
        rc = lib.doca_buf_inventory_buf_get_by_args(inv, mm, self.memory, length, self.memory, 0, out)
        return rc, out[0]


@pytest.fixture
def raw(dev: Device) -> Iterator[Raw]:
    yield Raw(dev.handle)


def test_null_arguments_invalid() -> None:
    assert lib.doca_mmap_create(ffi.NULL) == INVALID
    assert lib.doca_buf_inventory_create(4, ffi.NULL) == INVALID
    assert lib.doca_mmap_start(ffi.NULL) == INVALID
    assert lib.doca_mmap_destroy(ffi.NULL) == INVALID
    assert lib.doca_buf_inventory_start(ffi.NULL) == INVALID
    assert lib.doca_devinfo_create_list(ffi.NULL, ffi.NULL) == INVALID
    assert lib.doca_dev_open(ffi.NULL, ffi.new("struct doca_dev **")) == INVALID
    assert lib.doca_buf_dec_refcount(ffi.NULL, ffi.NULL) == INVALID


def test_mmap_configure_after_start_bad_state(raw: Raw) -> None:
    mm = raw.mmap()
    assert lib.doca_mmap_set_memrange(mm, raw.memory, 128) == BAD_STATE
    assert lib.doca_mmap_set_permissions(mm, lib.DOCA_ACCESS_FLAG_RDMA_READ) == BAD_STATE
    assert lib.doca_mmap_add_dev(mm, raw.dev) == BAD_STATE
    # doca_mmap.h names this one: NOT_PERMITTED after the first start (issue 21)
    assert lib.doca_mmap_set_max_num_devices(mm, 8) == lib.DOCA_ERROR_NOT_PERMITTED
    assert lib.doca_mmap_destroy(mm) == OK      # DOCA: destroy stops a started mmap implicitly


def test_destroy_of_started_inventory_stops_it(raw: Raw) -> None:
    inv = raw.inventory()
    assert lib.doca_buf_inventory_destroy(inv) == OK


def test_mmap_start_twice_bad_state(raw: Raw) -> None:
    mm = raw.mmap()
    assert lib.doca_mmap_start(mm) == BAD_STATE
    assert lib.doca_mmap_stop(mm) == OK
    assert lib.doca_mmap_destroy(mm) == OK


def test_mmap_start_without_memrange_fails(raw: Raw) -> None:
    out = ffi.new("struct doca_mmap **")
    assert lib.doca_mmap_create(out) == OK
    assert lib.doca_mmap_add_dev(out[0], raw.dev) == OK
    assert lib.doca_mmap_start(out[0]) in (BAD_STATE, INVALID)
    assert lib.doca_mmap_destroy(out[0]) == OK


def test_mmap_memrange_validation(raw: Raw) -> None:
    mm = raw.mmap(start=False)
    assert lib.doca_mmap_set_memrange(mm, ffi.NULL, 64) == INVALID
    assert lib.doca_mmap_set_memrange(mm, raw.memory, 0) == INVALID
    assert lib.doca_mmap_destroy(mm) == OK


def test_export_requires_started_map(raw: Raw) -> None:
    mm = raw.mmap(start=False)
    desc = ffi.new("const void **")
    size = ffi.new("size_t *")
    assert lib.doca_mmap_export_rdma(mm, raw.dev, desc, size) == BAD_STATE
    assert lib.doca_mmap_destroy(mm) == OK


def test_mmap_stop_with_live_buffers_not_permitted(raw: Raw) -> None:
    mm = raw.mmap()
    inv = raw.inventory()
    rc, buf = raw.buf(inv, mm)
    assert rc == OK
    # DOCA documents NOT_PERMITTED for an mmap with buffers outstanding (stop and destroy)
    assert lib.doca_mmap_stop(mm) == lib.DOCA_ERROR_NOT_PERMITTED
    assert lib.doca_mmap_destroy(mm) == lib.DOCA_ERROR_NOT_PERMITTED
    assert lib.doca_buf_inventory_destroy(inv) == IN_USE
    assert lib.doca_buf_inventory_stop(inv) == IN_USE
    assert lib.doca_buf_dec_refcount(buf, ffi.NULL) == OK
    assert lib.doca_mmap_stop(mm) == OK
    assert lib.doca_mmap_destroy(mm) == OK
    assert lib.doca_buf_inventory_stop(inv) == OK
    assert lib.doca_buf_inventory_destroy(inv) == OK


def test_buf_get_on_unstarted_or_stopped_inventory_bad_state(raw: Raw) -> None:
    mm = raw.mmap()
    inv = raw.inventory(start=False)
    assert raw.buf(inv, mm)[0] == BAD_STATE
    assert lib.doca_buf_inventory_start(inv) == OK
    assert lib.doca_buf_inventory_start(inv) == BAD_STATE
    assert lib.doca_buf_inventory_stop(inv) == OK
    assert raw.buf(inv, mm)[0] == BAD_STATE
    assert lib.doca_buf_inventory_destroy(inv) == OK
    assert lib.doca_mmap_stop(mm) == OK
    assert lib.doca_mmap_destroy(mm) == OK


def test_buf_get_on_unstarted_mmap_bad_state(raw: Raw) -> None:
    mm = raw.mmap(start=False)
    inv = raw.inventory()
    assert raw.buf(inv, mm)[0] == BAD_STATE
    assert lib.doca_buf_inventory_stop(inv) == OK
    assert lib.doca_buf_inventory_destroy(inv) == OK
    assert lib.doca_mmap_destroy(mm) == OK


def test_inventory_exhausted_no_memory(raw: Raw) -> None:
    mm = raw.mmap()
    inv = raw.inventory(1)
    rc, buf = raw.buf(inv, mm)
    assert rc == OK
    assert raw.buf(inv, mm)[0] == NO_MEMORY
    assert lib.doca_buf_dec_refcount(buf, ffi.NULL) == OK
    assert lib.doca_buf_inventory_stop(inv) == OK
    assert lib.doca_buf_inventory_destroy(inv) == OK
    assert lib.doca_mmap_stop(mm) == OK
    assert lib.doca_mmap_destroy(mm) == OK


def test_dev_close_with_mmap_in_use(raw: Raw) -> None:
    info = ffi.new("struct doca_dev **")
    devinfo = lib.doca_dev_as_devinfo(raw.dev)
    assert lib.doca_dev_open(devinfo, info) == OK
    own = info[0]
    out = ffi.new("struct doca_mmap **")
    assert lib.doca_mmap_create(out) == OK
    assert lib.doca_mmap_add_dev(out[0], own) == OK
    assert lib.doca_dev_close(own) == IN_USE
    assert lib.doca_mmap_destroy(out[0]) == OK
    assert lib.doca_dev_close(own) == OK


USE_AFTER_DESTROY = textwrap.dedent("""
    from pydoca._native import ffi, lib
    out = ffi.new("struct doca_mmap **"); assert lib.doca_mmap_create(out) == 0
    mm = out[0]; assert lib.doca_mmap_destroy(mm) == 0
    mem = ffi.new("char[]", 64)
    assert lib.doca_mmap_start(mm) == lib.DOCA_ERROR_BAD_STATE, "mmap start after destroy"
    assert lib.doca_mmap_set_memrange(mm, mem, 64) == lib.DOCA_ERROR_BAD_STATE, "memrange after destroy"
    assert lib.doca_mmap_destroy(mm) == lib.DOCA_ERROR_BAD_STATE, "double destroy"
    inv = ffi.new("struct doca_buf_inventory **"); assert lib.doca_buf_inventory_create(2, inv) == 0
    assert lib.doca_buf_inventory_destroy(inv[0]) == 0
    assert lib.doca_buf_inventory_start(inv[0]) == lib.DOCA_ERROR_BAD_STATE, "inventory start after destroy"
    assert lib.doca_buf_inventory_destroy(inv[0]) == lib.DOCA_ERROR_BAD_STATE, "inventory double destroy"
    print("USE-AFTER-DESTROY-OK")
""")


def test_use_after_destroy_detected() -> None:
    """Run in a child process: a missed check would be a crash, not a failure."""
    proc = subprocess.run([sys.executable, "-c", USE_AFTER_DESTROY], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "USE-AFTER-DESTROY-OK" in proc.stdout, proc.stderr[-2000:]


def test_buffer_bounds_invalid(raw: Raw) -> None:
    """Real DOCA leaves these undefined; softdoca refuses them (pydoca checks them itself too)."""
    mm = raw.mmap()
    inv = raw.inventory()
    out = ffi.new("struct doca_buf **")
    mem = raw.memory
    assert lib.doca_buf_inventory_buf_get_by_args(inv, mm, mem + 4000, 200, mem + 4000, 0, out) == INVALID
    assert lib.doca_buf_inventory_buf_get_by_args(inv, mm, mem, 64, mem + 32, 33, out) == INVALID
    assert lib.doca_buf_inventory_buf_get_by_args(inv, mm, mem, 64, mem + 65, 0, out) == INVALID
    rc, buf = raw.buf(inv, mm, 64)
    assert rc == OK
    assert lib.doca_buf_set_data_len(buf, 65) == INVALID
    assert lib.doca_buf_set_data(buf, mem + 60, 5) == INVALID
    assert lib.doca_buf_set_data(buf, mem - 1, 1) == INVALID
    assert lib.doca_buf_set_data(buf, mem + 60, 4) == OK
    assert lib.doca_buf_set_data_len(buf, 5) == INVALID
    assert lib.doca_buf_dec_refcount(buf, ffi.NULL) == OK
    assert lib.doca_buf_inventory_stop(inv) == OK
    assert lib.doca_buf_inventory_destroy(inv) == OK
    assert lib.doca_mmap_stop(mm) == OK
    assert lib.doca_mmap_destroy(mm) == OK
