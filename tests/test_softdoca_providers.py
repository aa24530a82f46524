"""softdoca's provider layer (issue 22): the ucx provider's two-process C test
(softdoca/tests/providers/test_ucx_provider.c) under UCX over TCP and over
shared memory (posix + cma): one-sided ops, atomics, two-sided messages with
held receives, write with immediate, bad blobs, CM (network transports), a
dead address and a killed peer. Skipped only where UCX is absent."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

SOFTDOCA = Path(__file__).resolve().parent.parent / "softdoca"
# Under tools/test-sanitized.sh the provider tests are the ASan+UBSan builds (make check-providers-asan,
# check-providers-ofi-asan), run without the interpreter's preloaded runtime (they carry their own)
ASAN = os.environ.get("PYDOCA_TEST_SANITIZER") == "asan"
SUFFIX = "-asan" if ASAN else ""


def _make_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("NOHOLD", "NOMSG")}
    if ASAN:
        for k in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS"):
            env.pop(k, None)
    return env


def _have_ucx():
    return os.path.exists("/usr/include/ucp/api/ucp.h") and any(
        Path(d, "libucp.so.0").exists() for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib", "/usr/local/lib"))


pytestmark = pytest.mark.skipif(not (shutil.which("make") and _have_ucx()),
                                reason="UCX not installed (Debian: libucx-dev + libucx0)")


@pytest.mark.parametrize("tls", ["tcp", "posix,cma"])
def test_ucx_provider(tls):
    r = subprocess.run(["make", "-s", "-C", str(SOFTDOCA), f"check-providers{SUFFIX}", f"PROV_TLS={tls}"],
                       capture_output=True, text=True, timeout=600, env=_make_env())
    out = r.stdout + r.stderr
    assert "SKIP" not in out, out
    assert r.returncode == 0, out[-6000:]
    assert "  messages\n" in out and "messages: skipped" not in out, out[-3000:]
    assert ": ok" in out, out[-3000:]
    if tls == "posix,cma":
        # the endpoint came up over shared memory, not a silent tcp fallback
        assert "transport posix,cma" in out or "transport cma,posix" in out, out[:600]


def _have_ofi() -> bool:
    return os.path.exists("/usr/include/rdma/fabric.h") and any(
        Path(d, "libfabric.so.1").exists() for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                                                     "/usr/lib", "/usr/local/lib"))


@pytest.mark.skipif(not _have_ofi(), reason="libfabric not installed (Debian: libfabric-dev + libfabric1)")
def test_ofi_provider() -> None:
    """The ofi provider's negotiation unit test (verbs-like, efa-like shapes) and its two-process test under
    FI_PROVIDER=tcp and shm; the plain run adds shm without its doorbell, the ASan run the emulated paths forced
    (SOFTDOCA_OFI_EMULATE) on both: each of those runs takes ~20 s, and CI runs both suites."""
    r = subprocess.run(["make", "-s", "-C", str(SOFTDOCA), f"check-providers-ofi{SUFFIX}",
                        f"OFI_EMULATIONS={1 if ASAN else 0}"], capture_output=True, text=True, timeout=900,
                       env=_make_env())
    out = r.stdout + r.stderr
    assert "SKIP" not in out, out
    assert r.returncode == 0, out[-6000:]
    runs = re.findall(r"^== FI_PROVIDER=(\S+)(?: (SOFTDOCA_OFI_\w+)=\S+)?", out, re.M)
    want = {("tcp", ""), ("shm", "")} | ({("tcp", "SOFTDOCA_OFI_EMULATE"), ("shm", "SOFTDOCA_OFI_EMULATE")} if ASAN
                                         else {("shm", "SOFTDOCA_OFI_DOORBELL")})
    assert set(runs) == want, (runs, out[-3000:])


# One run per provider and transport of the provider conformance test (softdoca/tests/providers/test_provider.c):
# the contract written in src/providers/provider.h, the same checks for every provider.
CONFORMANCE_RUNS = ["ucx:UCX_TLS=tcp", "ucx:UCX_TLS=posix,cma", "ofi:FI_PROVIDER=tcp", "ofi:FI_PROVIDER=shm"]


@pytest.mark.parametrize("run", CONFORMANCE_RUNS)
def test_provider_conformance(run: str) -> None:
    """make check-provider-conformance for one <provider>:<transport>: probe/open/close, caps, bad blobs, OOB
    and CM connections, one-sided ops and atomics, messages with HOLD / PLACE, the ordering rules, flush, failures
    (a dead address, a killed peer) and the one-completion rule. Skipped where the make target says the provider
    is not built here or its probe fails."""
    r = subprocess.run(["make", "-s", "-C", str(SOFTDOCA), f"check-provider-conformance{SUFFIX}", f"CONF_RUNS={run}"],
                       capture_output=True, text=True, timeout=600, env=_make_env())
    out = r.stdout + r.stderr
    skip = [line for line in out.splitlines() if line.startswith("SKIP:")]
    if skip and r.returncode == 0:
        pytest.skip(skip[0])
    assert r.returncode == 0, out[-8000:]
    assert ": ok" in out and "rules ok, 0 failed" in out, out[-3000:]
