"""The samples, run as real responder/requester process pairs: RDMA CM on
127.0.0.1, descriptor files in a temp dir, and both across two network
namespaces joined by a veth pair."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

import pytest
from netns import NetnsPair, ns_exec, veth_namespaces
from rdma_util import free_port

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
PAIRS = ["rdma_write", "rdma_read", "rdma_send_receive", "rdma_send_immediate", "rdma_write_immediate",
         "rdma_atomic"]
SIZE = {"rdma_atomic": None}             # default (1 MiB) elsewhere
WAIT = 60.0                              # bound of every subprocess wait in this file
SUMMARY = r"OK \d+ bytes( x \d+)? in [\d.]+ ms \(([\d.]+ us/op, )?[\d.]+ MB/s\)"


class Proc:
    """A sample process; stdout/stderr collected by threads (no pipe stalls)."""

    def __init__(self, argv: Sequence[str], *, prefix: Sequence[str] = ()) -> None:
        self.argv = [*prefix, sys.executable, *argv]
        self.popen = subprocess.Popen(self.argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.out: List[str] = []
        self.err: List[str] = []
        self._threads = [threading.Thread(target=self._pump, args=(s, dst), daemon=True)
                         for s, dst in ((self.popen.stdout, self.out), (self.popen.stderr, self.err))]
        for t in self._threads:
            t.start()

    @staticmethod
    def _pump(stream: object, dst: List[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            dst.append(line)
        stream.close()  # type: ignore[attr-defined]

    def wait_stderr(self, needle: str, timeout: float = WAIT) -> None:
        """Wait until ``needle`` appears on stderr (fails if the process exits first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(needle in line for line in self.err):
                return
            if self.popen.poll() is not None:
                self.finish(1)
                pytest.fail(f"{self.argv} exited {self.popen.returncode} before printing {needle!r}:\n"
                            f"{self.stderr}")
            time.sleep(0.02)
        pytest.fail(f"{self.argv} did not print {needle!r} within {timeout}s:\n{self.stderr}")

    def finish(self, timeout: float = WAIT) -> int:
        try:
            rc = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = self.popen.wait(10)
        for t in self._threads:
            t.join(10)
        return rc

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)

    @property
    def stdout(self) -> str:
        return "".join(self.out)

    @property
    def stderr(self) -> str:
        return "".join(self.err)


@pytest.fixture
def procs() -> Iterator[List[Proc]]:
    """Processes started by a test; stragglers are killed at teardown."""
    started: List[Proc] = []
    yield started
    for p in started:
        p.kill()
        p.finish(10)



def sample(name: str, *args: str) -> List[str]:
    return [str(SAMPLES / f"{name}.py"), *args]


def run_pair(procs: List[Proc], name: str, responder: Sequence[str], requester: Sequence[str], *,
             cm: bool, prefix_resp: Sequence[str] = (), prefix_req: Sequence[str] = (),
             expect_ok: bool = True) -> tuple[Proc, Proc]:
    """Start the responder, then (once it listens, in CM mode) the requester;
    wait for both (bounded) and check both exit 0 with their summary line."""
    resp = Proc(sample(name, "responder", *responder), prefix=prefix_resp)
    procs.append(resp)
    if cm:
        resp.wait_stderr("listening on")
    req = Proc(sample(name, "requester", *requester), prefix=prefix_req)
    procs.append(req)
    rc_req, rc_resp = req.finish(), resp.finish()
    if expect_ok:
        report = (f"requester rc={rc_req}\nstdout:\n{req.stdout}\nstderr:\n{req.stderr}\n"
                  f"responder rc={rc_resp}\nstdout:\n{resp.stdout}\nstderr:\n{resp.stderr}")
        assert rc_req == 0 and rc_resp == 0, report
        assert re.fullmatch(rf"{name} requester: {SUMMARY}(, .*)?\n", req.stdout), report
        assert re.fullmatch(rf"{name} responder: {SUMMARY}(, .*)?\n", resp.stdout), report
    return resp, req


