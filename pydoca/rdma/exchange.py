"""Send and receive one small blob over an established RDMA connection.

Two DOCA peers often need to hand each other a few bytes after they are
connected and before the real transfer starts: typically a MemoryMap
descriptor (``MemoryMap.export_rdma()``) that the peer turns into a remote map
with ``MemoryMap.from_export()``. DOCA's own samples do it with one receive
task on one side and one send task on the other; this module is those two
tasks with their memory, bounded waits and clear errors, so that raw-API
programs need not re-invent them::

    # receiver: post the receive BEFORE the peer can send (here: before connecting)
    pending = post_receive_blob(rdma, max_size=4096)
    conn = rdma.connect_to(host, port).wait_established(10)
    descriptor = pending.result(timeout=10, conn=conn)

    # sender, once connected
    send_blob(rdma, conn, mmap.export_rdma(), timeout=10)

or ``receive_blob(rdma, conn, max_size=..., timeout=...)`` where the receive may
be posted late (softdoca parks an early message for the RNR budget, hardware
retries it; posting first is the DOCA rule and always safe).

The blob travels as the payload of one send task, with no header: a peer that
uses plain ``rdma.send``/``rdma.receive`` interoperates. Each call registers
its own small MemoryMap (on ``rdma.dev``, local access only) and buffer
inventory, released when its task completes; a task still in flight when a
wait times out keeps them until it completes or the context stops.

Errors (all :class:`ExchangeError`):

* :class:`BlobTimeoutError` (also a ``TimeoutError``): nothing completed
  within ``timeout`` seconds;
* :class:`BlobTooLargeError` (also a ``ValueError``): the blob is larger than
  the receiver's ``max_size`` (raised on both sides: the receive and the send
  fail with DOCA_ERROR_TOO_BIG), or larger than the sender's own ``max_size``;
* :class:`ExchangeError`: the task could not be submitted (e.g. the
  connection is not established) or failed otherwise, the connection closed
  before the blob arrived, or the blob arrived on another connection.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn, Optional

from ..buffer import BufferInventory
from ..errors import DocaError, TooBigError
from ..memory import Access, MemoryMap

if TYPE_CHECKING:
    from ..ctx import Task
    from . import Rdma
    from .connection import Connection
    from .tasks import ReceiveTask

#: Default largest blob a receive accepts (a MemoryMap descriptor is far smaller).
DEFAULT_MAX_SIZE = 4096


class ExchangeError(Exception):
    """A blob could not be sent or received."""


class BlobTimeoutError(ExchangeError, TimeoutError):
    """No completion within the timeout."""


class BlobTooLargeError(ExchangeError, ValueError):
    """The blob does not fit the receiver's ``max_size``."""


def _memory(rdma: "Rdma", data: bytearray) -> tuple[MemoryMap, BufferInventory]:
    mmap = MemoryMap(rdma.dev, data, access=Access.LOCAL_READ_WRITE)
    try:
        return mmap, BufferInventory(1)
    except BaseException:
        mmap.close()
        raise


def _abandon(inv: BufferInventory, mmap: MemoryMap, exc: BaseException, what: str) -> NoReturn:
    """Release the memory of a task that was never submitted; re-raise (a DocaError as ExchangeError)."""
    inv.close()
    mmap.close()
    if isinstance(exc, DocaError):
        raise ExchangeError(f"{what}: {exc}") from exc
    raise exc


def _release_when_done(task: "Task[Any]", *resources: Any) -> None:
    """Close ``resources`` (buffer, map, inventory) once ``task`` has completed."""
    def release(_: Any) -> None:
        for r in resources:
            r.close()
    task.add_done_callback(release)


