"""Control-message transport on one Rdma context: receive and send slot pools.

Receives are posted on the context (any connection may consume them); each
completion copies the message out, re-posts the slot at once and hands the
bytes (or the immediate of a write-with-immediate) to the owner. Sends take
a slot from a free list; when none is free they wait in an outbox.

With ``counted_sends`` a send nobody waits for (no ``on_done``) goes out as a
reusable one-task :class:`TaskBatch` per slot: its completion is counted in C,
with no Python call, and :meth:`reap` (the owner's loop, or a send finding no
free slot) takes finished slots back. A responder answers every request with
such a send, so the acknowledgement of each answer costs it no Python work.
"""
from __future__ import annotations

import collections
from typing import Any, Callable, Deque, List, Optional, Tuple

import numpy as np

from pydoca._log import get_logger

from ..buffer import Buffer, BufferInventory
from ..ctx import Task
from ..device import Device
from ..memory import Access, MemoryMap
from ..rdma import Connection, Opcode, Rdma, Received
from ..rdma.batch import TaskBatch
from .protocol import SLOT_SIZE

log = get_logger()

OnMessage = Callable[[Connection, bytes], None]
OnImm = Callable[[Connection, int, int], None]
SendDone = Callable[[bool], None]


class Channel:
    """Slot pools for control messages on ``rdma`` (registered on ``dev``)."""

    def __init__(self, dev: Device, rdma: Rdma, inventory: BufferInventory, *, recv_slots: int, send_slots: int,
                 on_message: OnMessage, on_imm: OnImm, counted_sends: bool = False) -> None:
        self.rdma = rdma
        self.counted_sends = counted_sends
        self._batches: List[Optional[TaskBatch]] = [None] * send_slots
        self._counted: List[int] = []          # slots whose counted send is (or was) in flight
        self.on_message = on_message
        self.on_imm = on_imm
        self.closing = False
        self._recv_mem = np.zeros(recv_slots * SLOT_SIZE, dtype=np.uint8)
        self._send_mem = np.zeros(send_slots * SLOT_SIZE, dtype=np.uint8)
        self._maps = [MemoryMap(dev, self._recv_mem, access=Access.LOCAL_READ_WRITE),
                      MemoryMap(dev, self._send_mem, access=Access.LOCAL_READ_WRITE)]
        self._recv_bufs = [inventory.buffer(self._maps[0], offset=i * SLOT_SIZE, length=SLOT_SIZE, empty=True)
                           for i in range(recv_slots)]
        self._send_bufs = [inventory.buffer(self._maps[1], offset=i * SLOT_SIZE, length=SLOT_SIZE, empty=True)
                           for i in range(send_slots)]
        self._free: List[int] = list(range(send_slots))
        self._outbox: Deque[Tuple[Connection, bytes, Optional[SendDone]]] = collections.deque()
        self._failures = 0

    # -- receives ---------------------------------------------------------------
    def post_all(self) -> None:
        for i in range(len(self._recv_bufs)):
            self._post(i)

    def _post(self, i: int) -> None:
        buf = self._recv_bufs[i]
        buf.reset()
        task = self.rdma.receive(buf)

        def done(t: "Task[Received]") -> None:
            self._on_receive(i, t)
        task.add_done_callback(done)

    def _on_receive(self, i: int, task: Task[Received]) -> None:
        if self.closing or self.rdma.closed:
            return
        got = task.value if task.error is None else None
        data = b""
        if got is not None and got.opcode is not Opcode.WRITE_WITH_IMM:
            start = i * SLOT_SIZE
            data = self._recv_mem[start:start + min(got.length, SLOT_SIZE)].tobytes()
        if got is None:
            self._failures += 1
            log.debug("receive failed", error=str(task.error))
        else:
            self._failures = 0
        try:
            # the message first (its answer goes out sooner), then the slot, whose bytes are copied out
            self._deliver(got, data)
        finally:
            if not self.closing and self._failures <= 4 * len(self._recv_bufs):  # a flush fails each slot
                try:                                                                # once; a dead ctx forever
                    self._post(i)
                except Exception as exc:  # noqa: BLE001 - the context is going away
                    log.debug("re-posting a receive failed", error=str(exc))

    def _deliver(self, got: Optional[Received], data: bytes) -> None:
        if got is None:
            return
        if got.connection is None:
            log.debug("message from an unknown connection dropped", opcode=got.opcode.name)
            return
        try:
            if got.opcode is Opcode.WRITE_WITH_IMM:
                self.on_imm(got.connection, got.immediate or 0, got.length)
            else:
                self.on_message(got.connection, data)
        except Exception as exc:  # noqa: BLE001 - never unwind into the progress engine
            log.error("control message handler raised", error=repr(exc))

    # -- sends ------------------------------------------------------------------
    def send(self, conn: Connection, frame: bytes, on_done: Optional[SendDone] = None) -> None:
        """Send one frame (queued while no send slot is free)."""
        if len(frame) > SLOT_SIZE:
            raise ValueError(f"frame of {len(frame)} bytes exceeds {SLOT_SIZE}")
        if not self._free and self._counted:
            self.reap()
        if not self._free:
            self._outbox.append((conn, frame, on_done))
            return
        self._submit(self._free.pop(), conn, frame, on_done)

    def _submit(self, i: int, conn: Connection, frame: bytes, on_done: Optional[SendDone]) -> None:
        start = i * SLOT_SIZE
        self._send_mem[start:start + len(frame)] = np.frombuffer(frame, dtype=np.uint8)
        buf = self._send_bufs[i]
        buf.data_len = len(frame)
        if self.counted_sends and on_done is None:
            self._submit_counted(i, conn, buf)
            return
        try:
            task = self.rdma.send(conn, buf)
        except Exception as exc:  # noqa: BLE001 - connection gone: report as a failed send
            log.debug("send failed to submit", error=str(exc))
            self._release(i)
            if on_done is not None:
                on_done(False)
            return
        task.add_done_callback(lambda t: self._on_sent(i, t, on_done))

    def _submit_counted(self, i: int, conn: Connection, buf: Buffer) -> None:
        batch = self._batches[i]
        try:
            if batch is None:
                batch = self._batches[i] = TaskBatch(self.rdma, conn, "send", [buf])
            batch.conn = conn
            batch.submit()
        except Exception as exc:  # noqa: BLE001 - connection or context gone: the slot is free again
            log.debug("send failed to submit", error=str(exc))
            self._release(i)
            return
        self._counted.append(i)

    def reap(self) -> int:
        """Take back the slots of counted sends that finished; returns how many."""
        done = [i for i in self._counted if self._batch_done(i)]
        for i in done:
            self._counted.remove(i)
            self._release(i)
        return len(done)

    def _batch_done(self, i: int) -> bool:
        batch = self._batches[i]
        if batch is None or not batch.done:
            return False
        batch._finish_if_done()
        if batch.failed:
            log.debug("send failed", errors=[e.name for _, e in batch.errors()])
        return True

    def _on_sent(self, i: int, task: Task[Any], on_done: Optional[SendDone]) -> None:
        if task.error is not None:
            log.debug("send failed", error=str(task.error))
        self._release(i)
        if on_done is not None:
            try:
                on_done(task.error is None)
            except Exception as exc:  # noqa: BLE001
                log.error("send completion callback raised", error=repr(exc))

    def _release(self, i: int) -> None:
        self._free.append(i)
        while self._outbox and self._free and not self.closing:
            conn, frame, cb = self._outbox.popleft()
            self._submit(self._free.pop(), conn, frame, cb)

    def drop_outbox(self, conn: Connection) -> None:
        """Forget queued frames for a connection that is gone."""
        keep = [item for item in self._outbox if item[0] is not conn]
        self._outbox.clear()
        self._outbox.extend(keep)

    def close(self) -> None:
        self.closing = True
        self._outbox.clear()
        self.reap()                       # finished counted sends let go of the send slots' memory
        for buf in self._recv_bufs + self._send_bufs:
            buf.close()
        for m in self._maps:
            m.close()


__all__ = ["Buffer", "Channel"]
