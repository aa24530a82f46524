"""softdoca's own C test programs (``make -C softdoca check``)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from provider_params import OFI_SHM, OFI_TCP, UCX_SHM, UCX_TCP

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


@pytest.mark.timeout(300)
@pytest.mark.plain_only("the sanitizer scripts run the C tests of their own builds under native")
@pytest.mark.parametrize("env", [UCX_TCP, UCX_SHM, OFI_TCP, OFI_SHM])
def test_rdma_c_program_under_each_provider(env: dict) -> None:
    """softdoca's C RDMA test (every task type, refusals, 2,000 connect/close cycles with their live-object and
    RSS checks) under each provider: the DOCA API behaves the same whatever moves the bytes."""
    if shutil.which("make") is None or shutil.which("gcc") is None:
        pytest.skip("make and gcc are needed")
    r = subprocess.run(["make", "-s", "-C", SOFTDOCA, "build/tests/test_rdma", "runtime"], capture_output=True,
                       text=True, timeout=280)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    proc = subprocess.run([os.path.join(SOFTDOCA, "build", "tests", "test_rdma")], capture_output=True, text=True,
                          timeout=240, env={**os.environ, **env})
    out = proc.stdout + proc.stderr
    fails = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert proc.returncode == 0 and not fails, "\n".join(fails) + "\n" + out[-3000:]
    m = re.search(r"test_rdma: (\d+) passed, (\d+) failed", out)
    assert m and int(m.group(1)) > 300 and m.group(2) == "0", out[-3000:]
    assert "provider connections close with their DOCA connections" in out, "the provider checks did not run"
