"""``pydoca export``: write a responder descriptor file.

* ``pydoca export HOST:PORT -o FILE``: ask a running responder (its hello)
  and pin its instance: the file goes stale when that responder exits;
* ``pydoca export --spec SPEC --listen HOST:PORT -o FILE``: from a spec, for
  a responder that is (or will be) served there; no instance is pinned.
"""
from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("export", help="write a responder descriptor file (from a running responder or a spec)")
    p.add_argument("target", nargs="?", metavar="HOST:PORT", help="a running responder to describe")
    p.add_argument("--spec", help="describe this spec instead of a running responder (with --listen)")
    p.add_argument("--listen", metavar="HOST:PORT", help="with --spec: where it is served (default: spec's listen)")
    p.add_argument("--token", metavar="HEX", help="access token of the responder, stored in the file")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="descriptor file to write (mode 0600)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for the running responder (default 10)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..peer import Requester, load_spec
    from ..peer.files import write_hello_file, write_spec_file
    from ..peer.spec import split_address

    token = bytes.fromhex(args.token) if args.token else None
    if (args.target is None) == (args.spec is None):
        raise ValueError("give either a running responder (HOST:PORT) or --spec SPEC --listen HOST:PORT")
    if args.spec is not None:
        spec = load_spec(args.spec)
        listen = args.listen or spec.listen
        if listen is None:
            raise ValueError("--spec needs --listen HOST:PORT (or 'listen' in the spec)")
        host, port = split_address(listen)
        write_spec_file(args.output, spec, host, port, token)
    else:
        host, port = split_address(args.target)
        with Requester.connect(args.target, timeout=args.timeout, token=token) as req:
            write_hello_file(args.output, req.hello, host, port, token)
    print(f"pydoca export: wrote {args.output}")
    return 0
