"""Helpers for the reliability suite: scale, child processes, /proc figures."""
from __future__ import annotations

import base64
import json
import os
import select
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

import pydoca
from pydoca import Access

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HEAVY = os.environ.get("PYDOCA_HEAVY") == "1"
#: SOFTDOCA_TIMEOUT_MS (and the connection request timeout) of the children
CHILD_TIMEOUT_MS = 1000


def scale(ci: int, heavy: int) -> int:
    """Trial count: ``ci`` normally, ``heavy`` under PYDOCA_HEAVY=1."""
    return heavy if HEAVY else ci


def child_env(**extra: str) -> Dict[str, str]:
    env = dict(os.environ, PYDOCA_BACKEND="soft", PYTHONUNBUFFERED="1",
               SOFTDOCA_TIMEOUT_MS=str(CHILD_TIMEOUT_MS))
    env.pop("SOFTDOCA_LOG", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, ROOT, env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def slope(ys: Sequence[float]) -> float:
    """Least-squares slope of ys against 0..n-1."""
    n = len(ys)
    if n < 2:
        return 0.0
    mx = (n - 1) / 2
    my = sum(ys) / n
    num = sum((i - mx) * (y - my) for i, y in enumerate(ys))
    den = sum((i - mx) ** 2 for i in range(n))
    return num / den


def read_json_line(proc: "subprocess.Popen[str]", timeout: float, what: str) -> Dict[str, Any]:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise TimeoutError(f"{what}: no answer within {timeout}s")
    line = proc.stdout.readline()
    if not line:
        err = proc.stderr.read() if proc.stderr else ""
        raise RuntimeError(f"{what}: child exited (rc={proc.poll()}): {err[-2000:]}")
    out: Dict[str, Any] = json.loads(line)
    return out


class Child:
    """tests/rel_child.py ROLE ARGS... in a subprocess."""

    def __init__(self, *args: str, env: Optional[Dict[str, str]] = None) -> None:
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "rel_child.py"), *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env or child_env(), text=True)
        self.pid = self.proc.pid

    def line(self, timeout: float = 20.0, what: str = "child") -> Dict[str, Any]:
        return read_json_line(self.proc, timeout, what)

    def post(self, op: str, **kw: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()

    def call(self, op: str, timeout: float = 20.0, **kw: Any) -> Dict[str, Any]:
        self.post(op, **kw)
        return self.answer(op, timeout)

    def answer(self, op: str, timeout: float = 20.0) -> Dict[str, Any]:
        out = self.line(timeout, op)
        if not out.pop("ok", True):
            raise RuntimeError(f"child {op} failed: {out.get('error')}")
        return out

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, timeout: float = 10.0) -> str:
        """Close stdin (children exit on EOF), wait; kill if needed. Returns stderr."""
        err = ""
        try:
            if self.proc.stdin is not None and not self.proc.stdin.closed:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stderr is not None:
            err = self.proc.stderr.read()
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()
        return err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


class GoodClient:
    """An in-process RDMA CM client: connect, write a pattern, read it back."""

    def __init__(self) -> None:
        self.dev = pydoca.Device.open(iface="lo")
        self.pe = pydoca.ProgressEngine()
        self.rdma = pydoca.Rdma(self.dev, self.pe)
        self.inv = pydoca.BufferInventory(16)
        self.src = bytearray(4096)
        self.back = bytearray(4096)
        self.src_mm = pydoca.MemoryMap(self.dev, self.src, access=Access.LOCAL_READ_WRITE)
        self.back_mm = pydoca.MemoryMap(self.dev, self.back, access=Access.LOCAL_READ_WRITE)

    def check(self, port: int, mmap_b64: str) -> bool:
        conn = self.rdma.connect_to("127.0.0.1", port).wait_established(5)
        try:
            with pydoca.MemoryMap.from_export(self.dev, base64.b64decode(mmap_b64)) as remote:
                self.src[:] = os.urandom(len(self.src))
                self.rdma.write(conn, self.inv.buffer(self.src_mm), self.inv.buffer(remote, length=4096)).result(5)
                self.back[:] = bytes(4096)
                self.rdma.read(conn, self.inv.buffer(remote, length=4096),
                               self.inv.buffer(self.back_mm, empty=True)).result(5)
                return self.back == self.src
        finally:
            conn.disconnect()
            self.pe.progress_all()

    def close(self) -> None:
        self.dev.close()
        self.inv.close()
        self.pe.close()


def wait_until(pred: Any, timeout: float, step: float = 0.02) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())


def summary(values: List[float]) -> Dict[str, float]:
    if not values:
        return {}
    s = sorted(values)
    return {"min": s[0], "median": s[len(s) // 2], "max": s[-1]}
