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
    from ._native import BackendError, BackendInfo, backend
    from .buffer import Buffer, BufferInventory
    from .ctx import Context, CtxState, Task, TaskStatus
    from .device import Device, DeviceInfo, devices
    from .errors import DocaError
    from .memory import Access, MemoryMap
    from .pe import ProgressEngine, ProgressMode
    from .rdma import Connection, ConnectionState, Opcode, Rdma, Received

__version__ = "0.1.0"

_WHERE = {
    "BackendError": "._native", "BackendInfo": "._native", "backend": "._native",
    "Buffer": ".buffer", "BufferInventory": ".buffer",
    "Context": ".ctx", "CtxState": ".ctx", "Task": ".ctx", "TaskStatus": ".ctx",
    "Device": ".device", "DeviceInfo": ".device", "devices": ".device",
    "DocaError": ".errors",
    "Access": ".memory", "MemoryMap": ".memory",
    "ProgressEngine": ".pe", "ProgressMode": ".pe",
    "Connection": ".rdma", "ConnectionState": ".rdma", "Opcode": ".rdma", "Rdma": ".rdma", "Received": ".rdma",
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
