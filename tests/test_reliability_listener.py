"""Hostile connections against listeners: a raw ``Rdma.listen`` listener in a
child process and ``pydoca serve``. Garbage, every truncation of a valid RDMA
CM request, valid requests abandoned or followed by garbage, and slow-loris
clients: the listener stays alive, still serves a good client afterwards, and
its RSS and fd count stay flat. (tools/cm_probe.py crafts the connections.)"""
from __future__ import annotations

import os
import selectors
import socket
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest
from reliability_util import CHILD_TIMEOUT_MS, Child, GoodClient, fd_count, rss_kb, scale, summary, wait_until

from rdma_util import free_port

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import cm_probe  # noqa: E402

pytestmark = pytest.mark.timeout(300)

ECHO_SPEC = """\
version: 1
name: relsvc
endpoints:
  - {path: /echo, type: call, buffer: {size: 4KiB}, handler: "peer_handlers:echo"}
"""


class Target:
    """A listener under attack: its pid, port and a good-client check."""

    def __init__(self, kind: str, tmp: Path) -> None:
        self.kind = kind
        self.port = free_port()
        self.stderr = ""
        if kind == "raw":
            self.child = Child("listener", str(self.port), "600")
            ready = self.child.line(20, "listener ready")
            assert ready.get("ready"), ready
            self.mmap = ready["mmap"]
            self.pid = self.child.pid
            self.client = GoodClient()
        else:
            from peer_util import Server, write_spec
            spec = write_spec(tmp, ECHO_SPEC)
            self.server = Server(spec)
            self.port = self.server.port
            self.pid = self.server.popen.pid

    def alive(self) -> bool:
        if self.kind == "raw":
            return self.child.alive()
        return self.server.popen.poll() is None

    def serves(self) -> bool:
        if self.kind == "raw":
            return self.client.check(self.port, self.mmap)
        from pydoca.peer import Requester
        with Requester.connect(f"127.0.0.1:{self.port}") as req:
            return bytes(req.call("/echo", b"still alive")) == b"still alive"

    def close(self) -> str:
        if self.kind == "raw":
            self.client.close()
            err = self.child.close()
            assert "died" not in err
            return err
        self.server.terminate()
        return self.server.stderr


@pytest.fixture(params=["raw", "serve"])
def target(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Target]:
    monkeypatch.setenv("SOFTDOCA_TIMEOUT_MS", str(CHILD_TIMEOUT_MS))   # for `pydoca serve`'s links
    monkeypatch.setenv("PYDOCA_BACKEND", "soft")
    t = Target(request.param, tmp_path)
    yield t
    t.stderr = t.close()


def _settle(pid: int, base_fds: int, timeout: float = 8.0) -> int:
    """Wait until the listener has closed the hostile links (bounded); its fd count."""
    wait_until(lambda: fd_count(pid) <= base_fds, timeout, 0.05)
    return fd_count(pid)


def _plan(n: int) -> List[Tuple[str, int]]:
    """Every prefix length 0..120 of a valid request first, then a mix."""
    full = len(cm_probe.cm_request())
    plan: List[Tuple[str, int]] = [("prefix", k) for k in range(full + 1)]
    mix = [("valid-close", 0), ("valid-garbage", 0), ("garbage", 256), ("connect-close", 0), ("valid-wait", 0),
           ("garbage", 4096), ("prefix", 96), ("valid-garbage", 5000)]
    i = 0
    while len(plan) < n:
        plan.append(mix[i % len(mix)])
        i += 1
    return plan


