"""A responder for the peer reliability tests, configured by one JSON argument.

    peer_rel_server.py '{"listen": "127.0.0.1:PORT", "gc": false, "responder": {...},
                         "endpoints": [{"path": "/hang", "kind": "write", "size": 4096,
                                        "handler": "hang", "timeout": 0.3, "concurrency": 2}, ...]}'

Handlers: ``hang`` (never returns), ``echo``, ``stats`` (JSON: live objects by type, RSS, threads,
fds, peers, pool threads), ``sleep`` (``"seconds"``), ``mark`` (appends a line to ``"file"``: the
side effect a timed-out handler must never have), ``store`` (nothing). With ``"gc": false`` the
cyclic garbage collector is off for the whole run: whatever a departed requester leaves behind stays.
Prints ``serving ADDRESS`` once listening; serves until SIGTERM.
"""
from __future__ import annotations

import gc
import json
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Dict

CFG: Dict[str, Any] = json.loads(sys.argv[1])
if CFG.get("gc") is False:
    gc.disable()

from pydoca.peer import Responder  # noqa: E402

WATCHED = ("_Peer", "Request", "Job", "Connection", "MemoryMap", "Requester")
resp: Responder


def rss_kb() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


def stats(payload: bytes) -> bytes:
    counts = {name: 0 for name in WATCHED}
    for obj in gc.get_objects():
        name = type(obj).__name__
        if name in counts:
            counts[name] += 1
    return json.dumps({"objects": counts, "rss_kb": rss_kb(), "threads": threading.active_count(),
                       "pool_threads": resp.pool.threads, "fds": len(os.listdir("/proc/self/fd")),
                       "peers": len(resp._peers), "gc_enabled": gc.isenabled()}).encode()


def make(spec: Dict[str, Any]) -> Callable[..., Any]:
    kind = spec["handler"]
    if kind == "hang":
        never = threading.Event()
        return lambda view, length: never.wait()
    if kind == "echo":
        return lambda payload: payload
    if kind == "stats":
        return stats
    if kind == "sleep":
        seconds = float(spec["seconds"])
        return lambda *args: time.sleep(seconds)
    if kind == "mark":
        path = spec["file"]

        def mark(*args: Any) -> bytes:
            with open(path, "a") as fh:
                fh.write(f"{time.monotonic()}\n")
            return b"marked"
        return mark
    if kind == "store":
        return lambda view, length: None
    raise SystemExit(f"unknown handler {kind!r}")


def main() -> None:
    global resp
    resp = Responder(CFG["listen"], name="reltest", **CFG.get("responder", {}))
    for ep in CFG["endpoints"]:
        kw = {k: ep[k] for k in ("timeout", "concurrency", "queue", "inline", "copy") if k in ep}
        resp.add_endpoint(ep["path"], ep["kind"], int(ep["size"]), make(ep), **kw)
    signal.signal(signal.SIGTERM, lambda *_: resp.stop())
    with resp:
        print(f"serving {resp.address}", flush=True)
        resp.serve_forever()
    print("stopped", flush=True)
    os._exit(0)          # hung handler threads are daemons: leave without waiting for them


if __name__ == "__main__":
    main()
