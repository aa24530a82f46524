"""The responder: endpoints served to many requesters from one progress loop.

One Rdma context listens on ``HOST:PORT`` (RDMA CM) and accepts up to
``max_connections`` requesters. Receive completions, connection events and
immediates are queued by the engine callbacks and handled by ``run_once()``
outside them, so handlers are plain Python run on the serving thread.
Each endpoint has a lock: one operation at a time, others wait in a bounded
queue (or get BUSY). A requester that vanishes releases everything it held.
"""
from __future__ import annotations

import base64
import collections
import hmac
import inspect
import os
import secrets
import socket
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple, Union

import numpy as np

from pydoca._log import get_logger

from ..buffer import BufferInventory
from ..device import Device, devices
from ..memory import Access, MemoryMap
from ..pe import ProgressEngine
from ..rdma import Connection, ConnectionState, Rdma
from . import protocol as P
from .channel import Channel
from .spec import DEFAULT_QUEUE, EndpointSpec, Kind, ServiceSpec, check_path, resolve_handler, split_address

log = get_logger()

INLINE_RESULT = P.MAX_BODY - 20          # RESULT header inside the body is 20 bytes
Handler = Callable[..., Any]


@dataclass(frozen=True)
class RequesterInfo:
    """Who is asking: the name the requester gave and its connection number."""

    id: int
    name: str
    address: Optional[str] = None

    def __str__(self) -> str:
        return f"{self.name}#{self.id}"


class Endpoint:
    """One endpoint: its buffer (registered at start), handler, lock and queue."""

    def __init__(self, ep_id: int, path: str, kind: Kind, size: int, handler: Optional[Handler],
                 queue: int, description: str = "") -> None:
        self.id, self.path, self.kind, self.size = ep_id, check_path(path), Kind(kind), size
        self.handler, self.queue, self.description = handler, queue, description
        self.wants_requester = handler is not None and _arity(handler) > (1 if self.kind is Kind.CALL else 2)
        self.mem = np.zeros(size, dtype=np.uint8)
        self.mmap: Optional[MemoryMap] = None
        self.blob = b""
        self.owner: Optional[_Request] = None
        self.waiting: Deque[_Request] = collections.deque()
        self.ops = 0
        self.errors = 0

    def view(self, offset: int, length: int) -> memoryview:
        return self.mem.data[offset:offset + length]

    def __repr__(self) -> str:
        return f"<Endpoint {self.path} {self.kind.value} {self.size}B>"


