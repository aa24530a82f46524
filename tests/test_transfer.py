"""pydoca.transfer across processes: segments, batches, per-request status, 2 and 8 peers, etcd, restarts."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator, List

import numpy as np
import pytest
from transfer_util import Etcd, Target, wait_until

from pydoca.transfer import (EmbeddedStore, Request, SegmentNotFound, StaleSegment, State, TransferEngine,
                             TransferError)
from pydoca.transfer.bench import pattern

pytestmark = pytest.mark.timeout(240)
MiB = 1 << 20
HEAVY = os.environ.get("PYDOCA_HEAVY") == "1"


@pytest.fixture
def engine() -> Iterator[TransferEngine]:
    with TransferEngine("127.0.0.1:0", slice_size=256 << 10) as te:
        yield te


def test_write_read_and_status(engine: TransferEngine) -> None:
    target = Target("seg:16MiB:pattern", "ro:1MiB")
    try:
        remote = engine.open_segment(f"{target.address}/seg")
        assert remote.length == 16 * MiB and not remote.readonly
        src = np.random.default_rng(1).integers(0, 256, 8 * MiB, dtype=np.uint8)
        engine.register("src", src)
        batch = engine.submit([Request("write", "src", remote, MiB, local_offset=i * MiB, remote_offset=i * MiB)
                               for i in range(8)])
        batch.result(30)
        assert [s.state for s in batch.status()] == [State.DONE] * 8
        assert all(s.transferred == MiB for s in batch.status())
        back = np.zeros(16 * MiB, dtype=np.uint8)
        engine.transfer([Request("read", back, remote, 16 * MiB)])
        assert np.array_equal(back[:8 * MiB], src) and np.array_equal(back[8 * MiB:], pattern(16 * MiB)[8 * MiB:])
        bad = engine.submit([Request("write", "src", remote, MiB, remote_offset=16 * MiB - 10),   # past the end
                             Request("write", "nope", remote, 10),                               # no such local
                             Request("read", back, remote, 100)])                                # fine
        bad.wait(30)
        states = [s.state for s in bad.status()]
        assert states == [State.FAILED, State.FAILED, State.DONE], bad.status()
        assert "do not fit" in (bad.status()[0].error or "") and "no local segment" in (bad.status()[1].error or "")
        with pytest.raises(TransferError, match="2 of 3 requests failed"):
            bad.result(1)
        with pytest.raises(SegmentNotFound):
            engine.open_segment(f"{target.address}/missing")
        with pytest.raises(SegmentNotFound):
            engine.open_segment("nowhere-published")
    finally:
        target.kill()


class DLPackOnly:
    """An object with only the DLPack protocol (as a CPU torch tensor presents itself)."""

    def __init__(self, arr: np.ndarray) -> None:
        self._arr = arr

    def __dlpack__(self, stream: object = None) -> object:
        return self._arr.__dlpack__()

    def __dlpack_device__(self) -> tuple:
        return self._arr.__dlpack_device__()


def test_dlpack_and_readonly(engine: TransferEngine) -> None:
    arr = np.zeros(MiB, dtype=np.float32)
    seg = engine.register("dl", DLPackOnly(arr))
    assert seg.length == 4 * MiB
    target = Target("data:4MiB:pattern")
    try:
        remote = engine.open_segment(f"{target.address}/data")
        engine.transfer([Request("read", "dl", remote, 4 * MiB)])
        assert arr.view(np.uint8).tobytes() == pattern(4 * MiB).tobytes()       # landed in the array, zero-copy
    finally:
        target.kill()
    engine.register("const", b"read only bytes")
    with TransferEngine("127.0.0.1:0") as other:
        ro = other.open_segment(f"{engine.address}/const")
        assert ro.readonly
        with pytest.raises(TransferError, match="read-only"):
            other.submit([Request("write", b"x" * 15, ro, 15)]).result(5)
        out = bytearray(15)
        other.transfer([Request("read", out, ro, 15)])
        assert bytes(out) == b"read only bytes"


def test_eight_peers_one_batch(engine: TransferEngine) -> None:
    targets: List[Target] = []
    try:
        for _ in range(8):                 # one by one: a target that fails to start leaves the others killed
            targets.append(Target(f"s:{2 * MiB}"))
        src = np.random.default_rng(8).integers(0, 256, 2 * MiB, dtype=np.uint8)
        engine.register("src", src)
        remotes = [engine.open_segment(f"{t.address}/s") for t in targets]
        engine.transfer([Request("write", "src", r, 2 * MiB) for r in remotes])
        for r in remotes:
            back = np.zeros(2 * MiB, dtype=np.uint8)
            engine.transfer([Request("read", back, r, 2 * MiB)])
            assert np.array_equal(back, src)
    finally:
        for t in targets:
            t.kill()


def test_peer_restart_mid_batch(engine: TransferEngine, reliability_report: Any) -> None:
    from rdma_util import free_port
    port = free_port()
    target = Target("seg:64MiB", port=port)
    try:
        remote = engine.open_segment(f"{target.address}/seg")
        big = np.ones(64 * MiB, dtype=np.uint8)
        engine.register("big", big)
        batch = engine.submit([Request("write", "big", remote, 8 * MiB, local_offset=i * 8 * MiB,
                                       remote_offset=i * 8 * MiB) for i in range(8)])
        target.kill()                                             # the peer dies with the batch in flight
        t0 = time.monotonic()
        batch.wait(30)
        assert time.monotonic() - t0 < 10
        assert any(s.state is State.FAILED for s in batch.status()) or all(
            s.state is State.DONE for s in batch.status())        # (it may have finished before the kill)
        target = Target("seg:64MiB", port=port)                   # restarted at the same address
        t1 = time.monotonic()
        with pytest.raises(StaleSegment):
            engine.submit([Request("write", "big", remote, MiB)]).result(10)
        fresh = engine.open_segment(f"{target.address}/seg")
        engine.transfer([Request("write", "big", fresh, MiB)])
        resumed = time.monotonic() - t1
        assert resumed < 5, "transfers did not resume promptly after the restart"
        reliability_report.add("transfer: peer restart mid-batch", trials=1, passed=1, failed=0,
                               failed_within_s=round(t1 - t0, 3), resumed_s=round(resumed, 3))
        back = np.zeros(MiB, dtype=np.uint8)
        engine.transfer([Request("read", back, fresh, MiB)])
        assert back.all()
    finally:
        target.kill()


def test_directory_store_one_host(tmp_path: object) -> None:
    store = f"dir:{tmp_path}"
    target = Target("shared:1MiB:pattern", metadata=store)
    try:
        with TransferEngine("127.0.0.1:0", metadata=store) as te:
            assert any(k.endswith("/shared") for k in te.list_segments())
            got = bytearray(MiB)
            te.transfer([Request("read", got, te.open_segment("shared"), MiB)])
            assert bytes(got) == pattern(MiB).tobytes()
        target.kill()                                             # its entries go with its pid
        assert not EmbeddedStore(str(tmp_path)).list("/pydoca/segments/")
    finally:
        target.kill()


@pytest.fixture(scope="module")
def etcd() -> Iterator[Etcd]:
    try:
        server = Etcd()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    yield server
    server.stop()


def test_etcd_publish_lookup_and_lease(etcd: Etcd) -> None:
    store = f"etcd://{etcd.endpoint}?ttl=2"
    n_segments = 1000 if HEAVY else 200
    peers = [Target(*[f"p{p}s{i}:4KiB" for i in range(n_segments // 4)], metadata=store) for p in range(4)]
    try:
        with TransferEngine("127.0.0.1:0", metadata=store) as te:
            assert wait_until(lambda: len(te.list_segments()) == n_segments, 20), len(te.list_segments())
        names = [f"p{p}s{i}" for p in range(4) for i in range(n_segments // 4)]
        failed: List[str] = []

        def opener(k: int) -> None:                              # 8 peers, each opens its share by name
            with TransferEngine("127.0.0.1:0", metadata=store) as te:
                for name in names[k::8][:None if HEAVY else 12]:
                    try:
                        seg = te.open_segment(name)
                        te.transfer([Request("write", name.encode().ljust(16), seg, 16)])
                    except TransferError as exc:
                        failed.append(f"{name}: {exc}")
        threads = [threading.Thread(target=opener, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not failed, failed[:3]
        peers[0].kill()                                           # crashed: its lease expires
        with TransferEngine("127.0.0.1:0", metadata=store) as te:
            assert wait_until(lambda: not any(k.rpartition("/")[2].startswith("p0s") for k in te.list_segments()),
                              10), "a crashed peer's segments are still published"
            assert any(k.rpartition("/")[2].startswith("p1s") for k in te.list_segments())
    finally:
        for t in peers:
            t.kill()


def test_topology_choice() -> None:
    import pydoca
    from pydoca.transfer.topology import choose_device, device_numa, memory_numa
    arr = np.ones(1 << 16, dtype=np.uint8)
    node = memory_numa(arr.ctypes.data)
    assert node >= 0 or node == -1
    devs = pydoca.devices()
    lo = next(d for d in devs if d.iface_name == "lo")
    assert device_numa(lo) == -1                                      # loopback has no NUMA node
    assert choose_device(devs, matrix={"*": ["lo"]}) is lo            # the matrix overrides
    with TransferEngine("0.0.0.0:0", topology={f"numa:{node}": ["lo"], "*": ["lo"]}) as te:
        assert te.dev.info.iface_name == "lo" and te.address.startswith("127.0.0.1:")


def test_async_batches(engine: TransferEngine) -> None:
    import asyncio
    target = Target("seg:8MiB:pattern")
    try:
        remote = engine.open_segment(f"{target.address}/seg")
        outs = [bytearray(MiB) for _ in range(8)]

        async def main() -> None:
            batches = [engine.submit([Request("read", outs[i], remote, MiB, remote_offset=i * MiB)]) for i in range(8)]
            await asyncio.wait_for(asyncio.gather(*batches), 20)
        asyncio.run(main())
        assert b"".join(outs) == pattern(8 * MiB).tobytes()
    finally:
        target.kill()


def test_small_transfers_use_the_staging_pool(engine: TransferEngine) -> None:
    target = Target("seg:1MiB:pattern")
    try:
        remote = engine.open_segment(f"{target.address}/seg")
        free0 = len(engine._stage_free)
        outs = [bytearray(1000) for _ in range(40)]
        batch = engine.submit([Request("read", outs[i], remote, 1000, remote_offset=i * 1000) for i in range(40)])
        assert len(engine._stage_free) == free0 - 40                   # staged, not registered per request
        batch.result(10)
        assert len(engine._stage_free) == free0
        assert b"".join(outs) == pattern(1 << 20).tobytes()[:40_000]
        engine.transfer([Request("write", bytes([7]) * 500, remote, 500, remote_offset=100)])
        back = bytearray(600)
        engine.transfer([Request("read", back, remote, 600)])
        assert back[100:600] == bytes([7]) * 500 and back[:100] == pattern(100).tobytes()
    finally:
        target.kill()


MULTI_CLIENT = r"""
import sys, numpy as np
from pydoca.transfer import Request, TransferEngine
listen, extra, target = sys.argv[1:4]
with TransferEngine(listen, devices=[extra], connections_per_peer=4, slice_size=256 << 10) as te:
    src = np.random.default_rng(5).integers(0, 256, 8 << 20, dtype=np.uint8)
    te.register("src", src)
    seg = te.open_segment(target)
    te.transfer([Request("write", "src", seg, 1 << 20, local_offset=i << 20, remote_offset=i << 20) for i in range(8)])
    back = np.zeros(8 << 20, dtype=np.uint8)
    te.transfer([Request("read", back, seg, 8 << 20)])
    assert np.array_equal(back, src), "bytes differ"
    print("routes", sorted(te.stats.items()), flush=True)
