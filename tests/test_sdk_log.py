"""DOCA SDK log records (softdoca's own warnings, via doca_log's SDK backends) arrive in structlog.

The record used is a real one: softdoca warns when an RDMA CM connect is refused
("rdma: connection N: connect to HOST:PORT failed: Connection refused"), which a
port that is bound but not listening produces at once.
"""
from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
from typing import Any, Iterator, List, MutableMapping

import pytest
from structlog.testing import capture_logs

import pydoca
from pydoca import errors, log as sdklog
from pydoca._native import lib


@pytest.fixture
def sdk() -> Iterator[None]:
    """Restores DOCA's global SDK limit and stops the route after the test."""
    before = int(lib.doca_log_level_get_global_sdk_limit())
    yield
    sdklog.stop_sdk_logs()
    lib.doca_log_level_set_global_sdk_limit(before)


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A local port that refuses connections (bound, not listening)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    yield int(s.getsockname()[1])
    s.close()


def refused_connect(port: int) -> None:
    """Make softdoca log its 'connect ... failed' warning (on its engine thread, through doca_log)."""
    with pydoca.Device.open(iface="lo") as dev, pydoca.ProgressEngine() as pe, pydoca.Rdma(dev, pe) as rdma:
        conn = rdma.connect_to("127.0.0.1", port)
        with pytest.raises(errors.DocaError):
            conn.wait_established(10)


def sdk_events(logs: List[MutableMapping[str, Any]]) -> List[MutableMapping[str, Any]]:
    return [e for e in logs if e.get("logger") == sdklog.SDK_LOGGER]


def test_softdoca_warning_arrives_as_a_structlog_event(sdk: None, refused_port: int) -> None:
    with capture_logs() as logs:
        route = sdklog.set_sdk_level("warning")
        refused_connect(refused_port)
        assert route.sync(10)
    assert sdklog.get_sdk_level() == "warning"
    found = [e for e in sdk_events(logs) if f"connect to 127.0.0.1:{refused_port} failed" in e["event"]]
    assert found, sdk_events(logs)
    event = found[0]
    assert event["log_level"] == "warning" and event["doca_level"] == "warning"
    assert event["source"] == "softdoca"                       # softdoca's records carry no file:line
    assert "Connection refused" in event["event"] and "pid" not in event


def test_stdlib_logging_gets_the_record_at_its_level(sdk: None, refused_port: int) -> None:
    records: List[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.DEBUG)
    logger = logging.getLogger(sdklog.SDK_LOGGER)
    logger.addHandler(handler)
    try:
        route = sdklog.set_sdk_level(40)                      # a DOCA number: DOCA_LOG_LEVEL_WARNING
        refused_connect(refused_port)
        assert route.sync(10)
    finally:
        logger.removeHandler(handler)
    hits = [r for r in records if f"127.0.0.1:{refused_port} failed" in r.getMessage()]
    assert hits and hits[0].levelno == logging.WARNING and hits[0].name == "pydoca.sdk"
    assert "doca_level=warning" in hits[0].getMessage() and "source=softdoca" in hits[0].getMessage()


def test_records_below_the_limit_do_not_arrive(sdk: None, refused_port: int) -> None:
    with capture_logs() as logs:
        route = sdklog.set_sdk_level("error")
        refused_connect(refused_port)
        assert route.sync(10)
        assert sdklog.get_sdk_level() == "error"
        assert not [e for e in sdk_events(logs) if "connect to" in e["event"]]
        sdklog.set_sdk_level("DOCA_LOG_LEVEL_WARNING")
        refused_connect(refused_port)
        assert route.sync(10)
    assert [e for e in sdk_events(logs) if f"127.0.0.1:{refused_port} failed" in e["event"]]


@pytest.mark.parametrize("bad", ["loud", "", "warnings", 45, 0, 80, -1, True, None, 4.0, "DOCA_LOG_LEVEL_NOPE"])
def test_bad_level_raises_a_typed_error(sdk: None, bad: Any) -> None:
    before = sdklog.get_sdk_level()
    with pytest.raises(sdklog.LogLevelError) as info:
        sdklog.set_sdk_level(bad)
    exc = info.value
    assert isinstance(exc, ValueError) and isinstance(exc, errors.InvalidValueError)
    assert exc.level == bad and {"warning", "debug", 40} <= set(exc.allowed)
    for allowed in ("critical", "error", "warning", "info", "debug", "trace", "disable", "40"):
        assert allowed in str(exc)
    assert sdklog.get_sdk_level() == before and sdklog.sdk_route() is None


