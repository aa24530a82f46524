"""A requester process of the peer tests.

    peer_worker.py TARGET NAME mix OPS      # write/read/call mix, every byte verified
    peer_worker.py TARGET NAME slow PATH S  # one write of b"S" (a handler that sleeps S seconds)
    peer_worker.py TARGET NAME spam PATH    # 4 MiB writes to PATH in a loop
"""
from __future__ import annotations

import random
import sys
import time

from peer_handlers import framed, pattern

from pydoca.peer import Requester


def mix(req: Requester, name: str, ops: int) -> None:
    rng = random.Random(name)
    reads = 0
    for i in range(ops):
        kind = i % 3
        if kind == 0:
            body = rng.randbytes(rng.choice([16, 1000, 9000, 70000, 300000]))
            req.write("/store", framed(body))
            import zlib
            assert req.call("/lastcrc", b"") == str(zlib.crc32(body)).encode(), "write verification failed"
        elif kind == 1:
            length = rng.choice([1, 100, 5000, 70000])
            reads += 1
            got = req.read("/pattern", length)
            assert got == pattern(name, reads, length), f"read {reads} of {length} bytes differs"
        else:
            payload = rng.randbytes(rng.choice([0, 64, 8000, 9000, 100000]))
            assert req.call("/echo", payload) == payload, f"echo of {len(payload)} bytes differs"
    print(f"OK {name} {ops}", flush=True)


def main() -> int:
    target, name, mode = sys.argv[1:4]
    with Requester.open(target, name=name, timeout=20.0) as req:
        if mode == "mix":
            mix(req, name, int(sys.argv[4]))
        elif mode == "slow":
            print("started", flush=True)
            req.write(sys.argv[4], sys.argv[5].encode())
            print("done", flush=True)
        elif mode == "spam":
            data = bytes(4 << 20)
            req.write(sys.argv[4], data)
            print("started", flush=True)
            while True:
                req.write(sys.argv[4], data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
