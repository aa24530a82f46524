"""``pydoca serve SPEC --listen HOST:PORT [--descriptor-file F]``: run a responder."""
from __future__ import annotations

import argparse
import secrets
import signal
import sys
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("serve", help="serve the endpoints of a spec file (a pydoca.peer responder)")
    p.add_argument("spec", help="endpoint spec (YAML)")
    p.add_argument("--listen", metavar="HOST:PORT", help="RDMA CM address (default: the spec's 'listen')")
    p.add_argument("--descriptor-file", metavar="FILE", help="also write a descriptor file (removed on exit)")
    p.add_argument("--require-token", action="store_true",
                   help="require a random access token, stored only in the descriptor file")
    p.add_argument("--device", metavar="IBDEV", help="DOCA device (default: the one with the listen address)")
    p.add_argument("--max-connections", type=int, default=32, metavar="N")
    p.add_argument("--lease-timeout", type=float, default=30.0, metavar="S",
                   help="disconnect a requester holding an endpoint this long (default 30)")
    p.add_argument("--polling", action="store_true", help="busy-poll the progress engine (lowest latency)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..peer import Responder, load_spec

    if args.require_token and not args.descriptor_file:
        raise ValueError("--require-token needs --descriptor-file (the token travels only in that file)")
    spec = load_spec(args.spec)
    resp = Responder.from_spec(spec, args.listen, device=args.device, max_connections=args.max_connections,
                               lease_timeout=args.lease_timeout,
                               token=secrets.token_bytes(16) if args.require_token else None,
                               progress_mode="polling" if args.polling else "blocking")

    def stop(_sig: int, _frame: Any) -> None:
        resp.stop()

    with resp:
        if args.descriptor_file:
            resp.write_descriptor(args.descriptor_file)
        old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            extra = f", descriptor file {args.descriptor_file}" if args.descriptor_file else ""
            print(f"pydoca serve: serving {spec.name} on {resp.address} ({len(resp.endpoints)} endpoints{extra})",
                  flush=True)
            resp.serve_forever()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
    print("pydoca serve: stopped", file=sys.stderr, flush=True)
    return 0
