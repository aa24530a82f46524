"""``pydoca serve SPEC --listen HOST:PORT [--descriptor-file F]``: run a responder."""
from __future__ import annotations

import argparse
import secrets
import signal
import sys
from typing import Any

from ._args import listen_address, plural, with_free_port


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("serve", help="serve the endpoints of a spec file (a pydoca.peer responder)")
    p.add_argument("spec", help="endpoint spec (YAML)")
    p.add_argument("--listen", type=listen_address, metavar="HOST:PORT",
                   help="RDMA CM address (default: the spec's 'listen'); port 0 picks a free port, printed "
                        "once serving")
    p.add_argument("--descriptor-file", metavar="FILE", help="also write a descriptor file (removed on exit)")
    p.add_argument("--require-token", action="store_true",
                   help="require a random access token, stored only in the descriptor file")
    p.add_argument("--token-file", metavar="FILE",
                   help="require the token in FILE (hex or raw bytes, at least 16 bytes); it never travels")
    p.add_argument("--allow", action="append", metavar="CIDR",
                   help="accept connections only from these addresses/networks (repeatable)")
    p.add_argument("--publish", metavar="STORE",
                   help="publish the service in a metadata store (dir:/path or etcd://host:port) for "
                        "Requester.discover")
    p.add_argument("--device", metavar="IBDEV", help="DOCA device (default: the one with the listen address)")
    p.add_argument("--max-connections", type=int, default=32, metavar="N",
                   help="authenticated requesters served at once (default 32)")
    p.add_argument("--max-pending", type=int, default=32, metavar="N",
                   help="handshakes in progress at once, a budget of their own; as many more requests "
                        "wait up to 3 s for a place (default 32)")
    p.add_argument("--max-pending-per-source", type=int, default=16, metavar="N",
                   help="handshakes in progress at once from one address; as many more from it wait "
                        "(default 16)")
    p.add_argument("--max-connections-per-source", type=int, default=None, metavar="N",
                   help="authenticated requesters from one address (default: no limit below --max-connections)")
    p.add_argument("--idle-evict", type=float, default=30.0, metavar="S",
                   help="when every place is taken, a newcomer takes the place of a requester idle this long "
                        "(default 30; 0: never)")
    p.add_argument("--ident-timeout", type=float, default=2.0, metavar="S",
                   help="seconds a connection may take to identify and authenticate (default 2)")
    p.add_argument("--workers", type=int, default=4, metavar="N", help="handler threads (default 4)")
    p.add_argument("--call-timeout", type=float, default=30.0, metavar="S",
                   help="answer HANDLER_ERROR when a handler runs longer (default 30; per endpoint: 'timeout')")
    p.add_argument("--polling", action="store_true", help="busy-poll the progress engine (lowest latency)")
    p.set_defaults(run=run)


def read_token(path: str) -> bytes:
    """A token file: hex text, or raw bytes; at least 16 bytes (ValueError names the fix)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise ValueError(f"cannot read token file {path}: {exc.strerror}") from None
    text = raw.strip()
    try:
        token = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        token = raw
    if len(token) < 16:
        raise ValueError(f"token file {path} holds {len(token)} bytes; use at least 16 "
                         "(python3 -c 'import secrets; print(secrets.token_hex(16))' > FILE)")
    return token


def run(args: argparse.Namespace) -> int:
    from ..peer import Responder, load_spec

    if args.require_token and not args.descriptor_file:
        raise ValueError("--require-token needs --descriptor-file (the token is handed out only in that file)")
    token = read_token(args.token_file) if args.token_file else None
    if args.require_token and token is None:
        token = secrets.token_bytes(16)
    spec = load_spec(args.spec)
    listen = args.listen or spec.listen
    if listen is not None:
        listen = with_free_port(listen)               # HOST:0 -> a free port (DOCA listens on a given port)
    resp = Responder.from_spec(spec, listen, device=args.device, max_connections=args.max_connections,
                               max_pending=args.max_pending, max_pending_per_source=args.max_pending_per_source,
                               max_connections_per_source=args.max_connections_per_source,
                               idle_evict=args.idle_evict or None, ident_timeout=args.ident_timeout,
                               token=token, allow=args.allow, workers=args.workers, call_timeout=args.call_timeout,
                               progress_mode="polling" if args.polling else "blocking")

    def stop(_sig: int, _frame: Any) -> None:
        resp.stop()

    store = None
    if args.publish:
        from ..transfer.stores import open_store
        store = open_store(args.publish)
    with resp:
        if args.descriptor_file:
            resp.write_descriptor(args.descriptor_file)
        if store is not None:
            resp.publish(store)
        old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            extra = f", descriptor file {args.descriptor_file}" if args.descriptor_file else ""
            print(f"pydoca serve: serving {spec.name} on {resp.address} ({plural(len(resp.endpoints), 'endpoint')}"
                  f"{extra})", flush=True)
            resp.serve_forever()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
    if store is not None:
        store.close()
    print("pydoca serve: stopped", file=sys.stderr, flush=True)
    return 0
