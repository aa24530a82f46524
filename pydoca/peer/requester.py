"""The requester: a client of one responder's endpoints.

``Requester.connect("host:port")`` (RDMA CM) or ``Requester.from_descriptor
(path)``; then ``write``, ``read``, ``call`` (and ``awrite``, ``aread``,
``acall`` for asyncio). Each operation is a small state machine advanced by
control messages inside the progress engine's callbacks; the caller only
waits for it to finish, with a timeout. Up to ``window`` operations may be
in flight (async); an operation that times out is abandoned, and any
endpoint the responder grants it later is released at once.
"""
from __future__ import annotations

import asyncio
import base64
import ipaddress
import os
import socket
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union, overload

import numpy as np

from pydoca._log import get_logger

from .. import aio
from ..buffer import Buffer, BufferInventory
from ..ctx import Task
from ..device import Device, devices
from ..errors import DocaError, NotFoundError
from ..memory import Access, MemoryMap
from ..pe import ProgressEngine
from ..rdma import Connection, ConnectionState, Rdma
from . import protocol as P
from .channel import Channel
from .errors import (Disconnected, NotFound, PeerError, PeerTimeout, ProtocolError, Rejected, StaleDescriptor,
                     Unavailable, error_for)
from .files import check_not_stale, read_responder_file
from .spec import split_address

log = get_logger()

STAGE = 64 * 1024          # payloads up to this size go through pre-registered staging memory
INLINE_CALL = P.MAX_BODY - 2
MAX_ABANDONED = 1024
BytesLike = Union[bytes, bytearray, memoryview]


@dataclass(frozen=True)
class EndpointInfo:
    """An endpoint as the responder announced it."""

    id: int
    path: str
    kind: str
    size: int


class _Remote:
    def __init__(self, info: EndpointInfo, rmap: MemoryMap) -> None:
        self.info, self.rmap = info, rmap


class _Op:
    """One operation in flight."""

    def __init__(self, seq: int, kind: str, ep: _Remote, offset: int, length: int) -> None:
        self.seq, self.kind, self.ep, self.offset, self.length = seq, kind, ep, offset, length
        self.stage = "request"
        self.value: Any = None
        self.error: Optional[BaseException] = None
        self.answered = False
        self.inflight = 0
        self.abandoned = False
        self.released = False
        self.src: Optional[Buffer] = None
        self.into: Optional[MemoryMap] = None
        self.slot: Optional[int] = None
        self.tmp: Optional[bytearray] = None
        self.own: List[Any] = []

    @property
    def finished(self) -> bool:
        return self.answered and self.inflight == 0


def _route_device(host: str, device: Optional[str]) -> Device:
    """The local device to reach ``host`` from: by name, by the route's source address, or the first one."""
    if device:
        return Device.open(ibdev_name=device)
    ip = str(socket.getaddrinfo(host, None)[0][4][0])
    candidates = [ip] if ipaddress.ip_address(ip).is_loopback else []
    try:
        with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((ip, 9))
            candidates.append(s.getsockname()[0])
    except OSError:
        pass
    for cand in candidates:
        try:
            return Device.open(ip=cand)
        except NotFoundError:
            continue
    found = [d for d in devices() if d.ipv4 or d.ipv6]
    if not found:
        raise Unavailable("no DOCA device with an IP address on this host")
    return Device.open(ibdev_name=found[0].ibdev_name)


