"""The pydoca command line (run as a subprocess, as users do)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from pydoca.cli import main


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pydoca.cli", *args], capture_output=True, text=True, timeout=60)


def test_devices_json() -> None:
    proc = _run("devices", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert isinstance(data, list) and data
    for entry in data:
        for key in ("ibdev_name", "iface_name", "ipv4", "ipv6", "mac", "pci_addr", "iface_index", "lid",
                    "active_rate"):
            assert key in entry
    lo = [d for d in data if d["iface_name"] == "lo"]
    assert lo and lo[0]["ipv4"] == "127.0.0.1"


def test_devices_table() -> None:
    proc = _run("devices")
    assert proc.returncode == 0, proc.stderr
    assert "IBDEV_NAME" in proc.stdout and "127.0.0.1" in proc.stdout


def test_doctor() -> None:
    proc = _run("doctor")
    assert proc.returncode == 0, proc.stderr
    assert "backend:" in proc.stdout and "checks:" in proc.stdout
    from pydoca._native import backend
    if backend.name == "soft":
        assert "softdoca" in proc.stdout


def test_doctor_json() -> None:
    proc = _run("doctor", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["backend"]["name"] in ("soft", "doca")
    assert report["runtime_version"]
    assert any(d["ipv4"] == "127.0.0.1" for d in report["devices"])
    assert {c["check"] for c in report["checks"]} >= {"backend", "devices", "ulimit -l", "PYDOCA_BACKEND"}


def test_doctor_bad_backend_env() -> None:
    """A broken backend choice fails with exit 1 and names the cause, never a bare crash."""
    proc = subprocess.run([sys.executable, "-m", "pydoca.cli", "doctor", "--json"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYDOCA_BACKEND": "bogus"})
    assert proc.returncode == 1
    assert "PYDOCA_BACKEND" in proc.stdout + proc.stderr
    if proc.stdout.strip():  # pydoca imported lazily: the doctor itself reports it
        report = json.loads(proc.stdout)
        statuses = {c["check"]: c["status"] for c in report["checks"]}
        assert report["backend"] is None
        assert statuses["PYDOCA_BACKEND"] == "error" and statuses["backend"] == "error"


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 1
    assert "devices" in capsys.readouterr().out


def test_errors_are_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import pydoca.device

    def boom() -> list[object]:
        raise RuntimeError("no devices today")
    monkeypatch.setattr(pydoca.device, "devices", boom)
    assert main(["devices"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "pydoca devices: error: RuntimeError: no devices today"


def test_unknown_command_exits_2() -> None:
    with pytest.raises(SystemExit) as info:
        main(["nope"])
    assert info.value.code == 2


def test_console_script() -> None:
    exe = shutil.which("pydoca")
    if exe is None:
        pytest.skip("the pydoca console script is not on PATH (pip install -e .)")
    proc = subprocess.run([exe, "devices", "--json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert isinstance(json.loads(proc.stdout), list)
