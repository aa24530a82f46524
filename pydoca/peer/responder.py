"""The responder: endpoints served to many requesters.

One Rdma context listens on ``HOST:PORT`` (RDMA CM). The serving thread
(``serve_forever``/``run_once``) owns every DOCA call: engine callbacks only
queue events, handlers run on a :class:`HandlerPool`, and finished handlers
are answered from the serving thread.

Isolation: after it authenticates, each requester gets a private region of
registered memory with one slot per endpoint it has rights to, exported to
it alone and revoked when it leaves. Its bulk data moves only through that
region, so no requester can read or write another's bytes, and nothing
needs a lock grant first: a write is an RDMA write into its own slot
followed by a WRITE frame, answered by one STATUS.
"""
from __future__ import annotations

import base64
import collections
import hmac
import math
import os
import secrets
import select
import socket
import threading
import time
import traceback
from typing import Any, Callable, Deque, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import numpy as np

from pydoca._log import get_logger

from ..buffer import BufferInventory
from ..device import Device, devices
from ..memory import Access, MemoryMap
from ..pe import ProgressEngine
from ..rdma import Connection, ConnectionState, Rdma
from . import protocol as P
from .admission import Admission
from .auth import ALL_RIGHTS, Credential, client_mac, parse_networks, server_proof
from .channel import Channel
from .endpoint import Endpoint, Handler, Request, RequesterInfo
from ..address import free_port, resolve
from .spec import DEFAULT_QUEUE, EndpointSpec, Kind, ServiceSpec, resolve_handler, split_address
from .workers import HandlerPool, Job

log = get_logger()

REGION_ACCESS = Access.LOCAL_READ_WRITE | Access.RDMA_READ | Access.RDMA_WRITE
MAINTAIN_S = 0.02          # how often a busy serving loop checks deadlines (handler timeouts, IDENT, kills)
# Pool handlers known to be short run on the serving thread itself (no hand-off to a worker and back):
SHORT_S = 0.0005           # a run of a handler under this is short
PROVEN = 16                # after this many short runs in a row (on the pool or here), and until a long one
_ANY = object()             # _evictable: a requester from any address
#: a requester idle this long (nothing asked, nothing outstanding) gives its place to a newcomer when every
#: place is taken: connections that stay but do nothing never lock others out (Responder(idle_evict=))
IDLE_EVICT_S = 30.0
STALL_S = 0.005            # a handler on the serving thread this long: another thread serves until it returns


class _ServingEnded(BaseException):
    """The responder closed while its serving thread ran a handler: serve_forever returns."""
_WANT = {P.MsgType.WRITE: Kind.WRITE, P.MsgType.READ: Kind.READ, P.MsgType.CALL: Kind.CALL}


def _stride(size: int) -> int:
    """Bytes between consecutive slots of an endpoint in a requester's region (64-byte aligned)."""
    return (size + 63) // 64 * 64


class _Peer:
    """A connected requester: handshake state, credential, private region."""

    def __init__(self, pid: int, conn: Connection, deadline: float, source: Optional[str] = None) -> None:
        self.id, self.conn, self.deadline, self.source = pid, conn, deadline, source
        self.info: Optional[RequesterInfo] = None
        self.ident: Optional[P.Ident] = None
        self.cred: Optional[Credential] = None
        self.nonce = b""
        self.ready = False
        self.gone = False
        self.kill_at: Optional[float] = None
        self.region: Optional[np.ndarray] = None
        self.rmap: Optional[MemoryMap] = None
        self.slots: Dict[int, int] = {}    # endpoint id -> offset of its first slot in the region
        self.posted_open = 0               # posted writes admitted, handler not finished
        self.open = 0                      # other operations admitted, not yet answered (<= window)
        self.credit_due = 0                # posted writes finished, not yet credited
        self.last_active = 0.0             # when it was welcomed, last sent a request or was answered (monotonic)
        self.evicted = False               # disconnected to make room: no longer holds a place

    def slot_view(self, ep: Endpoint, offset: int, length: int, index: int = 0) -> memoryview:
        """``length`` bytes at ``offset`` of slot ``index`` of ``ep`` (write endpoints may have several)."""
        assert self.region is not None
        start = self.slots[ep.id] + index * _stride(ep.size) + offset
        return self.region.data[start:start + length]

    def __str__(self) -> str:
        return str(self.info) if self.info is not None else f"#{self.id}"


