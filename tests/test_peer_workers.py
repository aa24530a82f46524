"""The handler pool's hand-off: deferred jobs start on signal, finished jobs wake the serving
thread by its engine's kick or by the pipe (real DOCA's path), close runs what was submitted."""
from __future__ import annotations

import asyncio
import os
import select
import threading
import time
from typing import Any, Iterator, List

import pytest

from pydoca.pe import ProgressEngine
from pydoca.peer import Requester, Responder
from pydoca.peer.workers import HandlerPool, Job

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def pool() -> Iterator[HandlerPool]:
    p = HandlerPool(2, name="test-pool")
    yield p
    p.close()


def _readable(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def _take_all(p: HandlerPool, n: int, timeout: float = 5.0) -> List[Job]:
    got: List[Job] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        _readable(p.fileno(), 0.1)
        got += p.take()
    return got


def test_deferred_jobs_start_only_when_signalled(pool: HandlerPool) -> None:
    ran = threading.Event()

    def double(x: int) -> int:
        ran.set()
        return 2 * x
    pool.defer = True
    pool.submit(Job(double, (21,), "ctx", None))
    assert not ran.wait(0.3), "a deferred job started before signal()"
    pool.signal()
    assert ran.wait(5)
    assert _readable(pool.fileno(), 5), "a finished job writes the pipe (no kick set)"
    jobs = _take_all(pool, 1)
    assert [(j.value, j.context, j.done) for j in jobs] == [(42, "ctx", True)]


def test_every_job_runs_once_and_errors_are_kept(pool: HandlerPool) -> None:
    def fail() -> None:
        raise KeyError("boom")
    jobs = [Job(lambda i=i: i, (), i, None) for i in range(20)] + [Job(fail, (), "bad", None)]
    for job in jobs:
        pool.submit(job)
    got = _take_all(pool, len(jobs))
    assert sorted(j.context for j in got if j.context != "bad") == list(range(20))     # each once
    bad = [j for j in got if j.context == "bad"]
    assert len(bad) == 1 and isinstance(bad[0].error, KeyError)


def test_signal_and_wait_is_woken_by_the_kick(pool: HandlerPool) -> None:
    with ProgressEngine() as pe:
        if not pool.kick_engine(pe):
            pytest.skip("the kick is softdoca's")
        pool.defer = True
        pool.submit(Job(time.sleep, (0.05,), "slept", None))
        t0 = time.monotonic()
        woke = pool.signal_and_wait(5000, 0)     # signals the job, then sleeps on the engine
        elapsed = time.monotonic() - t0
        assert woke == 1 and elapsed < 2.5, f"woken after {elapsed:.2f}s (the 5 s timeout: no kick)"
        assert [j.context for j in pool.take()] == ["slept"]
        assert not _readable(pool.fileno(), 0), "a kicking pool does not write its pipe"
    assert not pool.kicks, "the engine's close detached it: finished jobs write the pipe again"
    pool.defer = False
    pool.submit(Job(int, ("7",), "after", None))
    assert _readable(pool.fileno(), 5), "detached from the closed engine, a finished job writes the pipe"
    assert [(j.context, j.value) for j in _take_all(pool, 1)] == [("after", 7)]


def test_close_runs_submitted_jobs_and_stops_every_worker() -> None:
    p = HandlerPool(2, name="test-close")
    done: List[int] = []
    p.defer = True
    for i in range(3):
        p.submit(Job(done.append, (i,), i, None))    # never signalled: close() still runs them
    threads = list(p._threads)
    p.close(timeout=5)
    assert sorted(done) == [0, 1, 2]
    assert not any(t.is_alive() for t in threads)
    p.close()                                        # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        p.submit(Job(print, (), None, None))


def test_close_does_not_wait_for_a_stuck_handler() -> None:
    p = HandlerPool(1, name="test-stuck")
    release = threading.Event()
    p.submit(Job(release.wait, (20,), "stuck", None))
    time.sleep(0.1)
    t0 = time.monotonic()
    p.close(timeout=0.2)
    assert time.monotonic() - t0 < 2
    release.set()                                    # the handler ends after close: its worker just exits
    p._threads[0].join(5)
    assert not p._threads[0].is_alive()


def test_async_handlers_finish_through_the_pipe(pool: HandlerPool) -> None:
    async def double(x: int) -> int:
        await asyncio.sleep(0.01)
        return 2 * x
    pool.submit(Job(double, (5,), "async", None))
    assert _readable(pool.fileno(), 5), "a finished coroutine writes the pipe"
    assert [(j.context, j.value) for j in _take_all(pool, 1)] == [("async", 10)]


def test_responder_without_kick_serves_through_the_pipe(monkeypatch: Any) -> None:
    """Real DOCA has no kick: the serving thread sleeps on the engine's fd and the pool's pipe."""
    from rdma_util import free_port
    monkeypatch.setattr(ProgressEngine, "soft_addresses", lambda self: None)
    resp = Responder(f"127.0.0.1:{free_port()}", name="pipe")
    resp.add_endpoint("/pooled", "call", 64, lambda p: p[::-1])

    def slow(p: bytes) -> bytes:
        time.sleep(0.2)
        return p
    resp.add_endpoint("/slow", "call", 64, slow)
    resp.start()
    assert not resp.pool.kicks
    server = threading.Thread(target=resp.serve_forever, kwargs={"poll": 5.0}, name="serving", daemon=True)
    server.start()
    try:
        with Requester.connect(resp.address) as req:
            t0 = time.monotonic()
            for i in range(50):
                body = i.to_bytes(4, "big")
                assert req.call("/pooled", body) == body[::-1]
            assert time.monotonic() - t0 < 10, "each call waited for the 5 s poll: the pipe did not wake it"
            assert req.call("/slow", b"zz") == b"zz"
    finally:
        resp.stop()
        if resp.pe.can_kick:
            resp.pe.kick()                          # ends the 5 s wait now
        server.join(10)
        resp.close()
    assert not server.is_alive()


def test_run_once_in_own_loop_starts_handlers_at_once() -> None:
    """Driven by hand (docs/peer.md: run_once in your own loop), a pass's handler starts during the pass,
    not at the next run_once: the caller may do other work in between."""
    from rdma_util import free_port
    ran = threading.Event()

    def handler(p: bytes) -> bytes:
        ran.set()
        return p.upper()
    resp = Responder(f"127.0.0.1:{free_port()}", name="own-loop")
    resp.add_endpoint("/pooled", "call", 64, handler)
    resp.start()
    got: List[Any] = []
    caller = threading.Thread(target=lambda: got.append(_call(resp.address, b"abc")), daemon=True)
    try:
        caller.start()
        deadline = time.monotonic() + 10
        while not resp._running and time.monotonic() < deadline:    # until the request is being handled
            resp.run_once(0.05)
        assert resp._running, "the request never arrived"
        assert ran.wait(2), "the handler waited for the next run_once"
        while caller.is_alive() and time.monotonic() < deadline:
            resp.run_once(0.05)
        caller.join(1)
        assert got == [b"ABC"]
    finally:
        resp.close()


def _call(address: str, payload: bytes) -> bytes:
    with Requester.connect(address, timeout=10) as req:
        return req.call("/pooled", payload)


def test_a_job_finishing_after_close_writes_no_fd() -> None:
    """The pool's pipe is closed by close(): a stuck job that ends later must not write to whatever
    now has its fd number (the old pool wrote its pipe from Python whenever a job finished)."""
    p = HandlerPool(1, name="test-late")
    release = threading.Event()
    old_w = p._wfd
    p.submit(Job(release.wait, (20,), "late", None))
    time.sleep(0.1)
    p.close(timeout=0.1)
    r, w = os.pipe()                                  # the lowest free numbers: usually the pool's old ones
    try:
        if old_w not in (r, w):
            pytest.skip("the pipe's old fd numbers were not reused")
        release.set()
        p._threads[0].join(5)
        assert not p._threads[0].is_alive()
        assert not _readable(r, 0.2), "a job that finished after close wrote to a reused fd"
    finally:
        os.close(r)
        os.close(w)


def test_serve_forever_starts_the_last_pass_handlers_on_its_way_out() -> None:
    """serve_forever defers a pass's handlers to its next wait; when it returns instead, they start."""
    from rdma_util import free_port
    ran = threading.Event()

    def handler(p: bytes) -> bytes:
        ran.set()
        return p
    resp = Responder(f"127.0.0.1:{free_port()}", name="last-pass")
    resp.add_endpoint("/pooled", "call", 64, handler)
    resp.start()
    caller = threading.Thread(target=lambda: _swallow(resp.address), daemon=True)
    try:
        caller.start()
        resp.serve_forever(lambda: bool(resp._running), poll=0.05)    # returns after the request's pass
        assert resp._running, "serve_forever returned before the request arrived"
        assert ran.wait(2), "the last pass's handler did not start when serve_forever returned"
    finally:
        resp.close()
        caller.join(10)


def _swallow(address: str) -> None:
    try:
        _call(address, b"x")
    except Exception:  # noqa: BLE001 - the responder closes under this call on purpose
        pass


def test_a_forked_child_closes_and_frees_the_parents_pool() -> None:
    """After fork() the child has the hand-off but none of its workers: closing and freeing it there
    returns at once (destroying a condition variable the parent's workers wait on would hang)."""
    from pydoca._native import lib
    p = HandlerPool(2, name="test-fork")
    try:
        p.submit(Job(int, ("1",), "warm", None))     # a worker now waits in the hand-off
        assert [j.value for j in _take_all(p, 1)] == [1]
        pid = os.fork()
        if pid == 0:                                  # child: bounded by the parent's kill below
            code = 1
            try:
                p.close(timeout=0.1)
                lib.pydoca_handoff_free(p._h)         # what the garbage collector would do
                code = 0
            finally:
                os._exit(code)
        deadline = time.monotonic() + 10
        status = None
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.02)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the child hung closing the parent's pool")
        assert status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        p.submit(Job(int, ("2",), "after", None))     # the parent's pool is untouched
        assert [j.value for j in _take_all(p, 1)] == [2]
    finally:
        p.close()


def test_close_from_another_thread_stops_serve_forever_first() -> None:
    """close() while serve_forever waits on another thread: the serving thread leaves its wait (kicked)
    before the engine is destroyed under it, and serve_forever returns."""
    from rdma_util import free_port
    resp = Responder(f"127.0.0.1:{free_port()}", name="close-while-serving")
    resp.add_endpoint("/pooled", "call", 64, lambda p: p)
    resp.start()
    server = threading.Thread(target=resp.serve_forever, kwargs={"poll": 30.0}, name="serving", daemon=True)
    server.start()
    deadline = time.monotonic() + 5
    while resp._serving is None and time.monotonic() < deadline:
        time.sleep(0.01)
    t0 = time.monotonic()
    resp.close()                                  # the serving thread sits in a 30 s wait
    alive = server.is_alive()
    assert time.monotonic() - t0 < 5, "close waited for the serving thread's 30 s poll"
    server.join(5)
    assert not alive, "close() destroyed the engine while serve_forever still ran on it"
