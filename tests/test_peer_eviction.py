"""Idle eviction in the peer layer: busy requesters keep their place, answers in a slot survive, an evicted
requester is told it is Dismissed, one idle place admits one newcomer."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from peer_raw import RawClient, status_of
from peer_util import SPEC, Server, write_spec

from pydoca.peer import Busy, Disconnected, Dismissed, Requester, Unavailable
from pydoca.peer import protocol as P

pytestmark = pytest.mark.timeout(120)

EVICT_SPEC = SPEC + """\
  - {path: /slowbig, type: call, buffer: {size: 64KiB}, handler: "peer_handlers:slow_sized"}
"""


def test_a_requester_answered_after_a_long_call_is_not_idle(tmp_path: Path) -> None:
    """A requester whose call ran longer than idle_evict was busy all along: the moment its answer comes it
    must not count as idle (it was idle 0 s, not the call's duration) and lose its place to a newcomer."""
    srv = Server(write_spec(tmp_path, EVICT_SPEC), "--max-connections", "1", "--idle-evict", "0.5")
    a = None
    try:
        a = Requester.connect(srv.address, name="busy-caller")
        assert a.call("/slowbig", b"0.8:16") == b"r" * 16        # a 0.8 s call, answered just now
        with pytest.raises(Unavailable, match="refused the connection"):   # every place taken, nobody idle
            Requester.connect(srv.address, name="newcomer", timeout=5)
        assert a.call("/echo", b"still mine") == b"still mine"
    finally:
        if a is not None:
            a.close()
        srv.kill()


def test_a_result_in_the_slot_is_not_revoked_by_an_eviction(tmp_path: Path) -> None:
    """A call's result larger than the inline size is left in the requester's slot, which the requester
    then RDMA-reads: evicting it between the RESULT and that read revokes the region and loses the answer of a
    call whose handler ran (accepted work lost). A raw client that is a little slow to read its slot shows it."""
    srv = Server(write_spec(tmp_path, EVICT_SPEC), "--max-connections", "1", "--idle-evict", "0.5")
    a = RawClient(srv.port)
    b = None
    try:
        hello = a.hello("slow-reader")
        ep = next(e for e in hello["endpoints"] if e["path"] == "/slowbig")
        size = P.INLINE_MAX + 100
        arg = f"0.8:{size}".encode()
        a.send(P.encode(P.Call(ep["id"], 0, len(arg), arg), 7))
        frame = a.expect(10)
        assert isinstance(frame.msg, P.Result) and frame.flags & P.FLAG_IN_BUFFER, frame
        try:                                                          # the newcomer arrives at that moment
            b = Requester.connect(srv.address, name="newcomer", timeout=5)
        except Unavailable:
            pass
        time.sleep(0.3)
        a.pe.progress_all()
        statuses = [(status_of(f), f.msg) for f in map(P.decode, a.got)]
        try:
            task, got = a.rdma_op("read", a.region_blob, ep["slot"], length=frame.msg.length)
        except Exception as exc:  # noqa: BLE001
            pytest.fail(f"the call's result was revoked before it was read: {exc!r}; the responder said {statuses}")
        assert task.error is None, task.error
        assert got == b"r" * size
    finally:
        if b is not None:
            b.close()
        a.close()
        srv.kill()


def test_an_evicted_requester_says_its_connection_is_gone(tmp_path: Path) -> None:
    """After the eviction the requester is dead for good (every later operation raises the same error), so the
    error must be a Disconnected (code that reconnects on Disconnected, as the transfer engine does, must see it),
    not only a Busy (which says: this endpoint is busy, try the operation again; a retry loop spins for ever)."""
    srv = Server(write_spec(tmp_path), "--max-connections", "1", "--idle-evict", "0.3")
    a = b = None
    try:
        a = Requester.connect(srv.address, name="idle")
        time.sleep(0.6)
        b = Requester.connect(srv.address, name="newcomer", timeout=5)
        errors = []
        for _ in range(3):                                           # a "retry on Busy" loop
            time.sleep(0.2)
            with pytest.raises(Busy) as info:
                a.call("/echo", b"again?", timeout=2)
            errors.append(info.value)
        assert all(isinstance(e, Disconnected) for e in errors), [type(e).__mro__ for e in errors]
    finally:
        for r in (a, b):
            if r is not None:
                r.close()
        srv.kill()


def test_one_evictable_place_admits_one_newcomer(tmp_path: Path) -> None:
    """One idle requester is one place: of several newcomers at once, one gets it. The RDMA CM policy counts the
    idle place free for every request that arrives before a newcomer took it, so the others are refused at once
    (Unavailable) or after their handshake (Dismissed 'connection limit reached'), both in
    docs/guide/troubleshooting.md (the second was not: on 8df5ba1 this test, asserting Unavailable only, failed
    3 runs in 5). Counting the handshakes in progress as claims on idle places would refuse at once, but would
    let silent unauthenticated connections block every newcomer, so the late refusal stays, documented."""
    import threading
    srv = Server(write_spec(tmp_path), "--max-connections", "1", "--idle-evict", "0.3")
    a = None
    got: list = []
    try:
        a = Requester.connect(srv.address, name="idle")
        time.sleep(0.6)
        barrier = threading.Barrier(4)

        def newcomer(i: int) -> None:
            barrier.wait()
            try:
                got.append(Requester.connect(srv.address, name=f"new{i}", timeout=5))
            except Exception as exc:  # noqa: BLE001
                got.append(exc)
        threads = [threading.Thread(target=newcomer, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        admitted = [r for r in got if isinstance(r, Requester)]
        refused = [r for r in got if not isinstance(r, Requester)]
        assert len(admitted) == 1, [type(r).__name__ + ": " + str(r)[:80] for r in got]
        assert all(isinstance(e, Unavailable) or isinstance(e, Dismissed) and "connection limit reached" in str(e)
                   for e in refused), [type(e).__name__ + ": " + str(e)[:80] for e in refused]
    finally:
        for r in got + [a]:
            if isinstance(r, Requester):
                r.close()
        srv.kill()


def test_an_address_at_its_share_evicts_its_own_idle_requester(tmp_path: Path) -> None:
    """--max-connections-per-source 1: a newcomer from an address whose share is full takes the place of that
    address's requester idle past --idle-evict (a half-open connection of its own does not lock it out); while
    that requester is active, the newcomer is refused."""
    srv = Server(write_spec(tmp_path), "--max-connections-per-source", "1", "--idle-evict", "0.5")
    old = new = None
    try:
        old = Requester.connect(srv.address, name="old")
        assert old.call("/echo", b"x") == b"x"
        with pytest.raises(Unavailable, match="refused the connection"):      # active just now: keeps its place
            Requester.connect(srv.address, name="early", timeout=5)
        time.sleep(0.8)
        new = Requester.connect(srv.address, name="new", timeout=5)
        assert new.call("/echo", b"in") == b"in"
        with pytest.raises(Dismissed, match=r"idle: all 1 places for 127\.0\.0\.1 were taken"):
            end = time.monotonic() + 5
            while time.monotonic() < end:
                old.call("/echo", b"evicted?", timeout=2)
                time.sleep(0.05)
    finally:
        for r in (old, new):
            if r is not None:
                r.close()
        srv.kill()