class Responder:
    """Serves endpoints over RDMA. Add endpoints, ``start()``, then ``serve_forever()``."""

    def __init__(self, listen: str, *, name: str = "Service", device: Optional[str] = None,
                 max_connections: int = 32, window: int = 4, ident_timeout: float = 2.0,
                 max_pending: int = 32, max_pending_per_source: int = 16,
                 max_connections_per_source: Optional[int] = None, idle_evict: Optional[float] = IDLE_EVICT_S,
                 token: Optional[bytes] = None, credentials: Optional[Mapping[str, Credential]] = None,
                 allow: Optional[Iterable[str]] = None, workers: int = 4, call_timeout: Optional[float] = 30.0,
                 progress_mode: str = "blocking") -> None:
        self.host, self.port = split_address(listen, allow_zero=True)   # port 0: a free one, at start()
        for what, value in (("max_connections", max_connections), ("max_pending", max_pending),
                            ("max_pending_per_source", max_pending_per_source)):
            if value < 1:
                raise ValueError(f"{what} must be >= 1, got {value}")
        if not ident_timeout > 0:
            raise ValueError(f"ident_timeout must be > 0 seconds, got {ident_timeout}")
        if max_connections_per_source is not None and not 1 <= max_connections_per_source <= max_connections:
            raise ValueError(f"max_connections_per_source must be between 1 and max_connections={max_connections} "
                             f"(or None: no limit per address), got {max_connections_per_source}")
        if idle_evict is not None and not idle_evict > 0:
            raise ValueError(f"idle_evict must be > 0 seconds (or None: never evict), got {idle_evict}")
        #: authenticated requesters from one address (None: up to max_connections); and how long a requester
        #: must have been idle before a newcomer may take its place when every place is taken (None: never)
        self.max_connections_per_source, self.idle_evict = max_connections_per_source, idle_evict
        #: handshakes (connected, not yet authenticated) allowed at once, in all and from one address: they
        #: have a budget of their own, so silent connections never take an authenticated requester's place
        self.max_pending, self.max_pending_per_source = max_pending, max_pending_per_source
        self.name, self.device_name = name, device
        self.max_connections, self.window, self.ident_timeout = max_connections, window, ident_timeout
        creds: Dict[str, Credential] = dict(credentials or {})
        if token is not None:
            creds.setdefault("", Credential(bytes(token)))
        self.credentials = creds
        self.token = token
        self.allow = parse_networks(allow)
        self.call_timeout, self.progress_mode = call_timeout, progress_mode
        self.pool = HandlerPool(workers, name="pydoca-handler")
        self._serving: Optional[threading.Thread] = None       # the thread in serve_forever
        #: serve_forever runs pool handlers known to be short (``PROVEN`` runs under ``SHORT_S``) on the serving
        #: thread itself, and a watch thread serves in its place while one of them runs longer (``STALL_S``);
        #: False (or PYDOCA_HANDLERS_HERE=0): every pool handler goes to the pool
        self.handlers_here = os.environ.get("PYDOCA_HANDLERS_HERE", "1") != "0"
        self._here_ok = False               # serve_forever with handlers_here, on a runtime that can kick
        self._baton = threading.Lock()      # held by whichever thread serves: one at a time
        self._here_job: Optional[Job] = None
        self._here_since = 0.0
        self._here_last = 0.0
        self._watch: Optional[threading.Thread] = None
        self._watch_evt = threading.Event()
        self._watch_parked = False
        self._watch_stop = False
        self.stand_ins = 0                  # times the watch thread served for a handler stuck on the serving one
        self.instance = secrets.token_hex(16)
        self.endpoints: List[Endpoint] = []
        self._by_path: Dict[str, Endpoint] = {}
        self._peers: Dict[Connection, _Peer] = {}
        self._next_peer = 0
        self._inbox: Deque[Tuple[Any, ...]] = collections.deque()
        self._running: List[Request] = []
        self._maintain_at = 0.0
        self._credits_due = False
        self._stopping = False
        self._started = False
        self._closed = False
        self._descriptor_path: Optional[str] = None
        self._published: List[Tuple[Any, str]] = []
        self._resources: List[Any] = []
        self.refused = 0                    # requesters refused after they connected (authentication, limit)
        self.evictions = 0                  # idle requesters disconnected to give their place to a newcomer

    # -- definition ---------------------------------------------------------
    def add_endpoint(self, path: str, kind: Union[Kind, str], size: int, handler: Optional[Handler] = None, *,
                     queue: Optional[int] = DEFAULT_QUEUE, concurrency: int = 1, timeout: Optional[float] = None,
                     description: str = "", inline: bool = False, copy: bool = False, slots: int = 1) -> Endpoint:
        """Define an endpoint (before ``start()``); ``timeout`` overrides ``call_timeout`` for its handler;
        ``inline=True`` runs the handler on the serving thread (saves the hand-off to the pool, ~15-35 us
        on softdoca on two vCPUs; only for handlers that return at once: a slow one stalls every requester,
        no timeout); ``copy=True`` gives a write handler a private copy of the data instead of a live view
        of the requester's slot (for handlers that validate before use); ``slots`` (write endpoints): slots of
        the endpoint's size in each requester's region, so that that many staged writes (over the inline size)
        of one requester to this endpoint overlap instead of going one at a time (their handlers still run
        ``concurrency`` at a time, in order of arrival); memory: ``slots`` x size per requester."""
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
        ep = Endpoint(len(self.endpoints), path, Kind(kind), size, handler, queue=queue, concurrency=concurrency,
                      timeout=timeout if timeout is not None else self.call_timeout, description=description,
                      inline=inline, copy=copy, slots=slots)
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
        """Decorator: ``fn(payload[, requester]) -> bytes`` answers a call (``async def`` too)."""
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
            resp.add_endpoint(e.path, e.kind, e.size, fn, queue=e.queue, concurrency=e.concurrency,
                              timeout=e.timeout, description=e.description, inline=e.inline, copy=e.copy,
                              slots=e.slots)
        return resp

    def specs(self) -> List[EndpointSpec]:
        return [EndpointSpec(e.path, e.kind, e.size, None, e.queue, e.description, e.concurrency, e.timeout,
                             e.inline, e.copy, e.slots) for e in self.endpoints]

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
        return Device.open(ip=resolve(self.host))       # UnknownHost names the host

    def start(self) -> "Responder":
        """Open the device, post the control receives and listen."""
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
                 instance=self.instance, auth=bool(self.credentials), allow=len(self.allow or ()))
        return self

    def _start(self) -> None:
        self.dev = self._open_device()
        self._resources.append(self.dev)
        self.pe = ProgressEngine(mode=self.progress_mode)
        self._resources.append(self.pe)
        self.pool.kick_engine(self.pe)      # softdoca: finished handlers kick the engine, one wait, no pipe
        # one replacement thread for each handler that can be stuck past its timeout: at most `concurrency`
        # per endpoint (then the endpoint answers BUSY), so other endpoints always have workers
        self.pool.max_workers = self.pool.workers + sum(e.concurrency for e in self.endpoints
                                                        if e.handler is not None and not e.inline)
        recv_slots = self.max_connections * (2 * self.window + 2) + 2 * self.max_pending
        # each requester may hold 2 x window + 2 send slots (what an honest one can have outstanding, and what
        # one that takes nothing keeps until the RNR budget ends): enough for all of them at once, so the
        # answers of one never wait for the slots of others
        send_slots = self.max_connections * (2 * self.window + 2) + 2 * self.max_pending
        self.inventory = BufferInventory(recv_slots + send_slots + 16)
        self._resources.append(self.inventory)
        # places: the authenticated, the handshakes, and the requests waiting for a handshake place
        self.rdma = Rdma(self.dev, self.pe, max_connections=self.max_connections + 2 * self.max_pending,
                         recv_queue_size=recv_slots,
                         send_queue_size=max(256, send_slots), max_tasks=recv_slots + send_slots + 16)
        # a requester that stops taking our messages (no receive posted) holds at most what an honest one
        # can have outstanding, its queue is bounded (a hello, then a few windows' worth), and it is dropped
        # past that (_send): the others' answers never wait behind its
        self.channel = Channel(self.dev, self.rdma, self.inventory, recv_slots=recv_slots, send_slots=send_slots,
                               on_message=lambda c, d: self._inbox.append(("msg", c, d)),
                               on_imm=lambda c, imm, n: self._inbox.append(("imm", c, imm)),
                               max_inflight=2 * self.window + 2,   # see send_slots
                               max_backlog=P.MAX_HELLO // P.MAX_BODY + 8 * self.window + 16)
        self.rdma.on_connection = lambda c, s: self._inbox.append(("conn", c, s))
        self.channel.post_all()
        if self.port == 0:
            self.port = free_port(self.host)
        self.admission = Admission(self.rdma, allow=self.allow, max_connections=self.max_connections,
                                   max_pending=self.max_pending, max_pending_per_source=self.max_pending_per_source,
                                   max_connections_per_source=self.max_connections_per_source, count=self._count,
                                   on_admit=self._admitted)
        self.rdma.listen(self.port, accept=self.admission.policy)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __enter__(self) -> "Responder":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stop(self) -> None:
        """Make ``serve_forever()`` return after the current iteration; called before it (a SIGTERM right
        after start), the next ``serve_forever()`` returns at once: a stop is never lost."""
        self._stopping = True

    def serve_forever(self, until: Optional[Callable[[], bool]] = None, *, poll: float = 0.1) -> None:
        """Serve until ``stop()`` (or ``until()`` is true)."""
        self.start()
        self._serving = threading.current_thread()
        self.pool.defer = True      # a pass's handlers start as the next pass goes into its wait (_wait)
        self._baton.acquire()
        if self.handlers_here and self.pe.can_kick and self.pe.mode.value == "blocking":
            self._watch_stop, self._here_ok = False, True
            watch = threading.Thread(target=self._watch_loop, name="pydoca-serve-watch", daemon=True)
            watch.start()
            self._watch = watch             # started first: close() from another thread may join it
        try:
            while not self._stopping and not self._closed and not (until is not None and until()):
                self.run_once(poll)
        except _ServingEnded:
            pass
        finally:
            self._stopping = False          # the stop that ended this run is consumed here, not at the start
            self._here_ok = False
            self._stop_watch()
            self._baton.release()
            self._serving = None
            self.pool.defer = False
            self.pool.signal()      # what the last pass submitted starts now

    # -- short handlers on the serving thread ---------------------------------------
    def _run_here(self, job: Job) -> None:
        """Run a short handler's job on the serving thread: the baton is let go meanwhile, so that the watch
        thread can serve in its place if it runs long; taken back (from the stand-in, kicked out of its
        wait) before the result is handled, like a finished pool job's."""
        self._here_since = time.monotonic()
        self._here_job = job
        if self._watch_parked:
            self._watch_evt.set()
        self._baton.release()
        try:
            self.pool.run_here(job)
        finally:
            self._here_job = None
            self._here_last = time.monotonic()
            if not self._baton.acquire(blocking=False):
                self.pe.kick()              # a stand-in serves: it gives the baton back after its pass
                self._baton.acquire()
        if self._closed:
            raise _ServingEnded()
        self._on_job(job)

    def _watch_loop(self) -> None:
        """Watch the handlers run on the serving thread; serve in its place while one runs past STALL_S."""
        while not self._watch_stop:
            job = self._here_job
            if job is None:
                if time.monotonic() - self._here_last > 0.2:      # idle, or no handler here lately: park
                    self._watch_parked = True
                    if self._here_job is None and not self._watch_stop:
                        self._watch_evt.wait(1.0)
                    self._watch_evt.clear()
                    self._watch_parked = False
                else:
                    time.sleep(STALL_S)
                continue
            left = self._here_since + STALL_S - time.monotonic()
            if left > 0:
                time.sleep(left)
                continue
            if self._here_job is not job or not self._baton.acquire(blocking=False):
                continue
            try:
                if self._here_job is job:
                    self._stand_in(job)
            finally:
                self._baton.release()

    def _stand_in(self, job: Job) -> None:
        req = job.context
        if isinstance(req, Request):
            req.ep.short_runs = 0               # it goes to the pool again until it proves short again
        self.stand_ins += 1
        log.info("a handler runs long on the serving thread: another thread serves until it returns",
                 endpoint=req.ep.path if isinstance(req, Request) else "?",
                 after_ms=round(1000 * (time.monotonic() - self._here_since), 1))
        while self._here_job is job and not self._stopping and not self._closed:
            try:
                self.run_once(0.05)              # the serving thread kicks the engine when its handler returns
            except Exception as exc:  # noqa: BLE001 - keep serving
                self._failed("stand-in", exc)

    def _stop_watch(self) -> None:
        watch, self._watch = self._watch, None
        self._watch_stop = True
        self._watch_evt.set()
        if watch is not None and watch is not threading.current_thread() and watch.ident is not None:
            watch.join(5.0)

    def run_once(self, timeout: float = 0.1) -> int:
        """Wait up to ``timeout`` for events and finished handlers, handle them; returns how many."""
        self._wait(timeout)
        try:
            self.pe.progress_all(limit=256)
        except Exception as exc:  # noqa: BLE001 - one bad event must not stop the server
            self._failed("progress", exc)
        n = 0
        if self.pool.finished or not self.pool.kicks:     # without kicks: drain the wake-up pipe too
            for job in self.pool.take():
                n += 1
                self._guard("handler result", self._on_job, job)
        inbox = self._inbox
        while inbox:
            n += 1
            item = inbox.popleft()
            self._guard(item[0], self._dispatch, item)
        now = time.monotonic()
        if now >= self._maintain_at:          # deadlines and kills: a few times a second is enough
            self._maintain_at = now + MAINTAIN_S
            self._guard("maintenance", self._maintain)
        if self.admission.waiting:            # a handshake ended above (or a deadline cut one): the oldest
            self._guard("admission", self.admission.admit)   # waiting requests go before any new arrival
        if self._credits_due:
            self._credits_due = False
            self._send_credits()
        self.channel.reap()
        return n

    def _send_credits(self) -> None:
        """Credits of posted writes whose handlers ran, once per pass (one frame per requester)."""
        for peer in list(self._peers.values()):
            if peer.credit_due:
                due, peer.credit_due = peer.credit_due, 0
                self._guard("credits", self._send, peer, P.Credit(due), 0)   # one failing peer strands no other

    def _guard(self, what: str, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - one bad event must not stop the server
            self._failed(what, exc)

    @staticmethod
    def _failed(what: str, exc: BaseException) -> None:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        log.error("responder event failed", what=what, error=repr(exc),
                  at=f"{os.path.basename(where.filename)}:{where.lineno}")

    def _wait(self, timeout: float) -> None:
        pool = self.pool
        busy = bool(self._inbox or pool.finished)
        polling = self.pe.mode.value == "polling"
        if not busy and not polling and pool.kicks:
            # finished jobs kick the engine: one wait, woken straight by the links; the handlers submitted
            # in this pass are signalled in the same C call, the interpreter lock let go (adaptive spin)
            pool.signal_and_wait(max(0, math.ceil(timeout * 1000)), self.pe.spin_us)
            return
        pool.signal()                     # the handlers submitted in this pass start now
        if busy:
            return
        if polling:
            deadline = time.monotonic() + timeout
            while not self.pe.progress() and not pool.finished and time.monotonic() < deadline:
                pass
            return
        self.pe.request_notification()
        if self.pe.progress() or self.pool.finished:
            return
        ready, _, _ = select.select([self.pe.fileno(), self.pool.fileno()], [], [], max(0.0, timeout))
        if self.pe.fileno() in ready:
            self.pe.clear_notification()

    def close(self) -> None:
        """Disconnect everyone and release every resource. Idempotent."""
        if self._closed:
            return
        self._closed = True
        serving = self._serving
        if serving is not None and serving is not threading.current_thread():
            # serve_forever runs on another thread: let it leave its wait before the engine goes
            self._stopping = True
            pe: Optional[ProgressEngine] = getattr(self, "pe", None)
            if pe is not None and pe.can_kick and not pe.closed:
                pe.kick()
            self._stop_watch()                  # a stand-in leaves its pass first
            # a thread stuck in a handler (one that ran short until now) leaves once it returns
            serving.join(5.0 if self._here_job is None else 0.2)
            if serving.is_alive():
                log.warning("closing while serve_forever still runs (a handler on the serving thread?)",
                            thread=serving.name)
        self._remove_descriptor()
        for store, key in self._published:
            try:
                store.delete(key)
            except Exception as exc:  # noqa: BLE001 - the lease withdraws it anyway
                log.warning("could not withdraw the published service", key=key, error=str(exc))
        self._published.clear()
        channel: Optional[Channel] = getattr(self, "channel", None)
        if channel is not None:
            channel.closing = True
        admission: Optional[Admission] = getattr(self, "admission", None)
        if admission is not None:
            admission.close()
        for peer in list(self._peers.values()):
            peer.conn.disconnect()
        self.pool.close()
        rdma: Optional[Rdma] = getattr(self, "rdma", None)
        try:
            if rdma is not None:
                rdma.close()
        finally:
            if channel is not None:
                channel.close()
            for peer in list(self._peers.values()):
                self._revoke(peer)
            for res in reversed(self._resources):
                res.close()
            self._resources.clear()
            self._peers.clear()

    # -- descriptor file --------------------------------------------------------
    def descriptor(self) -> Dict[str, Any]:
        """The payload of this responder's descriptor file (see pydoca.peer.files)."""
        from .files import responder_payload
        return responder_payload(self.name, self.host, self.port, self.instance, self.token,
                                 [(e.id, e.path, e.kind.value, e.size) for e in self.endpoints])

    def publish(self, store: Any) -> str:
        """Publish this responder in a metadata store (anything with ``put(key, dict)``, e.g.
        ``pydoca.transfer.open_store("etcd://...")``) under its lease; ``Requester.discover(name, store)``
        finds it. Returns the key; ``close()`` withdraws it."""
        key = f"/pydoca/services/{self.name}/{self.address}"
        store.put(key, {**self.descriptor(), "token": None, "key": key})
        self._published.append((store, key))
        return key

    def write_descriptor(self, path: str) -> None:
        """Write the descriptor file (atomic, mode 0600); removed again by ``close()``."""
        from .files import write_responder_file
        write_responder_file(path, self.descriptor())
        self._descriptor_path = path

    def _remove_descriptor(self) -> None:
        path, self._descriptor_path = self._descriptor_path, None
        if path is not None:
            from .files import remove_if_ours
            remove_if_ours(path, self.instance)

    # -- connections ----------------------------------------------------------------
    def _count(self, source: Optional[str]) -> Tuple[int, int, int, int]:
        """(places taken, handshakes pending, handshakes pending from ``source``, places taken from ``source``):
        the admission's budget. The place of a requester a newcomer from ``source`` could evict (``_victim``)
        counts as free."""
        ready, ready_source = self._taken(source)
        shaking = [p for p in self._peers.values() if not p.ready and not p.gone and not p.evicted]
        victim = self._victim(source, ready, ready_source)
        if victim is not None:
            ready -= 1
            ready_source -= victim.source == source
        return ready, len(shaking), sum(p.source == source for p in shaking), ready_source

    def _taken(self, source: Optional[str]) -> Tuple[int, int]:
        """Places taken (authenticated requesters neither gone nor evicted), in all and from ``source``."""
        live = [p for p in self._peers.values() if p.ready and not p.gone and not p.evicted]
        return len(live), sum(p.source == source for p in live)

    def _victim(self, source: Optional[str], ready: int, ready_source: int) -> Optional[_Peer]:
        """Whom a newcomer from ``source`` would evict, given the places taken in all and from ``source``:
        with that address's share full, its own requester idle longest; else, with every place taken, anyone's."""
        per_source = self.max_connections_per_source
        if per_source is not None and ready_source >= per_source:
            return self._evictable(source)
        if ready >= self.max_connections:
            return self._evictable()
        return None

    def _evictable(self, source: object = _ANY) -> Optional[_Peer]:
        """The requester (from ``source``, if given) idle longest, if it has been idle ``idle_evict`` seconds
        with nothing outstanding."""
        if self.idle_evict is None:
            return None
        limit = time.monotonic() - self.idle_evict
        best: Optional[_Peer] = None
        for p in self._peers.values():
            if p.ready and not p.gone and not p.evicted and p.kill_at is None and p.last_active <= limit and \
                    not (p.open or p.posted_open or p.credit_due) and (source is _ANY or p.source == source) and \
                    (best is None or p.last_active < best.last_active):
                best = p
        return best

    def _evict(self, peer: _Peer, places: str) -> None:
        """Disconnect an idle requester to give its place to a newcomer; it is told why (``Dismissed`` there)."""
        peer.evicted = True
        self.evictions += 1
        idle = time.monotonic() - peer.last_active
        self._violation(peer, 0, f"disconnected after {idle:.0f}s idle: {places} were taken and another requester "
                                 "needed one (connect again; the responder's idle_evict sets this)", P.Status.BUSY)

    def _admitted(self, conn: Connection, source: Optional[str]) -> None:
        self._next_peer += 1
        self._peers[conn] = _Peer(self._next_peer, conn, time.monotonic() + self.ident_timeout, source)

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
            self._violation(peer, 0, f"unexpected write-with-immediate {item[2]:#x} (protocol 2 uses none)")

    def _on_conn(self, conn: Connection, state: ConnectionState) -> None:
        peer = self._peers.get(conn)
        if state is ConnectionState.ESTABLISHED:
            if peer is None:
                self._next_peer += 1
                peer = self._peers[conn] = _Peer(self._next_peer, conn, 0.0)
            peer.deadline = time.monotonic() + self.ident_timeout
            log.debug("requester connected", peer=peer.id)
        elif state in (ConnectionState.DISCONNECTED, ConnectionState.FAILED, ConnectionState.REJECTED):
            if peer is not None:
                self._drop(peer, f"connection {state.value}")

    def _drop(self, peer: _Peer, why: str) -> None:
        """Forget a requester: revoke its region, drop its queued requests."""
        if peer.gone:
            return
        peer.gone = True
        log.info("requester gone", peer=str(peer), reason=why)
        if peer.conn.state in (ConnectionState.ESTABLISHED, ConnectionState.PENDING):
            peer.conn.disconnect()
        self.channel.drop_outbox(peer.conn)
        for ep in self.endpoints:
            if any(r.peer is peer for r in ep.waiting):
                kept = collections.deque(r for r in ep.waiting if r.peer is not peer)
                ep.waiting.clear()
                ep.waiting.extend(kept)
        self._revoke(peer)
        self._peers.pop(peer.conn, None)
        self.rdma._forget(peer.conn)

    def _revoke(self, peer: _Peer) -> None:
        """Unmap and let go of its private region (handlers still running keep only their views)."""
        rmap, peer.rmap = peer.rmap, None
        if rmap is not None:
            rmap.close()
        peer.region = None

    def _violation(self, peer: _Peer, seq: int, why: str, code: P.Status = P.Status.PROTOCOL_ERROR) -> None:
        """Tell the requester why, then disconnect it (at most 1 s later)."""
        log.warning("disconnecting requester", peer=str(peer), reason=why)
        peer.kill_at = time.monotonic() + 1.0
        self._send(peer, P.StatusMsg(code, why), seq,
                   on_done=lambda _ok: self._inbox.append(("drop", peer.conn, why)))

    def _maintain(self) -> None:
        now = time.monotonic()
        for peer in list(self._peers.values()):
            if peer.kill_at is not None and now >= peer.kill_at:
                self._drop(peer, "disconnected by the responder")
            elif not peer.ready and peer.deadline and now >= peer.deadline:
                self._drop(peer, f"no IDENT/AUTH within {self.ident_timeout:g}s")
        for req in list(self._running):
            job = req.job
            if job is None or job.deadline is None or now < job.deadline or job.done:
                continue
            state = self.pool.abandon(job)        # a queued job never starts; a running one is left to its thread
            if state == Job.DONE:
                continue                          # its result is on its way
            ep = req.ep
            if state == Job.RUNNING:
                req.stuck = True                  # keeps its permit until its handler returns (_on_job)
                ep.stuck += 1
            log.warning("handler timed out", endpoint=ep.path, peer=str(req.peer), started=state == Job.RUNNING,
                        seconds=round(now - job.started, 3), stuck=ep.stuck)
            self._finish(req, P.Status.HANDLER_ERROR,
                         f"handler of {ep.path} timed out after {now - job.started:.3g}s")
            if ep.stuck >= ep.concurrency:
                self._refuse_waiting(ep, P.Status.BUSY, self._stuck_message(ep))
        for ep in self.endpoints:                 # requests waiting for a permit past their handler's timeout
            waiting = ep.waiting
            while waiting and waiting[0].deadline is not None and now >= waiting[0].deadline:
                req = waiting.popleft()
                self._finish(req, P.Status.HANDLER_ERROR, f"request to {ep.path} waited {ep.timeout:g}s for a "
                             "handler and timed out (the endpoint is saturated: raise its concurrency or timeout)")

    @staticmethod
    def _stuck_message(ep: Endpoint) -> str:
        return (f"{ep.path} is busy: all {ep.concurrency} of its handlers are stuck past their "
                f"{ep.timeout:g}s timeout")

    def _refuse_waiting(self, ep: Endpoint, code: P.Status, message: str) -> None:
        while ep.waiting:
            self._finish(ep.waiting.popleft(), code, message)

    # -- handshake ---------------------------------------------------------------------
    def _send(self, peer: _Peer, msg: P.Message, seq: int, flags: int = 0,
              on_done: Optional[Callable[[bool], None]] = None) -> None:
        """Send to a requester; ``on_done(ok)`` once sent, or at once with False when it is not sent (the
        requester is gone, or it takes none of our messages: then it is dropped)."""
        if not peer.gone and self.channel.send(peer.conn, P.encode(msg, seq, flags), on_done):
            return
        if on_done is not None:
            on_done(False)
        if not peer.gone and peer.kill_at is None:
            why = f"it does not take our messages ({self.channel.backlog(peer.conn)} queued for it)"
            log.warning("disconnecting requester", peer=str(peer), reason=why)
            peer.kill_at = time.monotonic()
            self._inbox.append(("drop", peer.conn, why))

    def _status(self, peer: _Peer, seq: int, code: P.Status, message: str = "", flags: int = 0) -> None:
        self._send(peer, P.StatusMsg(code, message), seq, flags)

    def _on_message(self, peer: _Peer, data: bytes) -> None:
        try:
            frame = P.decode(data)
        except P.FrameError as exc:
            self._violation(peer, 0, f"malformed control message: {exc}")
            return
        msg, seq = frame.msg, frame.seq
        if not peer.ready:
            self._handshake(peer, msg, frame)
        elif isinstance(msg, (P.Write, P.Read, P.Call)):
            peer.last_active = time.monotonic()
            self._on_request(peer, frame.type, seq, msg, frame.flags)
        else:
            self._violation(peer, seq, f"{frame.type.name} is not a requester message here")

    def _handshake(self, peer: _Peer, msg: P.Message, frame: P.Frame) -> None:
        if peer.ident is None:
            if not isinstance(msg, P.Ident):
                self._violation(peer, frame.seq, f"expected IDENT first, got {frame.type.name}")
                return
            peer.ident = msg
            if not self.credentials:
                self._welcome(peer, ALL_RIGHTS)
                return
            peer.cred = self.credentials.get(msg.key_id)
            peer.nonce = secrets.token_bytes(P.NONCE)
            self._send(peer, P.Challenge(peer.nonce), 0)
            return
        if not isinstance(msg, P.Auth):
            self._violation(peer, frame.seq, f"expected AUTH, got {frame.type.name}")
            return
        ident = peer.ident
        ok = peer.cred is not None and hmac.compare_digest(
            msg.mac, client_mac(peer.cred.token, ident.nonce, peer.nonce, ident.name, ident.key_id))
        if not ok or peer.cred is None:
            self.refused += 1
            # the requester is told the same either way: which key ids exist is nobody's business
            log.warning("authentication failed", peer=str(peer), key_id=ident.key_id,
                        reason="unknown key id" if peer.cred is None else "wrong token")
            self._violation(peer, 0, "authentication failed (unknown key id or wrong token): use the key id and "
                                     "token from the responder's descriptor file or --token-file",
                            P.Status.REJECTED)
            return
        self._welcome(peer, peer.cred)

    def _welcome(self, peer: _Peer, cred: Credential) -> None:
        """Authenticated: build its private region and send the hello."""
        assert peer.ident is not None
        ready, from_source = self._taken(peer.source)
        per_source = self.max_connections_per_source
        victim = self._victim(peer.source, ready, from_source)
        if victim is None and per_source is not None and from_source >= per_source:
            self.refused += 1
            self._violation(peer, 0, f"connection limit per address reached ({per_source} requesters from "
                                     f"{peer.source}): try again later", P.Status.BUSY)
            return
        if victim is None and ready >= self.max_connections:
            self.refused += 1
            self._violation(peer, 0, f"connection limit reached ({self.max_connections} requesters): try again "
                                     "later", P.Status.BUSY)
            return
        if victim is not None:
            self._evict(victim, f"all {per_source} places for {peer.source}" if victim.source == peer.source and
                        per_source is not None and from_source >= per_source else
                        f"all {self.max_connections} places")
        addr = peer.conn.peer_address if peer.conn.incoming else None
        peer.info = RequesterInfo(peer.id, peer.ident.name or f"peer{peer.id}",
                                  f"{addr[0]}:{addr[1]}" if addr else None, peer.ident.key_id)
        peer.cred, peer.ready = cred, True
        peer.last_active = time.monotonic()
        entries, total = [], 0
        for e in self.endpoints:
            allowed = cred.allows(e.path, e.kind.value)
            entry = {"id": e.id, "path": e.path, "kind": e.kind.value, "size": e.size,
                     "rights": e.kind.value[0] if allowed else "", "slot": total if allowed else -1}
            if e.slots > 1:
                entry["slots"] = e.slots      # slot i at slot + i x size rounded up to 64 bytes
            entries.append(entry)
            if allowed:
                peer.slots[e.id] = total
                total += _stride(e.size) * e.slots
        region = ""
        if total:
            peer.region = np.zeros(total, dtype=np.uint8)
            peer.rmap = MemoryMap(self.dev, peer.region, access=REGION_ACCESS)
            region = base64.b64encode(peer.rmap.export_rdma()).decode()
        doc: Dict[str, Any] = {"protocol": P.VERSION, "instance": self.instance, "service": self.name,
                               "identity": str(peer.info), "slot": P.SLOT_SIZE, "window": self.window,
                               "pid": os.getpid(), "host": socket.gethostname(), "region": region,
                               "endpoints": entries}
        if self.credentials:
            doc["proof"] = server_proof(cred.token, peer.ident.nonce, peer.nonce).hex()
        for frame in P.hello_frames(doc):
            self.channel.send(peer.conn, frame)
        log.info("requester identified", peer=str(peer.info), address=peer.info.address, region=total)

    # -- operations -----------------------------------------------------------------------
    def _on_request(self, peer: _Peer, mtype: P.MsgType, seq: int, msg: P.Data, flags: int) -> None:
        pf = flags & P.FLAG_POSTED          # a posted write's refusal also returns its credit
        if not 0 <= msg.ep < len(self.endpoints):
            self._status(peer, seq, P.Status.NOT_FOUND, f"no endpoint with id {msg.ep}", flags=pf)
            return
        ep = self.endpoints[msg.ep]
        want = _WANT[mtype]
        if ep.kind is not want:
            self._status(peer, seq, P.Status.REJECTED, f"{ep.path} is a {ep.kind.value} endpoint, not {want.value}",
                         flags=pf)
            return
        if ep.id not in peer.slots:
            self._status(peer, seq, P.Status.REJECTED, f"{peer.info.key_id if peer.info else ''!r} has no "
                         f"{want.value} right on {ep.path}", flags=pf)
            return
        in_buffer = bool(flags & P.FLAG_IN_BUFFER)
        if msg.offset + msg.length > ep.size or (want is Kind.WRITE and msg.length == 0) or \
                (want is Kind.CALL and msg.offset != 0):
            self._status(peer, seq, P.Status.TOO_LARGE,
                         f"{msg.length} bytes at offset {msg.offset} do not fit {ep.path} ({ep.size} bytes)",
                         flags=pf)
            return
        if msg.slot >= ep.slots:
            self._status(peer, seq, P.Status.PROTOCOL_ERROR, f"{ep.path} has {ep.slots} slot(s) per requester, "
                         f"not slot {msg.slot}", flags=pf)
            return
        data: Any
        in_slot = False
        if want is Kind.WRITE:
            data = peer.slot_view(ep, msg.offset, msg.length, msg.slot) if in_buffer else memoryview(msg.payload)
            if ep.copy and in_buffer:
                data = memoryview(bytearray(data))
        elif want is Kind.CALL:
            data = bytes(peer.slot_view(ep, 0, msg.length)) if in_buffer else msg.payload
        elif msg.length > P.INLINE_MAX:
            data, in_slot = peer.slot_view(ep, msg.offset, msg.length), True
        else:
            data = memoryview(bytearray(msg.length))
        if ep.stuck >= ep.concurrency:
            self._status(peer, seq, P.Status.BUSY, self._stuck_message(ep), flags=pf)
            return
        posted = bool(flags & P.FLAG_POSTED)
        if (peer.posted_open if posted else peer.open) >= self.window:
            # the requester keeps at most `window` operations (and as many posted writes) unanswered: one
            # that sends more could fill an endpoint's queue for everyone, and its copies our memory
            self._violation(peer, seq, f"more than window={self.window} {'posted writes' if posted else 'operations'}"
                            " unanswered")
            return
        req = Request(peer, seq, ep, msg.offset, msg.length, data, in_slot, posted=posted)
        if ep.running < ep.concurrency and not ep.waiting:
            peer.posted_open += posted
            peer.open += not posted
            self._begin(req)
        elif not flags & P.FLAG_WAIT or len(ep.waiting) >= (ep.queue if ep.queue is not None else
                                                             self.max_connections * self.window):
            self._status(peer, seq, P.Status.BUSY, f"{ep.path} is busy" + (" (queue full)" if flags & P.FLAG_WAIT
                                                                           else ""), flags=pf)
        else:
            peer.posted_open += posted
            peer.open += not posted
            if ep.timeout is not None and ep.handler is not None and not ep.inline:
                req.deadline = time.monotonic() + ep.timeout
            ep.waiting.append(req)

    def _begin(self, req: Request) -> None:
        ep = req.ep
        ep.running += 1
        ep.ops += 1
        self._running.append(req)
        if ep.handler is None:
            if ep.kind is Kind.WRITE:
                ep.mem[req.offset:req.offset + req.length] = np.frombuffer(req.data, dtype=np.uint8)
            else:
                req.data[:] = ep.mem.data[req.offset:req.offset + req.length]
            self._complete(req, None)
            return
        assert req.peer.info is not None
        req.job = Job(ep.handler, ep.args(req.data, req.length, req.peer.info), req, ep.timeout)
        if ep.inline:
            req.job.run()
            req.job.done = True
            self._on_job(req.job)
            return
        if self._here_ok and ep.short_runs >= PROVEN and not ep.is_async and \
                threading.current_thread() is self._serving:
            self._run_here(req.job)
            return
        self.pool.submit(req.job)

    def _on_job(self, job: Job) -> None:
        req: Request = job.context
        if job.ran_s is not None and not req.ep.inline:   # how long its handler ran decides where it runs next
            req.ep.short_runs = req.ep.short_runs + 1 if job.ran_s < SHORT_S and not job.timed_out else 0
        if job.timed_out:
            log.info("timed-out handler finished late; result dropped", endpoint=req.ep.path)
            if req.stuck:                         # its permit is free only now
                req.stuck = False
                req.ep.stuck -= 1
                req.ep.running -= 1
                self._start_waiting(req.ep)
            return
        if job.error is not None:
            exc = job.error
            log.warning("handler raised", endpoint=req.ep.path, peer=str(req.peer), error=repr(exc))
            self._finish(req, P.Status.HANDLER_ERROR, f"{type(exc).__name__}: {exc}")
            return
        self._complete(req, job.value)

    def _complete(self, req: Request, value: Any) -> None:
        """Turn a handler's return value into the answer."""
        if req.ep.kind is Kind.WRITE:
            self._finish(req, P.Status.OK)
        elif req.ep.kind is Kind.READ:
            self._answer_read(req, value)
        else:
            self._answer_call(req, value)

    def _answer_read(self, req: Request, got: Any) -> None:
        n = req.length
        if isinstance(got, (bytes, bytearray, memoryview)):
            data = memoryview(got).cast("B")
            if len(data) > req.length:
                self._finish(req, P.Status.TOO_LARGE, f"read handler returned {len(data)} bytes, more than the "
                             f"{req.length} requested")
                return
            req.data[:len(data)] = data
            n = len(data)
        elif isinstance(got, int) and not isinstance(got, bool):
            if not 0 <= got <= req.length:
                self._finish(req, P.Status.HANDLER_ERROR, f"read handler returned length {got}, outside "
                             f"0..{req.length}")
                return
            n = got
        if req.in_slot:
            self._reply(req, P.Ready(req.ep.id, req.offset, n), P.FLAG_IN_BUFFER)
        else:
            self._reply(req, P.Ready(req.ep.id, req.offset, n, bytes(req.data[:n])))

    def _answer_call(self, req: Request, got: Any) -> None:
        ep = req.ep
        if got is None:
            got = b""
        elif isinstance(got, str):
            got = got.encode("utf-8")
        if not isinstance(got, (bytes, bytearray, memoryview)):
            self._finish(req, P.Status.HANDLER_ERROR, f"call handler returned {type(got).__name__}, not bytes")
            return
        data = memoryview(got).cast("B")
        if len(data) <= P.INLINE_MAX:
            self._reply(req, P.Result(ep.id, 0, len(data), bytes(data)))
        elif len(data) > ep.size:
            self._finish(req, P.Status.TOO_LARGE, f"response of {len(data)} bytes exceeds {ep.path}'s "
                         f"{ep.size}-byte buffer")
        elif req.peer.gone:
            self._finish(req, P.Status.OK)
        else:
            req.peer.slot_view(ep, 0, len(data))[:] = data
            self._reply(req, P.Result(ep.id, 0, len(data)), P.FLAG_IN_BUFFER)

    def _reply(self, req: Request, msg: P.Message, flags: int = 0) -> None:
        self._send(req.peer, msg, req.seq, flags)
        req.answered = True
        req.peer.open -= 1
        self._release(req)

    def _finish(self, req: Request, code: P.Status, message: str = "") -> None:
        if code is not P.Status.OK:
            req.ep.errors += 1
        if not req.answered and not req.posted:
            self._status(req.peer, req.seq, code, message)
            req.peer.open -= 1
        elif not req.answered:                     # a posted write: a failure is answered, a success credited
            peer = req.peer
            peer.posted_open -= 1
            if code is P.Status.OK:
                peer.credit_due += 1         # sent at the end of this pass (_send_credits)
                self._credits_due = True
            else:                            # FLAG_POSTED: this status also returns the write's credit
                self._send(peer, P.StatusMsg(code, message), req.seq, P.FLAG_POSTED)
        req.answered = True
        self._release(req)

    def _release(self, req: Request) -> None:
        """The request is answered: free its concurrency permit (unless its handler is stuck past its
        timeout: then when it returns), start the next waiting one."""
        req.job = None
        # its requester was busy until now (an answer in its slot is yet to be read): idle from here on
        req.peer.last_active = time.monotonic()
        if req not in self._running:
            return
        self._running.remove(req)
        if req.stuck:
            return
        req.ep.running -= 1
        self._start_waiting(req.ep)

    def _start_waiting(self, ep: Endpoint) -> None:
        """Start waiting requests while permits are free. A request that completes at once (inline or
        handler-less) releases its permit from inside _begin: the outer loop goes on, rather than a call per
        request (a queue of hundreds would exceed the recursion limit and leave a permit held for ever)."""
        me = threading.current_thread()
        if ep.draining is me:
            return
        # another thread's loop may be paused here (a handler run on the serving thread while the stand-in
        # serves): this thread drains meanwhile and hands the mark back
        before, ep.draining = ep.draining, me
        try:
            while ep.running < ep.concurrency and ep.waiting:
                nxt = ep.waiting.popleft()
                if not nxt.peer.gone and nxt.peer.kill_at is None:
                    self._begin(nxt)
        finally:
            ep.draining = before

    def __repr__(self) -> str:
        return f"<Responder {self.name} {self.address} endpoints={len(self.endpoints)} peers={len(self._peers)}>"


__all__ = ["Endpoint", "RequesterInfo", "Responder"]
