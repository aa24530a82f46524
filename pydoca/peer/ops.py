"""The requester's view of endpoints and of one operation in flight."""
from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any, Deque, List, Optional, OrderedDict


@dataclass(frozen=True)
class EndpointInfo:
    """An endpoint as the responder announced it; ``rights`` is empty where this requester has none."""

    id: int
    path: str
    kind: str
    size: int
    rights: str = ""


class Remote:
    """An endpoint and the offset of this requester's slot in its private region (-1: no rights); a write
    endpoint may offer ``slots`` of them, ``stride`` bytes apart (staged writes to it overlap)."""

    def __init__(self, info: EndpointInfo, slot: int, slots: int = 1) -> None:
        self.info, self.slot, self.slots = info, slot, slots
        self.stride = (info.size + 63) // 64 * 64


class Op:
    """One operation: queued, then sent, then answered (and its transfers done)."""

    def __init__(self, kind: str, ep: Remote, offset: int, length: int, wait: bool, *, needs_slot: bool,
                 source: Optional[memoryview] = None) -> None:
        self.seq = 0
        self.kind, self.ep, self.offset, self.length, self.wait = kind, ep, offset, length, wait
        self.needs_slot = needs_slot          # uses the endpoint's slot: holds its credit until finished
        self.slot_index = 0                   # which of the endpoint's slots (write endpoints may have several)
        self.source = source                  # write/call payload
        self.into: Any = None                 # read: caller's buffer
        self.value: Any = None
        self.error: Optional[BaseException] = None
        self.answered = False
        self.abandoned = False
        self.inflight = 0
        self.stage_slot: Optional[int] = None
        self.own: List[Any] = []
        self.posted = False                   # write answered on delivery; its handler's outcome comes later

    @property
    def finished(self) -> bool:
        return self.answered and self.inflight == 0


class Posted:
    """Posted writes in flight: at most ``limit`` delivered but not yet retired by the responder
    (its CREDIT frames, or a STATUS with FLAG_POSTED for a failed one); failures wait here for the
    caller. ``paths`` only names the endpoint in messages (bounded: the oldest are forgotten)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.inflight = 0
        self.paths: OrderedDict[int, str] = collections.OrderedDict()   # seq -> endpoint path
        self.failures: Deque[BaseException] = collections.deque()

    @property
    def full(self) -> bool:
        return self.inflight >= self.limit

    def sent(self, seq: int, path: str) -> None:
        self.inflight += 1
        self.paths[seq] = path
        while len(self.paths) > 4 * self.limit:             # bounded: an answer can only be that recent
            self.paths.popitem(last=False)

    def credit(self, count: int) -> None:
        self.inflight = max(0, self.inflight - count)

    def retired_by_failure(self, seq: int) -> Optional[str]:
        """A STATUS with FLAG_POSTED for ``seq``: its credit comes back with it; the path if still known."""
        self.inflight = max(0, self.inflight - 1)
        return self.paths.pop(seq, None)

    def take_failure(self) -> Optional[BaseException]:
        return self.failures.popleft() if self.failures else None


__all__ = ["EndpointInfo", "Op", "Posted", "Remote"]
