"""pydoca.peer security: memory isolation between requesters, authentication, rights, allow-lists."""
from __future__ import annotations

import hashlib
import json
import struct
import time
import zlib
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest
from peer_raw import RawClient, status_of
from peer_util import Proc, Server, free_port, write_spec

from pydoca.peer import Busy, Rejected, Requester, Unavailable
from pydoca.peer import protocol as P
from pydoca.peer.errors import ProtocolError

pytestmark = pytest.mark.timeout(120)
TOKEN = bytes(range(16))
ALICE = bytes(range(100, 132))


def forge(blob: bytes, id_delta: int = 0, base_delta: int = 0, length: int = 0) -> bytes:
    """An mmap export with another map id / base / length and a valid CRC (softdoca layout v1)."""
    b = bytearray(blob)
    mid, base, size = struct.unpack_from("<QQQ", b, 16)
    struct.pack_into("<QQQ", b, 16, mid + id_delta, base + base_delta, length or size)
    struct.pack_into("<I", b, 78, zlib.crc32(bytes(b[:78])))
    return bytes(b)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(write_spec(tmp_path_factory.mktemp("sec")))
    yield srv
    assert srv.terminate() == 0, srv.stderr[-3000:]


def test_requesters_are_isolated(server: Server) -> None:
    """Each requester gets its own region; forged descriptors for a neighbour's are refused, its bytes intact.
    A refused RDMA access is fatal for the forger's connection (RC semantics), so each forgery uses a fresh one."""
    a = RawClient(server.port)
    try:
        ha = a.hello("a")
        assert all("mmap" not in e for e in ha["endpoints"]), "endpoint buffers must not be exported"
        slot = next(e["slot"] for e in ha["endpoints"] if e["path"] == "/store")
        secret = hashlib.sha256(b"a's upload").digest() * 128              # 4 KiB
        task, _ = a.rdma_op("write", a.region_blob, slot, data=secret)
        assert task.error is None
        refused = attempts = 0
        attempts_list = [(delta, kind) for delta in (-3, -2, -1, 1, 2, 3) for kind in ("read", "write")]
        attempts_list.append((None, "read"))                                 # past its own region
        for delta, kind in attempts_list:
            attempts += 1
            b = RawClient(server.port)
            try:
                b.hello("b")
                assert b.region_blob and b.region_blob != a.region_blob
                if delta is None:
                    size = struct.unpack_from("<Q", b.region_blob, 32)[0]
                    blob, offset = forge(b.region_blob, length=1 << 30), size
                else:
                    blob, offset = forge(b.region_blob, id_delta=delta), slot
                try:
                    task, got = b.rdma_op(kind, blob, offset, data=b"x" * 64, length=64) if kind == "write" else \
                        b.rdma_op(kind, blob, offset, length=64)
                except Exception:  # noqa: BLE001 - refused at parse time counts as refused
                    refused += 1
                    continue
                refused += task.error is not None
                if task.error is not None:                                   # RC: the forger's connection breaks
                    b.wait_closed(5)
            finally:
                b.close()
        assert refused == attempts, f"{attempts - refused} of {attempts} forged accesses succeeded"
        task, back = a.rdma_op("read", a.region_blob, slot, length=len(secret))
        assert task.error is None and back == secret, "a's bytes changed"
        a_blob = a.region_blob
    finally:
        a.close()
    time.sleep(0.3)                                                          # the responder revokes a's region
    c = RawClient(server.port)
    try:
        c.hello("c")
        task, _ = c.rdma_op("read", a_blob, slot, length=64)
        assert task.error is not None, "a departed requester's region is still readable"
    finally:
        c.close()


def _auth_server(cfg: Dict[str, Any]) -> tuple[Proc, str]:
    port = free_port()
    proc = Proc(["tests/peer_auth_server.py", str(port), json.dumps(cfg)])
    proc.wait_for("serving")
    return proc, f"127.0.0.1:{port}"


def test_challenge_response_and_rights() -> None:
    cfg = {"credentials": {"": {"token": TOKEN.hex()},
                           "alice": {"token": ALICE.hex(), "rights": {"/echo": "c", "/pat*": "r"}}}}
    srv, address = _auth_server(cfg)
    try:
        with pytest.raises(Rejected, match="requires a token"):
            Requester.connect(address)
        with pytest.raises(Rejected, match="authentication failed"):
            Requester.connect(address, token=bytes(16))
        with pytest.raises(Rejected, match="authentication failed"):
            Requester.connect(address, token=TOKEN, key_id="alice")            # right token, wrong key id
        with Requester.connect(address, token=TOKEN) as req:
            assert req.call("/echo", b"admin") == b"admin"
            req.write("/plain", b"admin may write")
        with Requester.connect(address, token=ALICE, key_id="alice") as req:
            assert req.call("/echo", b"alice") == b"alice"
            assert len(req.read("/pattern", 100)) == 100
            rights = {e.path: e.rights for e in req.endpoints()}
            assert rights["/echo"] == "c" and rights["/store"] == "" and rights["/pattern"] == "r"
            with pytest.raises(Rejected, match="no write right"):
                req.write("/store", b"nope")
        raw = RawClient(int(address.rsplit(":", 1)[1]))                      # alice forging a frame
        try:
            hello = raw.hello("alice", token=ALICE, key_id="alice")
            ids = {e["path"]: e["id"] for e in hello["endpoints"]}
            raw.send(P.encode(P.Write(ids["/store"], 0, 2, b"xy"), 3))
            frame = raw.expect()
            assert status_of(frame) is P.Status.REJECTED and "right" in frame.msg.message  # type: ignore[union-attr]
        finally:
            raw.close()
        raw = RawClient(int(address.rsplit(":", 1)[1]))                      # a replayed / foreign MAC
        try:
            raw.send(P.encode(P.Ident("mallory", "", b"\x01" * P.NONCE), 0))
            assert isinstance(raw.expect().msg, P.Challenge)
            raw.send(P.encode(P.Auth(b"\x00" * P.MAC), 0))
            assert status_of(raw.expect()) is P.Status.REJECTED
            raw.wait_closed()
        finally:
            raw.close()
        assert srv.popen.poll() is None
    finally:
        srv.kill()


