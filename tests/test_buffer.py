"""BufferInventory and Buffer: pool accounting, zero-copy views, data section, refcounts."""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import pytest

from pydoca._native import ffi, lib
from pydoca.buffer import Buffer, BufferInventory
from pydoca.device import Device
from pydoca.errors import ClosedError, InvalidValueError, NoMemoryError
from pydoca.memory import Access, MemoryMap


@pytest.fixture
def backing() -> bytearray:
    return bytearray(1024)


@pytest.fixture
def mm(dev: Device, backing: bytearray) -> Iterator[MemoryMap]:
    m = MemoryMap(dev, backing, access=Access.LOCAL_READ_WRITE | Access.RDMA_WRITE)
    yield m
    m.close()


def test_capacity_and_num_free(mm: MemoryMap) -> None:
    with BufferInventory(3) as inv:
        assert inv.capacity == 3 and inv.num_free == 3
        a = inv.buffer(mm)
        b = inv.buffer(mm, offset=8, length=8)
        assert inv.num_free == 1
        a.close()
        assert inv.num_free == 2
        b.close()
        assert inv.num_free == 3


def test_exhaustion_and_expand(mm: MemoryMap) -> None:
    with BufferInventory(2) as inv:
        bufs = [inv.buffer(mm), inv.buffer(mm)]
        with pytest.raises(NoMemoryError):
            inv.buffer(mm)
        inv.expand(2)
        assert inv.capacity == 4 and inv.num_free == 2
        bufs += [inv.buffer(mm), inv.buffer(mm)]
        with pytest.raises(NoMemoryError):
            inv.buffer(mm)
    assert all(b.closed for b in bufs)


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError):
        BufferInventory(0)


def test_buffer_geometry(mm: MemoryMap, inventory: BufferInventory) -> None:
    with inventory.buffer(mm, offset=100, length=200) as buf:
        assert buf.address == mm.address + 100 and buf.length == 200
        assert buf.data_address == buf.address and buf.data_len == 200
        assert buf.mmap is mm and buf.inventory is inventory
    with inventory.buffer(mm, offset=100, length=200, empty=True) as buf:
        assert buf.data_len == 0
    with inventory.buffer(mm, offset=1000) as buf:
        assert buf.length == 24 and buf.data_len == 24
    with inventory.buffer(mm, length=64, data_len=10) as buf:
        assert buf.data_len == 10
    with pytest.raises(ValueError):
        inventory.buffer(mm, empty=True, data_len=3)


def test_buffer_outside_map_refused(mm: MemoryMap, inventory: BufferInventory) -> None:
    free = inventory.num_free
    with pytest.raises(InvalidValueError):
        inventory.buffer(mm, offset=1000, length=100)
    with pytest.raises(InvalidValueError):
        inventory.buffer(mm, offset=2000, length=1)
    with pytest.raises(InvalidValueError):
        inventory.buffer(mm, length=64, data_len=65)
    with pytest.raises(ValueError):
        inventory.buffer(mm, offset=-1)
    assert inventory.num_free == free


def test_views_are_zero_copy(mm: MemoryMap, inventory: BufferInventory, backing: bytearray) -> None:
    with inventory.buffer(mm, offset=16, length=32) as buf:
        backing[16:21] = b"hello"
        assert bytes(buf.memoryview()[:5]) == b"hello"
        arr = buf.numpy()
        assert arr.dtype == np.uint8 and arr.shape == (32,)
        assert bytes(arr[:5]) == b"hello"
        arr[5:11] = np.frombuffer(b" world", dtype=np.uint8)
        assert backing[16:27] == b"hello world"
        buf.memoryview()[0] = ord("J")
        assert backing[16] == ord("J")
        assert buf.numpy(np.uint32).shape == (8,)
        buf.set_data(4, 4)
        assert bytes(buf.memoryview()) == bytes(backing[20:24])


