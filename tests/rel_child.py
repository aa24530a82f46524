"""Child processes for the reliability suite (tests/test_reliability_*.py).

Roles (first argument):

* ``listener PORT SECONDS``: a raw ``Rdma.listen`` listener accepting every
  request, with a 64 KiB RDMA-writable MemoryMap. Prints one JSON line
  ``{"ready": true, "mmap": b64}``; progresses until stdin closes or SECONDS
  pass; if anything escapes its progress loop it prints ``{"died": ...}`` and
  exits 3.
* ``peer``: JSON commands on stdin (one answer line each), for kill/stop
  trials: ``start``, ``connect``, ``wait_conn``, ``remote``, ``stream``.
* ``exit100 PORT``: connects to a listener, submits 100 writes, prints
  ``submitted`` and returns from main without closing anything.
* ``fuzz KIND N SEED``: N mutated blobs of KIND (mmap | conn | descriptor)
  through their parser; prints a JSON summary (a crash is seen by the parent).
"""
from __future__ import annotations

import base64
import collections
import json
import os
import random
import select
import struct
import sys
import time
import zlib
from typing import Any, Deque, Dict, List, Optional

import pydoca
from pydoca import Access

ALL_REMOTE = Access.LOCAL_READ_WRITE | Access.RDMA_WRITE | Access.RDMA_READ | Access.RDMA_ATOMIC


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def say(obj: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


# ----------------------------------------------------------------- listener
def listener(port: int, seconds: float) -> int:
    mem = bytearray(1 << 16)
    with pydoca.Device.open(iface="lo") as dev, pydoca.ProgressEngine() as pe, \
            pydoca.Rdma(dev, pe, permissions=ALL_REMOTE, max_connections=64,
                        connection_request_timeout_ms=int(os.environ.get("SOFTDOCA_TIMEOUT_MS", "1000"))) as rdma, \
            pydoca.MemoryMap(dev, mem, access=ALL_REMOTE) as mm:
        rdma.listen(port, accept=lambda conn: True)
        say({"ready": True, "mmap": b64(mm.export_rdma()), "pid": os.getpid()})
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                pe.wait(0.1)
                ready, _, _ = select.select([sys.stdin], [], [], 0)
                if ready and not sys.stdin.readline():
                    break
        except Exception as exc:  # noqa: BLE001 - what the suite looks for
            say({"died": f"{type(exc).__name__}: {exc}"})
            return 3
    return 0


# ----------------------------------------------------------------- peer
class Peer:
    """Both ends of a kill/stop trial: each writes into the other's memory."""

    def start(self, listen_port: int = 0, size: int = 1 << 20) -> Dict[str, Any]:
        timeout_ms = int(os.environ.get("SOFTDOCA_TIMEOUT_MS", "1000"))
        self.dev = pydoca.Device.open(iface="lo")
        self.pe = pydoca.ProgressEngine()
        self.rdma = pydoca.Rdma(self.dev, self.pe, permissions=ALL_REMOTE, connection_request_timeout_ms=timeout_ms)
        self.mem = bytearray(size)
        self.mm = pydoca.MemoryMap(self.dev, self.mem, access=ALL_REMOTE)
        self.src = bytearray(os.urandom(64)) * (size // 64)
        self.src_mm = pydoca.MemoryMap(self.dev, self.src, access=Access.LOCAL_READ_WRITE)
        self.inv = pydoca.BufferInventory(256)
        self.conn: Optional[pydoca.Connection] = None
        self.peer_mm: Optional[pydoca.MemoryMap] = None
        if listen_port:
            self.rdma.listen(listen_port, accept=lambda c: True)
        return {"mmap": b64(self.mm.export_rdma())}

    def connect(self, port: int) -> Dict[str, Any]:
        self.conn = self.rdma.connect_to("127.0.0.1", port).wait_established(5)
        return {}

    def wait_conn(self, timeout: float = 5.0) -> Dict[str, Any]:
        self.conn = self.rdma.accept(timeout)
        return {}

    def remote(self, blob: str) -> Dict[str, Any]:
        if self.peer_mm is not None:
            self.peer_mm.close()
        self.peer_mm = pydoca.MemoryMap.from_export(self.dev, base64.b64decode(blob))
        return {}

    def stream(self, seconds: float, depth: int = 8, size: int = 1 << 16, drain: float = 30.0) -> Dict[str, Any]:
        """Write continuously (``depth`` outstanding) until ``seconds`` pass or
        one fails; then wait (``drain`` s at most) for the outstanding ones."""
        assert self.conn is not None and self.peer_mm is not None
        pending: List[pydoca.Task[Any]] = []
        ok, fails, submit_error = 0, [], None
        end = time.monotonic() + seconds
        span = self.peer_mm.length // size
        i = 0
        while time.monotonic() < end and not fails and submit_error is None:
            while len(pending) < depth:
                off = (i % span) * size
                i += 1
                try:
                    pending.append(self.rdma.write(self.conn, self.inv.buffer(self.src_mm, length=size),
                                                   self.inv.buffer(self.peer_mm, offset=off, length=size)))
                except pydoca.DocaError as exc:
                    submit_error = (time.monotonic(), exc.name)
                    break
            self.pe.wait(0.05)
            for t in [t for t in pending if t.done]:
                pending.remove(t)
                if t.error is None:
                    ok += 1
                else:
                    fails.append((t.completed_at, t.error.name))
        deadline = time.monotonic() + drain
        while pending and time.monotonic() < deadline:
            self.pe.wait(0.05)
            for t in [t for t in pending if t.done]:
                pending.remove(t)
                if t.error is None:
                    ok += 1
                else:
                    fails.append((t.completed_at, t.error.name))
        errors: Dict[str, int] = collections.Counter(name for _, name in fails)
        times = [t for t, _ in fails] + ([submit_error[0]] if submit_error else [])
        return {"ok_ops": ok, "failed": len(fails), "pending_left": len(pending), "errors": dict(errors),
                "submit_error": submit_error[1] if submit_error else None,
                "first_fail": min(times) if times else None, "last_fail": max(times) if times else None,
                "end": time.monotonic()}

    def check(self, rounds: int = 4, size: int = 4096) -> Dict[str, Any]:
        """Write, read back and compare ``rounds`` patterns (a working connection)."""
        assert self.conn is not None and self.peer_mm is not None
        back = bytearray(size)
        with pydoca.MemoryMap(self.dev, back, access=Access.LOCAL_READ_WRITE) as bm:
            for r in range(rounds):
                self.src[:size] = os.urandom(size)
                self.rdma.write(self.conn, self.inv.buffer(self.src_mm, length=size),
                                self.inv.buffer(self.peer_mm, length=size)).result(5)
                n = self.rdma.read(self.conn, self.inv.buffer(self.peer_mm, length=size),
                                   self.inv.buffer(bm, empty=True)).result(5)
                if n != size or back != self.src[:size]:
                    return {"verified": False}
        return {"verified": True}


def peer() -> int:
    p = Peer()
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.pop("op")
        if op == "exit":
            break
        try:
            out = getattr(p, op)(**cmd)
            out["ok"] = True
        except Exception as exc:  # noqa: BLE001 - reported to the test
            out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        say(out)
    return 0


# ----------------------------------------------------------------- exit with tasks in flight
def exit100(port: int) -> int:
    dev = pydoca.Device.open(iface="lo")
    pe = pydoca.ProgressEngine()
    rdma = pydoca.Rdma(dev, pe, permissions=ALL_REMOTE, max_tasks=256)
    blob = base64.b64decode(sys.stdin.readline())
    conn = rdma.connect_to("127.0.0.1", port).wait_established(5)
    remote = pydoca.MemoryMap.from_export(dev, blob)
    src = bytearray(1 << 16)
    mm = pydoca.MemoryMap(dev, src, access=Access.LOCAL_READ_WRITE)
    inv = pydoca.BufferInventory(256)
    tasks = [rdma.write(conn, inv.buffer(mm), inv.buffer(remote)) for _ in range(100)]
    say({"submitted": len(tasks), "done": sum(t.done for t in tasks), "t": time.monotonic()})
    return 0     # nothing closed: the finalizers must cope, silently


# ----------------------------------------------------------------- fuzzing
def mutate(rng: random.Random, blob: bytes, keep: range = range(0)) -> bytes:
    """One random mutation: bit flips, byte sets, truncation, extension, splice."""
    b = bytearray(blob)
    how = rng.randrange(6)
    if how == 0 and b:
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            if i not in keep:
                b[i] ^= 1 << rng.randrange(8)
    elif how == 1 and b:
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            if i not in keep:
                b[i] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
    elif how == 2:
        b = b[:rng.randrange(len(b) + 1)]
    elif how == 3:
        b += os.urandom(rng.randint(1, 64))
    elif how == 4:
        b = bytearray(os.urandom(rng.randint(0, 2 * len(blob))))
    else:
        i = rng.randrange(len(b) + 1)
        b = b[:i] + os.urandom(rng.randint(0, 8)) + b[i + rng.randint(0, 8):]
    return bytes(b)


def resign(blob: bytes, crc_at: int) -> bytes:
    """Fix the trailing CRC-32 so the mutation reaches the field checks."""
    if len(blob) < crc_at + 4:
        return blob
    b = bytearray(blob)
    struct.pack_into("<I", b, crc_at, zlib.crc32(bytes(b[:crc_at])) & 0xFFFFFFFF)
    return bytes(b)


def fuzz(kind: str, n: int, seed: int) -> int:
    from pydoca.descriptor import DescriptorError, read_descriptor, write_descriptor
    rng = random.Random(seed)
    typed = (pydoca.DocaError, ValueError)
    out: Dict[str, Any] = {"kind": kind, "trials": 0, "typed": 0, "accepted": 0, "untyped": []}
    with pydoca.Device.open(iface="lo") as dev, pydoca.ProgressEngine() as pe, \
            pydoca.Rdma(dev, pe, max_connections=64) as rdma:
        mem = bytearray(4096)
        with pydoca.MemoryMap(dev, mem, access=ALL_REMOTE) as mm:
            mmap_blob = mm.export_rdma()
            conn_blob, _ = rdma.export()      # a valid peer blob to mutate (ours: never dialed)
            _, conn = rdma.export()
            tmp = os.environ.get("REL_TMP", "/tmp")
            path = os.path.join(tmp, f"fuzz-{os.getpid()}.json")
            write_descriptor(path, "rdma", {"conn": conn_blob, "mmap": mmap_blob, "port": 1})
            with open(path, "rb") as fh:
                desc = fh.read()
            for i in range(n):
                out["trials"] += 1
                try:
                    if kind == "mmap":
                        blob = mutate(rng, mmap_blob)
                        if i % 2:
                            blob = resign(blob, 78)
                        if blob == mmap_blob:
                            out["typed"] += 1
                            continue
                        pydoca.MemoryMap.from_export(dev, blob).close()
                    elif kind == "conn":
                        # re-signed mutations keep the address bytes (32..47): loopback only
                        blob = mutate(rng, conn_blob, keep=range(32, 48))
                        if i % 2:
                            blob = resign(blob, 60)
                        if blob == conn_blob:
                            out["typed"] += 1
                            continue
                        rdma.connect(blob, conn)
                        conn.disconnect()          # it parsed: start over with a fresh exported connection
                        _, conn = rdma.export()
                    else:
                        data = mutate(rng, desc)
                        with open(path, "wb") as fh:
                            fh.write(data)
                        read_descriptor(path, "rdma")
                    out["accepted"] += 1
                except typed:
                    out["typed"] += 1
                except DescriptorError:
                    out["typed"] += 1
                except Exception as exc:  # noqa: BLE001 - the finding
                    out["untyped"].append(f"{type(exc).__name__}: {exc}"[:200])
                pe.progress()
            os.unlink(path)
    say(out)
    return 0


def main() -> int:
    role = sys.argv[1]
    if role == "listener":
        return listener(int(sys.argv[2]), float(sys.argv[3]))
    if role == "peer":
        return peer()
    if role == "exit100":
        return exit100(int(sys.argv[2]))
    if role == "fuzz":
        return fuzz(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    sys.exit(main())
