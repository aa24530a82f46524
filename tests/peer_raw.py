"""A raw RDMA client for the peer tests: speaks (or breaks) the protocol by hand."""
from __future__ import annotations

import time
from typing import Any, List, Optional

import pydoca
from pydoca import Access
from pydoca.peer import protocol as P

SLOTS = 16


class RawClient:
    """An Rdma connection to a responder with posted receives and a send helper."""

    def __init__(self, port: int, inventory: int = 4 * SLOTS) -> None:
        self.dev = pydoca.Device.open(iface="lo")
        self.pe = pydoca.ProgressEngine()
        self.inv = pydoca.BufferInventory(inventory)
        self.rdma = pydoca.Rdma(self.dev, self.pe)
        self.mem = bytearray(2 * SLOTS * P.SLOT_SIZE)
        self.mm = pydoca.MemoryMap(self.dev, self.mem, access=Access.LOCAL_READ_WRITE)
        self.got: List[bytes] = []
        self._bufs: List[Any] = []
        self.closing = False
        for i in range(SLOTS):
            self._post(i)
        self.conn = self.rdma.connect_to("127.0.0.1", port)
        self.conn.wait_established(10)
        self._next = 0

    def _post(self, i: int) -> None:
        buf = self.inv.buffer(self.mm, offset=i * P.SLOT_SIZE, length=P.SLOT_SIZE, empty=True)
        task = self.rdma.receive(buf)

        def done(t: Any) -> None:
            if t.error is None:
                self.got.append(bytes(self.mem[i * P.SLOT_SIZE:i * P.SLOT_SIZE + t.value.length]))
            buf.close()
            if t.error is None and not self.closing:
                self._post(i)
        task.add_done_callback(done)

    def send(self, data: bytes) -> Any:
        slot = SLOTS + self._next % SLOTS
        self._next += 1
        start = slot * P.SLOT_SIZE
        self.mem[start:start + len(data)] = data
        buf = self.inv.buffer(self.mm, offset=start, length=P.SLOT_SIZE, data_len=len(data))
        self._bufs.append(buf)
        task = self.rdma.send(self.conn, buf)

        def sent(_t: Any) -> None:              # its buffer goes back: any number of sends, one at a time
            buf.close()
            self._bufs.remove(buf)
        task.add_done_callback(sent)
        return task

    def expect(self, timeout: float = 10.0) -> P.Frame:
        """The next frame received (TimeoutError if none)."""
        self.pe.run_until(lambda: bool(self.got), timeout, what="a frame")
        return P.decode(self.got.pop(0))

    def hello(self, name: str = "raw", token: Optional[bytes] = None, key_id: str = "") -> dict:
        """IDENT (and AUTH with ``token``), then the reassembled hello; maps the private region."""
        from pydoca.peer.auth import client_mac
        nonce = b"\x07" * P.NONCE
        self.send(P.encode(P.Ident(name, key_id, nonce), 0))
        parts: List[bytes] = []
        while True:
            frame = self.expect()
            if isinstance(frame.msg, P.Challenge):
                assert token is not None, "the responder asks for a token"
                self.send(P.encode(P.Auth(client_mac(token, nonce, frame.msg.nonce, name, key_id)), 0))
                continue
            assert isinstance(frame.msg, P.Hello), frame
            parts.append(frame.msg.chunk)
            if not frame.flags & P.FLAG_MORE:
                doc = P.parse_hello(b"".join(parts))
                self.region_blob = __import__("base64").b64decode(doc["region"]) if doc["region"] else b""
                return doc

    def rdma_op(self, kind: str, blob: bytes, offset: int, data: bytes = b"", length: int = 0) -> Any:
        """An RDMA write or read against ``blob`` (an mmap export); returns the task after it finished."""
        rmap = pydoca.MemoryMap.from_export(self.dev, blob)
        mem = bytearray(data or bytes(length))
        mm = pydoca.MemoryMap(self.dev, mem, access=Access.LOCAL_READ_WRITE)
        try:
            local = self.inv.buffer(mm, data_len=len(data)) if data else self.inv.buffer(mm, empty=True)
            remote = (self.inv.buffer(rmap, offset=offset, length=len(mem), empty=True) if kind == "write"
                      else self.inv.buffer(rmap, offset=offset, length=len(mem)))
            task = (self.rdma.write(self.conn, local, remote) if kind == "write"
                    else self.rdma.read(self.conn, remote, local))
            task.wait(10)
            local.close()
            remote.close()
            return task, bytes(mem)
        finally:
            mm.close()
            rmap.close()

    def wait_closed(self, timeout: float = 10.0) -> None:
        self.pe.run_until(lambda: self.conn.closed, timeout, what="disconnect")

    def close(self) -> None:
        self.closing = True
        if not self.conn.closed:
            self.conn.disconnect()
        self.rdma.close()
        for b in self._bufs:
            b.close()
        for r in (self.mm, self.inv, self.pe, self.dev):
            r.close()


def status_of(frame: P.Frame) -> Optional[P.Status]:
    return frame.msg.code if isinstance(frame.msg, P.StatusMsg) else None


def wait_until(pred: Any, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())
