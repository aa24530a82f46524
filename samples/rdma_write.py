"""RDMA write: the requester writes a data pattern into the responder's memory;
the responder verifies it.

    python samples/rdma_write.py responder --listen 127.0.0.1:7471
    python samples/rdma_write.py requester --connect 127.0.0.1:7471
"""
from __future__ import annotations

import argparse
import sys
import time

from _common import Access, Session, make_parser, run, summary, verify

NAME = "rdma_write"


def responder(args: argparse.Namespace) -> str:
    with Session(args, NAME, size=args.size, access=Access.LOCAL_READ_WRITE | Access.RDMA_WRITE,
                 share=True, peer_shares=False) as s:
        s.respond()
        s.finish_responder(lambda: verify(s.memory, s.expected(), "written data"))
        return summary(NAME, "responder", s.size, time.monotonic() - s.established_at, note="data verified")


def requester(args: argparse.Namespace) -> str:
    with Session(args, NAME, size=None, access=Access.LOCAL_READ_WRITE, fill=True,
                 share=False, peer_shares=True) as s:
        s.request()                             # connected; size and the responder's memory known
        local, remote = s.buffer(), s.buffer(s.peer_mmap, empty=True)
        start = time.monotonic()
        for _ in range(args.iterations):
            remote.reset()
            s.result(s.rdma.write(s.connection, local, remote), "the RDMA write")
        elapsed = time.monotonic() - start
        s.finish_requester(None)
        return summary(NAME, "requester", s.size, elapsed, iterations=args.iterations)


if __name__ == "__main__":
    sys.exit(run(make_parser(NAME, __doc__.splitlines()[0], iterations=True),
                 {"responder": responder, "requester": requester}))
