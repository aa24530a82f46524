"""The samples, run as real process pairs (the side that listens in RDMA CM
mode, then the side that connects): RDMA CM on 127.0.0.1, descriptor files in
a temp dir, and both across two network namespaces joined by a veth pair;
plus the failures they must report in one line (exit 1, bounded)."""
from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence

import pytest
from netns import NetnsPair, ns_exec, veth_namespaces
from rdma_util import free_port

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
# (listening side, connecting side): one pair per DOCA sample pair, plus atomics
PAIRS = [("rdma_write_responder", "rdma_write_requester"),
         ("rdma_read_responder", "rdma_read_requester"),
         ("rdma_write_immediate_responder", "rdma_write_immediate_requester"),
         ("rdma_receive", "rdma_send"),
         ("rdma_receive_immediate", "rdma_send_immediate"),
         ("rdma_atomic_responder", "rdma_atomic_requester")]
IDS = [listener for listener, _ in PAIRS]
WAIT = 60.0                              # bound of every subprocess wait in this file
# the connecting side times the transfer; the listening side reports what it checked, no figure
TIMED = r"OK \d+ bytes( x \d+)? in [\d.]+ ms \(([\d.]+ us/op, )?[\d.]+ MB/s\)(, .*)?"
TIMED_ATOMIC = r"OK 4 operations in [\d.]+ ms \(\d+ ops/s\), old values verified"
CHECKED = r"OK \d+ bytes, (data|counter).* (verified|served)"


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


def pair_of(listener: str) -> tuple[str, str]:
    return next(p for p in PAIRS if p[0] == listener)


def size_args(listener: str, size: str = "256K") -> tuple[List[str], List[str]]:
    """--size for (listener, connector): a send must match the posted receive;
    requesters of write/read/write_imm take the size of the responder's memory."""
    if listener == "rdma_atomic_responder":
        return [], []
    return ["--size", size], (["--size", size] if listener.startswith("rdma_receive") else [])


def one_line(text: str) -> str:
    """The one FAILED line of a sample's stderr (its progress notes aside)."""
    lines = [ln for ln in text.splitlines() if "FAILED" in ln or "Traceback" in ln]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def run_pair(procs: List[Proc], listener: str, listener_args: Sequence[str], connector_args: Sequence[str], *,
             cm: bool, prefix_l: Sequence[str] = (), prefix_c: Sequence[str] = (),
             expect_ok: bool = True) -> tuple[Proc, Proc]:
    """Start the listening side, then (once it listens, in CM mode) the other;
    wait for both (bounded); unless told otherwise, check both exit 0 with
    their summary line: a timed one on the connecting side only."""
    connector = pair_of(listener)[1]
    lis = Proc(sample(listener, *listener_args), prefix=prefix_l)
    procs.append(lis)
    if cm:
        lis.wait_stderr("listening on")
    con = Proc(sample(connector, *connector_args), prefix=prefix_c)
    procs.append(con)
    rc_c, rc_l = con.finish(), lis.finish()
    if expect_ok:
        report = (f"{connector} rc={rc_c}\nstdout:\n{con.stdout}\nstderr:\n{con.stderr}\n"
                  f"{listener} rc={rc_l}\nstdout:\n{lis.stdout}\nstderr:\n{lis.stderr}")
        assert rc_c == 0 and rc_l == 0, report
        timed = TIMED_ATOMIC if listener == "rdma_atomic_responder" else TIMED
        assert re.fullmatch(rf"{connector}: {timed}\n", con.stdout), report
        assert re.fullmatch(rf"{listener}: {CHECKED}\n", lis.stdout), report
    return lis, con


# -- loopback: RDMA CM and descriptor files ------------------------------------------------
@pytest.mark.parametrize("listener", IDS)
def test_pair_rdma_cm(procs: List[Proc], listener: str) -> None:
    port = free_port()
    size_l, size_c = size_args(listener)
    lis, con = run_pair(procs, listener, ["--listen", f"127.0.0.1:{port}", *size_l, "--timeout", "30"],
                        ["--connect", f"127.0.0.1:{port}", *size_c, "--timeout", "30"], cm=True)
    if listener != "rdma_atomic_responder":
        assert f"OK {256 * 1024} bytes in " in con.stdout and f"OK {256 * 1024} bytes, " in lis.stdout


@pytest.mark.parametrize("listener", IDS)
def test_pair_descriptor_dir(procs: List[Proc], listener: str, tmp_path: Path) -> None:
    d = str(tmp_path / "desc")
    size_l, size_c = size_args(listener)
    run_pair(procs, listener, ["--descriptor-dir", d, *size_l, "--timeout", "30"],
             ["--descriptor-dir", d, *size_c, "--timeout", "30"], cm=False)
    assert os.listdir(d) == [], "both sides remove their descriptor files"


