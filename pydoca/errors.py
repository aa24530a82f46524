"""DOCA error codes as Python exceptions.

Every DOCA call goes through :func:`check`, which turns a non-zero
``doca_error_t`` into the matching :class:`DocaError` subclass, carrying the
code, DOCA's name for it and its description.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Type


class DocaError(Exception):
    """A DOCA call failed. ``code``/``name``/``description`` come from DOCA."""

    code: int = -1
    name: str = "DOCA_ERROR"

    def __init__(self, message: str = "", *, code: Optional[int] = None, description: str = "") -> None:
        if code is not None:
            self.code = code
            self.name = NAMES.get(code, f"DOCA_ERROR_{code}")
        self.description = description or DESCRIPTIONS.get(self.code, "")
        text = f"{self.name}: {self.description}" if self.description else self.name
        super().__init__(f"{message}: {text}" if message else text)


class ClosedError(DocaError, ValueError):
    """The object was already closed (a pydoca-side misuse, not a DOCA code)."""

    name = "PYDOCA_CLOSED"


class UnknownError(DocaError):
    code = 1
    name = "DOCA_ERROR_UNKNOWN"

class NotPermittedError(DocaError):
    code = 2
    name = "DOCA_ERROR_NOT_PERMITTED"

class InUseError(DocaError):
    code = 3
    name = "DOCA_ERROR_IN_USE"

class NotSupportedError(DocaError):
    """DOCA_ERROR_NOT_SUPPORTED; also raised for a DOCA function the loaded runtime
    lacks, with ``symbol`` set to it and ``added_in`` to the DOCA release that added it."""

    code = 4
    name = "DOCA_ERROR_NOT_SUPPORTED"
    symbol: Optional[str] = None
    added_in: Optional[str] = None

class AgainError(DocaError):
    code = 5
    name = "DOCA_ERROR_AGAIN"

class InvalidValueError(DocaError):
    code = 6
    name = "DOCA_ERROR_INVALID_VALUE"

class NoMemoryError(DocaError):
    code = 7
    name = "DOCA_ERROR_NO_MEMORY"

class InitializationError(DocaError):
    code = 8
    name = "DOCA_ERROR_INITIALIZATION"

class TimeOutError(DocaError, TimeoutError):
    code = 9
    name = "DOCA_ERROR_TIME_OUT"

class ShutdownError(DocaError):
    code = 10
    name = "DOCA_ERROR_SHUTDOWN"

class DocaConnectionResetError(DocaError):
    code = 11
    name = "DOCA_ERROR_CONNECTION_RESET"

class DocaConnectionRefusedError(DocaConnectionResetError, ConnectionRefusedError):
    """An outgoing connection nobody accepted: nothing listens at that address and port.

    DOCA reports it as DOCA_ERROR_CONNECTION_RESET (``code`` and ``name`` stay
    DOCA's, so ``except DocaConnectionResetError`` still catches it); the
    message says "refused" and ``except ConnectionRefusedError`` works as for
    a socket."""

    def __init__(self, message: str = "", *, code: Optional[int] = None, description: str = "") -> None:
        super().__init__(message, code=code, description=description)
        self.args = (f"{message} (DOCA status {self.name})" if message else self.name,)


class DocaConnectionAbortedError(DocaError):
    code = 12
    name = "DOCA_ERROR_CONNECTION_ABORTED"

class ConnectionInprogressError(DocaError):
    code = 13
    name = "DOCA_ERROR_CONNECTION_INPROGRESS"

class NotConnectedError(DocaError):
    code = 14
    name = "DOCA_ERROR_NOT_CONNECTED"

class NoLockError(DocaError):
    code = 15
    name = "DOCA_ERROR_NO_LOCK"

class NotFoundError(DocaError):
    code = 16
    name = "DOCA_ERROR_NOT_FOUND"

class IOFailedError(DocaError):
    code = 17
    name = "DOCA_ERROR_IO_FAILED"

class BadStateError(DocaError):
    code = 18
    name = "DOCA_ERROR_BAD_STATE"

class UnsupportedVersionError(DocaError):
    code = 19
    name = "DOCA_ERROR_UNSUPPORTED_VERSION"

class OperatingSystemError(DocaError):
    code = 20
    name = "DOCA_ERROR_OPERATING_SYSTEM"

class DriverError(DocaError):
    code = 21
    name = "DOCA_ERROR_DRIVER"

class UnexpectedError(DocaError):
    code = 22
    name = "DOCA_ERROR_UNEXPECTED"

class AlreadyExistError(DocaError):
    code = 23
    name = "DOCA_ERROR_ALREADY_EXIST"

class FullError(DocaError):
    code = 24
    name = "DOCA_ERROR_FULL"

class EmptyError(DocaError):
    code = 25
    name = "DOCA_ERROR_EMPTY"

class InProgressError(DocaError):
    code = 26
    name = "DOCA_ERROR_IN_PROGRESS"

class TooBigError(DocaError):
    code = 27
    name = "DOCA_ERROR_TOO_BIG"

class AuthenticationError(DocaError):
    code = 28
    name = "DOCA_ERROR_AUTHENTICATION"

class BadConfigError(DocaError):
    code = 29
    name = "DOCA_ERROR_BAD_CONFIG"

class SkippedError(DocaError):
    code = 30
    name = "DOCA_ERROR_SKIPPED"

class DeviceFatalError(DocaError):
    code = 31
    name = "DOCA_ERROR_DEVICE_FATAL_ERROR"


ERRORS: Dict[int, Type[DocaError]] = {cls.code: cls for cls in (
    UnknownError,
    NotPermittedError,
    InUseError,
    NotSupportedError,
    AgainError,
    InvalidValueError,
    NoMemoryError,
    InitializationError,
    TimeOutError,
    ShutdownError,
    DocaConnectionResetError,
    DocaConnectionAbortedError,
    ConnectionInprogressError,
    NotConnectedError,
    NoLockError,
    NotFoundError,
    IOFailedError,
    BadStateError,
    UnsupportedVersionError,
    OperatingSystemError,
    DriverError,
    UnexpectedError,
    AlreadyExistError,
    FullError,
    EmptyError,
    InProgressError,
    TooBigError,
    AuthenticationError,
    BadConfigError,
    SkippedError,
    DeviceFatalError,
)}
NAMES: Dict[int, str] = {0: "DOCA_SUCCESS", **{code: cls.name for code, cls in ERRORS.items()}}
DESCRIPTIONS: Dict[int, str] = {}


#: Set by pydoca._native once a backend is loaded (errors stays the lowest layer):
#: ``describe(code) -> str`` (doca_error_get_descr) and ``missing(message) -> NotSupportedError | None``.
HOOKS: Dict[str, Callable[..., Any]] = {}


def _describe(code: int) -> str:
    if code not in DESCRIPTIONS:
        try:
            DESCRIPTIONS[code] = HOOKS["describe"](code) if "describe" in HOOKS else ""
        except Exception:  # noqa: BLE001 - description is best effort
            DESCRIPTIONS[code] = ""
    return DESCRIPTIONS[code]


def error_for(code: int, message: str = "") -> DocaError:
    """The exception instance for a DOCA error code.

    DOCA_ERROR_NOT_SUPPORTED from a function the runtime lacks (its stub in
    pydoca._native.lib; ``message`` starts with the function's name) becomes
    the NotSupportedError naming the DOCA release that added the function.
    """
    if int(code) == NotSupportedError.code and message:
        try:
            detailed = HOOKS["missing"](message) if "missing" in HOOKS else None
        except Exception:  # noqa: BLE001 - the plain error below is still right
            detailed = None
        if isinstance(detailed, DocaError):
            return detailed
    cls = ERRORS.get(int(code), DocaError)
    return cls(message, code=int(code), description=_describe(int(code)))


def check(code: int, message: str = "") -> None:
    """Raise the DocaError subclass for ``code`` unless it is DOCA_SUCCESS."""
    if code != 0:
        raise error_for(code, message)


__all__ = ["DocaError", "ClosedError", "DocaConnectionRefusedError", "ERRORS", "NAMES", "check", "error_for"] + [
    cls.__name__ for cls in ERRORS.values()]
