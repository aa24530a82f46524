"""`pydoca serve` in one network namespace, `pydoca request` in another: the
peer CLI round trip over a veth pair, by RDMA CM address and by descriptor
file. The server is samples/client_server (its spec and handlers), started
once for the module; the namespaces come from netns.py (root only, skipped
with the reason elsewhere). Both sides use the software backend: the veth
pair has no RDMA hardware behind it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, List

import pytest
from netns import NetnsPair, ns_exec, veth_namespaces, wait_listening

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "client_server"
PORT = 18600                         # inside namespace A: nothing else listens there
WAIT = 60.0                          # bound of every subprocess wait in this file
MODES = ["address", "descriptor"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYDOCA_BACKEND": "soft", "PYTHONUNBUFFERED": "1"}


@dataclass
class Served:
    netns: NetnsPair
    address: str
    descriptor: Path
    proc: "subprocess.Popen[Any]"
    log: Path

    def target(self, mode: str) -> str:
        return self.address if mode == "address" else str(self.descriptor)


def _stop(proc: "subprocess.Popen[Any]") -> int:
    """SIGTERM, then SIGKILL after 10 s; returns the exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait(10)


@pytest.fixture(scope="module")
def netns() -> Iterator[NetnsPair]:
    """Namespaces A (10.200.78.1/30) and B (10.200.78.2/30), one setup for the module."""
    with veth_namespaces("10.200.78") as pair:
        yield pair


@pytest.fixture(scope="module")
def served(netns: NetnsPair, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`python -m pydoca.cli serve spec.yaml` in namespace A, on A's veth address,
    with a descriptor file; stopped (SIGTERM) at teardown, which must be clean."""
    d = tmp_path_factory.mktemp("peer_netns")
    log = d / "server.log"
    desc = d / "server.json"
    address = f"{netns.ip_a}:{PORT}"
    with open(log, "wb") as fh:                   # a file, not a pipe: no reader needed, never stalls
        proc = subprocess.Popen([*ns_exec(netns.a), sys.executable, "-m", "pydoca.cli", "serve", "spec.yaml",
                                 "--listen", address, "--descriptor-file", str(desc)],
                                cwd=SAMPLE, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                env=_env())
    try:
        try:
            wait_listening(netns.a, netns.ip_a, PORT, timeout=WAIT, proc=proc)
            deadline = time.monotonic() + WAIT
            while not desc.exists() and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            assert desc.exists(), f"no descriptor file {desc}"
        except Exception as exc:
            _stop(proc)
            raise AssertionError(f"pydoca serve did not come up: {exc}\n{log.read_text(errors='replace')}") from exc
        yield Served(netns, address, desc, proc, log)
    finally:
        rc = _stop(proc)
    text = log.read_text(errors="replace")
    assert rc == 0, text[-3000:]
    assert "pydoca serve: stopped" in text and "Traceback" not in text, text[-3000:]
    assert not desc.exists(), "serve removes its descriptor file on exit"


def request(srv: Served, mode: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    """`python -m pydoca.cli request TARGET ARGS...` in namespace B (bounded)."""
    return subprocess.run([*ns_exec(srv.netns.b), sys.executable, "-m", "pydoca.cli", "request",
                           srv.target(mode), *args],
                          capture_output=True, stdin=subprocess.DEVNULL, cwd=ROOT, env=_env(), timeout=WAIT)


def messages(out: subprocess.CompletedProcess[bytes]) -> List[str]:
    """stderr without the backend notice lines ('pydoca: ...')."""
    return [ln for ln in out.stderr.decode(errors="replace").splitlines() if not ln.startswith("pydoca: ")]


def ok(out: subprocess.CompletedProcess[bytes]) -> subprocess.CompletedProcess[bytes]:
    assert out.returncode == 0, f"{out.args}: rc {out.returncode}\n{out.stderr.decode(errors='replace')}"
    return out


@pytest.mark.parametrize("mode", MODES)
def test_round_trip(served: Served, mode: str, tmp_path: Path) -> None:
    out = ok(request(served, mode, "endpoints"))
    rows = [ln.split() for ln in out.stdout.decode().splitlines()]
    assert rows[0] == ["ID", "PATH", "KIND", "SIZE"]
    assert {r[1]: r[2] for r in rows[1:]} == {"/upload": "write", "/stats": "read", "/echo": "call",
                                              "/upper": "call"}

    blob = os.urandom(200_000)
    src = tmp_path / "blob.bin"
    src.write_bytes(blob)
    out = ok(request(served, mode, "write", "/upload", "--in", str(src)))
    assert messages(out) == ["wrote 200000 bytes to /upload"]

    stats_file = tmp_path / "stats.json"
    ok(request(served, mode, "read", "/stats", "--out", str(stats_file)))
    stats = json.loads(stats_file.read_bytes().rstrip(b"\0"))
    assert stats["uploads"] >= 1 and stats["bytes"] >= len(blob)
    assert stats["last_crc32"] == zlib.crc32(blob), stats       # the upload just made, byte for byte

    text = f"hello from {served.netns.b} over {mode} \u00e9"
    out = ok(request(served, mode, "call", "/echo", "--data", text))
    assert out.stdout == text.encode()


@pytest.mark.parametrize("mode", MODES)
def test_failures_are_one_line(served: Served, mode: str) -> None:
    for args in (("call", "/nope", "--data", "x"), ("read", "/nope")):
        out = request(served, mode, *args)
        lines = messages(out)
        assert out.returncode != 0 and out.stdout == b"", (out.returncode, out.stdout)
        assert len(lines) == 1, lines
        assert "NotFound" in lines[0] and "/nope" in lines[0], lines
    out = ok(request(served, mode, "call", "/echo", "--data", "still serving"))      # the server is unaffected
    assert out.stdout == b"still serving"


def test_loopback_of_b_is_not_a(served: Served) -> None:
    """Namespace B's 127.0.0.1 is its own: nothing listens there, and the
    request fails at once with one line (no wait for the timeout)."""
    start = time.monotonic()
    out = subprocess.run([*ns_exec(served.netns.b), sys.executable, "-m", "pydoca.cli", "request",
                          f"127.0.0.1:{PORT}", "endpoints", "--timeout", "20"],
                         capture_output=True, stdin=subprocess.DEVNULL, cwd=ROOT, env=_env(), timeout=WAIT)
    lines = messages(out)
    assert out.returncode != 0 and len(lines) == 1 and "Unavailable" in lines[0], lines
    assert time.monotonic() - start < 15
