"""Transfer requests and the batch handle that tracks them.

A request moves ``length`` bytes between a local segment (or any bytes-like,
staged) at ``local_offset`` and a remote segment at ``remote_offset``. The
engine slices each request (``slice_size``) and spreads the slices over the
peer's connections as RDMA task batches; a request is done when all its
slices are, failed when any failed.
"""
from __future__ import annotations

import enum
import select
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generator, List, Optional, Sequence, Tuple, Union

import numpy as np

from .errors import TransferError

if TYPE_CHECKING:
    from ..pe import ProgressEngine
    from ..rdma.batch import TaskBatch
    from .segments import LocalSegment, RemoteSegment


class Op(str, enum.Enum):
    READ = "read"      # remote -> local
    WRITE = "write"    # local -> remote


@dataclass
class Request:
    """One transfer: ``op`` between ``local`` (segment, its name, or a bytes-like) and ``remote``."""

    op: Union[Op, str]
    local: Union["LocalSegment", str, Any]
    remote: Union["RemoteSegment", str]
    length: int
    local_offset: int = 0
    remote_offset: int = 0


class State(str, enum.Enum):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


@dataclass
class RequestStatus:
    state: State
    transferred: int
    error: Optional[str] = None


@dataclass
class _Part:
    """The slices of one batch that travel on one connection."""

    batch: "TaskBatch"
    owners: np.ndarray                 # request index of each task
    sizes: np.ndarray                  # bytes of each task


class TransferBatch:
    """A submitted batch: per-request ``status()``, ``wait(timeout)``, ``await``."""

    def __init__(self, requests: Sequence[Request], parts: List[_Part], engines: List["ProgressEngine"],
                 cleanup: List[Any], failed: Optional[List[Tuple[int, Exception]]] = None) -> None:
        self.requests = list(requests)
        self._parts, self._engines, self._cleanup = parts, engines, cleanup
        self._refused = dict(failed or [])                     # requests refused before submission
        self._early = {i: f"{type(e).__name__}: {e}" for i, e in self._refused.items()}
        self._released = False

    @property
    def done(self) -> bool:
        return all(p.batch.done for p in self._parts)

    def status(self) -> List[RequestStatus]:
        """Per request: state, bytes transferred so far, first error."""
        n = len(self.requests)
        total = np.zeros(n, dtype=np.int64)
        moved = np.zeros(n, dtype=np.int64)
        failed = np.zeros(n, dtype=bool)
        pending = np.zeros(n, dtype=bool)
        errors: List[Optional[str]] = [None] * n
        for p in self._parts:
            st = p.batch.status
            np.add.at(total, p.owners, p.sizes)
            np.add.at(moved, p.owners, np.where(st == 0, p.sizes, 0))
            np.logical_or.at(failed, p.owners, st > 0)
            np.logical_or.at(pending, p.owners, st < 0)
            for i in np.nonzero(st > 0)[0][:8]:
                j = int(p.owners[i])
                if errors[j] is None:
                    errors[j] = p.batch.errors()[0][1].name if p.batch.errors() else f"status {int(st[i])}"
        out = []
        for i in range(n):
            if i in self._early:
                out.append(RequestStatus(State.FAILED, 0, self._early[i]))
            elif failed[i] and not pending[i]:
                out.append(RequestStatus(State.FAILED, int(moved[i]), errors[i]))
            elif pending[i] or failed[i]:
                out.append(RequestStatus(State.PENDING, int(moved[i]), errors[i]))
            else:
                out.append(RequestStatus(State.DONE, int(moved[i])))
        return out

    def poll(self) -> bool:
        """Progress every engine once; True when the whole batch finished."""
        for pe in self._engines:
            if not pe.closed:
                pe.progress()
        for p in self._parts:
            p.batch._pump()
            p.batch._finish_if_done()
        if self.done:
            self._release()
            return True
        return False

    def wait(self, timeout: Optional[float] = 30.0) -> "TransferBatch":
        """Progress until every slice finished; TimeoutError after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.poll():
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"transfer batch of {len(self.requests)} requests not done after {timeout:g}s")
            fds = []
            for pe in self._engines:
                if not pe.closed:
                    pe.request_notification()
                    fds.append(pe.fileno())
            if any(pe.progress() for pe in self._engines if not pe.closed):
                continue
            ready, _, _ = select.select(fds, [], [], 0.05)
            for pe in self._engines:
                if not pe.closed and pe.fileno() in ready:
                    pe.clear_notification()
        return self

    def result(self, timeout: Optional[float] = 30.0) -> None:
        """Wait; TransferError naming the failed requests."""
        self.wait(timeout)
        if not self._early and not any(p.batch.failed for p in self._parts):
            return                                        # every slice succeeded: no per-request accounting
        bad = [(i, s) for i, s in enumerate(self.status()) if s.state is not State.DONE]
        if bad:
            what = ", ".join(f"#{i}: {s.error}" for i, s in bad[:4])
            kinds = {type(self._refused[i]) for i, _ in bad if i in self._refused}
            cls = kinds.pop() if len(kinds) == 1 and all(i in self._refused for i, _ in bad) else TransferError
            raise cls(f"{len(bad)} of {len(self.requests)} requests failed ({what})")

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        for fn in self._cleanup:
            fn()

    def __await__(self) -> Generator[Any, None, "TransferBatch"]:
        return self._await().__await__()

    async def _await(self) -> "TransferBatch":
        import asyncio

        from .._loop import wait_for

        def finished() -> bool:
            for p in self._parts:
                p.batch._pump()
                p.batch._finish_if_done()
            return self.done
        # each engine is driven from the loop through its notification fd (pydoca.aio)
        await asyncio.gather(*(wait_for(pe, finished, timeout=None) for pe in self._engines if not pe.closed))
        self.poll()
        return self


__all__ = ["Op", "Request", "RequestStatus", "State", "TransferBatch"]
