"""pydoca: Pythonic, RAII-safe bindings for NVIDIA DOCA Common and DOCA RDMA.

The backend (real DOCA or softdoca, the software DOCA over TCP) is chosen once,
on first use, by ``PYDOCA_BACKEND=auto|doca|soft``; ``pydoca.backend`` says
which and why. Names are imported lazily so that ``pydoca doctor`` can still
explain a backend that fails to load.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._native import BackendError as BackendError, BackendInfo as BackendInfo, backend as backend
    from .buffer import Buffer as Buffer, BufferInventory as BufferInventory
    from .buf_pool import BufferPool as BufferPool, PoolBuffer as PoolBuffer
    from .ctx import Context as Context, CtxState as CtxState, Task as Task, TaskStatus as TaskStatus
    from .device import Device as Device, DeviceInfo as DeviceInfo, devices as devices
    from .errors import DocaError as DocaError
    from .memory import Access as Access, MemoryMap as MemoryMap, shared_memory as shared_memory
    from .pe import ProgressEngine as ProgressEngine, ProgressMode as ProgressMode
    from .rdma import Connection as Connection, ConnectionState as ConnectionState, Opcode as Opcode, Rdma as Rdma, Received as Received
    from .rdma import BatchError as BatchError, TaskBatch as TaskBatch, TaskRing as TaskRing
    from .sync_event import RemoteSyncEvent as RemoteSyncEvent, SyncEvent as SyncEvent

__version__ = "0.1.0"

_WHERE = {
    "BackendError": "._native", "BackendInfo": "._native", "backend": "._native",
    "Buffer": ".buffer", "BufferInventory": ".buffer", "BufferPool": ".buf_pool", "PoolBuffer": ".buf_pool",
    "Context": ".ctx", "CtxState": ".ctx", "Task": ".ctx", "TaskStatus": ".ctx",
    "Device": ".device", "DeviceInfo": ".device", "devices": ".device",
    "DocaError": ".errors",
    "Access": ".memory", "MemoryMap": ".memory", "shared_memory": ".memory",
    "ProgressEngine": ".pe", "ProgressMode": ".pe",
    "Connection": ".rdma", "ConnectionState": ".rdma", "Opcode": ".rdma", "Rdma": ".rdma", "Received": ".rdma",
    "BatchError": ".rdma", "TaskBatch": ".rdma", "TaskRing": ".rdma",
    "SyncEvent": ".sync_event", "RemoteSyncEvent": ".sync_event",
}

__all__ = sorted(_WHERE) + ["__version__"]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'pydoca' has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
