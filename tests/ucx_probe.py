"""Child of test_softdoca_ucx.py: one step run under whatever SOFTDOCA_PROVIDER the test set.

    ucx_probe.py export                 prints the base64 export of a started 1 MiB map, waits for stdin EOF
    ucx_probe.py import BLOB            imports it; prints "ok" or the error's class name and message
    ucx_probe.py start                  starts an Rdma context; prints "ok" or the error
    ucx_probe.py write ADDRESS          a Requester writes 1 MiB to /store; prints the connection's transports
"""
from __future__ import annotations

import base64
import json
import sys

import numpy as np

import pydoca
from pydoca import Access


def main() -> None:
    step = sys.argv[1]
    if step == "export":
        with pydoca.Device.open(iface="lo") as dev:
            buf = bytearray(1 << 20)
            with pydoca.MemoryMap(dev, buf, access=Access.LOCAL_READ_WRITE | Access.RDMA_WRITE) as mm:
                print(base64.b64encode(mm.export_rdma()).decode(), flush=True)
                sys.stdin.read()
        return
    if step == "import":
        with pydoca.Device.open(iface="lo") as dev:
            try:
                pydoca.MemoryMap.from_export(dev, base64.b64decode(sys.argv[2])).close()
                print("ok")
            except pydoca.DocaError as exc:
                print(type(exc).__name__, exc)
        return
    if step == "start":
        with pydoca.Device.open(iface="lo") as dev, pydoca.ProgressEngine() as pe:
            try:
                pydoca.Rdma(dev, pe).close()
                print("ok")
            except pydoca.DocaError as exc:
                print(type(exc).__name__, exc)
        return
    if step == "write":
        from pydoca._native import conn_transports, provider_name
        from pydoca.peer import Requester
        data = np.arange(1 << 20, dtype=np.uint32).astype(np.uint8)
        with Requester.connect(sys.argv[2], timeout=10) as req:
            for _ in range(3):
                req.write("/store", data)
            assert req.conn is not None and req.conn._c is not None
            link, prov = conn_transports(req.conn._c)
            out = {"provider": provider_name(), "transport": link or "", "provider_transport": prov or ""}
        print(json.dumps(out), flush=True)
        return
    raise SystemExit(f"unknown step {step!r}")


if __name__ == "__main__":
    main()
