"""Control-message transport on one Rdma context: a receive ring and a send ring.

Both slot pools are :class:`~pydoca.rdma.ring.TaskRing` s: posting a slot is one
call into C and completions are recorded in C, so a message costs no Python
task object and no Python callback per task. The channel drains both rings
from a progress-engine poller (after every ``progress()`` that delivered
something): each received message is copied out and handed to the owner
(``on_message``; a write-with-immediate's immediate to ``on_imm``), then its
slot is posted again; each finished send frees its slot (and calls its
``on_done``, if it had one). Sends wait in an outbox while no slot is free.

Many connections share the send slots (a responder's): a send completes only
once its peer took it, so a peer that stops posting receives keeps its slots
until softdoca's RNR budget ends. ``max_inflight`` bounds the slots one
connection holds, the outbox is one queue per connection served in turn, and
``max_backlog`` bounds each queue (``send`` refuses beyond it): such a peer
delays nobody else, and what waits for it stays bounded.
"""
from __future__ import annotations

import collections
from typing import Callable, Deque, Dict, List, Optional, Tuple

import numpy as np

from pydoca._log import get_logger

from ..buffer import Buffer, BufferInventory
from ..device import Device
from ..memory import Access, MemoryMap
from ..rdma import Connection, Opcode, Rdma
from ..rdma.ring import Entry, TaskRing
from ..rdma.tasks import from_be32
from .protocol import SLOT_SIZE

log = get_logger()

OnMessage = Callable[[Connection, bytes], None]
OnImm = Callable[[Connection, int, int], None]
SendDone = Callable[[bool], None]

_WRITE_IMM = int(Opcode.WRITE_WITH_IMM)


