"""pydoca.SyncEvent / RemoteSyncEvent and the Rdma remote-net sync-event tasks.

Local value operations and waits (blocking and awaitable, every one with a
timeout), lifecycle, the three RDMA tasks between two contexts of this process,
refusals with their DOCA codes, and two processes: A exports a sync event and
its Rdma connection, B imports both and drives notify_set / notify_add / get
while A's waits observe the values (SOFTDOCA_TRANSPORT=tcp and shm on B).
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import select
import shutil
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Dict, Iterator, Tuple

import pytest

import pydoca
from pydoca import Access
from pydoca._native import backend, lib
from pydoca.errors import BadStateError, ClosedError, InUseError, InvalidValueError, NotPermittedError
from pydoca.perftest.session import _soft_transport_of
from pydoca.sync_event import MASK_ALL

pytestmark = pytest.mark.timeout(120)

HERE = Path(__file__).resolve().parent
ALL = Access.LOCAL_READ_WRITE | Access.RDMA_WRITE | Access.RDMA_READ | Access.RDMA_ATOMIC
soft_only = pytest.mark.skipif(backend.name != "soft", reason="softdoca behaviour")


def _later(seconds: float, fn: Any, *args: Any) -> threading.Thread:
    th = threading.Thread(target=lambda: (time.sleep(seconds), fn(*args)), daemon=True)
    th.start()
    return th


# -- local ---------------------------------------------------------------------

def test_value_operations(dev: pydoca.Device) -> None:
    with pydoca.SyncEvent(dev, value=5) as ev:
        assert ev.get() == 5 and ev.value == 5
        ev.set(41)
        assert ev.add(1) == 41 and ev.get() == 42
        assert ev.add(MASK_ALL) == 42 and ev.get() == 41          # wraps at 2**64
        with pytest.raises(ValueError):
            ev.set(-1)
        with pytest.raises(ValueError):
            ev.add(1 << 64)
        assert "value=41" in repr(ev)


def test_waits_return_the_value_and_time_out(dev: pydoca.Device) -> None:
    with pydoca.SyncEvent(dev) as ev:
        ev.set(0x1234)
        assert ev.wait_gt(0x1233, timeout=1) == 0x1234
        assert ev.wait_eq(0x34, mask=0xFF, timeout=1) == 0x1234
        assert ev.wait_neq(0x1235, timeout=1) == 0x1234
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="> 4660"):
            ev.wait_gt(0x1234, timeout=0.2)
        assert 0.2 <= time.monotonic() - t0 < 2
        with pytest.raises(TimeoutError):
            ev.wait_eq(0x35, mask=0xFF, timeout=0.05)
        # another thread changes it
        th = _later(0.05, ev.set, 7000)
        t0 = time.monotonic()
        assert ev.wait_gt(6999, timeout=10) == 7000
        assert time.monotonic() - t0 >= 0.04
        th.join(5)
        th = _later(0.05, ev.add, 1)
        assert ev.wait_neq(7000, timeout=10) == 7001
        th.join(5)
        with pytest.raises(ValueError):
            ev.wait_gt(-1, timeout=0)


def test_awaitable_waits_leave_the_loop_running(dev: pydoca.Device) -> None:
    async def main(ev: pydoca.SyncEvent) -> Tuple[int, int, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.005)

        tick = asyncio.ensure_future(ticker())
        loop = asyncio.get_running_loop()
        loop.call_later(0.1, ev.set, 10)
        got = await ev.await_gt(9, timeout=10)
        loop.call_later(0.02, ev.add, 5)
        got2 = await ev.wait_eq_async(15, timeout=10)
        with pytest.raises(TimeoutError):
            await ev.await_neq(15, timeout=0.05)
        tick.cancel()
        return got, got2, ticks

    with pydoca.SyncEvent(dev) as ev:
        got, got2, ticks = asyncio.run(main(ev))
        assert (got, got2) == (10, 15)
        assert ticks >= 3             # the loop ran other coroutines during the waits


def test_lifecycle(dev: pydoca.Device) -> None:
    ev = pydoca.SyncEvent(dev)
    ev.close()
    ev.close()                                            # idempotent
    assert ev.closed
    with pytest.raises(ClosedError):
        ev.get()
    with pydoca.Device.open(iface="lo") as d2:
        ev2 = pydoca.SyncEvent(d2, remote_net=True)
    assert ev2.closed                                     # closed with its device
    with pydoca.SyncEvent(dev) as ev3:
        with pytest.raises(BadStateError, match="remote_net=True"):
            ev3.export_to_remote_net()
    with pytest.raises(TypeError):
        pydoca.RemoteSyncEvent()


def test_remote_import_is_strict(dev: pydoca.Device) -> None:
    with pydoca.SyncEvent(dev, remote_net=True) as ev:
        blob = ev.export_to_remote_net()
        assert ev.export_to_remote_net() == blob
        if backend.name == "soft":
            assert len(blob) == 94 and blob[:4] == b"SDSE"
        with pytest.raises(ValueError):
            pydoca.RemoteSyncEvent.from_export(dev, b"")
        with pytest.raises(InvalidValueError):
            pydoca.RemoteSyncEvent.from_export(dev, blob[:-1])
        bad = bytearray(blob)
        bad[30] ^= 1
        with pytest.raises(InvalidValueError):
            pydoca.RemoteSyncEvent.from_export(dev, bytes(bad))
        with pydoca.RemoteSyncEvent.from_export(dev, blob) as rev:
            assert rev.handle is not None


@soft_only
def test_hardware_only_functions_answer_not_supported(dev: pydoca.Device) -> None:
    devinfo = lib.doca_dev_as_devinfo(dev.handle)
    with pydoca.SyncEvent(dev) as ev:
        assert lib.doca_sync_event_add_publisher_location_remote_pci(ev.handle) == 4
        assert lib.doca_sync_event_add_subscriber_location_remote_pci(ev.handle) == 4
    for cap, want in (("is_export_to_remote_net_supported", 0), ("remote_net_is_create_from_export_supported", 0),
                      ("task_wait_eq_is_supported", 0), ("is_export_to_remote_pci_supported", 4),
                      ("is_create_from_export_supported", 4), ("is_export_to_dpa_supported", 4),
                      ("is_export_to_gpu_supported", 4), ("remote_net_is_export_to_dpa_supported", 4),
                      ("remote_net_is_export_to_gpu_supported", 4)):
        assert getattr(lib, f"doca_sync_event_cap_{cap}")(devinfo) == want, cap
    for kind in ("get", "notify_set", "notify_add"):
        assert getattr(lib, f"doca_rdma_cap_task_remote_net_sync_event_{kind}_is_supported")(devinfo) == 0


# -- RDMA, one process --------------------------------------------------------------

@pytest.fixture
def pair(dev: pydoca.Device) -> Iterator[Dict[str, Any]]:
    """A (exporter, every remote permission) and B (requester), connected out of band."""
    with ExitStack() as s:
        pe = s.enter_context(pydoca.ProgressEngine())
        a = s.enter_context(pydoca.Rdma(dev, pe, permissions=ALL))
        b = s.enter_context(pydoca.Rdma(dev, pe))
        ba, ca = a.export()
        bb, cb = b.export()
        a.connect(bb, ca)
        b.connect(ba, cb)
        ca.wait_established(10)
        cb.wait_established(10)
        inv = s.enter_context(pydoca.BufferInventory(16))
        mem = bytearray(64)
        mm = s.enter_context(pydoca.MemoryMap(dev, mem))
        yield {"pe": pe, "a": a, "b": b, "ca": ca, "cb": cb, "inv": inv, "mm": mm, "mem": mem}


def test_rdma_tasks_in_process(dev: pydoca.Device, pair: Dict[str, Any]) -> None:
    b, cb, inv, mm, mem = pair["b"], pair["cb"], pair["inv"], pair["mm"], pair["mem"]
    with pydoca.SyncEvent(dev, remote_net=True, value=3) as ev, \
            pydoca.RemoteSyncEvent.from_export(dev, ev.export_to_remote_net()) as rev:
        src = inv.buffer(mm, offset=0, length=8)
        src.memoryview()[:] = (0xD0CA).to_bytes(8, "little")
        assert b.sync_event_notify_set(cb, rev, src).result(10) is None
        assert ev.wait_eq(0xD0CA, timeout=5) == 0xD0CA
        res = inv.buffer(mm, offset=8, length=8, empty=True)
        assert b.sync_event_notify_add(cb, rev, res, add=6).result(10) == 0xD0CA
        assert int.from_bytes(mem[8:16], "little") == 0xD0CA and res.data_len == 8
        assert ev.get() == 0xD0CA + 6
        ev.set(99)
        dst = inv.buffer(mm, offset=16, length=8, empty=True)
        assert b.sync_event_get(cb, rev, dst).result(10) == 99
        assert int.from_bytes(mem[16:24], "little") == 99
        small = inv.buffer(mm, offset=32, length=4, empty=True)
        with pytest.raises(InvalidValueError):
            b.sync_event_get(cb, rev, small)          # no room for the 8-byte value
        with pytest.raises(ValueError):
            b.sync_event_notify_add(cb, rev, res, add=-1)

        async def both() -> int:
            t = b.sync_event_notify_add(cb, rev, inv.buffer(mm, offset=40, length=8, empty=True), add=1)
            got = await ev.await_eq(100, timeout=10)
            assert await t == 99
            return got

        assert asyncio.run(both()) == 100
        for x in (src, res, dst, small):
            x.close()


def test_notify_add_needs_rdma_atomic_on_the_target(dev: pydoca.Device) -> None:
    with ExitStack() as s:
        pe = s.enter_context(pydoca.ProgressEngine())
        a = s.enter_context(pydoca.Rdma(dev, pe))                # default: no RDMA_ATOMIC
        b = s.enter_context(pydoca.Rdma(dev, pe))
        ba, ca = a.export()
        bb, cb = b.export()
        a.connect(bb, ca)
        b.connect(ba, cb)
        cb.wait_established(10)
        ca.wait_established(10)
        inv = s.enter_context(pydoca.BufferInventory(4))
        mm = s.enter_context(pydoca.MemoryMap(dev, bytearray(16)))
        ev = s.enter_context(pydoca.SyncEvent(dev, remote_net=True, value=1))
        rev = s.enter_context(pydoca.RemoteSyncEvent.from_export(dev, ev.export_to_remote_net()))
        task = b.sync_event_notify_add(cb, rev, inv.buffer(mm, length=8, empty=True), add=1)
        with pytest.raises(NotPermittedError, match="RDMA_ATOMIC" if backend.name == "soft" else ""):
            task.result(10)
        assert ev.get() == 1


def test_stopped_event_is_refused_and_remote_handle_in_use(dev: pydoca.Device, pair: Dict[str, Any]) -> None:
    b, cb, inv, mm = pair["b"], pair["cb"], pair["inv"], pair["mm"]
    ev = pydoca.SyncEvent(dev, remote_net=True, value=8)
    rev = pydoca.RemoteSyncEvent.from_export(dev, ev.export_to_remote_net())
    dst = inv.buffer(mm, length=8, empty=True)
    assert b.sync_event_get(cb, rev, dst).result(10) == 8
    if backend.name == "soft":                          # an allocated task names the event: IN_USE
        from pydoca._native import ffi
        out = ffi.new("struct doca_rdma_task_remote_net_sync_event_get **")
        data = ffi.new("union doca_data *")
        assert lib.doca_rdma_task_remote_net_sync_event_get_allocate_init(
            b._rdma, cb.handle, rev.handle, dst.handle, data[0], out) == 0
        assert lib.doca_sync_event_remote_net_destroy(rev.handle) == InUseError.code
        lib.doca_task_free(lib.doca_rdma_task_remote_net_sync_event_get_as_task(out[0]))
    ev.close()                                          # stops it: the registration is revoked
    dst.reset()
    with pytest.raises(NotPermittedError):
        b.sync_event_get(cb, rev, dst).result(10)
    rev.close()
    dst.close()


# -- two processes ------------------------------------------------------------------

class _PeerB:
    def __init__(self, transport: str) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1", SOFTDOCA_TRANSPORT=transport)
        self.proc = subprocess.Popen([sys.executable, str(HERE / "sync_event_peer.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)

    def post(self, op: str, **kw: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()

    def answer(self, timeout: float = 30.0) -> Dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"process B did not answer within {timeout}s")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("process B exited: " + (self.proc.stderr.read() if self.proc.stderr else "")[-2000:])
        out: Dict[str, Any] = json.loads(line)
        return out

    def call(self, op: str, **kw: Any) -> Dict[str, Any]:
        self.post(op, **kw)
        out = self.answer()
        assert out.pop("ok"), out
        return out

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.post("exit")
                self.proc.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_two_processes(dev: pydoca.Device, transport: str) -> None:
    if backend.name != "soft" and transport == "shm":
        pytest.skip("softdoca transport")
    peer = _PeerB(transport)
    try:
        with ExitStack() as s:
            pe = s.enter_context(pydoca.ProgressEngine())
            rdma = s.enter_context(pydoca.Rdma(dev, pe, permissions=ALL))
            ev = s.enter_context(pydoca.SyncEvent(dev, remote_net=True))
            blob, conn = rdma.export()
            started = peer.call("start", conn=base64.b64encode(blob).decode(),
                                event=base64.b64encode(ev.export_to_remote_net()).decode())
            rdma.connect(base64.b64decode(started["conn"]), conn)
            conn.wait_established(10)
            info = peer.call("established")
            if backend.name == "soft":   # A itself forced to tcp (SOFTDOCA_TRANSPORT): nothing to share
                want = "tcp" if os.environ.get("SOFTDOCA_TRANSPORT") == "tcp" else transport
                assert info["transport"] == want
                assert _soft_transport_of(conn) == want
            # B sets while A waits (A's engine serves it; A never calls into DOCA for it)
            peer.post("set", value=100)
            assert ev.wait_gt(99, timeout=10) == 100
            assert peer.answer()["ok"]
            # B adds: the old value comes back, A sees the sum
            peer.post("add", value=5)
            assert ev.wait_eq(105, timeout=10) == 105
            assert peer.answer() == {"ok": True, "old": 100}
            # A sets locally, B reads it
            ev.set(777)
            assert peer.call("get") == {"value": 777}
            # awaitable wait in A while B adds
            peer.post("add", value=1)
            assert asyncio.run(ev.await_gt(777, timeout=10)) == 778
            assert peer.answer() == {"ok": True, "old": 777}
            # A stops the event: B's next get is refused (and its connection breaks)
            ev.close()
            peer.post("get")
            refused = peer.answer()
            assert refused["ok"] is False and refused["code"] == NotPermittedError.code, refused
    finally:
        peer.close()
    assert peer.proc.returncode == 0


# -- the C runtime headers ------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc needed")
@soft_only
def test_runtime_headers_build_a_c_program(tmp_path: Path) -> None:
    from pydoca.cli import softdoca as sd_cli
    p = sd_cli.paths()
    src = tmp_path / "se.c"
    src.write_text(r'''
#include <stdio.h>
#include <doca_buf_pool.h>
#include <doca_dev.h>
#include <doca_mmap.h>
#include <doca_rdma.h>
#include <doca_sync_event.h>
int main(void)
{
	struct doca_sync_event *se = NULL;
	uint64_t fetched = 0, v = 0;
	if (doca_sync_event_create(&se) || doca_sync_event_start(se) || doca_sync_event_update_set(se, 40) ||
	    doca_sync_event_update_add(se, 2, &fetched) || doca_sync_event_get(se, &v) ||
	    doca_sync_event_wait_eq(se, 42, UINT64_MAX) || doca_sync_event_stop(se) || doca_sync_event_destroy(se))
		return 1;
	struct doca_buf_pool *pool = NULL;
	if (doca_buf_pool_create(4, 64, NULL, &pool) != DOCA_ERROR_INVALID_VALUE)
		return 2;
	printf("%llu %llu\n", (unsigned long long)fetched, (unsigned long long)v);
	return 0;
}
''')
    exe = tmp_path / "se"
    build = subprocess.run(["gcc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-DDOCA_ALLOW_EXPERIMENTAL_API",
                            "-I", p["includedir"], str(src), "-o", str(exe), "-L", p["libdir"],
                            "-Wl,-rpath," + p["libdir"], "-ldoca_common"], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0 and run.stdout.split() == ["40", "42"], run.stdout + run.stderr