def test_view_follows_data_section(mm: MemoryMap, inventory: BufferInventory) -> None:
    with inventory.buffer(mm, length=64, empty=True) as buf:
        assert buf.memoryview().nbytes == 0
        buf.data_len = 10
        assert buf.memoryview().nbytes == 10
        buf.reset()
        assert buf.data_len == 0


def test_data_len_bounds(mm: MemoryMap, inventory: BufferInventory) -> None:
    with inventory.buffer(mm, offset=0, length=64) as buf:
        buf.data_len = 64
        with pytest.raises(InvalidValueError):
            buf.data_len = 65
        assert buf.data_len == 64
        buf.set_data(60, 4)
        assert buf.data_address == buf.address + 60 and buf.data_len == 4
        with pytest.raises(InvalidValueError):
            buf.data_len = 5  # data + 5 passes the end of the buffer
        with pytest.raises(InvalidValueError):
            buf.set_data(60, 5)
        with pytest.raises(InvalidValueError):
            buf.set_data(65, 0)
        with pytest.raises(ValueError):
            buf.data_len = -1


def test_dup_and_refcount(mm: MemoryMap, inventory: BufferInventory) -> None:
    with inventory.buffer(mm, offset=8, length=16, data_len=4) as buf:
        assert buf.refcount == 1
        count = ffi.new("uint16_t *")  # DOCA reports the count before the operation
        assert lib.doca_buf_inc_refcount(buf.handle, count) == 0 and count[0] == 1
        assert buf.refcount == 2
        assert lib.doca_buf_dec_refcount(buf.handle, count) == 0 and count[0] == 2
        assert buf.refcount == 1
        with buf.dup() as twin:
            assert twin.handle != buf.handle
            assert (twin.address, twin.length, twin.data_address, twin.data_len) == \
                (buf.address, buf.length, buf.data_address, buf.data_len)
            assert twin.refcount == 1
            assert inventory.num_free == inventory.capacity - 2
    assert inventory.num_free == inventory.capacity


def test_closed_buffer(mm: MemoryMap, inventory: BufferInventory) -> None:
    buf = inventory.buffer(mm)
    buf.close()
    buf.close()
    with pytest.raises(ClosedError):
        _ = buf.data_len
    with pytest.raises(ClosedError):
        buf.memoryview()
    assert "closed" in repr(buf)


def test_closing_inventory_closes_buffers(mm: MemoryMap) -> None:
    inv = BufferInventory(4)
    bufs = [inv.buffer(mm) for _ in range(3)]
    inv.close()
    assert all(b.closed for b in bufs)
    with pytest.raises(ClosedError):
        inv.buffer(mm)


def test_remote_buffer_has_no_view(dev: Device, mm: MemoryMap, inventory: BufferInventory) -> None:
    with MemoryMap.from_export(dev, mm.export_rdma()) as remote:
        with inventory.buffer(remote, offset=8, length=8) as buf:
            assert buf.address == mm.address + 8
            with pytest.raises(ValueError, match="remote"):
                buf.memoryview()


def test_buffer_cannot_be_built_directly() -> None:
    with pytest.raises(TypeError):
        Buffer()


def test_read_only_map_views_read_only(dev: Device, inventory: BufferInventory) -> None:
    with MemoryMap(dev, b"0123456789", access=Access.LOCAL_READ_ONLY) as ro:
        with inventory.buffer(ro) as buf:
            assert buf.memoryview().readonly
            assert not buf.numpy().flags.writeable


def test_dropped_buffer_released_quietly(mm: MemoryMap, inventory: BufferInventory,
                                         gc_collect: Callable[[], None]) -> None:
    """A temporary Buffer (e.g. handed to a task) returns to the inventory without a warning."""
    free = inventory.num_free
    inventory.buffer(mm)  # dropped at once
    assert inventory.num_free == free
    buf = inventory.buffer(mm)
    twin = buf.dup()
    del buf, twin
    gc_collect()
    assert inventory.num_free == free
    mm.close()  # nothing left on the map: stop/destroy succeed
