"""Segments: memory registered once under a name (local), or opened by name (remote).

Anything with the buffer protocol (bytes-likes, numpy arrays, mmap) or
DLPack on the CPU (torch tensors) can be registered, zero-copy: the object is
kept alive while registered. A segment's *generation* changes whenever its
owner registers it anew (or restarts), so a handle to an older registration
is detected and refused, never written.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Tuple

from ..memory import Access, MemoryMap
from .errors import StaleSegment, TransferError

REMOTE_ACCESS = Access.LOCAL_READ_WRITE | Access.RDMA_READ | Access.RDMA_WRITE
READONLY_ACCESS = Access.LOCAL_READ_ONLY | Access.RDMA_READ


def as_memory(obj: Any) -> memoryview:
    """A byte view of ``obj`` (buffer protocol, or DLPack on the CPU); TransferError otherwise."""
    if hasattr(obj, "__dlpack__") and not _has_buffer(obj):
        device = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (1, 0)
        if int(device[0]) != 1:
            raise TransferError(f"{type(obj).__name__} lives on DLPack device {tuple(device)}; only CPU memory "
                                "(device type 1) can be registered here")
        import ctypes

        import numpy as np
        arr = np.from_dlpack(obj)
        # numpy marks DLPack imports read-only (DLPack < 1.0 carries no such flag); the producer's memory
        # (a torch tensor, say) is writable, so view it as such: ``obj`` stays referenced by the segment
        view = memoryview((ctypes.c_uint8 * arr.nbytes).from_address(arr.ctypes.data)) if arr.nbytes else \
            memoryview(b"")
        return view.cast("B")
    try:
        view = memoryview(obj)
    except TypeError:
        raise TransferError(f"cannot register {type(obj).__name__}: it has neither the buffer protocol nor "
                            "DLPack") from None
    if not view.c_contiguous:
        raise TransferError("cannot register non-contiguous memory; pass a contiguous array (np.ascontiguousarray)")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def _has_buffer(obj: Any) -> bool:
    try:
        memoryview(obj)
        return True
    except TypeError:
        return False


class LocalSegment:
    """A registered local segment: ``name``, ``length``, ``generation``; one registration per engine
    device (``mmaps[i]`` on device i, exported to peers that reach it through that device)."""

    def __init__(self, name: str, obj: Any, devs: Sequence[Any], generation: str) -> None:
        self.name, self.generation, self.obj = name, generation, obj
        self.view = as_memory(obj)
        self.length = self.view.nbytes
        self.readonly = self.view.readonly
        access = READONLY_ACCESS if self.readonly else REMOTE_ACCESS
        self.mmaps: List[MemoryMap] = []
        try:
            for dev in devs:
                self.mmaps.append(MemoryMap(dev, self.view, access=access))
        except BaseException:
            self.close()
            raise
        self.blobs = [m.export_rdma() for m in self.mmaps]

    @property
    def mmap(self) -> MemoryMap:
        return self.mmaps[0]

    def descriptor(self, addresses: Sequence[str]) -> Dict[str, Any]:
        """What a peer needs to reach it through each of the owner's devices (the access blobs go only to
        authenticated peers); ``addresses[i]`` is where device i serves."""
        return {"name": self.name, "owner": addresses[0], "length": self.length, "generation": self.generation,
                "readonly": self.readonly,
                "paths": [{"address": a, "mmap": base64.b64encode(b).decode()} for a, b in zip(addresses, self.blobs)]}

    def close(self) -> None:
        for m in self.mmaps:
            m.close()

    def __repr__(self) -> str:
        return f"<LocalSegment {self.name} {self.length}B gen={self.generation} devices={len(self.mmaps)}>"


@dataclass
class RemoteSegment:
    """A peer's segment as opened: owner, length, generation, and its access blob per path (owner device);
    the remote maps are made per (local device, path) as connections need them."""

    name: str
    owner: str
    length: int
    generation: str
    readonly: bool
    paths: List[Tuple[str, bytes]] = field(default_factory=list)
    rmaps: Dict[Tuple[int, int], MemoryMap] = field(default_factory=dict)
    stale: bool = False

    @property
    def ref(self) -> str:
        return f"{self.owner}/{self.name}"

    def rmap(self, devs: Sequence[Any], local: int, path: int) -> MemoryMap:
        """The remote map for a connection from local device ``local`` to the owner's path ``path``."""
        self.check()
        key = (local, path)
        if key not in self.rmaps:
            self.rmaps[key] = MemoryMap.from_export(devs[local], self.paths[path][1])
        return self.rmaps[key]

    def close(self) -> None:
        self.stale = True
        for m in self.rmaps.values():
            m.close()
        self.rmaps.clear()

    def check(self) -> None:
        if self.stale:
            raise StaleSegment(f"segment {self.ref} (generation {self.generation}) is stale: its owner restarted "
                               "or re-registered it; open_segment() it again")

    def __repr__(self) -> str:
        return f"<RemoteSegment {self.ref} {self.length}B gen={self.generation}{' stale' if self.stale else ''}>"


__all__ = ["LocalSegment", "RemoteSegment", "as_memory"]