def test_hostile_connections_leave_the_listener_serving(target: Target, reliability_report: Any) -> None:
    n = scale(150, 1000)
    # warm up: a good client and a few hostile connections, so lazily created state exists
    assert target.serves()
    for kind in ("valid-close", "garbage", "prefix"):
        cm_probe.attack("127.0.0.1", target.port, kind, n=50)
    assert target.serves()
    time.sleep(1.5)
    base_fds, base_rss = fd_count(target.pid), rss_kb(target.pid)

    outcomes: Dict[str, int] = {}
    for kind, k in _plan(n):
        res = cm_probe.attack("127.0.0.1", target.port, kind, n=k, timeout=3.0)
        key = res.split(" ")[0]
        outcomes[key] = outcomes.get(key, 0) + 1
        assert target.alive(), f"listener died after {kind}:{k}"
    fds = _settle(target.pid, base_fds)
    served = target.serves()
    rss = rss_kb(target.pid)
    alive = target.alive()
    reliability_report.add(f"hostile connections ({target.kind})", trials=n, passed=n if alive and served else 0,
                           failed=0 if alive and served else n, rss_kb_before=base_rss, rss_kb_after=rss,
                           rss_kb_per_conn=(rss - base_rss) / n, fds_before=base_fds, fds_after=fds,
                           refused=outcomes.get("refused", 0))
    assert alive and served
    assert outcomes.get("refused", 0) == 0, outcomes
    assert fds <= base_fds + 2, (base_fds, fds)
    # flat: well under 1 KiB of growth per hostile connection (and 4 MiB in all)
    assert rss - base_rss < max(4096, n // 2), (base_rss, rss)


def _slowloris(port: int, n: int, pause: float, limit: float) -> List[float]:
    """``n`` clients dribbling a valid request one byte per ``pause`` seconds;
    returns how long each lived before the listener cut it (``limit`` if never)."""
    req = cm_probe.cm_request()
    sel = selectors.DefaultSelector()
    socks: Dict[socket.socket, Dict[str, Any]] = {}
    t0 = time.monotonic()
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.setblocking(False)
        socks[s] = {"sent": 0, "start": time.monotonic(), "cut": None}
        sel.register(s, selectors.EVENT_READ)
    try:
        next_send = time.monotonic()
        while time.monotonic() - t0 < limit and any(v["cut"] is None for v in socks.values()):
            for key, _ in sel.select(timeout=0.02):
                s = key.fileobj  # type: ignore[assignment]
                try:
                    data = s.recv(4096)  # type: ignore[attr-defined]
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data and socks[s]["cut"] is None:  # type: ignore[index]
                    socks[s]["cut"] = time.monotonic() - socks[s]["start"]  # type: ignore[index]
                    sel.unregister(s)
            if time.monotonic() >= next_send:
                next_send += pause
                for s, v in socks.items():
                    if v["cut"] is None and v["sent"] < len(req) - 1:   # never the last byte
                        try:
                            s.send(req[v["sent"]:v["sent"] + 1])
                            v["sent"] += 1
                        except OSError:
                            v["cut"] = time.monotonic() - v["start"]
                            sel.unregister(s)
    finally:
        for s in socks:
            s.close()
        sel.close()
    return [v["cut"] if v["cut"] is not None else limit for v in socks.values()]


def test_slowloris_clients_are_cut_and_do_not_block(target: Target, reliability_report: Any) -> None:
    n = scale(20, 200)
    # `pydoca serve` uses the default 5 s connection request timeout: links are cut after max(it, SOFTDOCA_TIMEOUT_MS)
    bound = (CHILD_TIMEOUT_MS / 1000 if target.kind == "raw" else 5.0) + 2.0
    assert target.serves()
    base_fds = fd_count(target.pid)
    import threading
    good: List[bool] = []
    worker = threading.Thread(target=lambda: (time.sleep(0.3), good.append(target.serves())))
    worker.start()                                  # a good client while the slow ones hold their links
    lived = _slowloris(target.port, n, 0.1, bound + 3)
    worker.join(30)
    fds = _settle(target.pid, base_fds)
    cut = sum(x <= bound for x in lived)
    reliability_report.add(f"slow-loris ({target.kind})", trials=n, passed=cut, failed=n - cut,
                           cut_after_s=summary(lived)["max"], bound_s=bound, good_client=bool(good and good[0]),
                           fds_before=base_fds, fds_after=fds)
    assert good == [True]
    assert cut == n, lived
    assert target.alive() and target.serves()
    assert fds <= base_fds + 2


def test_probe_tool_reproduces_the_listener_killing_request() -> None:
    """tools/cm_probe.py: its raw listener survives a request abandoned before the answer."""
    port = free_port()
    from reliability_util import child_env
    import subprocess
    proc = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(cm_probe.__file__), "cm_probe.py"),
                             "--listen", str(port), "--seconds", "4"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env())
    try:
        assert proc.stdout is not None
        assert "listening" in proc.stdout.readline()
        for kind in ("valid-close", "valid-garbage", "valid-close"):
            cm_probe.attack("127.0.0.1", port, kind)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0 and "listener survived" in out, out
