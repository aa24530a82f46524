"""Direct wake-ups (softdoca): a thread waiting on its progress engine is woken by its links' input.

``ProgressEngine.sleep`` waits in ``softdoca_pe_wait``: the input of the engine's connections
wakes that thread instead of softdoca's engine thread, and it reads the input before returning.
These tests pin the guarantees around it: waits end on completions and on ``kick()``, timeouts
hold, one-sided operations into a process are served whoever waits there, and a waiter that
takes wake-ups without reading (a bare epoll_wait on the handle) cannot starve them.
"""
from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from typing import Any, Iterator, Tuple

import pytest

import pydoca
from pydoca import Access
from rdma_util import Local, PeerProc
from test_rdma import local  # noqa: F401 - the fixture

ALL_REMOTE = Access.LOCAL_READ_WRITE | Access.RDMA_READ | Access.RDMA_WRITE
SIZE = 4096

pytestmark = pytest.mark.skipif(pydoca.backend.name != "soft", reason="softdoca's waiting path")


@contextlib.contextmanager
def _target(local: Local, **kw: Any) -> Iterator[Tuple[PeerProc, "pydoca.Connection", "pydoca.MemoryMap"]]:
    """A target process over TCP, connected out of band: (peer, connection, its SIZE-byte memory)."""
    peer = PeerProc(transport="tcp", **kw)
    try:
        started = peer.call("start", size=SIZE, access=int(ALL_REMOTE), permissions=int(ALL_REMOTE), mode="oob")
        conn = local.connect_oob(peer, started)
        yield peer, conn, local.remote(started["mmap"])
    finally:
        peer.close()


def test_sleep_returns_on_kick_from_another_thread() -> None:
    with pydoca.ProgressEngine() as pe:
        assert pe.can_kick
        took: list[float] = []

        def sleeper() -> None:
            t0 = time.monotonic()
            pe.sleep(5.0)
            took.append(time.monotonic() - t0)
        th = threading.Thread(target=sleeper)
        th.start()
        time.sleep(0.2)
        pe.kick()
        th.join(5)
        assert not th.is_alive() and took and took[0] < 2.0
        t0 = time.monotonic()                       # nothing pending: the timeout is honoured
        pe.progress()
        pe.sleep(0.2)
        assert 0.15 <= time.monotonic() - t0 < 2.0


def test_completion_wakes_the_waiter(local: Local) -> None:
    with _target(local) as (peer, conn, rm):
        data = bytearray(b"w" * 64)
        src = local.local(data)
        for i in range(50):
            task = local.rdma.write(conn, local.inv.buffer(src), local.inv.buffer(rm, offset=i * 64, length=64))
            t0 = time.monotonic()
            while not task.done and time.monotonic() - t0 < 5:
                local.pe.sleep(1.0)      # no progress call before it: the wait itself must end on the input
                local.pe.progress()
            assert task.done and task.error is None
        got = peer.call("digest")
        assert bytes.fromhex(got["head"]) == b"w" * 64


def test_one_sided_served_while_the_target_waits_on_its_engine(local: Local) -> None:
    """The target's only thread sits in ProgressEngine.wait: it reads the writes itself, promptly."""
    with _target(local) as (peer, conn, rm):
        peer.post("progress", seconds=3.0)
        time.sleep(0.2)
        payload = bytearray(bytes(range(256)) * (SIZE // 256))
        src = local.local(payload)
        t0 = time.monotonic()
        for off in range(0, SIZE, 512):
            local.rdma.write(conn, local.inv.buffer(src, offset=off, length=512),
                             local.inv.buffer(rm, offset=off, length=512)).result(5)
        assert time.monotonic() - t0 < 2.0
        peer.answer("progress")
        assert peer.call("digest")["sha"] == hashlib.sha256(payload).hexdigest()


def test_waiter_that_never_reads_cannot_starve_one_sided_operations(local: Local) -> None:
    """A bare epoll_wait on the handle takes the links' wake-ups from the engine thread and reads
    nothing; the engine still reads every link at least every SOFTDOCA_TIMEOUT_MS/4."""
    with _target(local, env={"SOFTDOCA_TIMEOUT_MS": "800"}) as (peer, conn, rm):
        peer.post("hold_wakeups", seconds=3.0)
        time.sleep(0.3)
        payload = bytearray(b"S" * SIZE)
        src = local.local(payload)
        took = []
        for off in range(0, SIZE, 1024):
            t0 = time.monotonic()
            local.rdma.write(conn, local.inv.buffer(src, offset=off, length=1024),
                             local.inv.buffer(rm, offset=off, length=1024)).result(5)
            took.append(time.monotonic() - t0)
        held = peer.answer("hold_wakeups", timeout=10)
        assert held["woke"] > 0, "the bare waiter was never woken: the test proves nothing"
        # the engine reads every link each 0.2 s here; without that, only our ping after 1.25 s
        # of silence (SOFTDOCA_TIMEOUT_MS=5000 on this side) would wake it
        assert max(took) < 0.7, f"writes took {[round(t, 3) for t in took]} s"
        assert peer.call("digest")["sha"] == hashlib.sha256(payload).hexdigest()
