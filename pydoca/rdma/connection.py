"""RDMA connections: one per peer, created by export/connect or RDMA CM."""
from __future__ import annotations

import ctypes
import enum
from typing import TYPE_CHECKING, Any, Dict, Optional

from pydoca._log import get_logger

from .._native import callbacks, ffi, lib, soft_fn
from ..errors import DocaError, check

if TYPE_CHECKING:
    from . import Rdma

log = get_logger()


class ConnectionState(enum.Enum):
    PENDING = "pending"            # exported / requested, not yet established
    REQUESTED = "requested"        # incoming CM request awaiting accept/reject
    ESTABLISHED = "established"
    REJECTED = "rejected"          # we rejected it (incoming)
    FAILED = "failed"              # never established (refused, timed out, rejected by peer)
    DISCONNECTED = "disconnected"  # was established, now gone


FAILURE_REASONS = {0: None, 1: "rejected", 2: "timeout", 3: "refused", 4: "lost"}


class Connection:
    """A connection of an :class:`Rdma` context. Tasks name the connection
    they travel on; ``disconnect()`` flushes its outstanding tasks."""

    def __init__(self, rdma: "Rdma", c_conn: Any, *, incoming: bool, user_data: Any = None) -> None:
        self.rdma = rdma
        self._c = c_conn
        self.incoming = incoming
        self.user_data = user_data
        self.state = ConnectionState.REQUESTED if incoming else ConnectionState.PENDING
        self.ever_established = False                     # set by the established event, never cleared
        self._ud = callbacks.new_id()
        self._requested_at = 0.0                          # incoming: when the request arrived
        self._target: Optional[tuple[str, int]] = None    # outgoing RDMA CM: where we dial
        # once closed: what the getters report, read while DOCA still held the object (softdoca
        # frees closed connections later); from then on the C object is never touched again
        self._final: Optional[Dict[str, Any]] = None
        if c_conn is not None:
            data = ffi.new("union doca_data *")
            data.u64 = self._ud
            check(lib.doca_rdma_connection_set_user_data(c_conn, data[0]), "doca_rdma_connection_set_user_data")

    @property
    def handle(self) -> Any:
        if self._final is not None:
            raise DocaError(f"connection {self.state.value}: it cannot carry tasks any more", code=14)
        if self._c is None:
            raise DocaError("connection not established yet", code=14)
        return self._c

    def _freeze(self) -> None:
        """The connection is closed: keep what the getters report (call while
        DOCA still holds the object: inside its event, or right after our own
        disconnect/reject) and never touch the C object again."""
        if self._final is not None:
            return
        final: Dict[str, Any] = {}
        for name in ("failure_reason", "peer_address", "private_data", "id", "error_detail"):
            try:
                final[name] = getattr(self, name)
            except Exception:  # noqa: BLE001 - best effort snapshot
                final[name] = None
        self._final = final

    @property
    def id(self) -> int:
        if self._final is not None:
            return int(self._final["id"] or 0)
        out = ffi.new("uint32_t *")
        check(lib.doca_rdma_connection_get_id(self._c, out), "doca_rdma_connection_get_id")
        return int(out[0])

    @property
    def peer_address(self) -> Optional[tuple[str, int]]:
        """(address, port) of the peer for RDMA CM connections, else None."""
        if self._final is not None:
            return self._final["peer_address"]  # type: ignore[no-any-return]
        if self._c is None:
            return self._target
        addr = ffi.new("struct doca_rdma_addr **")
        if lib.doca_rdma_connection_get_addr(self._c, addr) != 0 or addr[0] == ffi.NULL:
            return self._target
        kind = ffi.new("enum doca_rdma_addr_type *")
        text = ffi.new("const char **")
        port = ffi.new("uint16_t *")
        if lib.doca_rdma_addr_get_params(addr[0], kind, text, port) != 0:
            return None
        return (ffi.string(text[0]).decode() if text[0] != ffi.NULL else "", int(port[0]))

    @property
    def failure_reason(self) -> Optional[str]:
        """Why the connection failed: "rejected" by the peer, "timeout",
        "refused" (nothing listening) or "lost"; None when unknown (real DOCA
        does not report it) or not failed."""
        if self._final is not None:
            return self._final["failure_reason"]  # type: ignore[no-any-return]
        fn = soft_fn("softdoca_rdma_connection_get_fail_reason", ctypes.c_int, ctypes.c_void_p)
        if fn is None or self._c is None:
            return None
        return FAILURE_REASONS.get(fn(int(ffi.cast("uintptr_t", self._c))))

    @property
    def error_detail(self) -> Optional[str]:
        """Why an established connection broke, in softdoca's words (e.g. the access a peer was refused);
        None when unknown (real DOCA reports it through the failed tasks' statuses only)."""
        if self._final is not None and "error_detail" in self._final:
            return self._final["error_detail"]  # type: ignore[no-any-return]
        fn = soft_fn("softdoca_rdma_connection_get_error_detail", ctypes.c_char_p, ctypes.c_void_p)
        if fn is None or self._c is None:
            return None
        raw = fn(int(ffi.cast("uintptr_t", self._c)))
        return raw.decode(errors="replace") if raw else None

    @property
    def private_data(self) -> Optional[bytes]:
        """Private data the peer passed when accepting (requester side); None
        when unknown (real DOCA 3.3 has no getter for it)."""
        if self._final is not None:
            return self._final["private_data"]  # type: ignore[no-any-return]
        fn = soft_fn("softdoca_rdma_connection_get_private_data", ctypes.c_int, ctypes.c_void_p,
                     ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_uint8))
        if fn is None or self._c is None:
            return None
        ptr, n = ctypes.c_void_p(), ctypes.c_uint8()
        if fn(int(ffi.cast("uintptr_t", self._c)), ptr, n) != 0:
            return None
        return ctypes.string_at(ptr.value, n.value) if ptr.value and n.value else b""

    @property
    def established(self) -> bool:
        return self.state is ConnectionState.ESTABLISHED

    @property
    def closed(self) -> bool:
        return self.state in (ConnectionState.FAILED, ConnectionState.DISCONNECTED, ConnectionState.REJECTED)

    def accept(self, private_data: bytes = b"") -> None:
        """Accept an incoming RDMA CM request (up to 255 bytes of private data)."""
        if self.state is not ConnectionState.REQUESTED:
            raise DocaError("only a requested connection can be accepted", code=18)
        if len(private_data) > 255:
            raise ValueError("private data is at most 255 bytes")
        buf = ffi.from_buffer(bytearray(private_data)) if private_data else ffi.NULL
        check(lib.doca_rdma_connection_accept(self._c, buf, len(private_data)), "doca_rdma_connection_accept")
        self.state = ConnectionState.PENDING

    def reject(self) -> None:
        """Reject an incoming RDMA CM request."""
        if self.state is not ConnectionState.REQUESTED:
            raise DocaError("only a requested connection can be rejected", code=18)
        check(lib.doca_rdma_connection_reject(self._c), "doca_rdma_connection_reject")
        self.state = ConnectionState.REJECTED
        self._freeze()
        self.rdma._forget(self)

    def wait_established(self, timeout: float = 10.0) -> "Connection":
        """Progress until established. Raises TimeoutError after ``timeout``
        seconds, and a DocaError naming the cause when the connection fails:
        ``TimeOutError`` ("timed out": the peer did not answer within the
        connection request timeout), ``DocaConnectionRefusedError`` ("refused":
        nothing listens there; also a ``ConnectionRefusedError``) or
        ``DocaConnectionResetError`` ("rejected" by the peer; "lost").

        A connection that was established and then ended before this call
        looked (one progress delivers both events, e.g. a peer that wrote and
        left) was established: it is returned, with ``state`` telling that it
        has ended since, and its tasks fail with a reset as on any closed
        connection."""
        where = self._describe_peer()
        self.rdma.pe.run_until(lambda: self.state is not ConnectionState.PENDING, timeout,
                               what=f"connection{where} to be established")
        if self.state is not ConnectionState.ESTABLISHED and not self.ever_established:
            raise self.failure_error()
        return self

    def _describe_peer(self) -> str:
        try:
            addr = self.peer_address
        except Exception:  # noqa: BLE001 - description only
            addr = None
        return f" {'from' if self.incoming else 'to'} {addr[0]}:{addr[1]}" if addr else ""

    def failure_error(self) -> DocaError:
        """The error describing why this connection is not established."""
        from ..errors import DocaConnectionRefusedError, DocaConnectionResetError, TimeOutError
        where, reason = self._describe_peer(), self.failure_reason
        if reason == "timeout":
            return TimeOutError(f"connection{where} timed out: the peer did not answer within the connection "
                                "request timeout (is it alive and progressing?)", code=TimeOutError.code)
        if reason == "refused":
            return DocaConnectionRefusedError(f"connection{where} refused: nothing listens there (check the "
                                              "address and port, and that the listener is running)",
                                              code=DocaConnectionResetError.code)
        if reason == "rejected":
            return DocaConnectionResetError(f"connection{where} rejected by the peer",
                                            code=DocaConnectionResetError.code)
        detail = f" ({reason})" if reason else ""
        return DocaConnectionResetError(f"connection{where} {self.state.value}{detail}",
                                        code=DocaConnectionResetError.code)

    def disconnect(self) -> None:
        """Disconnect; outstanding tasks on it fail. Idempotent, never raises."""
        if self.state in (ConnectionState.ESTABLISHED, ConnectionState.PENDING):
            if self._c is not None:      # an outgoing CM request has no DOCA object until answered
                rc = lib.doca_rdma_connection_disconnect(self._c)
                if rc != 0:
                    log.debug("disconnect", rc=rc)
            self.state = ConnectionState.DISCONNECTED
            self._freeze()
        self.rdma._forget(self)          # a closed connection is not kept by its context

    def __repr__(self) -> str:
        return f"<Connection {self.state.value}{' incoming' if self.incoming else ''}>"
