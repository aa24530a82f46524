"""pydoca.rdma.exchange between two processes: this one connects by RDMA CM to
a peer process (PEER below, run with ``python -c``) that listens, accepts and
plays one scenario."""
from __future__ import annotations

import subprocess
import sys
import time
from contextlib import ExitStack
from typing import Iterator, List, Tuple

import pytest
from rdma_util import free_port

import pydoca
from pydoca import Access, BufferInventory, Device, MemoryMap, ProgressEngine, Rdma
from pydoca.rdma import exchange
from pydoca.rdma.exchange import BlobTimeoutError, BlobTooLargeError, ExchangeError

PATTERN = bytes(range(256)) * 16          # the peer's exported memory (4 KiB)

PEER = r"""
import sys, time
from pydoca import Access, Device, MemoryMap, ProgressEngine, Rdma
from pydoca.rdma import exchange
scenario, port = sys.argv[1], int(sys.argv[2])
with Device.open(iface="lo") as dev, ProgressEngine() as pe:
    memory = bytes(range(256)) * 16
    with MemoryMap(dev, memory, access=Access.LOCAL_READ_ONLY | Access.RDMA_READ) as mm, \
            Rdma(dev, pe, permissions=Access.LOCAL_READ_WRITE | Access.RDMA_READ) as rdma:
        rdma.listen(port)
        print("listening", flush=True)
        conn = rdma.accept(20)
        if scenario == "echo":          # our memory descriptor, then echo one blob reversed
            exchange.send_blob(rdma, conn, mm.export_rdma(), timeout=20)
            blob = exchange.receive_blob(rdma, conn, max_size=1024, timeout=20)
            exchange.send_blob(rdma, conn, blob[::-1], timeout=20)
        elif scenario == "small":       # a receive of 16 bytes at most
            try:
                exchange.receive_blob(rdma, conn, max_size=16, timeout=20)
            except exchange.ExchangeError as exc:
                print(type(exc).__name__, flush=True)
        elif scenario == "early":       # send at once: the other side posts its receive later
            exchange.send_blob(rdma, conn, b"early bird", timeout=20)
        elif scenario in ("silent", "leave"):   # connected, sends nothing; told to stop: exits (disconnects)
            sys.stdin.readline()
        print("done", flush=True)
"""


class Peer:
    def __init__(self, scenario: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-c", PEER, scenario, str(self.port)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline() == "listening\n", self.proc.stderr.read()  # type: ignore[union-attr]

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()

    def finish(self) -> Tuple[int, List[str]]:
        out, err = self.proc.communicate(timeout=30)
        assert "Traceback" not in err, err
        return self.proc.returncode, out.splitlines()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=30)


@pytest.fixture
def side() -> Iterator[Tuple[Device, Rdma, ExitStack]]:
    """Our side: device, engine and Rdma context on lo."""
    with ExitStack() as stack:
        dev = stack.enter_context(Device.open(iface="lo"))
        pe = stack.enter_context(ProgressEngine())
        rdma = stack.enter_context(Rdma(dev, pe, permissions=Access.LOCAL_READ_WRITE))
        yield dev, rdma, stack


@pytest.fixture
def peers() -> Iterator[List[Peer]]:
    started: List[Peer] = []
    yield started
    for p in started:
        p.kill()


def start(peers: List[Peer], scenario: str) -> Peer:
    peer = Peer(scenario)
    peers.append(peer)
    return peer


