#!/usr/bin/env python3
"""Measure pydoca.peer against raw pydoca RDMA, in one run, on loopback.

    python tools/bench_peer.py [--iters N] [--polling] [--json]

Starts two server processes (a ``pydoca serve`` responder and a raw Rdma
target exporting a 4 MiB buffer), then from this process measures:

* raw RDMA write: latency of 8 B, throughput of 1 MiB and 4 MiB (one write at a time);
* peer: latency of a 64-byte call, of an 8-byte write, throughput of a 4 MiB write;

and prints the ratios (peer over raw). Every server is stopped at the end.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List

SPEC = """\
version: 1
name: bench
endpoints:
  - {path: /call, type: call, buffer: {size: 4KiB}, handler: "bench_handlers:echo"}
  - {path: /small, type: write, buffer: {size: 4KiB}}
  - {path: /bulk, type: write, buffer: {size: 4MiB}}
"""
HANDLERS = "def echo(payload):\n    return payload\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def raw_server(port: int, polling: bool) -> None:
    """Child process: an Rdma target with a 4 MiB RDMA-writable buffer."""
    import pydoca
    from pydoca import Access
    with pydoca.Device.open(ip="127.0.0.1") as dev, \
            pydoca.ProgressEngine(mode="polling" if polling else "blocking") as pe, \
            pydoca.Rdma(dev, pe) as rdma:
        mem = bytearray(4 << 20)
        with pydoca.MemoryMap(dev, mem, access=Access.LOCAL_READ_WRITE | Access.RDMA_WRITE) as mm:
            rdma.listen(port, accept=lambda c: True)
            print(base64.b64encode(mm.export_rdma()).decode(), flush=True)
            stop = []
            signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
            while not stop:
                pe.wait(0.1)


def timed(fn: Callable[[], Any], iters: int, warmup: int) -> float:
    """Seconds per call of ``fn`` (after ``warmup`` calls)."""
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def bench_raw(port: int, blob: bytes, iters: int, polling: bool) -> Dict[str, float]:
    import pydoca
    from pydoca import Access
    out: Dict[str, float] = {}
    with pydoca.Device.open(ip="127.0.0.1") as dev, \
            pydoca.ProgressEngine(mode="polling" if polling else "blocking") as pe, \
            pydoca.Rdma(dev, pe) as rdma, pydoca.BufferInventory(16) as inv:
        conn = rdma.connect_to("127.0.0.1", port)
        conn.wait_established(10)
        src_mem = bytearray(os.urandom(4 << 20))
        with pydoca.MemoryMap(dev, src_mem, access=Access.LOCAL_READ_WRITE) as local, \
                pydoca.MemoryMap.from_export(dev, blob) as remote:
            for name, size, n in (("raw_write_8B_s", 8, iters), ("raw_write_1MiB_s", 1 << 20, max(20, iters // 50)),
                                  ("raw_write_4MiB_s", 4 << 20, max(10, iters // 100))):
                src = inv.buffer(local, length=size, data_len=size)
                dst = inv.buffer(remote, length=size, empty=True)
                out[name] = timed(lambda: rdma.write(conn, src, dst).result(10), n, max(3, n // 10))
                src.close()
                dst.close()
        conn.disconnect()
    return out


def bench_peer(address: str, iters: int, polling: bool) -> Dict[str, float]:
    from pydoca.peer import Requester
    out: Dict[str, float] = {}
    with Requester.connect(address, progress_mode="polling" if polling else "blocking") as req:
        payload = os.urandom(64)
        out["peer_call_64B_s"] = timed(lambda: req.call("/call", payload), iters, max(10, iters // 10))
        small = os.urandom(8)
        out["peer_write_8B_s"] = timed(lambda: req.write("/small", small), iters, max(10, iters // 10))
        bulk = os.urandom(4 << 20)
        n = max(10, iters // 100)
        out["peer_write_4MiB_s"] = timed(lambda: req.write("/bulk", bulk), n, 3)
    return out


def report(r: Dict[str, float]) -> List[str]:
    mb = lambda size, s: size / s / 1e6  # noqa: E731
    return [
        f"raw  write 8 B     latency {r['raw_write_8B_s'] * 1e6:9.1f} us",
        f"raw  write 1 MiB   {mb(1 << 20, r['raw_write_1MiB_s']):9.1f} MB/s",
        f"raw  write 4 MiB   {mb(4 << 20, r['raw_write_4MiB_s']):9.1f} MB/s",
        f"peer call 64 B     latency {r['peer_call_64B_s'] * 1e6:9.1f} us",
        f"peer write 8 B     latency {r['peer_write_8B_s'] * 1e6:9.1f} us",
        f"peer write 4 MiB   {mb(4 << 20, r['peer_write_4MiB_s']):9.1f} MB/s",
        f"ratio call 64 B / raw write 8 B latency:   {r['peer_call_64B_s'] / r['raw_write_8B_s']:6.2f}x",
        f"ratio write 8 B  / raw write 8 B latency:  {r['peer_write_8B_s'] / r['raw_write_8B_s']:6.2f}x",
        f"ratio write 4 MiB throughput peer / raw:   {r['raw_write_4MiB_s'] / r['peer_write_4MiB_s']:6.2f}"
        " (1.00 = no overhead)",
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=2000, help="latency iterations (default 2000)")
    ap.add_argument("--polling", action="store_true", help="busy-poll progress engines on both sides")
    ap.add_argument("--json", action="store_true", help="print the raw numbers as JSON")
    ap.add_argument("--raw-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.raw_server:
        raw_server(args.raw_server, args.polling)
        return 0
    here = os.path.dirname(os.path.abspath(__file__))
    procs: List[subprocess.Popen[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "spec.yaml"), "w") as fh:
            fh.write(SPEC)
        with open(os.path.join(tmp, "bench_handlers.py"), "w") as fh:
            fh.write(HANDLERS)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            raw_port, peer_port = free_port(), free_port()
            raw = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--raw-server", str(raw_port)]
                                   + (["--polling"] if args.polling else []),
                                   stdout=subprocess.PIPE, text=True, env=env)
            procs.append(raw)
            serve = subprocess.Popen([sys.executable, "-m", "pydoca.cli", "serve", os.path.join(tmp, "spec.yaml"),
                                      "--listen", f"127.0.0.1:{peer_port}"] + (["--polling"] if args.polling else []),
                                     stdout=subprocess.PIPE, text=True, env=env, cwd=os.path.dirname(here))
            procs.append(serve)
            assert raw.stdout is not None and serve.stdout is not None
            blob = base64.b64decode(raw.stdout.readline())
            if "serving" not in serve.stdout.readline():
                raise SystemExit("pydoca serve did not start")
            results = bench_raw(raw_port, blob, args.iters, args.polling)
            results.update(bench_peer(f"127.0.0.1:{peer_port}", args.iters, args.polling))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print("\n".join(report(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
