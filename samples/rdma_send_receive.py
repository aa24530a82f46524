"""RDMA send/receive: the responder posts a receive, the requester sends a data
pattern into it; the responder verifies opcode, length and data.

    python samples/rdma_send_receive.py responder --listen 127.0.0.1:7471
    python samples/rdma_send_receive.py requester --connect 127.0.0.1:7471
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Optional

from _common import Access, Opcode, Session, check_received, make_parser, run, summary

NAME = "rdma_send_receive"


def responder(args: argparse.Namespace) -> str:
    with Session(args, NAME, size=args.size, access=Access.LOCAL_READ_WRITE, share=False, peer_shares=False) as s:
        rx = []
        s.respond(lambda: rx.append(s.post_receive(s.buffer(empty=True))))

        def check() -> Optional[str]:
            return check_received(s, rx[0], Opcode.SEND, None)
        s.finish_responder(check)
        return summary(NAME, "responder", s.size, time.monotonic() - s.established_at, note="data verified")


def requester(args: argparse.Namespace) -> str:
    with Session(args, NAME, size=None, access=Access.LOCAL_READ_WRITE, fill=True,
                 share=False, peer_shares=False) as s:
        s.request()
        start = time.monotonic()
        s.result(s.rdma.send(s.connection, s.buffer()), "the send")
        elapsed = time.monotonic() - start
        s.finish_requester(None)
        return summary(NAME, "requester", s.size, elapsed)


if __name__ == "__main__":
    sys.exit(run(make_parser(NAME, __doc__.splitlines()[0]), {"responder": responder, "requester": requester}))
