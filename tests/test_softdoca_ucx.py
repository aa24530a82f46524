"""softdoca with SOFTDOCA_PROVIDER=ucx: one-sided operations through UCX (softdoca/src/rdma/rdma_prov.c over
the provider of softdoca/src/providers/ucx), everything else on the native link. Runs the cross-process
RDMA, peer, batch and sync-event suites again under UCX over TCP, checks that the bytes really went
through UCX, and that a provider asked for is never silently replaced and never mixed with another.
Skipped where softdoca was built without UCX's headers or libucp is absent."""
from __future__ import annotations

import base64
import ctypes.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from peer_util import Proc, free_port
from suite_jobs import ModuleJobs, Spec, module_jobs, run_one

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent


def _built_with_ucx() -> bool:
    lib = ROOT / "pydoca" / "_lib" / "doca" / "lib" / "libdoca_common.so.3"
    return lib.exists() and b"ucp_put_nbx" in lib.read_bytes()


pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(not (ctypes.util.find_library("ucp") and _built_with_ucx()),
                       reason="UCX absent (Debian: libucx0 at run time, libucx-dev to build softdoca's ucx provider)"),
]

# Known differences under ucx (docs/providers.md, "What each provider enforces"): none on one host. The forged and
# stale descriptor cases of test_rdma.py (test_out_of_bounds_and_wrong_key_and_stopped_mmap) pass since the bridge
# checks each one-sided operation against a same-host target's live registration table and sends a refused one
# over the native link, where the target refuses it (the test asserts that path). Between hosts over UCX's tcp
# a forged descriptor is refused only at the requester, against the descriptor; a stopped map is refused through
# the target's revocation notice (tests/test_provider_revoke.py, two namespaces).
KNOWN: List[str] = []
SUITES = ["tests/test_rdma.py", "tests/test_peer_rdma.py", "tests/test_peer_posted.py", "tests/test_batch.py",
          "tests/test_sync_event.py", "tests/test_peer_channel.py", "tests/test_transfer.py", "tests/test_samples.py",
          "tests/test_c_programs.py"]
# The two-sided tests again with SOFTDOCA_PROVIDER_MESSAGES=0 (messages on the native link, the provider for the rest)
MSG_NATIVE = ["tests/test_rdma.py", "-k", "send or immediate or rnr or parked or window"]
# Between two network namespaces over a veth pair (two hosts as far as UCX can tell: another mount namespace,
# so UCX keeps peer-failure handling and takes tcp)
NETNS = ["tests/test_peer_netns.py"]
# per UCX transport: what differs from native
# (test_transfer.py::test_peer_restart_mid_batch runs under posix,cma too: a target SIGKILLed while it writes into
# this process's UCX shared-memory receive queue can stall that queue for good, and the provider now gives later
# connections a fresh worker; docs/providers.md, "Known gaps")
TLS = {"tcp": KNOWN, "posix,cma": KNOWN}
# per UCX transport: tests left out by keyword. Shared memory does not reach another host: the tests between two
# network namespaces (two hosts to UCX: another mount namespace) run over tcp only
SKIP_K = {"tcp": "", "posix,cma": "not netns and not slices_spread_over_devices"}
# Under the sanitized runs (tools/test-sanitized.sh, tools/test-tsan.sh: a softdoca build given by
# PYDOCA_SOFTDOCA_LIB) the matrix keeps its first six suites over tcp, within CI's time; the full matrix runs in
# the plain run
SANITIZED = bool(os.environ.get("PYDOCA_SOFTDOCA_LIB"))
if SANITIZED:
    SUITES, TLS = SUITES[:6], {"tcp": KNOWN}


