"""Buffers: :class:`BufferInventory` (``doca_buf_inventory``) and :class:`Buffer` (``doca_buf``).

A Buffer describes a range of a :class:`~pydoca.memory.MemoryMap` plus its
data section (the bytes a task sends or the room it may fill). It is owned by
both its inventory and its memory map: closing either closes the buffer first.
A Buffer collected without ``close()`` is released quietly (no ResourceWarning):
it is a cheap refcounted descriptor, often a temporary passed to a task.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple, Type, TypeVar

import numpy as np
import numpy.typing as npt

from ._log import get_logger
from ._native import ffi, lib
from .errors import InUseError, InvalidValueError, check
from .memory import MemoryMap
from .resource import Resource

log = get_logger()


def _stop_destroy(api: str, handle: Any, state: Dict[str, bool]) -> None:
    """``<api>_stop`` (when started), then ``<api>_destroy``."""
    if state["started"]:
        rc = getattr(lib, f"{api}_stop")(handle)
        if rc == InUseError.code:
            raise InUseError(f"{api}_stop: some of its buffers are still referenced (by tasks in flight, or "
                             "doca_buf_inc_refcount); let those tasks complete before closing it (else it is "
                             "destroyed at exit)", code=rc)
        check(rc, f"{api}_stop")
        state["started"] = False
    check(getattr(lib, f"{api}_destroy")(handle), f"{api}_destroy")


def _release_buf(handle: Any, mmap: MemoryMap) -> None:
    """Drop our one reference; ``mmap`` stays referenced (so registered) until then."""
    count = ffi.new("uint16_t *")
    check(lib.doca_buf_dec_refcount(handle, count), "doca_buf_dec_refcount")
    del mmap


def _uint(name: str, value: int) -> int:
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


class _BufSource(Resource):
    """What :class:`BufferInventory` and :class:`~pydoca.buf_pool.BufferPool`
    share: a started DOCA object of ``_api`` (``doca_buf_inventory``,
    ``doca_buf_pool``) whose elements are handed out as Buffers. Closing stops
    it (when started) and destroys it."""

    _api: str = ""     # the C prefix of its functions
    _what: str = ""    # names it in the log line of a failed start
    _handle: Any

    def _start(self, handle: Any, configure: Optional[Callable[[], None]] = None, detail: str = "") -> None:
        """Own the created ``handle`` and start it (after ``configure``); on a
        failure close it again and re-raise. ``detail`` follows
        ``<api>_start`` in the error."""
        api = self._api
        state = {"started": False}
        self._handle = handle
        self._arm(lambda: _stop_destroy(api, handle, state))
        try:
            if configure is not None:
                configure()
            check(getattr(lib, f"{api}_start")(handle), f"{api}_start{detail}")
            state["started"] = True
        except BaseException:
            try:
                self.close()
            except Exception as exc:  # noqa: BLE001 - keep the first error
                log.error("cleanup after a failed start failed", resource=self._what, error=str(exc))
            raise

    def close(self) -> None:
        """Close the Buffers handed out, then stop and destroy. Tasks in flight hold their Buffers
        (pydoca.ctx.Task): those on the maps of Buffers still open here are finished first, as
        :meth:`MemoryMap.close <pydoca.memory.MemoryMap.close>` finishes its tasks. Elements still held by
        something else (tasks whose Buffers were all closed by hand, a range batch): InUseError, and the
        object stays open, so close() again once they completed. Idempotent."""
        if self.closed:
            return
        kids = [c for c in (self._children.get(k) for k in list(self._children.keys())) if c is not None]
        maps = {id(m): m for m in (getattr(c, "_mmap", None) for c in kids) if m is not None and m._tasks}
        for m in maps.values():
            m._drain(m.CLOSE_DRAIN_BOUND)
        mine = {id(c) for c in kids if isinstance(c, Buffer) and not c.closed}
        held = self._count("num_elements") - self._count("num_free_elements")
        if held > len(mine):
            raise InUseError(f"{held - len(mine)} element(s) of this {self._what} are still referenced (by tasks "
                             "in flight whose Buffers were closed, a range batch, or doca_buf_inc_refcount); "
                             "let those tasks complete, then close() it again", code=InUseError.code)
        super().close()

    @property
    def handle(self) -> Any:
        """The ``struct doca_buf_inventory *`` / ``struct doca_buf_pool *`` cdata."""
        self._check_open()
        return self._handle

    def _count(self, what: str) -> int:
        """The ``uint32_t`` of ``<api>_get_<what>``."""
        out = ffi.new("uint32_t *")
        name = f"{self._api}_get_{what}"
        check(getattr(lib, name)(self.handle, out), name)
        return int(out[0])

    @property
    def num_free(self) -> int:
        """Number of elements (descriptors, buffers) not handed out."""
        return self._count("num_free_elements")


class BufferInventory(_BufSource):
    """A pool of ``capacity`` buffer descriptors (``doca_buf_inventory``), started."""

    _api = "doca_buf_inventory"
    _what = "inventory"

    def __init__(self, capacity: int) -> None:
        """Create and start an inventory holding up to ``capacity`` buffers."""
        if capacity <= 0:
            raise ValueError(f"capacity must be > 0, got {capacity}")
        super().__init__()
        out = ffi.new("struct doca_buf_inventory **")
        check(lib.doca_buf_inventory_create(capacity, out), "doca_buf_inventory_create")
        self._start(out[0])

    @property
    def capacity(self) -> int:
        """Number of buffer descriptors (grows with :meth:`expand`)."""
        return self._count("num_elements")

    def expand(self, n: int) -> None:
        """Add ``n`` descriptors."""
        check(lib.doca_buf_inventory_expand(self.handle, _uint("n", n)), "doca_buf_inventory_expand")

    def buffer(self, mmap: MemoryMap, *, offset: int = 0, length: Optional[int] = None,
               data_len: Optional[int] = None, empty: bool = False) -> "Buffer":
        """A Buffer over ``mmap[offset:offset+length]``.

        The data section starts at the buffer head and holds ``data_len`` bytes
        (default: the whole buffer, as a send/write source). ``empty=True``
        gives data_len 0: a destination for receives and reads.
        """
        if empty and data_len:
            raise ValueError("empty=True and a non-zero data_len contradict each other")
        _uint("offset", offset)
        length = mmap.length - offset if length is None else _uint("length", length)
        data_len = 0 if empty else (length if data_len is None else _uint("data_len", data_len))
        if offset + length > mmap.length or data_len > length:
            raise InvalidValueError(f"buffer {offset}+{length} (data_len {data_len}) does not fit the "
                                    f"{mmap.length}-byte MemoryMap")
        addr = ffi.cast("void *", mmap.address + offset)
        out = ffi.new("struct doca_buf **")
        check(lib.doca_buf_inventory_buf_get_by_args(self.handle, mmap.handle, addr, length, addr, data_len, out),
              "doca_buf_inventory_buf_get_by_args")
        return Buffer._wrap(self, mmap, out[0])


_B = TypeVar("_B", bound="Buffer")


class Buffer(Resource):
    """One ``doca_buf``: a range of a MemoryMap and its data section."""

    _quiet_collect = True   # a collected Buffer is a normal release (see the module docstring)
    _task_held = True       # a task in flight holds a reference on it (pydoca.ctx.Task._hold)

    _inventory: BufferInventory
    _mmap: MemoryMap
    _handle: Any
    _extent: Optional[Tuple[int, int]]

    @classmethod
    def _own(cls: Type[_B], parent: Resource, mmap: MemoryMap, handle: Any) -> _B:
        """Own a ``doca_buf*`` we hold one reference on (released by close), a
        child of ``parent`` (its inventory or pool) and of ``mmap``."""
        buf = cls.__new__(cls)
        Resource.__init__(buf, parent)
        buf._mmap, buf._handle = mmap, handle
        buf._extent = None
        buf._arm(lambda: _release_buf(handle, mmap))
        buf._add_owner(mmap)
        return buf

    @classmethod
    def _wrap(cls, inventory: BufferInventory, mmap: MemoryMap, handle: Any) -> "Buffer":
        """A Buffer of ``inventory`` owning ``handle`` (see :meth:`_own`)."""
        buf = cls._own(inventory, mmap, handle)
        buf._inventory = inventory
        return buf

    def __init__(self) -> None:
        raise TypeError("Buffers come from BufferInventory.buffer() or Buffer.dup()")

    def close(self) -> None:
        """Release our reference to the ``doca_buf``. Idempotent."""
        super().close()
        self._mmap._children.pop(self._seq, None)

    @property
    def handle(self) -> Any:
        """The ``struct doca_buf *`` cdata."""
        self._check_open()
        return self._handle

    @property
    def mmap(self) -> MemoryMap:
        return self._mmap

    @property
    def inventory(self) -> BufferInventory:
        return self._inventory

    def _ptr(self, getter: Any, what: str) -> int:
        out = ffi.new("void **")
        check(getter(self.handle, out), what)
        return int(ffi.cast("uintptr_t", out[0]))

    def _size(self, getter: Any, what: str) -> int:
        out = ffi.new("size_t *")
        check(getter(self.handle, out), what)
        return int(out[0])

    def _head_len(self) -> Tuple[int, int]:
        """(head, length): fixed for a doca_buf's life (only its data section moves), read once."""
        ext = self._extent
        if ext is None:
            ext = self._extent = (self._ptr(lib.doca_buf_get_head, "doca_buf_get_head"),
                                  self._size(lib.doca_buf_get_len, "doca_buf_get_len"))
        else:
            self._check_open()
        return ext

    @property
    def address(self) -> int:
        """Head of the buffer."""
        return self._head_len()[0]

    @property
    def length(self) -> int:
        """Length of the whole buffer."""
        return self._head_len()[1]

    @property
    def data_address(self) -> int:
        """Start of the data section."""
        return self._ptr(lib.doca_buf_get_data, "doca_buf_get_data")

    @property
    def data_len(self) -> int:
        """Length of the data section."""
        return self._size(lib.doca_buf_get_data_len, "doca_buf_get_data_len")

    @data_len.setter
    def data_len(self, value: int) -> None:
        head, length = self._head_len()
        start = self.data_address
        if start - head + _uint("data_len", value) > length:
            self._bounds(start - head, value)
        check(lib.doca_buf_set_data_len(self.handle, value), "doca_buf_set_data_len")

    def set_data(self, offset: int, length: int) -> None:
        """Data section = ``length`` bytes starting ``offset`` bytes after the head."""
        self._bounds(_uint("offset", offset), _uint("length", length))
        data = ffi.cast("void *", self.address + offset)
        check(lib.doca_buf_set_data(self.handle, data, length), "doca_buf_set_data")

    def _bounds(self, offset: int, length: int) -> None:
        """Real DOCA leaves an out-of-buffer data section undefined: refuse it here."""
        if offset + length > self.length:
            raise InvalidValueError(f"data section {offset}+{length} passes the end of the "
                                    f"{self.length}-byte buffer")

    def reset(self) -> None:
        """Data length back to 0 (``doca_buf_reset_data_len``)."""
        check(lib.doca_buf_reset_data_len(self.handle), "doca_buf_reset_data_len")

    @property
    def refcount(self) -> int:
        """DOCA's reference count of this ``doca_buf``."""
        out = ffi.new("uint16_t *")
        check(lib.doca_buf_get_refcount(self.handle, out), "doca_buf_get_refcount")
        return int(out[0])

    def dup(self) -> "Buffer":
        """A new Buffer (same inventory and map) describing the same range and data."""
        out = ffi.new("struct doca_buf **")
        check(lib.doca_buf_inventory_buf_dup(self._inventory.handle, self.handle, out),
              "doca_buf_inventory_buf_dup")
        return Buffer._wrap(self._inventory, self._mmap, out[0])

    def memoryview(self) -> memoryview:
        """Zero-copy view of the data section (local maps only)."""
        return self._mmap._window(self.data_address, self.data_len)

    def numpy(self, dtype: npt.DTypeLike = np.uint8) -> npt.NDArray[Any]:
        """Zero-copy numpy array over the data section (local maps only)."""
        return np.frombuffer(self.memoryview(), dtype=dtype)

    def __repr__(self) -> str:
        if self._closed:
            return "<Buffer closed>"
        return f"<Buffer {self.address:#x}+{self.length} data={self.data_address:#x}+{self.data_len}>"


__all__ = ["Buffer", "BufferInventory"]
