"""DOCA SDK log records delivered to structlog, and the SDK log level.

DOCA libraries (and softdoca) log their own messages, the *SDK* messages, to
DOCA's SDK logging backends. :func:`set_sdk_level` sets DOCA's global SDK
limit (``doca_log_level_set_global_sdk_limit``) and routes those records into
structlog: each one becomes an event on logger ``pydoca.sdk`` at the matching
level (CRIT -> critical, ERROR -> error, WARNING -> warning, INFO -> info,
DEBUG and TRACE -> debug), with the fields DOCA gives::

    doca_level   "warning", ...  (the DOCA level, by name)
    filename, lineno, func_name   where the record names its source location
    source       the tag of a record without a location ("softdoca" for softdoca's)
    pid          only when another process wrote it

How: DOCA has no callback for SDK records that is safe to enter Python from
(its buffer backend calls back on DOCA's own threads, under DOCA's log lock),
so pydoca creates one fd SDK backend (``doca_log_backend_create_with_fd_sdk``,
in every DOCA pydoca supports) on the write end of a pipe, made non-blocking
so that a DOCA thread never waits on Python (a record that finds the pipe full
is dropped), and a daemon thread reads the other end. DOCA cannot destroy a
backend, so the backend and its fd number live as long as the process:
:meth:`SdkLogRoute.close` sets the backend's level to DISABLE, points that fd
at ``/dev/null``, drains what is already in the pipe and joins the thread; a
later :func:`route_sdk_logs` points the same fd at a new pipe. The route is
closed at interpreter exit, and a forked child starts with none.

softdoca: once any SDK backend exists, softdoca's own messages go to the SDK
backends only, so ``SOFTDOCA_LOG=...`` no longer prints them to stderr.

Levels are DOCA's names (``"critical"``/``"crit"``, ``"error"``/``"err"``,
``"warning"``/``"warn"``, ``"info"``, ``"debug"``, ``"trace"``, ``"disable"``)
or DOCA's numbers (``DOCA_LOG_LEVEL_*``: 10 to 70, not :mod:`logging`'s);
anything else raises :class:`LogLevelError`.
"""
from __future__ import annotations

import atexit
import fcntl
import itertools
import os
import re
import select
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

from ._log import get_logger
from .errors import InvalidValueError

SDK_LOGGER = "pydoca.sdk"

#: DOCA's SDK log levels (enum doca_log_level): name -> number.
LEVELS: Dict[str, int] = {"disable": 10, "critical": 20, "error": 30, "warning": 40, "info": 50, "debug": 60,
                          "trace": 70}
_ALIASES = {"crit": "critical", "err": "error", "warn": "warning", "dbg": "debug", "trc": "trace"}
_NAMES = {v: k for k, v in LEVELS.items()}
# The level tags DOCA writes in a record ("[ERR]"), the long forms too.
_TAGS = {"CRIT": 20, "CRITICAL": 20, "ERR": 30, "ERROR": 30, "WARN": 40, "WARNING": 40, "INFO": 50, "DBG": 60,
         "DEBUG": 60, "TRC": 70, "TRACE": 70}
_METHODS = {20: "critical", 30: "error", 40: "warning", 50: "info", 60: "debug", 70: "debug"}

_SYNC = b"\x00pydoca-sync "       # a line no DOCA record starts with (see SdkLogRoute.sync)
_PIPE_SIZE = 1 << 20               # asked for; the kernel may give less
_MAX_LINE = 1 << 16


class LogLevelError(InvalidValueError, ValueError):
    """A DOCA log level that is neither a DOCA level name nor a DOCA level number."""

    def __init__(self, level: object) -> None:
        self.level = level
        self.allowed: Tuple[Union[str, int], ...] = (*LEVELS, *LEVELS.values())
        super().__init__(
            f"invalid DOCA SDK log level {level!r}: expected one of {', '.join(LEVELS)} "
            f"or a DOCA level number ({', '.join(str(v) for v in LEVELS.values())})")