class Channel:
    """Slot pools for control messages on ``rdma`` (registered on ``dev``)."""

    def __init__(self, dev: Device, rdma: Rdma, inventory: BufferInventory, *, recv_slots: int, send_slots: int,
                 on_message: OnMessage, on_imm: OnImm, max_inflight: Optional[int] = None,
                 max_backlog: Optional[int] = None) -> None:
        self.rdma = rdma
        self.max_inflight, self.max_backlog = max_inflight, max_backlog
        self.on_message = on_message
        self.on_imm = on_imm
        self.closing = False
        self._recv_mem = np.zeros(recv_slots * SLOT_SIZE, dtype=np.uint8)
        self._send_mem = np.zeros(send_slots * SLOT_SIZE, dtype=np.uint8)
        self._recv_view = memoryview(self._recv_mem.data)
        self._send_view = memoryview(self._send_mem.data)
        self._maps = [MemoryMap(dev, self._recv_mem, access=Access.LOCAL_READ_WRITE),
                      MemoryMap(dev, self._send_mem, access=Access.LOCAL_READ_WRITE)]
        self._recv_bufs = [inventory.buffer(self._maps[0], offset=i * SLOT_SIZE, length=SLOT_SIZE, empty=True)
                           for i in range(recv_slots)]
        self._send_bufs = [inventory.buffer(self._maps[1], offset=i * SLOT_SIZE, length=SLOT_SIZE, empty=True)
                           for i in range(send_slots)]
        self._recv = TaskRing(rdma, self._recv_bufs, "receive")
        self._send = TaskRing(rdma, self._send_bufs, "send")
        self._on_done: List[Optional[SendDone]] = [None] * send_slots
        self._free: List[int] = list(range(send_slots))
        self._slot_conn: List[Optional[Connection]] = [None] * send_slots
        self._held: Dict[Connection, int] = {}     # send slots each connection holds
        # frames waiting for a slot, per connection; the dict's order is the turn (served in turn)
        self._outbox: Dict[Connection, Deque[Tuple[bytes, Optional[SendDone]]]] = {}
        self._serving = False
        self._failures = 0
        self._pe = rdma.pe
        self._pe.add_poller(self.drain)

    # -- receives ---------------------------------------------------------------
    def post_all(self) -> None:
        for i in range(len(self._recv_bufs)):
            self._recv.post(i)

    def drain(self) -> None:
        """Take every finished send and received message (the progress engine's poller)."""
        self.reap()
        recv = self._recv
        rc = recv._c                               # the C counters, read directly: this runs per progress()
        while rc.tail != rc.head:
            self._received(recv.take())  # type: ignore[arg-type]

    def _received(self, entry: Entry) -> None:
        i, status, length, opcode, imm, conn = entry
        if self.closing or self.rdma.closed:
            return
        if status:
            self._failures += 1
            log.debug("receive failed", status=status)
        else:
            self._failures = 0
            try:
                # the message first (its answer goes out sooner), then the slot, whose bytes are copied out
                if conn is None:
                    log.debug("message from an unknown connection dropped", opcode=opcode)
                elif opcode == _WRITE_IMM:
                    self.on_imm(conn, from_be32(imm), length)
                else:
                    start = i * SLOT_SIZE
                    self.on_message(conn, self._recv_view[start:start + min(length, SLOT_SIZE)].tobytes())
            except Exception as exc:  # noqa: BLE001 - never unwind into the progress engine
                log.error("control message handler raised", error=repr(exc))
        if not self.closing and self._failures <= 4 * len(self._recv_bufs):  # a flush fails each slot once;
            try:                                                               # a dead context forever
                self._recv.post(i)
            except Exception as exc:  # noqa: BLE001 - the context is going away
                log.debug("re-posting a receive failed", error=str(exc))

    # -- sends ------------------------------------------------------------------
    def send(self, conn: Connection, frame: bytes, on_done: Optional[SendDone] = None) -> bool:
        """Send one frame (queued while no send slot is free for it); ``on_done(ok)`` once it finished.
        False: refused, ``conn`` has ``max_backlog`` frames queued already (its peer does not take them)."""
        if len(frame) > SLOT_SIZE:
            raise ValueError(f"frame of {len(frame)} bytes exceeds {SLOT_SIZE}")
        if not self._free and self._send.pending():
            self.reap()                       # finished sends only: no message is delivered from here
        box = self._outbox.get(conn)
        if box is None and self._free and (self.max_inflight is None or
                                           self._held.get(conn, 0) < self.max_inflight):
            self._submit(self._free.pop(), conn, frame, on_done)
            return True
        if box is None:
            box = self._outbox[conn] = collections.deque()
        elif self.max_backlog is not None and len(box) >= self.max_backlog:
            return False
        box.append((frame, on_done))
        return True

    def backlog(self, conn: Connection) -> int:
        """Frames queued for ``conn``."""
        box = self._outbox.get(conn)
        return len(box) if box is not None else 0

    def _submit(self, i: int, conn: Connection, frame: bytes, on_done: Optional[SendDone]) -> None:
        start = i * SLOT_SIZE
        n = len(frame)
        self._send_view[start:start + n] = frame
        self._on_done[i] = on_done
        self._slot_conn[i] = conn
        self._held[conn] = self._held.get(conn, 0) + 1
        try:
            self._send.post(i, conn, n)
        except Exception as exc:  # noqa: BLE001 - connection gone: report as a failed send
            log.debug("send failed to submit", error=str(exc))
            self._on_done[i] = None
            self._release(i)
            if on_done is not None:
                on_done(False)

    def reap(self) -> int:
        """Take back the slots of sends that finished; returns how many."""
        send = self._send
        sc = send._c
        n = 0
        while sc.tail != sc.head:
            self._sent(send.take())  # type: ignore[arg-type]
            n += 1
        if sc.posted == 0:
            send._finish_if_done()                 # nothing in flight: its memory is no longer pinned
        return n

    def _sent(self, entry: Entry) -> None:
        i, status = entry[0], entry[1]
        on_done = self._on_done[i]
        self._on_done[i] = None
        if status:
            log.debug("send failed", status=status)
        self._release(i)
        if on_done is not None:
            try:
                on_done(status == 0)
            except Exception as exc:  # noqa: BLE001
                log.error("send completion callback raised", error=repr(exc))

    def _release(self, i: int) -> None:
        conn = self._slot_conn[i]
        if conn is not None:
            self._slot_conn[i] = None
            held = self._held[conn] - 1
            if held:
                self._held[conn] = held
            else:
                del self._held[conn]
        self._free.append(i)
        if self._outbox and not self.closing:
            self._serve()

    def _serve(self) -> None:
        """Give free slots to queued frames, one connection after the other (each in its order), skipping
        connections that hold ``max_inflight`` slots. Not re-entered (a failed submit releases its slot)."""
        if self._serving:
            return
        self._serving = True
        try:
            cap, moved = self.max_inflight, True
            while moved and self._free and self._outbox and not self.closing:
                moved = False
                for conn in list(self._outbox):
                    if not self._free:
                        break
                    if cap is not None and self._held.get(conn, 0) >= cap:
                        continue
                    box = self._outbox.pop(conn)
                    frame, cb = box.popleft()
                    if box:
                        self._outbox[conn] = box          # to the end of the turn
                    self._submit(self._free.pop(), conn, frame, cb)
                    moved = True
        finally:
            self._serving = False

    def drop_outbox(self, conn: Connection) -> None:
        """Forget queued frames for a connection that is gone."""
        self._outbox.pop(conn, None)

    def close(self) -> None:
        self.closing = True
        self._outbox.clear()
        self._pe.remove_poller(self.drain)
        for m in self._maps:              # each waits for (or flushes) its slots' tasks, then closes the buffers
            m.close()
        self.reap()                       # every finished send reports to its on_done
        for ring in (self._recv, self._send):
            ring._finish_if_done()        # nothing in flight any more: the rings may go


__all__ = ["Buffer", "Channel"]
