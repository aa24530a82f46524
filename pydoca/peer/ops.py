"""The requester's view of endpoints and of one operation in flight."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional


@dataclass(frozen=True)
class EndpointInfo:
    """An endpoint as the responder announced it; ``rights`` is empty where this requester has none."""

    id: int
    path: str
    kind: str
    size: int
    rights: str = ""


class Remote:
    """An endpoint and the offset of this requester's slot in its private region (-1: no rights)."""

    def __init__(self, info: EndpointInfo, slot: int) -> None:
        self.info, self.slot = info, slot


class Op:
    """One operation: queued, then sent, then answered (and its transfers done)."""

    def __init__(self, kind: str, ep: Remote, offset: int, length: int, wait: bool, *, needs_slot: bool,
                 source: Optional[memoryview] = None) -> None:
        self.seq = 0
        self.kind, self.ep, self.offset, self.length, self.wait = kind, ep, offset, length, wait
        self.needs_slot = needs_slot          # uses the endpoint's slot: holds its credit until finished
        self.source = source                  # write/call payload
        self.into: Any = None                 # read: caller's buffer
        self.value: Any = None
        self.error: Optional[BaseException] = None
        self.answered = False
        self.abandoned = False
        self.inflight = 0
        self.stage_slot: Optional[int] = None
        self.own: List[Any] = []

    @property
    def finished(self) -> bool:
        return self.answered and self.inflight == 0


__all__ = ["EndpointInfo", "Op", "Remote"]
