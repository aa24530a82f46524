"""Posted endpoint writes (``Requester.write(..., posted=True)``): answered on delivery, the
handler runs later in order, failures surface on the next operation or ``flush()``, and at most
``window`` posted writes await their handlers (CREDIT frames). Responder: `pydoca serve`."""
from __future__ import annotations

import os
import re
import time
import zlib
from pathlib import Path
from typing import Iterator

import pytest
from peer_handlers import framed
from peer_util import SPEC, Server, write_spec

from pydoca.peer import Busy, Disconnected, HandlerError, Requester
from pydoca.peer import protocol as P

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    spec = SPEC + '  - {path: /slowfail, type: write, buffer: {size: 64}, handler: "peer_handlers:slow_fail"}\n'
    srv = Server(write_spec(tmp_path_factory.mktemp("posted"), spec), "--call-timeout", "5")
    yield srv
    assert srv.terminate() == 0, srv.stderr[-3000:]
    assert "Traceback" not in srv.stderr, srv.stderr[-3000:]


def test_posted_writes_run_in_order_within_the_window(server: Server) -> None:
    bodies = [bytes([i]) * (10 + i) for i in range(60)]
    with Requester.connect(server.address, name="posted-order", window=3) as req:
        for body in bodies:
            req.write("/store", framed(body), posted=True)
            assert req._posted.inflight <= 3                      # credits bound what awaits a handler
        req.flush(10)
        assert req._posted.inflight == 0
        assert req.call("/lastcrc") == str(zlib.crc32(bodies[-1])).encode()   # every handler ran, in order


def test_a_failed_posted_write_is_raised_by_the_next_operation(server: Server) -> None:
    with Requester.connect(server.address, name="posted-fail") as req:
        req.write("/store", b"\0\0\0\0not framed", posted=True)    # delivered: the handler will refuse it
        with pytest.raises(HandlerError, match=r"posted write to /store \(seq \d+\) failed: .*crc mismatch"):
            req.flush(10)
        req.write("/store", framed(b"fine"), posted=True)          # the failure was raised once
        req.flush(10)
        assert req.call("/lastcrc") == str(zlib.crc32(b"fine")).encode()


def test_busy_endpoint_fails_a_posted_write_later(server: Server) -> None:
    with Requester.connect(server.address, name="posted-busy", window=4) as req:
        req.write("/single", b"0.6", posted=True)                  # the handler sleeps 0.6 s
        req.write("/single", b"0", posted=True)                    # queue 0: refused while busy
        with pytest.raises(Busy):
            for _ in range(100):                                    # bounded: raised by a later op
                req.call("/echo", b"x")
        req.flush(10)


def test_large_posted_write_is_confirmed(server: Server) -> None:
    """Beyond the inline size a posted write is a confirmed one (it uses the slot): a handler
    failure is raised by the write itself, nothing is left for flush()."""
    with Requester.connect(server.address, name="posted-large") as req:
        with pytest.raises(HandlerError, match="crc mismatch"):
            req.write("/store", b"\0\0\0\0" + b"y" * P.INLINE_MAX, posted=True)
        assert req._posted.inflight == 0
        req.flush(5)


def test_frames() -> None:
    f = P.decode(P.encode(P.Credit(7), 0))
    assert f.type is P.MsgType.CREDIT and f.msg == P.Credit(7)
    with pytest.raises(P.FrameError, match="FLAG_POSTED is for inline WRITEs, not CALL"):
        P.decode(P.encode(P.Call(1, 0, 3, b"abc"), 5, P.FLAG_POSTED))
    with pytest.raises(P.FrameError, match="FLAG_POSTED is for inline WRITEs, not WRITE in buffer"):
        P.decode(P.encode(P.Write(1, 0, 9000), 5, P.FLAG_POSTED | P.FLAG_IN_BUFFER))
    bad = bytearray(P.encode(P.Credit(1), 0))
    bad[12:16] = (5).to_bytes(4, "little")
    with pytest.raises(P.FrameError):
        P.decode(bytes(bad) + b"\0")


def test_a_slow_posted_write_does_not_hold_back_credits(server: Server) -> None:
    """Credits of finished posted writes go back at once, whatever is still running."""
    with Requester.connect(server.address, name="posted-hol", window=4) as req:
        req.write("/single", b"2", posted=True)                    # its handler sleeps 2 s
        t0 = time.monotonic()
        for _ in range(12):                                         # 3x the window, to an idle endpoint
            req.write("/plain", b"x", posted=True, timeout=1.5)
        assert time.monotonic() - t0 < 1.5
        req.flush(10)


def test_a_late_failure_is_not_lost_behind_many_writes(server: Server) -> None:
    """A posted write that fails after many later posted writes retired: still raised, credit back."""
    with Requester.connect(server.address, name="posted-late", window=2) as req:
        req.write("/slowfail", b"1", posted=True)                   # fails after 1 s
        for _ in range(40):                                          # far more than the paths kept
            req.write("/plain", b"y", posted=True)
        with pytest.raises(HandlerError, match=r"posted write( to /slowfail)? \(seq \d+\) failed: .*late on purpose"):
            req.flush(10)
        assert req._posted.inflight == 0
        req.write("/plain", b"z", posted=True)
        req.flush(5)


def test_flush_after_the_responder_died_says_so(tmp_path: Path) -> None:
    srv = Server(write_spec(tmp_path, SPEC), "--call-timeout", "5")
    try:
        with Requester.connect(srv.address, name="posted-dead", timeout=5) as req:
            req.write("/single", b"3", posted=True)                # still running when the responder dies
            srv.kill()
            with pytest.raises(Disconnected) as err:
                req.flush(10)
        # softdoca says why the connection went (native: the link's cause; a provider: its own words)
        native = os.environ.get("SOFTDOCA_PROVIDER", "native") in ("", "native")
        why = r"the peer (closed|reset) the connection" if native else r"\S"
        assert re.search(rf"connection to \S+ (disconnected|failed): {why}", str(err.value)), str(err.value)
    finally:
        srv.kill()
