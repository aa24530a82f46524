"""Helpers for RDMA tests: a driven peer subprocess and a local endpoint."""
from __future__ import annotations

import base64
import json
import os
import select
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from typing import Any, Dict, Optional, Sequence, Tuple

import pydoca
from pydoca import Access

HERE = os.path.dirname(os.path.abspath(__file__))
ALL_REMOTE = Access.LOCAL_READ_WRITE | Access.RDMA_WRITE | Access.RDMA_READ | Access.RDMA_ATOMIC


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PeerProc:
    """tests/peer_proc.py in a subprocess, one JSON command at a time."""

    def __init__(self, transport: Optional[str] = None, env: Optional[Dict[str, str]] = None,
                 prefix: Sequence[str] = ()) -> None:
        """``prefix``: the command that runs it (``ip netns exec NS``: a peer in another namespace)."""
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        if transport is not None:   # SOFTDOCA_TRANSPORT of the peer (tcp: a frozen peer cannot serve)
            env["SOFTDOCA_TRANSPORT"] = transport
        self.proc = subprocess.Popen([*prefix, sys.executable, os.path.join(HERE, "peer_proc.py")],
                                     stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)

    def call(self, op: str, timeout: float = 20.0, **kw: Any) -> Dict[str, Any]:
        self.post(op, **kw)
        return self.answer(op, timeout)

    def post(self, op: str, **kw: Any) -> None:
        """Send a command without waiting (the peer works while we do)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()

    def answer(self, op: str, timeout: float = 20.0) -> Dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"peer did not answer {op} within {timeout}s")
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise RuntimeError(f"peer exited during {op}: {err[-2000:]}")
        out: Dict[str, Any] = json.loads(line)
        if not out.pop("ok"):
            raise RuntimeError(f"peer {op} failed: {out['error']}")
        return out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()


class Local:
    """The in-process side: device, engine, Rdma, inventory."""

    def __init__(self, *, rnr_retry: Optional[int] = None, timeout_ms: Optional[int] = None) -> None:
        self.stack = ExitStack()
        self.dev = self.stack.enter_context(pydoca.Device.open(iface="lo"))
        self.pe = self.stack.enter_context(pydoca.ProgressEngine())
        self.rdma = self.stack.enter_context(pydoca.Rdma(self.dev, self.pe, permissions=ALL_REMOTE,
                                                         rnr_retry_count=rnr_retry,
                                                         connection_request_timeout_ms=timeout_ms))
        self.inv = self.stack.enter_context(pydoca.BufferInventory(256))
        self.keep: list[Any] = []     # maps and buffers the test made, closed with the device

    def local(self, data: bytearray, access: Access = Access.LOCAL_READ_WRITE) -> pydoca.MemoryMap:
        mm = pydoca.MemoryMap(self.dev, data, access=access)
        self.keep.append(mm)
        return mm

    def remote(self, blob_b64: str) -> pydoca.MemoryMap:
        mm = pydoca.MemoryMap.from_export(self.dev, base64.b64decode(blob_b64))
        self.keep.append(mm)
        return mm

    def connect_oob(self, peer: PeerProc, started: Dict[str, Any]) -> pydoca.Connection:
        blob, conn = self.rdma.export()
        self.rdma.connect(base64.b64decode(started["conn"]), conn)
        peer.post("connect", blob=base64.b64encode(blob).decode())
        conn.wait_established(10)
        peer.answer("connect")
        return conn

    def write_target(self, peer: PeerProc, size: int = 4096) -> Tuple[pydoca.Connection, pydoca.MemoryMap]:
        """The peer started with a ``size`` B region open to every remote access, connected (OOB): the
        connection and the imported region."""
        started = peer.call("start", size=size, access=int(ALL_REMOTE), permissions=int(ALL_REMOTE), mode="oob")
        return self.connect_oob(peer, started), self.remote(started["mmap"])

    def close(self) -> None:
        self.stack.close()


def deadline(seconds: float) -> float:
    return time.monotonic() + seconds


def forge_export(blob: bytes, *, length: Optional[int] = None, key_xor: int = 0) -> bytes:
    """Re-sign a softdoca mmap descriptor with a changed range or key, as an
    attacker (or a stale copy) would: the target must still refuse access.
    Layout (docs/softdoca-contract.md): ..., len @32, key @44..60, CRC-32 @78; under a provider (ucx, ofi)
    its section follows the 82 bytes, kept as it is (it holds the provider's own key)."""
    import struct
    import zlib
    b = bytearray(blob[:82])
    assert len(blob) == 82 or blob[82:86] == b"SDPB", "softdoca descriptor layout changed"
    if length is not None:
        struct.pack_into("<Q", b, 32, length)
    b[44] ^= key_xor
    struct.pack_into("<I", b, 78, zlib.crc32(bytes(b[:78])) & 0xFFFFFFFF)
    return bytes(b) + blob[82:]
