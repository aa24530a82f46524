"""An idle squatter for the peer reliability tests: requesters that authenticate and then send nothing, N of
them, each place lost to eviction taken again (a new requester every 0.2 s while fewer than N are held), for
SECONDS in all.

    peer_squat.py HOST:PORT N SECONDS

Prints ``held N`` once it holds N, then one JSON line at the end: opened (connected and authenticated),
refused (connect refused), held_max (held at once),
evicted (told Busy by the responder and let go).
"""
from __future__ import annotations

import json
import sys
import time
from typing import Dict, List

from pydoca.peer import Busy, Requester
from pydoca.peer.errors import PeerError


def main() -> None:
    address, n, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    stats: Dict[str, int] = {"opened": 0, "refused": 0, "held_max": 0, "evicted": 0}
    held: List[Requester] = []
    end = time.monotonic() + seconds
    rounds = 0
    while time.monotonic() < end and rounds < 10000:
        rounds += 1
        for req in list(held):                       # progress each once: an evicted one learns it here
            req.pe.progress()
            if req._fatal is not None:
                stats["evicted"] += isinstance(req._fatal, Busy)
                held.remove(req)
                req.close()
        if len(held) < n:
            try:
                held.append(Requester.connect(address, timeout=5, name=f"squat{stats['opened']}"))
                stats["opened"] += 1
            except PeerError:
                stats["refused"] += 1
        if len(held) > stats["held_max"] and len(held) == n:
            print(f"held {n}", flush=True)               # every place taken: the test's cue
        stats["held_max"] = max(stats["held_max"], len(held))
        time.sleep(0.2 if len(held) >= n else 0.01)
    for req in held:
        req.close()
    print(json.dumps(stats), flush=True)


if __name__ == "__main__":
    main()
