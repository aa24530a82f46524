"""``pydoca bench``: RDMA and pydoca.peer figures, as ratios against a TCP peer measured in the same run."""
from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("bench", help="measure RDMA and peer-layer latency/throughput against TCP on loopback")
    from ..bench import add_arguments
    add_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..bench import run as bench_run
    return bench_run(args)
