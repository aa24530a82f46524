"""`pydoca serve/request/export/codegen` round trips, in both connection modes."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List

import numpy as np
import pytest
from peer_handlers import framed
from peer_util import ROOT, Server, env, write_spec

from pydoca.peer import HandlerError
from pydoca.peer.codegen import ContractError

pytestmark = pytest.mark.timeout(90)


def cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "pydoca.cli", *args], input=stdin, capture_output=True,
                          cwd=ROOT, env=env(), timeout=60)


def last_line(proc: subprocess.CompletedProcess[bytes]) -> str:
    lines: List[str] = [ln for ln in proc.stderr.decode().splitlines() if not ln.startswith("pydoca: ")]
    assert len(lines) == 1, proc.stderr.decode()
    return lines[0]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("cli")
    srv = Server(write_spec(d), descriptor=d / "svc.desc")
    yield srv
    assert srv.terminate() == 0, srv.stderr[-3000:]
    assert "event failed" not in srv.stderr and "Traceback" not in srv.stderr, srv.stderr[-3000:]


@pytest.mark.parametrize("mode", ["cm", "file"])
def test_request_round_trip(served: Server, mode: str, tmp_path: Path) -> None:
    target = served.address if mode == "cm" else str(served.descriptor)
    out = cli("request", target, "endpoints")
    assert out.returncode == 0, out.stderr.decode()
    assert "/store" in out.stdout.decode() and "call" in out.stdout.decode()
    data = tmp_path / "in.bin"
    data.write_bytes(framed(os.urandom(100_000)))
    out = cli("request", target, "write", "/store", "--in", str(data))
    assert out.returncode == 0, out.stderr.decode()
    out = cli("request", target, "read", "/blob", "--length", "5000", "--out", str(tmp_path / "out.bin"))
    assert out.returncode == 0 and (tmp_path / "out.bin").read_bytes() == bytes(5000)
    out = cli("request", target, "call", "/reverse", "--data", "hello")
    assert out.returncode == 0 and out.stdout == b"olleh"
    out = cli("request", target, "call", "/echo", "--in", "-", stdin=b"\x00\x01" * 10_000)
    assert out.returncode == 0 and out.stdout == b"\x00\x01" * 10_000


def test_request_failures(served: Server, tmp_path: Path) -> None:
    for args, needle in [
        (("call", "/nope", "--data", "x"), "NotFound"),
        (("call", "/fail", "--data", "x"), "HandlerError"),
        (("write", "/plain", "--data", "x" * 70_000), "TooLarge"),
    ]:
        out = cli("request", served.address, *args)
        assert out.returncode != 0 and needle in last_line(out)
    out = cli("request", "127.0.0.1:9", "endpoints", "--timeout", "3")
    assert out.returncode != 0 and "Unavailable" in last_line(out)
    out = cli("request", str(tmp_path / "missing.desc"), "endpoints")
    assert out.returncode != 0 and len(last_line(out)) < 400
    assert "neither HOST:PORT nor a readable descriptor file (no such file)" in last_line(out)
    out = cli("request", str(tmp_path), "endpoints")
    assert out.returncode != 0 and "(a directory)" in last_line(out)


def test_export(served: Server, tmp_path: Path) -> None:
    f1 = tmp_path / "running.desc"
    out = cli("export", served.address, "-o", str(f1))
    assert out.returncode == 0, out.stderr.decode()
    assert oct(f1.stat().st_mode & 0o777) == "0o600"
    out = cli("request", str(f1), "call", "/echo", "--data", "via export")
    assert out.returncode == 0 and out.stdout == b"via export"
    f2 = tmp_path / "spec.desc"
    spec = tmp_path / "spec.yaml"
    write_spec(tmp_path)
    out = cli("export", "--spec", str(spec), "--listen", served.address, "-o", str(f2))
    assert out.returncode == 0, out.stderr.decode()
    out = cli("request", str(f2), "call", "/echo", "--data", "via spec export")
    assert out.returncode == 0 and out.stdout == b"via spec export"


def test_codegen_round_trip(served: Server, tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    client_py = tmp_path / "testsvc_client.py"
    out = cli("codegen", str(spec), "-o", str(client_py))
    assert out.returncode == 0, out.stderr.decode()
    mod_spec = importlib.util.spec_from_file_location("testsvc_client", client_py)
    assert mod_spec is not None and mod_spec.loader is not None
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    for target in (served.address, str(served.descriptor)):
        with mod.TestsvcClient(target, name="typed") as client:
            client.store(framed(b"typed write"))
            assert client.lastcrc() != b"None"
            assert client.echo(b"typed") == b"typed"
            assert client.reverse(b"abc") == b"cba"
            assert client.blob(10) == bytes(10)
            arr = np.ones(32, dtype=np.uint8)
            assert client.blob_into(arr) == 32 and not arr.any()
            with pytest.raises(HandlerError):
                client.fail(b"x")
    narrow = tmp_path / "narrow.yaml"
    narrow.write_text("version: 1\nname: narrow\nendpoints:\n"
                      "  - {path: /echo, type: call, buffer: {size: 1MiB}, handler: 'x:y'}\n")
    assert cli("codegen", str(narrow), "-o", str(tmp_path / "narrow_client.py")).returncode == 0
    mod_spec = importlib.util.spec_from_file_location("narrow_client", tmp_path / "narrow_client.py")
    assert mod_spec is not None and mod_spec.loader is not None
    narrow_mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(narrow_mod)
    with pytest.raises(ContractError, match="at least"):
        narrow_mod.NarrowClient(served.address)


def test_serve_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nendpoints: []\n")
    out = cli("serve", str(bad), "--listen", "127.0.0.1:9")
    assert out.returncode != 0 and "SpecError" in last_line(out)
    spec = write_spec(tmp_path)
    out = cli("serve", str(spec))
    assert out.returncode != 0 and "listen" in last_line(out)


def test_sample_client_server(tmp_path: Path) -> None:
    """samples/client_server: the server script and the client, by CM and by descriptor file."""
    from peer_util import Proc, free_port
    port = free_port()
    desc = tmp_path / "demo.desc"
    srv = Proc(["samples/client_server/server.py", "--listen", f"127.0.0.1:{port}", "--descriptor-file", str(desc)])
    try:
        srv.wait_for("serving demo")
        for target in (f"127.0.0.1:{port}", str(desc)):
            client = Proc(["samples/client_server/client.py", target])
            assert client.finish(60) == 0, client.stderr[-3000:]
            assert "OK" in client.stdout and "handler error as expected" in client.stdout
    finally:
        assert srv.terminate() == 0, srv.stderr[-3000:]
