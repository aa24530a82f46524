"""pydoca.peer across processes: every kind in both connection modes, errors,
malformed control messages, requesters that die or hang, descriptor files."""
from __future__ import annotations

import asyncio
import json
import os
import stat
import struct
import time
import zlib
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from peer_handlers import framed, pattern
from peer_raw import RawClient, status_of, wait_until
from peer_util import SPEC, Proc, Server, write_spec

from pydoca.descriptor import DescriptorError, write_descriptor
import pydoca
from pydoca.peer import (Busy, Disconnected, HandlerError, NotFound, PeerTimeout, Rejected, Requester,
                         Responder, StaleDescriptor, TooLarge)
from pydoca.peer import protocol as P
from pydoca.peer.files import KIND, read_responder_file

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("peer")
    srv = Server(write_spec(d), "--call-timeout", "3", descriptor=d / "svc.desc")
    yield srv
    assert srv.terminate() == 0, srv.stderr[-3000:]
    assert "event failed" not in srv.stderr and "Traceback" not in srv.stderr, srv.stderr[-3000:]
    assert not (d / "svc.desc").exists(), "the responder removes its descriptor file on exit"


@pytest.fixture(params=["cm", "file"])
def target(request: pytest.FixtureRequest, server: Server) -> str:
    return server.address if request.param == "cm" else str(server.descriptor)


def test_every_kind(target: str) -> None:
    with Requester.open(target, name=f"kinds-{len(target)}") as req:
        name = req.name
        eps = {e.path: (e.kind, e.size) for e in req.endpoints()}
        assert eps["/store"] == ("write", 4 << 20) and eps["/pattern"] == ("read", 1 << 20)
        assert eps["/echo"] == ("call", 256 << 10) and req.service == "testsvc"
        assert req.identity.startswith(name + "#")
        for size in (10, 60_000, 3 << 20):                      # staged and registered in place
            body = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
            req.write("/store", framed(body))
            assert req.call("/lastcrc") == str(zlib.crc32(body)).encode()
        req.write("/plain", b"abc", offset=100)
        for n, length in enumerate((1, 4096, 70_000), start=1):
            assert req.read("/pattern", length) == pattern(name, n, length)
        into = np.zeros(200_000, dtype=np.uint8)                 # zero-copy into a numpy array
        assert req.read("/pattern", into=into) == 200_000
        assert into.tobytes() == pattern(name, 4, 200_000)
        part = bytearray(16)
        assert req.read("/pattern", 8, into=part) == 8 and bytes(part[:8]) == pattern(name, 5, 8)
        assert req.read("/blob", 64, offset=1000) == bytes(64)
        for size in (0, 64, 8000, 9000, 200_000):               # inline, staged, result in buffer
            payload = os.urandom(size)
            assert req.call("/echo", payload) == payload
            assert req.call("/reverse", payload[:60_000]) == payload[:60_000][::-1]
        assert req.call("/echo", "text") == b"text"


def test_async(target: str) -> None:
    async def main(req: Requester) -> None:
        payloads = [os.urandom(n) for n in (5, 9000, 50_000, 100, 20_000, 1, 7000, 30_000)]
        got = await asyncio.gather(*(req.acall("/echo", p) for p in payloads))
        assert got == payloads
        await asyncio.gather(*(req.awrite("/store", framed(p)) for p in payloads))
        assert await req.aread("/blob", 10) == bytes(10)
        into = np.zeros(1000, dtype=np.uint8)
        assert await req.aread("/blob", into=into) == 1000
        with pytest.raises(HandlerError):
            await req.acall("/fail", b"x")
    with Requester.open(target, window=3) as req:
        asyncio.run(main(req))


def test_typed_errors(target: str) -> None:
    with Requester.open(target) as req:
        with pytest.raises(NotFound):
            req.write("/nope", b"x")
        with pytest.raises(Rejected):
            req.read("/store")
        with pytest.raises(TooLarge):
            req.write("/plain", bytes(70_000))
        with pytest.raises(TooLarge):
            req.write("/plain", b"xy", offset=65_535)
        with pytest.raises(TooLarge):
            req.call("/reverse", bytes(70_000))                   # payload beyond the buffer
        with pytest.raises(TooLarge, match="exceeds"):
            req.call("/sized", b"20000")                          # response beyond the buffer
        assert len(req.call("/sized", b"16384")) == 16384
        with pytest.raises(HandlerError, match="handler failed on purpose") as exc:
            req.call("/fail", b"abc")
        assert "RuntimeError" in exc.value.message
        with pytest.raises(HandlerError, match="crc mismatch"):
            req.write("/store", b"not framed")
        with pytest.raises(HandlerError, match="nothing to read"):
            req.read("/badread")
        with pytest.raises(ValueError):
            req.write("/plain", b"")
        assert req.call("/echo", b"still fine") == b"still fine"