def test_responder_must_prove_the_token(server: Server) -> None:
    """A requester holding a token refuses a responder that cannot prove it (no challenge at all here)."""
    with pytest.raises(ProtocolError, match="prove"):
        Requester.connect(server.address, token=TOKEN)


def test_allow_list() -> None:
    srv, address = _auth_server({"allow": ["10.77.0.0/16"]})
    try:
        t0 = time.monotonic()
        with pytest.raises(Unavailable, match="refused the connection"):
            Requester.connect(address, timeout=5)
        assert time.monotonic() - t0 < 3
    finally:
        srv.kill()
    srv, address = _auth_server({"allow": ["127.0.0.1/32"]})
    try:
        with Requester.connect(address, timeout=5) as req:
            assert req.call("/echo", b"allowed") == b"allowed"
    finally:
        srv.kill()


def test_token_file_cli(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text(TOKEN.hex() + "\n")
    srv = Server(write_spec(tmp_path), "--token-file", str(key))
    try:
        with pytest.raises(Rejected):
            Requester.connect(srv.address)
        with Requester.connect(srv.address, token=TOKEN) as req:
            assert req.call("/echo", b"file token") == b"file token"
        short = tmp_path / "short"
        short.write_text("abcd")
        bad = Proc(["-m", "pydoca.cli", "serve", str(tmp_path / "spec.yaml"), "--listen",
                    f"127.0.0.1:{free_port()}", "--token-file", str(short)])
        assert bad.finish(30) != 0 and "at least 16" in bad.stderr
    finally:
        srv.kill()


def test_discover_published_service(tmp_path: Path) -> None:
    from pydoca.transfer import EmbeddedStore
    store = f"dir:{tmp_path / 'meta'}"
    srv = Server(write_spec(tmp_path), "--publish", store)
    try:
        with Requester.discover("testsvc", EmbeddedStore(str(tmp_path / "meta")), timeout=5) as req:
            assert req.call("/echo", b"found") == b"found" and req.service == "testsvc"
        srv.kill()                                                         # its pid lease ends
        with pytest.raises(Unavailable, match="no responder publishes"):
            Requester.discover("testsvc", EmbeddedStore(str(tmp_path / "meta")))
    finally:
        srv.kill()


def in_log(srv: Server, needle: str, timeout: float = 5.0) -> bool:
    """Whether the responder logs ``needle`` within ``timeout`` (its stderr arrives through a pipe, a little
    after what it told the requester)."""
    end = time.monotonic() + timeout
    while needle not in srv.stderr and time.monotonic() < end:
        time.sleep(0.02)
    return needle in srv.stderr


def served_once_freed(address: str, name: str) -> None:
    """A requester connects and is served once the responder saw a place freed (shortly after a close)."""
    end = time.monotonic() + 5
    while True:
        try:
            with Requester.connect(address, name=name, timeout=5) as again:
                assert again.call("/echo", b"in") == b"in"
            return
        except Unavailable:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)


def test_connection_limit_refusal_says_so(tmp_path: Path) -> None:
    """Beyond --max-connections a requester is refused at once, told why; a freed place is taken again."""
    srv = Server(write_spec(tmp_path), "--max-connections", "2")
    first = second = None
    try:
        first, second = Requester.connect(srv.address, name="one"), Requester.connect(srv.address, name="two")
        t0 = time.monotonic()
        with pytest.raises(Unavailable, match="refused the connection .*connection limit"):
            Requester.connect(srv.address, name="three", timeout=5)
        assert time.monotonic() - t0 < 3
        assert first.call("/echo", b"still served") == b"still served"
        first.close()
        served_once_freed(srv.address, "four")
    finally:
        for req in (first, second):
            if req is not None:
                req.close()
        srv.kill()


