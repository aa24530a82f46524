"""Sync events: :class:`SyncEvent` (``doca_sync_event``) and :class:`RemoteSyncEvent` (a peer's).

A SyncEvent is a 64-bit value that this process reads, sets, adds to and waits
upon, and that a peer can read, set and add to over RDMA once it is exported::

    with pydoca.SyncEvent(dev, remote_net=True) as ev:     # publisher: a remote peer
        blob = ev.export_to_remote_net()                  # give blob (and an Rdma connection) to the peer
        ev.wait_gt(0, timeout=10)                         # until the peer's notify_set / notify_add lands

    # the peer:
    rev = pydoca.RemoteSyncEvent.from_export(dev, blob)
    rdma.sync_event_notify_add(conn, rev, result_buf, add=1).result()

The peer's Rdma context needs a connection to an Rdma context of this process
whose permissions grant what the peer does: RDMA_READ (get), RDMA_WRITE
(notify_set), RDMA_ATOMIC (notify_add).

Waits have a timeout (seconds, ``None``: forever) and poll the value, as the
value may change without any call into this process (a peer's RDMA write):
a few tight looks, then sleeps growing from 20 us to 2 ms. ``await
ev.await_gt(...)`` (``await_eq``, ``await_neq``) does the same on an asyncio
loop without blocking it. DOCA's own waits (``doca_sync_event_wait_*``) have
no timeout; pydoca does not use them.

The event is a child of its Device (closed before it). Closing it stops it:
from then on a peer's operations on it are refused (NOT_PERMITTED, and the
connection breaks, as for a stopped MemoryMap).
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Dict, Optional

from pydoca._log import get_logger

from ._native import ffi, lib
from .device import Device
from .errors import BadStateError, check
from .resource import Resource

log = get_logger()

#: The mask that compares the whole value.
MASK_ALL = (1 << 64) - 1
_SPINS = 64
_SLEEP_MIN = 20e-6
_SLEEP_MAX = 2e-3


def _u64(name: str, value: int) -> int:
    if not 0 <= value <= MASK_ALL:
        raise ValueError(f"{name} must fit in 64 bits (0 .. 2**64-1), got {value}")
    return value


def _destroy_event(handle: Any, state: Dict[str, bool]) -> None:
    if state["started"]:
        check(lib.doca_sync_event_stop(handle), "doca_sync_event_stop")
        state["started"] = False
    check(lib.doca_sync_event_destroy(handle), "doca_sync_event_destroy")


_CMP: Dict[str, Callable[[int, int], bool]] = {
    "gt": lambda v, ref: v > ref,
    "eq": lambda v, ref: v == ref,
    "neq": lambda v, ref: v != ref,
}
_SYMBOL = {"gt": ">", "eq": "==", "neq": "!="}


class SyncEvent(Resource):
    """A started DOCA sync event on ``dev`` (CPU publisher and subscriber).

    ``remote_net=True`` also declares a remote peer as publisher, which
    :meth:`export_to_remote_net` needs. ``value`` is the initial value."""

    def __init__(self, dev: Device, *, remote_net: bool = False, value: int = 0) -> None:
        _u64("value", value)
        dev_handle = dev.handle
        super().__init__(dev)
        self.dev = dev
        self.remote_net = remote_net
        out = ffi.new("struct doca_sync_event **")
        check(lib.doca_sync_event_create(out), "doca_sync_event_create")
        handle = self._handle = out[0]
        state = {"started": False}
        self._arm(lambda: _destroy_event(handle, state))
        try:
            check(lib.doca_sync_event_add_publisher_location_cpu(handle, dev_handle),
                  "doca_sync_event_add_publisher_location_cpu")
            check(lib.doca_sync_event_add_subscriber_location_cpu(handle, dev_handle),
                  "doca_sync_event_add_subscriber_location_cpu")
            if remote_net:
                check(lib.doca_sync_event_add_publisher_location_remote_net(handle),
                      "doca_sync_event_add_publisher_location_remote_net")
            check(lib.doca_sync_event_start(handle), "doca_sync_event_start")
            state["started"] = True
            if value:
                self.set(value)
        except BaseException:
            try:
                self.close()
            except Exception as exc:  # noqa: BLE001 - keep the first error
                log.error("cleanup after a failed sync event setup failed", error=str(exc))
            raise
        self._export: Optional[bytes] = None

    @property
    def handle(self) -> Any:
        """The ``struct doca_sync_event *`` cdata."""
        self._check_open()
        return self._handle

    # -- the value -----------------------------------------------------------
    def get(self) -> int:
        """The current value."""
        out = ffi.new("uint64_t *")
        check(lib.doca_sync_event_get(self.handle, out), "doca_sync_event_get")
        return int(out[0])

    @property
    def value(self) -> int:
        return self.get()

    def set(self, value: int) -> None:
        """Set the value (``doca_sync_event_update_set``)."""
        check(lib.doca_sync_event_update_set(self.handle, _u64("value", value)), "doca_sync_event_update_set")

    def add(self, value: int) -> int:
        """Add ``value`` atomically (wrapping at 2**64); returns the value before."""
        out = ffi.new("uint64_t *")
        check(lib.doca_sync_event_update_add(self.handle, _u64("value", value), out), "doca_sync_event_update_add")
        return int(out[0])

    # -- waits ---------------------------------------------------------------
    def _met(self, op: str, ref: int, mask: int) -> Optional[int]:
        v = self.get()
        return v if _CMP[op](v & mask, ref) else None

    def _wait(self, op: str, ref: int, mask: int, timeout: Optional[float]) -> int:
        _u64("value", ref)
        _u64("mask", mask)
        deadline = None if timeout is None else time.monotonic() + timeout
        pause, spins = _SLEEP_MIN, 0
        while True:
            got = self._met(op, ref, mask)
            if got is not None:
                return got
            spins += 1
            if spins < _SPINS:
                continue
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout:g}s waiting for sync event value & {mask:#x} "
                                   f"{_SYMBOL[op]} {ref} (value {self.get()})")
            time.sleep(pause)
            pause = min(pause * 2, _SLEEP_MAX)

    def wait_gt(self, value: int, *, mask: int = MASK_ALL, timeout: Optional[float] = 10.0) -> int:
        """Wait until ``(value_of_event & mask) > value``; returns the event's value then.
        ``TimeoutError`` after ``timeout`` seconds."""
        return self._wait("gt", value, mask, timeout)

    def wait_eq(self, value: int, *, mask: int = MASK_ALL, timeout: Optional[float] = 10.0) -> int:
        """Wait until ``(value_of_event & mask) == value``; returns the event's value then."""
        return self._wait("eq", value, mask, timeout)

    def wait_neq(self, value: int, *, mask: int = MASK_ALL, timeout: Optional[float] = 10.0) -> int:
        """Wait until ``(value_of_event & mask) != value``; returns the event's value then."""
        return self._wait("neq", value, mask, timeout)

    async def _await(self, op: str, ref: int, mask: int, timeout: Optional[float]) -> int:
        _u64("value", ref)
        _u64("mask", mask)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        pause = _SLEEP_MIN
        while True:
            got = self._met(op, ref, mask)
            if got is not None:
                return got
            if deadline is not None and loop.time() >= deadline:
                raise TimeoutError(f"timed out after {timeout:g}s waiting for sync event value & {mask:#x} "
                                   f"{_SYMBOL[op]} {ref} (value {self.get()})")
            await asyncio.sleep(pause)
            pause = min(pause * 2, _SLEEP_MAX)

    async def await_gt(self, value: int, *, mask: int = MASK_ALL, timeout: Optional[float] = 10.0) -> int:
        """Awaitable :meth:`wait_gt` (the loop keeps running meanwhile)."""
        return await self._await("gt", value, mask, timeout)

    async def await_eq(self, value: int, *, mask: int = MASK_ALL, timeout: Optional[float] = 10.0) -> int:
        """Awaitable :meth:`wait_eq`."""
        return await self._await("eq", value, mask, timeout)

    async def await_neq(self, value: int, *, mask: int = MASK_ALL, timeout: Optional[float] = 10.0) -> int:
        """Awaitable :meth:`wait_neq`."""
        return await self._await("neq", value, mask, timeout)

    wait_gt_async = await_gt
    wait_eq_async = await_eq
    wait_neq_async = await_neq

    # -- remote net ------------------------------------------------------------
    def export_to_remote_net(self) -> bytes:
        """Bytes for a peer's :meth:`RemoteSyncEvent.from_export` (they hold an access key: pass them
        over a trusted channel). Needs ``remote_net=True``."""
        self._check_open()
        if self._export is None:
            data = ffi.new("const uint8_t **")
            size = ffi.new("size_t *")
            rc = lib.doca_sync_event_export_to_remote_net(self._handle, data, size)
            if rc == BadStateError.code and not self.remote_net:
                check(rc, "doca_sync_event_export_to_remote_net (create the SyncEvent with remote_net=True: "
                          "a remote peer must be declared as its publisher)")
            check(rc, "doca_sync_event_export_to_remote_net")
            self._export = bytes(ffi.buffer(data[0], size[0]))
        return self._export

    def __repr__(self) -> str:
        if self._closed:
            return "<SyncEvent closed>"
        return f"<SyncEvent value={self.get()}{' remote_net' if self.remote_net else ''}>"