def test_timeout_then_late_answer(server: Server) -> None:
    with Requester.connect(server.address) as req:
        t0 = time.monotonic()
        with pytest.raises(PeerTimeout):
            req.call("/slow", b"0.6", timeout=0.2)
        assert time.monotonic() - t0 < 1.0
        assert req.call("/echo", b"after") == b"after"           # the late RESULT is dropped
        assert req.call("/slow", b"0", timeout=5) == b"slept"


def test_malformed_messages(server: Server) -> None:
    port = server.port
    with Requester.connect(server.address, name="bystander") as good:
        cases = [
            b"hello, world",                                                        # no header
            P.HEADER.pack(b"PDPR", 9, int(P.MsgType.IDENT), 0, 0, 0),               # wrong version
            P.encode(P.Write(0, 0, 3, b"abc"), 1),                                  # before IDENT
        ]
        for data in cases:
            raw = RawClient(port)
            try:
                raw.send(data)
                frame = raw.expect()
                assert status_of(frame) is P.Status.PROTOCOL_ERROR
                raw.wait_closed()
            finally:
                raw.close()
            assert good.call("/echo", b"ok") == b"ok"
        raw = RawClient(port)
        try:
            hello = raw.hello()
            ids = {e["path"]: e["id"] for e in hello["endpoints"]}
            raw.send(P.encode(P.Write(999, 0, 2, b"xy"), 5))
            assert status_of(raw.expect()) is P.Status.NOT_FOUND
            raw.send(P.encode(P.Write(ids["/plain"], 65_000, 1000), 6, P.FLAG_IN_BUFFER))
            assert status_of(raw.expect()) is P.Status.TOO_LARGE
            raw.send(P.encode(P.Write(ids["/pattern"], 0, 2, b"xy"), 7))
            assert status_of(raw.expect()) is P.Status.REJECTED
            raw.send(P.encode(P.Call(ids["/echo"], 0, 3, b"raw"), 8))
            frame = raw.expect()
            assert isinstance(frame.msg, P.Result) and frame.msg.payload == b"raw" and frame.seq == 8
            bad = P.encode(P.Write(ids["/plain"], 0, 2, b"xy"), 9)
            raw.send(bad[:12] + struct.pack("<I", 2) + bad[16:18])                 # body too short
            assert status_of(raw.expect()) is P.Status.PROTOCOL_ERROR
            raw.wait_closed()
        finally:
            raw.close()
        raw = RawClient(port)                                    # a write-with-immediate: protocol 2 has none
        try:
            raw.hello()
            rmap = pydoca.MemoryMap.from_export(raw.dev, raw.region_blob)
            src = raw.inv.buffer(raw.mm, offset=0, length=16)
            dst = raw.inv.buffer(rmap, offset=0, length=16, empty=True)
            raw.rdma.write_imm(raw.conn, src, dst, 0x10001).wait(10)
            assert status_of(raw.expect()) is P.Status.PROTOCOL_ERROR
            raw.wait_closed()
            src.close()
            dst.close()
            rmap.close()
        finally:
            raw.close()
        assert good.call("/echo", b"still serving") == b"still serving"


def test_busy_and_handlers_off_the_progress_path(server: Server) -> None:
    """A slow handler holds only its endpoint: others, and new connections, keep flowing."""
    holder = Proc(["tests/peer_worker.py", server.address, "holder", "slow", "/single", "2.5"])
    try:
        holder.wait_for("started")
        time.sleep(0.3)                                        # its handler is sleeping now
        t0 = time.monotonic()
        with Requester.connect(server.address, timeout=5) as req:
            assert req.call("/echo", b"not stalled") == b"not stalled"
            assert time.monotonic() - t0 < 1.5, "a slow handler stalled connect and another endpoint"
            with pytest.raises(Busy):
                req.write("/single", b"0", wait=False)
            with pytest.raises(Busy, match="queue full"):
                req.write("/single", b"0")                     # queue: 0
            holder.kill()                                      # SIGKILL while its handler runs

            def free() -> bool:
                try:
                    req.write("/single", b"0", wait=False)
                    return True
                except Busy:
                    return False
            assert wait_until(free, 10), "endpoint not free after the handler returned"
    finally:
        holder.kill()


