"""Memory registration: :class:`Access` flags and :class:`MemoryMap` (``doca_mmap``).

A local MemoryMap registers the memory of any C-contiguous buffer-protocol
object (bytes, bytearray, numpy array, mmap.mmap, memoryview) without copying:
the object stays pinned (referenced and locked against resizing) while it is
registered. A remote MemoryMap is built from a peer's export descriptor and
only describes the peer's range.
"""
from __future__ import annotations

import enum
import fcntl
import mmap
import os
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from pydoca._log import get_logger

from ._native import ffi, lib
from .errors import check
from .resource import Resource

if TYPE_CHECKING:
    from .device import Device

log = get_logger()


class Access(enum.IntFlag):
    """Permissions of a memory map (``enum doca_access_flag``)."""

    LOCAL_READ_ONLY = int(lib.DOCA_ACCESS_FLAG_LOCAL_READ_ONLY)
    LOCAL_READ_WRITE = int(lib.DOCA_ACCESS_FLAG_LOCAL_READ_WRITE)
    RDMA_READ = int(lib.DOCA_ACCESS_FLAG_RDMA_READ)
    RDMA_WRITE = int(lib.DOCA_ACCESS_FLAG_RDMA_WRITE)
    RDMA_ATOMIC = int(lib.DOCA_ACCESS_FLAG_RDMA_ATOMIC)
    PCI_READ_ONLY = int(lib.DOCA_ACCESS_FLAG_PCI_READ_ONLY)
    PCI_READ_WRITE = int(lib.DOCA_ACCESS_FLAG_PCI_READ_WRITE)
    PCI_RELAXED_ORDERING = int(lib.DOCA_ACCESS_FLAG_PCI_RELAXED_ORDERING)


#: Flags under which the registered memory may be written (locally or by a peer).
WRITE_ACCESS = Access.LOCAL_READ_WRITE | Access.RDMA_WRITE | Access.RDMA_ATOMIC | Access.PCI_READ_WRITE


def _pin(obj: Any, writable: bool) -> Tuple[Any, bool]:
    """``ffi.from_buffer`` of ``obj`` (and whether ``obj`` is read-only) after checks."""
    try:
        view = memoryview(obj)
    except TypeError as exc:
        raise TypeError(f"{type(obj).__name__} does not support the buffer protocol") from exc
    with view:
        if not view.c_contiguous:
            raise ValueError("MemoryMap needs a C-contiguous buffer")
        if view.nbytes == 0:
            raise ValueError("MemoryMap needs a non-empty buffer")
        if writable and view.readonly:
            raise ValueError(f"{type(obj).__name__} is read-only: register it with "
                             "access=Access.LOCAL_READ_ONLY (or RDMA_READ), not a write access")
        readonly = view.readonly
    return ffi.from_buffer("char[]", obj, require_writable=writable), readonly


def _destroy(handle: Any, state: Dict[str, bool], pinned: Any) -> None:
    """Stop (if started) and destroy; ``pinned`` keeps the memory alive until then."""
    if state["started"]:
        check(lib.doca_mmap_stop(handle), "doca_mmap_stop")
        state["started"] = False
    check(lib.doca_mmap_destroy(handle), "doca_mmap_destroy")
    del pinned


_PROVIDER_TAIL = 82          # softdoca's descriptor length; a provider's key blob ("SDPB") may follow


def _provider_note(data: bytes) -> str:
    """Why softdoca refused a descriptor of another provider (docs/providers.md), "" otherwise."""
    import ctypes

    from ._native import soft_fn
    tail = data[_PROVIDER_TAIL:]
    if len(tail) < 24 or tail[:4] != b"SDPB":
        return ""
    theirs = tail[8:24].rstrip(b"\0").decode("ascii", "replace")
    name = soft_fn("softdoca_provider_name", ctypes.c_char_p)
    ours = (name() or b"native").decode() if name else "native"
    if theirs == ours:
        return ""
    return (f"; it carries a key of softdoca provider {theirs!r}, this process uses provider {ours!r}: set "
            "SOFTDOCA_PROVIDER alike on both sides")


