"""pydoca.peer's Channel across processes, over task rings (no Python task object or callback per message):
sends keep their order, queue in the outbox while no slot is free, report each outcome to ``on_done``
and give their slots back (also once the connection is gone); received sends, sends with immediate and
writes with immediate reach the owner in order, from the right connection, and every slot is posted again."""
from __future__ import annotations

import base64
import time
from typing import Callable, List, Tuple

import pytest

from pydoca import Access, Buffer, MemoryMap
from pydoca.errors import DocaError, InvalidValueError
from pydoca.peer.channel import Channel
from pydoca.rdma import ring as ring_mod
from pydoca.rdma.ring import TaskRing
from rdma_util import Local, PeerProc
from test_rdma import connect, local, peer  # noqa: F401 - the fixtures too


def _until(local: Local, done: Callable[[], bool], bound: float = 10.0) -> None:
    """Wait on the engine until ``done()`` (at most ``bound`` s; the caller asserts the outcome)."""
    end = time.monotonic() + bound
    while not done() and time.monotonic() < end:
        local.pe.wait(0.05)


def _settle(local: Local, ch: Channel) -> None:
    _until(local, lambda: not (ch._outbox or ch._send.posted))
    ch.reap()


def _slots(local: Local, n: int, size: int = 32) -> Tuple[bytearray, MemoryMap, List[Buffer]]:
    """``n`` empty ``size``-byte buffers over one registered bytearray: (memory, map, buffers)."""
    mem = bytearray(n * size)
    mm = MemoryMap(local.dev, mem, access=Access.LOCAL_READ_WRITE)
    return mem, mm, [local.inv.buffer(mm, offset=i * size, length=size, empty=True) for i in range(n)]


def _release(local: Local, mm: MemoryMap, bufs: List[Buffer]) -> None:
    local.rdma.close()                             # flushes what is still posted
    for b in bufs:
        b.close()
    mm.close()


def test_sends_queue_complete_in_order_and_give_slots_back(local: Local, peer: PeerProc) -> None:
    conn, _ = connect(local, peer, "oob")
    n = 40
    peer.call("post_recv", n=n, size=256)
    outcomes: list[tuple[int, bool]] = []
    ch = Channel(local.dev, local.rdma, local.inv, recv_slots=1, send_slots=2,
                 on_message=lambda c, d: None, on_imm=lambda c, imm, k: None)
    try:
        frames = [f"frame-{i:03d}-".encode() * (1 + i % 5) for i in range(n)]
        for i, f in enumerate(frames):
            ch.send(conn, f, None if i % 3 else (lambda ok, i=i: outcomes.append((i, ok))))
        assert ch.backlog(conn) >= n - 2, "two slots: the rest must wait in the outbox"
        _settle(local, ch)
        assert not ch._outbox and ch._send.posted == 0 and sorted(ch._free) == [0, 1]
        got = peer.call("recv_results", timeout=10)["results"]
        assert [base64.b64decode(r["data"])[:r["len"]] for r in got] == frames
        assert outcomes == [(i, True) for i in range(0, n, 3)]
        assert ch._send.failed == 0
    finally:
        ch.close()


