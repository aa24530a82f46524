"""Buffer pools: :class:`BufferPool` (``doca_buf_pool``), fixed-size buffers carved from a MemoryMap.

``BufferPool(mmap, n, size)`` lays ``n`` elements of ``size`` bytes over the
map's memory (each starting at a multiple of ``alignment``) and hands out one
:class:`PoolBuffer` per element with :meth:`BufferPool.alloc`: its data section
starts empty (a receive or read destination; ``data_len = k`` makes it a
source). Closing (or collecting) the buffer returns its element. No element
free: :class:`pydoca.errors.EmptyError`.

The pool is a child of its MemoryMap (closed before it); its buffers are
children of both.
"""
from __future__ import annotations

from typing import Any

from ._native import ffi, lib
from .buffer import Buffer, _BufSource
from .errors import check
from .memory import MemoryMap


class BufferPool(_BufSource):
    """``num_elements`` buffers of ``element_size`` bytes over ``mmap`` (a started ``doca_buf_pool``)."""

    _api = "doca_buf_pool"
    _what = "buffer pool"

    def __init__(self, mmap: MemoryMap, num_elements: int, element_size: int, *, alignment: int = 1) -> None:
        if num_elements <= 0 or element_size <= 0:
            raise ValueError(f"num_elements and element_size must be > 0, got {num_elements} and {element_size}")
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"alignment must be a power of two, got {alignment}")
        mmap_handle = mmap.handle
        super().__init__(mmap)
        self.mmap = mmap
        self.element_size = element_size
        out = ffi.new("struct doca_buf_pool **")
        check(lib.doca_buf_pool_create(num_elements, element_size, mmap_handle, out), "doca_buf_pool_create")
        handle = out[0]

        def set_alignment() -> None:
            check(lib.doca_buf_pool_set_element_alignment(handle, alignment), "doca_buf_pool_set_element_alignment")

        self._start(handle, set_alignment, f" ({num_elements} x {element_size} bytes, alignment {alignment}, "
                                           f"over a {mmap.length}-byte MemoryMap)")

    @property
    def num_elements(self) -> int:
        return self._count("num_elements")

    @property
    def alignment(self) -> int:
        out = ffi.new("size_t *")
        check(lib.doca_buf_pool_get_element_alignment(self.handle, out), "doca_buf_pool_get_element_alignment")
        return int(out[0])

    def alloc(self) -> "PoolBuffer":
        """One element's buffer, data section empty. ``EmptyError`` when every element is out."""
        out = ffi.new("struct doca_buf **")
        check(lib.doca_buf_pool_buf_alloc(self.handle, out), "doca_buf_pool_buf_alloc")
        return PoolBuffer._from_pool(self, out[0])

    def __repr__(self) -> str:
        if self._closed:
            return "<BufferPool closed>"
        return f"<BufferPool {self.num_free}/{self.num_elements} free x {self.element_size} bytes>"


class PoolBuffer(Buffer):
    """A :class:`~pydoca.buffer.Buffer` of a :class:`BufferPool`: always the same element."""

    _pool: BufferPool

    @classmethod
    def _from_pool(cls, pool: BufferPool, handle: Any) -> "PoolBuffer":
        buf = cls._own(pool, pool.mmap, handle)
        buf._pool = pool
        return buf

    @property
    def pool(self) -> BufferPool:
        return self._pool

    @property
    def inventory(self) -> Any:
        raise TypeError("a pool buffer belongs to a BufferPool (.pool), not to a BufferInventory")

    def dup(self) -> Buffer:
        raise TypeError("a pool buffer cannot be duplicated; use BufferInventory.buffer() on its MemoryMap")

    def __repr__(self) -> str:
        if self._closed:
            return "<PoolBuffer closed>"
        return f"<PoolBuffer {self.address:#x}+{self.length} data={self.data_address:#x}+{self.data_len}>"


__all__ = ["BufferPool", "PoolBuffer"]
