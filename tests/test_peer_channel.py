"""pydoca.peer's Channel across processes: counted sends (no Python call per completion) keep order,
give their slots back through reap(), queue in the outbox while none is free, and fail quietly
(slot returned) once the connection is gone."""
from __future__ import annotations

import base64
import time

from pydoca.peer.channel import Channel
from rdma_util import Local, PeerProc
from test_rdma import connect, local, peer  # noqa: F401 - the fixtures too


def _drain(local: Local, ch: Channel, bound: float = 10.0) -> None:
    end = time.monotonic() + bound
    while (ch._outbox or ch._counted) and time.monotonic() < end:
        local.pe.wait(0.05)
        ch.reap()


def test_counted_sends_queue_reap_and_keep_order(local: Local, peer: PeerProc) -> None:
    conn, _ = connect(local, peer, "oob")
    n = 40
    peer.call("post_recv", n=n, size=256)
    received: list[bytes] = []
    ch = Channel(local.dev, local.rdma, local.inv, recv_slots=1, send_slots=2,
                 on_message=lambda c, d: received.append(d), on_imm=lambda c, imm, k: None, counted_sends=True)
    try:
        frames = [f"frame-{i:03d}-".encode() * (1 + i % 5) for i in range(n)]
        for f in frames:
            ch.send(conn, f)
        assert len(ch._outbox) >= n - 2, "two slots: the rest must wait in the outbox"
        _drain(local, ch)
        assert not ch._outbox and not ch._counted and sorted(ch._free) == [0, 1]
        got = peer.call("recv_results", timeout=10)["results"]
        assert [base64.b64decode(r["data"])[:r["len"]] for r in got] == frames
        assert received == []                      # nothing was sent back
    finally:
        ch.close()


def test_counted_sends_after_disconnect_give_their_slot_back(local: Local, peer: PeerProc) -> None:
    conn, _ = connect(local, peer, "oob")
    ch = Channel(local.dev, local.rdma, local.inv, recv_slots=1, send_slots=2,
                 on_message=lambda c, d: None, on_imm=lambda c, imm, k: None, counted_sends=True)
    try:
        conn.disconnect()
        end = time.monotonic() + 5
        while conn.established and time.monotonic() < end:
            local.pe.wait(0.05)
        for i in range(5):                         # refused at submit or failed in flight: never raises
            ch.send(conn, b"late %d" % i)
        _drain(local, ch)
        assert not ch._outbox and not ch._counted and sorted(ch._free) == [0, 1]
        assert not local.rdma.__dict__.get("_batches"), "a refused batch stays registered (and pins its memory)"
    finally:
        ch.close()


def test_close_right_after_counted_sends(local: Local, peer: PeerProc) -> None:
    """A responder that answers and closes at once: the finished (or flushed) counted sends must not pin
    the send slots' memory (MemoryMap.close settles batches; InUseError before)."""
    conn, _ = connect(local, peer, "oob")
    peer.call("post_recv", n=4, size=256)
    ch = Channel(local.dev, local.rdma, local.inv, recv_slots=1, send_slots=4,
                 on_message=lambda c, d: None, on_imm=lambda c, imm, k: None, counted_sends=True)
    for i in range(4):
        ch.send(conn, b"answer %d" % i)
    end = time.monotonic() + 5
    while not all(ch._batches[i] is not None and ch._batches[i].done for i in ch._counted) and time.monotonic() < end:
        local.pe.wait(0.05)                      # completed in C, never reaped
    ch.close()
    got = peer.call("recv_results", timeout=10)["results"]
    assert [base64.b64decode(r["data"])[:r["len"]] for r in got] == [b"answer %d" % i for i in range(4)]
