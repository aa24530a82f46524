"""softdoca's engine thread and a polling application under a provider
(SOFTDOCA_PROVIDER=ucx|ofi): the application's own progress collects its
completions, so the engine thread is not woken for every operation (a
wake-up per write cost 10-30 us of latency on 2 vCPUs and contended for the
engine lock). The writes still land, byte for byte, and a task submitted
while the application does not progress still completes (the engine takes
the provider back)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest
from provider_params import OFI_TCP, UCX_TCP

HERE = Path(__file__).resolve().parent

SCRIPT = r"""
import ctypes, hashlib, json, os, sys, time
sys.path.insert(0, sys.argv[1])
import pydoca
from pydoca._native import soft_fn
from rdma_util import Local, PeerProc

counter = soft_fn("softdoca_debug_counter", ctypes.c_long, ctypes.c_char_p)

def engine_switches():
    for tid in os.listdir("/proc/self/task"):
        if open(f"/proc/self/task/{tid}/comm").read().strip() == "softdoca-engine":
            st = dict(l.split(":\t") for l in open(f"/proc/self/task/{tid}/status").read().splitlines() if ":\t" in l)
            return int(st["voluntary_ctxt_switches"]) + int(st["nonvoluntary_ctxt_switches"])
    raise SystemExit("no thread named softdoca-engine")

peer = PeerProc()
local = Local()
try:
    conn, rm = local.write_target(peer)
    local.pe.mode = pydoca.ProgressMode.POLLING          # the application polls (pydoca bench --progress polling)
    data = bytearray(8)
    lm = local.local(data)
    src, dst = local.inv.buffer(lm), local.inv.buffer(rm, length=8)
    t_end = time.monotonic() + 0.05                      # warm-up: set-up done, the blocking waits of the
    while time.monotonic() < t_end:                      # connection's set-up 50 ms behind (the engine keeps
        local.rdma.write(conn, src, dst).result(10)      # the fd while the application also sleeps)
    n = int(sys.argv[2])
    before, t0, progressed = engine_switches(), time.monotonic(), counter(b"engine_provider_progress")
    for i in range(n):
        data[:] = i.to_bytes(8, "little")
        local.rdma.write(conn, src, dst).result(10)
    during, elapsed_ms = engine_switches() - before, (time.monotonic() - t0) * 1000
    progressed = counter(b"engine_provider_progress") - progressed
    # submitted, then not progressed for 0.3 s: the engine thread has the provider back and completes it
    data[:] = b"lastlast"
    task = local.rdma.write(conn, src, dst)
    time.sleep(0.3)
    local.pe.run_until(lambda: task.done, 5)
    assert task.error is None, task.error
    want = hashlib.sha256(b"lastlast" + bytes(4088)).hexdigest()
    print(json.dumps({"ops": n, "engine_switches": during, "engine_progressed": progressed,
                      "elapsed_ms": round(elapsed_ms, 1),
                      "landed": peer.call("digest")["sha"] == want}))
finally:
    local.close()
    peer.close()
"""


PROVIDERS = [UCX_TCP, OFI_TCP]


@pytest.mark.parametrize("env", PROVIDERS)
def test_polling_application_does_not_wake_the_engine_per_operation(env: Dict[str, str]) -> None:
    # enough writes that the run's fixed part (the warm-up's tail: 72 switches in a 10 ms run of 400 once) is
    # small beside the per-millisecond bound
    ops = 1000
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(HERE), str(ops)], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYDOCA_BACKEND="soft", **env))
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["landed"], got
    # the engine looks once a millisecond while the application polls: its wake-ups follow the time taken, not
    # the operations (a slow or loaded machine takes longer, so the bound does too), and stay well under one per
    # operation (before: every write woke it at least once: 478 and 917 in 22-27 ms). Each look can cost two or
    # three switches (the wake-up, and a futex wait when the polling thread holds the engine lock): 54-78 in
    # 16-30 ms were seen, so the bound is 4 a millisecond
    assert got["engine_switches"] <= 4 * got["elapsed_ms"] + 20, got
    assert got["engine_switches"] < ops * 3 // 4, got
    # and it progresses the provider only at those looks, never per operation (counted in softdoca; a
    # look that left the provider to the polling thread was tried and dropped: it cost UCX shared memory
    # ~2 us a write, docs/performance.md)
    assert got["engine_progressed"] <= 2 * got["elapsed_ms"] + 20, got
