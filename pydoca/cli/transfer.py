"""``pydoca transfer serve|segments|bench``: the transfer engine from the command line.

    pydoca transfer serve --listen HOST:PORT [--metadata STORE] [--register NAME:SIZE[:FILL]]...
    pydoca transfer segments [--metadata STORE] [--json]
    pydoca transfer bench --op write --block-size 1MiB --batch-size 8 --duration 3 [--threads N]
                          [--target HOST:PORT/NAME] [--metadata STORE] [--json FILE] [--no-mooncake]

STORE: ``embedded`` (default), ``dir:/path`` (one host) or ``etcd://host:port``.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any


def _size(text: str) -> int:
    from ..peer.spec import SpecError, parse_size
    try:
        return parse_size(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("transfer", help="the transfer engine: serve segments, list them, benchmark")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s = sub.add_parser("serve", help="run an engine that serves registered segments until SIGTERM/SIGINT")
    s.add_argument("--listen", default="127.0.0.1:0", metavar="HOST:PORT")
    s.add_argument("--metadata", default=None, metavar="STORE")
    s.add_argument("--register", action="append", default=[], metavar="NAME:SIZE[:FILL]",
                   help="register a zeroed segment in shared memory (FILL: 'pattern' fills the bench pattern)")
    s.add_argument("--token-file", metavar="FILE")
    s.add_argument("--device", action="append", default=[], metavar="NAME",
                   help="also serve on this device (ibdev or interface name; repeatable)")
    l_ = sub.add_parser("segments", help="list the segments published in a metadata store")
    l_.add_argument("--metadata", default=None, metavar="STORE")
    l_.add_argument("--json", action="store_true")
    b = sub.add_parser("bench", help="batched transfers, like Mooncake's transfer_engine_bench")
    b.add_argument("--op", choices=("write", "read"), default="write")
    b.add_argument("--block-size", type=_size, default=_size("1MiB"))
    b.add_argument("--batch-size", type=int, default=8)
    b.add_argument("--duration", type=float, default=3.0, help="seconds per system (default 3)")
    b.add_argument("--threads", type=int, default=1)
    b.add_argument("--connections", type=int, default=2, help="connections per peer (default 2)")
    b.add_argument("--slice-size", type=_size, default=_size("1MiB"))
    b.add_argument("--target", metavar="HOST:PORT/NAME", help="default: start a local target process")
    b.add_argument("--metadata", default=None, metavar="STORE")
    b.add_argument("--json", metavar="FILE", help="write the result object to FILE ('-': stdout)")
    b.add_argument("--no-mooncake", action="store_true", help="skip the Mooncake TE run even if installed")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.action == "serve":
        return _serve(args)
    if args.action == "segments":
        return _segments(args)
    from ..transfer.bench import run as bench
    result = bench(args)
    text = json.dumps(result, indent=2)
    if args.json == "-":
        print(text)
    elif args.json:
        with open(args.json, "w") as fh:
            fh.write(text + "\n")
    return 0 if result.get("verified") else 1


def _serve(args: argparse.Namespace) -> int:
    import numpy as np

    from ..memory import shared_memory
    from ..transfer import TransferEngine
    from ..transfer.bench import pattern
    token = None
    if args.token_file:
        from .serve import read_token
        token = read_token(args.token_file)
    with TransferEngine(args.listen, metadata=args.metadata, token=token, devices=args.device) as te:
        for item in args.register:
            name, _, rest = item.partition(":")
            size_text, _, fill = rest.partition(":")
            n = _size(size_text)
            # shared memory (a sealed memfd, zeroed): engines on this host copy into it with memcpy
            buf = np.frombuffer(shared_memory(n, name=f"pydoca-segment-{name}"), dtype=np.uint8)
            if fill == "pattern":
                buf[:] = pattern(n)
            te.register(name, buf)
        stop = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.append(1))
        print(f"pydoca transfer: serving {te.address} ({len(te.segments)} segments; paths "
              f"{', '.join(te.paths)})", flush=True)
        while not stop:
            time.sleep(0.1)
    print("pydoca transfer: stopped", file=sys.stderr)
    return 0


def _segments(args: argparse.Namespace) -> int:
    from ..transfer.metadata import PREFIX
    from ..transfer.stores import open_store
    from .main import format_table
    with open_store(args.metadata) as store:
        found = {k[len(PREFIX) + 10:]: v for k, v in store.list(f"{PREFIX}/segments/").items()}
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        for line in format_table(["SEGMENT", "LENGTH", "GENERATION"],
                                 [[k, v.get("length"), v.get("generation")] for k, v in sorted(found.items())]):
            print(line)
    return 0
