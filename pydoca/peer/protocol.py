"""Wire format of the peer protocol (version 2): control frames.

Every control message is one RDMA send of at most :data:`SLOT_SIZE` bytes::

    magic "PDPR" | version u8 | type u8 | flags u16 | seq u32 | length u32 | body

(little endian, 16-byte header; ``length`` is the body length). Parsing is
strict: wrong magic, version, type, flags, length or body size raises
:class:`FrameError`.

A WRITE with :data:`FLAG_POSTED` (inline only) is answered only when it
fails (STATUS with its seq and FLAG_POSTED, which returns its credit); the
responder returns credits for posted writes whose handlers ran in CREDIT
frames (``count u32``, seq 0).

Data messages (WRITE, READ, CALL, READY, RESULT) share one body layout,
``ep u16 | slot u16 | offset u64 | length u64 | inline payload``. With
:data:`FLAG_IN_BUFFER` the payload is not inline: it lies in the requester's
private region of the responder's memory, at the endpoint's slot + offset
(the requester placed it there with an RDMA write before sending the frame,
or the responder placed it there for the requester to RDMA-read). ``slot``
names which of a write endpoint's slots a WRITE with FLAG_IN_BUFFER used
(the hello's ``slots`` for that endpoint, default 1; it was a zero pad
before, and is 0 in every other frame, so peers that predate it interoperate:
a requester uses slot > 0 only where the hello offers it).
"""
from __future__ import annotations

import enum
import json
import struct
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Tuple, Type, Union

MAGIC = b"PDPR"
VERSION = 2
HEADER = struct.Struct("<4sBBHII")
SLOT_SIZE = 8192                               # every control message fits one receive slot
MAX_BODY = SLOT_SIZE - HEADER.size
MAX_HELLO = 1 << 20                            # reassembled hello limit
MAX_NAME = 256
NONCE = 16                                     # bytes of a challenge nonce
MAC = 32                                       # bytes of an HMAC-SHA256

FLAG_MORE = 0x1        # HELLO: more fragments follow
FLAG_WAIT = 0x2        # WRITE/READ/CALL: queue if the endpoint is busy (else BUSY)
FLAG_IN_BUFFER = 0x4   # WRITE/CALL/READY/RESULT: the data lies in the requester's slot, not inline
FLAG_POSTED = 0x8      # WRITE (inline): answer only a failure; STATUS: that failure (its credit back)
_KNOWN_FLAGS = FLAG_MORE | FLAG_WAIT | FLAG_IN_BUFFER | FLAG_POSTED


class FrameError(ValueError):
    """A control message that does not parse."""


class MsgType(enum.IntEnum):
    IDENT = 1      # requester -> responder: name, key id, nonce (first message)
    HELLO = 2      # responder -> requester: JSON document (fragmented)
    CHALLENGE = 3  # responder -> requester: nonce to prove the token with
    AUTH = 4       # requester -> responder: HMAC over both nonces
    STATUS = 5     # responder: final status of an operation (code + message)
    WRITE = 6      # requester: data for a write endpoint (inline or in its slot)
    READ = 7       # requester: run a read endpoint for [offset, offset+length)
    CALL = 8       # requester: call with a payload (inline or in its slot)
    READY = 9      # responder: read data (inline or in the requester's slot)
    RESULT = 10    # responder: call result (inline or in the requester's slot)
    CREDIT = 11    # responder: this many posted writes are done (their handlers ran)


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
    key_id: str
    nonce: bytes


@dataclass(frozen=True)
class Hello:
    chunk: bytes


@dataclass(frozen=True)
class Challenge:
    nonce: bytes


@dataclass(frozen=True)
class Auth:
    mac: bytes


@dataclass(frozen=True)
class StatusMsg:
    code: Status
    message: str


@dataclass(frozen=True)
class Credit:
    count: int


@dataclass(frozen=True)
class Data:
    """WRITE, READ, CALL, READY and RESULT: endpoint, range, inline payload, and the slot of a WRITE whose
    data lies in the requester's region (0 otherwise)."""

    ep: int
    offset: int
    length: int
    payload: bytes = b""
    slot: int = 0


