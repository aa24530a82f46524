"""softdoca's serving spin under a provider (SOFTDOCA_PROVIDER=ucx|ofi over
tcp, ofi over shm): a target's engine thread that served a peer's one-sided operation
polls for up to SOFTDOCA_SERVE_SPIN_US (default 100) before it sleeps, so
back-to-back operations from a polling initiator are served without a thread
wake-up each; it sleeps again once they stop, and an initiator's engine never
spins on its own operations. Counted on the engine threads themselves
(/proc/<pid>/task/<tid>/status and stat), with the bytes checked."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest
from provider_params import OFI_SHM, OFI_TCP, UCX_TCP

HERE = Path(__file__).resolve().parent

SCRIPT = r"""
import hashlib, json, os, sys, time
sys.path.insert(0, sys.argv[1])
import pydoca
from rdma_util import Local, PeerProc

def ticks(pid):
    # cpu clock ticks (1/100 s) of the process's softdoca engine thread
    for tid in os.listdir(f"/proc/{pid}/task"):
        if open(f"/proc/{pid}/task/{tid}/comm").read().strip() == "softdoca-engine":
            f = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
            return int(f[11]) + int(f[12])
    raise SystemExit(f"no thread named softdoca-engine in {pid}")

peer = PeerProc()
local = Local()
try:
    conn, rm = local.write_target(peer)
    local.pe.mode = pydoca.ProgressMode[sys.argv[3]]
    data = bytearray(8)
    src, dst = local.inv.buffer(local.local(data)), local.inv.buffer(rm, length=8)
    n = int(sys.argv[2])
    time.sleep(0.25)                                     # the windows the connection's set-up opened are over
    for i in range(n):                                   # back to back
        data[:] = i.to_bytes(8, "little")
        local.rdma.write(conn, src, dst).result(10)
    t0, m0 = ticks(peer.proc.pid), ticks(os.getpid())
    time.sleep(0.08)                                     # inside a window of 100 ms after the last write
    t1, m1 = ticks(peer.proc.pid), ticks(os.getpid())
    time.sleep(0.3)                                      # any window is over
    t2 = ticks(peer.proc.pid)
    time.sleep(0.5)
    t3 = ticks(peer.proc.pid)
    want = hashlib.sha256((n - 1).to_bytes(8, "little") + bytes(4088)).hexdigest()
    print(json.dumps({"ops": n, "target_after": t1 - t0, "own_after": m1 - m0, "target_idle": t3 - t2,
                      "landed": peer.call("digest")["sha"] == want}))
finally:
    local.close()
    peer.close()
"""


# ofi over shm: its doorbell wakes the target, and rings nobody while the target's promise holds (ofi_awake.c)
PROVIDERS = [UCX_TCP, OFI_TCP, OFI_SHM]



def _run(env: Dict[str, str], mode: str, ops: int) -> Dict[str, int]:
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(HERE), str(ops), mode], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYDOCA_BACKEND="soft", **env))
    assert r.returncode == 0, r.stderr[-3000:]
    got: Dict[str, int] = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["landed"], got
    return got


@pytest.mark.parametrize("env", PROVIDERS)
def test_a_served_target_keeps_polling_for_its_window_then_sleeps(env: Dict[str, str]) -> None:
    # a window of 100 ms (the longest allowed) makes the spin visible in the engine thread's cpu time: after a
    # stream of back-to-back writes the target's engine keeps polling for the window (about 8 of the 8 ticks
    # of the next 80 ms), then it stops. The writes come closer than twice the window, so it is at its full
    # length when they stop
    spin = _run({**env, "SOFTDOCA_SERVE_SPIN_US": "100000"}, "POLLING", 300)
    assert spin["target_after"] >= 4, spin
    assert spin["target_idle"] <= 1, spin
    # and the initiator's engine, which served nobody, did not spin (2 ticks of its own work were seen once)
    assert spin["own_after"] <= 2, spin
    off = _run({**env, "SOFTDOCA_SERVE_SPIN_US": "0"}, "POLLING", 300)
    assert off["target_after"] <= 1, off


@pytest.mark.parametrize("env", PROVIDERS)
def test_an_initiator_engine_does_not_spin_on_its_own_operations(env: Dict[str, str]) -> None:
    # an initiator that sleeps on its pe at once (no application spin): its engine collects every completion
    # and hands it over. That is not serving a peer, so it does not spin after them, however long the window
    got = _run({**env, "SOFTDOCA_SERVE_SPIN_US": "100000", "PYDOCA_SPIN_US": "0"}, "BLOCKING", 300)
    assert got["own_after"] <= 2, got
    assert got["target_after"] >= 4, got
