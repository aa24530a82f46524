"""Task batches: many RDMA tasks in one call into C, completed without a Python call per task.

``rdma.write_batch(conn, srcs, dsts)`` (and ``read_batch``, ``send_batch``,
``write_imm_batch``, ``send_imm_batch``) allocates and submits every task in
one C loop, ringing the doorbell once (``doca_task_submit_ex`` without FLUSH
for all but the last that goes in, wherever the task pool cuts the run
short). Completions are recorded by the C shim into a preallocated status
array (0 = success, else the ``doca_error_t``); Python only reads counters.
A batch larger than the context's task pool is fed as tasks complete. A
batch is reusable: ``submit()`` again once it is done.
"""
from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING, Any, Dict, Generator, List, Optional, Sequence, Tuple

import numpy as np

from .._native import callbacks, ffi, lib
from ..ctx import CtxState
from ..errors import BadStateError, DocaError, NoMemoryError, TooBigError, check, error_for
from .tasks import to_be32

if TYPE_CHECKING:
    from ..buffer import Buffer
    from . import Connection, Rdma

KINDS = {"write": 0, "read": 1, "send": 2, "write_imm": 3, "send_imm": 4}
_NO_MEMORY = NoMemoryError.code
_BAD_STATE = BadStateError.code
_TOO_BIG = TooBigError.code
_closed = attrgetter("_closed")


def maps_of(bufs: Sequence["Buffer"]) -> List[Any]:
    """The distinct MemoryMaps of ``bufs``: a closing one first waits for (or flushes) what uses it."""
    maps: Dict[int, Any] = {}
    for buf in bufs:
        m = getattr(buf, "mmap", None)
        if m is not None:
            maps[id(m)] = m
    return list(maps.values())


class BatchError(DocaError):
    """Some tasks of a batch failed; ``failed`` lists (index, DocaError)."""

    def __init__(self, message: str, failed: List[Tuple[int, DocaError]]) -> None:
        super().__init__(message, code=failed[0][1].code if failed else 1)
        self.failed = failed