def test_a_peer_that_takes_nothing_delays_no_other_connection(local: Local, peer: PeerProc) -> None:
    """Send slots are shared: a peer that posts no receive holds its sends until the RNR budget ends
    (SOFTDOCA_TIMEOUT_MS). It holds at most ``max_inflight`` slots, what waits for it is bounded by
    ``max_backlog`` (send refuses beyond), and frames for another connection go out meanwhile, in order
    (before, they queued behind its frames in one FIFO until its sends failed)."""
    other = PeerProc()
    try:
        stuck, _ = connect(local, peer, "oob")       # posts no receive
        live, _ = connect(local, other, "oob")
        other.call("post_recv", n=6, size=256)
        stuck_done: list[bool] = []
        ch = Channel(local.dev, local.rdma, local.inv, recv_slots=1, send_slots=4,
                     on_message=lambda c, d: None, on_imm=lambda c, imm, k: None, max_inflight=2, max_backlog=5)
        try:
            accepted = [ch.send(stuck, b"to the stuck peer %d" % i, stuck_done.append) for i in range(10)]
            assert accepted == [True] * 7 + [False] * 3 and ch.backlog(stuck) == 5
            frames = [b"to the live peer %d" % i for i in range(6)]
            live_done: list[bool] = []
            assert all(ch.send(live, f, live_done.append) for f in frames)
            _until(local, lambda: len(live_done) == len(frames))
            assert live_done == [True] * len(frames)
            assert stuck_done == [] and ch.backlog(stuck) == 5, "the stuck peer's sends are still held"
            got = other.call("recv_results", timeout=10)["results"]
            assert [base64.b64decode(r["data"])[:r["len"]] for r in got] == frames
        finally:
            ch.close()
    finally:
        other.close()


def test_sends_after_disconnect_fail_and_give_their_slot_back(local: Local, peer: PeerProc) -> None:
    conn, _ = connect(local, peer, "oob")
    outcomes: list[bool] = []
    ch = Channel(local.dev, local.rdma, local.inv, recv_slots=1, send_slots=2,
                 on_message=lambda c, d: None, on_imm=lambda c, imm, k: None)
    try:
        conn.disconnect()
        _until(local, lambda: not conn.established, 5)
        for i in range(5):                         # refused at submit or failed in flight: never raises
            ch.send(conn, b"late %d" % i, outcomes.append)
        _settle(local, ch)
        assert not ch._outbox and ch._send.posted == 0 and sorted(ch._free) == [0, 1]
        assert outcomes == [False] * 5
    finally:
        ch.close()


def test_close_right_after_sends(local: Local, peer: PeerProc) -> None:
    """A responder that answers and closes at once: finished (or flushed) sends never drained must not pin
    the send slots' memory (InUseError from MemoryMap.close)."""
    conn, _ = connect(local, peer, "oob")
    peer.call("post_recv", n=4, size=256)
    ch = Channel(local.dev, local.rdma, local.inv, recv_slots=1, send_slots=4,
                 on_message=lambda c, d: None, on_imm=lambda c, imm, k: None)
    for i in range(4):
        ch.send(conn, b"answer %d" % i)
    ch.close()
    got = peer.call("recv_results", timeout=10)["results"]
    assert [base64.b64decode(r["data"])[:r["len"]] for r in got] == [b"answer %d" % i for i in range(4)]
    assert ch._send._id not in ring_mod._in_flight and ch._recv._id not in ring_mod._in_flight, \
        "a closed channel's rings are let go"
    outcome: list[bool] = []
    ch.send(conn, b"after close", outcome.append)  # refused (released buffers never reach C), reported
    assert outcome == [False]


@pytest.mark.parametrize("imm", [-1, 0xA1B2C3D4])
def test_received_messages_and_immediates_reach_the_owner(local: Local, peer: PeerProc, imm: int) -> None:
    conn, _ = connect(local, peer, "oob")
    target = bytearray(4)
    mm = MemoryMap(local.dev, target, access=Access.LOCAL_READ_WRITE | Access.RDMA_WRITE)
    got: list[tuple[object, bytes]] = []
    imms: list[tuple[object, int, int]] = []
    ch = Channel(local.dev, local.rdma, local.inv, recv_slots=2, send_slots=1,
                 on_message=lambda c, d: got.append((c, d)), on_imm=lambda c, i, n: imms.append((c, i, n)))
    try:
        ch.post_all()
        texts = [f"message {i} " * (1 + i % 7) for i in range(12)]   # 12 messages through 2 slots
        peer.post("send_many", texts=texts, imm=imm, blob=base64.b64encode(mm.export_rdma()).decode())
        # the slots are posted again as the messages are taken
        _until(local, lambda: len(got) >= len(texts) and bool(imms))
        peer.answer("send_many")
        assert [d for _, d in got] == [t.encode() for t in texts]
        assert all(c is conn for c, _ in got)
        assert imms == [(conn, max(imm, 0), 4)] and bytes(target) == texts[0].encode()[:4]
        assert ch._recv.posted == 2, "every slot is posted again"
    finally:
        local.rdma.close()                         # flushes the posted receives, as the peer layer does
        ch.close()
        mm.close()