def size_args(name: str, size: Optional[str] = "256K") -> List[str]:
    return [] if name == "rdma_atomic" or size is None else ["--size", size]


# -- loopback: RDMA CM and descriptor files ------------------------------------------------
@pytest.mark.parametrize("name", PAIRS)
def test_pair_rdma_cm(procs: List[Proc], name: str) -> None:
    port = free_port()
    resp, req = run_pair(procs, name, ["--listen", f"127.0.0.1:{port}", *size_args(name), "--timeout", "30"],
                         ["--connect", f"127.0.0.1:{port}", "--timeout", "30"], cm=True)
    if name != "rdma_atomic":
        assert f" {256 * 1024} bytes" in req.stdout


@pytest.mark.parametrize("name", PAIRS)
def test_pair_descriptor_dir(procs: List[Proc], name: str, tmp_path: Path) -> None:
    d = str(tmp_path / "desc")
    run_pair(procs, name, ["--descriptor-dir", d, *size_args(name), "--timeout", "30"],
             ["--descriptor-dir", d, "--timeout", "30"], cm=False)
    assert os.listdir(d) == [], "both sides remove their descriptor files"


def test_write_iterations_and_sizes(procs: List[Proc]) -> None:
    """8 bytes and 1 MiB (the default), repeated, in polling mode."""
    for size in ("8", None):
        port = free_port()
        _, req = run_pair(procs, "rdma_write",
                          ["--listen", f"127.0.0.1:{port}", *size_args("rdma_write", size)],
                          ["--connect", f"127.0.0.1:{port}", "--iterations", "20", "--progress", "polling"],
                          cm=True)
        want = 8 if size == "8" else 1 << 20
        assert f"OK {want} bytes x 20 in" in req.stdout


def test_requester_size_must_match(procs: List[Proc], tmp_path: Path) -> None:
    d = str(tmp_path)
    resp = Proc(sample("rdma_read", "responder", "--descriptor-dir", d, "--size", "4K", "--timeout", "3"))
    procs.append(resp)
    req = Proc(sample("rdma_read", "requester", "--descriptor-dir", d, "--size", "8K", "--timeout", "3"))
    procs.append(req)
    assert req.finish() == 1
    assert "size mismatch: the responder uses 4096 bytes, --size asks for 8192" in req.stderr
    assert resp.finish() == 1


def test_data_mismatch_fails_both_sides(procs: List[Proc]) -> None:
    """Different pattern seeds: the responder's verification fails, and both exit 1."""
    port = free_port()
    resp, req = run_pair(procs, "rdma_write", ["--listen", f"127.0.0.1:{port}", "--size", "4K", "--seed", "1"],
                         ["--connect", f"127.0.0.1:{port}", "--seed", "2"], cm=True, expect_ok=False)
    assert resp.popen.returncode == 1 and req.popen.returncode == 1, (resp.stderr, req.stderr)
    assert "written data: " in resp.stderr and "bytes differ" in resp.stderr
    assert "the responder reports: written data:" in req.stderr
    assert resp.stdout == "" and req.stdout == ""


def test_read_mismatch_detected_by_requester(procs: List[Proc], tmp_path: Path) -> None:
    d = str(tmp_path)
    resp, req = run_pair(procs, "rdma_read", ["--descriptor-dir", d, "--size", "4K", "--seed", "1"],
                         ["--descriptor-dir", d], cm=False, expect_ok=False)
    assert req.popen.returncode == 1 and resp.popen.returncode == 1, (resp.stderr, req.stderr)
    assert "read data: " in req.stderr
    assert "the requester reports: read data:" in resp.stderr