class MemoryMap(Resource):
    """Registered memory (``doca_mmap``); a child of its :class:`~pydoca.device.Device`."""

    def __init__(self, dev: "Device", buffer: Any, *, access: Access = Access.LOCAL_READ_WRITE,
                 offset: int = 0, length: Optional[int] = None) -> None:
        """Register ``buffer[offset:offset+length]`` (zero-copy) with ``access`` on ``dev``."""
        access = Access(access)
        pin, readonly = _pin(buffer, writable=bool(access & WRITE_ACCESS))
        total = len(pin)
        if length is None:
            length = total - offset
        if offset < 0 or length <= 0 or offset + length > total:
            raise ValueError(f"range offset={offset} length={length} outside the {total}-byte buffer")
        dev_handle = dev.handle
        super().__init__(dev)
        self._tasks: Dict[int, Any] = {}   # tasks in flight that use this memory (kept by pydoca.ctx.Task)
        self._dev = dev
        self._obj: Any = buffer
        self._pin: Any = pin
        self._access: Optional[Access] = access
        self._remote = False
        self._readonly = readonly
        self._base = int(ffi.cast("uintptr_t", pin))
        self._address = self._base + offset
        self._length = length
        out = ffi.new("struct doca_mmap **")
        check(lib.doca_mmap_create(out), "doca_mmap_create")
        handle = self._handle = out[0]
        state = {"started": False}
        self._arm(lambda: _destroy(handle, state, pin))
        try:
            check(lib.doca_mmap_set_memrange(handle, ffi.cast("void *", self._address), length),
                  "doca_mmap_set_memrange")
            check(lib.doca_mmap_set_permissions(handle, int(access)), "doca_mmap_set_permissions")
            check(lib.doca_mmap_add_dev(handle, dev_handle), "doca_mmap_add_dev")
            check(lib.doca_mmap_start(handle), "doca_mmap_start")
            state["started"] = True
        except BaseException:
            self._abandon()
            raise
        log.debug("mmap registered", address=hex(self._address), length=length, access=str(access))

    @classmethod
    def from_export(cls, dev: "Device", blob: bytes) -> "MemoryMap":
        """A remote MemoryMap from a peer's :meth:`export_rdma` descriptor."""
        data = bytes(blob)
        dev_handle = dev.handle
        out = ffi.new("struct doca_mmap **")
        user_data = ffi.new("union doca_data *")
        rc = lib.doca_mmap_create_from_export(user_data, ffi.from_buffer(data), len(data), dev_handle, out)
        if rc != 0:
            check(rc, f"doca_mmap_create_from_export (the {len(data)}-byte memory descriptor was refused: it must "
                      "be the bytes the peer's MemoryMap.export_rdma() returned, unmodified, from the same DOCA "
                      f"backend{_provider_note(data)})")
        obj = cls.__new__(cls)
        Resource.__init__(obj, dev)
        obj._tasks = {}
        handle = obj._handle = out[0]
        obj._dev, obj._obj, obj._pin, obj._access = dev, None, None, None
        obj._remote, obj._readonly, obj._base = True, True, 0
        obj._arm(lambda: _destroy(handle, {"started": False}, None))
        try:
            addr = ffi.new("void **")
            size = ffi.new("size_t *")
            check(lib.doca_mmap_get_memrange(handle, addr, size), "doca_mmap_get_memrange")
        except BaseException:
            obj._abandon()
            raise
        obj._address = int(ffi.cast("uintptr_t", addr[0]))
        obj._length = int(size[0])
        return obj

    def _abandon(self) -> None:
        """Close after a failed construction step, keeping the original error."""
        try:
            self.close()
        except Exception as exc:  # noqa: BLE001 - the construction error matters more
            log.error("cleanup after failed MemoryMap setup failed", error=str(exc))

    #: Seconds ``close()`` progresses the engines of tasks still using this
    #: memory before it stops their contexts to flush them (see ``close``).
    CLOSE_DRAIN_BOUND = 1.0

    @property
    def _inflight(self) -> int:
        return len(self._tasks)

    def close(self, timeout: Optional[float] = None) -> None:
        """Close buffers on this map, stop and destroy it, then unpin the memory.

        Tasks still in flight on this memory are finished first, so the engine
        never touches memory that was handed back: their progress engines are
        progressed until they complete, for at most ``timeout`` seconds
        (default :attr:`CLOSE_DRAIN_BOUND`, 1 s); tasks still pending then
        (a posted receive nobody sends to) are flushed by stopping the
        contexts that own them (``Context.stop``: every task of those
        contexts fails with an error, their connections end). InUseError only
        if they cannot be stopped either."""
        if not self.closed and self._tasks:
            self._drain(self.CLOSE_DRAIN_BOUND if timeout is None else timeout)
        super().close()
        self._pin = None
        self._obj = None

    def _settle(self) -> None:
        """Feed task batches and unpin those that finished since anyone looked (they count completions in
        C; a batch larger than its task pool goes on as tasks complete, or fails its rest once its
        context stopped)."""
        for t in list(self._tasks.values()):
            settle = getattr(t, "_settle", None) or getattr(t, "_finish_if_done", None)
            if settle is not None:
                settle()

    def _drain(self, timeout: float) -> None:
        import time
        deadline = time.monotonic() + timeout
        self._settle()
        while self._tasks and time.monotonic() < deadline:
            engines = {id(t.ctx.pe): t.ctx.pe for t in list(self._tasks.values()) if not t.ctx.pe.closed}
            if not engines:
                break
            for pe in engines.values():
                if len(engines) == 1:
                    pe.wait(max(0.0, min(0.05, deadline - time.monotonic())))
                else:
                    pe.progress()
            self._settle()
        if not self._tasks:
            return
        contexts = {id(t.ctx): t.ctx for t in list(self._tasks.values())}
        log.warning("closing a MemoryMap with tasks in flight: stopping their contexts to flush them",
                    tasks=len(self._tasks), contexts=len(contexts), waited_s=timeout)
        for ctx in contexts.values():
            if not ctx.closed:
                ctx.stop()
        self._settle()
        if self._tasks:
            from .errors import InUseError
            raise InUseError(f"{len(self._tasks)} task(s) in flight still use this memory after their "
                             "contexts were stopped; close the contexts first", code=InUseError.code)

    def export_rdma(self) -> bytes:
        """A copy of the descriptor a peer passes to :meth:`from_export`."""
        desc = ffi.new("const void **")
        size = ffi.new("size_t *")
        check(lib.doca_mmap_export_rdma(self.handle, self._dev.handle, desc, size), "doca_mmap_export_rdma")
        return bytes(ffi.buffer(ffi.cast("char *", desc[0]), size[0]))

    @property
    def handle(self) -> Any:
        """The ``struct doca_mmap *`` cdata (for other pydoca modules)."""
        self._check_open()
        return self._handle

    @property
    def device(self) -> "Device":
        return self._dev

    @property
    def address(self) -> int:
        """Start of the registered range (a peer address for a remote map)."""
        return self._address

    @property
    def length(self) -> int:
        """Length of the registered range in bytes."""
        return self._length

    @property
    def access(self) -> Optional[Access]:
        """The access registered locally; None for a remote map (DOCA does not expose it)."""
        return self._access

    @property
    def remote(self) -> bool:
        """True when this map describes a peer's memory (from :meth:`from_export`)."""
        return self._remote

    @property
    def readonly(self) -> bool:
        """True when the registered object is read-only (e.g. bytes); always True if remote."""
        return self._readonly

    @property
    def view(self) -> memoryview:
        """Zero-copy view of the registered local memory."""
        return self._window(self._address, self._length)

    def _window(self, address: int, length: int) -> memoryview:
        """Zero-copy view of ``[address, address+length)`` inside this local map."""
        self._check_open()
        if self._remote:
            raise ValueError("a remote MemoryMap has no local memory to view")
        if address < self._address or length < 0 or address + length > self._address + self._length:
            raise ValueError(f"range {address:#x}+{length} is outside the registered memory")
        start = address - self._base
        view = memoryview(ffi.buffer(self._pin))[start:start + length]
        return view.toreadonly() if self._readonly else view

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        kind = "remote" if self._remote else "local"
        return f"<MemoryMap {kind} {self._address:#x}+{self._length} {state}>"


def shared_memory(size: int, *, name: str = "pydoca") -> mmap.mmap:
    """``size`` zeroed bytes that other processes of this host may map: a
    memfd sealed against shrinking. Register it like any buffer; with
    softdoca's same-host transport a peer then writes and reads it with
    ``memcpy`` instead of one system call per operation. On DOCA it is
    ordinary memory."""
    if size <= 0:
        raise ValueError(f"shared_memory size must be > 0, got {size}")
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
        return mmap.mmap(fd, size)           # keeps its own duplicate of fd
    finally:
        os.close(fd)


__all__ = ["Access", "MemoryMap", "WRITE_ACCESS", "shared_memory"]