def _env(**extra: str) -> Dict[str, str]:
    env = {**os.environ, "PYDOCA_BACKEND": "soft", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("SOFTDOCA_PROVIDER", None)
    env.update(extra)
    return env


UCX = {"SOFTDOCA_PROVIDER": "ucx", "UCX_TLS": "tcp"}


def _probe(*args: str, env: Dict[str, str], timeout: float = 60) -> str:
    r = subprocess.run([sys.executable, str(HERE / "ucx_probe.py"), *args], capture_output=True, text=True,
                       env=env, timeout=timeout, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip()


def _suite(tests: List[str], deselect: List[str], env: Dict[str, str], keyword: str = "") -> None:
    """One child run in the foreground (the matrix tests use `jobs`: their runs two at a time)."""
    run_one(Spec(tests, deselect, env, keyword))


def _specs() -> Dict[str, Spec]:
    """The child runs of this module's matrix tests, by test name, longest first."""
    specs = {f"test_the_cross_process_suites_pass_under_ucx[{tls}]":
             Spec(SUITES, TLS[tls], _env(SOFTDOCA_PROVIDER="ucx", UCX_TLS=tls), SKIP_K[tls]) for tls in sorted(TLS)}
    specs["test_between_two_namespaces_under_ucx_over_tcp"] = Spec(NETNS, [], _env(**UCX))
    specs["test_messages_stay_native_when_asked"] = Spec(MSG_NATIVE, [], _env(**UCX, SOFTDOCA_PROVIDER_MESSAGES="0"))
    return specs


def matrix_specs(collected: List[str]) -> Dict[str, Spec]:
    """This module's child runs in the session's pool (tests/suite_jobs.py): those of its collected tests."""
    return {n: s for n, s in _specs().items() if n in collected}


@pytest.fixture
def jobs(request: pytest.FixtureRequest) -> ModuleJobs:
    return module_jobs(request)


@pytest.mark.parametrize("tls", sorted(TLS))
def test_the_cross_process_suites_pass_under_ucx(tls: str, jobs: ModuleJobs, request: pytest.FixtureRequest) -> None:
    """RDMA, peer, batch, sync-event, transfer, sample and C-program tests with UCX over tcp and over shared
    memory (posix + cma: what UCX picks for two processes on one host)."""
    jobs.check(request.node.name)


def test_messages_stay_native_when_asked(jobs: ModuleJobs, request: pytest.FixtureRequest) -> None:
    """SOFTDOCA_PROVIDER_MESSAGES=0: sends and immediates on the native link, nothing of them through UCX (the RDMA
    tests assert no message went through the provider), one-sided operations still through UCX."""
    jobs.check(request.node.name)


def test_between_two_namespaces_under_ucx_over_tcp(jobs: ModuleJobs, request: pytest.FixtureRequest) -> None:
    jobs.check(request.node.name)


@pytest.mark.parametrize("tls,want", [("tcp", "tcp"), ("posix,cma", "posix,cma")])
def test_the_transport_is_the_one_asked_for(tls: str, want: str) -> None:
    """Same host: UCX over shared memory comes up (UCX 1.13 refuses shared memory to endpoints with
    peer-failure handling, and silently takes tcp where tcp is also enabled); tcp when only tcp is asked."""
    cfg = {"listen": f"127.0.0.1:{free_port()}",
           "endpoints": [{"path": "/store", "kind": "write", "size": 1 << 20, "handler": "store"}]}
    env = _env(SOFTDOCA_PROVIDER="ucx", UCX_TLS=tls)
    srv = _server(cfg, env)
    try:
        out = json.loads(_probe("write", cfg["listen"], env=env))
    finally:
        srv.kill()
    assert out["provider"] == "ucx" and set(out["provider_transport"].split(",")) == set(want.split(",")), out


def _server(cfg: Dict[str, object], env: Optional[Dict[str, str]] = None) -> Proc:
    p = Proc.__new__(Proc)
    p.argv = [sys.executable, "tests/peer_rel_server.py", json.dumps(cfg)]
    import threading
    p.popen = subprocess.Popen(p.argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, env=env or _env(**UCX))
    p.out, p.err = [], []
    p._threads = [threading.Thread(target=p._pump, args=(s, d), daemon=True)
                  for s, d in ((p.popen.stdout, p.out), (p.popen.stderr, p.err))]
    for t in p._threads:
        t.start()
    p.wait_for("serving ")
    return p


def test_a_provider_asked_for_is_never_replaced() -> None:
    out = _probe("start", env=_env(SOFTDOCA_PROVIDER="ucxx"))
    assert out.startswith("NotSupportedError"), out


def test_descriptors_of_another_provider_are_refused() -> None:
    """A map exported under ucx carries its UCX key: a native process refuses it, naming both providers."""
    exporter = subprocess.Popen([sys.executable, str(HERE / "ucx_probe.py"), "export"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(**UCX), cwd=ROOT)
    try:
        assert exporter.stdout is not None
        blob = exporter.stdout.readline().strip()
        assert len(base64.b64decode(blob)) > 82, "the export carries no provider section"
        native = subprocess.run([sys.executable, str(HERE / "ucx_probe.py"), "import", blob], capture_output=True,
                                text=True, env=_env(), timeout=60, cwd=ROOT)
        assert native.stdout.startswith("NotSupportedError"), native.stdout + native.stderr
        assert "softdoca provider 'ucx', this process uses provider 'native'" in native.stdout, native.stdout
        assert _probe("import", blob, env=_env(**UCX)) == "ok"
    finally:
        exporter.communicate(timeout=30)


def test_a_native_peer_cannot_connect_to_a_ucx_one() -> None:
    """The handshake names the provider: a native requester is refused by a ucx responder, not half-served."""
    cfg = {"listen": f"127.0.0.1:{free_port()}",
           "endpoints": [{"path": "/store", "kind": "write", "size": 1 << 20, "handler": "store"}]}
    srv = _server(cfg)
    try:
        r = subprocess.run([sys.executable, str(HERE / "ucx_probe.py"), "write", cfg["listen"]],
                           capture_output=True, text=True, env=_env(), timeout=60, cwd=ROOT)
    finally:
        srv.kill()
    assert r.returncode != 0 and "Unavailable" in r.stderr, r.stdout + r.stderr[-2000:]


def test_doctor_shows_ucx_in_use() -> None:
    r = subprocess.run([sys.executable, "-m", "pydoca.cli", "doctor", "--json"], capture_output=True, text=True,
                       env=_env(**UCX), timeout=120, cwd=ROOT)
    report = json.loads(r.stdout)
    ucx = next(p for p in report["providers"] if p["name"] == "ucx")
    assert ucx["built"] and ucx["available"] and ucx["version"], ucx
    assert report["provider"]["name"] == "ucx"


def test_bench_json_records_the_provider(tmp_path: Path) -> None:
    """`pydoca bench` under ucx: the JSON says which provider moved the bytes, and over which UCX transport."""
    f = tmp_path / "lat.json"
    r = subprocess.run([sys.executable, "-m", "pydoca.cli", "bench", "lat", "--rounds", "1", "--iterations", "300",
                        "--json", str(f)], capture_output=True, text=True, env=_env(**UCX), timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(f.read_text())
    assert out["provider"] == "ucx" and out["provider_transport"] == "tcp", out


def test_transfer_bench_json_records_the_transports() -> None:
    """`pydoca transfer bench` under ucx: provider, softdoca's link and the provider's transport, as used."""
    r = subprocess.run([sys.executable, "-m", "pydoca.cli", "transfer", "bench", "--op", "write", "--block-size",
                        "256KiB", "--batch-size", "4", "--duration", "0.3", "--no-mooncake", "--json", "-"],
                       capture_output=True, text=True, env=_env(**UCX), timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["verified"] and out["provider"] == "ucx" and out["provider_transport"] == "tcp", out
    assert out["transport"] in ("tcp", "shm"), out


def _mangle(blob: bytes, how: str) -> bytes:
    tail = blob[82:]                     # the provider section after softdoca's own 82-byte descriptor
    if how == "truncated":
        return blob[:82] + tail[:len(tail) - 9]
    if how == "corrupted":               # a byte of the packed UCX key: the crc no longer matches
        i = len(tail) - 3
        return blob[:82] + tail[:i] + bytes([tail[i] ^ 0x5A]) + tail[i + 1:]
    if how == "foreign":                 # the header names another provider
        return blob[:82] + tail[:8] + b"ofi".ljust(16, b"\0") + tail[24:]
    raise AssertionError(how)


def test_forged_provider_sections_are_refused_with_typed_errors() -> None:
    """A truncated, corrupted or foreign remote-key section: typed errors naming the cause, no crash; the
    exporter's map stays importable (nothing it serves is disturbed)."""
    exporter = subprocess.Popen([sys.executable, str(HERE / "ucx_probe.py"), "export"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(**UCX), cwd=ROOT)
    try:
        assert exporter.stdout is not None
        blob = base64.b64decode(exporter.stdout.readline().strip())
        want = {"truncated": "InvalidValueError", "corrupted": "InvalidValueError", "foreign": "NotSupportedError"}
        for how, cls in want.items():
            out = _probe("import", base64.b64encode(_mangle(blob, how)).decode(), env=_env(**UCX))
            assert out.startswith(cls) and "memory descriptor" in out, (how, out)
        assert _probe("import", base64.b64encode(blob).decode(), env=_env(**UCX)) == "ok"
    finally:
        exporter.communicate(timeout=30)