def test_level_names_aliases_and_numbers() -> None:
    assert [sdklog.parse_level(x) for x in ("crit", "ERR", " Warn ", "info", "dbg", "trace", "disable", "60",
                                            "doca_log_level_error", 20, 70)] == \
        [20, 30, 40, 50, 60, 70, 10, 60, 30, 20, 70]
    assert sdklog.level_name(40) == "warning"


def test_parses_real_doca_records() -> None:
    rec = sdklog.parse_record(b"[08:25:40:486155][3215][DOCA][ERR][doca_rdma.cpp:1234][doca_rdma_start] "
                              b"Failed to start: bad state")
    assert rec is not None
    assert (rec.level, rec.pid, rec.filename, rec.lineno, rec.func_name, rec.source) == (
        30, 3215, "doca_rdma.cpp", 1234, "doca_rdma_start", None)
    assert rec.message == "Failed to start: bad state"
    assert rec.fields()["pid"] == 3215 and rec.fields()["doca_level"] == "error"
    soft = sdklog.parse_record(b"[12:00:00:000001][%d][DOCA][DBG][softdoca] rdma: peer disconnected" % os.getpid())
    assert soft is not None and (soft.level, soft.source, soft.message) == (60, "softdoca", "rdma: peer disconnected")
    assert "pid" not in soft.fields()
    trc = sdklog.parse_record(b"[t][1][DOCA][TRC][a.c:1][f] x")
    assert trc is not None and trc.level == 70
    assert sdklog.parse_record(b"just text") is None
    assert sdklog.parse_record(b"[t][1][DOCA][LOUD] x") is None


def _threads() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "pydoca-sdk-log"]


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_close_leaves_no_thread_and_no_fd_behind(sdk: None, refused_port: int) -> None:
    sdklog.route_sdk_logs().close()                 # the permanent backend fd exists from here on
    fds = _fds()
    route = sdklog.set_sdk_level("warning")
    assert sdklog.route_sdk_logs() is route and sdklog.sdk_route() is route and route.running
    assert len(_threads()) == 1
    route.close()
    route.close()                                   # idempotent
    assert not route.running and sdklog.sdk_route() is None
    assert not _threads() and not route.thread.is_alive()
    assert _fds() == fds
    with capture_logs() as logs:                    # closed: DOCA's records go nowhere
        refused_connect(refused_port)
    assert not sdk_events(logs)
    with sdklog.route_sdk_logs() as again:          # and a new route delivers again
        assert again is not route
        with capture_logs() as logs:
            refused_connect(refused_port)
            assert again.sync(10)
        assert [e for e in sdk_events(logs) if "connect to" in e["event"]]
    assert not _threads() and _fds() == fds


def test_the_reader_thread_does_not_block_interpreter_exit() -> None:
    code = ("import pydoca, pydoca.log as l\n"
            "r = l.set_sdk_level('debug')\n"
            "assert r.running and r.thread.daemon\n"
            "print('ok', flush=True)\n")
    done = subprocess.run([sys.executable, "-W", "error::ResourceWarning", "-c", code], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYDOCA_BACKEND": "soft"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok" and "Exception" not in done.stderr and "Traceback" not in done.stderr


def test_close_never_hands_the_reader_a_reused_fd() -> None:
    """close() that gives up waiting for a busy reader leaves the pipe's fds to it: a file opened
    afterwards never gets one of their numbers while the reader can still read it."""
    import logging
    import os
    import time

    import pydoca.log as L

    class Slow(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            time.sleep(0.6)

    logger = logging.getLogger("pydoca.sdk")
    handler, level, propagate = Slow(), logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        route = L.route_sdk_logs()
        old = {route._rfd, route._stop_r, route._stop_w}
        os.write(route._wfd, b"[t][%d][DOCA][ERR][softdoca] first record\n" % os.getpid())
        time.sleep(0.1)                                  # the reader is inside the slow handler
        route.close(timeout=0.1)
        assert route.thread.is_alive()
        r, w = os.pipe()
        try:
            assert not {r, w} & old, "a new file got a number the reader still owns"
            os.write(w, b"mine\n")
            route.thread.join(5)
            assert not route.thread.is_alive()
            os.set_blocking(r, False)
            assert os.read(r, 100) == b"mine\n"            # nobody else read it
        finally:
            os.close(r)
            os.close(w)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
