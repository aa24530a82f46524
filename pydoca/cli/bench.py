"""``pydoca bench``: the perftest of pydoca (lat, bw, rate, peer, compare, summary).

    pydoca bench lat  --op write --size 8 [--transport tcp|shm] [--progress blocking|polling] [--json FILE]
    pydoca bench bw   --op write --size 1MiB [--outstanding N] [--one-buffer] [--json FILE]
    pydoca bench rate --op write --size 8 --outstanding 128 [--json FILE]
    pydoca bench peer [--json FILE]
    pydoca bench compare [--quick] [--plot FILE.png] [--json FILE]
    pydoca bench summary [--iterations N] [--progress blocking|polling] [--json FILE]

``--rounds N`` and ``--json FILE`` are accepted before the kind too, with the
same meaning (``pydoca bench --rounds 1 lat``); ``--json -`` writes the JSON
to stdout and the human lines to stderr. ``pydoca bench`` alone prints this
usage. Nothing here loads the DOCA backend until a measurement starts.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Dict, Optional

from ._args import count, plural, size, write_json

#: --rounds when not given, per kind
ROUNDS = {"lat": 5, "bw": 5, "rate": 5, "peer": 5, "compare": 3, "summary": 5}
JSON_HELP = "also write the result as one JSON object to FILE ('-': stdout, the human lines then go to stderr)"


def _shared(p: argparse.ArgumentParser, rounds: Optional[int]) -> None:
    """--rounds and --json: on ``pydoca bench`` itself and on every kind (default SUPPRESS: a value given in
    either position survives the other parser, the kind's default is applied in run())."""
    shown = f"default {rounds}" if rounds is not None else "default: the kind's, 5 (compare: 3)"
    p.add_argument("--rounds", type=count(1), default=argparse.SUPPRESS, metavar="N",
                   help=f"rounds; medians over them are reported ({shown})")
    p.add_argument("--json", metavar="FILE", default=argparse.SUPPRESS, help=JSON_HELP)


def _common(p: argparse.ArgumentParser, kind: str, *, op: bool = True, default_size: str = "8") -> None:
    from ..perftest import OPS
    _shared(p, ROUNDS[kind])
    if op:
        p.add_argument("--op", default="write", choices=OPS, help="task type (default write)")
        p.add_argument("--size", type=size, default=size(default_size), metavar="BYTES",
                       help=f"bytes per operation, KiB/MiB suffixes allowed (default {default_size})")
    p.add_argument("--transport", default="tcp", choices=("tcp", "shm", "auto"),
                   help="softdoca transport of both processes (SOFTDOCA_TRANSPORT; default tcp)")
    p.add_argument("--progress", default="blocking", choices=("blocking", "polling"),
                   help="progress mode of the initiator and target (peer: requester and responder; the raw "
                        "references' idle targets always block) (default blocking)")
    if op:
        p.add_argument("--memory", default="shared", choices=("shared", "private"),
                       help="the target's registered memory: pydoca.shared_memory (a memfd, default) or a bytearray")
        p.add_argument("--target-spin", type=count(0), default=0, metavar="US",
                       help="softdoca: the target's engine thread polls US microseconds after each event before "
                            "it sleeps (SOFTDOCA_SPIN_US of the target alone), as ucx_perftest's and "
                            "fi_pingpong's targets poll (default 0: under a provider it polls only after serving "
                            "operations that keep coming, SOFTDOCA_SERVE_SPIN_US; else it sleeps and each "
                            "operation pays its wake-up)")


def _iterations(p: argparse.ArgumentParser, default: int, what: str) -> None:
    p.add_argument("--iterations", type=count(0 if default == 0 else 1), default=default, metavar="N",
                   help=f"{what} per round (default {default if default else '~2 GB worth'})")
    p.add_argument("--iters", type=count(1), dest="iterations", help=argparse.SUPPRESS)   # old spelling


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("bench", help="the perftest of pydoca: lat, bw, rate, peer, compare, summary",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _shared(p, None)
    sub = p.add_subparsers(dest="bench", metavar="KIND")
    lat = sub.add_parser("lat", help="latency of one operation at a time (p50/p99, a full round trip)")
    _common(lat, "lat")
    _iterations(lat, 2000, "operations")
    bw = sub.add_parser("bw", help="bandwidth with N operations outstanding (MB/s)")
    _common(bw, "bw", default_size="1MiB")
    bw.add_argument("--outstanding", type=count(1), default=4, metavar="N",
                    help="operations kept in flight (default 4)")
    _iterations(bw, 0, "operations")
    bw.add_argument("--batch", action="store_true", help="submit OUTSTANDING tasks at a time as one TaskBatch")
    bw.add_argument("--connections", type=count(1), default=1, metavar="N",
                    help="spread the outstanding operations over N connections (default 1)")
    bw.add_argument("--one-buffer", action="store_true",
                    help="every operation from one source buffer into one destination (iperf3's memory "
                         "footprint; default: one buffer per outstanding operation)")
    rate = sub.add_parser("rate", help="message rate with N outstanding, CPU per task")
    _common(rate, "rate")
    rate.add_argument("--outstanding", type=count(1), default=128, metavar="N",
                      help="operations kept in flight (default 128)")
    _iterations(rate, 20000, "operations")
    rate.add_argument("--batch", action="store_true", help="submit OUTSTANDING tasks at a time as one TaskBatch")
    peer = sub.add_parser("peer", help="pydoca.peer against raw RDMA in the same run")
    _common(peer, "peer", op=False)
    _iterations(peer, 1000, "calls and writes of each kind")
    cmp = sub.add_parser("compare", help="the matrix plus iperf3, ucx_perftest and Python sockets, as ratios")
    _shared(cmp, ROUNDS["compare"])
    cmp.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    cmp.add_argument("--plot", metavar="FILE.png", help="also plot the ratios against their targets (needs "
                                                        "matplotlib: pip install 'pydoca[plot]')")
    summary = sub.add_parser("summary", help="the one-screen comparison of raw RDMA and pydoca.peer with TCP")
    _shared(summary, ROUNDS["summary"])
    from ..perftest.summary import add_arguments
    add_arguments(summary)
    p.set_defaults(run=run, bench_usage=p.format_help)


def _progress(total: int) -> Any:
    """A rich progress bar on stderr (visible on a terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    console = Console(stderr=True)
    return Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), TimeElapsedColumn(),
                    console=console, transient=True, disable=not console.is_terminal)


def run(args: argparse.Namespace) -> int:
    kind = getattr(args, "bench", None)
    if kind is None:                       # `pydoca bench` alone: what there is to run
        sys.stdout.write(args.bench_usage())
        return 1
    if not hasattr(args, "rounds"):
        args.rounds = ROUNDS[kind]
    if not hasattr(args, "json"):
        args.json = None
    if kind == "summary":
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
        if args.target_spin:
            kw["target_spin_us"] = args.target_spin
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
        task = bar.add_task(f"bench {kind}: {plural(args.rounds, 'round')}", total=args.rounds)
        result = fn(tick=lambda: bar.advance(task), **kw)
    human = sys.stderr if args.json == "-" else sys.stdout
    print("\n".join(R.describe(result)), file=human, flush=True)
    if args.json:
        write_json(result, args.json)
    return 0