def test_task_ring_refuses_bad_slots_and_a_closed_context(local: Local) -> None:
    _, mm, bufs = _slots(local, 2)
    ring = TaskRing(local.rdma, bufs, "receive")
    with pytest.raises(ValueError, match="receives or sends"):
        TaskRing(local.rdma, bufs, "write")
    sends = TaskRing(local.rdma, bufs, "send")
    for bad in (-1, 33):                           # negative, or past the 32-byte buffer: refused before C
        with pytest.raises(InvalidValueError, match="buffer holds 32"):
            sends.post(1, None, bad)
    assert sends.posted == 0
    ring.post(0)
    with pytest.raises(DocaError, match="ring slot 0"):
        ring.post(0)                               # already posted
    with pytest.raises(DocaError, match="ring slot 7"):
        ring.post(7)                               # no such slot
    assert ring.posted == 1 and mm._tasks, "a posted slot pins its memory"
    local.rdma.close()                             # flushes the receive: one failed entry
    entry = ring.take()
    assert entry is not None and entry[0] == 0 and entry[1] != 0
    assert ring.take() is None and ring.posted == 0 and ring.failed == 1 and not mm._tasks
    with pytest.raises(Exception, match="closed"):
        ring.post(1)
    _release(local, mm, bufs)


def test_a_message_is_delivered_before_the_disconnect_that_follows_it(local: Local, peer: PeerProc) -> None:
    """Ring completions are drained before the context hands Python a connection event of the same
    progress() call, so the owner sees the peer's last words before it learns the peer left."""
    conn, _ = connect(local, peer, "oob")
    order: list[str] = []
    local.rdma.on_connection = lambda c, state: order.append(state.value)
    ch = Channel(local.dev, local.rdma, local.inv, recv_slots=2, send_slots=1,
                 on_message=lambda c, d: order.append(d.decode()), on_imm=lambda c, imm, k: None)
    try:
        ch.post_all()
        peer.call("send_then_disconnect", text="last words")
        time.sleep(0.3)                            # both the message and the disconnect are queued locally
        local.pe.progress()
        local.pe.progress_all()
        assert order[:2] == ["last words", "disconnected"], order
    finally:
        local.rdma.close()
        ch.close()


def test_pollers_run_before_task_callbacks_and_after_productive_progress(local: Local, peer: PeerProc) -> None:
    conn, started = connect(local, peer, "oob")
    calls: list[int] = []
    seen_by_callback: list[int] = []

    class Owner:
        def poll(self) -> None:
            calls.append(1)
    owner = Owner()
    local.pe.add_poller(owner.poll)
    local.pe.progress_all()
    calls.clear()
    assert not local.pe.progress() and calls == [], "nothing delivered: no poller call"
    rm = local.remote(started["mmap"])
    src = local.local(bytearray(b"8 bytes!"))
    task = local.rdma.write(conn, local.inv.buffer(src), local.inv.buffer(rm, offset=0, length=8, empty=True))
    task.add_done_callback(lambda t: seen_by_callback.append(len(calls)))
    task.wait(10)
    assert task.error is None and seen_by_callback == [1], "the poller ran first, inside the same progress()"
    local.pe.remove_poller(owner.poll)             # a new bound method each time: compared by equality
    assert local.pe._pollers == []


