"""DOCA RDMA: the ``Rdma`` context, its connections and its tasks.

Two ways to connect, as in DOCA:

* out of band: ``blob, conn = rdma.export()`` -> give ``blob`` to the peer ->
  ``rdma.connect(peer_blob, conn)``;
* RDMA CM: ``rdma.listen(port, accept=...)`` on one side,
  ``rdma.connect_to(address, port)`` on the other.

Every task method returns a :class:`pydoca.ctx.Task` (``wait``, ``result``,
``await``). Callbacks and completions are delivered by the ProgressEngine.
"""
from __future__ import annotations

import collections
import ipaddress
import socket
import time
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, TypeVar, Union

from pydoca._log import get_logger

from .._native import callbacks, ffi, lib
from .._native.task_types import SYNC_EVENT_TASK_TYPES, TASK_TYPES
from ..buffer import Buffer
from ..ctx import Context, CtxState, Task
from ..device import Device
from ..errors import AlreadyExistError, DocaError, InUseError, check
from ..memory import Access
from ..pe import ProgressEngine
from .connection import Connection, ConnectionState
from .gid import Gid, choose_gid_index, gid_table
from .batch import KINDS, BatchError, BatchMixin, TaskBatch
from .ring import TaskRing
from .sync_event import SyncEventTasksMixin, configure_sync_event_tasks as _configure_sync_event_tasks
from .tasks import AtomicTask, Opcode, ReadTask, Received, ReceiveTask, SendTask, WriteTask, to_be32

log = get_logger()

AcceptPolicy = Callable[[Connection], Union[bool, bytes, None]]
_TASK_TYPES = TASK_TYPES
_EV_REQUEST, _EV_ESTABLISHED, _EV_FAILURE, _EV_DISCONNECT = range(4)
# task kinds of the C shim pydoca_rdma_submit_one (shim.c's PYDOCA_B_*, batch.KINDS)
_K_WRITE, _K_READ, _K_SEND, _K_WRITE_IMM, _K_SEND_IMM = (KINDS[k] for k in ("write", "read", "send", "write_imm",
                                                                               "send_imm"))
_T = TypeVar("_T", bound=Task[Any])
_tasks = callbacks.tasks
_submit_fast = lib.pydoca_rdma_submit_fast


def _peer(conn: Connection) -> Optional[str]:
    """host:port of a connection's peer for log lines (None if unknown)."""
    try:
        addr = conn.peer_address
    except Exception:  # noqa: BLE001 - logging only
        return None
    return f"{addr[0]}:{addr[1]}" if addr else None


def _free_port_hint() -> int:
    """A currently free TCP port, to suggest when the asked one is taken."""
    try:
        with socket.socket() as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])
    except OSError:
        return 18516


