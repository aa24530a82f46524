"""The requester: a client of one responder's endpoints.

``Requester.connect("host:port")`` (RDMA CM) or ``Requester.from_descriptor
(path)``; then ``write``, ``read``, ``call`` (and ``awrite``, ``aread``,
``acall`` for asyncio). After the handshake the requester knows its private
region of the responder's memory: one slot per endpoint. Flow control is
local: at most ``window`` operations in flight, and one operation at a time
on an endpoint's slot (its credit); everything else waits in a local FIFO
queue, so the requester's own back-pressure never turns into Busy or a
buffer shortage. Each operation is a small state machine advanced inside
the progress engine's callbacks; callers only wait, with a timeout.
"""
from __future__ import annotations

import asyncio
import base64
import collections
import hmac
import os
import secrets
import socket
from typing import Any, Deque, Dict, List, Optional, Set, Tuple, Union, overload

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
from .auth import client_mac, server_proof
from .channel import Channel
from .errors import (Disconnected, Dismissed, NotFound, PeerError, PeerTimeout, ProtocolError, Rejected,
                     StaleDescriptor, TooLarge, Unavailable, error_for)
from .files import check_not_stale, read_responder_file
from .ops import EndpointInfo, Op, Posted, Remote
from ..address import looks_like_address, resolve
from .spec import split_address

log = get_logger()

STAGE = 64 * 1024          # payloads up to this size go through pre-registered staging memory
SETTLE_S = 1.0             # how long a failed start waits for the connection's end to learn why (_settle)
BytesLike = Union[bytes, bytearray, memoryview]


def _route_device(host: str, device: Optional[str]) -> Device:
    """The local device to reach ``host`` from: by name, by the route, or the first one with an address."""
    if device:
        return Device.open(ibdev_name=device)
    try:
        return Device.open_route(host)
    except (NotFoundError, OSError):
        pass
    found = [d for d in devices() if d.ipv4 or d.ipv6]
    if not found:
        raise Unavailable("no DOCA device with an IP address on this host")
    return Device.open(ibdev_name=found[0].ibdev_name)


def _is_address(target: str) -> bool:
    try:
        split_address(target)
        return True
    except ValueError:
        return False


