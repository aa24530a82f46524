"""8 requester processes x 100 mixed operations against one responder, every byte verified."""
from __future__ import annotations

from pathlib import Path

import pytest
from peer_util import Proc, Server, write_spec

pytestmark = pytest.mark.timeout(120)
WORKERS, OPS = 8, 100


def test_concurrent_requesters(tmp_path: Path) -> None:
    desc = tmp_path / "svc.desc"
    srv = Server(write_spec(tmp_path), descriptor=desc)
    workers = []
    try:
        for i in range(WORKERS):                              # half by RDMA CM, half by descriptor file
            target = srv.address if i % 2 else str(desc)
            workers.append(Proc(["tests/peer_worker.py", target, f"w{i}", "mix", str(OPS)]))
        for i, w in enumerate(workers):
            rc = w.finish(100)
            assert rc == 0 and f"OK w{i} {OPS}" in w.stdout, f"worker {i} rc={rc}:\n{w.stderr[-3000:]}"
        assert srv.popen.poll() is None, "the responder died"
    finally:
        for w in workers:
            w.kill()
        rc = srv.terminate()
    assert rc == 0, srv.stderr[-3000:]