"""


def test_slices_spread_over_devices() -> None:
    """Two veth pairs between two namespaces: the engines serve and connect on both; slices use both."""
    from netns import ip, ns_exec, veth_namespaces, wait_running
    with veth_namespaces("10.200.91") as pair:
        va2, vb2 = pair.va + "x", pair.vb + "x"
        ip("link", "add", va2, "netns", pair.a, "type", "veth", "peer", "name", vb2, "netns", pair.b)
        for ns, dev, addr in ((pair.a, va2, "10.200.92.1"), (pair.b, vb2, "10.200.92.2")):
            ip("-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
        wait_running((pair.a, va2), (pair.b, vb2))
        port = free_port_any()
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        target = subprocess.Popen([*ns_exec(pair.b), sys.executable, "-m", "pydoca.cli", "transfer", "serve",
                                   "--listen", f"{pair.ip_b}:{port}", "--device", vb2, "--register", "seg:8MiB"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            assert target.stdout is not None
            line = target.stdout.readline()
            assert "10.200.92.2" in line, line + (target.stderr.read() if target.stderr else "")
            out = subprocess.run([*ns_exec(pair.a), sys.executable, "-c", MULTI_CLIENT, f"{pair.ip_a}:0", va2,
                                  f"{pair.ip_b}:{port}/seg"], capture_output=True, text=True, timeout=120, env=env)
            assert out.returncode == 0, out.stderr[-3000:]
            routes = eval(out.stdout.split("routes", 1)[1])                 # [((local, path), slices), ...]
            assert {r for r, n in routes if n > 0} >= {(0, 0), (1, 1)}, routes
        finally:
            target.kill()
            target.communicate(timeout=10)


def free_port_any() -> int:
    from rdma_util import free_port
    return free_port()