def test_an_idle_requester_gives_its_place_to_a_newcomer(tmp_path: Path) -> None:
    """Every place taken: a newcomer takes the place of the requester idle longest (past --idle-evict), which is
    told why (Busy) on its next call; an active requester keeps its place, however long it has been connected."""
    srv = Server(write_spec(tmp_path), "--max-connections", "2", "--idle-evict", "0.5")
    first = second = third = None
    try:
        first = Requester.connect(srv.address, name="first")           # connected first, but keeps calling
        second = Requester.connect(srv.address, name="second")         # connected, then silent
        end = time.monotonic() + 1.2
        while time.monotonic() < end:
            assert first.call("/echo", b"busy") == b"busy"
            time.sleep(0.05)
        third = Requester.connect(srv.address, name="third", timeout=5)
        assert third.call("/echo", b"in") == b"in"
        assert first.call("/echo", b"kept") == b"kept"
        with pytest.raises(Busy, match=r"idle: all 2 places were taken"):
            end = time.monotonic() + 5
            while time.monotonic() < end:                               # its Busy arrives shortly after
                second.call("/echo", b"evicted?", timeout=2)
                time.sleep(0.05)
        # nobody idle now (the two left call at once): the next newcomer is refused, as without eviction
        with pytest.raises(Unavailable, match="refused the connection"):
            Requester.connect(srv.address, name="fourth", timeout=5)
        assert in_log(srv, "disconnected after") and "second" in srv.stderr
    finally:
        for req in (first, second, third):
            if req is not None:
                req.close()
        srv.kill()


def test_connection_limit_per_address(tmp_path: Path) -> None:
    """--max-connections-per-source: a second requester from the same address is refused at once, its log says
    which limit; the first is still served, and its place is free again once it leaves."""
    srv = Server(write_spec(tmp_path), "--max-connections-per-source", "1", "--idle-evict", "0")
    first = None
    try:
        first = Requester.connect(srv.address, name="one")
        t0 = time.monotonic()
        with pytest.raises(Unavailable, match="refused the connection"):
            Requester.connect(srv.address, name="two", timeout=5)
        assert time.monotonic() - t0 < 3
        assert in_log(srv, "max_connections_per_source reached")
        assert first.call("/echo", b"still served") == b"still served"
        first.close()
        served_once_freed(srv.address, "three")
    finally:
        if first is not None:
            first.close()
        srv.kill()


def test_a_requester_beyond_its_window_is_disconnected(server: Server) -> None:
    """A requester keeps at most ``window`` operations unanswered (the hello says 4): the responder disconnects
    one that sends more, with PROTOCOL_ERROR naming the window, before it can fill an endpoint's queue for
    everyone (and its copies the responder's memory); a well-behaved requester is served meanwhile."""
    raw = RawClient(server.port)
    try:
        doc = raw.hello("greedy")
        assert doc["window"] == 4
        slow = next(e["id"] for e in doc["endpoints"] if e["path"] == "/slow")
        for seq in range(1, 7):
            raw.send(P.encode(P.Call(slow, 0, 3, b"0.3"), seq, P.FLAG_WAIT))
        codes = []
        end = time.monotonic() + 10
        while P.Status.PROTOCOL_ERROR not in codes and time.monotonic() < end:
            frame = raw.expect()
            codes.append(status_of(frame))
            if status_of(frame) is P.Status.PROTOCOL_ERROR:
                assert "window=4" in frame.msg.message, frame.msg.message
        assert P.Status.PROTOCOL_ERROR in codes, codes
        raw.wait_closed()
        with Requester.connect(server.address, timeout=10) as req:
            assert req.call("/echo", b"still served") == b"still served"
    finally:
        raw.close()


def test_requesters_that_take_no_answers_delay_nobody(server: Server) -> None:
    """Requesters that stop posting receives and keep sending requests the responder must answer (here to an
    endpoint that does not exist) each hold a bounded share of the responder's send slots, and there are slots
    for every requester's share at once: one is dropped once what waits for it passes its bound, eight of them
    together hold no slot a well-behaved requester needs, whose calls are answered meanwhile (before, all
    answers queued behind theirs until softdoca's RNR budget broke their connections)."""
    deaf = [RawClient(server.port, inventory=1024)] + [RawClient(server.port) for _ in range(8)]
    try:
        for i, raw in enumerate(deaf):
            raw.hello(f"deaf{i}")
            raw.closing = True                  # what arrives from now on is not received again
        with Requester.connect(server.address, timeout=10) as req:
            for seq in range(1, 240):           # the first: 10 in flight and 177 queued for it, then dropped
                deaf[0].send(P.encode(P.Call(999, 0, 1, b"x"), seq))
            for raw in deaf[1:]:                # the others: 10 in flight each, and more queued
                for seq in range(1, 40):
                    raw.send(P.encode(P.Call(999, 0, 1, b"x"), seq))
            end, i = time.monotonic() + 1.5, 0  # while they are answered: our calls too, not after their budget
            while time.monotonic() < end:
                i += 1
                assert req.call("/echo", b"%d" % i, timeout=2) == b"%d" % i
            for raw in deaf:
                raw.wait_closed()
            assert req.call("/echo", b"after") == b"after"
    finally:
        for raw in deaf:
            raw.close()