def parse_level(level: Union[str, int]) -> int:
    """The DOCA level number of ``level`` (a name, an alias, ``DOCA_LOG_LEVEL_X`` or a DOCA number)."""
    if isinstance(level, bool):
        raise LogLevelError(level)
    if isinstance(level, int):
        if level in _NAMES:
            return level
        raise LogLevelError(level)
    if isinstance(level, str):
        key = level.strip().lower()
        key = key[len("doca_log_level_"):] if key.startswith("doca_log_level_") else key
        key = _ALIASES.get(key, key)
        if key in LEVELS:
            return LEVELS[key]
        if key.isdigit() and int(key) in _NAMES:
            return int(key)
    raise LogLevelError(level)


def level_name(level: int) -> str:
    """'warning' for 40 (DOCA_LOG_LEVEL_WARNING)."""
    return _NAMES[parse_level(level)]


# -- records ------------------------------------------------------------------

_HEAD = re.compile(rb"^\[(?P<time>[^\]]*)\]\[(?P<pid>\d+)\]\[DOCA\]\[(?P<tag>[A-Za-z]+)\](?P<rest>.*)$", re.S)
_BRACKET = re.compile(rb"^\[(?P<tok>[^\]]*)\]")
_FILE_LINE = re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+)$")


@dataclass
class SdkRecord:
    """One DOCA SDK log record, parsed from DOCA's text form
    ``[time][pid][DOCA][LEVEL][file:line][func] message`` (softdoca: ``[softdoca]`` instead
    of the location)."""

    level: int
    message: str
    pid: Optional[int] = None
    time: Optional[str] = None
    filename: Optional[str] = None
    lineno: Optional[int] = None
    func_name: Optional[str] = None
    source: Optional[str] = None

    def fields(self) -> Dict[str, Any]:
        """The structlog fields of the event (those the record has)."""
        out: Dict[str, Any] = {"doca_level": _NAMES.get(self.level, str(self.level))}
        for key in ("source", "filename", "lineno", "func_name"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.pid is not None and self.pid != os.getpid():
            out["pid"] = self.pid
        return out


def parse_record(line: bytes) -> Optional[SdkRecord]:
    """The record of one line of DOCA log text; None when the line is not a record's first line."""
    m = _HEAD.match(line)
    tag = m.group("tag").decode().upper() if m is not None else ""
    if m is None or tag not in _TAGS:
        return None
    rec = SdkRecord(level=_TAGS[tag], message="", pid=int(m.group("pid")),
                    time=m.group("time").decode(errors="replace"))
    rest = m.group("rest")
    while True:
        b = _BRACKET.match(rest)
        if b is None:
            break
        tok = b.group("tok").decode(errors="replace")
        fl = _FILE_LINE.match(tok)
        if fl is not None and rec.filename is None:
            rec.filename, rec.lineno = fl.group("file"), int(fl.group("line"))
        elif rec.filename is not None and rec.func_name is None:
            rec.func_name = tok
        elif rec.source is None and rec.filename is None:
            rec.source = tok
        else:
            break
        rest = rest[b.end():]
    rec.message = rest.decode(errors="replace").strip()
    return rec


class _Sink:
    """Lines from the pipe -> structlog events (a record's continuation lines join its message)."""

    def __init__(self) -> None:
        self.log = get_logger(SDK_LOGGER)
        self.pending: Optional[SdkRecord] = None
        self.synced: Dict[int, threading.Event] = {}
        self.lock = threading.Lock()

    def line(self, raw: bytes) -> None:
        if raw.startswith(_SYNC):
            self.flush()
            token = raw[len(_SYNC):].strip()
            with self.lock:
                waiter = self.synced.pop(int(token), None) if token.isdigit() else None
            if waiter is not None:
                waiter.set()
            return
        rec = parse_record(raw)
        if rec is not None:
            self.flush()
            self.pending = rec
        elif self.pending is not None:
            self.pending.message += "\n" + raw.decode(errors="replace").rstrip()
        elif raw.strip():
            self.emit(SdkRecord(level=LEVELS["info"], message=raw.decode(errors="replace").strip()))

    def flush(self) -> None:
        rec, self.pending = self.pending, None
        if rec is not None:
            self.emit(rec)

    def emit(self, rec: SdkRecord) -> None:
        try:
            getattr(self.log, _METHODS.get(rec.level, "info"))(rec.message, **rec.fields())
        except Exception:  # noqa: BLE001 - a failing handler must not kill the reader
            pass


# -- the route ------------------------------------------------------------------

class SdkLogRoute:
    """The running delivery of DOCA SDK records to structlog: a pipe and its reader thread.

    Made by :func:`route_sdk_logs` (or :func:`set_sdk_level`); one per process.
    """

    def __init__(self, rfd: int, wfd: int) -> None:
        self._rfd = rfd
        self._wfd = wfd                   # the fd number DOCA writes to (shared, not ours to close)
        self._stop_r, self._stop_w = os.pipe()
        self._sink = _Sink()
        self._seq = itertools.count(1)
        self._closed = False
        self._fd_lock = threading.Lock()   # who closes the pipe's fds: close(), or the reader if still running
        self._exited = self._handoff = False
        self._thread = threading.Thread(target=self._run, name="pydoca-sdk-log", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return not self._closed and self._thread.is_alive()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def _run(self) -> None:
        try:
            self._read_until_stopped()
        finally:
            with self._fd_lock:
                self._exited = True
                if self._handoff:             # close() gave up waiting: its fds are ours to close
                    self._close_fds()

    def _close_fds(self) -> None:
        for fd in (self._rfd, self._stop_r, self._stop_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _read_until_stopped(self) -> None:
        poller = select.poll()
        poller.register(self._rfd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        tail = b""
        done = False
        while not done:
            ready = {fd for fd, _ in poller.poll()}
            done = self._stop_r in ready
            while True:                       # everything in the pipe now (on stop too: drain)
                try:
                    chunk = os.read(self._rfd, 1 << 16)
                except BlockingIOError:
                    break
                except OSError:
                    chunk = b""
                if not chunk:                 # no writer left
                    done = True
                    break
                tail = self._lines(tail + chunk)
            self._sink.flush()
        if tail:
            self._sink.line(tail)
        self._sink.flush()

    def _lines(self, data: bytes) -> bytes:
        *lines, tail = data.split(b"\n")
        for line in lines:
            self._sink.line(line)
        if len(tail) > _MAX_LINE:             # a record without its newline: deliver what there is
            self._sink.line(tail)
            tail = b""
        return tail

    def sync(self, timeout: Optional[float] = 5.0) -> bool:
        """Wait until every record DOCA wrote before this call has been delivered (False on timeout)."""
        if not self.running:
            return False
        n = next(self._seq)
        waiter = threading.Event()
        with self._sink.lock:
            self._sink.synced[n] = waiter
        try:
            os.write(self._wfd, _SYNC + str(n).encode() + b"\n")
        except OSError:
            return False
        return waiter.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop delivering: DOCA's records go to /dev/null, the ones already written are delivered,
        the reader thread is joined. Idempotent."""
        _stop(self, timeout)

    def _shutdown(self, timeout: float) -> None:
        """Part of close, once DOCA no longer writes to the pipe."""
        if self._closed:
            return
        self._closed = True
        try:
            os.write(self._stop_w, b"x")
        except OSError:
            pass
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        with self._fd_lock:                   # never close an fd the reader may still read
            if self._exited or self._thread.ident is None:     # finished, or never started
                self._close_fds()
            else:
                self._handoff = True

    def __enter__(self) -> "SdkLogRoute":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<SdkLogRoute {'running' if self.running else 'closed'} fd={self._wfd}>"


_lock = threading.Lock()
_backend: Any = None              # struct doca_log_backend * (never destroyed: DOCA has no call for it)
_backend_fd: Optional[int] = None  # the fd number DOCA writes SDK records to
_route: Optional[SdkLogRoute] = None
_atexit_registered = False


def _devnull_onto(fd: int) -> None:
    null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.dup2(null, fd, inheritable=False)
    finally:
        os.close(null)


def route_sdk_logs() -> SdkLogRoute:
    """Start delivering DOCA SDK records to structlog (logger ``pydoca.sdk``); the running
    route if there is one. The level is DOCA's global SDK limit (:func:`set_sdk_level`)."""
    global _backend, _backend_fd, _route, _atexit_registered
    from ._native import ffi, lib
    from .errors import check

    with _lock:
        if _route is not None and _route.running:
            return _route
        rfd, wfd = os.pipe()
        own_wfd = True                        # wfd still needs closing on failure
        try:
            os.set_blocking(rfd, False)
            os.set_blocking(wfd, False)       # a DOCA thread never blocks on a full pipe
            try:
                fcntl.fcntl(wfd, getattr(fcntl, "F_SETPIPE_SZ", 1031), _PIPE_SIZE)
            except OSError:
                pass
            if _backend is None:
                out = ffi.new("struct doca_log_backend **")
                check(lib.doca_log_backend_create_with_fd_sdk(wfd, out), "doca_log_backend_create_with_fd_sdk")
                _backend, _backend_fd, own_wfd = out[0], wfd, False
            else:
                assert _backend_fd is not None
                check(lib.doca_log_backend_set_sdk_level(_backend, lib.doca_log_level_get_global_sdk_limit()),
                      "doca_log_backend_set_sdk_level")
                os.dup2(wfd, _backend_fd, inheritable=False)
        except BaseException:
            os.close(rfd)
            if own_wfd:
                os.close(wfd)
            raise
        if own_wfd:
            os.close(wfd)                     # dup2'd onto the backend's fd
        assert _backend_fd is not None
        _route = SdkLogRoute(rfd, _backend_fd)
        if not _atexit_registered:
            atexit.register(stop_sdk_logs)
            _atexit_registered = True
        return _route


def _stop(route: Optional[SdkLogRoute], timeout: float) -> None:
    global _route
    from ._native import lib

    with _lock:
        if route is None:
            route = _route
        if route is None:
            return
        if route is _route:
            _route = None
            if _backend is not None:
                lib.doca_log_backend_set_sdk_level(_backend, LEVELS["disable"])
            if _backend_fd is not None:
                _devnull_onto(_backend_fd)   # from here on, DOCA's writes reach /dev/null
        route._shutdown(timeout)


def stop_sdk_logs(timeout: float = 5.0) -> None:
    """Stop the route of :func:`route_sdk_logs` if one runs (also done at interpreter exit)."""
    _stop(None, timeout)


def sdk_route() -> Optional[SdkLogRoute]:
    """The running route, or None."""
    route = _route
    return route if route is not None and route.running else None


def set_sdk_level(level: Union[str, int]) -> SdkLogRoute:
    """Set DOCA's SDK log limit to ``level`` (records less severe are not produced) and route
    SDK records into structlog (logger ``pydoca.sdk``), starting the route if needed.

    ``level``: a DOCA level name (``"warning"``) or number (``40``); :class:`LogLevelError`
    names the allowed values. Returns the running :class:`SdkLogRoute`.
    """
    n = parse_level(level)
    from ._native import lib
    from .errors import check

    route = route_sdk_logs()
    check(lib.doca_log_level_set_global_sdk_limit(n), "doca_log_level_set_global_sdk_limit")
    return route


def get_sdk_level() -> str:
    """DOCA's global SDK log limit, by name."""
    from ._native import lib

    value = int(lib.doca_log_level_get_global_sdk_limit())
    return _NAMES.get(value, str(value))


def _after_fork_in_child() -> None:
    """A forked child has no reader thread: its SDK records go to /dev/null until it routes its own."""
    global _route, _lock
    _lock = threading.Lock()
    route, _route = _route, None
    if _backend_fd is not None:
        try:
            _devnull_onto(_backend_fd)
        except OSError:
            pass
    if route is not None:
        route._closed = True
        for fd in (route._rfd, route._stop_r, route._stop_w):
            try:
                os.close(fd)
            except OSError:
                pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


__all__ = ["LEVELS", "LogLevelError", "SDK_LOGGER", "SdkLogRoute", "SdkRecord", "get_sdk_level", "level_name",
           "parse_level", "parse_record", "route_sdk_logs", "sdk_route", "set_sdk_level", "stop_sdk_logs"]
