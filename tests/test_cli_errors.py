"""Errors and output of the command line (issue 25, item 4): addresses, port 0, host names, refused
connections, a closed stdout, a missing segment, plurals. Network on loopback only."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from pydoca.address import AddressError, UnknownHost, resolve, split_address

ROOT = Path(__file__).resolve().parent.parent
SPEC = ("version: 1\nname: one\nendpoints:\n"
        "  - {path: /echo, type: call, buffer: {size: 4KiB}, handler: 'handlers:echo'}\n")
BAD_HOST = "no-such-host.invalid"       # RFC 2606: never resolves


def _run(args: List[str], cwd: Optional[Path] = None, env: Optional[Dict[str, str]] = None,
         timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pydoca.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or ROOT, env={**os.environ, **(env or {})})


def _spec(tmp_path: Path) -> Path:
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "handlers.py").write_text("def echo(payload):\n    return payload\n")
    return tmp_path / "spec.yaml"


# -- addresses ---------------------------------------------------------------------------------
def test_split_address_says_what_is_wrong() -> None:
    with pytest.raises(AddressError, match="port 99999 .* out of range: ports are 1 to 65535"):
        split_address("127.0.0.1:99999")
    with pytest.raises(AddressError, match="port 0 .* out of range"):
        split_address("127.0.0.1:0")
    assert split_address("127.0.0.1:0", allow_zero=True) == ("127.0.0.1", 0)
    with pytest.raises(AddressError, match="'x1' .* is not a number"):
        split_address("h:x1")
    with pytest.raises(AddressError, match="expected HOST:PORT"):
        split_address("localhost")
    from pydoca.peer.spec import split_address as peer_split      # the peer layer's, the same rules
    with pytest.raises(ValueError, match="out of range"):
        peer_split("127.0.0.1:99999")


def test_request_port_out_of_range() -> None:
    proc = _run(["request", "127.0.0.1:99999", "endpoints"])
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "port 99999" in proc.stderr and "out of range" in proc.stderr
    assert "neither HOST:PORT nor a readable descriptor file" not in proc.stderr


@pytest.mark.parametrize("cmd", [["serve", "spec.yaml", "--listen"], ["transfer", "serve", "--listen"]],
                         ids=["serve", "transfer-serve"])
def test_listen_port_out_of_range(cmd: List[str], tmp_path: Path) -> None:
    _spec(tmp_path)
    proc = _run([*cmd, "127.0.0.1:99999"], cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "port 99999" in proc.stderr and "out of range" in proc.stderr


def test_unknown_host_is_named() -> None:
    with pytest.raises(UnknownHost, match=BAD_HOST) as info:
        resolve(BAD_HOST)
    assert isinstance(info.value, socket.gaierror) and info.value.host == BAD_HOST
    proc = _run(["request", f"{BAD_HOST}:18515", "endpoints"])
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"cannot resolve host '{BAD_HOST}'" in proc.stderr, proc.stderr
    proc = _run(["transfer", "serve", "--listen", f"{BAD_HOST}:0"])
    assert proc.returncode == 2 and f"cannot resolve host '{BAD_HOST}'" in proc.stderr


def test_requester_names_an_unknown_host() -> None:
    from pydoca.peer import Requester
    with pytest.raises(socket.gaierror, match=f"cannot resolve host '{BAD_HOST}'"):
        Requester.connect(f"{BAD_HOST}:18515", timeout=5)


# -- port 0 ------------------------------------------------------------------------------------
def _serving_line(cmd: List[str], cwd: Path) -> str:
    proc = subprocess.Popen([sys.executable, "-m", "pydoca.cli", *cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        assert "serving" in line, (line, proc.stderr.read() if proc.stderr else "")
        return line
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()


def test_serve_listen_port_zero_picks_a_free_port(tmp_path: Path) -> None:
    _spec(tmp_path)
    line = _serving_line(["serve", "spec.yaml", "--listen", "127.0.0.1:0"], tmp_path)
    address = line.split(" on ")[1].split()[0]
    host, port = split_address(address)
    assert host == "127.0.0.1" and port > 0
    assert "(1 endpoint)" in line                      # singular


def test_transfer_serve_listen_port_zero_and_plural(tmp_path: Path) -> None:
    line = _serving_line(["transfer", "serve", "--listen", "127.0.0.1:0", "--register", "kv:1MiB"], tmp_path)
    host, port = split_address(line.split()[3])
    assert port > 0 and "(1 segment; path " in line


# -- refused -----------------------------------------------------------------------------------
def test_refused_connection_reads_as_refused() -> None:
    import pydoca
    from pydoca.errors import DocaConnectionRefusedError, DocaConnectionResetError
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))                 # a port nobody listens on
        port = closed.getsockname()[1]
        with pydoca.Device.open(iface="lo") as dev, pydoca.ProgressEngine() as pe, pydoca.Rdma(dev, pe) as rdma:
            with pytest.raises(ConnectionRefusedError) as info:
                rdma.connect_to("127.0.0.1", port).wait_established(10)
    exc = info.value
    assert isinstance(exc, DocaConnectionRefusedError) and isinstance(exc, DocaConnectionResetError)
    assert str(exc).startswith(f"connection to 127.0.0.1:{port} refused: nothing listens there")
    assert exc.name == "DOCA_ERROR_CONNECTION_RESET"          # DOCA's status, kept for DOCA users


def test_request_refused_connection() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        proc = _run(["request", f"127.0.0.1:{closed.getsockname()[1]}", "endpoints", "--timeout", "5"])
    assert proc.returncode == 1 and "refused: nothing listens there" in proc.stderr


def test_readme_logging_block_says_refused() -> None:
    text = (ROOT / "README.md").read_text()
    block = text[text.index("## Logging"):]
    block = block[block.index("```python"):]
    block = block[:block.index("\n```\n")]
    assert "exc.name" not in block and "ConnectionRefusedError" in block


# -- a closed stdout ---------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["devices", "--json"], ["doctor"], ["--help"], ["softdoca"], ["bench"]],
                         ids=["devices-json", "doctor", "help", "softdoca", "bench"])
def test_closed_stdout_ends_quietly(args: List[str]) -> None:
    """Like `pydoca devices --json | head`: the reader is gone before the command writes: exit 0, no traceback."""
    read, write = os.pipe()
    os.close(read)                                         # every write gets EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "pydoca.cli", *args], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=60, cwd=ROOT)
    finally:
        os.close(write)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr and "Exception ignored" not in proc.stderr


def test_closed_stdout_through_head() -> None:
    """The shell form: more JSON than a pipe holds, `head -c 10` stops reading."""
    proc = subprocess.run(f"{sys.executable} -m pydoca.cli doctor --json | head -c 10 >/dev/null; "
                          "echo \"${PIPESTATUS[0]}\"", shell=True, executable="/bin/bash", capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert proc.stdout.strip() == "0" and "Traceback" not in proc.stderr, proc.stderr


# -- missing segment ---------------------------------------------------------------------------
def test_missing_segment_logs_one_line_on_the_owner() -> None:
    import structlog.testing

    from pydoca.transfer import SegmentNotFound, TransferEngine
    with TransferEngine("127.0.0.1:0") as a, TransferEngine("127.0.0.1:0") as b:
        b.register("present", bytearray(4096))
        with structlog.testing.capture_logs() as events:
            with pytest.raises(SegmentNotFound) as info:
                a.open_segment(f"{b.address}/nope")
    assert "has no segment 'nope'" in str(info.value) and "present" in str(info.value)
    assert "KeyError" not in str(info.value)
    assert not any("KeyError" in repr(e) or "Traceback" in repr(e) for e in events), events
    assert not any(e["event"] == "handler raised" for e in events), events
    lookups = [e for e in events if e["event"] == "segment lookup: no such segment"]
    assert len(lookups) == 1 and lookups[0]["segment"] == "nope" and lookups[0]["log_level"] == "info"


# -- plurals -----------------------------------------------------------------------------------
def test_bench_describe_plurals() -> None:
    from pydoca.perftest.run import describe
    r = {"bench": "lat", "op": "write", "size": 8, "backend": "soft", "transport": "tcp", "rounds": 1,
         "iterations": 1, "p50_us": 1.0, "p99_us": 2.0, "p50_us_rounds": [1.0], "p99_us_rounds": [2.0]}
    head = describe(r)[0]
    assert "1 round x 1 operation" in head and "rounds" not in head.split("progress")[1]
    r.update(rounds=2, iterations=5, p50_us_rounds=[1.0, 1.0], p99_us_rounds=[2.0, 2.0])
    assert "2 rounds x 5 operations" in describe(r)[0]


def test_plural_helper() -> None:
    from pydoca.cli._args import plural
    assert plural(1, "segment") == "1 segment" and plural(0, "segment") == "0 segments"
    assert plural(2, "endpoint") == "2 endpoints"
