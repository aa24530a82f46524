"""RDMA atomics: the requester runs fetch_add and compare_swap on an 8-byte
counter in the responder's memory and checks every returned old value; the
responder checks the counter's final value.

    python samples/rdma_atomic.py responder --listen 127.0.0.1:7471
    python samples/rdma_atomic.py requester --connect 127.0.0.1:7471
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Optional

from _common import Access, Session, make_parser, run, summary

NAME = "rdma_atomic"
INITIAL, ADD, SWAP = 1000, 234, 0xDEADBEEF00C0FFEE
# (operation, operand(s), expected old value); the counter ends at SWAP + 1
STEPS = (("fetch_add", {"add": ADD}, INITIAL),
         ("compare_swap", {"compare": INITIAL + ADD, "swap": SWAP}, INITIAL + ADD),   # swaps
         ("compare_swap", {"compare": INITIAL, "swap": 7}, SWAP),                     # stale compare: no swap
         ("fetch_add", {"add": 1}, SWAP))
FINAL = SWAP + 1
PERMISSIONS = Access.LOCAL_READ_WRITE | Access.RDMA_READ | Access.RDMA_WRITE | Access.RDMA_ATOMIC


def responder(args: argparse.Namespace) -> str:
    with Session(args, NAME, size=8, access=Access.LOCAL_READ_WRITE | Access.RDMA_ATOMIC,
                 initial=lambda n: INITIAL.to_bytes(n, sys.byteorder), permissions=PERMISSIONS,
                 share=True, peer_shares=False) as s:
        s.respond()

        def check() -> Optional[str]:
            value = int.from_bytes(s.memory, sys.byteorder)
            return None if value == FINAL else f"counter is 0x{value:x}, expected 0x{FINAL:x}"
        s.finish_responder(check)
        return summary(NAME, "responder", 8, time.monotonic() - s.established_at,
                       note=f"counter 0x{FINAL:x} verified")


def requester(args: argparse.Namespace) -> str:
    with Session(args, NAME, size=8 * len(STEPS), access=Access.LOCAL_READ_WRITE, permissions=PERMISSIONS,
                 share=False, peer_shares=True) as s:
        s.request()
        if s.peer_info.get("size") != 8:
            problem: Optional[str] = f"the responder's counter is {s.peer_info.get('size')} bytes, not 8"
        else:
            problem = None
        start = time.monotonic()
        for i, (op, operands, expected) in enumerate(STEPS):
            if problem is not None:
                break
            remote, result = s.buffer(s.peer_mmap, empty=True), s.buffer(offset=8 * i, length=8, empty=True)
            old = s.result(getattr(s.rdma, op)(s.connection, remote, result, **operands), f"the atomic {op}")
            if old != expected:
                problem = f"step {i + 1} ({op}): old value 0x{old:x}, expected 0x{expected:x}"
        elapsed = time.monotonic() - start
        s.finish_requester(problem)
        return summary(NAME, "requester", 8, elapsed, iterations=len(STEPS), note="old values verified")


if __name__ == "__main__":
    sys.exit(run(make_parser(NAME, __doc__.splitlines()[0], size=False),
                 {"responder": responder, "requester": requester}))