def test_task_ring_never_holds_more_completions_than_slots(local: Local, peer: PeerProc) -> None:
    """A slot posted again before its completion was taken would let a ring of n slots owe n+1 entries:
    refused until the owner takes one."""
    conn, _ = connect(local, peer, "oob")
    mem, mm, bufs = _slots(local, 2)
    ring = TaskRing(local.rdma, bufs, "receive")
    try:
        ring.post(0)
        ring.post(1)
        peer.call("send_many", texts=["first", "second"])
        _until(local, lambda: not ring.posted)
        assert ring.posted == 0 and ring.pending()
        with pytest.raises(DocaError, match="ring slot 0"):
            ring.post(0)                           # two completions wait: no room for a third
        first = ring.take()
        assert first is not None and first[:3] == (0, 0, 5) and bytes(mem[:5]) == b"first"
        ring.post(0)                               # one taken: one may go out again
        second = ring.take()
        assert second is not None and second[:3] == (1, 0, 6) and bytes(mem[32:38]) == b"second"
        assert ring.take() is None
    finally:
        _release(local, mm, bufs)


def test_task_ring_counts_past_two_to_the_32(local: Local, peer: PeerProc) -> None:
    """Completion counters are 64-bit: a long-lived ring (3 slots: not a power of two) goes on past 2**32."""
    conn, _ = connect(local, peer, "oob")
    mem, mm, bufs = _slots(local, 3)
    ring = TaskRing(local.rdma, bufs, "receive")
    ring._c.head = ring._c.tail = 2**32 - 2
    try:
        got = []
        for i in range(3):                         # the counters cross 2**32 on the way
            ring.post(i % 3)
            peer.call("send_many", texts=[f"msg {i}"])
            _until(local, lambda: not ring.posted)
            e = ring.take()
            assert e is not None and e[1] == 0
            got.append(bytes(mem[e[0] * 32:e[0] * 32 + e[2]]))
        assert got == [b"msg 0", b"msg 1", b"msg 2"] and ring._c.tail == 2**32 + 1
    finally:
        _release(local, mm, bufs)


def test_a_ring_in_flight_outlives_its_owner(local: Local) -> None:
    """The C side writes into a ring's arrays until its tasks complete: dropping every reference to a ring
    with a receive posted must not free them (the flush writes its entry later)."""
    import gc
    import weakref
    mem = bytearray(64)
    mm = MemoryMap(local.dev, mem, access=Access.LOCAL_READ_WRITE)
    ring = TaskRing(local.rdma, [local.inv.buffer(mm, offset=0, length=64, empty=True)], "receive")
    ring.post(0)
    assert ring_mod._in_flight.get(ring._id) is ring, "registered while C may write into it"
    alive, map_alive = weakref.ref(ring), weakref.ref(mm)
    del ring, mm                                   # the owner lets go of the ring, its buffer and its map
    gc.collect()
    assert alive() is not None and map_alive() is not None
    local.rdma.close()                             # flushes the receive into the ring's entries
    ring = alive()
    assert ring is not None and ring.posted == 0
    entry = ring.take()
    assert entry is not None and entry[1] != 0 and ring.take() is None
    assert ring._id not in ring_mod._in_flight
    m = map_alive()
    assert m is not None
    m.close()
    del ring, m
    gc.collect()
    assert alive() is None, "released once nothing is in flight"


def test_a_raising_poller_loses_no_completion(local: Local, peer: PeerProc) -> None:
    conn, started = connect(local, peer, "oob")
    boom = RuntimeError("poller failed")

    def bad() -> None:
        raise boom
    local.pe.add_poller(bad)
    rm = local.remote(started["mmap"])
    src = local.local(bytearray(b"8 bytes!"))
    task = local.rdma.write(conn, local.inv.buffer(src), local.inv.buffer(rm, offset=0, length=8, empty=True))
    try:
        with pytest.raises(RuntimeError, match="poller failed"):
            task.wait(10)                          # progress() re-raises what the poller raised ...
        assert task.done and task.error is None    # ... and the completion it ran in front of is delivered
    finally:
        local.pe.remove_poller(bad)
