"""Task batches across processes: bytes that arrived, per-task statuses, pool overflow, reuse, failures."""
from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
from typing import Any, Iterator, Tuple

import pytest

import pydoca
from pydoca import Access
from pydoca.errors import BadStateError
from rdma_util import ALL_REMOTE, Local, PeerProc
from test_rdma import connect, local, pattern, peer  # noqa: F401 - the fixtures too

SIZE = 1 << 16


def test_write_batch_lands_every_byte(local: Local, peer: PeerProc) -> None:
    conn, started = connect(local, peer, "oob")
    data = pattern(SIZE)
    mm, remote = local.local(data), local.remote(started["mmap"])
    n, chunk = 256, SIZE // 256
    srcs = [local.inv.buffer(mm, offset=i * chunk, length=chunk) for i in range(n // 2)]
    dsts = [local.inv.buffer(remote, offset=i * chunk, length=chunk, empty=True) for i in range(n // 2)]
    batch = local.rdma.write_batch(conn, srcs, dsts)
    batch.result(10)
    assert batch.done and batch.failed == 0 and (batch.status == 0).all() and batch.completed == n // 2
    batch.submit().result(10)                                          # reusable
    assert batch.completed == n // 2
    expect = bytes(data[:SIZE // 2]) + bytes(SIZE // 2)
    assert peer.call("digest")["sha"] == hashlib.sha256(expect).hexdigest()
    for b in srcs + dsts:
        b.close()


@pytest.fixture(params=["auto", "tcp"])
def any_peer(request: pytest.FixtureRequest) -> Iterator[PeerProc]:
    """The peer on either transport: over tcp every task waits for its doorbell (the FLUSH of a run)."""
    p = PeerProc(transport=request.param)
    yield p
    p.close()


@contextlib.contextmanager
def _small_pool(peer: PeerProc, *, max_tasks: int, buffers: int) -> Iterator[Tuple[Any, ...]]:
    """(device, rdma with a task pool of ``max_tasks``, inventory, connection to ``peer``, its start answer)."""
    with pydoca.Device.open(iface="lo") as dev, pydoca.ProgressEngine() as pe, \
            pydoca.Rdma(dev, pe, permissions=ALL_REMOTE, max_tasks=max_tasks) as rdma, \
            pydoca.BufferInventory(buffers) as inv:
        started = peer.call("start", size=SIZE, access=int(ALL_REMOTE), permissions=int(ALL_REMOTE), mode="oob")
        blob, conn = rdma.export()
        rdma.connect(base64.b64decode(started["conn"]), conn)
        peer.post("connect", blob=base64.b64encode(blob).decode())
        conn.wait_established(10)
        peer.answer("connect")
        yield dev, rdma, inv, conn, started


def test_batch_larger_than_the_task_pool(any_peer: PeerProc) -> None:
    """600 writes through a 16-task pool, fed as tasks complete: each run the pool cuts short rings its
    doorbell (over tcp, unflushed tasks would wait for ever); then ranges and reads the same way."""
    peer = any_peer
    with _small_pool(peer, max_tasks=16, buffers=1400) as (dev, rdma, inv, conn, started):
        data = pattern(SIZE, seed=3)
        with pydoca.MemoryMap(dev, data, access=Access.LOCAL_READ_WRITE) as mm, \
                pydoca.MemoryMap.from_export(dev, base64.b64decode(started["mmap"])) as remote:
            n = 600                                                    # 16-task pool: fed as tasks complete
            srcs = [inv.buffer(mm, offset=(i * 128) % SIZE, length=128) for i in range(n)]
            dsts = [inv.buffer(remote, offset=(i * 128) % SIZE, length=128, empty=True) for i in range(n)]
            batch = rdma.write_batch(conn, srcs, dsts)
            batch.result(20)
            assert batch.completed == n and batch.failed == 0
            assert peer.call("digest")["sha"] == hashlib.sha256(bytes(data)).hexdigest()
            back = bytearray(SIZE)
            with pydoca.MemoryMap(dev, back, access=Access.LOCAL_READ_WRITE) as bm:
                dst2 = [inv.buffer(bm, offset=i * 1024, length=1024, empty=True) for i in range(64)]
                src2 = [inv.buffer(remote, offset=i * 1024, length=1024) for i in range(64)]
                rb = rdma.read_batch(conn, src2, dst2)
                asyncio.run(_await(rb))
                assert rb.failed == 0 and bytes(back) == bytes(data)
                for b in dst2 + src2:
                    b.close()
                offs = [(i * 64) % SIZE for i in range(300)]              # ranges: buffers taken in C
                rng = pydoca.TaskBatch.ranges(rdma, conn, "read", inv, bm, offs, remote, offs, [64] * 300)
                back[:] = bytes(SIZE)
                rng.submit().result(20)
                assert rng.completed == 300 and rng.failed == 0 and bytes(back[:300 * 64]) == bytes(data[:300 * 64])
            for b in srcs + dsts:
                b.close()
        conn.disconnect()


def test_map_closed_under_a_batch_larger_than_the_pool(any_peer: PeerProc) -> None:
    """A map closed while a batch is half fed: the close feeds the rest as tasks complete, nothing is lost."""
    peer = any_peer
    with _small_pool(peer, max_tasks=8, buffers=600) as (dev, rdma, inv, conn, started):
        data = pattern(SIZE, seed=5)
        mm = pydoca.MemoryMap(dev, data, access=Access.LOCAL_READ_WRITE)
        remote = pydoca.MemoryMap.from_export(dev, base64.b64decode(started["mmap"]))
        n = 256
        srcs = [inv.buffer(mm, offset=i * 256, length=256) for i in range(n)]
        dsts = [inv.buffer(remote, offset=i * 256, length=256, empty=True) for i in range(n)]
        batch = rdma.write_batch(conn, srcs, dsts)
        assert batch.submitted <= 8 < n                                  # the pool took what it could
        mm.close()                                                       # waits: feeds the batch to its end
        assert batch.done and batch.completed == n and batch.failed == 0
        assert peer.call("digest")["sha"] == hashlib.sha256(bytes(data)).hexdigest()
        remote.close()
        conn.disconnect()


def test_batch_rest_fails_once_its_context_stopped(peer: PeerProc) -> None:
    """Stopping the context under a half-fed batch: what was in flight is flushed, the rest fails
    BAD_STATE, and the batch is done (its maps close at once)."""
    with _small_pool(peer, max_tasks=8, buffers=600) as (dev, rdma, inv, conn, started):
        mm = pydoca.MemoryMap(dev, pattern(SIZE, seed=6), access=Access.LOCAL_READ_WRITE)
        remote = pydoca.MemoryMap.from_export(dev, base64.b64decode(started["mmap"]))
        n = 256
        srcs = [inv.buffer(mm, offset=i * 256, length=256) for i in range(n)]
        dsts = [inv.buffer(remote, offset=i * 256, length=256, empty=True) for i in range(n)]
        batch = rdma.write_batch(conn, srcs, dsts)
        rdma.stop()
        mm._settle()
        assert batch.done and batch.completed == n
        assert batch.submitted <= 8 and (batch.status[batch.submitted:] == BadStateError.code).all()
        assert not mm._tasks and not remote._tasks
        for b in srcs + dsts:
            b.close()
        mm.close()
        remote.close()


async def _await(batch: pydoca.TaskBatch) -> None:
    await asyncio.wait_for(batch, 10)


def test_failed_batch_is_typed(local: Local, peer: PeerProc) -> None:
    """A target mmap without RDMA_WRITE: every task fails NOT_PERMITTED; BatchError says how many."""
    conn, started = connect(local, peer, "oob", access=Access.LOCAL_READ_WRITE | Access.RDMA_READ)
    mm, remote = local.local(pattern(4096)), local.remote(started["mmap"])
    srcs = [local.inv.buffer(mm, offset=i * 64, length=64) for i in range(8)]
    dsts = [local.inv.buffer(remote, offset=i * 64, length=64, empty=True) for i in range(8)]
    batch = local.rdma.write_batch(conn, srcs, dsts)
    with pytest.raises(pydoca.BatchError, match=r"of 8 write tasks failed") as exc:
        batch.result(10)
    assert batch.failed >= 1 and all(e.name == "DOCA_ERROR_NOT_PERMITTED" for _, e in exc.value.failed[:1])
    assert "RDMA_WRITE" in str(exc.value), str(exc.value)            # softdoca's words for the first failure
    assert peer.call("digest")["sha"] == hashlib.sha256(bytes(SIZE)).hexdigest()   # nothing landed
    for b in srcs + dsts:
        b.close()


def test_send_batch_consumes_posted_receives(local: Local, peer: PeerProc) -> None:
    conn, _ = connect(local, peer, "oob")
    peer.call("post_recv", n=32, size=64)
    data = bytearray(b"".join(i.to_bytes(2, "little") * 32 for i in range(32)))
    mm = local.local(data)
    bufs = [local.inv.buffer(mm, offset=i * 64, length=64) for i in range(32)]
    local.rdma.send_imm_batch(conn, bufs, list(range(100, 132))).result(10)
    got = peer.call("recv_results")["results"]
    assert [r["imm"] for r in got] == list(range(100, 132))
    assert [base64.b64decode(r["data"]) for r in got] == [bytes(data[i * 64:(i + 1) * 64]) for i in range(32)]
    for b in bufs:
        b.close()


def test_batch_argument_errors(local: Local, peer: PeerProc) -> None:
    conn, started = connect(local, peer, "oob")
    mm = local.local(pattern(256))
    src = [local.inv.buffer(mm, length=8)]
    with pytest.raises(ValueError, match="at least one"):
        local.rdma.write_batch(conn, [], [])
    with pytest.raises(ValueError, match="second buffers"):
        local.rdma.write_batch(conn, src, [])
    src[0].close()


def test_range_batch_no_buffer_objects(local: Local, peer: PeerProc) -> None:
    """Ranges of two maps: buffers taken and returned in C; bytes land; an out-of-range task is refused."""
    conn, started = connect(local, peer, "oob")
    data = pattern(SIZE, seed=11)
    mm, remote = local.local(data), local.remote(started["mmap"])
    offs = list(range(0, SIZE, 1024))
    batch = pydoca.TaskBatch.ranges(local.rdma, conn, "write", local.inv, mm, offs, remote, offs, [1024] * len(offs))
    batch.submit().result(10)
    assert batch.completed == len(offs) and batch.failed == 0
    assert peer.call("digest")["sha"] == hashlib.sha256(bytes(data)).hexdigest()
    back = bytearray(SIZE)
    bm = local.local(back)
    rb = pydoca.TaskBatch.ranges(local.rdma, conn, "read", local.inv, bm, offs, remote, offs, [1024] * len(offs))
    rb.submit().result(10)
    assert bytes(back) == bytes(data)
    bad = pydoca.TaskBatch.ranges(local.rdma, conn, "write", local.inv, mm, [0, SIZE - 10], remote, [0, 0],
                                  [1024, 1024])
    with pytest.raises(pydoca.BatchError):
        bad.submit().result(10)
    assert bad.status[0] == 0 and bad.status[1] > 0                    # the second runs past the local map