def test_handler_timeout(server: Server) -> None:
    """The responder answers HANDLER_ERROR when a handler outlives the call timeout (3 s here)."""
    with Requester.connect(server.address, timeout=10) as req:
        t0 = time.monotonic()
        with pytest.raises(HandlerError, match="timed out"):
            req.call("/slow", b"5")
        assert 2.5 < time.monotonic() - t0 < 5
        assert req.call("/echo", b"after") == b"after"
        assert req.call("/aecho", b"async") == b"cnysa"       # an async def handler


def test_async_beyond_the_window(server: Server, reliability_report: Any) -> None:
    """100 concurrent async writes on one Requester (window 4) all succeed: queued locally, never Busy."""
    async def main(req: Requester) -> None:
        bodies = [bytes([i]) * (1 << 20) for i in range(100)]
        await asyncio.gather(*(req.awrite("/store", framed(b)) for b in bodies))
        small = await asyncio.gather(*(req.acall("/echo", str(i)) for i in range(100)))
        assert small == [str(i).encode() for i in range(100)]
    t0 = time.monotonic()
    with Requester.connect(server.address, window=4, timeout=60) as req:
        asyncio.run(main(req))
    reliability_report.add("100 async ops on one Requester (window 4)", trials=200, passed=200, failed=0,
                           seconds=round(time.monotonic() - t0, 2))


def test_descriptor_file(server: Server, tmp_path: Path) -> None:
    assert server.descriptor is not None
    mode = stat.S_IMODE(os.stat(server.descriptor).st_mode)
    assert mode == 0o600
    rf = read_responder_file(str(server.descriptor))
    assert (rf.address, rf.port, rf.service) == ("127.0.0.1", server.port, "testsvc") and rf.instance
    assert {e["path"] for e in rf.endpoints} >= {"/store", "/echo"}
    other = tmp_path / "other.desc"
    doc = json.loads(server.descriptor.read_text())
    doc["instance"] = "0" * 32                                  # a responder restarted at the same address
    other.write_text(json.dumps(doc))
    with pytest.raises(StaleDescriptor, match="stale"):
        Requester.from_descriptor(str(other))
    foreign = tmp_path / "foreign.desc"
    write_descriptor(foreign, "something.else", {"x": 1})
    with pytest.raises(DescriptorError, match="kind"):
        Requester.from_descriptor(str(foreign))
    foreign.write_text("{not json")
    with pytest.raises(DescriptorError):
        Requester.from_descriptor(str(foreign))
    write_descriptor(tmp_path / "gone.desc", KIND, {"protocol": P.VERSION, "address": "127.0.0.1", "port": 9,
                                                      "instance": "ab", "endpoints": []})
    with pytest.raises(StaleDescriptor, match="no responder answers"):
        Requester.from_descriptor(str(tmp_path / "gone.desc"), timeout=3)