def test_memory_descriptor_and_echo(side: Tuple[Device, Rdma, ExitStack], peers: List[Peer]) -> None:
    """The use the module exists for: the peer's MemoryMap descriptor arrives
    in a receive posted before connecting, and works for an RDMA read."""
    dev, rdma, stack = side
    peer = start(peers, "echo")
    pending = exchange.post_receive_blob(rdma)
    conn = rdma.connect_to("127.0.0.1", peer.port).wait_established(10)
    descriptor = pending.result(10, conn)
    assert pending.done and len(descriptor) > 0
    remote = stack.enter_context(MemoryMap.from_export(dev, descriptor))
    assert remote.length == len(PATTERN)
    data = bytearray(len(PATTERN))
    local = stack.enter_context(MemoryMap(dev, data))
    inv = stack.enter_context(BufferInventory(2))
    rdma.read(conn, inv.buffer(remote), inv.buffer(local, empty=True)).result(10)
    assert data == PATTERN

    echo = exchange.post_receive_blob(rdma, max_size=1024)
    exchange.send_blob(rdma, conn, b"ping " * 100, timeout=10)
    assert echo.result(10, conn) == (b"ping " * 100)[::-1]
    assert peer.finish() == (0, ["done"])


def test_oversize_is_refused_on_both_sides(side: Tuple[Device, Rdma, ExitStack], peers: List[Peer]) -> None:
    _, rdma, _ = side
    peer = start(peers, "small")
    conn = rdma.connect_to("127.0.0.1", peer.port).wait_established(10)
    with pytest.raises(BlobTooLargeError, match=r"17 bytes, more than max_size \(16\)"):
        exchange.send_blob(rdma, conn, b"x" * 17, timeout=10, max_size=16)      # refused here, nothing sent
    with pytest.raises(ValueError, match="at least 1 byte"):
        exchange.send_blob(rdma, conn, b"", timeout=10)
    with pytest.raises(BlobTooLargeError, match="larger than the peer's posted receive") as info:
        exchange.send_blob(rdma, conn, b"x" * 100, timeout=10)
    assert isinstance(info.value, ValueError) and isinstance(info.value, ExchangeError)
    assert peer.finish() == (0, ["BlobTooLargeError", "done"])


def test_timeout_is_bounded_and_clean(side: Tuple[Device, Rdma, ExitStack], peers: List[Peer]) -> None:
    """Nothing comes: BlobTimeoutError after the timeout; the receive stays
    posted and is flushed when the context closes (no leak, no warning)."""
    _, rdma, stack = side
    peer = start(peers, "silent")
    conn = rdma.connect_to("127.0.0.1", peer.port).wait_established(10)
    t0 = time.monotonic()
    with pytest.raises(BlobTimeoutError, match=r"timed out after 0.5s waiting for the peer's blob") as info:
        exchange.receive_blob(rdma, conn, timeout=0.5)
    assert 0.5 <= time.monotonic() - t0 < 3
    assert isinstance(info.value, TimeoutError)
    stack.close()                                   # stops the context: the posted receive is flushed
    peer.stop()
    assert peer.finish() == (0, ["done"])


def test_peer_leaving_fails_at_once(side: Tuple[Device, Rdma, ExitStack], peers: List[Peer]) -> None:
    _, rdma, _ = side
    peer = start(peers, "leave")
    pending = exchange.post_receive_blob(rdma)
    conn = rdma.connect_to("127.0.0.1", peer.port).wait_established(10)
    peer.stop()
    assert peer.finish() == (0, ["done"])
    t0 = time.monotonic()
    with pytest.raises(ExchangeError, match="the connection was disconnected before the peer's blob arrived"):
        pending.result(20, conn)
    assert time.monotonic() - t0 < 10
    with pytest.raises(ExchangeError, match="cannot send the blob: .*DOCA_ERROR_NOT_CONNECTED"):
        exchange.send_blob(rdma, conn, b"late", timeout=5)


@pytest.mark.skipif(pydoca.backend.name != "soft", reason="softdoca parks a message that finds no receive")
def test_receive_posted_after_the_send(side: Tuple[Device, Rdma, ExitStack], peers: List[Peer]) -> None:
    _, rdma, _ = side
    peer = start(peers, "early")
    conn = rdma.connect_to("127.0.0.1", peer.port).wait_established(10)
    time.sleep(0.3)
    assert exchange.receive_blob(rdma, conn, timeout=10) == b"early bird"
    assert peer.finish() == (0, ["done"])