def _arity(fn: Handler) -> int:
    """Positional parameters ``fn`` accepts (99 with ``*args``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 99
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 99
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


class _Peer:
    def __init__(self, pid: int, conn: Connection) -> None:
        self.id, self.conn = pid, conn
        self.info: Optional[RequesterInfo] = None
        self.gone = False
        self.kill_at: Optional[float] = None
        self.ident_deadline: Optional[float] = None


@dataclass
class _Request:
    peer: _Peer
    seq: int
    op: P.Op
    offset: int
    length: int
    staged: bool                      # needs GRANT then a write-with-immediate
    payload: Optional[bytes] = None   # inline call payload
    stage: str = "queued"             # queued | data | done
    deadline: float = field(default=0.0)


class Responder:
    """Serves endpoints over RDMA. Add endpoints, ``start()``, then ``serve_forever()``."""

    def __init__(self, listen: str, *, name: str = "Service", device: Optional[str] = None,
                 max_connections: int = 32, window: int = 4, lease_timeout: float = 30.0,
                 ident_timeout: float = 10.0, token: Optional[bytes] = None,
                 progress_mode: str = "blocking") -> None:
        self.host, self.port = split_address(listen)
        self.name, self.device_name = name, device
        self.max_connections, self.window = max_connections, window
        self.lease_timeout, self.ident_timeout = lease_timeout, ident_timeout
        self.token, self.progress_mode = token, progress_mode
        self.instance = secrets.token_hex(16)
        self.endpoints: List[Endpoint] = []
        self._by_path: Dict[str, Endpoint] = {}
        self._peers: Dict[Connection, _Peer] = {}
        self._next_peer = 0
        self._inbox: Deque[Tuple[Any, ...]] = collections.deque()
        self._stopping = False
        self._started = False
        self._closed = False
        self._descriptor_path: Optional[str] = None
        self._resources: List[Any] = []

    # -- definition ---------------------------------------------------------
    def add_endpoint(self, path: str, kind: Union[Kind, str], size: int, handler: Optional[Handler] = None, *,
                     queue: int = DEFAULT_QUEUE, description: str = "") -> Endpoint:
        """Define an endpoint (before ``start()``)."""
        if self._started:
            raise RuntimeError("add endpoints before start()")
        if path in self._by_path:
            raise ValueError(f"duplicate endpoint path {path!r}")
        if not 0 < size:
            raise ValueError(f"buffer size must be > 0, got {size}")
        if Kind(kind) is Kind.CALL and handler is None:
            raise ValueError(f"call endpoint {path} needs a handler")
        if len(self.endpoints) >= 0xFFFF:
            raise ValueError("at most 65535 endpoints")
        ep = Endpoint(len(self.endpoints), path, Kind(kind), size, handler, queue, description)
        self.endpoints.append(ep)
        self._by_path[path] = ep
        return ep

    def _decorator(self, kind: Kind, path: str, size: int, **kw: Any) -> Callable[[Handler], Handler]:
        def register(fn: Handler) -> Handler:
            self.add_endpoint(path, kind, size, fn, **kw)
            return fn
        return register

    def write(self, path: str, size: int, **kw: Any) -> Callable[[Handler], Handler]:
        """Decorator: ``fn(view, length[, requester])`` runs after a write landed."""
        return self._decorator(Kind.WRITE, path, size, **kw)

    def read(self, path: str, size: int, **kw: Any) -> Callable[[Handler], Handler]:
        """Decorator: ``fn(view, length[, requester]) -> None | int | bytes`` fills the buffer."""
        return self._decorator(Kind.READ, path, size, **kw)

    def call(self, path: str, size: int, **kw: Any) -> Callable[[Handler], Handler]:
        """Decorator: ``fn(payload[, requester]) -> bytes`` answers a call."""
        return self._decorator(Kind.CALL, path, size, **kw)

    @classmethod
    def from_spec(cls, spec: ServiceSpec, listen: Optional[str] = None, **kw: Any) -> "Responder":
        """A responder with the spec's endpoints and handlers."""
        address = listen or spec.listen
        if address is None:
            raise ValueError("no listen address: pass one or set 'listen' in the spec")
        resp = cls(address, name=spec.name, **kw)
        for e in spec.endpoints:
            fn = resolve_handler(e.handler, spec.base_dir) if e.handler else None
            resp.add_endpoint(e.path, e.kind, e.size, fn, queue=e.queue, description=e.description)
        return resp

    def specs(self) -> List[EndpointSpec]:
        return [EndpointSpec(e.path, e.kind, e.size, None, e.queue, e.description) for e in self.endpoints]

    # -- lifecycle ------------------------------------------------------------
    def _open_device(self) -> Device:
        if self.device_name:
            return Device.open(ibdev_name=self.device_name)
        if self.host in ("0.0.0.0", "::", "*"):
            found = [d for d in devices() if d.ipv4]
            if not found:
                raise RuntimeError("no DOCA device with an IPv4 address to listen on")
            self.host = found[0].ipv4 or self.host
            return Device.open(ibdev_name=found[0].ibdev_name)
        return Device.open(ip=socket.gethostbyname(self.host))

    def start(self) -> "Responder":
        """Open the device, register endpoint buffers and listen."""
        if self._started:
            return self
        if not self.endpoints:
            raise ValueError("a responder needs at least one endpoint")
        self._started = True
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        log.info("responder listening", address=f"{self.host}:{self.port}", endpoints=len(self.endpoints),
                 instance=self.instance)
        return self

    def _start(self) -> None:
        self.dev = self._open_device()
        self._resources.append(self.dev)
        self.pe = ProgressEngine(mode=self.progress_mode)
        self._resources.append(self.pe)
        for ep in self.endpoints:
            access = Access.LOCAL_READ_WRITE | Access.RDMA_READ
            if ep.kind is not Kind.READ:
                access |= Access.RDMA_WRITE
            ep.mmap = MemoryMap(self.dev, ep.mem, access=access)
            self._resources.append(ep.mmap)
            ep.blob = ep.mmap.export_rdma()
        recv_slots = self.max_connections * (2 * self.window + 2)
        send_slots = 64
        self.inventory = BufferInventory(recv_slots + send_slots + 16)
        self._resources.append(self.inventory)
        self.rdma = Rdma(self.dev, self.pe, max_connections=self.max_connections, recv_queue_size=recv_slots,
                         send_queue_size=max(256, send_slots), max_tasks=recv_slots + send_slots + 16)
        self.channel = Channel(self.dev, self.rdma, self.inventory, recv_slots=recv_slots, send_slots=send_slots,
                               on_message=lambda c, d: self._inbox.append(("msg", c, d)),
                               on_imm=lambda c, imm, n: self._inbox.append(("imm", c, imm, n)))
        self.rdma.on_connection = lambda c, s: self._inbox.append(("conn", c, s))
        self.channel.post_all()
        self.rdma.listen(self.port, accept=self._accept)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __enter__(self) -> "Responder":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stop(self) -> None:
        """Make ``serve_forever()`` return after the current iteration."""
        self._stopping = True

    def serve_forever(self, until: Optional[Callable[[], bool]] = None, *, poll: float = 0.1) -> None:
        """Serve until ``stop()`` (or ``until()`` is true)."""
        self.start()
        self._stopping = False
        while not self._stopping and not (until is not None and until()):
            self.run_once(poll)

    def run_once(self, timeout: float = 0.1) -> int:
        """Wait up to ``timeout`` for events and handle them; returns how many."""
        if not self._inbox:
            self.pe.wait(timeout)
        self.pe.progress_all(limit=256)
        n = 0
        while self._inbox:
            item = self._inbox.popleft()
            n += 1
            try:
                self._dispatch(item)
            except Exception as exc:  # noqa: BLE001 - one bad event must not stop the server
                where = traceback.extract_tb(exc.__traceback__)[-1]
                log.error("responder event failed", what=item[0], error=repr(exc),
                          at=f"{os.path.basename(where.filename)}:{where.lineno}")
        self._maintain()
        return n

    def close(self) -> None:
        """Disconnect everyone and release every resource. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._remove_descriptor()
        channel: Optional[Channel] = getattr(self, "channel", None)
        if channel is not None:
            channel.closing = True
        for peer in list(self._peers.values()):
            peer.conn.disconnect()
        rdma: Optional[Rdma] = getattr(self, "rdma", None)
        if rdma is not None:
            try:
                rdma.close()
            finally:
                if channel is not None:
                    channel.close()
        for res in reversed(self._resources):
            res.close()
        self._resources.clear()
        self._peers.clear()

    # -- descriptor file --------------------------------------------------------
    def descriptor(self) -> Dict[str, Any]:
        """The payload of this responder's descriptor file (see pydoca.peer.files)."""
        from .files import responder_payload
        return responder_payload(self)

    def write_descriptor(self, path: str) -> None:
        """Write the descriptor file (atomic, mode 0600); removed again by ``close()``."""
        from .files import write_responder_file
        write_responder_file(path, self)
        self._descriptor_path = path

    def _remove_descriptor(self) -> None:
        path, self._descriptor_path = self._descriptor_path, None
        if path is None:
            return
        from .files import remove_if_ours
        remove_if_ours(path, self.instance)

    # -- events ---------------------------------------------------------------
    def _accept(self, conn: Connection) -> bool:
        live = sum(not p.gone for p in self._peers.values())
        if live >= self.max_connections:
            log.warning("connection rejected: max_connections reached", max_connections=self.max_connections)
            return False
        self._next_peer += 1
        self._peers[conn] = _Peer(self._next_peer, conn)
        return True

    def _dispatch(self, item: Tuple[Any, ...]) -> None:
        kind, conn = item[0], item[1]
        if kind == "conn":
            self._on_conn(conn, item[2])
            return
        peer = self._peers.get(conn)
        if kind == "drop":
            if peer is not None:
                self._drop(peer, item[2])
            return
        if peer is None or peer.gone or peer.kill_at is not None:
            log.debug("event from a connection that is not served", what=kind)
            return
        if kind == "msg":
            self._on_message(peer, item[2])
        else:
            self._on_imm(peer, item[2], item[3])

    def _on_conn(self, conn: Connection, state: ConnectionState) -> None:
        peer = self._peers.get(conn)
        if state is ConnectionState.ESTABLISHED:
            if peer is None:
                self._next_peer += 1
                peer = self._peers[conn] = _Peer(self._next_peer, conn)
            peer.ident_deadline = time.monotonic() + self.ident_timeout
            log.debug("requester connected", peer=peer.id)
        elif state in (ConnectionState.DISCONNECTED, ConnectionState.FAILED, ConnectionState.REJECTED):
            if peer is not None:
                self._drop(peer, f"connection {state.value}")

    def _drop(self, peer: _Peer, why: str) -> None:
        """Forget a requester: release its locks, drop its queued requests."""
        if peer.gone:
            return
        peer.gone = True
        log.info("requester gone", peer=str(peer.info or peer.id), reason=why)
        if peer.conn.state in (ConnectionState.ESTABLISHED, ConnectionState.PENDING):
            peer.conn.disconnect()
        self.channel.drop_outbox(peer.conn)
        for ep in self.endpoints:
            ep.waiting = collections.deque(r for r in ep.waiting if r.peer is not peer)
            if ep.owner is not None and ep.owner.peer is peer:
                ep.owner = None
                self._pump(ep)
        self._peers.pop(peer.conn, None)
        self.rdma._forget(peer.conn)

    def _violation(self, peer: _Peer, seq: int, why: str) -> None:
        """A requester broke the protocol: tell it, then disconnect it."""
        log.warning("protocol violation, disconnecting requester", peer=str(peer.info or peer.id), reason=why)
        peer.kill_at = time.monotonic() + 1.0
        self._send(peer, P.StatusMsg(P.Status.PROTOCOL_ERROR, why), seq,
                   on_done=lambda _ok: self._inbox.append(("drop", peer.conn, "protocol violation")))

    def _maintain(self) -> None:
        now = time.monotonic()
        for peer in list(self._peers.values()):
            if peer.kill_at is not None and now >= peer.kill_at:
                self._drop(peer, "protocol violation")
            elif peer.info is None and peer.ident_deadline is not None and now >= peer.ident_deadline:
                self._drop(peer, "no IDENT in time")
        for ep in self.endpoints:
            req = ep.owner
            if req is not None and req.stage in ("data", "done") and now >= req.deadline:
                log.warning("lease expired, disconnecting requester", endpoint=ep.path, peer=str(req.peer.info))
                self._drop(req.peer, f"lease on {ep.path} expired")

    # -- messages ---------------------------------------------------------------
    def _send(self, peer: _Peer, msg: P.Message, seq: int, flags: int = 0,
              on_done: Optional[Callable[[bool], None]] = None) -> None:
        if peer.gone:
            return
        self.channel.send(peer.conn, P.encode(msg, seq, flags), on_done)

    def _status(self, peer: _Peer, seq: int, code: P.Status, message: str = "") -> None:
        self._send(peer, P.StatusMsg(code, message), seq)

    def _on_message(self, peer: _Peer, data: bytes) -> None:
        try:
            frame = P.decode(data)
        except P.FrameError as exc:
            self._violation(peer, 0, f"malformed control message: {exc}")
            return
        msg, seq = frame.msg, frame.seq
        if peer.info is None:
            if not isinstance(msg, P.Ident):
                self._violation(peer, seq, f"expected IDENT first, got {frame.type.name}")
                return
            self._on_ident(peer, msg, seq)
            return
        wait = bool(frame.flags & P.FLAG_WAIT)
        if isinstance(msg, P.Acquire):
            self._on_request(peer, seq, msg.ep, msg.op, msg.offset, msg.length, wait, staged=True)
        elif isinstance(msg, P.Read):
            self._on_request(peer, seq, msg.ep, P.Op.READ, msg.offset, msg.length, wait, staged=False)
        elif isinstance(msg, P.Call):
            self._on_request(peer, seq, msg.ep, P.Op.CALL, 0, len(msg.payload), wait, staged=False,
                             payload=msg.payload)
        elif isinstance(msg, P.Done):
            self._on_done(peer, seq, msg.ep)
        else:
            self._violation(peer, seq, f"{frame.type.name} is not a requester message")

    def _on_ident(self, peer: _Peer, msg: P.Ident, seq: int) -> None:
        if self.token is not None and not hmac.compare_digest(msg.token, self.token):
            log.warning("requester rejected: bad token", peer=peer.id)
            peer.kill_at = time.monotonic() + 1.0
            self._send(peer, P.StatusMsg(P.Status.REJECTED, "bad or missing token"), seq,
                       on_done=lambda _ok: self._inbox.append(("drop", peer.conn, "bad token")))
            return
        addr = peer.conn.peer_address if peer.conn.incoming else None
        peer.info = RequesterInfo(peer.id, msg.name or f"peer{peer.id}", f"{addr[0]}:{addr[1]}" if addr else None)
        doc = {"protocol": P.VERSION, "instance": self.instance, "service": self.name, "identity": str(peer.info),
               "slot": P.SLOT_SIZE, "window": self.window, "pid": os.getpid(), "host": socket.gethostname(),
               "endpoints": [{"id": e.id, "path": e.path, "kind": e.kind.value, "size": e.size,
                              "mmap": base64.b64encode(e.blob).decode()} for e in self.endpoints]}
        for frame in P.hello_frames(doc):
            self.channel.send(peer.conn, frame)
        log.info("requester identified", peer=str(peer.info), address=peer.info.address)

    def _on_request(self, peer: _Peer, seq: int, ep_id: int, op: P.Op, offset: int, length: int, wait: bool,
                    *, staged: bool, payload: Optional[bytes] = None) -> None:
        if not 0 <= ep_id < len(self.endpoints):
            self._status(peer, seq, P.Status.NOT_FOUND, f"no endpoint with id {ep_id}")
            return
        ep = self.endpoints[ep_id]
        want = {P.Op.WRITE: Kind.WRITE, P.Op.READ: Kind.READ, P.Op.CALL: Kind.CALL}[op]
        if ep.kind is not want:
            self._status(peer, seq, P.Status.REJECTED, f"{ep.path} is a {ep.kind.value} endpoint, not {want.value}")
            return
        if op is P.Op.CALL and offset != 0:
            self._status(peer, seq, P.Status.REJECTED, "a call payload starts at offset 0")
            return
        if offset + length > ep.size or (staged and length == 0):
            self._status(peer, seq, P.Status.TOO_LARGE,
                         f"{length} bytes at offset {offset} do not fit {ep.path} ({ep.size} bytes)")
            return
        busy = ep.owner is not None or bool(ep.waiting)
        if busy and (not wait or len(ep.waiting) >= ep.queue):
            self._status(peer, seq, P.Status.BUSY, f"{ep.path} is busy" + (" (queue full)" if wait else ""))
            return
        ep.waiting.append(_Request(peer, seq, op, offset, length, staged, payload))
        self._pump(ep)

    def _pump(self, ep: Endpoint) -> None:
        """Start queued requests while the endpoint is free."""
        while ep.owner is None and ep.waiting:
            req = ep.waiting.popleft()
            if not req.peer.gone and req.peer.kill_at is None:
                self._begin(ep, req)

    def _begin(self, ep: Endpoint, req: _Request) -> None:
        ep.owner = req
        ep.ops += 1
        if req.staged:
            req.stage, req.deadline = "data", time.monotonic() + self.lease_timeout
            self._send(req.peer, P.Grant(ep.id), req.seq)
        elif req.op is P.Op.READ:
            self._run_read(ep, req)
        else:
            self._run_call(ep, req, req.payload or b"")

    def _finish(self, ep: Endpoint, req: _Request, code: P.Status = P.Status.OK, message: str = "") -> None:
        if code is not P.Status.OK:
            ep.errors += 1
        self._status(req.peer, req.seq, code, message)
        ep.owner = None

    def _handler_failed(self, ep: Endpoint, req: _Request, exc: BaseException) -> None:
        log.warning("handler raised", endpoint=ep.path, peer=str(req.peer.info), error=repr(exc))
        self._finish(ep, req, P.Status.HANDLER_ERROR, f"{type(exc).__name__}: {exc}")

    def _hold(self, ep: Endpoint, req: _Request) -> None:
        req.stage, req.deadline = "done", time.monotonic() + self.lease_timeout

    def _run_read(self, ep: Endpoint, req: _Request) -> None:
        view = ep.view(req.offset, req.length)
        n = req.length
        if ep.handler is not None:
            try:
                got = ep.handler(view, req.length, req.peer.info) if ep.wants_requester else \
                    ep.handler(view, req.length)
            except Exception as exc:  # noqa: BLE001 - reported to the requester
                self._handler_failed(ep, req, exc)
                return
            if isinstance(got, (bytes, bytearray, memoryview)):
                data = memoryview(got).cast("B")
                if len(data) > req.length:
                    self._finish(ep, req, P.Status.TOO_LARGE, f"read handler returned {len(data)} bytes, "
                                 f"more than the {req.length} requested")
                    return
                view[:len(data)] = data
                n = len(data)
            elif isinstance(got, int) and not isinstance(got, bool):
                if not 0 <= got <= req.length:
                    self._finish(ep, req, P.Status.HANDLER_ERROR, f"read handler returned length {got}, "
                                 f"outside 0..{req.length}")
                    return
                n = got
        self._hold(ep, req)
        self._send(req.peer, P.Ready(ep.id, req.offset, n), req.seq)

    def _run_call(self, ep: Endpoint, req: _Request, payload: bytes) -> None:
        assert ep.handler is not None
        try:
            got = ep.handler(payload, req.peer.info) if ep.wants_requester else ep.handler(payload)
        except Exception as exc:  # noqa: BLE001 - reported to the requester
            self._handler_failed(ep, req, exc)
            return
        if got is None:
            got = b""
        elif isinstance(got, str):
            got = got.encode("utf-8")
        if not isinstance(got, (bytes, bytearray, memoryview)):
            self._finish(ep, req, P.Status.HANDLER_ERROR, f"call handler returned {type(got).__name__}, not bytes")
            return
        data = memoryview(got).cast("B")
        if len(data) > ep.size:
            self._finish(ep, req, P.Status.TOO_LARGE, f"response of {len(data)} bytes exceeds {ep.path}'s "
                         f"{ep.size}-byte buffer")
            return
        if len(data) <= INLINE_RESULT:
            self._send(req.peer, P.Result(ep.id, 0, len(data), bytes(data)), req.seq)
            ep.owner = None
            return
        ep.view(0, len(data))[:] = data
        self._hold(ep, req)
        self._send(req.peer, P.Result(ep.id, 0, len(data), b""), req.seq, P.FLAG_IN_BUFFER)

    def _on_imm(self, peer: _Peer, imm: int, length: int) -> None:
        ep_id, seq16 = P.unpack_imm(imm)
        ep = self.endpoints[ep_id] if ep_id < len(self.endpoints) else None
        req = ep.owner if ep is not None else None
        if ep is None or req is None or req.peer is not peer or req.stage != "data" or (req.seq & 0xFFFF) != seq16:
            self._violation(peer, 0, f"write-with-immediate {imm:#010x} without a grant")
            return
        if req.op is P.Op.CALL:
            self._run_call(ep, req, bytes(ep.view(0, req.length)))
        else:
            self._run_write(ep, req)
        self._pump(ep)

    def _run_write(self, ep: Endpoint, req: _Request) -> None:
        if ep.handler is not None:
            try:
                view = ep.view(req.offset, req.length)
                if ep.wants_requester:
                    ep.handler(view, req.length, req.peer.info)
                else:
                    ep.handler(view, req.length)
            except Exception as exc:  # noqa: BLE001 - reported to the requester
                self._handler_failed(ep, req, exc)
                return
        self._finish(ep, req)

    def _on_done(self, peer: _Peer, seq: int, ep_id: int) -> None:
        ep = self.endpoints[ep_id] if ep_id < len(self.endpoints) else None
        if ep is None:
            self._violation(peer, seq, f"DONE for unknown endpoint id {ep_id}")
            return
        req = ep.owner
        if req is not None and req.peer is peer and req.seq == seq and req.stage in ("data", "done"):
            ep.owner = None
            self._pump(ep)
            return
        before = len(ep.waiting)
        ep.waiting = collections.deque(r for r in ep.waiting if not (r.peer is peer and r.seq == seq))
        if len(ep.waiting) == before:
            log.debug("DONE for an operation not held", endpoint=ep.path, seq=seq)

    def __repr__(self) -> str:
        return f"<Responder {self.name} {self.address} endpoints={len(self.endpoints)} peers={len(self._peers)}>"


__all__ = ["Endpoint", "RequesterInfo", "Responder"]
