"""Posted endpoint writes (``Requester.write(..., posted=True)``): answered on delivery, the
handler runs later in order, failures surface on the next operation or ``flush()``, and at most
``window`` posted writes await their handlers (CREDIT frames). Responder: `pydoca serve`."""
from __future__ import annotations

import zlib
from typing import Iterator

import pytest
from peer_handlers import framed
from peer_util import Server, write_spec

from pydoca.peer import Busy, HandlerError, Requester
from pydoca.peer import protocol as P

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(write_spec(tmp_path_factory.mktemp("posted")), "--call-timeout", "5")
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
        with pytest.raises(HandlerError, match=r"posted write \(seq \d+\) failed: .*crc mismatch"):
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
