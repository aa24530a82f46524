"""A legitimate requester for the peer reliability tests: connect, call /echo, close, again and again.

    peer_rel_client.py HOST:PORT SECONDS

Prints one JSON line: ok, failed (with the first errors), connect_ms_max.
"""
from __future__ import annotations

import json
import sys
import time
from typing import List

from pydoca.peer import Requester


def main() -> None:
    address, seconds = sys.argv[1], float(sys.argv[2])
    ok = failed = 0
    errors: List[str] = []
    slowest = 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end and ok + failed < 2000:
        t0 = time.monotonic()
        try:
            with Requester.connect(address, timeout=5) as req:
                slowest = max(slowest, time.monotonic() - t0)
                if req.call("/echo", b"legit", timeout=5) != b"legit":
                    raise AssertionError("wrong echo")
            ok += 1
        except Exception as exc:  # noqa: BLE001 - counted and reported
            failed += 1
            errors.append(repr(exc)[:300])
        time.sleep(0.05)
    print(json.dumps({"ok": ok, "failed": failed, "errors": errors[:5],
                      "connect_ms_max": round(1000 * slowest, 1)}), flush=True)


if __name__ == "__main__":
    main()
