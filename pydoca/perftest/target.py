"""The target process of ``pydoca bench``: exports memory, connects out of band,
keeps receives posted for two-sided operations, and otherwise only lets the
engine thread serve one-sided operations.

Speaks JSON lines on stdin/stdout with the initiator:
``{"op": "setup", ...}`` -> ``{"conn": b64, "mmap": b64}``;
``{"op": "connect", "conn": b64}`` -> ``{"ok": true}``; then it serves until
stdin closes or ``{"op": "exit"}`` arrives.
"""
from __future__ import annotations

import base64
import json
import select
import sys
from contextlib import ExitStack
from typing import Any, Dict, List

import pydoca
from pydoca import Access

from . import TWO_SIDED

ALL = Access.LOCAL_READ_WRITE | Access.RDMA_WRITE | Access.RDMA_READ | Access.RDMA_ATOMIC


def _reply(obj: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _command() -> Dict[str, Any]:
    line = sys.stdin.readline()
    if not line:
        raise SystemExit(0)
    cmd: Dict[str, Any] = json.loads(line)
    return cmd


def serve(setup: Dict[str, Any]) -> None:
    size, slots, op = int(setup["size"]), int(setup["slots"]), str(setup["kind"])
    with ExitStack() as s:
        dev = s.enter_context(pydoca.Device.open(ip="127.0.0.1"))
        pe = s.enter_context(pydoca.ProgressEngine(mode=setup.get("progress", "blocking")))
        rdma = s.enter_context(pydoca.Rdma(dev, pe, permissions=ALL, max_tasks=slots + 16,
                                           max_connections=max(16, int(setup.get("connections", 1))),
                                           recv_queue_size=max(64, 2 * slots)))
        nbytes = max(size, 8) * slots          # shared: a memfd peers of this host may map (same-host memcpy)
        mem = pydoca.shared_memory(nbytes) if setup.get("memory", "shared") == "shared" else bytearray(nbytes)
        mm = s.enter_context(pydoca.MemoryMap(dev, mem, access=ALL))
        inv = s.enter_context(pydoca.BufferInventory(slots + 8))
        exported = [rdma.export() for _ in range(int(setup.get("connections", 1)))]
        _reply({"conns": [base64.b64encode(blob).decode() for blob, _ in exported],
                "mmap": base64.b64encode(mm.export_rdma()).decode()})
        cmd = _command()
        for (_, c), theirs in zip(exported, cmd["conns"]):
            rdma.connect(base64.b64decode(theirs), c)
        for _, c in exported:
            c.wait_established(10)
        conn = exported[0][1]
        recvs: List[Any] = []
        if op in TWO_SIDED:
            bufs = [s.enter_context(inv.buffer(mm, offset=i * size, length=size, empty=True)) for i in range(slots)]

            def post(i: int) -> None:
                bufs[i].reset()
                t = rdma.receive(bufs[i])
                t.add_done_callback(lambda task: post(i) if task.error is None else None)
                recvs.append(t)
            for i in range(slots):
                post(i)
        _reply({"ok": True})
        while True:
            # one-sided operations are served by softdoca's engine thread (as a NIC serves them, with no
            # call of the target's): this thread then only waits for the initiator's word, and no Python
            # runs per operation; two-sided ones need the receives' completions, so this thread progresses
            ready, _, _ = select.select([sys.stdin], [], [], 0 if recvs else 0.5)
            if ready:
                line = sys.stdin.readline()
                if not line or json.loads(line).get("op") == "exit":
                    break
            if recvs:
                pe.wait(0.05)
                del recvs[:-slots]
        for _, c in exported:
            c.disconnect()


def main() -> int:
    serve(_command())
    return 0


if __name__ == "__main__":
    sys.exit(main())
