#!/usr/bin/env python3
"""Instructions per 8-byte write of softdoca's native data plane, against a stored baseline (`make bench-native-ir`).

Runs bench/native_ir.c under ``valgrind --tool=callgrind --instr-atstart=no`` (the program turns the
instrumentation on for its write loop only) in three configurations (always SOFTDOCA_PROVIDER=native):
shm-memfd (SOFTDOCA_TRANSPORT=shm, the target's memory a sealed memfd: the same-host transport copies with memcpy),
shm-private (shm, private memory: process_vm_writev) and tcp (the native TCP link), ``--runs`` times each, and
takes the median of the total instruction count (Ir) of the loop, all threads of the process together (the
application thread that submits and completes, and the engine thread that serves the target side), divided by the
number of writes. Each run must show the copy function of its path in the profile (and not the others'), so a
figure cannot silently come from another path. Deterministic for shm (the same count every run); tcp moves by
about 0.1% between runs (how the engine thread's reads batch the requests).

Each figure is compared with bench/native_ir_baseline.json: more than ``budget`` (2%) over the baseline fails
(exit 1). ``--update`` writes the figures as the new baseline instead. The counts depend on the compiler and its
flags (softdoca's -O2 build) and on valgrind's version: record a baseline on the machine that compares with it.
Without valgrind it says SKIP and succeeds.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Dict, List

# name: (SOFTDOCA_TRANSPORT, the target's memory, the copy function that must run in the loop, those that must not)
CONFIGS = {
    "shm-memfd": ("shm", "memfd", ["sd_xport_memcpy"], ["process_vm_writev"]),
    "shm-private": ("shm", "private", ["process_vm_writev"], ["sd_xport_memcpy"]),
    "tcp": ("tcp", "private", [], ["sd_xport_memcpy", "process_vm_writev"]),
}


def totals(text: str) -> int:
    """The ``totals:`` line of a callgrind output file (Ir only)."""
    for line in text.splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError("callgrind output without a totals line")


def measure(prog: str, config: str, n: int, batch: int, workdir: str) -> int:
    """Total Ir of the loop of one run; checks that the loop took the path the configuration is about."""
    transport, mem, must, mustnot = CONFIGS[config]
    out = os.path.join(workdir, f"callgrind.{config}.out")
    env = dict(os.environ, SOFTDOCA_TRANSPORT=transport, SOFTDOCA_PROVIDER="native")
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}", prog, str(n),
           str(batch), mem]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if run.returncode != 0 or "ok" not in run.stdout:
        sys.stderr.write(run.stdout + run.stderr[-3000:])
        raise RuntimeError(f"{prog} failed under callgrind ({config}): exit {run.returncode}")
    with open(out) as f:
        text = f.read()
    # function names appear once each, as "fn=(id) name", when they ran while instrumented
    ran = {name for name in must + mustnot if f") {name}\n" in text}
    if ran != set(must):
        raise RuntimeError(f"{config}: the loop ran {sorted(ran) or 'none'} of {sorted(must + mustnot)}, expected "
                           f"{sorted(must) or 'none'}: not the path this figure is about")
    return totals(text)


def version_of(*cmd: str) -> str:
    """The first line of ``cmd --version``."""
    out = subprocess.run([*cmd, "--version"], capture_output=True, text=True).stdout
    return out.splitlines()[0].strip() if out else "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prog", default="build/bench/native_ir")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", default="bench/native_ir_baseline.json")
    ap.add_argument("--update", action="store_true", help="write the figures as the new baseline")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        print("SKIP: valgrind not installed (Debian: valgrind)")
        return 0

    figures: Dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="native_ir.") as tmp:
        for t in CONFIGS:
            counts: List[int] = [measure(args.prog, t, args.n, args.batch, tmp) for _ in range(args.runs)]
            figures[t] = statistics.median(counts) / args.n
            print(f"{t}: {figures[t]:.1f} Ir/write (median of {args.runs}: total Ir {sorted(counts)}, "
                  f"n={args.n}, batch={args.batch})")

    if args.update:
        base: Dict[str, Any] = {
            "what": "callgrind Ir per 8-byte write, all threads, the loop of bench/native_ir.c (median of runs)",
            "n": args.n, "batch": args.batch, "budget": 0.02,
            "ir_per_write": {t: round(v, 1) for t, v in figures.items()},
            "recorded_with": {"valgrind": version_of("valgrind"), "machine": platform.machine(),
                              "cc": version_of(os.environ.get("CC", "cc"))},
        }
        with open(args.baseline, "w") as f:
            json.dump(base, f, indent=2)
            f.write("\n")
        print(f"baseline written: {args.baseline}")
        return 0

    with open(args.baseline) as f:
        base = json.load(f)
    if (base["n"], base["batch"]) != (args.n, args.batch):
        print(f"the baseline was taken with n={base['n']} batch={base['batch']}, not n={args.n} batch={args.batch}: "
              "no comparison (NATIVE_IR_UPDATE=1 records a new one)")
        return 2
    budget = float(base["budget"])
    over = []
    for t in CONFIGS:
        was = float(base["ir_per_write"][t])
        delta = figures[t] / was - 1
        verdict = "OVER BUDGET" if delta > budget else "ok"
        print(f"{t}: {figures[t]:.1f} Ir/write, baseline {was:.1f}: {delta:+.2%} (budget {budget:+.0%}) {verdict}")
        if delta > budget:
            over.append(t)
    if over:
        print(f"bench-native-ir: {', '.join(over)} over the +{budget:.0%} budget")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