class Rdma(SyncEventTasksMixin, BatchMixin, Context):
    """A DOCA RDMA context on ``dev``, progressed by ``pe``.

    Configuration is keyword-only and applied before start; the context is
    started on construction unless ``start=False``.
    """

    def __init__(self, dev: Device, pe: ProgressEngine, *,
                 permissions: Access = Access.LOCAL_READ_WRITE | Access.RDMA_WRITE | Access.RDMA_READ,
                 gid_index: Optional[int] = None,
                 max_connections: int = 16,
                 send_queue_size: Optional[int] = None,
                 recv_queue_size: Optional[int] = None,
                 max_tasks: int = 256,
                 rnr_retry_count: Optional[int] = None,
                 connection_request_timeout_ms: Optional[int] = None,
                 request_timeout: float = 5.0,
                 start: bool = True) -> None:
        super().__init__(pe, owners=(dev,))
        self.dev = dev
        out = ffi.new("struct doca_rdma **")
        check(lib.doca_rdma_create(dev.handle, out), "doca_rdma_create")
        rdma = self._rdma = out[0]
        self._arm(lambda: check(lib.doca_rdma_destroy(rdma), "doca_rdma_destroy"))
        self._attach(lib.doca_rdma_as_ctx(rdma))
        self._conns: Dict[int, Connection] = {}
        self.requests: Deque[Connection] = collections.deque()
        self._accept: Optional[AcceptPolicy] = None
        self.on_connection: Optional[Callable[[Connection, ConnectionState], None]] = None
        self.listening: List[int] = []
        self._ready: Deque[Connection] = collections.deque()   # established incoming, for accept()
        #: seconds an incoming request may stay undecided (in ``requests``) before it is rejected (default 5 s,
        #: like the runtime's own bound on a request nobody answers: softdoca's connection request timeout)
        self.request_timeout = request_timeout

        check(lib.doca_rdma_set_permissions(rdma, int(permissions)), "doca_rdma_set_permissions")
        if gid_index is None:
            gid_index = choose_gid_index(dev)
        if gid_index is not None:
            check(lib.doca_rdma_set_gid_index(rdma, gid_index), "doca_rdma_set_gid_index")
        self.gid_index = gid_index
        check(lib.doca_rdma_set_max_num_connections(rdma, max_connections), "doca_rdma_set_max_num_connections")
        if send_queue_size is not None:
            check(lib.doca_rdma_set_send_queue_size(rdma, send_queue_size), "doca_rdma_set_send_queue_size")
        if recv_queue_size is not None:
            check(lib.doca_rdma_set_recv_queue_size(rdma, recv_queue_size), "doca_rdma_set_recv_queue_size")
        if rnr_retry_count is not None:
            check(lib.doca_rdma_set_rnr_retry_count(rdma, rnr_retry_count), "doca_rdma_set_rnr_retry_count")
        if connection_request_timeout_ms is not None:
            check(lib.doca_rdma_set_connection_request_timeout(rdma, connection_request_timeout_ms),
                  "doca_rdma_set_connection_request_timeout")
        self._sync_event_tasks = False
        for name in _TASK_TYPES:
            if name in SYNC_EVENT_TASK_TYPES:
                continue
            check(getattr(lib, f"pydoca_rdma_task_{name}_set_conf")(rdma, max_tasks),
                  f"doca_rdma_task_{name}_set_conf")
        self._sync_event_tasks = _configure_sync_event_tasks(rdma, dev, max_tasks)
        check(lib.pydoca_rdma_set_conn_cbs(rdma), "doca_rdma_set_connection_state_callbacks")
        if start:
            self.start()

    # -- configuration readback -------------------------------------------
    @property
    def permissions(self) -> Access:
        out = ffi.new("uint32_t *")
        check(lib.doca_rdma_get_permissions(self._rdma, out), "doca_rdma_get_permissions")
        return Access(int(out[0]))

    @property
    def connections(self) -> List[Connection]:
        return list(self._conns.values())

    # -- connection events (called from progress) ---------------------------
    def _connection_for(self, c_conn: Any) -> Optional[Connection]:
        if c_conn == ffi.NULL:
            return None
        data = ffi.new("union doca_data *")
        if lib.doca_rdma_connection_get_user_data(c_conn, data) != 0:
            return None
        return self._conns.get(int(data.u64))

    def _forget(self, conn: Connection) -> None:
        self._conns.pop(conn._ud, None)

    # Every connection event is handled here, inside progress. Whatever goes
    # wrong with one connection (the peer vanished before we accepted, the
    # accept policy or on_connection raised, a reset) is confined to that
    # connection: it is rejected or marked failed and forgotten, one log line
    # says why, and nothing reaches the loop that called progress().
    def _on_conn_event(self, kind: int, c_conn: Any, conn_ud: int) -> None:
        if self.pe._pollers:                     # messages received before this event go first
            self.pe.run_pollers()
        if kind == _EV_REQUEST:
            self._on_request(c_conn)
        else:
            self._on_state_event(kind, c_conn, conn_ud)
        self._expire_requests()

    def _on_request(self, c_conn: Any) -> None:
        try:
            conn = Connection(self, c_conn, incoming=True)
        except DocaError as exc:
            log.warning("rdma connection request dropped", error=str(exc))
            lib.doca_rdma_connection_reject(c_conn)
            return
        self._conns[conn._ud] = conn
        conn._requested_at = time.monotonic()
        try:
            decision = self._accept(conn) if self._accept is not None else None
        except Exception as exc:  # noqa: BLE001 - a policy bug must not stop the listener
            log.error("rdma accept policy raised: request rejected", error=repr(exc), peer=_peer(conn))
            decision = False
        if decision is True or decision is False or isinstance(decision, (bytes, bytearray)):
            self._answer(conn, decision)
        else:
            self.requests.append(conn)
        self._notify(conn)

    def decide(self, conn: Connection, decision: Union[bool, bytes]) -> bool:
        """Answer a request left undecided (in ``requests``): True or private-data bytes accept, False
        rejects. False when it could not be answered: its peer went away meanwhile (it is dropped)."""
        try:
            self.requests.remove(conn)
        except ValueError:
            pass
        if conn.state is not ConnectionState.REQUESTED:
            return False
        return self._answer(conn, decision)

    def _answer(self, conn: Connection, decision: Union[bool, bytes]) -> bool:
        try:
            if decision is False:
                conn.reject()
            else:
                conn.accept(bytes(decision) if decision is not True else b"")
            return True
        except (DocaError, ValueError) as exc:
            # typically DOCA_ERROR_CONNECTION_ABORTED: the peer went away before our answer
            log.info("rdma connection request abandoned", error=str(exc), peer=_peer(conn))
            self._fail(conn)
            return False

    def _on_state_event(self, kind: int, c_conn: Any, conn_ud: int) -> None:
        found = self._conns.get(conn_ud) or self._connection_for(c_conn)
        if found is None:
            log.debug("event for unknown connection", kind=kind)
            return
        conn = found
        if conn._c is None:
            conn._c = c_conn
        if kind == _EV_ESTABLISHED:
            conn.state = ConnectionState.ESTABLISHED
            conn.ever_established = True
            if conn.incoming:
                self._ready_push(conn)
        elif kind == _EV_FAILURE:
            conn.state = ConnectionState.FAILED
        elif kind == _EV_DISCONNECT:
            conn.state = ConnectionState.DISCONNECTED
        log.debug("rdma connection", state=conn.state.value, incoming=conn.incoming)
        if conn.closed:
            conn._freeze()         # DOCA may free a closed connection's object after this event
        self._notify(conn)
        if conn.closed:
            self._forget(conn)     # the Connection object stays valid for its holders
            if conn.incoming and self._ready and conn in self._ready:
                self._ready.remove(conn)   # nothing keeps a departed peer's connection until a prune

    def _fail(self, conn: Connection) -> None:
        """Give up on one connection: reject or disconnect it (DOCA may already
        have closed it: errors are ignored), mark it failed, forget it."""
        if conn._c is not None:
            if conn.state is ConnectionState.REQUESTED:
                lib.doca_rdma_connection_reject(conn._c)
            elif conn.state in (ConnectionState.ESTABLISHED, ConnectionState.PENDING):
                lib.doca_rdma_connection_disconnect(conn._c)
        if not conn.closed:
            conn.state = ConnectionState.FAILED
        conn._freeze()
        self._forget(conn)

    def _notify(self, conn: Connection) -> None:
        if self.on_connection is None:
            return
        try:
            self.on_connection(conn, conn.state)
        except Exception as exc:  # noqa: BLE001 - a callback bug costs that connection only
            log.error("rdma on_connection callback raised: connection dropped", error=repr(exc),
                      state=conn.state.value, peer=_peer(conn))
            if not conn.closed:
                self._fail(conn)

    def _expire_requests(self) -> None:
        """Reject requests left undecided longer than ``request_timeout``."""
        if not self.requests:
            return
        now = time.monotonic()
        while self.requests:
            conn = self.requests[0]
            if conn.state is ConnectionState.REQUESTED and now - conn._requested_at < self.request_timeout:
                break
            self.requests.popleft()
            if conn.state is ConnectionState.REQUESTED:
                log.warning("rdma connection request undecided: rejected", after_s=self.request_timeout,
                            peer=_peer(conn))
                try:
                    conn.reject()
                except (DocaError, ValueError):
                    self._fail(conn)
                self._notify(conn)

    def _ready_push(self, conn: Connection) -> None:
        """Queue an established incoming connection for accept() (closed ones pruned)."""
        if len(self._ready) >= 2 * max(16, len(self._conns)):
            self._ready = collections.deque(c for c in self._ready if c.established)
        self._ready.append(conn)

    # -- out of band ---------------------------------------------------------
    def export(self) -> tuple[bytes, Connection]:
        """Create a connection and return its details blob for the peer."""
        self._check_open()
        details = ffi.new("const void **")
        size = ffi.new("size_t *")
        c_conn = ffi.new("struct doca_rdma_connection **")
        check(lib.doca_rdma_export(self._rdma, details, size, c_conn), "doca_rdma_export")
        conn = Connection(self, c_conn[0], incoming=False)
        self._conns[conn._ud] = conn
        return bytes(ffi.buffer(details[0], size[0])), conn

    def connect(self, peer_details: bytes, conn: Connection) -> Connection:
        """Complete an exported connection with the peer's details blob."""
        self._check_open()
        if not isinstance(peer_details, (bytes, bytearray, memoryview)) or len(peer_details) == 0:
            raise ValueError("peer details must be non-empty bytes")
        blob = bytes(peer_details)
        check(lib.doca_rdma_connect(self._rdma, blob, len(blob), conn.handle),
              f"doca_rdma_connect (the peer's {len(blob)}-byte connection blob was refused: it must be the "
              "bytes the peer's Rdma.export() returned, unmodified, from the same DOCA backend, used once)")
        return conn

    # -- RDMA CM -----------------------------------------------------------
    def listen(self, port: int, *, accept: Optional[AcceptPolicy] = None) -> None:
        """Listen for RDMA CM requests on the device's address.

        ``accept(conn)`` decides for each request: True or private-data bytes
        accept, False rejects, None leaves it in ``requests`` (see ``incoming``)."""
        self._check_open()
        if not 0 < port < 65536:
            raise ValueError(f"port out of range: {port}")
        self._accept = accept
        rc = lib.doca_rdma_start_listen_to_port(self._rdma, port)
        if rc != 0:
            raise self._listen_error(rc, port)
        self.listening.append(port)

    def _listen_error(self, rc: int, port: int) -> DocaError:
        """The error of a failed listen, naming the port and what to do."""
        from ..errors import error_for
        where = f"{self.dev.info.ipv4 or self.dev.info.ipv6 or self.dev.info.ibdev_name}:{port}"
        if rc == AlreadyExistError.code:
            msg = f"this Rdma context already listens on port {port}"
        elif rc == InUseError.code:
            msg = (f"cannot listen on {where}: port {port} is already in use (another process or Rdma "
                   f"context listens there); stop that listener or pick another port, e.g. {_free_port_hint()}")
        else:
            msg = f"cannot listen on {where}"
        return error_for(rc, msg)

    def stop_listen(self, port: int) -> None:
        check(lib.doca_rdma_stop_listen_to_port(self._rdma, port), "doca_rdma_stop_listen_to_port")
        self.listening.remove(port)

    def accept(self, timeout: Optional[float] = None, *, private_data: bytes = b"") -> Connection:
        """The next established incoming connection (like ``socket.accept``).

        Requests left undecided by the listen policy (``accept=None``) are
        accepted here with ``private_data``; with a policy, the connections it
        accepted are returned once established. Requests whose peer vanished
        are skipped. ``TimeoutError`` after ``timeout`` seconds (None: wait
        forever, progressing the engine)."""
        self._check_open()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            while self._ready:
                conn = self._ready.popleft()
                if conn.established:
                    return conn
            self._expire_requests()
            while self.requests:
                req = self.requests.popleft()
                if req.state is not ConnectionState.REQUESTED:
                    continue
                try:
                    req.accept(private_data)
                except (DocaError, ValueError) as exc:
                    log.info("rdma connection request abandoned", error=str(exc), peer=_peer(req))
                    self._fail(req)
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"no incoming connection established within {timeout:g}s")
            self.pe.wait(0.1 if remaining is None else min(0.1, remaining))
            self._expire_requests()

    def accepted(self, timeout: float) -> Iterator[Connection]:
        """Yield established incoming connections (see :meth:`accept`) until
        ``timeout`` seconds have passed in total."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                yield self.accept(remaining)
            except TimeoutError:
                return

    def incoming(self, timeout: float) -> Iterator[Connection]:
        """Yield undecided incoming requests as they arrive, until ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._expire_requests()
            if not self.requests:
                self.pe.wait(min(0.1, max(0.0, deadline - time.monotonic())))
                self._expire_requests()
            while self.requests:
                req = self.requests.popleft()
                if req.state is ConnectionState.REQUESTED:   # skip requests whose peer vanished
                    yield req

    def connect_to(self, address: str, port: int, *, user_data: Any = None) -> Connection:
        """Start an RDMA CM connection to ``address:port``; returns at once
        with a PENDING connection (``wait_established()`` to block)."""
        self._check_open()
        ip = ipaddress.ip_address(address)
        kind = lib.DOCA_RDMA_ADDR_TYPE_IPv4 if ip.version == 4 else lib.DOCA_RDMA_ADDR_TYPE_IPv6
        addr = ffi.new("struct doca_rdma_addr **")
        check(lib.doca_rdma_addr_create(kind, str(ip).encode(), port, addr), "doca_rdma_addr_create")
        conn = Connection(self, None, incoming=False, user_data=user_data)
        conn._target = (str(ip), port)
        self._conns[conn._ud] = conn
        data = ffi.new("union doca_data *")
        data.u64 = conn._ud
        try:
            rc = lib.doca_rdma_connect_to_addr(self._rdma, addr[0], data[0])
        finally:
            lib.doca_rdma_addr_destroy(addr[0])
        if rc != 0:
            self._forget(conn)
            check(rc, "doca_rdma_connect_to_addr")
        return conn

    # -- tasks ---------------------------------------------------------------
    def _go(self, task: _T, kind: int, conn: Connection, a: Any, b: Any, imm: int, what: str) -> _T:
        """Allocate and submit ``task`` in one call into C (pydoca_rdma_submit_one)."""
        out = ffi.new("struct doca_task **")
        callbacks.tasks[task._id] = task
        rc = lib.pydoca_rdma_submit_one(self._rdma, kind, conn.handle, a, b, imm, task._id, out)
        if rc:
            if out[0] == ffi.NULL:
                callbacks.tasks.pop(task._id, None)
                check(rc, f"doca_rdma_task_{what}_allocate_init")
            task._refused(out[0], rc)
        task._c_task = out[0]
        task._submitted()
        return task

    def _fast(self, task: _T, kind: int, conn: Connection, a: Buffer, b: Optional[Buffer], imm: int, what: str) -> _T:
        """Like :meth:`_go`, for tasks with no result (write, send and their _imm forms): their success is
        recorded in C and delivered in bulk after the progress that completed them (callbacks.drain_done),
        and no out pointer is allocated. The memory maps are pinned before the submit: the task may complete
        on another thread progressing the same engine before the call returns."""
        tid = task._id
        task._recorded = True
        # every check that may raise comes before the maps are pinned
        ch, ha, hb = conn.handle, a.handle, ffi.NULL if b is None else b.handle
        ma = a._mmap
        ma._tasks[tid] = task
        if b is None:
            task._maps = [ma]
        else:
            mb = b._mmap
            mb._tasks[tid] = task
            task._maps = [ma, mb]
        _tasks[tid] = task
        rc = _submit_fast(self._rdma, kind, ch, ha, hb, imm, tid)
        if rc:
            task._release_maps()
            c_task = lib.pydoca_refused_take()
            if c_task == ffi.NULL:
                _tasks.pop(tid, None)
                check(rc, f"doca_rdma_task_{what}_allocate_init")
            task._refused(c_task, rc)
        return task

    def send(self, conn: Connection, buf: Buffer) -> SendTask:
        """Send ``buf``'s data; the peer must have a receive posted."""
        return self._fast(SendTask(self, (buf,)), _K_SEND, conn, buf, None, 0, "send")

    def send_imm(self, conn: Connection, buf: Buffer, immediate: int) -> SendTask:
        """Send with 32-bit immediate data."""
        return self._fast(SendTask(self, (buf,)), _K_SEND_IMM, conn, buf, None, to_be32(immediate), "send_imm")

    def receive(self, buf: Buffer) -> ReceiveTask:
        """Post a receive into ``buf`` (appended after its current data)."""
        task = ReceiveTask(self, keep=(buf,), buffer=buf)
        out = ffi.new("struct doca_rdma_task_receive **")
        check(lib.doca_rdma_task_receive_allocate_init(self._rdma, buf.handle, task._user_data(), out),
              "doca_rdma_task_receive_allocate_init")
        return task._submit(lib.doca_rdma_task_receive_as_task(out[0]))  # type: ignore[return-value]

    def read(self, conn: Connection, remote: Buffer, local: Buffer) -> ReadTask:
        """Read ``remote``'s data (peer memory) into ``local``."""
        return self._go(ReadTask(self, keep=(remote, local)), _K_READ, conn, remote.handle, local.handle, 0, "read")

    def write(self, conn: Connection, local: Buffer, remote: Buffer) -> WriteTask:
        """Write ``local``'s data into ``remote`` (peer memory)."""
        # _fast inlined: the most common single task, one Python frame less per operation
        task = WriteTask(self, (local, remote))
        tid = task._id
        task._recorded = True
        ch, ha, hb = conn.handle, local.handle, remote.handle   # what may raise, before the maps are pinned
        ma, mb = local._mmap, remote._mmap
        ma._tasks[tid] = mb._tasks[tid] = task
        task._maps = [ma, mb]
        _tasks[tid] = task
        rc = _submit_fast(self._rdma, _K_WRITE, ch, ha, hb, 0, tid)
        if rc:
            task._release_maps()
            c_task = lib.pydoca_refused_take()
            if c_task == ffi.NULL:
                _tasks.pop(tid, None)
                check(rc, "doca_rdma_task_write_allocate_init")
            task._refused(c_task, rc)
        return task

    def write_imm(self, conn: Connection, local: Buffer, remote: Buffer, immediate: int) -> WriteTask:
        """Write, then consume a peer receive carrying ``immediate``."""
        return self._fast(WriteTask(self, (local, remote)), _K_WRITE_IMM, conn, local, remote, to_be32(immediate),
                          "write_imm")

    def compare_swap(self, conn: Connection, remote: Buffer, result: Buffer, *, compare: int, swap: int) -> AtomicTask:
        """Atomic 64-bit compare-and-swap on ``remote``; value = previous value."""
        task = AtomicTask(self, keep=(remote, result), result=result)
        out = ffi.new("struct doca_rdma_task_atomic_cmp_swp **")
        check(lib.doca_rdma_task_atomic_cmp_swp_allocate_init(self._rdma, conn.handle, remote.handle, result.handle,
                                                              compare, swap, task._user_data(), out),
              "doca_rdma_task_atomic_cmp_swp_allocate_init")
        return task._submit(lib.doca_rdma_task_atomic_cmp_swp_as_task(out[0]))  # type: ignore[return-value]

    def fetch_add(self, conn: Connection, remote: Buffer, result: Buffer, *, add: int) -> AtomicTask:
        """Atomic 64-bit fetch-and-add on ``remote``; value = previous value."""
        task = AtomicTask(self, keep=(remote, result), result=result)
        out = ffi.new("struct doca_rdma_task_atomic_fetch_add **")
        check(lib.doca_rdma_task_atomic_fetch_add_allocate_init(self._rdma, conn.handle, remote.handle,
                                                                result.handle, add, task._user_data(), out),
              "doca_rdma_task_atomic_fetch_add_allocate_init")
        return task._submit(lib.doca_rdma_task_atomic_fetch_add_as_task(out[0]))  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"<Rdma dev={self.dev.info.ibdev_name} conns={len(self._conns)} {'closed' if self.closed else 'open'}>"


__all__ = ["Rdma", "BatchError", "TaskBatch", "TaskRing", "Connection", "ConnectionState", "Opcode", "Received", "Gid",
           "gid_table",
           "choose_gid_index", "DocaError", "CtxState"]
