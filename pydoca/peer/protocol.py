"""Wire format of the peer protocol: control frames and immediate data.

Every control message is one RDMA send of at most :data:`SLOT_SIZE` bytes::

    magic "PDPR" | version u8 | type u8 | flags u16 | seq u32 | length u32 | body

(little endian, 16-byte header; ``length`` is the body length). Parsing is
strict: wrong magic, version, type, length or body size raises
:class:`FrameError`. The immediate of a write-with-immediate is
``endpoint_id << 16 | (seq & 0xffff)``.
"""
from __future__ import annotations

import enum
import json
import struct
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Tuple, Type, Union

MAGIC = b"PDPR"
VERSION = 1
HEADER = struct.Struct("<4sBBHII")
SLOT_SIZE = 8192                               # every control message fits one receive slot
MAX_BODY = SLOT_SIZE - HEADER.size
MAX_HELLO = 1 << 20                            # reassembled hello limit
MAX_NAME = 256

FLAG_MORE = 0x1        # HELLO: more fragments follow
FLAG_WAIT = 0x2        # ACQUIRE/READ/CALL: queue if the endpoint is busy
FLAG_IN_BUFFER = 0x4   # RESULT: the response lies in the endpoint buffer (RDMA-read it, then DONE)
_KNOWN_FLAGS = FLAG_MORE | FLAG_WAIT | FLAG_IN_BUFFER


class FrameError(ValueError):
    """A control message that does not parse."""


class MsgType(enum.IntEnum):
    IDENT = 1      # requester -> responder: name, token (first message)
    HELLO = 2      # responder -> requester: JSON endpoint list + memory descriptors (fragmented)
    ACQUIRE = 3    # requester: lock an endpoint for an RDMA write (write, or a large call payload)
    GRANT = 4      # responder: the lock is yours; write-with-immediate now
    STATUS = 5     # responder: final status of an operation (code + message)
    READ = 6       # requester: fill and lock a read endpoint
    READY = 7      # responder: [offset, offset+length) is ready to be RDMA-read; DONE when finished
    DONE = 8       # requester: release the endpoint (after a read, or to give up a grant)
    CALL = 9       # requester: call with an inline payload
    RESULT = 10    # responder: call result, inline or in the endpoint buffer


class Op(enum.IntEnum):
    WRITE = 1
    READ = 2
    CALL = 3


class Status(enum.IntEnum):
    OK = 0
    NOT_FOUND = 1
    BUSY = 2
    REJECTED = 3
    TOO_LARGE = 4
    HANDLER_ERROR = 5
    PROTOCOL_ERROR = 6
    INTERNAL = 7


@dataclass(frozen=True)
class Ident:
    name: str
    token: bytes


@dataclass(frozen=True)
class Hello:
    chunk: bytes


@dataclass(frozen=True)
class Acquire:
    ep: int
    op: Op
    offset: int
    length: int


@dataclass(frozen=True)
class Grant:
    ep: int


@dataclass(frozen=True)
class StatusMsg:
    code: Status
    message: str


@dataclass(frozen=True)
class Read:
    ep: int
    offset: int
    length: int


@dataclass(frozen=True)
class Ready:
    ep: int
    offset: int
    length: int


@dataclass(frozen=True)
class Done:
    ep: int


@dataclass(frozen=True)
class Call:
    ep: int
    payload: bytes


@dataclass(frozen=True)
class Result:
    ep: int
    offset: int
    length: int
    payload: bytes


Message = Union[Ident, Hello, Acquire, Grant, StatusMsg, Read, Ready, Done, Call, Result]

_EP = struct.Struct("<H")
_EP_OFF_LEN = struct.Struct("<HxxQQ")
_ACQ = struct.Struct("<HBxQQ")
_IDENT = struct.Struct("<HH")
_STATUS = struct.Struct("<H")


@dataclass(frozen=True)
class Frame:
    type: MsgType
    flags: int
    seq: int
    msg: Message


def _fixed(st: struct.Struct, body: bytes, what: str) -> Tuple[Any, ...]:
    if len(body) != st.size:
        raise FrameError(f"{what} body is {len(body)} bytes, expected {st.size}")
    return st.unpack(body)


