"""What pydoca.peer needs from the RDMA layer, checked without the peer protocol:
back-to-back small sends into receive slots larger than the messages all arrive
intact (the peer's control channel posts 8 KiB slots and sends short frames)."""
from __future__ import annotations

import subprocess
import sys

import pytest
from peer_util import HERE, env, free_port

import pydoca
from pydoca import Access

pytestmark = pytest.mark.timeout(60)


def test_back_to_back_small_sends() -> None:
    port = free_port()
    sink = subprocess.Popen([sys.executable, str(HERE / "peer_sink.py"), str(port)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env(), text=True)
    try:
        assert sink.stdout is not None and sink.stdin is not None
        assert sink.stdout.readline().strip() == "ready"
        sizes = [16 + 7 * i for i in range(32)]
        with pydoca.Device.open(iface="lo") as dev, pydoca.ProgressEngine() as pe, pydoca.Rdma(dev, pe) as rdma, \
                pydoca.BufferInventory(len(sizes)) as inv:
            mem = bytearray(4096 * len(sizes))
            with pydoca.MemoryMap(dev, mem, access=Access.LOCAL_READ_WRITE) as mm:
                conn = rdma.connect_to("127.0.0.1", port)
                conn.wait_established(10)
                bufs = [inv.buffer(mm, offset=i * 4096, length=4096, data_len=n) for i, n in enumerate(sizes)]
                tasks = [rdma.send(conn, b) for b in bufs]       # all queued at once: frames coalesce
                for t in tasks:
                    t.result(10)
                for b in bufs:
                    b.close()
                sink.stdin.close()
                got = sink.stdout.readline().split()
                conn.disconnect()
        assert [int(x) for x in got] == sizes
    finally:
        sink.kill()
        sink.wait(10)
        for f in (sink.stdin, sink.stdout):
            if f is not None and not f.closed:
                f.close()
