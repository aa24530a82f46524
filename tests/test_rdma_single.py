"""Single tasks whose success is recorded in C (pydoca_rdma_submit_fast, callbacks.drain_done): every
byte lands, each task completes once and in order, no state is left behind (registry, pinned maps),
a failure after recorded successes reaches Python after them, refusals still raise with their detail,
and two threads progressing their own engines never see each other's completions."""
from __future__ import annotations

import base64
import hashlib
import threading
from typing import Any, Iterator, List

import pytest

from pydoca import Access
from pydoca import errors as E
from pydoca._native import callbacks, lib
from rdma_util import Local, PeerProc, forge_export

SIZE = 1 << 16
CHUNK = 64


@pytest.fixture
def local() -> Iterator[Local]:
    loc = Local()
    yield loc
    loc.close()


@pytest.fixture
def peer() -> Iterator[PeerProc]:
    p = PeerProc()
    yield p
    p.close()


def _connect(local: Local, peer: PeerProc, **kw: Any) -> Any:
    started = peer.call("start", size=SIZE, access=int(kw.pop("access", Access.LOCAL_READ_WRITE | Access.RDMA_WRITE
                                                                 | Access.RDMA_READ | Access.RDMA_ATOMIC)),
                        permissions=int(Access.LOCAL_READ_WRITE | Access.RDMA_WRITE | Access.RDMA_READ
                                        | Access.RDMA_ATOMIC), mode="oob", fill=0, rnr_retry=None)
    return local.connect_oob(peer, started), started


