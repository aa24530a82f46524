"""Per-connection failures stay with their connection; errors name the cause.

In-process: a listener and clients on separate engines. A request abandoned
before the answer, an accept policy or on_connection callback that raises:
the listener's progress loop never sees an exception and keeps serving.
"""
from __future__ import annotations

import socket
import time
from typing import Any, Iterator, List

import pytest

import pydoca
from pydoca import Access
from pydoca import errors as E
from rdma_util import free_port

class Side:
    def __init__(self, **kw: Any) -> None:
        self.dev = pydoca.Device.open(iface="lo")
        self.pe = pydoca.ProgressEngine()
        self.rdma = pydoca.Rdma(self.dev, self.pe, **kw)

    def close(self) -> None:
        self.dev.close()
        self.pe.close()


@pytest.fixture
def server() -> Iterator[Side]:
    s = Side(connection_request_timeout_ms=1000)
    yield s
    s.close()


@pytest.fixture
def client() -> Iterator[Side]:
    s = Side(connection_request_timeout_ms=1000)
    yield s
    s.close()


def pump(*sides: Side, until: Any, timeout: float = 5.0) -> None:
    """Progress every side (raising what progress raises) until ``until()``."""
    end = time.monotonic() + timeout
    while not until():
        if time.monotonic() > end:
            raise TimeoutError("condition not reached")
        for s in sides:
            s.pe.progress()
        time.sleep(0.001)


def _abandoned_request(port: int) -> None:
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
    import cm_probe
    assert cm_probe.attack("127.0.0.1", port, "valid-close") == "closed"


def test_abandoned_request_does_not_reach_the_loop(server: Side, client: Side) -> None:
    port = free_port()
    seen: List[str] = []
    server.rdma.on_connection = lambda c, st: seen.append(st.value)
    server.rdma.listen(port, accept=lambda c: True)
    _abandoned_request(port)
    time.sleep(0.2)                     # the request and the close are both queued before progress
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        server.pe.progress()            # raised DocaConnectionAbortedError before the fix
    assert "failed" in seen or not seen
    conn = client.rdma.connect_to("127.0.0.1", port)
    pump(server, client, until=lambda: conn.state is not pydoca.ConnectionState.PENDING)
    assert conn.established
    assert not [c for c in server.rdma.connections if c.closed]


