"""``pydoca codegen SPEC -o client.py``: generate a typed client class."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("codegen", help="generate a typed client module from a spec file")
    p.add_argument("spec", help="endpoint spec (YAML)")
    p.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..peer.codegen import generate
    from ..peer.spec import load_spec

    source = generate(load_spec(args.spec), source=os.path.basename(args.spec))
    if args.output:
        tmp = f"{args.output}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(source)
        os.replace(tmp, args.output)
    else:
        sys.stdout.write(source)
    return 0
