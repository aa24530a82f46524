"""The same workload through Mooncake's transfer engine, for a same-run comparison.

Runs only when ``mooncake.engine`` imports (``pip install
mooncake-transfer-engine-non-cuda``). Both the target and the initiator run
in subprocesses (Mooncake logs to stderr and starts its own threads), over
its TCP transport with the P2P handshake (no metadata service).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List

from .._child import module_argv


def available() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import mooncake.engine"], capture_output=True, timeout=60)
    return probe.returncode == 0


def run_mooncake(args: argparse.Namespace) -> Dict[str, Any]:
    span = max(args.block_size * args.batch_size * 2, 16 << 20)
    env = {**os.environ, "GLOG_minloglevel": "2", "PYTHONUNBUFFERED": "1"}
    target = subprocess.Popen(module_argv("pydoca.transfer.mooncake", "target", str(span)),
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        assert target.stdout is not None
        head = target.stdout.readline().split()
        if len(head) != 2:
            return {"error": "the Mooncake target did not start"}
        out = subprocess.run(module_argv("pydoca.transfer.mooncake", "initiator", head[0], head[1], str(span), args.op,
                                          str(args.block_size), str(args.batch_size), str(args.duration)),
                             capture_output=True, text=True, env=env, timeout=args.duration + 120)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        return json.loads(lines[-1]) if lines else {"error": f"mooncake initiator failed: {out.stderr[-300:]}"}
    finally:
        target.kill()
        target.wait(10)
        if target.stdout is not None:
            target.stdout.close()


def _main(argv: List[str]) -> int:
    import numpy as np
    from mooncake.engine import TransferEngine
    te = TransferEngine()
    if te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") != 0:
        print(json.dumps({"error": "mooncake initialize failed"}))
        return 1
    if argv[0] == "target":
        buf = np.zeros(int(argv[1]), dtype=np.uint8)
        te.register_memory(buf.ctypes.data, buf.nbytes)
        print(te.get_rpc_port(), buf.ctypes.data, flush=True)
        time.sleep(3600)
        return 0
    port, raddr, span, op, bs, n, duration = argv[1:]
    span_i, bs_i, n_i = int(span), int(bs), int(n)
    local = np.ones(span_i, dtype=np.uint8)
    te.register_memory(local.ctypes.data, local.nbytes)
    blocks = span_i // bs_i
    fn = te.batch_transfer_sync_write if op == "write" else te.batch_transfer_sync_read
    ops, k = 0, 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < float(duration) or ops == 0:
        offs = [((k + j) % blocks) * bs_i for j in range(n_i)]
        rc = fn(f"127.0.0.1:{port}", [local.ctypes.data + o for o in offs], [int(raddr) + o for o in offs],
                [bs_i] * n_i)
        if rc != 0:
            print(json.dumps({"error": f"mooncake batch returned {rc}"}))
            return 1
        ops += n_i
        k += n_i
    el = time.perf_counter() - t0
    print(json.dumps({"MBps": ops * bs_i / el / 1e6, "ops_per_s": ops / el, "protocol": "tcp"}))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
