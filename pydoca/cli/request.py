"""``pydoca request TARGET ACTION ...``: one request to a responder.

TARGET is ``HOST:PORT`` (RDMA CM) or a descriptor file. Actions::

    endpoints [--json]
    write PATH (--in FILE | --data TEXT) [--offset N]
    read PATH [--out FILE] [--length N] [--offset N]
    call PATH (--data TEXT | --in FILE) [--out FILE]

``-`` as FILE is stdin/stdout. Failures exit 1 with one line on stderr.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Optional


def register(subparsers: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)        # accepted before or after ACTION
    common.add_argument("--timeout", type=float, default=argparse.SUPPRESS, metavar="S",
                        help="timeout of each step in seconds (default 10)")
    common.add_argument("--no-wait", action="store_true", default=argparse.SUPPRESS,
                        help="fail with Busy instead of queueing")
    common.add_argument("--token", metavar="HEX", default=argparse.SUPPRESS,
                        help="access token (descriptor files carry their own)")
    common.add_argument("--token-file", metavar="FILE", default=argparse.SUPPRESS,
                        help="access token from FILE (hex or raw bytes)")
    common.add_argument("--key-id", metavar="ID", default=argparse.SUPPRESS,
                        help="which of the responder's credentials the token is (default: '')")
    p = subparsers.add_parser("request", parents=[common],
                              help="send one request to a responder (HOST:PORT or descriptor file)")
    p.add_argument("target", metavar="HOST:PORT|FILE")
    p.set_defaults(timeout=10.0, no_wait=False, token=None, token_file=None, key_id=None)
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    e = sub.add_parser("endpoints", parents=[common], help="list the endpoints")
    e.add_argument("--json", action="store_true", help="print a JSON list (id, path, kind, size)")
    w = sub.add_parser("write", parents=[common], help="write data into a write endpoint")
    w.add_argument("path")
    _payload_args(w)
    w.add_argument("--offset", type=int, default=0, metavar="N", help="byte offset in the endpoint buffer (default 0)")
    r = sub.add_parser("read", parents=[common], help="read from a read endpoint")
    r.add_argument("path")
    r.add_argument("--out", default="-", metavar="FILE", help="where to write the bytes (default stdout)")
    r.add_argument("--length", type=int, default=None, metavar="N",
                   help="bytes to read (default: what the handler returns, or the whole buffer)")
    r.add_argument("--offset", type=int, default=0, metavar="N", help="byte offset in the endpoint buffer (default 0)")
    c = sub.add_parser("call", parents=[common], help="call a call endpoint")
    c.add_argument("path")
    _payload_args(c)
    c.add_argument("--out", default="-", metavar="FILE", help="where to write the response (default stdout)")
    p.set_defaults(run=run)


def _payload_args(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--in", dest="infile", metavar="FILE", help="payload from FILE ('-' for stdin)")
    g.add_argument("--data", metavar="TEXT", help="payload given inline (UTF-8)")


def _payload(args: argparse.Namespace) -> bytes:
    if args.data is not None:
        return str(args.data).encode("utf-8")
    if args.infile == "-":
        return sys.stdin.buffer.read()
    with open(args.infile, "rb") as fh:
        return fh.read()


def _emit(data: bytes, out: Optional[str]) -> None:
    if out in (None, "-"):
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        with open(str(out), "wb") as fh:
            fh.write(data)


def run(args: argparse.Namespace) -> int:
    from ..peer import Requester
    from .main import format_table

    from .serve import read_token

    token = bytes.fromhex(args.token) if args.token else None
    if args.token_file:
        token = read_token(args.token_file)
    options: dict[str, Any] = {"timeout": args.timeout}
    if token is not None:
        options["token"] = token
    if args.key_id is not None:
        options["key_id"] = args.key_id
    wait = not args.no_wait
    with Requester.open(args.target, **options) as req:
        if args.action == "endpoints":
            eps = req.endpoints()
            if args.json:
                print(json.dumps([{"id": e.id, "path": e.path, "kind": e.kind, "size": e.size} for e in eps],
                                 indent=2))
            else:
                for line in format_table(["ID", "PATH", "KIND", "SIZE"], [[e.id, e.path, e.kind, e.size] for e in eps]):
                    print(line)
        elif args.action == "write":
            data = _payload(args)
            req.write(args.path, data, args.offset, wait=wait)
            print(f"wrote {len(data)} bytes to {args.path}", file=sys.stderr)
        elif args.action == "read":
            _emit(req.read(args.path, args.length, offset=args.offset, wait=wait), args.out)
        else:
            _emit(req.call(args.path, _payload(args), wait=wait), args.out)
    return 0
