"""The command line never needs the DOCA backend to parse arguments or print help (issue 25, item 2).

Every command and subcommand prints its usage with a backend that cannot load
(``PYDOCA_BACKEND=doca`` on a host without DOCA, an invalid value): exit 0, no
traceback, no warning. ``pydoca doctor`` explains each broken value; the
"real DOCA not found" warning appears once, only in commands that use DOCA.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

from pydoca.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
WARNING = "real DOCA not found"


def _doca_loads() -> bool:
    """Whether real DOCA loads on this host (then PYDOCA_BACKEND=doca is not broken here)."""
    from pydoca._native import backend
    return backend.name == "doca"


def _run(args: List[str], env: Optional[Dict[str, str]] = None, **kw: object) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "PYDOCA_BACKEND"}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "pydoca.cli", *args], capture_output=True, text=True, timeout=60,
                          env=full, cwd=ROOT, **kw)  # type: ignore[call-overload]


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[Tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub


def command_paths() -> List[Tuple[str, ...]]:
    """(), every command, and every subcommand of those that have some."""
    out: List[Tuple[str, ...]] = [()]
    for name, sub in _subparsers(build_parser()):
        out.append((name,))
        out += [(name, child) for child, _ in _subparsers(sub)]
    return out


PATHS = command_paths()


def test_every_command_is_listed() -> None:
    names = {p[0] for p in PATHS if p}
    assert names >= {"devices", "doctor", "serve", "request", "export", "codegen", "bench", "transfer", "softdoca"}
    assert {("bench", k) for k in ("lat", "bw", "rate", "peer", "compare", "summary")} <= set(PATHS)
    assert {("transfer", k) for k in ("serve", "segments", "bench")} <= set(PATHS)


@pytest.mark.parametrize("backend", ["doca", "sof"])
@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "pydoca")
def test_help_without_a_backend(path: Tuple[str, ...], backend: str) -> None:
    if backend == "doca" and _doca_loads():
        pytest.skip("real DOCA loads on this host: PYDOCA_BACKEND=doca is not broken here")
    proc = _run([*path, "--help"], {"PYDOCA_BACKEND": backend})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: pydoca"), proc.stdout[:200]
    assert proc.stderr == "", proc.stderr          # no traceback, no warning


def test_parser_loads_no_backend() -> None:
    """Building the parser (and parsing) imports nothing that loads DOCA, in a fresh interpreter."""
    code = ("import sys\nfrom pydoca.cli.main import build_parser\n"
            "p = build_parser()\n"
            "p.parse_args(['bench', '--rounds', '1', 'lat', '--size', '1MiB'])\n"
            "p.parse_args(['transfer', 'serve', '--listen', '127.0.0.1:0', '--register', 'kv:1MiB:pattern'])\n"
            "print(sorted(m for m in sys.modules if m.startswith('pydoca._native')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYDOCA_BACKEND": "sof"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]" and proc.stderr == ""


@pytest.mark.parametrize("args", [["codegen", "spec.yaml"], ["softdoca", "--prefix"], ["softdoca", "--env"]],
                         ids=["codegen", "softdoca-prefix", "softdoca-env"])
def test_commands_without_doca_print_no_warning(args: List[str], tmp_path: Path) -> None:
    """codegen and softdoca never load a backend: no fallback warning (auto, on a host without DOCA)."""
    (tmp_path / "spec.yaml").write_text("version: 1\nname: demo\nendpoints:\n"
                                        "  - {path: /echo, type: call, buffer: {size: 4KiB}, handler: 'h:echo'}\n")
    proc = subprocess.run([sys.executable, "-m", "pydoca.cli", *args], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "PYDOCA_BACKEND"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout and proc.stderr == ""


def test_fallback_warning_once_in_a_command_that_uses_doca() -> None:
    if _doca_loads():
        pytest.skip("real DOCA loads on this host: there is no fallback")
    proc = _run(["devices", "--json"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count(WARNING) == 1, proc.stderr


def _doctor(value: str, extra: Optional[Dict[str, str]] = None) -> Tuple[subprocess.CompletedProcess[str], dict]:
    proc = _run(["doctor", "--json"], {"PYDOCA_BACKEND": value, **(extra or {})})
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads(proc.stdout)


def test_doctor_explains_a_typo() -> None:
    proc, report = _doctor("sof")
    assert proc.returncode == 1
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["PYDOCA_BACKEND"]["status"] == "error" and "did you mean 'soft'" in checks["PYDOCA_BACKEND"]["hint"]
    assert checks["backend"]["status"] == "error" and "expected auto, doca or soft" in checks["backend"]["detail"]
    assert {"kernel RDMA", "ulimit -l"} <= set(checks)          # what needs no backend is still checked
    text = _run(["doctor"], {"PYDOCA_BACKEND": "sof"})
    assert text.returncode == 1 and "did you mean 'soft'" in text.stdout and "Traceback" not in text.stderr


def test_doctor_explains_doca_without_doca() -> None:
    if _doca_loads():
        pytest.skip("real DOCA loads on this host")
    proc, report = _doctor("doca")
    assert proc.returncode == 1 and report["backend"] is None
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["PYDOCA_BACKEND"]["status"] == "ok"
    backend = checks["backend"]
    assert backend["status"] == "error" and "libdoca_common" in backend["detail"]
    assert "PYDOCA_DOCA_LIB_DIR" in backend["hint"] and "PYDOCA_BACKEND=auto" in backend["hint"]
    assert report["backend_error"] == backend["detail"]


def test_doctor_explains_a_broken_softdoca(tmp_path: Path) -> None:
    proc, report = _doctor("soft", {"PYDOCA_SOFTDOCA_LIB": str(tmp_path / "nope.so")})
    assert proc.returncode == 1
    backend = {c["check"]: c for c in report["checks"]}["backend"]
    assert backend["status"] == "error" and "PYDOCA_SOFTDOCA_LIB" in backend["hint"]


@pytest.mark.parametrize("value", ["sof", "doca"])
def test_a_doca_command_with_a_broken_backend_fails_in_one_line(value: str) -> None:
    if value == "doca" and _doca_loads():
        pytest.skip("real DOCA loads on this host")
    proc = _run(["devices"], {"PYDOCA_BACKEND": value})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pydoca devices: error: BackendError: PYDOCA_BACKEND=")
    assert "pydoca doctor" in lines[0]
