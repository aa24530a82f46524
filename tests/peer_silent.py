"""A slow-loris attacker for the peer reliability tests: N RDMA CM connections to a responder that
never send their first frame; with REOPEN=1 each one cut is opened again, for SECONDS in all.

    peer_silent.py HOST PORT N SECONDS REOPEN

Prints one JSON line: opened (established), refused (never established), held_max (established at
once), cut (established, then disconnected by the responder), cut_after_s (median time to the cut).
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Dict, List, Set

import pydoca
from pydoca.rdma import Connection, ConnectionState


def main() -> None:
    host, port, n, seconds, reopen = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), \
        sys.argv[5] == "1"
    stats = {"opened": 0, "refused": 0, "held_max": 0, "cut": 0}
    cut_after: List[float] = []
    up: Dict[Connection, float] = {}
    ended: Set[Connection] = set()
    with pydoca.Device.open_route(host) as dev, pydoca.ProgressEngine() as pe, \
            pydoca.Rdma(dev, pe, max_connections=4096) as rdma:
        live: List[Connection] = [rdma.connect_to(host, port) for _ in range(n)]
        end = time.monotonic() + seconds
        while time.monotonic() < end:                        # bounded in time, and in connections below
            pe.progress_all()
            now = time.monotonic()
            for i, conn in enumerate(live):
                state = conn.state
                if state is ConnectionState.ESTABLISHED and conn not in up:
                    up[conn] = now
                    stats["opened"] += 1
                elif state in (ConnectionState.FAILED, ConnectionState.DISCONNECTED, ConnectionState.REJECTED) \
                        and conn not in ended:
                    ended.add(conn)
                    if conn in up:
                        stats["cut"] += 1
                        cut_after.append(now - up.pop(conn))
                    else:
                        stats["refused"] += 1
                    live[i] = rdma.connect_to(host, port) if reopen and stats["opened"] + stats["refused"] < 3000 \
                        else conn
            stats["held_max"] = max(stats["held_max"], sum(c.state is ConnectionState.ESTABLISHED for c in live))
            if not reopen and all(c in ended for c in live):
                break
            time.sleep(0.005)
        for conn in live:
            if conn.state in (ConnectionState.ESTABLISHED, ConnectionState.PENDING):
                conn.disconnect()
        pe.progress_all()
    print(json.dumps({**stats, "cut_after_s": round(statistics.median(cut_after), 3) if cut_after else None}),
          flush=True)


if __name__ == "__main__":
    main()
