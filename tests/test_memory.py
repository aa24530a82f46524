"""MemoryMap: registration of buffer-protocol objects, export/import, lifecycle."""
from __future__ import annotations

import gc
import mmap as pymmap
import random
import struct
import zlib
from typing import Any, Callable

import numpy as np
import pytest

from pydoca._native import backend
from pydoca.buffer import BufferInventory
from pydoca.device import Device
from pydoca.errors import ClosedError, DocaError, InvalidValueError
from pydoca.memory import Access, MemoryMap

RW = Access.LOCAL_READ_WRITE | Access.RDMA_READ | Access.RDMA_WRITE
soft_only = pytest.mark.skipif(backend.name != "soft", reason="softdoca descriptor format")


def test_access_mirrors_doca_flags() -> None:
    from pydoca._native import ffi
    flags = dict(ffi.typeof("enum doca_access_flag").relements)
    assert {f"DOCA_ACCESS_FLAG_{name}": int(m) for name, m in Access.__members__.items()} == flags
    assert int(Access.LOCAL_READ_ONLY) == 0


@pytest.mark.parametrize("make", [
    lambda: bytearray(b"x" * 4096),
    lambda: np.zeros((16, 64), dtype=np.float32),
    lambda: memoryview(bytearray(1000)),
], ids=["bytearray", "numpy2d", "memoryview"])
def test_register_writable_objects(dev: Device, make: Callable[[], Any]) -> None:
    obj = make()
    size = memoryview(obj).nbytes
    with MemoryMap(dev, obj, access=RW) as mm:
        assert mm.length == size and not mm.remote and mm.access == RW
        assert mm.device is dev
        view = mm.view
        assert view.nbytes == size and not view.readonly
        view[0] = 0x5A  # zero-copy: the object sees it
        assert memoryview(obj).cast("B")[0] == 0x5A
    assert mm.closed


def test_register_mmap_object(dev: Device) -> None:
    m = pymmap.mmap(-1, 8192)
    with MemoryMap(dev, m, access=RW) as mm:
        m[100:105] = b"hello"
        assert bytes(mm.view[100:105]) == b"hello"
    m.close()  # unpinned after close: the mmap may be closed now


def test_address_matches_object(dev: Device) -> None:
    arr = np.arange(256, dtype=np.uint8)
    with MemoryMap(dev, arr, access=Access.LOCAL_READ_WRITE, offset=16, length=32) as mm:
        assert mm.address == arr.ctypes.data + 16
        assert mm.length == 32
        assert bytes(mm.view) == bytes(range(16, 48))


def test_bytes_read_only_ok(dev: Device) -> None:
    data = b"immutable bytes"
    with MemoryMap(dev, data, access=Access.LOCAL_READ_ONLY | Access.RDMA_READ) as mm:
        assert mm.view.readonly and mm.readonly
        assert bytes(mm.view) == data


@pytest.mark.parametrize("access", [Access.LOCAL_READ_WRITE, Access.RDMA_WRITE, Access.RDMA_ATOMIC,
                                    Access.RDMA_READ | Access.RDMA_WRITE])
@pytest.mark.parametrize("obj", [b"read only", memoryview(bytearray(8)).toreadonly()], ids=["bytes", "ro_view"])
def test_read_only_object_refuses_write_access(dev: Device, access: Access, obj: Any) -> None:
    with pytest.raises(ValueError, match="read-only"):
        MemoryMap(dev, obj, access=access)


def test_non_contiguous_and_empty_refused(dev: Device) -> None:
    arr = np.zeros((8, 8), dtype=np.uint8)
    with pytest.raises(ValueError, match="contiguous"):
        MemoryMap(dev, arr[:, ::2])
    with pytest.raises(ValueError, match="contiguous"):
        MemoryMap(dev, np.asfortranarray(arr))
    with pytest.raises(ValueError, match="empty"):
        MemoryMap(dev, bytearray())
    with pytest.raises(TypeError):
        MemoryMap(dev, "a str is not a buffer")
    with pytest.raises(ValueError):
        MemoryMap(dev, bytearray(10), offset=5, length=6)
    with pytest.raises(ValueError):
        MemoryMap(dev, bytearray(10), offset=-1)


def test_pinned_object_cannot_resize(dev: Device) -> None:
    buf = bytearray(64)
    with MemoryMap(dev, buf):
        with pytest.raises(BufferError):
            buf.extend(b"more")
    buf.extend(b"more")  # unpinned once closed


def test_export_round_trip(dev: Device) -> None:
    buf = bytearray(4096)
    with MemoryMap(dev, buf, access=RW) as local:
        blob = local.export_rdma()
        assert isinstance(blob, bytes) and len(blob) > 16
        with MemoryMap.from_export(dev, blob) as remote:
            assert remote.remote and remote.access is None
            assert remote.address == local.address and remote.length == local.length
            with pytest.raises(ValueError, match="remote"):
                _ = remote.view


@pytest.fixture
def blob(dev: Device) -> Any:
    buf = bytearray(4096)
    local = MemoryMap(dev, buf, access=RW)
    yield local.export_rdma()
    local.close()


def _rejected(dev: Device, data: bytes) -> None:
    try:
        mm = MemoryMap.from_export(dev, data)
    except InvalidValueError:
        return
    mm.close()
    pytest.fail(f"malformed descriptor accepted: {data.hex()}")


def test_descriptor_empty(dev: Device) -> None:
    _rejected(dev, b"")


def test_descriptor_truncated_at_every_length(dev: Device, blob: bytes) -> None:
    for n in range(len(blob)):
        _rejected(dev, blob[:n])