@pytest.mark.parametrize("culprit", ["policy", "on_connection"])
def test_raising_callbacks_cost_only_their_connection(server: Side, client: Side, culprit: str) -> None:
    port = free_port()
    calls = {"n": 0}

    def boom(*_: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("bug in user code")
        return True

    if culprit == "policy":
        server.rdma.listen(port, accept=boom)
    else:
        server.rdma.on_connection = boom
        server.rdma.listen(port, accept=lambda c: True)
    first = client.rdma.connect_to("127.0.0.1", port)
    pump(server, client, until=lambda: first.closed)   # rejected (policy) or dropped (callback)
    second = client.rdma.connect_to("127.0.0.1", port)
    pump(server, client, until=lambda: second.state is not pydoca.ConnectionState.PENDING)
    assert second.established


def test_accept_returns_established_connections(server: Side, client: Side) -> None:
    port = free_port()
    server.rdma.listen(port)                          # no policy: accept() decides
    c1 = client.rdma.connect_to("127.0.0.1", port)
    c2 = client.rdma.connect_to("127.0.0.1", port)

    import threading
    stop = threading.Event()

    def drive() -> None:
        while not stop.is_set():
            client.pe.wait(0.02)
    t = threading.Thread(target=drive)
    t.start()
    try:
        a = server.rdma.accept(5, private_data=b"hi")
        assert a.incoming and a.established
        rest = list(server.rdma.accepted(1.5))
        assert len(rest) == 1 and rest[0].established
        with pytest.raises(TimeoutError):
            server.rdma.accept(0.2)
    finally:
        stop.set()
        t.join(5)
    assert c1.established and c2.established
    assert c1.private_data == b"hi"


def test_undecided_requests_are_rejected_after_request_timeout(client: Side) -> None:
    server = Side(request_timeout=0.3)
    try:
        port = free_port()
        server.rdma.listen(port)
        conn = client.rdma.connect_to("127.0.0.1", port)
        pump(server, client, until=lambda: bool(server.rdma.requests))
        time.sleep(0.4)
        for req in server.rdma.incoming(0.3):      # expired before anyone looked at it
            pytest.fail(f"expired request yielded: {req}")
        pump(server, client, until=lambda: conn.state is not pydoca.ConnectionState.PENDING)
        assert conn.failure_reason == "rejected"
    finally:
        server.close()


def test_decide_answers_requests_the_policy_left_undecided(server: Side) -> None:
    """A policy that returns None leaves the request in ``requests``; ``decide`` answers it later: True
    establishes, False rejects (the requester reads "rejected"), and a request whose requester left meanwhile
    is not answered (False) but taken off the list."""
    port = free_port()
    server.rdma.listen(port, accept=lambda c: None)
    sides = [Side(connection_request_timeout_ms=3000) for _ in range(3)]
    try:
        conns, reqs = [], []
        for i, s in enumerate(sides):                       # one at a time: the i-th request is the i-th side's
            conns.append(s.rdma.connect_to("127.0.0.1", port))
            pump(server, *sides, until=lambda: len(server.rdma.requests) == i + 1)
            reqs.append(server.rdma.requests[-1])
        sides[2].close()                                    # the third requester leaves before its answer
        pump(server, *sides[:2], until=lambda: reqs[2].state is not pydoca.ConnectionState.REQUESTED)
        assert server.rdma.decide(reqs[0], True) is True
        assert server.rdma.decide(reqs[1], False) is True
        assert server.rdma.decide(reqs[2], True) is False
        assert not server.rdma.requests
        pump(server, *sides[:2], until=lambda: conns[0].established and
             conns[1].state is not pydoca.ConnectionState.PENDING)
        assert conns[1].failure_reason == "rejected"
    finally:
        for s in sides[:2]:
            s.close()


def test_listen_on_a_port_in_use_names_it(server: Side) -> None:
    port = free_port()
    other = Side()
    try:
        other.rdma.listen(port)
        with pytest.raises(E.InUseError, match=f"port {port} is already in use.*pick another port"):
            server.rdma.listen(port)
    finally:
        other.close()
    server.rdma.listen(port)
    with pytest.raises(E.AlreadyExistError, match=f"already listens on port {port}"):
        server.rdma.listen(port)


def test_refused_and_timed_out_connections_say_so(client: Side) -> None:
    conn = client.rdma.connect_to("127.0.0.1", free_port())
    with pytest.raises(E.DocaConnectionResetError, match="refused"):
        conn.wait_established(5)
    assert conn.failure_reason == "refused"
    with socket.socket() as silent:                # accepts TCP, never answers the request
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        conn = client.rdma.connect_to("127.0.0.1", silent.getsockname()[1])
        t0 = time.monotonic()
        with pytest.raises(E.TimeOutError, match="timed out"):
            conn.wait_established(5)
        assert time.monotonic() - t0 < 1.0 + 1.5
        assert conn.failure_reason == "timeout"


def test_too_small_destination_names_both_lengths(server: Side) -> None:
    blob, conn = server.rdma.export()
    other = Side()
    try:
        b2, c2 = other.rdma.export()
        server.rdma.connect(b2, conn)
        other.rdma.connect(blob, c2)
        pump(server, other, until=lambda: conn.established and c2.established)
        big = pydoca.MemoryMap(server.dev, bytearray(8192))
        small = pydoca.MemoryMap(other.dev, bytearray(1024), access=Access.LOCAL_READ_WRITE | Access.RDMA_WRITE)
        remote = pydoca.MemoryMap.from_export(server.dev, small.export_rdma())
        with pydoca.BufferInventory(4) as inv:
            with pytest.raises(E.InvalidValueError, match="8192 bytes do not fit in 1024"):
                server.rdma.write(conn, inv.buffer(big), inv.buffer(remote))
            local = pydoca.MemoryMap(server.dev, bytearray(100))
            with pytest.raises(E.InvalidValueError, match="1024 bytes do not fit in 100"):
                server.rdma.read(conn, inv.buffer(remote), inv.buffer(local, empty=True))
        for m in (local, remote, big, small):
            m.close()
    finally:
        other.close()


def test_memory_close_waits_for_a_task_that_completes(server: Side) -> None:
    """A task that completes within the bound is simply waited for."""
    blob, conn = server.rdma.export()
    other = Side()
    try:
        b2, c2 = other.rdma.export()
        server.rdma.connect(b2, conn)
        other.rdma.connect(blob, c2)
        pump(server, other, until=lambda: conn.established and c2.established)
        target = pydoca.MemoryMap(other.dev, bytearray(1 << 20), access=Access.LOCAL_READ_WRITE | Access.RDMA_WRITE)
        remote = pydoca.MemoryMap.from_export(server.dev, target.export_rdma())
        src = pydoca.MemoryMap(server.dev, bytearray(1 << 20))
        with pydoca.BufferInventory(4) as inv:
            task = server.rdma.write(conn, inv.buffer(src), inv.buffer(remote))
            src.close()
            assert task.done and task.error is None
            assert server.rdma.state is pydoca.CtxState.RUNNING      # not stopped: it completed in time
        remote.close()
        target.close()
    finally:
        other.close()
