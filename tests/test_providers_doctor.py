"""`pydoca doctor` lists softdoca's providers and explains a SOFTDOCA_PROVIDER that cannot be honoured."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict


def _doctor(**env: str) -> Dict[str, Any]:
    full = {**os.environ, "PYDOCA_BACKEND": "soft", **env}
    r = subprocess.run([sys.executable, "-m", "pydoca.cli", "doctor", "--json"], capture_output=True, text=True,
                       env=full, timeout=120)
    assert r.stdout.strip(), r.stderr[-2000:]
    out: Dict[str, Any] = json.loads(r.stdout)
    return out


def test_doctor_lists_the_providers() -> None:
    report = _doctor()
    names = [p["name"] for p in report["providers"]]
    assert names == ["native", "ucx", "ofi"]
    assert report["provider"]["name"] == "native"
    check = next(c for c in report["checks"] if c["check"] == "SOFTDOCA_PROVIDER")
    assert check["status"] == "ok" and "native" in check["detail"]


def test_doctor_explains_a_provider_that_cannot_start() -> None:
    report = _doctor(SOFTDOCA_PROVIDER="ucxx")
    check = next(c for c in report["checks"] if c["check"] == "SOFTDOCA_PROVIDER")
    assert check["status"] == "fail" and "'ucxx' asked for, native in use" in check["detail"], check
    assert "SOFTDOCA_PROVIDER=native" in check["hint"]


def test_devices_lists_the_providers_with_versions_and_transports() -> None:
    r = subprocess.run([sys.executable, "-m", "pydoca.cli", "devices"], capture_output=True, text=True,
                       env={**os.environ, "PYDOCA_BACKEND": "soft"}, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    section = r.stdout.split("softdoca providers", 1)[1].splitlines()[1:]
    rows = {ln.split()[0]: ln for ln in section if ln.strip()}
    assert set(rows) == {"native", "ucx", "ofi"}, section
    assert "in use" in rows["native"] and "tcp,shm" in rows["native"]
    report = _doctor()
    ucx = next(p for p in report["providers"] if p["name"] == "ucx")
    if ucx["available"]:           # the version UCX reports, and the transports it finds when ucx_info is there
        assert ucx["version"] in rows["ucx"] and "available" in rows["ucx"]
        if ucx["transports"]:
            assert "tcp" in ucx["transports"] and ",".join(ucx["transports"]) in rows["ucx"]
