"""RDMA write with immediate: the requester writes a data pattern into the
responder's memory and consumes one of its receives with 32-bit immediate
data, so the responder learns that the write has landed; it verifies the
opcode (WRITE_WITH_IMM), the immediate and the data.

    python samples/rdma_write_immediate.py responder --listen 127.0.0.1:7471
    python samples/rdma_write_immediate.py requester --connect 127.0.0.1:7471
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Optional

from _common import Access, Opcode, Session, check_received, make_parser, run, summary

NAME = "rdma_write_immediate"
IMMEDIATE = 0x5EED1234


def responder(args: argparse.Namespace) -> str:
    with Session(args, NAME, size=args.size, access=Access.LOCAL_READ_WRITE | Access.RDMA_WRITE,
                 share=True, peer_shares=False) as s:
        rx = []
        s.respond(lambda: rx.append(s.post_receive()))   # a control slot: a write_imm carries no payload

        def check() -> Optional[str]:
            return check_received(s, rx[0], Opcode.WRITE_WITH_IMM, IMMEDIATE)
        s.finish_responder(check)
        return summary(NAME, "responder", s.size, time.monotonic() - s.established_at,
                       note=f"data and immediate 0x{IMMEDIATE:08x} verified")


def requester(args: argparse.Namespace) -> str:
    with Session(args, NAME, size=None, access=Access.LOCAL_READ_WRITE, fill=True,
                 share=False, peer_shares=True) as s:
        s.request()
        start = time.monotonic()
        s.result(s.rdma.write_imm(s.connection, s.buffer(), s.buffer(s.peer_mmap, empty=True), IMMEDIATE),
                 "the RDMA write with immediate")
        elapsed = time.monotonic() - start
        s.finish_requester(None)
        return summary(NAME, "requester", s.size, elapsed)


if __name__ == "__main__":
    sys.exit(run(make_parser(NAME, __doc__.splitlines()[0]), {"responder": responder, "requester": requester}))