def test_windowed_writes_land_complete_once_in_order_and_unpin(local: Local, peer: PeerProc) -> None:
    """Half the tasks have a done callback (they complete through the callback shim), half not (their
    success is recorded in C): all complete once, in order, and leave nothing pinned or registered."""
    conn, started = _connect(local, peer)
    src = bytearray(range(256)) * (SIZE // 256)
    lm, rm = local.local(src), local.remote(started["mmap"])
    n = SIZE // 1024                         # 64 writes of 1 KiB (the inventory holds 256 buffers)
    srcs = [local.inv.buffer(lm, offset=i * 1024, length=1024) for i in range(n)]
    dsts = [local.inv.buffer(rm, offset=i * 1024, length=1024, empty=True) for i in range(n)]
    order: List[int] = []
    tasks = []
    for i in range(n):                       # up to 16 outstanding, as a windowed bench does
        if len(tasks) >= 16:
            tasks[-16].wait(10)
        t = local.rdma.write(conn, srcs[i], dsts[i])
        if i % 2:
            t.add_done_callback(lambda task, i=i: order.append(i))
        tasks.append(t)
    for t in tasks:
        t.result(10)
    assert order == list(range(1, n, 2))     # each once, in submission order (one connection: RC order)
    assert all(t.done and t.error is None and t.completed_at is not None for t in tasks)
    stamps = [t.completed_at for t in tasks]
    assert stamps == sorted(stamps)          # recorded or called back, Python saw them in order
    assert peer.call("digest")["sha"] == hashlib.sha256(src).hexdigest()
    assert not lm._tasks and not rm._tasks   # no map stays pinned by a completed task
    assert not any(t._id in callbacks.tasks for t in tasks)
    assert lib.pydoca_done_unwatch(tasks[1]._id) == 0     # no key stays watched
    for b in srcs + dsts:
        b.close()


def test_a_failure_after_recorded_successes_reaches_python_after_them(local: Local, peer: PeerProc) -> None:
    """Successes recorded in C (no callback) are delivered before a later task's callback runs."""
    conn, started = _connect(local, peer)
    lm = local.local(bytearray(b"\x5a" * SIZE))
    good = local.remote(started["mmap"])
    bad = local.remote(base64.b64encode(forge_export(base64.b64decode(started["mmap"]), key_xor=1)).decode())
    oks = [local.rdma.write(conn, local.inv.buffer(lm, offset=i * CHUNK, length=CHUNK),
                            local.inv.buffer(good, offset=i * CHUNK, length=CHUNK, empty=True)) for i in range(16)]
    failing = local.rdma.write(conn, local.inv.buffer(lm, length=CHUNK), local.inv.buffer(bad, length=CHUNK))
    seen: List[List[bool]] = []
    failing.add_done_callback(lambda task: seen.append([t.done for t in oks] + [task.error is not None]))
    with pytest.raises(E.NotPermittedError, match="wrong access key"):
        failing.result(10)
    assert seen == [[True] * 16 + [True]], seen
    assert all(t.error is None for t in oks)


def test_a_callback_runs_inside_the_completion_with_the_task_in_flight(local: Local, peer: PeerProc) -> None:
    """A done callback given while the task is in flight runs inside DOCA's completion callback (as before
    successes were recorded in C): a context stopped from it is still STOPPING, its task in flight."""
    conn, started = _connect(local, peer)
    lm, rm = local.local(bytearray(b"x" * 64)), local.remote(started["mmap"])
    seen: List[int] = []

    def stop_here(task: Any) -> None:
        seen.append(int(lib.doca_ctx_stop(local.rdma._ctx)))
    t = local.rdma.write(conn, local.inv.buffer(lm), local.inv.buffer(rm, length=64, empty=True))
    t.add_done_callback(stop_here)
    t.wait(10)
    assert seen == [E.InProgressError.code], seen


def test_a_refused_submit_raises_with_its_detail_and_leaves_nothing(local: Local, peer: PeerProc) -> None:
    conn, started = _connect(local, peer)
    lm, rm = local.local(bytearray(8192)), local.remote(started["mmap"])
    before = dict(callbacks.tasks)
    with pytest.raises(E.InvalidValueError, match="8192 bytes but the remote buffer is 4096"):
        local.rdma.write(conn, local.inv.buffer(lm), local.inv.buffer(rm, length=4096))
    assert callbacks.tasks == before and not lm._tasks and not rm._tasks
    # the connection is fine, and the next task is a fresh one
    t = local.rdma.write(conn, local.inv.buffer(lm, length=4096), local.inv.buffer(rm, length=4096, empty=True))
    assert t.result(10) is None and t.error is None


def test_threads_with_their_own_engines_see_only_their_completions(peer: PeerProc) -> None:
    """Completions are recorded per progressing thread: two threads, each with its own engine, context and
    connection, writing concurrently; each task completes on its own thread's engine, once."""
    started = peer.call("start", size=SIZE, access=int(Access.LOCAL_READ_WRITE | Access.RDMA_WRITE),
                        permissions=int(Access.LOCAL_READ_WRITE | Access.RDMA_WRITE), mode="oob", fill=0,
                        rnr_retry=None)
    sides = [Local(), Local()]
    try:
        # the peer serves one connection: the second thread writes to its own peer
        other = PeerProc()
        try:
            started2 = other.call("start", size=SIZE, access=int(Access.LOCAL_READ_WRITE | Access.RDMA_WRITE),
                                  permissions=int(Access.LOCAL_READ_WRITE | Access.RDMA_WRITE), mode="oob",
                                  fill=0, rnr_retry=None)
            conns = [sides[0].connect_oob(peer, started), sides[1].connect_oob(other, started2)]
            errors: List[BaseException] = []
            done_on: List[List[str]] = [[], []]

            def run(k: int) -> None:
                try:
                    side = sides[k]
                    lm = side.local(bytearray([k + 1]) * SIZE)
                    rm = side.remote((started, started2)[k]["mmap"])
                    me = threading.current_thread().name
                    total = 0
                    for r in range(4):
                        tasks, bufs = [], []
                        for i in range(SIZE // 1024):
                            bufs += [side.inv.buffer(lm, offset=i * 1024, length=1024),
                                     side.inv.buffer(rm, offset=i * 1024, length=1024, empty=True)]
                            t = side.rdma.write(conns[k], bufs[-2], bufs[-1])
                            t.add_done_callback(lambda task: done_on[k].append(threading.current_thread().name))
                            tasks.append(t)
                        for t in tasks:
                            t.result(10)
                        total += len(tasks)
                        for b in bufs:
                            b.close()
                    assert len(done_on[k]) == total and set(done_on[k]) == {me}
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)
            threads = [threading.Thread(target=run, args=(k,), name=f"writer{k}") for k in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert not errors, errors
            assert peer.call("digest")["sha"] == hashlib.sha256(bytes([1]) * SIZE).hexdigest()
            assert other.call("digest")["sha"] == hashlib.sha256(bytes([2]) * SIZE).hexdigest()
        finally:
            other.close()
    finally:
        for side in sides:
            side.close()


def test_sends_complete_through_the_recorded_path(local: Local, peer: PeerProc) -> None:
    conn, started = _connect(local, peer)
    peer.call("post_recv", n=4, size=256)
    lm = local.local(bytearray(b"hello" * 10))
    tasks = [local.rdma.send(conn, local.inv.buffer(lm, length=50)) for _ in range(3)]
    tasks.append(local.rdma.send_imm(conn, local.inv.buffer(lm, length=50), 7))
    for t in tasks:
        assert t.result(10) is None and t.error is None
    assert not lm._tasks
    got = peer.call("recv_results")
    assert len(got["results"]) == 4, got

