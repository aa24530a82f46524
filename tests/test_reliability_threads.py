"""Threads sharing one ProgressEngine, Rdma context and Connection: each
thread writes its own pattern into its own region of the peer's memory and
reads it back; every byte is verified."""
from __future__ import annotations

import os
import threading
import time
from typing import Any, List

import pytest
from reliability_util import scale

import pydoca
from pydoca import Access
from rdma_util import ALL_REMOTE

pytestmark = pytest.mark.timeout(600)


def test_threads_share_engine_context_and_connection(reliability_report: Any) -> None:
    threads, ops = 2, scale(2000, 2000)
    size = 4096
    with pydoca.Device.open(iface="lo") as dev, pydoca.ProgressEngine() as pe, \
            pydoca.ProgressEngine() as target_pe, pydoca.BufferInventory(64) as inv:
        rdma = pydoca.Rdma(dev, pe, permissions=ALL_REMOTE, max_tasks=64)
        target = pydoca.Rdma(dev, target_pe, permissions=ALL_REMOTE)
        memory = bytearray(threads * size)
        target_mm = pydoca.MemoryMap(dev, memory, access=ALL_REMOTE)
        remote = pydoca.MemoryMap.from_export(dev, target_mm.export_rdma())
        blob_a, conn = rdma.export()
        blob_b, conn_b = target.export()
        rdma.connect(blob_b, conn)
        target.connect(blob_a, conn_b)
        deadline = time.monotonic() + 10
        while not (conn.established and conn_b.established) and time.monotonic() < deadline:
            pe.progress()
            target_pe.progress()
            time.sleep(0.001)
        assert conn.established and conn_b.established

        errors: List[str] = []
        done = [0] * threads
        verified = [0] * threads

        def worker(k: int) -> None:
            src = bytearray(size)
            back = bytearray(size)
            with pydoca.MemoryMap(dev, src, access=Access.LOCAL_READ_WRITE) as sm, \
                    pydoca.MemoryMap(dev, back, access=Access.LOCAL_READ_WRITE) as bm:
                try:
                    for i in range(ops // 2):
                        src[:] = os.urandom(16) * (size // 16)
                        rdma.write(conn, inv.buffer(sm), inv.buffer(remote, offset=k * size, length=size)).result(10)
                        n = rdma.read(conn, inv.buffer(remote, offset=k * size, length=size),
                                      inv.buffer(bm, empty=True)).result(10)
                        done[k] += 2
                        if n != size or back != src:
                            errors.append(f"thread {k} op {i}: read back differs")
                            return
                        verified[k] += size
                except Exception as exc:  # noqa: BLE001 - reported below
                    errors.append(f"thread {k}: {type(exc).__name__}: {exc}")

        t0 = time.monotonic()
        pool = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join(300)
        elapsed = time.monotonic() - t0
        conn.disconnect()
        target.close()
        rdma.close()
        remote.close()
        target_mm.close()
    total = sum(done)
    reliability_report.add("threads sharing pe/rdma/conn", trials=threads * ops, passed=total,
                           failed=threads * ops - total, bytes_verified=sum(verified), seconds=elapsed,
                           ops_per_s=total / elapsed if elapsed else 0.0)
    assert not errors, errors[:5]
    assert total == threads * ops
