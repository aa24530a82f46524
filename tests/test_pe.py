"""ProgressEngine and Context lifecycle on the software backend."""
from __future__ import annotations

import select
import time

import pytest

import pydoca
from pydoca import errors as E


def test_idle_engine_fd_is_not_readable_and_wait_is_bounded() -> None:
    with pydoca.ProgressEngine() as pe:
        pe.request_notification()
        ready, _, _ = select.select([pe.fileno()], [], [], 0.05)
        assert not ready
        assert pe.progress() is False
        t0 = time.monotonic()
        assert pe.wait(0.2) is False
        assert 0.15 < time.monotonic() - t0 < 2
        assert pe.num_inflight == 0


def test_polling_mode_wait_is_bounded() -> None:
    with pydoca.ProgressEngine(mode="polling") as pe:
        assert pe.mode is pydoca.ProgressMode.POLLING
        t0 = time.monotonic()
        assert pe.wait(0.1) is False
        assert time.monotonic() - t0 < 2


def test_state_changes_reach_the_fd_and_callbacks_only_inside_progress() -> None:
    with pydoca.Device.open(iface="lo") as dev, pydoca.ProgressEngine() as pe:
        rdma = pydoca.Rdma(dev, pe, start=False)
        seen: list[tuple[pydoca.CtxState, pydoca.CtxState]] = []
        rdma.on_state = lambda a, b: seen.append((a, b))
        rdma.start()
        assert (pydoca.CtxState.STARTING, pydoca.CtxState.RUNNING) in seen
        assert rdma.state is pydoca.CtxState.RUNNING
        # stop: nothing delivered until the engine progresses, then IDLE and the fd fired
        from pydoca._native import lib
        seen.clear()
        rc = lib.doca_ctx_stop(rdma._ctx)
        assert rc in (0, E.InProgressError.code)
        assert seen == []
        pe.request_notification()
        ready, _, _ = select.select([pe.fileno()], [], [], 5)
        assert ready
        pe.clear_notification()
        pe.run_until(lambda: rdma.state is pydoca.CtxState.IDLE, 5)
        pe.progress_all()
        assert seen[-1] == (pydoca.CtxState.STOPPING, pydoca.CtxState.IDLE)
        rdma.close()


def test_close_order_and_idempotence() -> None:
    dev = pydoca.Device.open(iface="lo")
    pe = pydoca.ProgressEngine()
    rdma = pydoca.Rdma(dev, pe)
    mm = pydoca.MemoryMap(dev, bytearray(4096), access=pydoca.Access.LOCAL_READ_WRITE)
    inv = pydoca.BufferInventory(4)
    buf = inv.buffer(mm)
    pe.close()                       # closes the Rdma context first (stopped, then destroyed)
    assert rdma.closed and pe.closed
    dev.close()                      # closes the mmap, whose buffer goes first
    assert mm.closed and buf.closed
    inv.close()
    for obj in (pe, dev, mm, inv, buf, rdma):
        obj.close()                  # idempotent
    with pytest.raises(E.ClosedError):
        pe.progress()
    with pytest.raises(E.ClosedError):
        rdma.export()


def test_memory_under_an_inflight_task_flushes_it_first_and_contexts_close_first() -> None:
    dev = pydoca.Device.open(iface="lo")
    pe = pydoca.ProgressEngine()
    rdma = pydoca.Rdma(dev, pe)
    mm = pydoca.MemoryMap(dev, bytearray(4096), access=pydoca.Access.LOCAL_READ_WRITE)  # created after rdma
    inv = pydoca.BufferInventory(4)
    task = rdma.receive(inv.buffer(mm, empty=True))
    t0 = time.monotonic()
    mm.close(timeout=0.2)   # the receive never completes: after 0.2 s its context is stopped, flushing it
    assert time.monotonic() - t0 < 0.2 + 2.0
    assert task.done and isinstance(task.error, E.DocaError)
    assert mm.closed and rdma.state is pydoca.CtxState.IDLE
    # and closing an owner closes its contexts before its memory
    mm2 = pydoca.MemoryMap(dev, bytearray(4096), access=pydoca.Access.LOCAL_READ_WRITE)
    rdma.start()
    task2 = rdma.receive(inv.buffer(mm2, empty=True))
    dev.close()      # the Rdma context goes first: its stop fails the receive, then the memory is released
    assert task2.done and isinstance(task2.error, E.DocaError)
    assert rdma.closed and mm2.closed
    inv.close()
    pe.close()
