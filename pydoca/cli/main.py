"""Entry point: argparse dispatch to the subcommand modules of ``pydoca.cli``.

A subcommand module defines ``register(subparsers)``, which adds its parser
and sets ``run=<callable(args) -> int>`` as default; list it in COMMANDS.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable, List, Optional, Sequence

COMMANDS = ("devices", "doctor", "serve", "request", "export", "codegen", "bench", "transfer", "softdoca")

Runner = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand of COMMANDS registered."""
    parser = argparse.ArgumentParser(prog="pydoca", description="pydoca: NVIDIA DOCA (Common, RDMA) from Python")
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"{__package__}.{name}")
        module.register(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``pydoca`` with ``argv`` (default: sys.argv[1:]); returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(None if argv is None else list(argv))
    run: Optional[Runner] = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 1
    try:
        return run(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - the CLI reports every failure in one line
        if args.debug:
            raise
        print(f"pydoca {args.command}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def format_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> List[str]:
    """Left-aligned text columns; None shows as '-'."""
    cells = [[str(h) for h in header]] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
