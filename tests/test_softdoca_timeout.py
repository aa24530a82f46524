"""SOFTDOCA_TIMEOUT_MS bounds how long tasks on a silent peer's connection
wait (docs/softdoca-contract.md): with the peer SIGSTOPped while writes are
outstanding, every write fails with DOCA_ERROR_CONNECTION_RESET ("peer died /
connection lost / transport timeout") no sooner than the timeout after the
link last made progress and no later than the timeout plus a margin.

Both sides are child processes started with SOFTDOCA_TIMEOUT_MS=500: softdoca
reads it once per process, so the pytest process itself is left alone."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Iterator, List

import pytest
from rdma_util import ALL_REMOTE, HERE, PeerProc

TIMEOUT_MS = 500
MARGIN_S = 1.5          # engine timer slack + a loaded 2-core CI machine
N, SIZE = 16, 4096      # 64 KiB in all: fits in the socket buffers, so all of it leaves at submit


class TimedPeer(PeerProc):
    """tests/peer_proc.py with SOFTDOCA_TIMEOUT_MS set for that process only."""

    def __init__(self) -> None:  # noqa: D107 - PeerProc with another environment
        env = dict(os.environ, PYTHONUNBUFFERED="1", SOFTDOCA_TIMEOUT_MS=str(TIMEOUT_MS), PYDOCA_BACKEND="soft",
                   SOFTDOCA_TRANSPORT="tcp")  # frozen, it must serve nothing (shm would, as a NIC)
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "peer_proc.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)


@pytest.fixture
def pair() -> Iterator[List[TimedPeer]]:
    procs = [TimedPeer(), TimedPeer()]
    yield procs
    for p in procs:
        if p.proc.poll() is None:
            os.kill(p.proc.pid, signal.SIGCONT)
        p.close()


def _wait_stopped(pid: int, timeout: float = 5.0) -> None:
    """SIGSTOP is asynchronous: wait until every thread of pid is stopped."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                states.append(fh.read().rsplit(")", 1)[1].split()[0])
        if states and all(st in ("T", "t") for st in states):
            return
        time.sleep(0.01)
    raise TimeoutError(f"process {pid} did not stop")


def test_writes_to_a_stopped_peer_fail_within_the_timeout(pair: List[TimedPeer]) -> None:
    requester, target = pair
    a = requester.call("start", size=N * SIZE, access=int(ALL_REMOTE), permissions=int(ALL_REMOTE), mode="oob")
    b = target.call("start", size=N * SIZE, access=int(ALL_REMOTE), permissions=int(ALL_REMOTE), mode="oob")
    requester.post("connect", blob=b["conn"])
    target.post("connect", blob=a["conn"])
    requester.answer("connect")
    target.answer("connect")

    target.proc.send_signal(signal.SIGSTOP)
    _wait_stopped(target.proc.pid)
    burst = requester.call("write_burst", blob=b["mmap"], n=N, size=SIZE)
    assert burst["done"] == 0, "writes completed while the target was stopped"
    wait = TIMEOUT_MS / 1000 + MARGIN_S + 5
    results = requester.call("burst_results", timeout=wait + 5, wait=wait)["results"]
    waited = [r["at"] - burst["submitted"] if r["at"] is not None else None for r in results]
    print(f"SOFTDOCA_TIMEOUT_MS={TIMEOUT_MS}: writes failed after "
          f"{min(w for w in waited if w is not None):.3f}..{max(w for w in waited if w is not None):.3f} s")
    assert all(r["error"] == "DOCA_ERROR_CONNECTION_RESET" for r in results), results
    assert all("silent for 500 ms" in r["message"] for r in results), results[0]["message"]
    lo, hi = TIMEOUT_MS / 1000 - 0.02, TIMEOUT_MS / 1000 + MARGIN_S
    assert all(w is not None and lo <= w <= hi for w in waited), (waited, (lo, hi))

    # the target, resumed, learns that its connection is gone (no hang, bounded)
    os.kill(target.proc.pid, signal.SIGCONT)
    events = target.call("conn_events", timeout=15, want="disconnected", wait=10)["events"]
    assert "disconnected" in events, events
