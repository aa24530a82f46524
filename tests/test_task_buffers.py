"""A task in flight holds its buffers: a Buffer closed under it keeps its descriptor until the task is done.

Without the hold, closing a Buffer under a task hands its descriptor back to the inventory at once, the next
``inventory.buffer()`` reuses it for other memory, and the task moves the wrong bytes (a DOCA runtime would do
exactly that; softdoca would fail the task). Each test closes the Buffers right after the submit, takes
decoys from the same inventory (which must get other descriptors), and checks the bytes that arrived.
"""
from __future__ import annotations

import base64
import hashlib
from typing import Any, List, Tuple

import pytest

import pydoca
from pydoca import Access
from pydoca._native import ffi
from pydoca.errors import BadStateError
from rdma_util import Local, PeerProc
from test_batch import _small_pool
from test_rdma import SIZE, connect, local, pattern, peer  # noqa: F401 - the fixtures too


def _addr(handle: Any) -> int:
    return int(ffi.cast("uintptr_t", handle))


def _decoys(inv: pydoca.BufferInventory, mm: pydoca.MemoryMap, n: int) -> List[pydoca.Buffer]:
    """``n`` buffers over ``mm`` (other memory) from the inventory the closed Buffers came from."""
    return [inv.buffer(mm, offset=0, length=64) for _ in range(n)]


def test_a_write_keeps_its_closed_buffers_until_it_completes(local: Local, peer: PeerProc) -> None:
    conn, started = connect(local, peer, "oob")
    data = pattern(SIZE, seed=11)
    mm, remote = local.local(data), local.remote(started["mmap"])
    other = local.local(bytearray(SIZE))
    src, dst = local.inv.buffer(mm), local.inv.buffer(remote, empty=True)
    held = {_addr(src.handle), _addr(dst.handle)}
    free = local.inv.num_free
    task = local.rdma.write(conn, src, dst)
    assert src.refcount == 2 and dst.refcount == 2          # ours and the task's (nothing progressed yet)
    src.close()
    dst.close()
    assert local.inv.num_free == free                        # still the task's
    decoys = _decoys(local.inv, other, 2)
    assert not held & {_addr(d.handle) for d in decoys}
    task.result(10)
    assert local.inv.num_free == free + 2 - len(decoys)      # back once the task completed
    assert peer.call("digest")["sha"] == hashlib.sha256(bytes(data)).hexdigest()
    for d in decoys:
        d.close()


def test_a_read_keeps_its_closed_destination(local: Local, peer: PeerProc) -> None:
    conn, started = connect(local, peer, "oob", fill=0x5A)
    back = bytearray(SIZE)
    mm, remote = local.local(back), local.remote(started["mmap"])
    other = local.local(bytearray(SIZE))
    dst, src = local.inv.buffer(mm, empty=True), local.inv.buffer(remote)
    free = local.inv.num_free
    held = {_addr(src.handle), _addr(dst.handle)}
    task = local.rdma.read(conn, src, dst)                   # allocated by the shim's submit_one: held there
    assert src.refcount == 2 and dst.refcount == 2
    dst.close()
    src.close()
    assert local.inv.num_free == free
    decoys = _decoys(local.inv, other, 2)
    assert not held & {_addr(d.handle) for d in decoys}
    task.result(10)
    assert bytes(back) == bytes([0x5A]) * SIZE
    assert local.inv.num_free == free + 2 - len(decoys)
    for d in decoys:
        d.close()


def test_a_receive_keeps_its_closed_buffer(local: Local, peer: PeerProc) -> None:
    conn, _ = connect(local, peer, "oob")
    room = bytearray(256)
    mm = local.local(room)
    other = local.local(bytearray(256))
    buf = local.inv.buffer(mm, empty=True)
    free = local.inv.num_free
    task = local.rdma.receive(buf)                           # allocated in Python: held there
    assert buf.refcount == 2
    buf.close()
    decoys = _decoys(local.inv, other, 1)
    peer.call("send_many", texts=["held until it arrived"])
    got = task.result(10)
    assert got.length == len("held until it arrived")
    assert bytes(room[:got.length]) == b"held until it arrived"
    assert local.inv.num_free == free + 1 - len(decoys)
    for d in decoys:
        d.close()


def test_a_refused_receive_gives_its_buffer_back(local: Local) -> None:
    """A task the context refuses (not started) holds nothing afterwards."""
    mm = local.local(bytearray(64))
    buf = local.inv.buffer(mm, empty=True)
    local.rdma.stop()
    with pytest.raises(pydoca.DocaError):
        local.rdma.receive(buf)
    assert buf.refcount == 1
    buf.close()


