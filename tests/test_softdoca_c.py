"""softdoca's own C test programs (``make -C softdoca check``)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from pydoca._native._build import ROOT

SOFTDOCA = os.path.join(ROOT, "softdoca")


@pytest.mark.timeout(600)
@pytest.mark.plain_only("the sanitizer scripts run the C tests of their own builds (make check-asan, check-tsan)")
def test_make_check() -> None:
    missing = [tool for tool in ("make", "gcc") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed")
    if not os.path.exists(os.path.join(SOFTDOCA, "Makefile")):
        pytest.skip("softdoca/Makefile not present")
    proc = subprocess.run(["make", "-C", SOFTDOCA, "check"], capture_output=True, text=True, timeout=580)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    for program in ("test_common", "test_rdma"):
        assert program in out, f"{program} did not run:\n{out[-4000:]}"
    results = re.findall(r"(\d+) passed, (\d+) failed", out)
    assert len(results) >= 2, f"expected a 'N passed, M failed' line per program:\n{out[-4000:]}"
    for passed, failed in results:
        assert int(failed) == 0 and int(passed) > 0, out[-4000:]
