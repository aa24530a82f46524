#!/usr/bin/env python3
"""softdoca's providers at C level, against the provider library's own tool in the same run (issue 22).

For each UCX transport (tcp, posix+cma) and round: the ucx provider's C bench (softdoca's provider interface,
no DOCA layer, no Python: ``make -C softdoca bench-providers``' program; 8 B write latency = a put and the
flush that makes it remote-complete, 1 MiB write bandwidth with 16 outstanding) and ``ucx_perftest``
(``ucp_put_lat`` 8 B, whose RTT is twice its one-way figure; ``ucp_put_bw`` 1 MiB) on the same transport,
interleaved. Prints medians with their spread and the ratios against the targets:
8 B write latency <= 1.5x ucx_perftest's RTT, 1 MiB write bandwidth >= 0.9x ucx_perftest's.

ucx_perftest allocates its buffers through UCX; on one host that is a shared segment the peer maps, and UCX
1.13's put copies straight into it. A DOCA mmap registers the application's own memory, which the peer cannot
map: UCX then moves a put as an active message (two copies). So on posix+cma the targets are taken against
ucx_perftest on application memory too (``UCX_ALLOC_PRIO=heap``, the "app memory" figures); both are printed.

    python3 tools/bench_providers.py [--rounds 3] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
PROG = ROOT / "softdoca" / "build" / "providers" / "test_ucx_provider"
TLS = {"tcp": "tcp", "shm": "posix,cma"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def perftest(test: str, size: int, iters: int, tls: str, app_memory: bool = False) -> Optional[float]:
    """ucx_perftest's Final line: one-way latency (us) for *_lat, MB/s for *_bw. app_memory: its buffers from
    the heap (UCX_ALLOC_PRIO=heap), as softdoca's are the application's."""
    exe = shutil.which("ucx_perftest")
    if exe is None:
        return None
    port = free_port()
    env = {**os.environ, "UCX_TLS": tls}
    if app_memory:
        env["UCX_ALLOC_PRIO"] = "heap"
    if tls == "tcp":
        env["UCX_NET_DEVICES"] = "lo"
    srv = subprocess.Popen([exe, "-p", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        out = subprocess.run([exe, "127.0.0.1", "-p", str(port), "-t", test, "-s", str(size), "-n", str(iters)],
                             env=env, capture_output=True, text=True, timeout=120).stdout
        final = [ln.split() for ln in out.splitlines() if ln.startswith("Final:")]
        if not final:
            return None
        # Final: iterations, latency typical avg overall, bandwidth avg overall (MB/s), rate avg overall
        return float(final[-1][2]) if test.endswith("_lat") else float(final[-1][6])
    finally:
        srv.kill()
        srv.wait(10)


def provider_bench(tls: str) -> Dict[str, float]:
    env = {**os.environ, "UCX_TLS": tls}
    if tls == "tcp":
        env["UCX_NET_DEVICES"] = "lo"
    out = subprocess.run([str(PROG), "--bench"], env=env, capture_output=True, text=True, timeout=300).stdout
    m = re.search(r"write8_us_median=([\d.]+).*write1M_MBps_median=([\d.]+)", out)
    if not m:
        raise SystemExit(f"the provider bench printed no BENCH line:\n{out[-2000:]}")
    return {"lat_us": float(m.group(1)), "bw_MBps": float(m.group(2))}


def spread(vals: List[float]) -> str:
    return f"{statistics.median(vals):,.2f} ({min(vals):,.2f}-{max(vals):,.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the figures and ratios to this file")
    args = ap.parse_args()
    r = subprocess.run(["make", "-s", "-C", str(ROOT / "softdoca"), "build/providers/test_ucx_provider"],
                       capture_output=True, text=True)
    if r.returncode != 0 or not PROG.exists():
        print(f"cannot build the provider bench (needs libucx-dev):\n{r.stderr[-2000:]}", file=sys.stderr)
        return 1
    if shutil.which("ucx_perftest") is None:
        print("ucx_perftest not found (Debian: ucx-utils)", file=sys.stderr)
        return 1
    res: Dict[str, Dict[str, List[float]]] = {
        k: {"lat": [], "bw": [], "ucx_rtt": [], "ucx_bw": [], "ucx_app_rtt": [], "ucx_app_bw": []} for k in TLS}
    for rnd in range(args.rounds):
        for key, tls in TLS.items():
            mine = provider_bench(tls)
            res[key]["lat"].append(mine["lat_us"])
            res[key]["bw"].append(mine["bw_MBps"])
            for app, tag in ((False, ""), (True, "_app")):
                if app and key == "tcp":
                    continue        # over tcp every put is an active message whatever the memory (same figures)
                one_way = perftest("ucp_put_lat", 8, 20000, tls, app)
                bw = perftest("ucp_put_bw", 1 << 20, 2000, tls, app)
                if one_way is not None:
                    res[key][f"ucx{tag}_rtt"].append(2 * one_way)
                if bw is not None:
                    res[key][f"ucx{tag}_bw"].append(bw)
            print(f"round {rnd + 1} {tls}: provider {mine['lat_us']:.2f} us, {mine['bw_MBps']:,.0f} MB/s; "
                  f"ucx_perftest RTT {res[key]['ucx_rtt'][-1] if res[key]['ucx_rtt'] else float('nan'):.2f} us, "
                  f"{res[key]['ucx_bw'][-1] if res[key]['ucx_bw'] else float('nan'):,.0f} MB/s"
                  + (f"; on app memory {res[key]['ucx_app_rtt'][-1]:.2f} us, {res[key]['ucx_app_bw'][-1]:,.0f} MB/s"
                     if res[key]["ucx_app_rtt"] and res[key]["ucx_app_bw"] else ""), file=sys.stderr, flush=True)

    def ratio(a: List[float], b: List[float]) -> Optional[float]:
        return statistics.median(a) / statistics.median(b) if a and b else None
    table = []
    for key, tls in TLS.items():
        f = res[key]
        ref = "ucx_app" if f["ucx_app_rtt"] and f["ucx_app_bw"] else "ucx"    # the target's reference
        lat_ratio, bw_ratio = ratio(f["lat"], f[f"{ref}_rtt"]), ratio(f["bw"], f[f"{ref}_bw"])
        table.append({"transport": tls, "reference": "application memory" if ref == "ucx_app" else "ucx_perftest",
                      "write8_us": f["lat"], "ucx_put_lat_rtt_us": f["ucx_rtt"],
                      "ucx_app_memory_put_lat_rtt_us": f["ucx_app_rtt"],
                      "lat_ratio": lat_ratio, "lat_target": "<= 1.5", "lat_met": lat_ratio is not None and
                      lat_ratio <= 1.5, "write1M_MBps": f["bw"], "ucx_put_bw_1M_MBps": f["ucx_bw"],
                      "ucx_app_memory_put_bw_1M_MBps": f["ucx_app_bw"],
                      "bw_ratio": bw_ratio, "bw_target": ">= 0.9", "bw_met": bw_ratio is not None and bw_ratio >= 0.9,
                      "lat_ratio_ucx_allocated": ratio(f["lat"], f["ucx_rtt"]),
                      "bw_ratio_ucx_allocated": ratio(f["bw"], f["ucx_bw"])})
        what = " on application memory" if ref == "ucx_app" else ""
        print(f"{tls:<10} 8 B write {spread(f['lat'])} us vs ucx_perftest RTT{what} {spread(f[f'{ref}_rtt'])} us: "
              f"ratio {lat_ratio:.2f} (target <= 1.5)" if lat_ratio else f"{tls}: no ucx_perftest latency")
        print(f"{'':<10} 1 MiB write {spread(f['bw'])} MB/s vs ucx_perftest put_bw{what} {spread(f[f'{ref}_bw'])} "
              f"MB/s: ratio {bw_ratio:.2f} (target >= 0.9)" if bw_ratio else f"{tls}: no ucx_perftest bandwidth")
        if ref == "ucx_app":
            print(f"{'':<10} (ucx_perftest on buffers UCX allocates: RTT {spread(f['ucx_rtt'])} us, "
                  f"{spread(f['ucx_bw'])} MB/s)")
    if args.json:
        Path(args.json).write_text(json.dumps({"rounds": args.rounds, "rows": table}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