@soft_only  # real DOCA descriptors carry no checksum
def test_descriptor_extended(dev: Device, blob: bytes) -> None:
    _rejected(dev, blob + b"\0")


@soft_only  # real DOCA descriptors carry no checksum
def test_descriptor_every_bit_flipped(dev: Device, blob: bytes) -> None:
    for bit in range(len(blob) * 8):
        bad = bytearray(blob)
        bad[bit // 8] ^= 1 << (bit % 8)
        _rejected(dev, bytes(bad))


def test_descriptor_random_garbage(dev: Device, blob: bytes) -> None:
    rnd = random.Random(1234)
    for n in list(range(1, 64)) + [len(blob)] * 200 + [4096, 1 << 16]:
        _rejected(dev, rnd.randbytes(n))


@soft_only  # real DOCA descriptors carry no checksum
def test_descriptor_garbage_with_valid_prefix(dev: Device, blob: bytes) -> None:
    rnd = random.Random(99)
    for cut in range(1, len(blob)):
        _rejected(dev, blob[:cut] + rnd.randbytes(len(blob) - cut))


# softdoca's descriptor layout (softdoca/src/common/mmap.c): magic u32, version u16, total length u16,
# instance u64, id u64, addr u64, len u64, permissions u32, key[16], ip[16], port u16, crc32 u32.
SOFT_FIELDS = {"magic": (0, "<I"), "version": (4, "<H"), "desc_len": (6, "<H"), "addr": (24, "<Q"),
               "len": (32, "<Q"), "permissions": (40, "<I")}


def _resigned(blob: bytes, **fields: int) -> bytes:
    """``blob`` with fields replaced and its CRC recomputed: only the field check can reject it."""
    data = bytearray(blob)
    for name, value in fields.items():
        offset, fmt = SOFT_FIELDS[name]
        struct.pack_into(fmt, data, offset, value)
    struct.pack_into("<I", data, len(data) - 4, zlib.crc32(bytes(data[:-4])))
    return bytes(data)


@soft_only
def test_descriptor_resign_is_faithful(dev: Device, blob: bytes) -> None:
    assert _resigned(blob) == blob
    with MemoryMap.from_export(dev, _resigned(blob, permissions=int(Access.RDMA_READ))) as mm:
        assert mm.remote


@soft_only
@pytest.mark.parametrize("fields", [
    {"version": 0}, {"version": 2}, {"version": 0xFFFF}, {"magic": 0x12345678},
    {"desc_len": 0}, {"desc_len": 0xFFFF}, {"desc_len": 81},
    {"len": 0}, {"len": (1 << 64) - 1}, {"addr": (1 << 64) - 16, "len": 32},
    {"permissions": 0x80}, {"permissions": 0xFFFFFFFF},
], ids=lambda f: ",".join(f"{k}={v:#x}" for k, v in f.items()))
def test_descriptor_bad_fields_with_valid_crc(dev: Device, blob: bytes, fields: dict[str, int]) -> None:
    _rejected(dev, _resigned(blob, **fields))


def test_closing_device_first_closes_maps_and_buffers() -> None:
    device = Device.open(iface="lo")
    inv = BufferInventory(4)
    mm = MemoryMap(device, bytearray(256))
    buf = inv.buffer(mm)
    device.close()
    assert mm.closed and buf.closed and device.closed
    assert not inv.closed and inv.num_free == 4
    inv.close()


def test_closing_map_closes_its_buffers(dev: Device, inventory: BufferInventory) -> None:
    mm = MemoryMap(dev, bytearray(256))
    bufs = [inventory.buffer(mm, offset=i * 16, length=16) for i in range(4)]
    assert inventory.num_free == inventory.capacity - 4
    mm.close()
    assert all(b.closed for b in bufs)
    assert inventory.num_free == inventory.capacity


def test_close_idempotent_and_closed_use(dev: Device) -> None:
    mm = MemoryMap(dev, bytearray(64))
    mm.close()
    mm.close()
    with pytest.raises(ClosedError):
        _ = mm.handle
    with pytest.raises(ClosedError):
        mm.export_rdma()
    with pytest.raises(ClosedError):
        _ = mm.view
    with BufferInventory(1) as inv, pytest.raises(ClosedError):
        inv.buffer(mm)


def test_map_on_closed_device_refused() -> None:
    device = Device.open(iface="lo")
    device.close()
    with pytest.raises(ClosedError):
        MemoryMap(device, bytearray(8))


def test_unclosed_map_warns(dev: Device, gc_collect: Callable[[], None]) -> None:
    with pytest.warns(ResourceWarning, match="unclosed MemoryMap"):
        mm = MemoryMap(dev, bytearray(128))
        del mm
        gc_collect()


def test_unclosed_map_with_buffer_warns_and_cleans(dev: Device, inventory: BufferInventory,
                                                   gc_collect: Callable[[], None]) -> None:
    with pytest.warns(ResourceWarning) as record:
        mm = MemoryMap(dev, bytearray(128))
        buf = inventory.buffer(mm)
        del mm, buf
        gc_collect()
    names = [str(w.message) for w in record]
    assert any("MemoryMap" in n for n in names)
    assert not any("Buffer" in n for n in names)  # buffers are released quietly
    assert inventory.num_free == inventory.capacity


def test_gc_keeps_object_alive_while_registered(dev: Device) -> None:
    mm = MemoryMap(dev, bytearray(b"z" * 1024))
    gc.collect()
    assert bytes(mm.view[:4]) == b"zzzz"
    mm.close()


def test_errors_are_docaerrors(dev: Device) -> None:
    assert issubclass(InvalidValueError, DocaError)
