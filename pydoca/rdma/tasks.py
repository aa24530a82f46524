"""RDMA task types: each wraps one DOCA RDMA task and reads its results.

Immediate data is handed to and from the user as a host-order integer; DOCA
carries it as big-endian ``doca_be32_t``.
"""
from __future__ import annotations

import enum
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from .._native import ffi, lib
from ..ctx import Task
from ..errors import check

if TYPE_CHECKING:
    from ..buffer import Buffer
    from .connection import Connection


class Opcode(enum.IntEnum):
    """What a completed receive consumed."""

    SEND = 0
    SEND_WITH_IMM = 1
    WRITE_WITH_IMM = 2


def to_be32(value: int) -> int:
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"immediate data must fit in 32 bits, got {value}")
    return socket.htonl(value)


def from_be32(value: int) -> int:
    return socket.ntohl(int(value) & 0xFFFFFFFF)


@dataclass(frozen=True)
class Received:
    """Result of a receive: the bytes are in ``buffer`` (``data`` copies them)."""

    buffer: "Buffer"
    length: int
    opcode: Opcode
    immediate: Optional[int]
    connection: Optional["Connection"]

    @property
    def data(self) -> bytes:
        """The received payload (a copy; ``buffer.memoryview()`` is zero-copy)."""
        if self.opcode is Opcode.WRITE_WITH_IMM:
            return b""
        return bytes(self.buffer.memoryview()[-self.length:] if self.length else b"")


def _data(buf: "Buffer") -> int:
    return int(buf.data_len)


def _room(buf: "Buffer") -> int:
    """Bytes a local destination can still take: after its data, to its end."""
    return int(buf.length - (buf.data_address - buf.address) - buf.data_len)


def _remote_room(buf: "Buffer") -> int:
    """Bytes a remote write destination takes: from its data address to its end."""
    return int(buf.length - (buf.data_address - buf.address))


def _sizes(src: Optional["Buffer"], dst: Optional["Buffer"], src_name: str, dst_name: str,
           room: Any = _room) -> str:
    """" (source data N bytes, destination room M bytes)" for error messages;
    says so when the data cannot fit. Never raises."""
    try:
        parts = []
        n = _data(src) if src is not None else None
        m = room(dst) if dst is not None else None
        if n is not None:
            parts.append(f"{src_name} data {n} bytes")
        if m is not None:
            parts.append(f"{dst_name} room {m} bytes")
        text = ", ".join(parts)
        if n is not None and m is not None and n > m:
            text += f": {n} bytes do not fit in {m}"
        return f" ({text})" if text else ""
    except Exception:  # noqa: BLE001 - a closed buffer: no detail
        return ""


class SendTask(Task[None]):
    """send / send_imm: completes when the peer consumed it into a receive."""

    __slots__ = ()

    def _detail(self) -> str:
        src = self._keep[0] if self._keep else None
        text = _sizes(src, None, "message", "")
        return text[:-1] + "; the peer's posted receive must hold it)" if text else ""


class WriteTask(Task[None]):
    """write / write_imm: completes when the bytes are in the peer's memory."""

    __slots__ = ()

    def _detail(self) -> str:
        if len(self._keep) < 2:
            return ""
        return _sizes(self._keep[0], self._keep[1], "local source", "remote destination", _remote_room)


class ReadTask(Task[int]):
    """read: value is the number of bytes read."""

    def _detail(self) -> str:
        if len(self._keep) < 2:
            return ""
        return _sizes(self._keep[0], self._keep[1], "remote source", "local destination")

    def _collect(self, c_task: Any) -> int:
        return int(lib.doca_rdma_task_read_get_result_len(ffi.cast("struct doca_rdma_task_read *", c_task)))


class AtomicTask(Task[int]):
    """compare_swap / fetch_add: value is the 64-bit value before the operation."""

    def __init__(self, *args: Any, result: "Buffer", **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._result = result

    def _detail(self) -> str:
        try:
            room = _room(self._result)
        except Exception:  # noqa: BLE001 - a closed buffer: no detail
            return ""
        return f" (result buffer room {room} bytes; the 8-byte original value needs 8)" if room < 8 else ""

    def _collect(self, c_task: Any) -> int:
        # through the descriptor, which the task holds until it is done: the Buffer may have been closed under it
        h, data, n = self._result._handle, ffi.new("void **"), ffi.new("size_t *")
        check(lib.doca_buf_get_data(h, data), "doca_buf_get_data")
        check(lib.doca_buf_get_data_len(h, n), "doca_buf_get_data_len")
        return int.from_bytes(ffi.buffer(ffi.cast("char *", data[0]) + n[0] - 8, 8)[:], "little")


class ReceiveTask(Task[Received]):
    """receive: value is a :class:`Received`."""

    def __init__(self, *args: Any, buffer: "Buffer", **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._buffer = buffer

    def _detail(self) -> str:
        return _sizes(None, self._buffer, "", "receive buffer")

    def _collect(self, c_task: Any) -> Received:
        t = ffi.cast("struct doca_rdma_task_receive *", c_task)
        opcode = Opcode(int(lib.doca_rdma_task_receive_get_result_opcode(t)))
        length = int(lib.doca_rdma_task_receive_get_result_len(t))
        imm = None
        if opcode is not Opcode.SEND:
            imm = from_be32(lib.doca_rdma_task_receive_get_result_immediate_data(t))
        c_conn = lib.doca_rdma_task_receive_get_result_rdma_connection(t)
        rdma = self.ctx
        conn = rdma._connection_for(c_conn) if hasattr(rdma, "_connection_for") else None
        return Received(self._buffer, length, opcode, imm, conn)