def _prefix(st: struct.Struct, body: bytes, what: str) -> Tuple[Tuple[Any, ...], bytes]:
    if len(body) < st.size:
        raise FrameError(f"{what} body is {len(body)} bytes, expected at least {st.size}")
    return st.unpack_from(body), body[st.size:]


def _d_ident(body: bytes) -> Ident:
    (nlen, tlen), rest = _prefix(_IDENT, body, "IDENT")
    if nlen > MAX_NAME or len(rest) != nlen + tlen:
        raise FrameError("IDENT lengths do not match its body")
    try:
        name = rest[:nlen].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FrameError("IDENT name is not UTF-8") from exc
    return Ident(name, bytes(rest[nlen:]))


def _d_acquire(body: bytes) -> Acquire:
    ep, op, off, length = _fixed(_ACQ, body, "ACQUIRE")
    try:
        return Acquire(ep, Op(op), off, length)
    except ValueError as exc:
        raise FrameError(f"ACQUIRE has unknown op {op}") from exc


def _d_status(body: bytes) -> StatusMsg:
    (code,), rest = _prefix(_STATUS, body, "STATUS")
    try:
        return StatusMsg(Status(code), rest.decode("utf-8", errors="replace"))
    except ValueError as exc:
        raise FrameError(f"STATUS has unknown code {code}") from exc


def _d_result(body: bytes) -> Result:
    (ep, off, length), rest = _prefix(_EP_OFF_LEN, body, "RESULT")
    return Result(ep, off, length, bytes(rest))


def _d_call(body: bytes) -> Call:
    (ep,), rest = _prefix(_EP, body, "CALL")
    return Call(ep, bytes(rest))


_DECODERS: Dict[MsgType, Callable[[bytes], Message]] = {
    MsgType.IDENT: _d_ident,
    MsgType.HELLO: lambda b: Hello(bytes(b)),
    MsgType.ACQUIRE: _d_acquire,
    MsgType.GRANT: lambda b: Grant(*_fixed(_EP, b, "GRANT")),
    MsgType.STATUS: _d_status,
    MsgType.READ: lambda b: Read(*_fixed(_EP_OFF_LEN, b, "READ")),
    MsgType.READY: lambda b: Ready(*_fixed(_EP_OFF_LEN, b, "READY")),
    MsgType.DONE: lambda b: Done(*_fixed(_EP, b, "DONE")),
    MsgType.CALL: _d_call,
    MsgType.RESULT: _d_result,
}

_TYPES: Dict[Type[Any], MsgType] = {
    Ident: MsgType.IDENT, Hello: MsgType.HELLO, Acquire: MsgType.ACQUIRE, Grant: MsgType.GRANT,
    StatusMsg: MsgType.STATUS, Read: MsgType.READ, Ready: MsgType.READY, Done: MsgType.DONE, Call: MsgType.CALL,
    Result: MsgType.RESULT,
}


def _body(msg: Message) -> bytes:
    if isinstance(msg, Ident):
        name = msg.name.encode("utf-8")[:MAX_NAME]
        return _IDENT.pack(len(name), len(msg.token)) + name + msg.token
    if isinstance(msg, Hello):
        return msg.chunk
    if isinstance(msg, Acquire):
        return _ACQ.pack(msg.ep, int(msg.op), msg.offset, msg.length)
    if isinstance(msg, (Grant, Done)):
        return _EP.pack(msg.ep)
    if isinstance(msg, StatusMsg):
        return _STATUS.pack(int(msg.code)) + msg.message.encode("utf-8")[:MAX_BODY - _STATUS.size]
    if isinstance(msg, (Read, Ready)):
        return _EP_OFF_LEN.pack(msg.ep, msg.offset, msg.length)
    if isinstance(msg, Call):
        return _EP.pack(msg.ep) + msg.payload
    return _EP_OFF_LEN.pack(msg.ep, msg.offset, msg.length) + msg.payload


