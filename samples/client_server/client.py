"""Use the sample service: ``python client.py HOST:PORT`` or ``python client.py FILE.desc``."""
from __future__ import annotations

import asyncio
import json
import sys
import zlib

import numpy as np

from pydoca.peer import HandlerError, Requester


async def concurrent_echo(req: Requester) -> None:
    replies = await asyncio.gather(*(req.acall("/echo", f"async {i}") for i in range(4)))
    print("async echo:", [r.decode() for r in replies])


def main(target: str) -> int:
    with Requester.open(target, timeout=10.0) as req:
        for ep in req.endpoints():
            print(f"endpoint {ep.path:<8} {ep.kind:<5} {ep.size} bytes")
        blob = np.random.default_rng(1).integers(0, 256, 3 << 20, dtype=np.uint8)
        req.write("/upload", blob)                       # RDMA write + immediate, then the handler ran
        stats = json.loads(req.read("/stats").rstrip(b"\0"))
        assert stats["last_crc32"] == zlib.crc32(blob), stats
        print("stats after upload:", stats)
        print("echo:", req.call("/echo", b"hello").decode())
        print("upper:", req.call("/upper", b"x" * 20000)[:10].decode(), "...")
        out = np.zeros(4096, dtype=np.uint8)
        n = req.read("/stats", into=out)                 # zero-copy into a numpy array
        print(f"read {n} bytes into a numpy array")
        try:
            req.call("/upper", b"boom")
        except HandlerError as exc:
            print("handler error as expected:", exc.message)
        asyncio.run(concurrent_echo(req))
    print("OK")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: client.py HOST:PORT|DESCRIPTOR_FILE")
    sys.exit(main(sys.argv[1]))
