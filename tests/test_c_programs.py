"""C programs written against the public DOCA API, built and run on softdoca.

softdoca is installed as a DOCA runtime (``pydoca softdoca``): the programs of
``tests/c`` build with ``pkg-config --cflags --libs doca-common doca-rdma
doca-argp`` (and with meson, ``dependency('doca-common')``), link
libdoca_common / libdoca_rdma / libdoca_argp, and run as a responder and a
requester process pair, connected by exported descriptors (files) or by RDMA
CM, one program per RDMA task type; the bytes that moved are checked.
"""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from pydoca.cli import softdoca as sd_cli

HERE = Path(__file__).resolve().parent
SRC = HERE / "c"
PROGRAMS = ("rdma_write", "rdma_read", "rdma_send", "rdma_send_imm", "rdma_write_imm", "rdma_atomic",
            "rdma_sync_event")

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("pkg-config") is None,
                                reason="gcc and pkg-config are needed")


def _env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYDOCA_", "LD_PRELOAD", "ASAN", "UBSAN"))}
    env["PKG_CONFIG_PATH"] = sd_cli.paths()["pkg_config_path"]
    return env


def _pkg_config(*args: str) -> List[str]:
    out = subprocess.run(["pkg-config", *args, "doca-common", "doca-rdma", "doca-argp"], env=_env(),
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.fixture(scope="module")
def bins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cbin")
    flags = _pkg_config("--cflags", "--libs")
    for prog in PROGRAMS:
        cmd = ["gcc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-DDOCA_ALLOW_EXPERIMENTAL_API",
               "-o", str(out / prog), str(SRC / f"{prog}.c"), str(SRC / "rdma_common.c"), *flags]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    return out


def test_pkg_config_names_the_runtime() -> None:
    p = sd_cli.paths()
    cflags = _pkg_config("--cflags")
    libs = _pkg_config("--libs")
    assert any(os.path.samefile(f[2:], p["includedir"]) for f in cflags if f.startswith("-I"))
    assert {"-ldoca_common", "-ldoca_rdma", "-ldoca_argp"} <= set(libs)
    for lib in ("doca_common", "doca_rdma", "doca_argp"):
        real = Path(p["libdir"]) / f"lib{lib}.so.3"
        assert real.is_file() and (Path(p["libdir"]) / f"lib{lib}.so").exists()
        soname = subprocess.run(["objdump", "-p", str(real)], capture_output=True, text=True).stdout \
            if shutil.which("objdump") else f"SONAME lib{lib}.so.3"
        assert f"lib{lib}.so.3" in soname


def test_cli_env_sets_both_paths() -> None:
    out = subprocess.run([sys.executable, "-m", "pydoca.cli", "softdoca", "--env"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "export PKG_CONFIG_PATH=" in out.stdout and "export LD_LIBRARY_PATH=" in out.stdout
    assert sd_cli.paths()["libdir"] in out.stdout


def _run_pair(binary: Path, tmp: Path, cm: bool, port: int, message: str,
              env_extra: Optional[Dict[str, str]] = None) -> tuple[str, str]:
    extra = ["-c", "-a", "127.0.0.1", "-p", str(port)] if cm else []
    common = ["-f", str(tmp), "-m", message, *extra]
    env = {**_env(), **(env_extra or {})}
    resp = subprocess.Popen([str(binary), "-r", "responder", *common], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        req = subprocess.run([str(binary), "-r", "requester", *common], env=env, capture_output=True, text=True,
                             timeout=40)
        r_out, _ = resp.communicate(timeout=40)
    finally:
        if resp.poll() is None:
            resp.kill()
            resp.wait()
    assert req.returncode == 0, f"requester failed:\n{req.stdout}{req.stderr}\nresponder:\n{r_out}"
    assert resp.returncode == 0, f"responder failed:\n{r_out}\nrequester:\n{req.stdout}{req.stderr}"
    return req.stdout + req.stderr, r_out


_PORT = [18600 + (os.getpid() % 1000) * 8]


@pytest.mark.parametrize("cm", [False, True], ids=["descriptors", "rdma_cm"])
@pytest.mark.parametrize("prog", PROGRAMS)
def test_c_program_pair(bins: Path, tmp_path: Path, prog: str, cm: bool) -> None:
    message = f"{prog} {'cm' if cm else 'files'} {secrets.token_hex(8)}"
    _PORT[0] += 1
    req, resp = _run_pair(bins / prog, tmp_path, cm, _PORT[0], message)
    if cm:
        assert "connected by RDMA CM" in req and "connected by RDMA CM" in resp
    if prog == "rdma_write":
        assert f'responder: memory holds "{message}"' in resp
    elif prog == "rdma_read":
        assert f'requester: read "{message}"' in req
    elif prog in ("rdma_send", "rdma_send_imm"):
        assert f'responder: received "{message}"' in resp
        if prog == "rdma_send_imm":
            assert "immediate 0xc0ffee01" in resp
    elif prog == "rdma_write_imm":
        assert f'immediate 0xbeef0042, memory holds "{message}"' in resp
    elif prog == "rdma_sync_event":
        # NVIDIA's sample style: stopped from a callback, stopped again at teardown
        assert "requester: notify_add saw 2" in req and "responder: sync event reached 3" in resp
        for out, role in ((req, "requester"), (resp, "responder")):
            assert f"{role}: context stopped twice, sync event exchange complete" in out
            assert "ERR" not in out, out
    else:
        assert "fetch_add saw 40, cmp_swp saw 42" in req and "word is 1000" in resp


def _built_with(symbol: bytes) -> bool:
    lib = Path(sd_cli.paths()["libdir"]) / "libdoca_common.so.3"
    return lib.is_file() and symbol in lib.read_bytes()


# a provider over tcp, where softdoca was built with it
PROVIDERS = {"ucx": ({"SOFTDOCA_PROVIDER": "ucx", "UCX_TLS": "tcp"}, b"ucp_put_nbx"),
             "ofi": ({"SOFTDOCA_PROVIDER": "ofi", "FI_PROVIDER": "tcp"}, b"fi_getinfo")}


@pytest.mark.parametrize("cm", [False, True], ids=["descriptors", "rdma_cm"])
@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_pairs_back_to_back_under_a_provider(bins: Path, tmp_path: Path, provider: str, cm: bool) -> None:
    """60 send-with-immediate pairs, each side leaving as soon as its task completed: every send completes (the
    receiver acknowledged it before its receive completed, as an RC NIC does), and no process aborts (a side that
    leaves lets its provider connections finish their wire-up and flush first)."""
    env, symbol = PROVIDERS[provider]
    if os.environ.get("SOFTDOCA_PROVIDER"):
        pytest.skip("runs where the environment names no provider (it sets its own)")
    if not _built_with(symbol):
        pytest.skip(f"softdoca was built without the {provider} provider")
    for i in range(60):
        _PORT[0] += 1
        message = f"pair {i} {secrets.token_hex(4)}"
        (tmp_path / str(i)).mkdir()
        _, resp = _run_pair(bins / "rdma_send_imm", tmp_path / str(i), cm, _PORT[0], message, env)
        assert f'responder: received "{message}"' in resp


def test_argp_common_flags(bins: Path, tmp_path: Path) -> None:
    prog = str(bins / "rdma_write")
    env = _env()
    usage = subprocess.run([prog, "-h"], env=env, capture_output=True, text=True, timeout=10)
    assert usage.returncode == 0
    assert "Usage: rdma_write" in usage.stdout and "--log-level" in usage.stdout and "--role" in usage.stdout
    missing = subprocess.run([prog, "-f", str(tmp_path)], env=env, capture_output=True, text=True, timeout=10)
    assert missing.returncode != 0 and "missing mandatory flag --role" in missing.stderr
    unknown = subprocess.run([prog, "--nope"], env=env, capture_output=True, text=True, timeout=10)
    assert unknown.returncode != 0 and "unknown flag --nope" in unknown.stderr
    bad = subprocess.run([prog, "-r", "both", "-f", str(tmp_path)], env=env, capture_output=True, text=True,
                         timeout=10)
    assert bad.returncode != 0 and "role must be requester or responder" in bad.stderr
    version = subprocess.run([prog, "--version"], env=env, capture_output=True, text=True, timeout=10)
    assert version.returncode == 0 and "softdoca" in version.stdout


def test_log_level_flag_and_json_config(bins: Path, tmp_path: Path) -> None:
    """-l 60 shows DEBUG records (ctx state changes); -j reads flags from a JSON file."""
    cfg = tmp_path / "cfg.json"
    port = _PORT[0] + 500
    cfg.write_text('{"files": "%s", "message": "from json", "use-rdma-cm": true, '
                   '"server-addr": "127.0.0.1", "port": %d}' % (tmp_path, port))
    env = _env()
    prog = str(bins / "rdma_write")
    resp = subprocess.Popen([prog, "-l", "60", "-r", "responder", "-j", str(cfg)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    req = subprocess.run([prog, "-r", "requester", "-j", str(cfg)], env=env, capture_output=True, text=True,
                         timeout=40)
    out, _ = resp.communicate(timeout=40)
    assert req.returncode == 0 and resp.returncode == 0, req.stdout + req.stderr + out
    assert "[DBG]" in out and "ctx state" in out
    assert "[DBG]" not in req.stdout
    assert 'memory holds "from json"' in out


def test_meson_build(tmp_path: Path) -> None:
    if shutil.which("meson") is None or shutil.which("ninja") is None:
        pytest.skip("meson and ninja are needed")
    build = tmp_path / "build"
    setup = subprocess.run(["meson", "setup", str(build), str(SRC)], env=_env(), capture_output=True, text=True,
                           timeout=120)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    compile_ = subprocess.run(["ninja", "-C", str(build)], env=_env(), capture_output=True, text=True, timeout=300)
    assert compile_.returncode == 0, compile_.stdout + compile_.stderr
    for prog in PROGRAMS:
        assert (build / prog).exists()
    out = subprocess.run([str(build / "rdma_write"), "-h"], env=_env(), capture_output=True, text=True, timeout=10)
    assert out.returncode == 0 and "Usage: rdma_write" in out.stdout
