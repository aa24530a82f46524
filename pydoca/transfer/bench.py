"""``pydoca transfer bench``: batched transfers against a target engine, like Mooncake's transfer_engine_bench.

Without ``--target`` it starts its own target process (``pydoca transfer
serve``) on loopback with a segment filled with :func:`pattern`. Each thread
runs its own engine and submits batches of ``batch_size`` blocks of
``block_size`` bytes until ``duration`` passes; the bytes are verified at the
end (writes: read back and compared; reads: compared with the pattern).
When Mooncake's transfer engine (``mooncake-transfer-engine-non-cuda``) is
installed, the same workload runs through it (TCP protocol, P2P handshake)
in the same run and the ratio is reported.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np


def pattern(size: int, seed: int = 1) -> np.ndarray:
    """Deterministic bytes: ``(i * 131 + seed) & 0xff`` repeated."""
    block = ((np.arange(4096, dtype=np.uint32) * 131 + seed) & 0xFF).astype(np.uint8)
    reps = -(-size // block.size)
    out: np.ndarray = np.tile(block, reps)[:size].copy()
    return out


def _target(size: int, metadata: Optional[str]) -> Tuple["subprocess.Popen[str]", str]:
    cmd = [sys.executable, "-m", "pydoca.cli", "transfer", "serve", "--listen", "127.0.0.1:0",
           "--register", f"bench:{size}:pattern"] + (["--metadata", metadata] if metadata else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "serving" not in line:
        proc.kill()
        raise RuntimeError(f"the bench target did not start: {line!r}")
    return proc, line.split()[3] + "/bench"


def _worker(args: argparse.Namespace, ref: str, span: int, base: int, out: Dict[str, Any]) -> None:
    from ..transfer import Request, TransferEngine
    bs, n = args.block_size, args.batch_size
    local = pattern(span) if args.op == "write" else np.zeros(span, dtype=np.uint8)
    with TransferEngine("127.0.0.1:0", connections_per_peer=args.connections, slice_size=args.slice_size) as te:
        te.register("local", local)
        remote = te.open_segment(ref)
        blocks = span // bs
        batches = ops = 0
        t0 = time.perf_counter()
        deadline = t0 + args.duration
        while time.perf_counter() < deadline or batches == 0:
            reqs = [Request(args.op, "local", remote, bs, local_offset=((batches * n + k) % blocks) * bs,
                            remote_offset=base + ((batches * n + k) % blocks) * bs) for k in range(n)]
            te.submit(reqs).result(30)
            batches += 1
            ops += n
        elapsed = time.perf_counter() - t0
        if args.op == "write":
            back = np.zeros(span, dtype=np.uint8)
            te.transfer([Request("read", back, remote, span, remote_offset=base)])
            verified = bool(np.array_equal(back[:min(span, ops * bs)], local[:min(span, ops * bs)]))
        else:
            expect = pattern(base + span)[base:]
            done = min(span, ops * bs)
            verified = bool(np.array_equal(local[:done], expect[:done]))
        out.update(ops=ops, bytes=ops * bs, elapsed=elapsed, verified=verified)


def run_pydoca(args: argparse.Namespace) -> Dict[str, Any]:
    span = max(args.block_size * args.batch_size * 2, 16 << 20)
    span -= span % args.block_size
    proc = None
    ref = args.target
    try:
        if ref is None:
            proc, ref = _target(span * args.threads, args.metadata)
        results: List[Dict[str, Any]] = [{} for _ in range(args.threads)]
        threads = [threading.Thread(target=_worker, args=(args, ref, span, i * span, results[i]))
                   for i in range(args.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(args.duration + 120)
        if any(not r for r in results):
            raise RuntimeError("a bench thread failed; run with --debug for details")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()
    elapsed = max(r["elapsed"] for r in results)
    total = sum(r["bytes"] for r in results)
    ops = sum(r["ops"] for r in results)
    return {"MBps": total / elapsed / 1e6, "ops_per_s": ops / elapsed, "verified": all(r["verified"] for r in results),
            "elapsed_s": elapsed, "operations": ops}


def run(args: argparse.Namespace) -> Dict[str, Any]:
    from rich.console import Console

    from .._native import backend
    console = Console(stderr=True)
    with console.status(f"pydoca transfer bench: {args.op} {args.block_size} B x {args.batch_size}, "
                        f"{args.threads} thread(s), {args.duration:g}s"):
        mine = run_pydoca(args)
    result: Dict[str, Any] = {"backend": str(backend.name), "op": args.op, "block_size": args.block_size,
                              "batch_size": args.batch_size, "threads": args.threads, "duration": args.duration,
                              **mine}
    print(f"pydoca transfer bench: {args.op} {args.block_size} B x {args.batch_size} per batch, {args.threads} "
          f"thread(s), backend {result['backend']}: {mine['MBps']:.1f} MB/s, {mine['ops_per_s']:,.0f} ops/s, "
          f"verified={mine['verified']}")
    if not args.no_mooncake and args.target is None:
        from .mooncake import available, run_mooncake
        if available():
            with console.status("Mooncake TE (TCP) on the same workload"):
                mc = run_mooncake(args)
            result["mooncake"] = mc
            if mc.get("MBps"):
                result["ratio_vs_mooncake"] = mine["MBps"] / mc["MBps"]
                print(f"mooncake transfer engine (tcp): {mc['MBps']:.1f} MB/s, {mc['ops_per_s']:,.0f} ops/s; "
                      f"ratio pydoca/mooncake {result['ratio_vs_mooncake']:.2f}")
            else:
                print(f"mooncake transfer engine: not measured ({mc.get('error')})")
    return result


__all__ = ["pattern", "run", "run_pydoca"]