def test_write_iterations_and_sizes(procs: List[Proc]) -> None:
    """8 bytes and 1 MiB (the default), repeated, in polling mode."""
    for size in (["--size", "8"], []):
        port = free_port()
        _, con = run_pair(procs, "rdma_write_responder", ["--listen", f"127.0.0.1:{port}", *size],
                          ["--connect", f"127.0.0.1:{port}", "--iterations", "20", "--progress", "polling"],
                          cm=True)
        want = 8 if size else 1 << 20
        assert f"OK {want} bytes x 20 in" in con.stdout and " us/op, " in con.stdout


def test_read_iterations(procs: List[Proc], tmp_path: Path) -> None:
    _, con = run_pair(procs, "rdma_read_responder", ["--descriptor-dir", str(tmp_path), "--size", "64K"],
                      ["--descriptor-dir", str(tmp_path), "--iterations", "5"], cm=False)
    assert f"OK {64 * 1024} bytes x 5 in" in con.stdout


def test_requester_size_must_match(procs: List[Proc], tmp_path: Path) -> None:
    d = str(tmp_path)
    lis, con = run_pair(procs, "rdma_read_responder", ["--descriptor-dir", d, "--size", "4K", "--timeout", "5"],
                        ["--descriptor-dir", d, "--size", "8K", "--timeout", "5"], cm=False, expect_ok=False)
    assert con.popen.returncode == 1
    assert one_line(con.stderr).endswith(
        "FAILED: size mismatch: the responder's memory is 4096 bytes, --size asks for 8192")
    assert lis.popen.returncode == 1 and "rdma_read_responder: FAILED: " in one_line(lis.stderr)


def test_write_mismatch_detected_by_responder(procs: List[Proc]) -> None:
    """Different pattern seeds: the responder's check fails (the requester did its part)."""
    port = free_port()
    lis, con = run_pair(procs, "rdma_write_responder",
                        ["--listen", f"127.0.0.1:{port}", "--size", "4K", "--seed", "1"],
                        ["--connect", f"127.0.0.1:{port}", "--seed", "2"], cm=True, expect_ok=False)
    assert con.popen.returncode == 0, con.stderr
    assert lis.popen.returncode == 1 and lis.stdout == ""
    assert "FAILED: written data: 4096 of 4096 bytes differ, first at offset 0" in one_line(lis.stderr)


def test_read_mismatch_detected_by_requester(procs: List[Proc], tmp_path: Path) -> None:
    d = str(tmp_path)
    lis, con = run_pair(procs, "rdma_read_responder", ["--descriptor-dir", d, "--size", "4K", "--seed", "1"],
                        ["--descriptor-dir", d], cm=False, expect_ok=False)
    assert con.popen.returncode == 1 and con.stdout == ""
    assert "rdma_read_requester: FAILED: read data: 4096 of 4096 bytes differ" in one_line(con.stderr)
    assert lis.popen.returncode == 0, lis.stderr


@pytest.mark.parametrize("listener", ["rdma_receive", "rdma_receive_immediate"])
def test_send_larger_than_posted_receive(procs: List[Proc], listener: str) -> None:
    port = free_port()
    lis, con = run_pair(procs, listener, ["--listen", f"127.0.0.1:{port}", "--size", "4K", "--timeout", "10"],
                        ["--connect", f"127.0.0.1:{port}", "--size", "8K", "--timeout", "10"], cm=True,
                        expect_ok=False)
    assert con.popen.returncode == 1 and lis.popen.returncode == 1
    assert "DOCA_ERROR_TOO_BIG" in one_line(con.stderr) and "8192 bytes" in con.stderr
    assert "DOCA_ERROR_TOO_BIG" in one_line(lis.stderr)


def test_requester_nothing_listening(procs: List[Proc]) -> None:
    port = free_port()
    start = time.monotonic()
    con = Proc(sample("rdma_write_requester", "--connect", f"127.0.0.1:{port}", "--timeout", "5"))
    procs.append(con)
    assert con.finish(30) == 1, con.stderr
    assert time.monotonic() - start < 5 + 10
    line = one_line(con.stderr)
    assert line.startswith("rdma_write_requester: FAILED: ") and f"127.0.0.1:{port}" in line
    assert con.stdout == ""


@pytest.mark.parametrize("listener, reason", [
    ("rdma_write_responder", "no incoming connection established within 2s"),
    ("rdma_receive", "timed out after 2s waiting for ReceiveTask")])
def test_nobody_comes(procs: List[Proc], listener: str, reason: str) -> None:
    """A listening side whose peer never connects gives up after --timeout."""
    start = time.monotonic()
    lis = Proc(sample(listener, "--listen", f"127.0.0.1:{free_port()}", "--size", "4K", "--timeout", "2"))
    procs.append(lis)
    assert lis.finish(30) == 1
    assert time.monotonic() - start < 2 + 10
    assert one_line(lis.stderr) == f"{listener}: FAILED: {reason}"


