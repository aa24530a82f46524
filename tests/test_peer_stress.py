"""32 requester processes x mixed operations against one responder, every byte verified
(30 operations each; 100 with PYDOCA_HEAVY=1)."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from peer_util import Proc, Server, write_spec

pytestmark = pytest.mark.timeout(300)
WORKERS, OPS = 32, 100 if os.environ.get("PYDOCA_HEAVY") == "1" else 30


def test_concurrent_requesters(tmp_path: Path, reliability_report: Any) -> None:
    desc = tmp_path / "svc.desc"
    srv = Server(write_spec(tmp_path), descriptor=desc)
    workers = []
    try:
        for i in range(WORKERS):                              # half by RDMA CM, half by descriptor file
            target = srv.address if i % 2 else str(desc)
            workers.append(Proc(["tests/peer_worker.py", target, f"w{i}", "mix", str(OPS)]))
        t0 = time.monotonic()
        for i, w in enumerate(workers):
            rc = w.finish(240)
            assert rc == 0 and f"OK w{i} {OPS}" in w.stdout, f"worker {i} rc={rc}:\n{w.stderr[-3000:]}"
        assert srv.popen.poll() is None, "the responder died"
        reliability_report.add("concurrent requesters (peer)", trials=WORKERS, passed=WORKERS, failed=0,
                               ops_each=OPS, seconds=round(time.monotonic() - t0, 1))
    finally:
        for w in workers:
            w.kill()
        rc = srv.terminate()
    assert rc == 0, srv.stderr[-3000:]
