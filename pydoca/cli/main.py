"""Entry point: argparse dispatch to the subcommand modules of ``pydoca.cli``.

A subcommand module defines ``register(subparsers)``, which adds its parser
and sets ``run=<callable(args) -> int>`` as default; list it in COMMANDS.
"""
from __future__ import annotations

import argparse
import importlib
import os
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
    """Run ``pydoca`` with ``argv`` (default: sys.argv[1:]); returns the exit code.

    Building the parser, ``--help`` and argument errors never load the DOCA
    backend; a command loads it when it first uses DOCA. A closed stdout (``pydoca
    devices --json | head``) ends the command quietly with exit status 0."""
    try:
        code = _main(argv)
        sys.stdout.flush()             # a reader that went away shows up here, not at interpreter exit
        return code
    except BrokenPipeError:
        _quiet_stdout()
        return 0


def _main(argv: Optional[Sequence[str]]) -> int:
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
    except BrokenPipeError:
        raise
    except Exception as exc:  # noqa: BLE001 - the CLI reports every failure in one line
        if args.debug:
            raise
        print(f"pydoca {args.command}: error: {type(exc).__name__}: {exc}{_hint(exc)}", file=sys.stderr)
        return 1


def _hint(exc: BaseException) -> str:
    """What to run next, for errors whose message does not say it."""
    if type(exc).__name__ == "BackendError":      # pydoca._native's (importing it would load a backend)
        return " (`pydoca doctor` explains)"
    return ""


def _quiet_stdout() -> None:
    """The reader of stdout went away: send what is left to /dev/null, so the flush at exit raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):     # stdout is not a file (e.g. captured in tests)
        pass


def format_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> List[str]:
    """Left-aligned text columns; None shows as '-'."""
    cells = [[str(h) for h in header]] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
