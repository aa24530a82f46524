"""``pydoca transfer serve|segments|bench``: the transfer engine from the command line.

    pydoca transfer serve --listen HOST:PORT [--metadata STORE] [--register NAME:SIZE[:pattern]]...
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
from typing import Any, Tuple

from ._args import count, listen_address, plural, size, write_json


def segment_arg(text: str) -> Tuple[str, int, str]:
    """``NAME:SIZE[:FILL]`` of ``--register`` -> (name, bytes, fill); FILL is ``zero`` (default) or ``pattern``."""
    name, _, rest = text.partition(":")
    size_text, _, fill = rest.partition(":")
    if not name or not size_text:
        raise argparse.ArgumentTypeError(f"expected NAME:SIZE[:FILL] (e.g. kv:1GiB:pattern), got {text!r}")
    if fill not in ("", "zero", "pattern"):
        raise argparse.ArgumentTypeError(f"fill {fill!r} of {text!r}: use 'pattern' (the bench pattern, what "
                                         "'pydoca transfer bench --op read' verifies against) or 'zero'")
    return name, size(size_text), fill or "zero"


STORE_HELP = "metadata store: embedded (default), dir:/path (one host) or etcd://host:port"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("transfer", help="the transfer engine: serve segments, list them, benchmark")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s = sub.add_parser("serve", help="run an engine that serves registered segments until SIGTERM/SIGINT")
    s.add_argument("--listen", type=listen_address, default="127.0.0.1:0", metavar="HOST:PORT",
                   help="address to serve on; port 0 picks a free port, printed once serving (default 127.0.0.1:0)")
    s.add_argument("--metadata", default=None, metavar="STORE", help=STORE_HELP)
    s.add_argument("--register", action="append", type=segment_arg, default=[], metavar="NAME:SIZE[:FILL]",
                   help="register a segment in shared memory, zeroed; FILL 'pattern' fills it with the bench "
                        "pattern, which 'pydoca transfer bench --op read --target HOST:PORT/NAME' verifies "
                        "(repeatable)")
    s.add_argument("--token-file", metavar="FILE",
                   help="require the access token in FILE (hex or raw bytes, at least 16 bytes)")
    s.add_argument("--device", action="append", default=[], metavar="NAME",
                   help="also serve on this device (ibdev or interface name; repeatable)")
    l_ = sub.add_parser("segments", help="list the segments published in a metadata store")
    l_.add_argument("--metadata", default=None, metavar="STORE", help=STORE_HELP)
    l_.add_argument("--json", action="store_true", help="print a JSON object (segment -> length, generation)")
    b = sub.add_parser("bench", help="batched transfers, like Mooncake's transfer_engine_bench")
    b.add_argument("--op", choices=("write", "read"), default="write", help="transfer direction (default write)")
    b.add_argument("--block-size", type=size, default=size("1MiB"), metavar="BYTES",
                   help="bytes per request (default 1MiB)")
    b.add_argument("--batch-size", type=count(1), default=8, metavar="N",
                   help="requests per submitted batch (default 8)")
    b.add_argument("--duration", type=float, default=3.0, metavar="S", help="seconds per system (default 3)")
    b.add_argument("--threads", type=count(1), default=1, metavar="N",
                   help="threads, each with its own engine and span of the target segment (default 1)")
    b.add_argument("--connections", type=count(1), default=2, metavar="N", help="connections per peer (default 2)")
    b.add_argument("--slice-size", type=size, default=size("1MiB"), metavar="BYTES",
                   help="requests are cut into slices of this size (default 1MiB)")
    b.add_argument("--target", metavar="HOST:PORT/NAME",
                   help="an existing segment (for --op read registered with the pattern: "
                        "pydoca transfer serve --register NAME:SIZE:pattern); default: start a local target")
    b.add_argument("--metadata", default=None, metavar="STORE", help=STORE_HELP + " (for the local target)")
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
    if args.json:
        write_json(result, args.json)
    if not result.get("verified"):
        print(f"pydoca transfer bench: verification failed: {result.get('verify_error')}", file=sys.stderr)
        return 1
    return 0


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
        for name, n, fill in args.register:
            # shared memory (a sealed memfd, zeroed): engines on this host copy into it with memcpy
            buf = np.frombuffer(shared_memory(n, name=f"pydoca-segment-{name}"), dtype=np.uint8)
            if fill == "pattern":
                buf[:] = pattern(n)
            te.register(name, buf)
        stop = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.append(1))
        print(f"pydoca transfer: serving {te.address} ({plural(len(te.segments), 'segment')}; "
              f"{'path' if len(te.paths) == 1 else 'paths'} {', '.join(te.paths)})", flush=True)
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
