"""pydoca.BufferPool (doca_buf_pool): layout, exhaustion, lifecycle, and pool buffers as RDMA buffers."""
from __future__ import annotations

import gc
from contextlib import ExitStack
from typing import Callable

import pytest

import pydoca
from pydoca import Access
from pydoca.buf_pool import PoolBuffer
from pydoca.errors import EmptyError, InitializationError

pytestmark = pytest.mark.timeout(60)

ALL = Access.LOCAL_READ_WRITE | Access.RDMA_WRITE | Access.RDMA_READ | Access.RDMA_ATOMIC


def test_layout_and_exhaustion(dev: pydoca.Device) -> None:
    mem = bytearray(4096)
    with pydoca.MemoryMap(dev, mem) as mm, pydoca.BufferPool(mm, 8, 100, alignment=64) as pool:
        assert (pool.num_elements, pool.num_free, pool.alignment, pool.element_size) == (8, 8, 64, 100)
        bufs = [pool.alloc() for _ in range(8)]
        assert pool.num_free == 0
        addrs = sorted(b.address for b in bufs)
        assert len(set(addrs)) == 8
        assert all(a % 64 == 0 for a in addrs)
        assert all(mm.address <= a and a + 100 <= mm.address + mm.length for a in addrs)
        assert all(b2 - b1 >= 100 for b1, b2 in zip(addrs, addrs[1:]))        # elements do not overlap
        assert all(b.length == 100 and b.data_len == 0 and b.data_address == b.address for b in bufs)
        with pytest.raises(EmptyError):
            pool.alloc()
        # write through one element; its bytes are in the registered memory
        b = bufs[3]
        b.data_len = 100
        b.memoryview()[:] = b"\xab" * 100
        off = b.address - mm.address
        assert mem[off:off + 100] == b"\xab" * 100
        # return it and take it again: the same element, empty again
        addr = b.address
        b.close()
        assert pool.num_free == 1
        again = pool.alloc()
        assert again.address == addr and again.data_len == 0
        with pytest.raises(TypeError):
            again.dup()
        with pytest.raises(TypeError):
            _ = again.inventory
        assert again.pool is pool and isinstance(again, PoolBuffer) and isinstance(again, pydoca.Buffer)
        for x in bufs:
            x.close()
        again.close()
        assert pool.num_free == 8
        assert "8/8 free" in repr(pool)


def test_start_errors(dev: pydoca.Device) -> None:
    with pydoca.MemoryMap(dev, bytearray(4096)) as mm:
        with pytest.raises(InitializationError, match="65 x 64 bytes"):
            pydoca.BufferPool(mm, 65, 64)                  # 4160 bytes do not fit in 4096
        with pydoca.BufferPool(mm, 64, 64) as full:       # exactly fits
            assert full.num_free == 64
        with pytest.raises(ValueError):
            pydoca.BufferPool(mm, 0, 64)
        with pytest.raises(ValueError):
            pydoca.BufferPool(mm, 4, 64, alignment=48)


def test_lifecycle(dev: pydoca.Device, gc_collect: Callable[[], None]) -> None:
    mm = pydoca.MemoryMap(dev, bytearray(1024))
    pool = pydoca.BufferPool(mm, 4, 32)
    kept = pool.alloc()
    pool.alloc()                                          # dropped at once: collected, element returned
    gc_collect()
    assert pool.num_free == 3
    mm.close()                                            # closes the pool (and its buffers) first
    assert pool.closed and kept.closed
    pool.close()                                          # idempotent


def test_pool_buffers_carry_rdma_tasks(dev: pydoca.Device) -> None:
    with ExitStack() as s:
        pe = s.enter_context(pydoca.ProgressEngine())
        a = s.enter_context(pydoca.Rdma(dev, pe, permissions=ALL))
        b = s.enter_context(pydoca.Rdma(dev, pe, permissions=ALL))
        ba, ca = a.export()
        bb, cb = b.export()
        a.connect(bb, ca)
        b.connect(ba, cb)
        ca.wait_established(10)
        cb.wait_established(10)
        src_mem, dst_mem = bytearray(4096), bytearray(4096)
        src_map = s.enter_context(pydoca.MemoryMap(dev, src_mem))
        dst_map = s.enter_context(pydoca.MemoryMap(dev, dst_mem, access=ALL))
        pool = s.enter_context(pydoca.BufferPool(src_map, 4, 256))
        inv = s.enter_context(pydoca.BufferInventory(4))
        remote = pydoca.MemoryMap.from_export(dev, dst_map.export_rdma())
        s.callback(remote.close)
        src = pool.alloc()
        src.data_len = 256
        src.memoryview()[:] = bytes(range(256))
        a.write(ca, src, inv.buffer(remote, offset=512, length=256)).result(10)
        assert dst_mem[512:768] == bytes(range(256))
        # a pool buffer as a read destination
        back = pool.alloc()
        a.read(ca, inv.buffer(remote, offset=512, length=256), back).result(10)
        assert bytes(back.memoryview()) == bytes(range(256))
        src.close()
        back.close()
        gc.collect()