def _wait(task: "Task[Any]", conn: Optional["Connection"], timeout: float, what: str, event: str) -> None:
    """Progress until ``task`` is done; fail when ``conn`` closes first or ``timeout`` passes."""
    watch = conn
    try:
        task.ctx.pe.run_until(lambda: task.done or (watch is not None and watch.closed), timeout, what=what)
    except TimeoutError:
        raise BlobTimeoutError(f"timed out after {timeout:g}s waiting for {what}") from None
    if not task.done:
        assert watch is not None
        raise ExchangeError(f"the connection was {watch.state.value} before {event}")


class BlobReceive:
    """A posted receive for one blob (from :func:`post_receive_blob`)."""

    def __init__(self, rdma: "Rdma", max_size: int) -> None:
        if max_size <= 0:
            raise ValueError(f"max_size must be > 0, got {max_size}")
        self.max_size = max_size
        self._data = bytearray(max_size)
        mmap, inv = _memory(rdma, self._data)
        try:
            buf = inv.buffer(mmap, empty=True)
            self.task: "ReceiveTask" = rdma.receive(buf)
        except BaseException as exc:
            _abandon(inv, mmap, exc, "cannot post the receive")
        _release_when_done(self.task, buf, mmap, inv)

    @property
    def done(self) -> bool:
        return self.task.done

    def result(self, timeout: float, conn: Optional["Connection"] = None) -> bytes:
        """Wait (progressing the engine) for the blob and return it.

        With ``conn``: fail as soon as that connection closes, and refuse a
        blob that arrived on another connection of the context."""
        _wait(self.task, conn, timeout, "the peer's blob", "the peer's blob arrived")
        error = self.task.error
        if isinstance(error, TooBigError):
            raise BlobTooLargeError(f"the peer's blob is larger than max_size ({self.max_size} bytes)") from None
        if error is not None:
            raise ExchangeError(f"receiving the blob failed: {error}") from None
        received = self.task.value
        assert received is not None
        if conn is not None and received.connection is not None and received.connection is not conn:
            raise ExchangeError("the blob arrived on another connection")
        return bytes(self._data[:received.length])


def post_receive_blob(rdma: "Rdma", *, max_size: int = DEFAULT_MAX_SIZE) -> BlobReceive:
    """Post a receive for one blob of at most ``max_size`` bytes; collect it
    with ``.result(timeout, conn)``. Post it before the peer may send."""
    return BlobReceive(rdma, max_size)


def receive_blob(rdma: "Rdma", conn: "Connection", *, max_size: int = DEFAULT_MAX_SIZE,
                 timeout: float = 10.0) -> bytes:
    """Post a receive and wait for one blob from ``conn`` (see module docstring)."""
    return post_receive_blob(rdma, max_size=max_size).result(timeout, conn)


def send_blob(rdma: "Rdma", conn: "Connection", data: bytes, *, timeout: float = 10.0,
              max_size: Optional[int] = None) -> None:
    """Send ``data`` (1 byte or more) to ``conn`` and wait until the peer's
    posted receive has consumed it. ``max_size``: refuse larger data here."""
    payload = bytearray(data)
    if not payload:
        raise ValueError("a blob is at least 1 byte")
    if max_size is not None and len(payload) > max_size:
        raise BlobTooLargeError(f"the blob is {len(payload)} bytes, more than max_size ({max_size})")
    mmap, inv = _memory(rdma, payload)
    try:
        buf = inv.buffer(mmap)
        task = rdma.send(conn, buf)
    except BaseException as exc:
        _abandon(inv, mmap, exc, "cannot send the blob")
    _release_when_done(task, buf, mmap, inv)
    _wait(task, conn, timeout, "the peer to take the blob", "the peer took the blob")
    error = task.error
    if isinstance(error, TooBigError):
        raise BlobTooLargeError(f"the blob ({len(payload)} bytes) is larger than the peer's posted receive") \
            from None
    if error is not None:
        raise ExchangeError(f"sending the blob failed: {error}") from None


__all__ = ["BlobReceive", "BlobTimeoutError", "BlobTooLargeError", "DEFAULT_MAX_SIZE", "ExchangeError",
           "post_receive_blob", "receive_blob", "send_blob"]