class Requester:
    """A connection to one responder. Use ``connect``/``from_descriptor``/``open``."""

    def __init__(self, *, timeout: float = 10.0, window: int = 4, name: Optional[str] = None,
                 token: Optional[bytes] = None, key_id: str = "", progress_mode: str = "blocking",
                 dev: Optional[Device] = None, max_tasks: int = 0) -> None:
        """``dev``: share an opened Device (not closed by the requester); ``max_tasks``: the Rdma
        context's task pool per type beyond what the control channel needs (for raw tasks on ``conn``)."""
        if window < 1:
            raise ValueError("window must be >= 1")
        self._shared_dev, self._extra_tasks = dev, max(0, max_tasks)
        self.timeout, self.window = timeout, window
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.token, self.key_id, self.progress_mode = token, key_id, progress_mode
        self.hello: Dict[str, Any] = {}
        self.identity = ""
        self.instance = ""
        self.address = ""
        self._remotes: Dict[str, Remote] = {}
        self._queue: Deque[Op] = collections.deque()
        self._active: Dict[int, Op] = {}
        self._credit: Dict[Tuple[int, int], Op] = {}   # (endpoint id, slot index) -> the op holding that slot
        self._posted = Posted(window)              # posted writes delivered, not yet retired
        self._seq = 0
        self._nonce = secrets.token_bytes(P.NONCE)
        self._hello_parts: List[bytes] = []
        self._hello_done = False
        self._fatal: Optional[PeerError] = None
        self._closed = False
        self._resources: List[Any] = []
        self.conn: Optional[Connection] = None
        self.region: Optional[MemoryMap] = None

    # -- construction ---------------------------------------------------------
    @classmethod
    def connect(cls, address: str, *, timeout: float = 10.0, device: Optional[str] = None,
                expect_instance: Optional[str] = None, **kw: Any) -> "Requester":
        """Connect by RDMA CM to a responder at ``host:port`` and complete the handshake."""
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
        kw.setdefault("key_id", rf.key_id)
        try:
            return cls.connect(rf.target, timeout=timeout, expect_instance=rf.instance, **kw)
        except StaleDescriptor:
            raise
        except Unavailable as exc:
            raise StaleDescriptor(f"descriptor file {path}: no responder answers at {rf.target} "
                                  f"(the file is stale or the responder is down): {exc}") from None

    @classmethod
    def discover(cls, service: str, store: Any, **kw: Any) -> "Requester":
        """Connect to a live responder that published ``service`` in a metadata store (see
        ``Responder.publish``); tries each published address in turn (Unavailable if none answers)."""
        entries = store.list(f"/pydoca/services/{service}/")
        if not entries:
            raise Unavailable(f"no responder publishes service {service!r} in the metadata store")
        errors = []
        for key, doc in sorted(entries.items()):
            address = f"{doc.get('address')}:{doc.get('port')}"
            try:
                return cls.connect(address, expect_instance=doc.get("instance"), **kw)
            except (PeerError, DocaError) as exc:
                errors.append(f"{address}: {exc}")
        raise Unavailable(f"no published responder of {service!r} answers: {'; '.join(errors)[:500]}")

    @classmethod
    def open(cls, target: str, **kw: Any) -> "Requester":
        """``from_descriptor`` when ``target`` is a file, ``connect`` when it is ``HOST:PORT``."""
        if os.path.isfile(target):
            return cls.from_descriptor(target, **kw)
        if _is_address(target):
            return cls.connect(target, **kw)
        if looks_like_address(target):
            split_address(target)              # raises what is wrong with it (e.g. a port out of range)
        why = "a directory" if os.path.isdir(target) else "no such file"
        raise ValueError(f"target {target!r} is neither HOST:PORT nor a readable descriptor file ({why}); "
                         "give e.g. 127.0.0.1:18515 or the file written by 'pydoca serve --descriptor-file'")

    def _connect(self, host: str, port: int, device: Optional[str], timeout: float,
                 expect_instance: Optional[str]) -> None:
        self.address = f"{host}:{port}"
        if self._shared_dev is not None:
            self.dev = self._shared_dev
        else:
            self.dev = _route_device(host, device)
            self._resources.append(self.dev)
        self.pe = ProgressEngine(mode=self.progress_mode)
        self._resources.append(self.pe)
        recv_slots, send_slots = 2 * self.window + 8, 2 * self.window + 4
        self.inventory = BufferInventory(recv_slots + send_slots + 4 * self.window + 64)
        self._resources.append(self.inventory)
        self._stage_mem = np.zeros(self.window * STAGE, dtype=np.uint8)
        self._stage_map = MemoryMap(self.dev, self._stage_mem, access=Access.LOCAL_READ_WRITE)
        self._resources.append(self._stage_map)
        self._free_stage = list(range(self.window))
        self.rdma = Rdma(self.dev, self.pe, max_connections=1,
                         max_tasks=recv_slots + send_slots + 4 * self.window + 16 + self._extra_tasks)
        self.channel = Channel(self.dev, self.rdma, self.inventory, recv_slots=recv_slots, send_slots=send_slots,
                               on_message=self._on_message, on_imm=self._on_imm)
        self.rdma.on_connection = self._on_conn
        self.channel.post_all()
        ip = resolve(host)                       # UnknownHost names the host
        try:
            self.conn = self.rdma.connect_to(ip, port)
            self.conn.wait_established(timeout)
        except (DocaError, TimeoutError) as exc:
            if self.conn is not None and self.conn.failure_reason == "rejected":
                raise Unavailable(f"the responder at {host}:{port} refused the connection (its connection limit "
                                  f"or address allow-list; its log says which): {exc}") from None
            raise Unavailable(f"no responder answers at {host}:{port}: {exc}") from None
        self.channel.send(self.conn, P.encode(P.Ident(self.name, self.key_id, self._nonce), 0))
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
        if self.token is not None:
            want = server_proof(self.token, self._nonce, getattr(self, "_server_nonce", b"")).hex()
            if not hmac.compare_digest(str(doc.get("proof", "")), want):
                raise ProtocolError(f"the responder at {self.address} did not prove it holds the token")
        self.hello, self.instance = doc, doc["instance"]
        window = doc.get("window")
        if isinstance(window, int) and 0 < window < self.window:
            self.window = self._posted.limit = window   # the responder sized its receive pool for this
        self.identity = str(doc.get("identity", ""))
        if doc.get("region"):
            self.region = MemoryMap.from_export(self.dev, base64.b64decode(doc["region"]))
            self._resources.append(self.region)
        for e in doc["endpoints"]:
            info = EndpointInfo(e["id"], e["path"], e["kind"], e["size"], e["rights"])
            # several slots: only for write endpoints (a responder that predates them offers one)
            self._remotes[info.path] = Remote(info, e["slot"], e.get("slots", 1) if info.kind == "write" else 1)
        log.debug("connected to responder", address=self.address, identity=self.identity,
                  endpoints=len(self._remotes))

    # -- public API -------------------------------------------------------------
    def endpoints(self) -> List[EndpointInfo]:
        """The responder's endpoints, from its hello (``rights`` empty where this requester has none)."""
        return [r.info for r in self._remotes.values()]

    @property
    def service(self) -> str:
        return str(self.hello.get("service", ""))

    def write(self, path: str, data: Any, offset: int = 0, *, wait: bool = True,
              timeout: Optional[float] = None, posted: bool = False) -> None:
        """Write ``data`` into ``path`` at ``offset``; returns after the handler ran. ``posted``: returns
        once the data is delivered to the responder, as an RDMA write does (writes up to the inline
        size; larger ones are confirmed as usual); the handler runs later, in order, and a failure
        is raised by a later operation or :meth:`flush`. At most ``window`` posted writes await
        their handlers (the responder returns credits)."""
        self._wait(self._start_write(path, data, offset, wait, posted), timeout)

    def flush(self, timeout: Optional[float] = None) -> None:
        """Wait until every posted write's handler ran; raise the first failure among them."""
        limit = self.timeout if timeout is None else timeout
        self._check_usable()
        try:
            self.pe.run_until(lambda: self._posted.inflight == 0 or self._fatal is not None, limit,
                              what="posted writes")
        except TimeoutError:
            raise PeerTimeout(f"posted writes not retired after {limit:g}s ({self._posted.inflight} left)") from None
        self._raise_posted()
        if self._fatal is not None and self._posted.inflight:
            raise Disconnected(f"{self._posted.inflight} posted write(s) delivered but their handlers' outcome is "
                               f"unknown: {self._fatal}")

    def _raise_posted(self) -> None:
        error = self._posted.take_failure()
        if error is not None:
            raise error

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
                     timeout: Optional[float] = None, posted: bool = False) -> None:
        """Async :meth:`write`; any number may be outstanding (queued beyond ``window``)."""
        await self._await(self._start_write(path, data, offset, wait, posted), timeout)

    async def aread(self, path: str, length: Optional[int] = None, into: Any = None, *, offset: int = 0,
                    wait: bool = True, timeout: Optional[float] = None) -> Any:
        """Async :meth:`read` (bytes, or the count with ``into``)."""
        return await self._await(self._start_read(path, length, into, offset, wait), timeout)

    async def acall(self, path: str, payload: Any = b"", *, wait: bool = True,
                    timeout: Optional[float] = None) -> bytes:
        """Async :meth:`call`."""
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
        for op in list(self._queue) + list(self._active.values()):
            self._answer(op, error=Disconnected("requester closed"))
        self._queue.clear()
        rdma: Optional[Rdma] = getattr(self, "rdma", None)
        try:
            if rdma is not None:
                rdma.close()
        finally:
            for op in list(self._active.values()):
                op.inflight = 0
                self._release_local(op)
            self._active.clear()
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
    def _outcome(self, op: Op) -> Any:
        if op.error is not None:
            if isinstance(op.error, Disconnected) and self._fatal is None and not self._closed:
                self._settle()
                if self._fatal is not None:       # why the connection went: the responder's status, or its event
                    raise self._fatal from op.error
            raise op.error
        return op.value

    def _settle(self) -> None:
        """Progress until the connection's end is known, for at most ``SETTLE_S``: an idle requester whose
        operation failed to start (softdoca knew the link was gone before its events reached us) learns why the
        responder let it go (a status delivered before the disconnect) instead of only that it is gone."""
        try:
            self.pe.run_until(lambda: self._fatal is not None, SETTLE_S, what="the connection's end")
        except TimeoutError:
            pass

    def _wait(self, op: Op, timeout: Optional[float]) -> Any:
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

    async def _await(self, op: Op, timeout: Optional[float]) -> Any:
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

    def _abandon(self, op: Op) -> None:
        """The caller stopped waiting: forget a queued op; a sent one keeps its credit until answered."""
        if op.finished:
            return
        op.abandoned = True
        if op in self._queue:
            self._queue.remove(op)
            self._answer(op, error=PeerTimeout("abandoned"))
            return
        if op.inflight:
            # a transfer is in flight: tear the connection down so nothing lands late in caller memory
            log.warning("operation abandoned with a transfer in flight: disconnecting", seq=op.seq)
            self._break(PeerTimeout("connection closed after a timed-out transfer"))
            try:
                self.pe.run_until(lambda: op.inflight == 0, 5.0, what="flushed transfer")
            except TimeoutError:
                log.error("in-flight transfer did not complete after disconnect", seq=op.seq)
            self._answer(op, error=PeerTimeout("abandoned"))
            return
        # sent and waiting for its answer: it keeps its window place and credit until the answer comes
        # (a late answer is dropped; the responder's call timeout bounds the wait)

    def _check_usable(self) -> None:
        if self._closed:
            raise Disconnected("requester is closed")
        if self._fatal is not None:
            raise self._fatal
        self._raise_posted()                  # an earlier posted write failed: say so before the next op

    # -- operation starts ---------------------------------------------------------
    def _remote(self, path: str, kind: str) -> Remote:
        self._check_usable()
        r = self._remotes.get(path)
        if r is None:
            raise NotFound(f"no endpoint {path!r} (have: {', '.join(self._remotes) or 'none'})")
        if r.info.kind != kind:
            raise Rejected(f"{path} is a {r.info.kind} endpoint, not {kind}")
        if r.slot < 0:
            key = f"key id {self.key_id!r}" if self.key_id else "this requester"
            raise Rejected(f"{key} has no {kind} right on {path} (the responder's credentials decide)")
        return r

    def _enqueue(self, op: Op) -> Op:
        self._seq = self._seq % 0xFFFFFFFF + 1
        op.seq = self._seq
        self._queue.append(op)
        self._pump()
        return op

    def _pump(self) -> None:
        """Start queued operations in order while the window and their endpoint's credit allow."""
        if self._fatal is not None or self._closed or not self._queue:
            return
        blocked: Set[int] = set()
        for op in list(self._queue):
            if len(self._active) >= self.window:
                return
            eid = op.ep.info.id
            slot = self._free_slot(op) if op.needs_slot else 0
            if eid in blocked or slot < 0 or (op.posted and self._posted.full):
                blocked.add(eid)                      # later ops of this endpoint keep their order
                continue
            self._queue.remove(op)
            self._active[op.seq] = op
            if op.needs_slot:
                op.slot_index = slot
                self._credit[(eid, slot)] = op
            try:
                self._launch(op)
            except Exception as exc:  # noqa: BLE001 - this op fails, the others go on
                self._answer(op, error=exc if isinstance(exc, PeerError) else PeerError(f"{type(exc).__name__}: "
                                                                                       f"{exc}"))

    def _free_slot(self, op: Op) -> int:
        """A slot of the op's endpoint that no operation holds, or -1."""
        eid = op.ep.info.id
        for j in range(op.ep.slots):
            if (eid, j) not in self._credit:
                return j
        return -1

    def _start_write(self, path: str, data: Any, offset: int, wait: bool, posted: bool = False) -> Op:
        ep = self._remote(path, "write")
        view = memoryview(data).cast("B")
        n = view.nbytes
        if n == 0:
            raise ValueError("nothing to write (empty data)")
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        if offset + n > ep.info.size:
            raise TooLarge(f"{n} bytes at offset {offset} do not fit {path} ({ep.info.size} bytes)")
        op = Op("write", ep, offset, n, wait, needs_slot=n > P.INLINE_MAX, source=view)
        op.posted = posted and n <= P.INLINE_MAX
        return self._enqueue(op)

    def _start_read(self, path: str, length: Optional[int], into: Any, offset: int, wait: bool) -> Op:
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
        if offset + length > ep.info.size:
            raise TooLarge(f"{length} bytes at offset {offset} do not fit {path} ({ep.info.size} bytes)")
        op = Op("read", ep, offset, length, wait, needs_slot=length > P.INLINE_MAX)
        op.into = into
        op.value = 0 if into is not None else b""
        return self._enqueue(op)

    def _start_call(self, path: str, payload: Any, wait: bool) -> Op:
        ep = self._remote(path, "call")
        if isinstance(payload, str):
            payload = payload.encode("utf-8")
        view = memoryview(payload).cast("B")
        if view.nbytes > ep.info.size:
            raise TooLarge(f"a {view.nbytes}-byte payload exceeds {path}'s {ep.info.size}-byte buffer")
        return self._enqueue(Op("call", ep, 0, view.nbytes, wait, needs_slot=True, source=view))

    # -- launching (inside _pump) ------------------------------------------------------
    def _launch(self, op: Op) -> None:
        flags = P.FLAG_WAIT if op.wait else 0
        ep = op.ep.info
        if op.kind == "read":
            self._send(op, P.Read(ep.id, op.offset, op.length), flags)
            return
        assert op.source is not None
        make = P.Write if op.kind == "write" else P.Call
        if op.posted:
            self._send_posted(op, P.Write(ep.id, op.offset, op.length, op.source.tobytes()), flags)
            return
        if op.length <= P.INLINE_MAX:
            self._send(op, make(ep.id, op.offset, op.length, op.source.tobytes()), flags)
            return
        src = self._local_source(op)
        j = op.slot_index                             # a write endpoint may have several slots (calls: one)
        dst = self.inventory.buffer(self._region(), offset=op.ep.slot + j * op.ep.stride + op.offset,
                                    length=op.length, empty=True)
        op.own.append(dst)
        self._track(op, self.rdma.write(self._conn(), src, dst))
        # RC ordering: the frame is delivered only after the write's data is placed
        self._send(op, make(ep.id, op.offset, op.length, b"", j), flags | P.FLAG_IN_BUFFER)

    def _conn(self) -> Connection:
        if self.conn is None:
            raise Disconnected("not connected")
        return self.conn

    def _region(self) -> MemoryMap:
        if self.region is None:
            raise ProtocolError("the responder granted no memory region")
        return self.region

    def _local_source(self, op: Op) -> Buffer:
        """A registered buffer holding the op's payload (staged copy, or registered in place)."""
        assert op.source is not None
        n = op.source.nbytes
        if n <= STAGE and self._free_stage:
            op.stage_slot = self._free_stage.pop()
            start = op.stage_slot * STAGE
            self._stage_mem.data[start:start + n] = op.source
            buf = self.inventory.buffer(self._stage_map, offset=start, length=STAGE, data_len=n)
        else:
            access = Access.LOCAL_READ_ONLY if op.source.readonly else Access.LOCAL_READ_WRITE
            mmap = MemoryMap(self.dev, op.source, access=access)
            op.own.append(mmap)
            buf = self.inventory.buffer(mmap, data_len=n)
        op.own.append(buf)
        return buf

    def _send(self, op: Op, msg: P.Message, flags: int) -> None:
        def sent(ok: bool) -> None:
            if not ok:
                self._answer(op, error=Disconnected(f"control message for {op.kind} could not be sent"))
        self.channel.send(self._conn(), P.encode(msg, op.seq, flags), sent)

    def _send_posted(self, op: Op, msg: P.Write, flags: int) -> None:
        """A posted write: done once the frame is delivered; the responder answers only a failure."""
        def sent(ok: bool) -> None:
            if ok:
                self._answer(op)
            else:
                self._posted.credit(1)
                self._answer(op, error=Disconnected("posted write could not be delivered"))
        self._posted.sent(op.seq, op.ep.info.path)
        self.channel.send(self._conn(), P.encode(msg, op.seq, flags | P.FLAG_POSTED), sent)

    def _track(self, op: Op, task: "Task[Any]", then: Any = None) -> None:
        op.inflight += 1

        def done(t: "Task[Any]") -> None:
            op.inflight -= 1
            try:
                if t.error is not None:
                    self._answer(op, error=Disconnected(f"RDMA {op.kind} failed: {t.error}"))
                elif then is not None and not op.answered:
                    then()
                elif op.kind == "write" and op.inflight == 0:
                    # a write's one transfer is done: free its source now, while the answer is on its way,
                    # not after it (a 4 MiB write's map and buffers take tens of microseconds to close)
                    self._release_local(op)
            finally:
                self._maybe_done(op)
        task.add_done_callback(done)

    # -- completion -----------------------------------------------------------------
    def _answer(self, op: Op, value: Any = None, error: Optional[BaseException] = None) -> None:
        if op.answered:
            return
        op.answered = True
        if error is not None:
            op.error = error
        else:
            op.value = value
        self._maybe_done(op)

    def _maybe_done(self, op: Op) -> None:
        if not op.finished:
            return
        self._release_local(op)
        self._active.pop(op.seq, None)
        key = (op.ep.info.id, op.slot_index)
        if self._credit.get(key) is op:
            del self._credit[key]
        self._pump()

    def _release_local(self, op: Op) -> None:
        """Free local buffers (no transfer may be in flight)."""
        for res in reversed(op.own):
            try:
                res.close()
            except Exception as exc:  # noqa: BLE001
                log.debug("closing an operation buffer failed", error=str(exc))
        op.own.clear()
        if op.stage_slot is not None:
            self._free_stage.append(op.stage_slot)
            op.stage_slot = None

    def _break(self, error: PeerError) -> None:
        if self._fatal is None:
            self._fatal = error
        if self.conn is not None:
            self.conn.disconnect()
        for op in list(self._queue) + list(self._active.values()):
            self._answer(op, error=error)
        self._queue.clear()

    # -- events (inside progress) -----------------------------------------------------
    def _on_conn(self, conn: Connection, state: ConnectionState) -> None:
        if conn is self.conn and state in (ConnectionState.DISCONNECTED, ConnectionState.FAILED):
            why = conn.error_detail                     # softdoca says why (real DOCA does not)
            self._break(Disconnected(f"connection to {self.address} {state.value}" + (f": {why}" if why else "")))

    def _on_imm(self, conn: Connection, imm: int, length: int) -> None:
        self._break(ProtocolError(f"unexpected write-with-immediate {imm:#x} from the responder"))

    def _on_message(self, conn: Connection, data: bytes) -> None:
        try:
            frame = P.decode(data)
        except P.FrameError as exc:
            self._break(ProtocolError(f"malformed message from the responder: {exc}"))
            return
        msg = frame.msg
        if frame.type is P.MsgType.RESULT or frame.type is P.MsgType.READY or \
                (frame.type is P.MsgType.STATUS and not frame.flags & P.FLAG_POSTED):
            op = self._active.get(frame.seq)   # the answer of an operation: the common case first
            if op is not None:
                self._advance_guarded(op, frame)
                return
        if isinstance(msg, P.Hello):
            self._hello_parts.append(msg.chunk)
            if sum(map(len, self._hello_parts)) > P.MAX_HELLO:
                self._break(ProtocolError("hello too large"))
            elif not frame.flags & P.FLAG_MORE:
                self._hello_done = True
            return
        if isinstance(msg, P.Challenge):
            self._on_challenge(msg)
            return
        if isinstance(msg, P.Credit):
            self._posted.credit(msg.count)
            self._pump()
            return
        op = self._active.get(frame.seq)
        if isinstance(msg, P.StatusMsg) and frame.flags & P.FLAG_POSTED:
            path = self._posted.retired_by_failure(frame.seq)
            error = error_for(msg.code, f"posted write{' to ' + path if path else ''} (seq {frame.seq}) failed: "
                                        f"{msg.message}")
            if op is not None and op.posted:  # the failure overtook the delivery: the write itself fails
                self._answer(op, error=error)
            else:
                self._posted.failures.append(error)
            self._pump()
            return
        if op is None:
            if frame.seq == 0 and isinstance(msg, P.StatusMsg):    # why the responder ends this connection
                self._break(Dismissed(msg.message) if msg.code is P.Status.BUSY else error_for(msg.code, msg.message))
            return
        self._advance_guarded(op, frame)

    def _advance_guarded(self, op: Op, frame: P.Frame) -> None:
        try:
            self._advance(op, frame)
        except Exception as exc:  # noqa: BLE001 - the operation fails, the loop goes on
            log.debug("operation failed locally", seq=op.seq, error=repr(exc))
            self._answer(op, error=exc if isinstance(exc, PeerError) else PeerError(f"{type(exc).__name__}: {exc}"))

    def _on_challenge(self, msg: P.Challenge) -> None:
        if self.token is None:
            self._break(Rejected(f"the responder at {self.address} requires a token: pass token= (or "
                                 "--token) or connect through its descriptor file"))
            return
        self._server_nonce = msg.nonce
        mac = client_mac(self.token, self._nonce, msg.nonce, self.name, self.key_id)
        self.channel.send(self._conn(), P.encode(P.Auth(mac), 0))

    def _advance(self, op: Op, frame: P.Frame) -> None:
        msg = frame.msg
        if isinstance(msg, P.StatusMsg):
            if msg.code is not P.Status.OK:
                self._answer(op, error=error_for(msg.code, msg.message))
            elif op.kind == "write":
                self._answer(op)
            else:
                raise ProtocolError(f"unexpected OK status for a {op.kind}")
        elif isinstance(msg, (P.Ready, P.Result)) and op.kind == ("read" if isinstance(msg, P.Ready) else "call"):
            self._land(op, msg, bool(frame.flags & P.FLAG_IN_BUFFER))
        else:
            raise ProtocolError(f"unexpected {frame.type.name} for a {op.kind}")

    def _land(self, op: Op, msg: P.Data, in_buffer: bool) -> None:
        """Deliver read data or a call result: inline, or RDMA-read from this requester's slot."""
        limit = op.length if op.kind == "read" else op.ep.info.size
        if msg.length > limit or (op.kind == "read" and msg.offset != op.offset):
            raise ProtocolError(f"{type(msg).__name__.upper()} for {msg.length} bytes at {msg.offset} does not "
                                f"match the request")
        if op.abandoned:
            self._answer(op, error=PeerTimeout("abandoned"))
            return
        if not in_buffer:
            self._answer(op, self._deliver(op, msg.payload))
            return
        if msg.length == 0:
            self._answer(op, self._deliver(op, b""))
            return
        self._read_slot(op, op.ep.slot + msg.offset, msg.length)

    def _deliver(self, op: Op, data: bytes) -> Any:
        if op.into is None:
            return data
        memoryview(op.into).cast("B")[:len(data)] = data
        return len(data)

    def _read_slot(self, op: Op, at: int, n: int) -> None:
        start = 0
        tmp: Optional[bytearray] = None
        if op.into is not None:
            mmap = MemoryMap(self.dev, op.into, access=Access.LOCAL_READ_WRITE)
            op.own.append(mmap)
            dst = self.inventory.buffer(mmap, length=n, empty=True)
        elif n <= STAGE and (op.stage_slot is not None or self._free_stage):
            if op.stage_slot is None:
                op.stage_slot = self._free_stage.pop()
            start = op.stage_slot * STAGE
            dst = self.inventory.buffer(self._stage_map, offset=start, length=n, empty=True)
        else:
            tmp = bytearray(n)
            mmap = MemoryMap(self.dev, tmp, access=Access.LOCAL_READ_WRITE)
            op.own.append(mmap)
            dst = self.inventory.buffer(mmap, empty=True)
        op.own.append(dst)
        src = self.inventory.buffer(self._region(), offset=at, length=n, data_len=n)
        op.own.append(src)

        def landed() -> None:
            if op.into is not None:
                value: Any = n
            elif tmp is not None:
                value = bytes(tmp)
            else:
                value = self._stage_mem[start:start + n].tobytes()
            self._answer(op, value)
        self._track(op, self.rdma.read(self._conn(), src, dst), landed)


__all__ = ["EndpointInfo", "Requester"]
