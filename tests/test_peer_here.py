"""Pool handlers known to be short run on the serving thread itself (no hand-off to a worker and back),
and a watch thread serves in its place while such a handler turns slow: other requesters and endpoints
are served meanwhile, handler timeouts still answer, close() does not wait for it."""
from __future__ import annotations

import threading
import time
from typing import Any, Iterator, List, Tuple

import pytest

from pydoca.peer import HandlerError, Requester, Responder
from pydoca.peer import responder as R
from rdma_util import free_port

pytestmark = pytest.mark.timeout(90)


class Gate:
    """A handler that is short until ``hold()``: then each call blocks until ``release()``."""

    def __init__(self) -> None:
        self.threads: List[str] = []
        self.block = threading.Event()
        self.open = threading.Event()
        self.entered = threading.Event()

    def __call__(self, payload: bytes) -> bytes:
        self.threads.append(threading.current_thread().name)
        if self.block.is_set():
            self.entered.set()
            self.open.wait(30)
        return payload[::-1]


def _serve(timeout: float = 30.0) -> Tuple[Responder, Gate, threading.Thread]:
    gate = Gate()
    resp = Responder(f"127.0.0.1:{free_port()}", name="here", workers=2)
    resp.add_endpoint("/gate", "call", 256, gate, timeout=timeout)
    resp.add_endpoint("/echo", "call", 256, lambda p: p)
    resp.start()
    t = threading.Thread(target=resp.serve_forever, name="serving", daemon=True)
    t.start()
    return resp, gate, t


@pytest.fixture
def served() -> Iterator[Tuple[Responder, Gate, threading.Thread]]:
    resp, gate, t = _serve()
    try:
        yield resp, gate, t
    finally:
        gate.open.set()
        resp.stop()
        t.join(5)
        resp.close()


def _prove(req: Requester, gate: Gate) -> None:
    for i in range(R.PROVEN + 4):
        assert req.call("/gate", b"ab%d" % i) == (b"ab%d" % i)[::-1]


def test_a_short_pool_handler_moves_onto_the_serving_thread(served: Any) -> None:
    resp, gate, _ = served
    with Requester.connect(resp.address) as req:
        _prove(req, gate)
    assert gate.threads[0].startswith("pydoca-handler")          # unknown: on the pool first
    assert gate.threads[-1] == "serving", gate.threads            # proven short: on the serving thread
    assert resp.stand_ins == 0


def test_a_handler_turning_slow_on_the_serving_thread_stalls_nobody(served: Any) -> None:
    resp, gate, _ = served
    with Requester.connect(resp.address) as a, Requester.connect(resp.address) as b:
        _prove(a, gate)
        assert gate.threads[-1] == "serving"
        gate.block.set()
        slow: List[Any] = []
        t = threading.Thread(target=lambda: slow.append(a.call("/gate", b"slow", timeout=20)), daemon=True)
        t.start()
        assert gate.entered.wait(10)
        assert gate.threads[-1] == "serving"                     # it blocks the serving thread itself
        t0 = time.monotonic()
        for i in range(20):                                      # another requester, another endpoint
            assert b.call("/echo", b"%d" % i, timeout=5) == b"%d" % i
        assert time.monotonic() - t0 < 2.0
        assert resp.stand_ins == 1
        gate.block.clear()
        gate.open.set()
        t.join(10)
        assert slow == [b"wols"]
        for i in range(R.PROVEN + 4):                            # back to the pool, proven again, here again
            assert a.call("/gate", b"x%d" % i) == (b"x%d" % i)[::-1]
        assert gate.threads[-1] == "serving"
        assert b.call("/echo", b"after") == b"after"


def test_a_handler_timeout_still_answers_when_it_hangs_on_the_serving_thread() -> None:
    resp, gate, serving = _serve(timeout=0.3)
    try:
        with Requester.connect(resp.address) as a, Requester.connect(resp.address) as b:
            _prove(a, gate)
            gate.block.set()
            t0 = time.monotonic()
            with pytest.raises(HandlerError, match="timed out"):
                a.call("/gate", b"hang", timeout=10)
            assert time.monotonic() - t0 < 3.0
            assert b.call("/echo", b"still", timeout=5) == b"still"
            gate.block.clear()
            gate.open.set()
            deadline = time.monotonic() + 10                    # its permit comes back when it returns
            while time.monotonic() < deadline:
                try:
                    assert a.call("/gate", b"again", timeout=5) == b"niaga"
                    break
                except Exception:  # noqa: BLE001 - BUSY while the stuck one holds the permit
                    time.sleep(0.05)
            else:
                raise AssertionError("the endpoint never recovered")
    finally:
        gate.open.set()
        resp.stop()
        serving.join(5)
        resp.close()


def test_close_does_not_wait_for_a_handler_stuck_on_the_serving_thread() -> None:
    resp, gate, serving = _serve()
    try:
        with Requester.connect(resp.address, timeout=5) as a:
            _prove(a, gate)
            gate.block.set()
            t = threading.Thread(target=lambda: _swallow(a), daemon=True)
            t.start()
            assert gate.entered.wait(10)
            t0 = time.monotonic()
            resp.close()
            assert time.monotonic() - t0 < 3.0
            gate.open.set()
            serving.join(5)
            assert not serving.is_alive()                        # serve_forever returned once it did
            t.join(10)
    finally:
        gate.open.set()
        resp.close()


def _swallow(req: Requester) -> None:
    try:
        req.call("/gate", b"stuck", timeout=5)
    except Exception:  # noqa: BLE001 - the responder closed under it
        pass


def test_off_switch() -> None:
    gate = Gate()
    resp = Responder(f"127.0.0.1:{free_port()}", name="off")
    resp.handlers_here = False
    resp.add_endpoint("/gate", "call", 256, gate)
    resp.start()
    t = threading.Thread(target=resp.serve_forever, name="serving", daemon=True)
    t.start()
    try:
        with Requester.connect(resp.address) as req:
            _prove(req, gate)
        assert all(n.startswith("pydoca-handler") for n in gate.threads)
    finally:
        resp.stop()
        t.join(5)
        resp.close()
