"""RDMA read: the requester reads the responder's data pattern and verifies it.

    python samples/rdma_read.py responder --listen 127.0.0.1:7471
    python samples/rdma_read.py requester --connect 127.0.0.1:7471
"""
from __future__ import annotations

import argparse
import sys
import time

from _common import Access, Session, make_parser, run, summary, verify

NAME = "rdma_read"


def responder(args: argparse.Namespace) -> str:
    with Session(args, NAME, size=args.size, access=Access.LOCAL_READ_WRITE | Access.RDMA_READ, fill=True,
                 share=True, peer_shares=False) as s:
        s.respond()
        s.finish_responder()                    # the requester checks the data
        return summary(NAME, "responder", s.size, time.monotonic() - s.established_at, note="data served")


def requester(args: argparse.Namespace) -> str:
    with Session(args, NAME, size=None, access=Access.LOCAL_READ_WRITE, share=False, peer_shares=True) as s:
        s.request()
        local, remote = s.buffer(empty=True), s.buffer(s.peer_mmap)
        start = time.monotonic()
        for _ in range(args.iterations):
            local.reset()
            s.result(s.rdma.read(s.connection, remote, local), "the RDMA read")
        elapsed = time.monotonic() - start
        s.finish_requester(verify(s.memory, s.expected(), "read data"))
        return summary(NAME, "requester", s.size, elapsed, iterations=args.iterations, note="data verified")


if __name__ == "__main__":
    sys.exit(run(make_parser(NAME, __doc__.splitlines()[0], iterations=True),
                 {"responder": responder, "requester": requester}))
