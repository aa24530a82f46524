"""pydoca.peer without RDMA: framing, spec files, descriptor payloads, codegen text."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

from pydoca.peer import protocol as P
from pydoca.peer.codegen import generate, method_names
from pydoca.peer.errors import Busy, HandlerError, NotFound, Rejected, TooLarge, error_for
from pydoca.peer.spec import Kind, SpecError, load_spec, parse_size, parse_spec, split_address

MESSAGES = [
    P.Ident("worker-1", "alice", b"\x01" * P.NONCE), P.Hello(b"{}"), P.Challenge(b"\x02" * P.NONCE),
    P.Auth(b"\x03" * P.MAC), P.StatusMsg(P.Status.HANDLER_ERROR, "boom"), P.Write(3, 10, 4, b"abcd"),
    P.Read(1, 0, 100), P.Ready(1, 0, 3, b"xyz"), P.Call(2, 0, 7, b"payload"), P.Result(2, 0, 3, b"abc"),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip(msg: P.Message) -> None:
    frame = P.decode(P.encode(msg, 42, P.FLAG_WAIT))
    assert frame.msg == msg and frame.seq == 42 and frame.flags == P.FLAG_WAIT


def test_in_buffer_frames() -> None:
    frame = P.decode(P.encode(P.Write(3, 100, 1 << 20), 7, P.FLAG_IN_BUFFER))
    assert frame.msg == P.Write(3, 100, 1 << 20) and frame.flags == P.FLAG_IN_BUFFER


_W = int(P.MsgType.WRITE)


@pytest.mark.parametrize("data, why", [
    (b"", "shorter"),
    (b"XXXX" + bytes(12), "magic"),
    (P.HEADER.pack(P.MAGIC, 9, 4, 0, 1, 2) + b"\0\0", "version"),
    (P.HEADER.pack(P.MAGIC, 2, 99, 0, 1, 0), "type"),
    (P.HEADER.pack(P.MAGIC, 2, 5, 0x80, 1, 2) + b"\0\0", "flags"),
    (P.HEADER.pack(P.MAGIC, 2, 5, 0, 1, 5) + b"\0\0", "header says"),
    (P.HEADER.pack(P.MAGIC, 2, 3, 0, 1, 3) + b"\0\0\0", "CHALLENGE body"),
    (P.HEADER.pack(P.MAGIC, 2, 4, 0, 1, 3) + b"\0\0\0", "AUTH body"),
    (P.HEADER.pack(P.MAGIC, 2, _W, 0, 1, 4) + bytes(4), "WRITE body"),
    (P.HEADER.pack(P.MAGIC, 2, _W, 0, 1, 21) + struct.pack("<HxxQQ", 0, 0, 2) + b"x", "carries 1 inline"),
    (P.HEADER.pack(P.MAGIC, 2, _W, P.FLAG_IN_BUFFER, 1, 21) + struct.pack("<HxxQQ", 0, 0, 1) + b"x", "inline"),
    (P.HEADER.pack(P.MAGIC, 2, int(P.MsgType.READ), 0, 1, 21) + struct.pack("<HxxQQ", 0, 0, 1) + b"x",
     "no payload"),
    (P.HEADER.pack(P.MAGIC, 2, 5, 0, 1, 2) + struct.pack("<H", 999), "unknown code"),
    (P.HEADER.pack(P.MAGIC, 2, 1, 0, 1, 4) + struct.pack("<HH", 5, 0), "IDENT body"),
    (P.HEADER.pack(P.MAGIC, 2, 1, 0, 1, 4 + P.NONCE) + struct.pack("<HH", 5, 0) + bytes(P.NONCE), "IDENT lengths"),
    (P.HEADER.pack(P.MAGIC, 2, 5, 0, 1, P.SLOT_SIZE) + bytes(P.SLOT_SIZE), "exceeds"),
])
def test_strict_parse(data: bytes, why: str) -> None:
    with pytest.raises(P.FrameError, match=why):
        P.decode(data)


def test_encode_limits() -> None:
    with pytest.raises(ValueError):
        P.encode(P.Call(0, 0, P.MAX_BODY, bytes(P.MAX_BODY)), 1)
    assert len(P.encode(P.Call(0, 0, P.INLINE_MAX, bytes(P.INLINE_MAX)), 1)) == P.SLOT_SIZE
    with pytest.raises(ValueError):
        P.encode(P.Ident("x", "", b"short"), 1)


def test_hello_fragments() -> None:
    doc = {"protocol": P.VERSION, "instance": "ab", "region": "r" * 100, "endpoints": [
        {"id": i, "path": f"/e{i}", "kind": "write", "size": 1, "rights": "w", "slot": i * 64,
         "pad": "x" * 500} for i in range(40)]}
    frames = [P.decode(f) for f in P.hello_frames(doc)]
    assert len(frames) > 1 and all(f.flags & P.FLAG_MORE for f in frames[:-1]) and not frames[-1].flags
    blob = b"".join(f.msg.chunk for f in frames if isinstance(f.msg, P.Hello))
    assert P.parse_hello(blob) == doc
    with pytest.raises(P.FrameError):
        P.parse_hello(b'{"protocol": 1}')
    with pytest.raises(P.FrameError):
        P.parse_hello(b'{"protocol": 2, "instance": "x", "endpoints": [{"id": 1}]}')


def test_errors_map() -> None:
    assert isinstance(error_for(P.Status.NOT_FOUND, "x"), NotFound)
    assert isinstance(error_for(P.Status.BUSY, "x"), Busy)
    assert isinstance(error_for(P.Status.REJECTED, "x"), Rejected)
    assert isinstance(error_for(P.Status.TOO_LARGE, "x"), TooLarge)
    err = error_for(P.Status.HANDLER_ERROR, "ValueError: bad")
    assert isinstance(err, HandlerError) and err.message == "ValueError: bad"


def test_sizes_and_addresses() -> None:
    assert parse_size(4096) == 4096 and parse_size("64KiB") == 65536 and parse_size("1 MiB") == 1 << 20
    for bad in ("1XB", -1, 0, "MiB", True, 1.5):
        with pytest.raises(SpecError):
            parse_size(bad)
    assert split_address("127.0.0.1:80") == ("127.0.0.1", 80)
    assert split_address("[::1]:7") == ("::1", 7)
    with pytest.raises(ValueError):
        split_address("host")


def test_spec_parse(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("version: 1\nname: svc\nendpoints:\n"
                    "  - {path: /a, type: write, buffer: {size: 1KiB}}\n"
                    "  - {path: /b/c, type: call, buffer: {size: 64}, handler: 'm:f', queue: 0}\n")
    spec = load_spec(str(path))
    assert spec.name == "svc" and spec.base_dir == str(tmp_path)
    assert [(e.path, e.kind, e.size, e.queue) for e in spec.endpoints] == [
        ("/a", Kind.WRITE, 1024, None), ("/b/c", Kind.CALL, 64, 0)]


@pytest.mark.parametrize("doc, why", [
    ({"endpoints": []}, "non-empty"),
    ({"version": 2, "endpoints": [{"path": "/a", "type": "write", "buffer": {"size": 1}}]}, "version"),
    ({"endpoints": [{"path": "a", "type": "write", "buffer": {"size": 1}}]}, "path"),
    ({"endpoints": [{"path": "/a", "type": "poke", "buffer": {"size": 1}}]}, "type"),
    ({"endpoints": [{"path": "/a", "type": "write"}]}, "size"),
    ({"endpoints": [{"path": "/a", "type": "call", "buffer": {"size": 1}}]}, "handler"),
    ({"endpoints": [{"path": "/a", "type": "write", "buffer": {"size": 1}, "handler": "nocolon"}]}, "handler"),
    ({"endpoints": [{"path": "/a", "type": "write", "buffer": {"size": 1}}] * 2}, "duplicate"),
    ({"endpoints": [{"path": "/a", "type": "write", "buffer": {"size": 1}, "color": 1}]}, "unknown"),
    ({"name": "no spaces", "endpoints": [{"path": "/a", "type": "write", "buffer": {"size": 1}}]}, "name"),
    ([], "mapping"),
])
def test_spec_errors(doc: object, why: str) -> None:
    with pytest.raises(SpecError, match=why):
        parse_spec(doc)


def test_codegen_text() -> None:
    spec = parse_spec({"name": "demo", "endpoints": [
        {"path": "/up-load", "type": "write", "buffer": {"size": 8}},
        {"path": "/class", "type": "read", "buffer": {"size": 8}},
        {"path": "/9x", "type": "call", "buffer": {"size": 8}, "handler": "m:f"},
        {"path": "/up_load", "type": "call", "buffer": {"size": 8}, "handler": "m:f"}]})
    names = method_names(spec.endpoints)
    assert names == {"/up-load": "up_load", "/class": "class_", "/9x": "ep_9x", "/up_load": "up_load_2"}
    source = generate(spec)
    compile(source, "client.py", "exec")
    assert "class DemoClient" in source and "def class__into(" in source