class Write(Data):
    pass


class Read(Data):
    pass


class Call(Data):
    pass


class Ready(Data):
    pass


class Result(Data):
    pass


Message = Union[Ident, Hello, Challenge, Auth, StatusMsg, Credit, Data]

DATA = struct.Struct("<HHQQ")
INLINE_MAX = MAX_BODY - DATA.size              # largest inline payload of a data frame
_IDENT = struct.Struct("<HH")
_STATUS = struct.Struct("<H")
_CREDIT = struct.Struct("<I")


@dataclass(frozen=True)
class Frame:
    type: MsgType
    flags: int
    seq: int
    msg: Message


def _d_ident(body: bytes) -> Ident:
    if len(body) < _IDENT.size + NONCE:
        raise FrameError(f"IDENT body is {len(body)} bytes, expected at least {_IDENT.size + NONCE}")
    nlen, klen = _IDENT.unpack_from(body)
    rest = body[_IDENT.size:]
    if nlen > MAX_NAME or klen > MAX_NAME or len(rest) != nlen + klen + NONCE:
        raise FrameError("IDENT lengths do not match its body")
    try:
        name, key_id = rest[:nlen].decode("utf-8"), rest[nlen:nlen + klen].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FrameError("IDENT name or key id is not UTF-8") from exc
    return Ident(name, key_id, bytes(rest[nlen + klen:]))


def _fixed(size: int, what: str, make: Callable[[bytes], Message]) -> Callable[[bytes], Message]:
    def decode(body: bytes) -> Message:
        if len(body) != size:
            raise FrameError(f"{what} body is {len(body)} bytes, expected {size}")
        return make(bytes(body))
    return decode


def _d_status(body: bytes) -> StatusMsg:
    if len(body) < _STATUS.size:
        raise FrameError(f"STATUS body is {len(body)} bytes, expected at least {_STATUS.size}")
    (code,) = _STATUS.unpack_from(body)
    try:
        return StatusMsg(Status(code), body[_STATUS.size:].decode("utf-8", errors="replace"))
    except ValueError as exc:
        raise FrameError(f"STATUS has unknown code {code}") from exc


def _data(cls: Type[Data]) -> Callable[[bytes], Message]:
    def decode(body: bytes) -> Message:
        if len(body) < DATA.size:
            raise FrameError(f"{cls.__name__.upper()} body is {len(body)} bytes, expected at least {DATA.size}")
        ep, slot, off, length = DATA.unpack_from(body)
        return cls(ep, off, length, bytes(body[DATA.size:]), slot)
    return decode


_DECODERS: Dict[MsgType, Callable[[bytes], Message]] = {
    MsgType.IDENT: _d_ident,
    MsgType.HELLO: lambda b: Hello(bytes(b)),
    MsgType.CHALLENGE: _fixed(NONCE, "CHALLENGE", Challenge),
    MsgType.AUTH: _fixed(MAC, "AUTH", Auth),
    MsgType.STATUS: _d_status,
    MsgType.WRITE: _data(Write),
    MsgType.READ: _data(Read),
    MsgType.CALL: _data(Call),
    MsgType.READY: _data(Ready),
    MsgType.RESULT: _data(Result),
    MsgType.CREDIT: _fixed(_CREDIT.size, "CREDIT", lambda b: Credit(_CREDIT.unpack(b)[0])),
}

_BY_VALUE: Dict[int, MsgType] = {int(t): t for t in MsgType}

_TYPES: Dict[Type[Any], MsgType] = {
    Ident: MsgType.IDENT, Hello: MsgType.HELLO, Challenge: MsgType.CHALLENGE, Auth: MsgType.AUTH,
    StatusMsg: MsgType.STATUS, Write: MsgType.WRITE, Read: MsgType.READ, Call: MsgType.CALL,
    Ready: MsgType.READY, Result: MsgType.RESULT, Credit: MsgType.CREDIT,
}