def test_requester_no_descriptor(procs: List[Proc], tmp_path: Path) -> None:
    con = Proc(sample("rdma_read_requester", "--descriptor-dir", str(tmp_path), "--timeout", "1"))
    procs.append(con)
    assert con.finish(30) == 1
    assert one_line(con.stderr).endswith("responder.json: descriptor file not found after waiting 1s "
                                         "(is the responder running with the same --descriptor-dir?)")


def _write_descriptor(path: Path, payload: Dict[str, Any], *, stay: bool) -> "subprocess.Popen[bytes]":
    """A process that writes a sample descriptor file, then exits or stays (60 s)."""
    code = ("import ast, sys, time; from pydoca.descriptor import write_descriptor; "
            "write_descriptor(sys.argv[1], 'pydoca-sample', ast.literal_eval(sys.argv[2])); "
            "print('ready', flush=True); time.sleep(60 if sys.argv[3] == '1' else 0)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path), repr(payload), "1" if stay else "0"],
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def test_stale_descriptor_is_skipped(procs: List[Proc], tmp_path: Path) -> None:
    """A responder.json left by a process that has exited is not used."""
    writer = _write_descriptor(tmp_path / "responder.json",
                               {"sample": "rdma_read", "connection": b"x" * 64, "memory": b"y" * 64}, stay=False)
    assert writer.wait(WAIT) == 0
    writer.stdout.close()  # type: ignore[union-attr]
    con = Proc(sample("rdma_read_requester", "--descriptor-dir", str(tmp_path), "--timeout", "1"))
    procs.append(con)
    assert con.finish() == 1
    line = one_line(con.stderr)
    assert "stale: written by process" in line and "which has exited" in line


@pytest.mark.parametrize("wrong", ["connection", "memory"])
def test_wrong_descriptor(procs: List[Proc], tmp_path: Path, wrong: str) -> None:
    """A live peer's file with a garbage connection or memory descriptor:
    DOCA refuses it, the requester says so in one line, at once."""
    connection = b"x" * 64
    if wrong == "memory":        # a real responder's connection, with a garbage memory descriptor
        real = tmp_path / "real"
        lis = Proc(sample("rdma_read_responder", "--descriptor-dir", str(real), "--size", "4K", "--timeout", "5"))
        procs.append(lis)
        lis.wait_stderr("wrote")
        connection = base64.b64decode(json.loads((real / "responder.json").read_text())["connection"]["b64"])
    writer = _write_descriptor(tmp_path / "responder.json",
                               {"sample": "rdma_read", "connection": connection, "memory": b"y" * 82}, stay=True)
    try:
        start = time.monotonic()
        con = Proc(sample("rdma_read_requester", "--descriptor-dir", str(tmp_path), "--timeout", "5"))
        procs.append(con)
        if wrong == "memory":    # hand the requester's file to the real responder, which then connects
            mine = tmp_path / "requester.json"
            while not mine.exists() and con.popen.poll() is None and time.monotonic() - start < WAIT:
                time.sleep(0.01)
            (real / "requester.json").write_bytes(mine.read_bytes())
        assert con.finish() == 1
        assert time.monotonic() - start < 5 + 10
        assert "DOCA_ERROR_" in one_line(con.stderr) and con.stdout == ""
    finally:
        writer.kill()
        writer.wait(WAIT)
        writer.stdout.close()  # type: ignore[union-attr]


def test_wrong_sample_pair_is_refused(procs: List[Proc], tmp_path: Path) -> None:
    d = str(tmp_path)
    lis = Proc(sample("rdma_write_responder", "--descriptor-dir", d, "--timeout", "3"))
    procs.append(lis)
    lis.wait_stderr("wrote")
    con = Proc(sample("rdma_read_requester", "--descriptor-dir", d, "--timeout", "3"))
    procs.append(con)
    assert con.finish() == 1
    assert one_line(con.stderr).endswith("the responder runs sample 'rdma_write', not 'rdma_read'")
    assert lis.finish() == 1
    assert "requester.json: descriptor file not found after waiting 3s" in one_line(lis.stderr)


def test_unknown_device(procs: List[Proc]) -> None:
    con = Proc(sample("rdma_write_requester", "--connect", "127.0.0.1:1", "--device", "nope0"))
    procs.append(con)
    assert con.finish() == 1
    assert "no DOCA device named 'nope0'" in one_line(con.stderr)


def test_missing_backend_is_one_line() -> None:
    import pydoca
    if pydoca.backend.name == "doca":
        pytest.skip("real DOCA is installed: PYDOCA_BACKEND=doca loads")
    env = {**os.environ, "PYDOCA_BACKEND": "doca"}
    for argv in (sample("rdma_write_requester", "--connect", "127.0.0.1:1"), sample("device_discovery")):
        out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=WAIT, cwd=ROOT,
                             env=env)
        assert out.returncode == 1
        assert "FAILED: cannot load pydoca: PYDOCA_BACKEND=doca" in out.stderr
        assert "Traceback" not in out.stderr