def encode(msg: Message, seq: int, flags: int = 0) -> bytes:
    """One control frame; ValueError if it would not fit a receive slot."""
    body = _body(msg)
    if len(body) > MAX_BODY:
        raise ValueError(f"{type(msg).__name__} body of {len(body)} bytes exceeds {MAX_BODY}")
    return HEADER.pack(MAGIC, VERSION, _TYPES[type(msg)], flags & 0xFFFF, seq & 0xFFFFFFFF, len(body)) + body


def decode(data: bytes) -> Frame:
    """Parse one control frame strictly (FrameError on anything malformed)."""
    if len(data) < HEADER.size:
        raise FrameError(f"frame of {len(data)} bytes is shorter than the {HEADER.size}-byte header")
    if len(data) > SLOT_SIZE:
        raise FrameError(f"frame of {len(data)} bytes exceeds {SLOT_SIZE}")
    magic, version, mtype, flags, seq, length = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise FrameError(f"bad magic {magic!r}")
    if version != VERSION:
        raise FrameError(f"unsupported protocol version {version} (this side speaks {VERSION})")
    if flags & ~_KNOWN_FLAGS:
        raise FrameError(f"unknown flags {flags:#x}")
    if length != len(data) - HEADER.size:
        raise FrameError(f"header says {length} body bytes, frame has {len(data) - HEADER.size}")
    try:
        kind = MsgType(mtype)
    except ValueError as exc:
        raise FrameError(f"unknown message type {mtype}") from exc
    return Frame(kind, flags, seq, _DECODERS[kind](data[HEADER.size:]))


def pack_imm(ep: int, seq: int) -> int:
    """Immediate data of a write-with-immediate: endpoint id and low 16 bits of seq."""
    if not 0 <= ep <= 0xFFFF:
        raise ValueError(f"endpoint id {ep} does not fit 16 bits")
    return (ep << 16) | (seq & 0xFFFF)


def unpack_imm(imm: int) -> Tuple[int, int]:
    """(endpoint id, seq & 0xffff)."""
    return (imm >> 16) & 0xFFFF, imm & 0xFFFF


def hello_frames(doc: Dict[str, Any]) -> List[bytes]:
    """The hello document as HELLO frames (FLAG_MORE on all but the last)."""
    blob = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    if len(blob) > MAX_HELLO:
        raise ValueError(f"hello of {len(blob)} bytes exceeds {MAX_HELLO}")
    chunks = [blob[i:i + MAX_BODY] for i in range(0, len(blob), MAX_BODY)] or [b""]
    return [encode(Hello(c), 0, FLAG_MORE if i < len(chunks) - 1 else 0) for i, c in enumerate(chunks)]


def parse_hello(blob: bytes) -> Dict[str, Any]:
    """The reassembled hello document, checked for shape (FrameError otherwise)."""
    try:
        doc = json.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise FrameError(f"hello is not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("protocol") != VERSION:
        raise FrameError(f"hello speaks protocol {doc.get('protocol') if isinstance(doc, dict) else '?'}, "
                         f"expected {VERSION}")
    eps = doc.get("endpoints")
    if not isinstance(eps, list) or not isinstance(doc.get("instance"), str):
        raise FrameError("hello lacks endpoints or instance")
    for ep in eps:
        if not (isinstance(ep, dict) and isinstance(ep.get("id"), int) and isinstance(ep.get("path"), str)
                and ep.get("kind") in ("write", "read", "call") and isinstance(ep.get("size"), int)
                and isinstance(ep.get("mmap"), str)):
            raise FrameError(f"malformed endpoint entry in hello: {ep!r}"[:200])
    return doc


__all__ = ["Acquire", "Call", "Done", "FLAG_IN_BUFFER", "FLAG_MORE", "FLAG_WAIT", "Frame", "FrameError", "Grant",
           "HEADER", "Hello", "Ident", "MAGIC", "MAX_BODY", "Message", "MsgType", "Op", "Read", "Ready", "Result",
           "SLOT_SIZE", "Status", "StatusMsg", "VERSION", "decode", "encode", "hello_frames", "pack_imm",
           "parse_hello", "unpack_imm"]
