"""softdoca's same-host transport between two processes (SOFTDOCA_TRANSPORT): chosen when both ends
offer it, forced off by ``tcp`` on either side; writes and reads move the right bytes either way.
The target-side checks (bounds, keys, permissions, stopped maps, peer death) are covered by the C
suite (softdoca/tests/test_rdma.c, test_shm_peer and the in-process tests, which run over it)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from pydoca.perftest.session import Session, backend_name

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(backend_name() != "soft", reason="softdoca transports")]


@pytest.mark.parametrize("transport,want", [("shm", "shm"), ("tcp", "tcp")])
@pytest.mark.parametrize("op", ["write", "read"])
def test_transport_chosen_and_ops_work(transport: str, want: str, op: str) -> None:
    with Session(op, 4096, slots=4, transport=transport) as s:
        assert s.transport_used == want
        for i in range(4):
            task = s.submit(i).wait(10)
            assert task.error is None
        s.latency(20)


def test_initiator_forced_tcp() -> None:
    """SOFTDOCA_TRANSPORT=tcp on the initiator: the target offers, the initiator declines."""
    code = textwrap.dedent("""
        from pydoca.perftest.session import Session
        with Session("write", 8, transport="auto") as s:
            s.latency(10)
            print(s.transport_used)
    """)
    env = {**os.environ, "SOFTDOCA_TRANSPORT": "tcp"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "tcp"


def test_large_then_small_writes_never_stall() -> None:
    """A large write followed by small ones over TCP: the target's engine raises SO_RCVLOWAT while
    the large payload is due and must lower it whatever ends its read turn; a stale mark made the
    tail of a payload plus the small frames wait for bytes that never came (a 5 s stall)."""
    import time

    from rdma_util import ALL_REMOTE, Local, PeerProc
    big = 12 << 20
    peer, local = PeerProc(transport="tcp"), Local()
    try:
        started = peer.call("start", size=big + 65536, access=int(ALL_REMOTE), permissions=int(ALL_REMOTE),
                            mode="oob", fill=0)
        conn = local.connect_oob(peer, started)
        rm, src, small = local.remote(started["mmap"]), local.local(bytearray(big)), local.local(bytearray(64))
        for rnd in range(40):
            tasks = [local.rdma.write(conn, local.inv.buffer(src), local.inv.buffer(rm, length=big))]
            tasks += [local.rdma.write(conn, local.inv.buffer(small, length=8),
                                       local.inv.buffer(rm, offset=big + i * 8, length=8)) for i in range(3)]
            t0 = time.monotonic()
            for t in tasks:
                t.result(4)                                           # raises on a stall (timeout)
            assert time.monotonic() - t0 < 4, f"round {rnd} took {time.monotonic() - t0:.1f}s"
    finally:
        local.close()
        peer.close()