@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_a_batch_larger_than_its_pool_keeps_every_closed_buffer(transport: str) -> None:
    """Tasks the pool has not taken yet hold their buffers too: closed right after the submit, decoys
    taken, and still every byte lands."""
    peer = PeerProc(transport=transport)
    try:
        with _small_pool(peer, max_tasks=16, buffers=520) as (dev, rdma, inv, conn, started):
            data = pattern(SIZE, seed=12)
            with pydoca.MemoryMap(dev, data, access=Access.LOCAL_READ_WRITE) as mm, \
                    pydoca.MemoryMap(dev, bytearray(SIZE), access=Access.LOCAL_READ_WRITE) as other, \
                    pydoca.MemoryMap.from_export(dev, base64.b64decode(started["mmap"])) as remote:
                n, chunk = 128, SIZE // 128
                srcs = [inv.buffer(mm, offset=i * chunk, length=chunk) for i in range(n)]
                dsts = [inv.buffer(remote, offset=i * chunk, length=chunk, empty=True) for i in range(n)]
                held = {_addr(b.handle) for b in srcs + dsts}
                batch = rdma.write_batch(conn, srcs, dsts)
                assert batch.submitted <= 16
                for b in srcs + dsts:
                    b.close()
                decoys = _decoys(inv, other, 2 * n)
                assert not held & {_addr(d.handle) for d in decoys}
                batch.result(20)
                assert batch.completed == n and batch.failed == 0
                assert peer.call("digest")["sha"] == hashlib.sha256(bytes(data)).hexdigest()
                for d in decoys:
                    d.close()
                assert inv.num_free == inv.capacity
                with pytest.raises(BadStateError, match="was closed"):
                    batch.submit()                               # its Buffers are gone
    finally:
        peer.close()


def test_the_refused_rest_of_a_batch_gives_its_buffers_back(peer: PeerProc) -> None:
    """The context stops under a half-fed batch: the rest fails BAD_STATE and holds nothing."""
    with _small_pool(peer, max_tasks=8, buffers=600) as (dev, rdma, inv, conn, started):
        with pydoca.MemoryMap(dev, pattern(SIZE, seed=6), access=Access.LOCAL_READ_WRITE) as mm, \
                pydoca.MemoryMap.from_export(dev, base64.b64decode(started["mmap"])) as remote:
            n = 256
            srcs = [inv.buffer(mm, offset=i * 256, length=256) for i in range(n)]
            dsts = [inv.buffer(remote, offset=i * 256, length=256, empty=True) for i in range(n)]
            batch = rdma.write_batch(conn, srcs, dsts)
            for b in srcs + dsts:
                b.close()
            assert inv.num_free < inv.capacity
            rdma.close()                                         # stops it; the rest is refused
            assert batch.done and (batch.status[batch.submitted:] == BadStateError.code).all()
            assert inv.num_free == inv.capacity


def _write_from_own_inventory(local: Local, peer: PeerProc, *, seed: int) -> Tuple[bytearray, Any, Any, Any, Any]:
    """A write in flight whose two Buffers come from an inventory of its own: (data, inventory, task, src, dst)."""
    conn, started = connect(local, peer, "oob")
    data = pattern(SIZE, seed=seed)
    mm, remote = local.local(data), local.remote(started["mmap"])
    inv = pydoca.BufferInventory(4)
    src, dst = inv.buffer(mm), inv.buffer(remote, empty=True)
    return data, inv, local.rdma.write(conn, src, dst), src, dst


def test_an_inventory_closed_under_a_task_finishes_it_first(local: Local, peer: PeerProc) -> None:
    """Closing the inventory (a with-block's end) while a write uses its Buffers: the task is finished
    first, through the maps of the Buffers still open, and the inventory is destroyed."""
    data, inv, task, src, dst = _write_from_own_inventory(local, peer, seed=13)
    src.close()                                              # one closed by hand, one left to the inventory
    inv.close()
    assert inv.closed and dst.closed and task.status == pydoca.TaskStatus.SUCCEEDED
    assert peer.call("digest")["sha"] == hashlib.sha256(bytes(data)).hexdigest()


def test_an_inventory_closed_under_tasks_it_cannot_see_says_why(local: Local, peer: PeerProc) -> None:
    """Every Buffer closed by hand, the inventory then closed with their task in flight: a typed error that
    names the cause and the fix; the task still moves the right bytes."""
    data, inv, task, src, dst = _write_from_own_inventory(local, peer, seed=14)
    src.close()
    dst.close()
    with pytest.raises(pydoca.errors.InUseError, match="let those tasks complete"):
        inv.close()
    assert not inv.closed                                    # still open: closed once its elements came back
    task.result(10)
    assert peer.call("digest")["sha"] == hashlib.sha256(bytes(data)).hexdigest()
    assert inv.num_free == inv.capacity
    inv.close()
    assert inv.closed


def test_an_atomic_whose_result_buffer_was_closed_still_completes(local: Local, peer: PeerProc) -> None:
    """The previous value is read through the descriptor the task holds, not through the closed Buffer."""
    conn, started = connect(local, peer, "oob", fill=0)
    remote = local.remote(started["mmap"])
    room = bytearray(8)
    res = local.inv.buffer(local.local(room), empty=True)
    task = local.rdma.fetch_add(conn, local.inv.buffer(remote, length=8), res, add=5)
    res.close()
    assert task.result(10) == 0
    assert local.rdma.fetch_add(conn, local.inv.buffer(remote, length=8),
                                local.inv.buffer(local.local(bytearray(8)), empty=True), add=1).result(10) == 5
