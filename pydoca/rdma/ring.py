"""Task rings: a fixed set of receive (or send) slots, posted and completed without Python objects.

A :class:`TaskRing` owns ``n`` buffers. :meth:`TaskRing.post` allocates and
submits the slot's task in one call into C (a receive into the emptied
buffer, or a send of its first ``length`` bytes); the C shim writes each
completion into a preallocated array, frees the task, and calls no Python.
The owner drains the completions with :meth:`TaskRing.take` (in completion
order), usually from a :meth:`pydoca.pe.ProgressEngine.add_poller` hook, and
posts the slot again. This is the control-message path of :mod:`pydoca.peer`:
a message costs one C call to post and a few attribute reads to collect.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Optional, Sequence, Tuple

from .._native import callbacks, ffi, lib
from ..errors import InvalidValueError, check
from .batch import maps_of

if TYPE_CHECKING:
    from ..buffer import Buffer
    from . import Connection, Rdma

RECEIVE, SEND = 0, 1
#: rings with tasks in flight: the C side writes into their arrays until those tasks complete, so a ring
#: must outlive them even when its owner drops it (as callbacks.tasks keeps a Task)
_in_flight: Dict[int, "TaskRing"] = {}
#: One completion: (slot, status (0 or a doca_error_t), length, opcode, immediate (big endian), the sending
#: Connection of a receive (None: a send, a failure, or a connection this context no longer knows))
Entry = Tuple[int, int, int, int, int, Optional["Connection"]]


class TaskRing:
    """``len(bufs)`` slots of receives (``kind="receive"``) or sends (``"send"``) on ``rdma``."""

    def __init__(self, rdma: "Rdma", bufs: Sequence["Buffer"], kind: str = "receive") -> None:
        if kind not in ("receive", "send"):
            raise ValueError(f"a task ring is of receives or sends, not {kind!r}")
        if not bufs:
            raise ValueError("a task ring needs at least one buffer")
        self.ctx, self.n, self.kind = rdma, len(bufs), kind
        self._id = callbacks.new_id()
        self._c = ffi.new("struct pydoca_ring *")
        self._entries = ffi.new("struct pydoca_ring_entry[]", self.n)
        self._slots = ffi.new("struct pydoca_ring_slot[]", self.n)
        c = self._c
        c.n, c.kind, c.entries, c.slots = self.n, RECEIVE if kind == "receive" else SEND, self._entries, self._slots
        for i, buf in enumerate(bufs):
            self._slots[i].ring = c
            self._slots[i].buf = buf.handle
            self._slots[i].index = i
        self._bufs = list(bufs)
        self._room = [buf.length for buf in bufs]   # a send never claims more than its buffer holds
        self._maps = maps_of(bufs)
        self._rdma_handle = rdma._rdma

    @property
    def posted(self) -> int:
        """Tasks in flight."""
        return int(self._c.posted)

    @property
    def failed(self) -> int:
        """Tasks that completed with an error since the ring was made."""
        return int(self._c.failed)

    @property
    def done(self) -> bool:
        """Nothing in flight (what a closing MemoryMap waits for)."""
        return bool(self._c.posted == 0)

    def post(self, slot: int, conn: Optional["Connection"] = None, length: int = 0) -> None:
        """Submit ``slot``'s task: a receive, or a send of ``length`` bytes on ``conn``. Raises DocaError
        (BAD_STATE for a slot in flight, or while n completions wait to be taken: they would not fit)."""
        self.ctx._check_open()                 # a destroyed context's handle is never passed to C
        if 0 <= slot < self.n:
            self._bufs[slot]._check_open()     # nor a released buffer (its map may have closed it)
            if self.kind == "send" and not 0 <= length <= self._room[slot]:
                # real DOCA leaves a data section past the buffer undefined: refuse it here
                raise InvalidValueError(f"a send of {length} bytes from ring slot {slot}: its buffer holds "
                                        f"{self._room[slot]} (send 0..{self._room[slot]} bytes)")
        if self._c.posted == 0:
            _in_flight[self._id] = self
            for m in self._maps:              # a closing MemoryMap waits for (or flushes) what is in flight
                m._tasks[self._id] = self
        rc = lib.pydoca_ring_post(self._rdma_handle, self._c, slot, ffi.NULL if conn is None else conn.handle,
                                  length)
        if rc:
            self._finish_if_done()
            check(rc, f"doca_rdma_task_{self.kind}_allocate_init/submit (ring slot {slot})")

    def take(self) -> Optional[Entry]:
        """The oldest completion not taken yet, or None."""
        c = self._c
        if c.tail == c.head:
            self._finish_if_done()
            return None
        e = self._entries[c.tail % self.n]
        c.tail += 1
        ud = e.conn_ud
        return (e.slot, e.status, e.length, e.opcode, e.imm, self.ctx._conns.get(ud) if ud else None)

    def pending(self) -> bool:
        """Completions wait to be taken."""
        return bool(self._c.tail != self._c.head)

    def _finish_if_done(self) -> None:
        if self._c.posted == 0:
            _in_flight.pop(self._id, None)
            for m in self._maps:
                m._tasks.pop(self._id, None)

    def __repr__(self) -> str:
        return f"<TaskRing {self.kind} x{self.n} posted={self.posted} failed={self.failed}>"


__all__ = ["Entry", "TaskRing"]
