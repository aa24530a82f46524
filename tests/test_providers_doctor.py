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