def test_requester_nothing_listening(procs: List[Proc]) -> None:
    port = free_port()
    start = time.monotonic()
    req = Proc(sample("rdma_write", "requester", "--connect", f"127.0.0.1:{port}", "--timeout", "5"))
    procs.append(req)
    rc = req.finish(30)
    elapsed = time.monotonic() - start
    assert rc == 1, req.stderr
    assert elapsed < 5 + 10
    assert f"rdma_write requester: FAILED: " in req.stderr
    assert f"127.0.0.1:{port}" in req.stderr
    assert "Traceback" not in req.stderr
    assert req.stdout == ""


def test_requester_no_descriptor(procs: List[Proc], tmp_path: Path) -> None:
    req = Proc(sample("rdma_read", "requester", "--descriptor-dir", str(tmp_path), "--timeout", "1"))
    procs.append(req)
    assert req.finish(30) == 1
    assert "responder.json: descriptor file not found after waiting 1s" in req.stderr


def test_stale_descriptor_is_skipped(procs: List[Proc], tmp_path: Path) -> None:
    """A responder.json left by a process that has exited is not used."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import _common as c; "
            "c.write_descriptor(sys.argv[2], c.KIND_RESPONDER, "
            "{'sample': 'rdma_read', 'size': 4096, 'connection': b'x' * 64, 'memory': b'y' * 64})")
    path = tmp_path / "responder.json"
    subprocess.run([sys.executable, "-c", code, str(SAMPLES), str(path)], check=True, timeout=WAIT)
    req = Proc(sample("rdma_read", "requester", "--descriptor-dir", str(tmp_path), "--timeout", "1"))
    procs.append(req)
    assert req.finish() == 1
    assert "stale descriptor (process" in req.stderr and "has exited" in req.stderr


def test_wrong_sample_pair_is_refused(procs: List[Proc], tmp_path: Path) -> None:
    d = str(tmp_path)
    resp = Proc(sample("rdma_write", "responder", "--descriptor-dir", d, "--timeout", "3"))
    procs.append(resp)
    req = Proc(sample("rdma_read", "requester", "--descriptor-dir", d, "--timeout", "3"))
    procs.append(req)
    assert req.finish() == 1
    assert "runs sample 'rdma_write', not 'rdma_read'" in req.stderr
    assert resp.finish() == 1
    assert "requester.json: descriptor file not found" in resp.stderr


def test_unknown_device(procs: List[Proc]) -> None:
    req = Proc(sample("rdma_write", "requester", "--connect", "127.0.0.1:1", "--device", "nope0"))
    procs.append(req)
    assert req.finish() == 1
    assert "no DOCA device named 'nope0'" in req.stderr


def test_missing_backend_is_one_line() -> None:
    import pydoca
    if pydoca.backend.name == "doca":
        pytest.skip("real DOCA is installed: PYDOCA_BACKEND=doca loads")
    env = {**os.environ, "PYDOCA_BACKEND": "doca"}
    for argv in (sample("rdma_write", "requester", "--connect", "127.0.0.1:1"), sample("device_discovery")):
        out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=WAIT, cwd=ROOT,
                             env=env)
        assert out.returncode == 1
        assert "FAILED: cannot load pydoca: PYDOCA_BACKEND=doca" in out.stderr
        assert "Traceback" not in out.stderr


def test_help() -> None:
    for name in PAIRS:
        for argv in (["--help"], ["responder", "--help"], ["requester", "--help"]):
            out = subprocess.run([sys.executable, *sample(name, *argv)], capture_output=True, text=True,
                                 timeout=WAIT, cwd=ROOT)
            assert out.returncode == 0, out.stderr
            assert "usage:" in out.stdout
    out = subprocess.run([sys.executable, *sample("rdma_write", "requester")], capture_output=True, text=True,
                         timeout=WAIT, cwd=ROOT)
    assert out.returncode == 2 and "--connect" in out.stderr


def test_device_discovery() -> None:
    text = subprocess.run([sys.executable, *sample("device_discovery")], capture_output=True, text=True,
                          timeout=WAIT, cwd=ROOT)
    assert text.returncode == 0, text.stderr
    assert re.search(r"^device_discovery: OK \d+ devices in [\d.]+ ms$", text.stdout, re.M)
    assert "<- chosen" in text.stdout
    raw = subprocess.run([sys.executable, *sample("device_discovery", "--json")], capture_output=True, text=True,
                         timeout=WAIT, cwd=ROOT)
    assert raw.returncode == 0, raw.stderr
    doc = json.loads(raw.stdout)
    lo = [d for d in doc["devices"] if d["iface_name"] == "lo"]
    assert lo, doc
    dev = lo[0]
    assert dev["ipv4"] == "127.0.0.1"
    assert dev["gids"] and all({"index", "gid", "type", "ip", "link_local"} <= set(g) for g in dev["gids"])
    chosen = [g for g in dev["gids"] if g["index"] == dev["chosen_gid_index"]]
    assert chosen and not chosen[0]["link_local"]
    if doc["backend"] == "soft":
        assert chosen[0]["type"] == "RoCE v2" and chosen[0]["ip"] == "127.0.0.1"


# -- two network namespaces joined by a veth pair ----------------------------------------------
@pytest.fixture(scope="module")
def netns() -> Iterator[NetnsPair]:
    """Namespaces A (10.200.77.1/30 on veth va) and B (10.200.77.2/30 on vb), one setup for the module."""
    with veth_namespaces("10.200.77") as pair:
        yield pair


def _port(name: str, base: int) -> int:
    """A port per pair: no test waits for another one's TIME_WAIT on the same port."""
    return base + PAIRS.index(name)


