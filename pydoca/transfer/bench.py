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

from .._child import module_argv


def pattern(size: int, seed: int = 1) -> np.ndarray:
    """Deterministic bytes: ``(i * 131 + seed) & 0xff`` repeated."""
    block = ((np.arange(4096, dtype=np.uint32) * 131 + seed) & 0xFF).astype(np.uint8)
    reps = -(-size // block.size)
    out: np.ndarray = np.tile(block, reps)[:size].copy()
    return out


def _backend() -> str:
    """This process's backend: the target runs on the same one (no second choice, no second warning)."""
    from .._native import backend
    return str(backend.name)


def _target(size: int, metadata: Optional[str]) -> Tuple["subprocess.Popen[str]", str]:
    cmd = module_argv("pydoca.cli", "transfer", "serve", "--listen", "127.0.0.1:0",
                      "--register", f"bench:{size}:pattern") + (["--metadata", metadata] if metadata else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYDOCA_BACKEND": _backend()})
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
        if remote.length < base + span:
            raise ValueError(f"segment {ref} holds {remote.length} bytes; this run needs {base + span} (span "
                             f"{span} per thread): register it larger (--register NAME:SIZE:pattern) or use "
                             "fewer --threads")
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
        out["transports"] = te.transports()          # as used, read before the connections close
        done = min(span, ops * bs)
        if args.op == "write":
            back = np.zeros(span, dtype=np.uint8)
            te.transfer([Request("read", back, remote, span, remote_offset=base)])
            why = mismatch(back[:done], local[:done], base)
            if why:
                why = f"the bytes read back from {ref} differ from those written: {why}"
        else:
            why = mismatch(local[:done], pattern(base + span)[base:base + done], base)
            if why:
                name = ref.rpartition("/")[2]
                why = (f"the bytes read from {ref} are not the bench pattern: {why}; --op read verifies against "
                       f"the pattern, so register the target's segment with it: pydoca transfer serve "
                       f"--register {name}:SIZE:pattern (SIZE at least {base + span} bytes"
                       f"{' for these threads' if args.threads > 1 else ''})")
        out.update(ops=ops, bytes=ops * bs, elapsed=elapsed, verified=not why, verify_error=why or None)


def _guarded(args: argparse.Namespace, ref: str, span: int, base: int, out: Dict[str, Any]) -> None:
    """_worker on its thread: its exception is handed to the main thread (``out["error"]``)."""
    try:
        _worker(args, ref, span, base, out)
    except Exception as exc:  # noqa: BLE001 - re-raised by run_pydoca on the calling thread
        out.clear()
        out["error"] = exc


def mismatch(got: np.ndarray, expected: np.ndarray, base: int = 0) -> str:
    """'' when equal, else where the first difference is and what was there (segment offsets from ``base``)."""
    if got.shape == expected.shape and np.array_equal(got, expected):
        return ""
    if got.shape != expected.shape:
        return f"{got.size} bytes where {expected.size} were expected"
    diff = np.flatnonzero(got != expected)
    first = int(diff[0])
    zero = " (all zero: a segment registered without the pattern)" if not got.any() else ""
    return (f"{diff.size} of {got.size} bytes differ, the first at segment offset {base + first} "
            f"(got {int(got[first]):#04x}, expected {int(expected[first]):#04x}){zero}")


def run_pydoca(args: argparse.Namespace) -> Dict[str, Any]:
    span = max(args.block_size * args.batch_size * 2, 16 << 20)
    span -= span % args.block_size
    proc = None
    ref = args.target
    try:
        if ref is None:
            proc, ref = _target(span * args.threads, args.metadata)
        results: List[Dict[str, Any]] = [{} for _ in range(args.threads)]
        threads = [threading.Thread(target=_guarded, args=(args, ref, span, i * span, results[i]))
                   for i in range(args.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(args.duration + 120)
        failed = [r["error"] for r in results if "error" in r]
        if failed:
            raise failed[0]
        if any(not r for r in results):
            raise RuntimeError(f"a bench thread did not finish within {args.duration + 120:g} s")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()
    elapsed = max(r["elapsed"] for r in results)
    total = sum(r["bytes"] for r in results)
    ops = sum(r["ops"] for r in results)
    errors = [f"thread {i}: {r['verify_error']}" if len(results) > 1 else str(r["verify_error"])
              for i, r in enumerate(results) if r.get("verify_error")]
    links = sorted({t for r in results for t in r.get("transports", ([], []))[0]})
    provs = sorted({t for r in results for t in r.get("transports", ([], []))[1]})
    return {"transport": ",".join(links) or None, "provider_transport": ",".join(provs) or None,
            "MBps": total / elapsed / 1e6, "ops_per_s": ops / elapsed, "verified": all(r["verified"] for r in results),
            "elapsed_s": elapsed, "operations": ops, "verify_error": "; ".join(errors) or None}


def run(args: argparse.Namespace) -> Dict[str, Any]:
    from rich.console import Console

    from .._native import backend, provider_name
    console = Console(stderr=True)
    with console.status(f"pydoca transfer bench: {args.op} {args.block_size} B x {args.batch_size}, "
                        f"{args.threads} thread{'s' if args.threads != 1 else ''}, {args.duration:g}s"):
        mine = run_pydoca(args)
    result: Dict[str, Any] = {"backend": str(backend.name), "provider": provider_name(), "op": args.op,
                              "block_size": args.block_size,
                              "batch_size": args.batch_size, "threads": args.threads, "duration": args.duration,
                              **mine}
    human = sys.stderr if getattr(args, "json", None) == "-" else sys.stdout     # stdout then carries the JSON
    threads = f"{args.threads} thread{'s' if args.threads != 1 else ''}"
    print(f"pydoca transfer bench: {args.op} {args.block_size} B x {args.batch_size} per batch, {threads}, "
          f"backend {result['backend']}: {mine['MBps']:.1f} MB/s, {mine['ops_per_s']:,.0f} ops/s, "
          f"verified={mine['verified']}", file=human, flush=True)
    if not args.no_mooncake and args.target is None:
        from .mooncake import available, run_mooncake
        if available():
            with console.status("Mooncake TE (TCP) on the same workload"):
                mc = run_mooncake(args)
            result["mooncake"] = mc
            if mc.get("MBps"):
                result["ratio_vs_mooncake"] = mine["MBps"] / mc["MBps"]
                print(f"mooncake transfer engine (tcp): {mc['MBps']:.1f} MB/s, {mc['ops_per_s']:,.0f} ops/s; "
                      f"ratio pydoca/mooncake {result['ratio_vs_mooncake']:.2f}", file=human)
            else:
                print(f"mooncake transfer engine: not measured ({mc.get('error')})", file=human)
    return result


__all__ = ["mismatch", "pattern", "run", "run_pydoca"]
