"""pydoca: Pythonic, RAII-safe bindings for NVIDIA DOCA Common and DOCA RDMA.

The backend (real DOCA or softdoca, the software DOCA over TCP) is chosen once,
at import, by ``PYDOCA_BACKEND=auto|doca|soft``; ``pydoca.backend`` says which
and why.
"""
from __future__ import annotations

from ._native import BackendError, BackendInfo, backend
from .buffer import Buffer, BufferInventory
from .ctx import Context, CtxState, Task, TaskStatus
from .device import Device, DeviceInfo, devices
from .errors import DocaError
from .memory import Access, MemoryMap
from .pe import ProgressEngine, ProgressMode
from .rdma import Connection, ConnectionState, Opcode, Rdma, Received

__version__ = "0.1.0"

__all__ = [
    "Access", "BackendError", "BackendInfo", "Buffer", "BufferInventory", "Connection", "ConnectionState",
    "Context", "CtxState", "Device", "DeviceInfo", "DocaError", "MemoryMap", "Opcode", "ProgressEngine",
    "ProgressMode", "Rdma", "Received", "Task", "TaskStatus", "backend", "devices", "__version__",
]
