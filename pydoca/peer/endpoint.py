"""Endpoints of a responder and the requests queued on them.

An endpoint has a path, a kind (write, read, call), a buffer size, an
optional handler and two limits: ``concurrency`` (handlers of this endpoint
running at once, default 1, so a handler needs no locking of its own) and
``queue`` (requests waiting beyond that; more get BUSY). ``mem`` is the
endpoint's shared buffer for handler-less endpoints: a write without a
handler lands there, a read without a handler serves it. Requesters never
touch it directly: their data goes through their own private slots.
"""
from __future__ import annotations

import collections
import inspect
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Deque, Optional, Tuple

import numpy as np

from .spec import DEFAULT_QUEUE, MAX_SLOTS, Kind, check_path

if TYPE_CHECKING:
    from .responder import _Peer
    from .workers import Job

Handler = Callable[..., Any]


@dataclass(frozen=True)
class RequesterInfo:
    """Who is asking: the name the requester gave, its connection number, address and key id."""

    id: int
    name: str
    address: Optional[str] = None
    key_id: str = ""

    def __str__(self) -> str:
        return f"{self.name}#{self.id}"


def _arity(fn: Handler) -> int:
    """Positional parameters ``fn`` accepts (99 with ``*args``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 99
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 99
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


class Endpoint:
    """One endpoint: definition, handler, limits, queue and counters."""

    def __init__(self, ep_id: int, path: str, kind: Kind, size: int, handler: Optional[Handler], *,
                 queue: Optional[int] = DEFAULT_QUEUE, concurrency: int = 1, timeout: Optional[float] = None,
                 description: str = "", inline: bool = False, copy: bool = False, slots: int = 1) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency of {path} must be >= 1")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout of {path} must be > 0 seconds")
        self.id, self.path, self.kind, self.size = ep_id, check_path(path), Kind(kind), size
        self.handler, self.queue, self.description = handler, queue, description
        self.concurrency, self.timeout = concurrency, timeout
        self.inline = inline            # run on the serving thread: no hand-off, for handlers that never block
        #: a write handler gets a private copy of the data instead of a live view of the requester's slot
        #: (which the requester may change while the handler runs): for handlers that validate before use
        self.copy = copy
        if copy and self.kind is not Kind.WRITE:
            raise ValueError(f"{path}: copy=True is for write endpoints (a {self.kind.value} endpoint's handler "
                             "gets no view of the requester's slot)")
        #: write endpoints: slots per requester, so that that many staged writes of one requester overlap
        #: (each a region of the endpoint's size in every requester's private region)
        self.slots = slots
        if not isinstance(slots, int) or isinstance(slots, bool) or not 1 <= slots <= MAX_SLOTS:
            raise ValueError(f"{path}: slots must be an integer 1..{MAX_SLOTS}, got {slots!r}")
        if slots > 1 and self.kind is not Kind.WRITE:
            raise ValueError(f"{path}: slots > 1 is for write endpoints (a {self.kind.value} endpoint answers "
                             "through its one slot)")
        if inline and handler is not None and inspect.iscoroutinefunction(handler):
            raise ValueError(f"{path}: an async def handler cannot be inline")
        self.wants_requester = handler is not None and _arity(handler) > (1 if self.kind is Kind.CALL else 2)
        self.is_async = handler is not None and inspect.iscoroutinefunction(handler)
        #: consecutive runs of its handler that were short (Responder: the serving thread then runs it itself)
        self.short_runs = 0
        self.mem = np.zeros(size, dtype=np.uint8)
        self.running = 0                # concurrency permits held: handlers running, stuck ones included
        self.stuck = 0                  # handlers past their timeout that still hold a thread
        self.waiting: Deque["Request"] = collections.deque()
        #: the thread whose Responder loop starts waiting requests (that thread does not re-enter it)
        self.draining: Optional[threading.Thread] = None
        self.ops = 0
        self.errors = 0

    def args(self, first: Any, length: int, info: RequesterInfo) -> Tuple[Any, ...]:
        """The handler's arguments: (payload[, requester]) for calls, (view, length[, requester]) otherwise."""
        base: Tuple[Any, ...] = (first,) if self.kind is Kind.CALL else (first, length)
        return base + (info,) if self.wants_requester else base

    def __repr__(self) -> str:
        return f"<Endpoint {self.path} {self.kind.value} {self.size}B>"


@dataclass(eq=False)
class Request:
    """One admitted operation: where its data is and what answers it."""

    peer: "_Peer"
    seq: int
    ep: Endpoint
    offset: int
    length: int
    data: Any                       # write: view of the data; read: view to fill; call: payload bytes
    in_slot: bool                   # read: data is the requester's slot (answer in buffer)
    job: Optional["Job"] = None     # dropped once answered (no request <-> job cycle outlives it)
    posted: bool = False            # a posted write: answered only if it fails; success returns a credit
    deadline: Optional[float] = None    # while it waits for a permit: answered HANDLER_ERROR past this
    stuck: bool = False             # answered after its timeout, its handler still runs and holds the permit
    answered: bool = False          # its answer went out: its requester's window place is free


__all__ = ["Endpoint", "Handler", "Request", "RequesterInfo"]
