"""The PeerError hierarchy: typed statuses of the peer protocol as exceptions."""
from __future__ import annotations

from typing import Dict, Type

from .protocol import Status


class PeerError(Exception):
    """A peer operation failed; ``status`` is the protocol status behind it."""

    status: Status = Status.INTERNAL


class NotFound(PeerError):
    """No endpoint with that path (or id)."""

    status = Status.NOT_FOUND


class Busy(PeerError):
    """The endpoint is in use and the request chose not to wait (or the queue is full)."""

    status = Status.BUSY


class Rejected(PeerError):
    """The responder refused the request (wrong kind, no right, failed authentication...)."""

    status = Status.REJECTED


class TooLarge(PeerError):
    """Data, offset or response does not fit the endpoint buffer."""

    status = Status.TOO_LARGE


class HandlerError(PeerError):
    """The endpoint's handler raised; ``message`` is its text."""

    status = Status.HANDLER_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ProtocolError(PeerError):
    """A malformed or unexpected control message."""

    status = Status.PROTOCOL_ERROR


class PeerTimeout(PeerError, TimeoutError):
    """An operation did not complete in time."""


class Disconnected(PeerError, ConnectionError):
    """The connection is gone (or never came up)."""


class Unavailable(Disconnected):
    """No responder answers at the address (connection refused or timed out)."""


class Dismissed(Busy, Disconnected):
    """The responder let this connection go for want of a place (every place taken: an idle requester gives
    its place to a newcomer, or a newcomer finds none): a ``Busy`` that is also ``Disconnected``, since the
    connection is gone for good; connect again."""


class StaleDescriptor(Unavailable):
    """A descriptor file names a responder that is gone or was replaced."""


_BY_STATUS: Dict[Status, Type[PeerError]] = {
    Status.NOT_FOUND: NotFound, Status.BUSY: Busy, Status.REJECTED: Rejected, Status.TOO_LARGE: TooLarge,
    Status.PROTOCOL_ERROR: ProtocolError, Status.INTERNAL: PeerError,
}


def error_for(status: Status, message: str) -> PeerError:
    """The exception for a non-OK status from the responder."""
    if status is Status.HANDLER_ERROR:
        return HandlerError(message)
    return _BY_STATUS.get(status, PeerError)(message or status.name.lower().replace("_", " "))


__all__ = ["Busy", "Disconnected", "Dismissed", "HandlerError", "NotFound", "PeerError", "PeerTimeout",
           "ProtocolError", "Rejected", "StaleDescriptor", "TooLarge", "Unavailable", "error_for"]