@pytest.mark.parametrize("name", PAIRS)
def test_netns_rdma_cm(procs: List[Proc], netns: NetnsPair, name: str) -> None:
    port = _port(name, 18520)
    _, req = run_pair(procs, name, ["--listen", f"{netns.ip_a}:{port}", *size_args(name, "1M"), "--timeout", "30"],
                      ["--connect", f"{netns.ip_a}:{port}", "--timeout", "30"], cm=True,
                      prefix_resp=ns_exec(netns.a), prefix_req=ns_exec(netns.b))
    if name != "rdma_atomic":
        assert f" {1 << 20} bytes" in req.stdout


@pytest.mark.parametrize("name", PAIRS)
def test_netns_descriptor_dir(procs: List[Proc], netns: NetnsPair, name: str, tmp_path: Path) -> None:
    d = str(tmp_path / "desc")
    _, req = run_pair(procs, name, ["--descriptor-dir", d, "--device", netns.va, *size_args(name, "1M"),
                                    "--timeout", "30"],
                      ["--descriptor-dir", d, "--device", netns.vb, "--timeout", "30"], cm=False,
                      prefix_resp=ns_exec(netns.a), prefix_req=ns_exec(netns.b))
    if name != "rdma_atomic":
        assert f" {1 << 20} bytes" in req.stdout
    assert os.listdir(d) == [], "both sides remove their descriptor files"


def test_netns_loopbacks_are_separate(procs: List[Proc], netns: NetnsPair) -> None:
    """Each namespace has its own loopback: a requester in B connecting to
    127.0.0.1 does not reach a responder listening on A's loopback; both fail
    cleanly within their timeouts."""
    resp = Proc(sample("rdma_write", "responder", "--listen", "127.0.0.1:18516", "--size", "4K", "--timeout", "4"),
                prefix=ns_exec(netns.a))
    procs.append(resp)
    resp.wait_stderr("listening on 127.0.0.1:18516")
    req = Proc(sample("rdma_write", "requester", "--connect", "127.0.0.1:18516", "--timeout", "4"),
               prefix=ns_exec(netns.b))
    procs.append(req)
    assert req.finish() == 1, req.stdout
    assert "rdma_write requester: FAILED: " in req.stderr and "127.0.0.1:18516" in req.stderr
    assert resp.finish() == 1, resp.stdout
    assert "rdma_write responder: FAILED: timed out after 4s waiting for a requester to connect to port 18516" \
        in resp.stderr
