"""The RDMA remote-net sync-event tasks: get, notify_set and notify_add on a peer's sync event.

The peer exports a :class:`pydoca.SyncEvent` (``export_to_remote_net()``); this
side builds a :class:`pydoca.RemoteSyncEvent` from the bytes and, over an
established connection to the peer's Rdma context:

* ``rdma.sync_event_get(conn, event, local)`` reads the 64-bit value into
  ``local`` (appended after its data); the task's value is that number;
* ``rdma.sync_event_notify_set(conn, event, src)`` writes ``src``'s 8 data
  bytes (host order) as the new value;
* ``rdma.sync_event_notify_add(conn, event, result, add=n)`` adds ``n``
  atomically; the value before the add lands in ``result`` and is the task's
  value.

As for any remote access, the peer's Rdma context must grant RDMA_READ (get),
RDMA_WRITE (notify_set) or RDMA_ATOMIC (notify_add). The task types are
configured on every Rdma whose device supports them; elsewhere (or on a DOCA
runtime without them) the methods raise NotSupportedError.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydoca._log import get_logger

from .._native import ffi, has, lib
from ..ctx import Task
from ..errors import NotSupportedError, check
from .tasks import AtomicTask

if TYPE_CHECKING:
    from ..buffer import Buffer
    from ..device import Device
    from ..sync_event import RemoteSyncEvent
    from .connection import Connection

log = get_logger()

_KINDS = ("get", "notify_set", "notify_add")


def configure_sync_event_tasks(rdma: Any, dev: "Device", max_tasks: int) -> bool:
    """Configure the three task types on the (IDLE) ``doca_rdma``; False where unsupported.

    A device or runtime without them costs nothing: the Rdma works as before
    and the sync-event methods raise NotSupportedError."""
    devinfo = lib.doca_dev_as_devinfo(dev.handle)
    for kind in _KINDS:
        cap = f"doca_rdma_cap_task_remote_net_sync_event_{kind}_is_supported"
        if not has(cap) or not has(f"doca_rdma_task_remote_net_sync_event_{kind}_set_conf"):
            return False
        if getattr(lib, cap)(devinfo) != 0:
            log.debug("rdma remote-net sync-event tasks not supported by the device", task=kind)
            return False
    for kind in _KINDS:
        rc = getattr(lib, f"pydoca_rdma_task_remote_net_sync_event_{kind}_set_conf")(rdma, max_tasks)
        if rc != 0:
            log.debug("rdma remote-net sync-event tasks not configured", task=kind, rc=int(rc))
            return False
    return True


class SyncEventGetTask(Task[int]):
    """sync_event_get: value is the remote event's 64-bit value (read into the local buffer)."""

    def __init__(self, *args: Any, local: "Buffer", **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._local = local

    def _detail(self) -> str:
        try:
            room = int(self._local.length - (self._local.data_address - self._local.address) - self._local.data_len)
        except Exception:  # noqa: BLE001 - a closed buffer: no detail
            return ""
        return f" (local buffer room {room} bytes; the 8-byte value needs 8)" if room < 8 else ""

    def _collect(self, c_task: Any) -> int:
        return int.from_bytes(bytes(self._local.memoryview()[-8:]), "little")


class SyncEventSetTask(Task[None]):
    """sync_event_notify_set: completes once the peer's value is set."""

    def __init__(self, *args: Any, src: "Buffer", **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._src = src

    def _detail(self) -> str:
        try:
            n = int(self._src.data_len)
        except Exception:  # noqa: BLE001
            return ""
        return f" (source data {n} bytes; the value is 8)" if n > 8 else ""


class SyncEventTasksMixin:
    """The remote-net sync-event task methods of :class:`pydoca.Rdma`."""

    _rdma: Any
    _sync_event_tasks: bool

    def _need_sync_event_tasks(self) -> None:
        if not self._sync_event_tasks:
            raise NotSupportedError("remote-net sync-event tasks are not supported by this device or DOCA runtime "
                                    "(doca_rdma_cap_task_remote_net_sync_event_*_is_supported)",
                                    code=NotSupportedError.code)

    def sync_event_get(self, conn: "Connection", event: "RemoteSyncEvent", local: "Buffer") -> SyncEventGetTask:
        """Read the peer's sync event value into ``local`` (8 bytes appended after its data)."""
        self._need_sync_event_tasks()
        task = SyncEventGetTask(self, keep=(event, local), local=local)
        out = ffi.new("struct doca_rdma_task_remote_net_sync_event_get **")
        check(lib.doca_rdma_task_remote_net_sync_event_get_allocate_init(
            self._rdma, conn.handle, event.handle, local.handle, task._user_data(), out),
            "doca_rdma_task_remote_net_sync_event_get_allocate_init")
        task._submit(lib.doca_rdma_task_remote_net_sync_event_get_as_task(out[0]))
        return task

    def sync_event_notify_set(self, conn: "Connection", event: "RemoteSyncEvent", src: "Buffer") -> SyncEventSetTask:
        """Set the peer's sync event to the 8 bytes (host order) of ``src``'s data."""
        self._need_sync_event_tasks()
        task = SyncEventSetTask(self, keep=(event, src), src=src)
        out = ffi.new("struct doca_rdma_task_remote_net_sync_event_notify_set **")
        check(lib.doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(
            self._rdma, conn.handle, event.handle, src.handle, task._user_data(), out),
            "doca_rdma_task_remote_net_sync_event_notify_set_allocate_init")
        task._submit(lib.doca_rdma_task_remote_net_sync_event_notify_set_as_task(out[0]))
        return task

    def sync_event_notify_add(self, conn: "Connection", event: "RemoteSyncEvent", result: "Buffer", *,
                              add: int) -> AtomicTask:
        """Add ``add`` to the peer's sync event atomically; value = the value before (also in ``result``)."""
        self._need_sync_event_tasks()
        if not 0 <= add < 1 << 64:
            raise ValueError(f"add must fit in 64 bits, got {add}")
        task = AtomicTask(self, keep=(event, result), result=result)
        out = ffi.new("struct doca_rdma_task_remote_net_sync_event_notify_add **")
        check(lib.doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(
            self._rdma, conn.handle, event.handle, result.handle, add, task._user_data(), out),
            "doca_rdma_task_remote_net_sync_event_notify_add_allocate_init")
        task._submit(lib.doca_rdma_task_remote_net_sync_event_notify_add_as_task(out[0]))
        return task


__all__ = ["SyncEventGetTask", "SyncEventSetTask", "SyncEventTasksMixin", "configure_sync_event_tasks"]
