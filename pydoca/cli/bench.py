"""``pydoca bench``: the perftest of pydoca (lat, bw, rate, peer, compare, summary).

    pydoca bench lat  --op write --size 8 [--transport tcp|shm] [--progress blocking|polling] --json FILE
    pydoca bench bw   --op write --size 1MiB [--outstanding N] [--one-buffer] --json FILE
    pydoca bench rate --op write --size 8 --outstanding 128 --json FILE
    pydoca bench peer --json FILE
    pydoca bench compare [--plot FILE.png]
    pydoca bench summary [--iters N] [--rounds R] [--polling] [--json]   (also: plain ``pydoca bench``)
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Dict


def _size(text: str) -> int:
    from ..peer.spec import SpecError, parse_size
    try:
        return parse_size(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _common(p: argparse.ArgumentParser, *, op: bool = True, size: str = "8") -> None:
    from ..perftest import OPS
    if op:
        p.add_argument("--op", default="write", choices=OPS, help="task type (default write)")
        p.add_argument("--size", type=_size, default=_size(size), help=f"bytes, KiB/MiB suffixes (default {size})")
    p.add_argument("--transport", default="tcp", choices=("tcp", "shm", "auto"),
                   help="softdoca transport of both processes (SOFTDOCA_TRANSPORT; default tcp)")
    p.add_argument("--progress", default="blocking", choices=("blocking", "polling"),
                   help="progress mode of the initiator and target (peer: requester and responder; the raw "
                        "references' idle targets always block) (default blocking)")
    if op:
        p.add_argument("--memory", default="shared", choices=("shared", "private"),
                       help="the target's registered memory: pydoca.shared_memory (a memfd, default) or a bytearray")
    p.add_argument("--rounds", type=int, default=5, help="rounds; medians are reported (default 5)")
    p.add_argument("--json", metavar="FILE", help="also write the result as one JSON object to FILE ('-': stdout)")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("bench", help="the perftest of pydoca: lat, bw, rate, peer, compare, summary")
    from ..perftest.summary import add_arguments
    add_arguments(p)                        # plain `pydoca bench [--iters ...]` is `summary`
    sub = p.add_subparsers(dest="bench", metavar="KIND")
    lat = sub.add_parser("lat", help="latency of one operation at a time (p50/p99, a full round trip)")
    _common(lat)
    lat.add_argument("--iterations", type=int, default=2000)
    bw = sub.add_parser("bw", help="bandwidth with N operations outstanding (MB/s)")
    _common(bw, size="1MiB")
    bw.add_argument("--outstanding", type=int, default=4)
    bw.add_argument("--iterations", type=int, default=0, help="operations per round (default: ~2 GB worth)")
    bw.add_argument("--batch", action="store_true", help="submit OUTSTANDING tasks at a time as one TaskBatch")
    bw.add_argument("--connections", type=int, default=1,
                    help="spread the outstanding operations over N connections (default 1)")
    bw.add_argument("--one-buffer", action="store_true",
                    help="every operation from one source buffer into one destination (iperf3's memory "
                         "footprint; default: one buffer per outstanding operation)")
    rate = sub.add_parser("rate", help="message rate with N outstanding, CPU per task")
    _common(rate)
    rate.add_argument("--outstanding", type=int, default=128)
    rate.add_argument("--iterations", type=int, default=20000)
    rate.add_argument("--batch", action="store_true", help="submit OUTSTANDING tasks at a time as one TaskBatch")
    peer = sub.add_parser("peer", help="pydoca.peer against raw RDMA in the same run")
    _common(peer, op=False)
    peer.add_argument("--iterations", type=int, default=1000)
    cmp = sub.add_parser("compare", help="the matrix plus iperf3, ucx_perftest and Python sockets, as ratios")
    cmp.add_argument("--rounds", type=int, default=3)
    cmp.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    cmp.add_argument("--plot", metavar="FILE.png", help="also plot the ratios (needs matplotlib)")
    cmp.add_argument("--json", metavar="FILE")
    summary = sub.add_parser("summary", help="the one-screen comparison with a TCP peer")
    add_arguments(summary)
    p.set_defaults(run=run)


def _progress(total: int) -> Any:
    """A rich progress bar on stderr (visible on a terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    console = Console(stderr=True)
    return Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), TimeElapsedColumn(),
                    console=console, transient=True, disable=not console.is_terminal)


def run(args: argparse.Namespace) -> int:
    kind = getattr(args, "bench", None)
    if kind in (None, "summary"):
        from ..perftest.summary import run as summary
        return summary(args)
    if kind == "compare":
        from ..perftest.compare import run as compare
        return compare(args)
    from ..perftest import run as R
    table: Dict[str, Callable[..., Dict[str, Any]]] = {"lat": R.lat, "bw": R.bw, "rate": R.rate, "peer": R.peer}
    fn = table[kind]
    kw: Dict[str, Any] = {"rounds": args.rounds, "progress": args.progress, "transport": args.transport}
    if kind != "peer":
        kw.update(op=args.op, size=args.size, memory=args.memory)
    if getattr(args, "iterations", None):
        kw["iterations"] = args.iterations
    if hasattr(args, "outstanding"):
        kw["outstanding"] = args.outstanding
    if getattr(args, "batch", False):
        kw["batch"] = True
    if getattr(args, "connections", 1) != 1:
        kw["connections"] = args.connections
    if getattr(args, "one_buffer", False):
        kw["one_buffer"] = True
    with _progress(args.rounds) as bar:
        task = bar.add_task(f"bench {kind}", total=args.rounds)
        result = fn(tick=lambda: bar.advance(task), **kw)
    print("\n".join(R.describe(result)))
    if args.json:
        text = json.dumps(result, indent=2)
        if args.json == "-":
            sys.stdout.write(text + "\n")
        else:
            with open(args.json, "w") as fh:
                fh.write(text + "\n")
    return 0
