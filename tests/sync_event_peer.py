"""Process B of the multi-process sync-event tests (tests/test_sync_event.py).

Reads one JSON command per line on stdin, answers one JSON line on stdout:
``start`` (the peer's Rdma connection blob and sync event export: import the
event, export our own connection, connect), ``established`` (wait for the
connection, report the transport), ``set`` / ``add`` / ``get`` (the three
RDMA remote-net sync-event tasks), ``exit``. A failed task answers
``{"ok": false, "code": <doca_error_t>, "error": ...}``.
"""
from __future__ import annotations

import base64
import json
import sys
from contextlib import ExitStack
from typing import Any, Dict

import pydoca
from pydoca.errors import DocaError
from pydoca.perftest.session import _soft_transport_of


class Peer:
    def __init__(self) -> None:
        self.stack = ExitStack()

    def start(self, conn: str, event: str) -> Dict[str, Any]:
        s = self.stack
        self.dev = s.enter_context(pydoca.Device.open(iface="lo"))
        self.pe = s.enter_context(pydoca.ProgressEngine())
        self.rdma = s.enter_context(pydoca.Rdma(self.dev, self.pe))
        self.inv = s.enter_context(pydoca.BufferInventory(16))
        self.mem = bytearray(64)
        self.mm = s.enter_context(pydoca.MemoryMap(self.dev, self.mem))
        self.event = s.enter_context(pydoca.RemoteSyncEvent.from_export(self.dev, base64.b64decode(event)))
        blob, self.conn = self.rdma.export()
        self.rdma.connect(base64.b64decode(conn), self.conn)
        return {"conn": base64.b64encode(blob).decode()}

    def established(self) -> Dict[str, Any]:
        self.conn.wait_established(10)
        return {"transport": _soft_transport_of(self.conn)}

    def set(self, value: int) -> Dict[str, Any]:
        src = self.inv.buffer(self.mm, offset=0, length=8)
        src.memoryview()[:] = value.to_bytes(8, "little")
        self.rdma.sync_event_notify_set(self.conn, self.event, src).result(10)
        src.close()
        return {}

    def add(self, value: int) -> Dict[str, Any]:
        res = self.inv.buffer(self.mm, offset=8, length=8, empty=True)
        old = self.rdma.sync_event_notify_add(self.conn, self.event, res, add=value).result(10)
        res.close()
        return {"old": old}

    def get(self) -> Dict[str, Any]:
        dst = self.inv.buffer(self.mm, offset=16, length=8, empty=True)
        try:
            value = self.rdma.sync_event_get(self.conn, self.event, dst).result(10)
        finally:
            dst.close()
        return {"value": value}


def main() -> None:
    peer = Peer()
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.pop("op")
        if op == "exit":
            break
        try:
            out: Dict[str, Any] = {"ok": True, **getattr(peer, op)(**cmd)}
        except DocaError as exc:
            out = {"ok": False, "code": exc.code, "error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - reported to the test
            out = {"ok": False, "code": None, "error": repr(exc)}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    peer.stack.close()


if __name__ == "__main__":
    main()
