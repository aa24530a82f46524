"""`pydoca bench` runs end to end and reports every figure (no timing asserted)."""
from __future__ import annotations

import json
import subprocess
import sys


def test_bench_json_smoke() -> None:
    out = subprocess.run([sys.executable, "-m", "pydoca.cli", "bench", "--iters", "20", "--rounds", "1", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout)
    for key in ("tcp_pingpong_8B_s", "tcp_bulk_4MiB_s", "raw_write_8B_s", "raw_write_1MiB_s", "raw_write_4MiB_s",
                "peer_call_64B_s", "peer_write_8B_s", "peer_write_4MiB_s"):
        assert figures[key] > 0