class Requester:
    """A connection to one responder. Use ``connect``/``from_descriptor``/``open``."""

    def __init__(self, *, timeout: float = 10.0, window: int = 4, name: Optional[str] = None,
                 token: Optional[bytes] = None, progress_mode: str = "blocking") -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        self.timeout, self.window = timeout, window
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.token, self.progress_mode = token, progress_mode
        self.hello: Dict[str, Any] = {}
        self.identity = ""
        self.instance = ""
        self.address = ""
        self._remotes: Dict[str, _Remote] = {}
        self._ops: Dict[int, _Op] = {}
        self._seq = 0
        self._hello_parts: List[bytes] = []
        self._hello_done = False
        self._fatal: Optional[PeerError] = None
        self._closed = False
        self._resources: List[Any] = []
        self.conn: Optional[Connection] = None

    # -- construction ---------------------------------------------------------
    @classmethod
    def connect(cls, address: str, *, timeout: float = 10.0, device: Optional[str] = None,
                expect_instance: Optional[str] = None, **kw: Any) -> "Requester":
        """Connect by RDMA CM to a responder at ``host:port`` and receive its hello."""
        host, port = split_address(address)
        req = cls(timeout=timeout, **kw)
        try:
            req._connect(host, port, device, timeout, expect_instance)
        except BaseException:
            req.close()
            raise
        return req

    @classmethod
    def from_descriptor(cls, path: str, *, timeout: float = 10.0, **kw: Any) -> "Requester":
        """Connect to the responder a descriptor file names (StaleDescriptor if it is gone)."""
        rf = read_responder_file(path)
        check_not_stale(rf)
        kw.setdefault("token", rf.token)
        try:
            return cls.connect(rf.target, timeout=timeout, expect_instance=rf.instance, **kw)
        except StaleDescriptor:
            raise
        except Unavailable as exc:
            raise StaleDescriptor(f"descriptor file {path}: no responder answers at {rf.target} "
                                  f"(the file is stale or the responder is down): {exc}") from None

    @classmethod
    def open(cls, target: str, **kw: Any) -> "Requester":
        """``from_descriptor`` when ``target`` is an existing file, else ``connect``."""
        if os.path.exists(target):
            return cls.from_descriptor(target, **kw)
        return cls.connect(target, **kw)

    def _connect(self, host: str, port: int, device: Optional[str], timeout: float,
                 expect_instance: Optional[str]) -> None:
        self.address = f"{host}:{port}"
        self.dev = _route_device(host, device)
        self._resources.append(self.dev)
        self.pe = ProgressEngine(mode=self.progress_mode)
        self._resources.append(self.pe)
        recv_slots, send_slots = 2 * self.window + 8, 2 * self.window + 4
        self.inventory = BufferInventory(recv_slots + send_slots + 4 * self.window + 64)
        self._resources.append(self.inventory)
        self._stage_mem = np.zeros(self.window * STAGE, dtype=np.uint8)
        self._stage_view = self._stage_mem.data
        self._stage_map = MemoryMap(self.dev, self._stage_mem, access=Access.LOCAL_READ_WRITE)
        self._resources.append(self._stage_map)
        self._free_slots = list(range(self.window))
        self.rdma = Rdma(self.dev, self.pe, max_connections=1,
                         max_tasks=recv_slots + send_slots + 4 * self.window + 16)
        self.channel = Channel(self.dev, self.rdma, self.inventory, recv_slots=recv_slots, send_slots=send_slots,
                               on_message=self._on_message, on_imm=self._on_imm)
        self.rdma.on_connection = self._on_conn
        self.channel.post_all()
        ip = str(socket.getaddrinfo(host, None)[0][4][0])
        try:
            self.conn = self.rdma.connect_to(ip, port)
            self.conn.wait_established(timeout)
        except (DocaError, TimeoutError) as exc:
            raise Unavailable(f"no responder answers at {host}:{port}: {exc}") from None
        self.channel.send(self.conn, P.encode(P.Ident(self.name, self.token or b""), 0))
        try:
            self.pe.run_until(lambda: self._hello_done or self._fatal is not None, timeout, what="hello")
        except TimeoutError:
            raise PeerTimeout(f"{host}:{port} sent no hello within {timeout:g}s") from None
        if self._fatal is not None:
            raise self._fatal
        self._load_hello(expect_instance)

    def _load_hello(self, expect_instance: Optional[str]) -> None:
        doc = P.parse_hello(b"".join(self._hello_parts))
        self._hello_parts = []
        if expect_instance is not None and doc["instance"] != expect_instance:
            raise StaleDescriptor(f"the responder at {self.address} is instance {doc['instance']}, not "
                                  f"{expect_instance} named by the descriptor file: the file is stale")
        self.hello, self.instance = doc, doc["instance"]
        window = doc.get("window")
        if isinstance(window, int) and 0 < window < self.window:
            self.window = window                    # the responder sized its receive pool for this
        self.identity = str(doc.get("identity", ""))
        for e in doc["endpoints"]:
            info = EndpointInfo(e["id"], e["path"], e["kind"], e["size"])
            rmap = MemoryMap.from_export(self.dev, base64.b64decode(e["mmap"]))
            self._resources.append(rmap)
            self._remotes[info.path] = _Remote(info, rmap)
        log.debug("connected to responder", address=self.address, identity=self.identity,
                  endpoints=len(self._remotes))

    # -- public API -------------------------------------------------------------
    def endpoints(self) -> List[EndpointInfo]:
        """The responder's endpoints, from its hello."""
        return [r.info for r in self._remotes.values()]

    @property
    def service(self) -> str:
        return str(self.hello.get("service", ""))

    def write(self, path: str, data: Any, offset: int = 0, *, wait: bool = True,
              timeout: Optional[float] = None) -> None:
        """Write ``data`` into ``path``'s buffer at ``offset``; returns after the handler ran."""
        self._wait(self._start_write(path, data, offset, wait), timeout)

    @overload
    def read(self, path: str, length: Optional[int] = None, into: None = None, *, offset: int = 0,
             wait: bool = True, timeout: Optional[float] = None) -> bytes: ...

    @overload
    def read(self, path: str, length: Optional[int] = None, into: Any = None, *, offset: int = 0,
             wait: bool = True, timeout: Optional[float] = None) -> int: ...

    def read(self, path: str, length: Optional[int] = None, into: Any = None, *, offset: int = 0,
             wait: bool = True, timeout: Optional[float] = None) -> Union[bytes, int]:
        """Read from ``path`` (after its handler filled it): bytes, or with ``into`` (a writable
        buffer, filled zero-copy) the number of bytes read."""
        return self._wait(self._start_read(path, length, into, offset, wait), timeout)  # type: ignore[no-any-return]

    def call(self, path: str, payload: Any = b"", *, wait: bool = True, timeout: Optional[float] = None) -> bytes:
        """Call ``path``'s handler with ``payload``; returns its response."""
        return self._wait(self._start_call(path, payload, wait), timeout)  # type: ignore[no-any-return]

    async def awrite(self, path: str, data: Any, offset: int = 0, *, wait: bool = True,
                     timeout: Optional[float] = None) -> None:
        await self._window_free(timeout)
        await self._await(self._start_write(path, data, offset, wait), timeout)

    async def aread(self, path: str, length: Optional[int] = None, into: Any = None, *, offset: int = 0,
                    wait: bool = True, timeout: Optional[float] = None) -> Any:
        """Async :meth:`read` (bytes, or the count with ``into``)."""
        await self._window_free(timeout)
        return await self._await(self._start_read(path, length, into, offset, wait), timeout)

    async def acall(self, path: str, payload: Any = b"", *, wait: bool = True,
                    timeout: Optional[float] = None) -> bytes:
        await self._window_free(timeout)
        return await self._await(self._start_call(path, payload, wait), timeout)  # type: ignore[no-any-return]

    def close(self) -> None:
        """Disconnect and release everything. Idempotent."""
        if self._closed:
            return
        self._closed = True
        channel: Optional[Channel] = getattr(self, "channel", None)
        if channel is not None:
            channel.closing = True
        if self.conn is not None:
            self.conn.disconnect()
        for op in list(self._ops.values()):
            self._answer(op, error=Disconnected("requester closed"))
        rdma: Optional[Rdma] = getattr(self, "rdma", None)
        try:
            if rdma is not None:
                rdma.close()
        finally:
            for op in list(self._ops.values()):
                op.inflight = 0
                self._cleanup(op)
            self._ops.clear()
            if channel is not None:
                channel.close()
            for res in reversed(self._resources):
                res.close()
            self._resources.clear()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Requester":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "Requester":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Requester {self.address} {self.identity or '-'} {'closed' if self._closed else 'open'}>"

    # -- waiting ----------------------------------------------------------------
    def _outcome(self, op: _Op) -> Any:
        if op.error is not None:
            raise op.error
        return op.value

    def _wait(self, op: _Op, timeout: Optional[float]) -> Any:
        limit = self.timeout if timeout is None else timeout
        try:
            self.pe.run_until(lambda: op.finished, limit, what=f"{op.kind} {op.ep.info.path}")
        except TimeoutError:
            self._abandon(op)
            raise PeerTimeout(f"{op.kind} {op.ep.info.path} timed out after {limit:g}s") from None
        except BaseException:
            self._abandon(op)
            raise
        return self._outcome(op)

    async def _await(self, op: _Op, timeout: Optional[float]) -> Any:
        limit = self.timeout if timeout is None else timeout
        try:
            await aio.wait_for(self.pe, lambda: op.finished, timeout=limit)
        except (asyncio.TimeoutError, TimeoutError):
            self._abandon(op)
            raise PeerTimeout(f"{op.kind} {op.ep.info.path} timed out after {limit:g}s") from None
        except BaseException:
            self._abandon(op)
            raise
        return self._outcome(op)

    async def _window_free(self, timeout: Optional[float]) -> None:
        self._check_usable()
        def busy() -> bool:
            return sum(not o.abandoned for o in self._ops.values()) >= self.window
        if busy():
            try:
                await aio.wait_for(self.pe, lambda: not busy() or self._fatal is not None,
                                   timeout=self.timeout if timeout is None else timeout)
            except (asyncio.TimeoutError, TimeoutError):
                raise PeerTimeout("no free slot in the requester's window") from None

    def _abandon(self, op: _Op) -> None:
        if op.finished:
            return
        op.abandoned = True
        if op.inflight:
            # a transfer is in flight: tear the connection down so nothing lands late
            log.warning("operation abandoned with a transfer in flight: disconnecting", seq=op.seq)
            self._break(PeerTimeout("connection closed after a timed-out transfer"))
            try:
                self.pe.run_until(lambda: op.inflight == 0, 5.0, what="flushed transfer")
            except TimeoutError:
                log.error("in-flight transfer did not complete after disconnect", seq=op.seq)
            self._answer(op, error=PeerTimeout("abandoned"))
            return
        self._release_local(op)
        abandoned = [o for o in self._ops.values() if o.abandoned]
        for old in abandoned[:max(0, len(abandoned) - MAX_ABANDONED)]:
            self._ops.pop(old.seq, None)

    def _check_usable(self) -> None:
        if self._closed:
            raise Disconnected("requester is closed")
        if self._fatal is not None:
            raise self._fatal

    # -- operation starts ---------------------------------------------------------
    def _remote(self, path: str, kind: str) -> _Remote:
        self._check_usable()
        r = self._remotes.get(path)
        if r is None:
            raise NotFound(f"no endpoint {path!r} (have: {', '.join(self._remotes) or 'none'})")
        if r.info.kind != kind:
            raise Rejected(f"{path} is a {r.info.kind} endpoint, not {kind}")
        return r

    def _new_op(self, kind: str, ep: _Remote, offset: int, length: int) -> _Op:
        self._seq = self._seq % 0xFFFFFFFF + 1
        op = _Op(self._seq, kind, ep, offset, length)
        self._ops[op.seq] = op
        return op

    def _send(self, op: _Op, msg: P.Message, flags: int = 0) -> None:
        assert self.conn is not None

        def sent(ok: bool) -> None:
            if not ok:
                self._answer(op, error=Disconnected(f"control message for {op.kind} could not be sent"))
        self.channel.send(self.conn, P.encode(msg, op.seq, flags), sent)

    def _source(self, op: _Op, data: Any) -> None:
        """The local source buffer for ``data`` (staged copy, or registered in place)."""
        view = memoryview(data)
        n = view.nbytes
        if n <= STAGE and self._free_slots:
            op.slot = self._free_slots.pop()
            start = op.slot * STAGE
            self._stage_view[start:start + n] = view.cast("B")
            op.src = self.inventory.buffer(self._stage_map, offset=start, length=STAGE, data_len=n)
        else:
            access = Access.LOCAL_READ_ONLY if view.readonly else Access.LOCAL_READ_WRITE
            mmap = MemoryMap(self.dev, data, access=access)
            op.own.append(mmap)
            op.src = self.inventory.buffer(mmap, data_len=n)
        op.own.append(op.src)

    def _start_write(self, path: str, data: Any, offset: int, wait: bool) -> _Op:
        ep = self._remote(path, "write")
        n = memoryview(data).nbytes
        if n == 0:
            raise ValueError("nothing to write (empty data)")
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        op = self._new_op("write", ep, offset, n)
        try:
            self._source(op, data)
        except BaseException:
            self._ops.pop(op.seq, None)
            self._cleanup(op)
            raise
        op.stage = "acquire"
        self._send(op, P.Acquire(ep.info.id, P.Op.WRITE, offset, n), P.FLAG_WAIT if wait else 0)
        return op

    def _start_read(self, path: str, length: Optional[int], into: Any, offset: int, wait: bool) -> _Op:
        ep = self._remote(path, "read")
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        into_len = None
        if into is not None:
            into_len = memoryview(into).nbytes
            if length is not None and length > into_len:
                raise ValueError(f"length {length} exceeds the {into_len}-byte buffer given as into")
        if length is None:
            length = into_len if into_len is not None else max(0, ep.info.size - offset)
        if length < 0:
            raise ValueError(f"length must be >= 0, got {length}")
        op = self._new_op("read", ep, offset, length)
        if into is not None and length > 0:
            try:
                op.into = MemoryMap(self.dev, into, access=Access.LOCAL_READ_WRITE)
            except BaseException:
                self._ops.pop(op.seq, None)
                raise
            op.own.append(op.into)
        op.value = 0 if into is not None else b""
        self._send(op, P.Read(ep.info.id, offset, length), P.FLAG_WAIT if wait else 0)
        return op

    def _start_call(self, path: str, payload: Any, wait: bool) -> _Op:
        ep = self._remote(path, "call")
        if isinstance(payload, str):
            payload = payload.encode("utf-8")
        view = memoryview(payload)
        n = view.nbytes
        op = self._new_op("call", ep, 0, ep.info.size)
        flags = P.FLAG_WAIT if wait else 0
        if n <= INLINE_CALL:
            self._send(op, P.Call(ep.info.id, view.tobytes()), flags)
            return op
        try:
            self._source(op, payload)
        except BaseException:
            self._ops.pop(op.seq, None)
            self._cleanup(op)
            raise
        op.stage, op.length = "acquire", n
        self._send(op, P.Acquire(ep.info.id, P.Op.CALL, 0, n), flags)
        return op

    # -- completion -----------------------------------------------------------------
    def _answer(self, op: _Op, value: Any = None, error: Optional[BaseException] = None) -> None:
        if op.answered:
            return
        op.answered = True
        if error is not None:
            op.error = error
        else:
            op.value = value
        self._maybe_done(op)

    def _maybe_done(self, op: _Op) -> None:
        if op.finished:
            self._cleanup(op)
            self._ops.pop(op.seq, None)

    def _release_local(self, op: _Op) -> None:
        """Free local buffers (no transfer may be in flight)."""
        for res in reversed(op.own):
            try:
                res.close()
            except Exception as exc:  # noqa: BLE001
                log.debug("closing an operation buffer failed", error=str(exc))
        op.own.clear()
        op.src = op.into = None
        if op.slot is not None:
            self._free_slots.append(op.slot)
            op.slot = None

    def _cleanup(self, op: _Op) -> None:
        if op.inflight == 0:
            self._release_local(op)

    def _release(self, op: _Op) -> None:
        """Tell the responder we are done with the endpoint (fire and forget)."""
        if op.released or self._closed or self.conn is None:
            return
        op.released = True
        self.channel.send(self.conn, P.encode(P.Done(op.ep.info.id), op.seq))

    def _break(self, error: PeerError) -> None:
        if self._fatal is None:
            self._fatal = error
        if self.conn is not None:
            self.conn.disconnect()
        for op in list(self._ops.values()):
            self._answer(op, error=error)

    # -- events (inside progress) -----------------------------------------------------
    def _on_conn(self, conn: Connection, state: ConnectionState) -> None:
        if conn is self.conn and state in (ConnectionState.DISCONNECTED, ConnectionState.FAILED):
            self._break(Disconnected(f"connection to {self.address} {state.value}"))

    def _on_imm(self, conn: Connection, imm: int, length: int) -> None:
        self._break(ProtocolError(f"unexpected write-with-immediate {imm:#x} from the responder"))

    def _on_message(self, conn: Connection, data: bytes) -> None:
        try:
            frame = P.decode(data)
        except P.FrameError as exc:
            self._break(ProtocolError(f"malformed message from the responder: {exc}"))
            return
        msg = frame.msg
        if isinstance(msg, P.Hello):
            self._hello_parts.append(msg.chunk)
            if sum(map(len, self._hello_parts)) > P.MAX_HELLO:
                self._break(ProtocolError("hello too large"))
            elif not frame.flags & P.FLAG_MORE:
                self._hello_done = True
            return
        op = self._ops.get(frame.seq)
        if op is None:
            if frame.seq == 0 and isinstance(msg, P.StatusMsg):
                self._break(error_for(msg.code, msg.message))
            elif isinstance(msg, (P.Grant, P.Ready)) or (isinstance(msg, P.Result) and frame.flags & P.FLAG_IN_BUFFER):
                self.channel.send(conn, P.encode(P.Done(msg.ep), frame.seq))   # late answer: release
            return
        try:
            self._advance(op, frame)
        except Exception as exc:  # noqa: BLE001 - the operation fails, the loop goes on
            log.debug("operation failed locally", seq=op.seq, error=repr(exc))
            if op.stage in ("data", "reading", "granted"):
                self._release(op)
            self._answer(op, error=exc if isinstance(exc, PeerError) else PeerError(f"{type(exc).__name__}: {exc}"))

    def _advance(self, op: _Op, frame: P.Frame) -> None:
        msg = frame.msg
        if op.abandoned or op.answered:
            if isinstance(msg, (P.Grant, P.Ready)) or (isinstance(msg, P.Result) and frame.flags & P.FLAG_IN_BUFFER):
                self._release(op)
            self._answer(op, error=PeerTimeout("abandoned"))
            return
        if isinstance(msg, P.StatusMsg):
            if msg.code is not P.Status.OK:
                self._answer(op, error=error_for(msg.code, msg.message))
            elif op.kind == "write" and op.stage == "data":
                self._answer(op)
            else:
                raise ProtocolError(f"unexpected OK status for {op.kind} in stage {op.stage}")
        elif isinstance(msg, P.Grant) and op.stage == "acquire" and msg.ep == op.ep.info.id:
            op.stage = "granted"
            self._submit_write(op)
        elif isinstance(msg, P.Ready) and op.kind == "read" and op.stage == "request":
            op.stage = "granted"
            if msg.length > op.length or msg.offset != op.offset:
                raise ProtocolError(f"READY for {msg.length} bytes at {msg.offset}, asked {op.length} at {op.offset}")
            self._submit_read(op, msg.offset, msg.length)
        elif isinstance(msg, P.Result) and op.kind == "call" and op.stage in ("request", "data"):
            if not frame.flags & P.FLAG_IN_BUFFER:
                if len(msg.payload) != msg.length:
                    raise ProtocolError("inline RESULT length mismatch")
                self._answer(op, msg.payload)
                return
            op.stage = "granted"
            if msg.offset + msg.length > op.ep.info.size:
                raise ProtocolError(f"RESULT of {msg.length} bytes does not fit {op.ep.info.path}")
            self._cleanup(op)                       # the payload source is no longer needed
            self._submit_read(op, msg.offset, msg.length)
        else:
            raise ProtocolError(f"unexpected {frame.type.name} for {op.kind} in stage {op.stage}")

    def _track(self, op: _Op, task: "Task[Any]", then: Any) -> None:
        op.inflight += 1

        def done(t: "Task[Any]") -> None:
            op.inflight -= 1
            try:
                if t.error is not None:
                    self._release(op)
                    self._answer(op, error=Disconnected(f"RDMA {op.kind} failed: {t.error}"))
                elif not op.answered:
                    then()
            finally:
                self._maybe_done(op)
        task.add_done_callback(done)

    def _submit_write(self, op: _Op) -> None:
        assert op.src is not None and self.conn is not None
        dst = self.inventory.buffer(op.ep.rmap, offset=op.offset, length=op.length, empty=True)
        op.own.append(dst)
        op.stage = "data"
        task = self.rdma.write_imm(self.conn, op.src, dst, P.pack_imm(op.ep.info.id, op.seq))
        self._track(op, task, lambda: None)

    def _submit_read(self, op: _Op, offset: int, n: int) -> None:
        assert self.conn is not None
        if n == 0:
            self._release(op)
            self._answer(op, op.value if op.kind == "read" else b"")
            return
        start = 0
        if op.into is not None:
            dst = self.inventory.buffer(op.into, length=n, empty=True)
        elif n <= STAGE and (op.slot is not None or self._free_slots):
            if op.slot is None:                     # (a call's payload slot is free again: reuse it)
                op.slot = self._free_slots.pop()
            start = op.slot * STAGE
            dst = self.inventory.buffer(self._stage_map, offset=start, length=n, empty=True)
        else:
            op.tmp = bytearray(n)
            mmap = MemoryMap(self.dev, op.tmp, access=Access.LOCAL_READ_WRITE)
            op.own.append(mmap)
            dst = self.inventory.buffer(mmap, empty=True)
        op.own.append(dst)
        src = self.inventory.buffer(op.ep.rmap, offset=offset, length=n, data_len=n)
        op.own.append(src)
        op.stage = "reading"

        def landed() -> None:
            self._release(op)
            if op.into is not None:
                value: Any = n
            elif op.tmp is not None:
                value = bytes(op.tmp)
            else:
                value = self._stage_view[start:start + n].tobytes()
            self._answer(op, value)
        self._track(op, self.rdma.read(self.conn, src, dst), landed)


__all__ = ["EndpointInfo", "Requester"]