class TaskBatch:
    """``n`` tasks of one kind on one connection; ``status[i]`` is task i's doca_error_t (0: success)."""

    def __init__(self, rdma: "Rdma", conn: "Connection", kind: str, a: Sequence["Buffer"],
                 b: Optional[Sequence["Buffer"]] = None, imm: Optional[Sequence[int]] = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown batch kind {kind!r}: {', '.join(KINDS)}")
        n = len(a)
        if n == 0:
            raise ValueError("a batch needs at least one task")
        if b is not None and len(b) != n:
            raise ValueError(f"{n} first buffers but {len(b)} second buffers")
        if imm is not None and len(imm) != n:
            raise ValueError(f"{n} buffers but {len(imm)} immediates")
        self.ctx, self.conn, self.kind, self.n = rdma, conn, kind, n
        self._id = callbacks.new_id()
        self.status = np.full(n, -1, dtype=np.int32)
        self._c = ffi.new("struct pydoca_batch *")
        self._c.n = n
        self._c.status = ffi.cast("int32_t *", ffi.from_buffer(self.status))
        self._slots = ffi.new("struct pydoca_batch_slot[]", n)
        self._a = ffi.new("struct doca_buf *[]", [x.handle for x in a])
        self._b = ffi.new("struct doca_buf *[]", [x.handle for x in b]) if b is not None else ffi.NULL
        self._imm = ffi.new("uint32_t[]", [to_be32(i) for i in imm]) if imm is not None else ffi.NULL
        self._keep: Tuple[Any, ...] = (a, b)
        self._maps = maps_of(list(a) + list(b or ()))
        self._refused = 0
        self._running = False
        self._ranges: Optional[Tuple[Any, ...]] = None

    @classmethod
    def ranges(cls, rdma: "Rdma", conn: "Connection", kind: str, inventory: Any, local: Any,
               local_offsets: Sequence[int], remote: Any, remote_offsets: Sequence[int],
               lengths: Sequence[int]) -> "TaskBatch":
        """A write (local -> remote) or read batch over byte ranges of two MemoryMaps: the buffers are
        taken from ``inventory`` in C and given back as each task completes (no Buffer objects at all)."""
        if kind not in ("write", "read"):
            raise ValueError(f"a range batch is write or read, not {kind!r}")
        lo = np.ascontiguousarray(local_offsets, dtype=np.uint64)
        ro = np.ascontiguousarray(remote_offsets, dtype=np.uint64)
        ln = np.ascontiguousarray(lengths, dtype=np.uint64)
        if not len(lo) == len(ro) == len(ln) or len(ln) == 0:
            raise ValueError("a range batch needs as many local offsets, remote offsets and lengths (at least one)")
        self = cls.__new__(cls)
        self.ctx, self.conn, self.kind, self.n = rdma, conn, kind, len(ln)
        self._id = callbacks.new_id()
        self.status = np.full(self.n, -1, dtype=np.int32)
        self._c = ffi.new("struct pydoca_batch *")
        self._c.n = self.n
        self._c.status = ffi.cast("int32_t *", ffi.from_buffer(self.status))
        self._slots = ffi.new("struct pydoca_batch_slot[]", self.n)
        self._a = self._b = self._imm = ffi.NULL
        self._keep = (inventory, local, remote, lo, ro, ln)
        self._maps = [m for m in (local, remote) if m is not None]
        self._refused, self._running = 0, False
        self._ranges = (inventory.handle, local.handle, ffi.cast("uint64_t *", ffi.from_buffer(lo)), remote.handle,
                        ffi.cast("uint64_t *", ffi.from_buffer(ro)), ffi.cast("uint64_t *", ffi.from_buffer(ln)))
        return self

    # -- state -----------------------------------------------------------------
    @property
    def submitted(self) -> int:
        return int(self._c.submitted)

    @property
    def completed(self) -> int:
        """Tasks finished (successfully or not), refused submissions included."""
        return int(self._c.done) + self._refused

    @property
    def failed(self) -> int:
        return int(self._c.failed) + self._refused

    @property
    def done(self) -> bool:
        return self.completed >= self.n

    # -- submission ----------------------------------------------------------------
    def submit(self) -> "TaskBatch":
        """Submit (or resubmit, once done) every task; returns at once."""
        if self._running and not self.done:
            raise DocaError("batch still in flight: wait() before resubmitting", code=18)
        self.ctx._check_open()
        if self._ranges is None:             # its buffers stay referenced until each task completed or was refused
            self._hold()
        self._c.submitted = self._c.done = self._c.failed = 0
        self._refused = 0
        self.status.fill(-1)
        self._running = True
        self.ctx.__dict__.setdefault("_batches", {})[self._id] = self   # C writes into us until done
        for m in self._maps:                 # a closing MemoryMap first waits for (or flushes) us
            m._tasks[self._id] = self
        try:
            self._pump()
        except BaseException as exc:         # nothing went out (e.g. the connection is closed): unpin
            if self.submitted == 0:
                self._refuse(getattr(exc, "code", 0) or 1)
            raise
        return self

    def _hold(self) -> None:
        """A reference on every buffer (pydoca_batch_hold): a Buffer closed while the batch runs keeps its
        descriptor until its task is done. A Buffer closed before the submit is refused here (its
        descriptor may already describe another Buffer's memory)."""
        a, b = self._keep[0], self._keep[1]
        if any(map(_closed, a)) or (b is not None and any(map(_closed, b))):
            raise BadStateError(f"a Buffer of this {self.kind} batch was closed: build a new batch from open "
                                "Buffers", code=_BAD_STATE)
        rc = lib.pydoca_batch_hold(self._a, self._b, self._slots, self.n)
        if rc == _TOO_BIG:
            raise TooBigError(f"a Buffer appears in this {self.kind} batch more often than a doca_buf's refcount "
                              "allows (65,535 references): split the batch", code=rc)
        check(rc, f"doca_buf_inc_refcount ({self.kind} batch)")

    def _pump(self) -> None:
        """Submit what the task pool takes now; the rest as completions free it."""
        left = self.n - self.submitted - self._refused
        if left <= 0:
            return
        if self.ctx.closed:                  # its handle is gone: what was not submitted never will be
            self._refuse(_BAD_STATE)
            return
        first = self.submitted + self._refused
        if self._ranges is not None:
            rc = lib.pydoca_rdma_batch_submit_ranges(self.ctx._rdma, KINDS[self.kind], self.conn.handle,
                                                     *self._ranges, self._c, self._slots, first, left)
        else:
            rc = lib.pydoca_rdma_batch_submit(self.ctx._rdma, KINDS[self.kind], self.conn.handle, self._a, self._b,
                                              self._imm, self._c, self._slots, first, left)
        if rc == 0:
            return
        if rc == _NO_MEMORY and self.submitted > self.completed:
            return                            # the pool is full: more go in as tasks complete
        self._refuse(rc)

    def _refuse(self, rc: int) -> None:
        """The tasks not submitted yet fail with ``rc`` (refused: the rest of the batch)."""
        start = self.submitted + self._refused
        self.status[start:] = rc
        lib.pydoca_batch_release(self._slots, start, self.n - start)
        self._refused = self.n - self.submitted
        self._finish_if_done()

    def _settle(self) -> None:
        """Feed the pool and unpin once done: a closing MemoryMap waits through this. Once the context
        no longer runs, the tasks not submitted yet fail with BAD_STATE (those in flight are flushed)."""
        if not self._running:
            return
        if not self.ctx.closed and self.ctx.state != CtxState.RUNNING:
            self._refuse(_BAD_STATE)
        else:
            self._pump()
        self._finish_if_done()

    def _finish_if_done(self) -> None:
        if self.done and self._running:
            self._running = False
            self.ctx.__dict__.get("_batches", {}).pop(self._id, None)
            for m in self._maps:
                m._tasks.pop(self._id, None)

    # -- waiting ----------------------------------------------------------------------
    def poll(self) -> bool:
        """Progress once, feed the pool, and say whether every task finished."""
        self.ctx.pe.progress()
        self._pump()
        self._finish_if_done()
        return self.done

    def wait(self, timeout: Optional[float] = 10.0) -> "TaskBatch":
        """Progress until every task finished; TimeoutError after ``timeout`` seconds."""
        def finished() -> bool:
            self._pump()
            self._finish_if_done()
            return self.done
        if not finished():
            pe = self.ctx.pe
            if not (pe.progress() and finished()):     # one round first: often enough
                pe.run_until(finished, 1e9 if timeout is None else timeout, what=f"{self.kind} batch of {self.n}")
        return self

    def errors(self) -> List[Tuple[int, DocaError]]:
        """(index, error) of every failed task."""
        idx = np.nonzero(self.status > 0)[0]
        return [(int(i), error_for(int(self.status[i]), f"{self.kind} task {int(i)} of the batch failed"))
                for i in idx]

    def result(self, timeout: Optional[float] = 10.0) -> None:
        """Wait; raise BatchError naming how many failed and the first failures."""
        self.wait(timeout)
        if self.failed:
            errs = self.errors()
            first = ", ".join(f"#{i}: {e.name}" for i, e in errs[:3])
            why = ffi.string(self._c.first_error).decode(errors="replace")
            raise BatchError(f"{self.failed} of {self.n} {self.kind} tasks failed ({first})"
                             + (f"; first failure: {why}" if why else ""), errs)

    def __await__(self) -> Generator[Any, None, None]:
        from .._loop import wait_for
        return wait_for(self.ctx.pe, lambda: self.poll(), timeout=None).__await__()

    def __repr__(self) -> str:
        return f"<TaskBatch {self.kind} {self.completed}/{self.n} failed={self.failed}>"


class BatchMixin:
    """The batch methods of :class:`pydoca.Rdma`."""

    def write_batch(self, conn: "Connection", srcs: Sequence["Buffer"], dsts: Sequence["Buffer"]) -> TaskBatch:
        """Write ``srcs[i]`` into ``dsts[i]`` (peer memory) for every i, as one batch."""
        return TaskBatch(self, conn, "write", srcs, dsts).submit()  # type: ignore[arg-type]

    def read_batch(self, conn: "Connection", remotes: Sequence["Buffer"], locals_: Sequence["Buffer"]) -> TaskBatch:
        """Read ``remotes[i]`` into ``locals_[i]`` for every i (destinations are emptied first)."""
        for buf in locals_:
            check(lib.doca_buf_reset_data_len(buf.handle), "doca_buf_reset_data_len")
        return TaskBatch(self, conn, "read", remotes, locals_).submit()  # type: ignore[arg-type]

    def send_batch(self, conn: "Connection", bufs: Sequence["Buffer"]) -> TaskBatch:
        """Send every buffer (the peer must have receives posted)."""
        return TaskBatch(self, conn, "send", bufs).submit()  # type: ignore[arg-type]

    def write_imm_batch(self, conn: "Connection", srcs: Sequence["Buffer"], dsts: Sequence["Buffer"],
                        immediates: Sequence[int]) -> TaskBatch:
        """Write-with-immediate for every i."""
        return TaskBatch(self, conn, "write_imm", srcs, dsts, immediates).submit()  # type: ignore[arg-type]

    def send_imm_batch(self, conn: "Connection", bufs: Sequence["Buffer"], immediates: Sequence[int]) -> TaskBatch:
        """Send-with-immediate for every i."""
        return TaskBatch(self, conn, "send_imm", bufs, None, immediates).submit()  # type: ignore[arg-type]


__all__ = ["BatchError", "BatchMixin", "TaskBatch"]