def test_stale_file_and_token(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    desc = tmp_path / "tok.desc"
    srv = Server(spec, "--require-token", descriptor=desc)
    try:
        with pytest.raises(Rejected, match="token"):
            Requester.connect(srv.address)
        with Requester.from_descriptor(str(desc)) as req:
            assert req.call("/echo", b"with token") == b"with token"
        srv.kill()                                              # SIGKILL: the file stays behind
        assert desc.exists()
        t0 = time.monotonic()
        with pytest.raises(StaleDescriptor, match="gone|no responder"):
            Requester.from_descriptor(str(desc))
        assert time.monotonic() - t0 < 5
    finally:
        srv.kill()


def test_responder_gone_fails_requester(tmp_path: Path) -> None:
    srv = Server(write_spec(tmp_path))
    try:
        with Requester.connect(srv.address, timeout=5) as req:
            assert req.call("/echo", b"x") == b"x"
            srv.kill()
            with pytest.raises((Disconnected, PeerTimeout)):
                for _ in range(50):
                    req.call("/echo", b"x")
                    time.sleep(0.05)
    finally:
        srv.kill()


def test_write_source_freed_before_its_answer(tmp_path: Path) -> None:
    """A write's local source (a staging slot; a registration of the caller's buffer past 64 KiB) is
    freed once its RDMA write completed, while the handler still runs: the answer does not wait on it."""
    spec = SPEC + '  - {path: /slowbig, type: write, buffer: {size: 128KiB}, handler: "peer_handlers:slow_write"}\n'
    srv = Server(write_spec(tmp_path, spec))
    try:
        with Requester.connect(srv.address, name="early", timeout=10) as req:
            free = len(req._free_stage)
            for size in (20_000, 100_000):                   # staged; registered in place
                op = req._start_write("/slowbig", b"0.6".ljust(size), 0, True, False)  # the handler sleeps 0.6 s
                req.pe.run_until(lambda: op.inflight == 1 or op.finished, 5, what="launch")
                assert op.own and len(req._free_stage) == free - (size <= 65536)
                req.pe.run_until(lambda: op.inflight == 0, 5, what="the write's completion")
                assert not op.answered and op.own == [] and op.stage_slot is None
                assert len(req._free_stage) == free
                t0 = time.monotonic()
                req._wait(op, 5)                              # then the handler's OK, as before
                assert op.error is None and time.monotonic() - t0 > 0.3
    finally:
        assert srv.terminate() == 0, srv.stderr[-3000:]


def test_stop_before_serve_forever_is_not_lost() -> None:
    """stop() between start() and serve_forever() (pydoca serve: a SIGTERM right after "serving") ends the
    serve_forever() that follows at once; it used to be reset there, and the responder served on."""
    import threading
    from rdma_util import free_port
    resp = Responder(f"127.0.0.1:{free_port()}", name="stopfirst")
    resp.add_endpoint("/echo", "call", 64, lambda p: p)
    resp.start()
    try:
        resp.stop()
        server = threading.Thread(target=resp.serve_forever, daemon=True)
        server.start()
        server.join(3)
        assert not server.is_alive(), "serve_forever() ignored a stop() made before it"
        server = threading.Thread(target=resp.serve_forever, daemon=True)   # consumed: the next one serves
        server.start()
        with Requester.connect(resp.address) as req:
            assert req.call("/echo", b"again") == b"again"
        resp.stop()
        server.join(3)
        assert not server.is_alive()
    finally:
        resp.close()


def test_inline_handlers_run_on_the_serving_thread() -> None:
    import threading
    from rdma_util import free_port
    seen = []
    resp = Responder(f"127.0.0.1:{free_port()}", name="inl")
    resp.add_endpoint("/fast", "call", 64, lambda p: (seen.append(threading.current_thread().name), p[::-1])[1],
                      inline=True)
    resp.add_endpoint("/pooled", "call", 64, lambda p: (seen.append(threading.current_thread().name), p)[1])
    with pytest.raises(ValueError, match="async"):
        async def coro(p: bytes) -> bytes:
            return p
        resp.add_endpoint("/bad", "call", 64, coro, inline=True)
    resp.start()
    server = threading.Thread(target=resp.serve_forever, name="serving", daemon=True)
    server.start()
    try:
        with Requester.connect(resp.address) as req:
            assert req.call("/fast", b"abc") == b"cba"
            assert req.call("/pooled", b"abc") == b"abc"
    finally:
        resp.stop()
        server.join(5)
        resp.close()
    assert seen[0] == "serving" and seen[1].startswith("pydoca-handler")


def test_close_with_async_operations_pending(server: Server) -> None:
    """close() answers every pending operation with Disconnected: awaiting coroutines get it at once
    (they used to sleep out their whole timeout and raise PeerTimeout)."""
    async def main() -> None:
        req = Requester.connect(server.address, name="aclose", timeout=5)
        tasks = [asyncio.ensure_future(req.acall("/echo", os.urandom(100_000))) for _ in range(6)]
        await asyncio.sleep(0)
        t0 = time.monotonic()
        req.close()
        got = await asyncio.gather(*tasks, return_exceptions=True)
        assert time.monotonic() - t0 < 2.0, got
        assert all(isinstance(g, Disconnected) or isinstance(g, bytes) for g in got), got
        assert any(isinstance(g, Disconnected) for g in got), got
    asyncio.run(main())