def _body(msg: Message) -> bytes:
    if isinstance(msg, Data):                 # the common case first
        return DATA.pack(msg.ep, msg.slot, msg.offset, msg.length) + msg.payload
    if isinstance(msg, Ident):
        name, key = msg.name.encode("utf-8")[:MAX_NAME], msg.key_id.encode("utf-8")[:MAX_NAME]
        if len(msg.nonce) != NONCE:
            raise ValueError(f"IDENT nonce must be {NONCE} bytes")
        return _IDENT.pack(len(name), len(key)) + name + key + msg.nonce
    if isinstance(msg, Hello):
        return msg.chunk
    if isinstance(msg, Challenge):
        return msg.nonce
    if isinstance(msg, Auth):
        return msg.mac
    if isinstance(msg, StatusMsg):
        return _STATUS.pack(int(msg.code)) + msg.message.encode("utf-8")[:MAX_BODY - _STATUS.size]
    if isinstance(msg, Credit):
        return _CREDIT.pack(msg.count)
    return DATA.pack(msg.ep, msg.slot, msg.offset, msg.length) + msg.payload


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
    kind = _BY_VALUE.get(mtype)
    if kind is None:
        raise FrameError(f"unknown message type {mtype}")
    msg = _DECODERS[kind](data[HEADER.size:])
    if isinstance(msg, Data):
        _check_data(kind, flags, msg)
    return Frame(kind, flags, seq, msg)


def _check_data(kind: MsgType, flags: int, msg: Data) -> None:
    in_buffer = bool(flags & FLAG_IN_BUFFER)
    if msg.slot and (kind is not MsgType.WRITE or not in_buffer):
        raise FrameError(f"{kind.name} names slot {msg.slot}: only a WRITE with FLAG_IN_BUFFER names one")
    if flags & FLAG_POSTED and (kind is not MsgType.WRITE or in_buffer):
        raise FrameError(f"FLAG_POSTED is for inline WRITEs, not {kind.name}{' in buffer' if in_buffer else ''}")
    if kind is MsgType.READ:
        if msg.payload or in_buffer:
            raise FrameError("READ carries no payload")
    elif in_buffer and msg.payload:
        raise FrameError(f"{kind.name} with FLAG_IN_BUFFER carries an inline payload")
    elif not in_buffer and len(msg.payload) != msg.length:
        raise FrameError(f"{kind.name} says {msg.length} bytes, carries {len(msg.payload)} inline")


def hello_frames(doc: Dict[str, Any]) -> List[bytes]:
    """The hello document as HELLO frames (FLAG_MORE on all but the last)."""
    blob = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    if len(blob) > MAX_HELLO:
        raise ValueError(f"hello of {len(blob)} bytes exceeds {MAX_HELLO}")
    chunks = [blob[i:i + MAX_BODY] for i in range(0, len(blob), MAX_BODY)] or [b""]
    return [encode(Hello(c), 0, FLAG_MORE if i < len(chunks) - 1 else 0) for i, c in enumerate(chunks)]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


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
    if not isinstance(eps, list) or not isinstance(doc.get("instance"), str) or \
            not isinstance(doc.get("region", ""), str):
        raise FrameError("hello lacks endpoints, instance or region")
    for ep in eps:
        if not (isinstance(ep, dict) and _is_int(ep.get("id")) and isinstance(ep.get("path"), str)
                and ep.get("kind") in ("write", "read", "call") and _is_int(ep.get("size"))
                and isinstance(ep.get("rights"), str) and _is_int(ep.get("slot", -1))
                and _is_int(ep.get("slots", 1)) and 1 <= ep.get("slots", 1) <= 0xFFFF):
            raise FrameError(f"malformed endpoint entry in hello: {ep!r}"[:200])
    return doc


__all__ = ["Auth", "Call", "Challenge", "Credit", "DATA", "Data", "FLAG_IN_BUFFER", "FLAG_MORE", "FLAG_POSTED",
           "FLAG_WAIT", "Frame",
           "FrameError", "HEADER", "Hello", "INLINE_MAX", "Ident", "MAC", "MAGIC", "MAX_BODY", "Message", "MsgType",
           "NONCE", "Read", "Ready", "Result", "SLOT_SIZE", "Status", "StatusMsg", "VERSION", "Write", "decode",
           "encode", "hello_frames", "parse_hello"]
