"""Mutated blobs through every parser of untrusted input, in a child process
(so a crash is seen): mmap export descriptors (``MemoryMap.from_export``),
RDMA connection blobs (``Rdma.connect``) and descriptor files
(``read_descriptor``). Only typed errors, never a crash."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from reliability_util import Child, child_env, scale

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("kind", ["mmap", "conn", "descriptor"])
def test_mutated_blobs_give_typed_errors(kind: str, tmp_path: Path, reliability_report: Any) -> None:
    n = scale(500, 5000)
    seed = int.from_bytes(os.urandom(4), "little")
    child = Child("fuzz", kind, str(n), str(seed), env=child_env(REL_TMP=str(tmp_path)))
    try:
        out = child.line(240, f"fuzz {kind}")
    finally:
        err = child.close(30)
    rc = child.proc.returncode
    untyped = out.get("untyped", [])
    reliability_report.add(f"mutated {kind} blobs", trials=out["trials"], passed=out["typed"] + out["accepted"],
                           failed=len(untyped) + (rc != 0), accepted=out["accepted"], seed=seed, exit=rc)
    assert rc == 0, f"parser child crashed (rc {rc}, seed {seed}): {err[-2000:]}"
    assert out["trials"] == n
    assert not untyped, f"seed {seed}: {untyped[:5]}"
    assert "Traceback" not in err, err[-2000:]