class RemoteSyncEvent(Resource):
    """A peer's sync event (``doca_sync_event_remote_net``), target of the Rdma sync-event tasks."""

    def __init__(self) -> None:
        raise TypeError("RemoteSyncEvents come from RemoteSyncEvent.from_export(dev, blob)")

    @classmethod
    def from_export(cls, dev: Device, blob: bytes) -> "RemoteSyncEvent":
        """From the bytes a peer's :meth:`SyncEvent.export_to_remote_net` returned."""
        data = bytes(blob)
        if not data:
            raise ValueError("the sync event export blob is empty")
        dev_handle = dev.handle
        out = ffi.new("struct doca_sync_event_remote_net **")
        check(lib.doca_sync_event_remote_net_create_from_export(dev_handle, data, len(data), out),
              f"doca_sync_event_remote_net_create_from_export (the {len(data)}-byte blob was refused: it must be "
              "the bytes the peer's SyncEvent.export_to_remote_net() returned, unmodified, from the same DOCA "
              "backend)")
        ev = cls.__new__(cls)
        Resource.__init__(ev, dev)
        ev.dev = dev
        handle = ev._handle = out[0]
        ev._arm(lambda: check(lib.doca_sync_event_remote_net_destroy(handle), "doca_sync_event_remote_net_destroy"))
        return ev

    dev: Device
    _handle: Any

    @property
    def handle(self) -> Any:
        """The ``struct doca_sync_event_remote_net *`` cdata."""
        self._check_open()
        return self._handle


__all__ = ["MASK_ALL", "RemoteSyncEvent", "SyncEvent"]