@pytest.mark.plain_only("--help never needs the backend: no softdoca code runs")
def test_help() -> None:
    for name in [n for pair in PAIRS for n in pair]:
        out = subprocess.run([sys.executable, *sample(name, "--help")], capture_output=True, text=True,
                             timeout=WAIT, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        assert "usage:" in out.stdout and "--descriptor-dir" in out.stdout
    out = subprocess.run([sys.executable, *sample("rdma_write_requester")], capture_output=True, text=True,
                         timeout=WAIT, cwd=ROOT)
    assert out.returncode == 2 and "--connect" in out.stderr


def test_samples_show_the_doca_steps() -> None:
    """Each sample creates its DOCA objects itself, with `with`, in both
    connection modes; rdma_common.py hides none of them."""
    for name in [n for pair in PAIRS for n in pair]:
        text = (SAMPLES / f"{name}.py").read_text()
        for step in ("common.open_device(args) as dev", "ProgressEngine(mode=args.progress) as pe",
                     "Rdma(dev, pe, permissions=", "rdma.start()", "MemoryMap(", "args.descriptor_dir",
                     "rdma.export()", "rdma.connect("):
            assert step in text, (name, step)
        assert ("rdma.listen(" in text) != ("rdma.connect_to(" in text), name
    common = (SAMPLES / "rdma_common.py").read_text()
    for hidden in ("MemoryMap(", "Rdma(", "ProgressEngine(", "BufferInventory(", ".export()", ".listen("):
        assert hidden not in common, hidden
    code = [ln for ln in common.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(code) <= 130, f"rdma_common.py grew to {len(code)} non-blank lines (issue 10: a ~150-line helper)"


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


def _port(listener: str, base: int) -> int:
    """A port per pair: no test waits for another one's TIME_WAIT on the same port."""
    return base + IDS.index(listener)


@pytest.mark.parametrize("listener", IDS)
def test_netns_rdma_cm(procs: List[Proc], netns: NetnsPair, listener: str) -> None:
    port = _port(listener, 18520)
    size_l, size_c = size_args(listener, "1M")
    _, con = run_pair(procs, listener, ["--listen", f"{netns.ip_a}:{port}", *size_l, "--timeout", "30"],
                      ["--connect", f"{netns.ip_a}:{port}", *size_c, "--timeout", "30"], cm=True,
                      prefix_l=ns_exec(netns.a), prefix_c=ns_exec(netns.b))
    if listener != "rdma_atomic_responder":
        assert f"OK {1 << 20} bytes in " in con.stdout


@pytest.mark.parametrize("listener", IDS)
def test_netns_descriptor_dir(procs: List[Proc], netns: NetnsPair, listener: str, tmp_path: Path) -> None:
    d = str(tmp_path / "desc")
    size_l, size_c = size_args(listener, "1M")
    _, con = run_pair(procs, listener, ["--descriptor-dir", d, "--device", netns.va, *size_l, "--timeout", "30"],
                      ["--descriptor-dir", d, "--device", netns.vb, *size_c, "--timeout", "30"], cm=False,
                      prefix_l=ns_exec(netns.a), prefix_c=ns_exec(netns.b))
    if listener != "rdma_atomic_responder":
        assert f"OK {1 << 20} bytes in " in con.stdout
    assert os.listdir(d) == [], "both sides remove their descriptor files"


def test_netns_loopbacks_are_separate(procs: List[Proc], netns: NetnsPair) -> None:
    """Each namespace has its own loopback: a requester in B connecting to
    127.0.0.1 does not reach a responder listening on A's loopback; both fail
    cleanly within their timeouts."""
    lis = Proc(sample("rdma_write_responder", "--listen", "127.0.0.1:18516", "--size", "4K", "--timeout", "4"),
               prefix=ns_exec(netns.a))
    procs.append(lis)
    lis.wait_stderr("listening on 127.0.0.1:18516")
    con = Proc(sample("rdma_write_requester", "--connect", "127.0.0.1:18516", "--timeout", "4"),
               prefix=ns_exec(netns.b))
    procs.append(con)
    assert con.finish() == 1, con.stdout
    assert "rdma_write_requester: FAILED: " in one_line(con.stderr) and "127.0.0.1:18516" in con.stderr
    assert lis.finish() == 1, lis.stdout
    assert one_line(lis.stderr) == "rdma_write_responder: FAILED: no incoming connection established within 4s"
