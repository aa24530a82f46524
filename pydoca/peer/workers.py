"""Handlers off the progress path.

A :class:`HandlerPool` runs endpoint handlers on a bounded set of worker
threads (``async def`` handlers on one event-loop thread), so a slow handler
never stalls progress, other requesters or new connections. Finished jobs
are queued for the serving thread, which is woken by its progress engine's
kick (softdoca) or by a pipe it sleeps on with the engine's fd.
The serving thread owns every DOCA call; workers only run user code.

Jobs are counted in and out through a small C hand-off (``pydoca_handoff_*``
in the shim) that both sides call with the interpreter lock released: the
serving thread signals the jobs of a pass on its way into its wait
(:meth:`HandlerPool.signal_and_wait`), so a worker wakes to a free lock, and
a worker wakes the serving thread only once it let go of the lock. A woken
thread then never sleeps a second time, on the lock: one wake-up each way.
"""
from __future__ import annotations

import asyncio
import collections
import inspect
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Deque, List, Optional, Tuple

from pydoca._log import get_logger

from .._native import ffi, lib

if TYPE_CHECKING:
    from ..pe import ProgressEngine

log = get_logger()


class Job:
    """One handler invocation; ``value``/``error`` are set when ``done``.

    ``state`` moves QUEUED -> RUNNING -> DONE on a worker, or QUEUED -> ABANDONED when it timed out
    before a worker took it (it then never runs); both moves happen under the pool's lock, so a job
    is either abandoned or run, never both."""

    QUEUED, RUNNING, DONE, ABANDONED = "queued", "running", "done", "abandoned"

    __slots__ = ("fn", "args", "context", "deadline", "value", "error", "done", "timed_out", "started", "future",
                 "state", "replaced", "here", "ran_s")

    def __init__(self, fn: Callable[..., Any], args: Tuple[Any, ...], context: Any, timeout: Optional[float]) -> None:
        self.fn, self.args, self.context = fn, args, context
        self.started = time.monotonic()
        self.deadline = None if timeout is None else self.started + timeout
        self.value: Any = None
        self.error: Optional[BaseException] = None
        self.done = False
        self.timed_out = False      # abandoned while RUNNING: its thread is stuck in it and was replaced
        self.future: Any = None
        self.state = Job.QUEUED
        self.replaced = False       # its stuck thread got a replacement (the pool's own accounting)
        self.here = False           # run by the serving thread itself (HandlerPool.run_here), not a worker
        self.ran_s: Optional[float] = None   # how long the handler ran (a synchronous one, once it returned)

    def run(self) -> None:
        t0 = time.perf_counter()
        try:
            self.value = self.fn(*self.args)
        except BaseException as exc:  # noqa: BLE001 - handed to the serving thread
            self.error = exc
        self.ran_s = time.perf_counter() - t0


class HandlerPool:
    """``workers`` threads, plus one replacement for each job stuck past its timeout (up to ``max_workers``
    threads in all); a replacement goes again when the stuck job finally returns."""

    def __init__(self, workers: int = 4, *, max_workers: Optional[int] = None, name: str = "pydoca-handler") -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.workers, self.max_workers = workers, max(workers, max_workers or 4 * workers)
        self.name = name
        self.finished: Deque[Job] = collections.deque()
        self._jobs: Deque[Job] = collections.deque()     # counted in by signal(), out by the C hand-off
        self._unsignaled = 0
        self._threads: List[threading.Thread] = []
        self._idle = 0
        self._limit = workers
        self._serial = 0
        self._lock = threading.Lock()
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        handoff = lib.pydoca_handoff_new()
        if handoff == ffi.NULL:
            os.close(self._rfd)
            os.close(self._wfd)
            raise MemoryError("handler pool: no memory for its hand-off")
        self._h = ffi.gc(handoff, lib.pydoca_handoff_free)   # freed with the last thread that holds the pool
        lib.pydoca_handoff_set_notify(self._h, 0, 0, self._wfd)
        self._engine: Optional["ProgressEngine"] = None     # kicked by finished jobs (kick_engine)
        self._wait_fn = 0                                   # its softdoca_pe_wait (signal_and_wait)
        #: jobs wait for signal()/signal_and_wait() (the serving thread's wait) instead of starting at once
        #: (``async def`` handlers run on the pool's event loop at once either way)
        self.defer = False
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._loop_thread: Optional[threading.Thread] = None
        self._closed = False

    def fileno(self) -> int:
        """Readable when jobs have finished (call :meth:`take`); not used once :meth:`kick_engine` is set."""
        return self._rfd

    def kick_engine(self, pe: "ProgressEngine") -> bool:
        """Finished jobs wake ``pe``'s waiter by its kick (softdoca) instead of the pipe, until ``pe``
        closes (the pool holds it meanwhile); False where the runtime has no kick."""
        soft = pe.soft_addresses()
        if soft is None:
            return False
        self._engine, self._wait_fn = pe, soft[0]
        pe.add_closing_hook(lambda: self._detach_engine(pe))
        lib.pydoca_handoff_set_notify(self._h, soft[1], soft[2], -1)
        return True

    def _detach_engine(self, pe: "ProgressEngine") -> None:
        """``pe`` is closing: if it is the one kicked, finished jobs write the pipe again (nothing at all
        after close)."""
        if self._engine is not pe:
            return
        lib.pydoca_handoff_set_notify(self._h, 0, 0, self._wfd)
        self._engine, self._wait_fn = None, 0

    @property
    def kicks(self) -> bool:
        """Finished jobs kick an engine (:meth:`kick_engine`), not the pipe."""
        return self._engine is not None

    def _take_unsignaled(self) -> int:
        with self._lock:                  # close() on another thread must not post the same jobs twice
            n, self._unsignaled = self._unsignaled, 0
        return n

    def signal(self) -> None:
        """Start the jobs submitted since the last signal (``defer``); any thread."""
        n = self._take_unsignaled()
        if n:
            lib.pydoca_handoff_post_wait(self._h, n, 0, 0, 0, 0)

    def signal_and_wait(self, timeout_ms: int, spin_us: int) -> int:
        """:meth:`signal`, then wait on the kicked engine (softdoca_pe_wait, up to ``timeout_ms``, spinning
        up to ``spin_us``) in one C call without the interpreter lock: the workers it wakes find the lock
        free. Only while :attr:`kicks`."""
        engine = self._engine
        if engine is None:
            raise RuntimeError("signal_and_wait needs an engine to wait on (kick_engine)")
        timeout_ms = min(max(0, timeout_ms), 0x7FFFFFFF)
        return int(lib.pydoca_handoff_post_wait(self._h, self._take_unsignaled(), self._wait_fn, engine._addr,
                                                timeout_ms, spin_us))

    def run_here(self, job: Job) -> None:
        """Run a queued job on the calling thread (the serving thread, for a handler known to be short): the
        same states as on a worker, so :meth:`abandon` treats it alike, except that no replacement thread is
        started for it (the responder's stand-in serves while it is stuck). ``done`` is set; the caller
        handles the result itself (it does not come back through :meth:`take`)."""
        with self._lock:
            if job.state != Job.QUEUED:
                return
            job.state, job.here = Job.RUNNING, True
        job.run()
        with self._lock:
            job.state = Job.DONE
        job.done = True

    def submit(self, job: Job) -> None:
        if self._closed:
            raise RuntimeError("handler pool is closed")
        if inspect.iscoroutinefunction(job.fn):
            self._submit_async(job)
            return
        with self._lock:
            spawn = self._idle <= 0 and len(self._threads) < self._limit
            if not spawn:
                self._idle -= 1
            else:
                self._spawn_locked()
        self._jobs.append(job)
        with self._lock:
            self._unsignaled += 1
        if not self.defer:
            self.signal()

    def _spawn_locked(self) -> None:
        self._serial += 1
        t = threading.Thread(target=self._worker, name=f"{self.name}-{self._serial}", daemon=True)
        self._threads.append(t)
        t.start()

    @property
    def threads(self) -> int:
        """Worker threads alive now (stuck ones included)."""
        with self._lock:
            return len(self._threads)

    def _worker(self) -> None:
        h, finished = self._h, 0
        me = threading.current_thread()
        while True:
            got = lib.pydoca_handoff_take(h, finished, 1000)   # notifies the previous job's finish first
            finished = 0
            if got < 0:
                return
            if got == 0:
                continue
            try:
                job = self._jobs.popleft()
            except IndexError:                # cannot happen while counts match the deque; never fatal
                continue
            with self._lock:
                run = job.state == Job.QUEUED
                job.state = Job.RUNNING if run else job.state
                if not run:                   # abandoned while queued: it never runs
                    self._idle += 1
            if not run:
                del job
                continue
            job.run()
            with self._lock:
                job.state = Job.DONE
                if job.replaced:               # its replacement took over: one of the two goes
                    self._limit -= 1
                    leave = len(self._threads) > self._limit
                    if leave:
                        self._threads.remove(me)
                    else:
                        self._idle += 1
                else:
                    leave = False
                    self._idle += 1
            self._queue_finished(job)     # the serving thread is notified by the next take, lock let go
            del job                       # nothing of a finished request stays reachable from an idle worker
            if leave:
                lib.pydoca_handoff_notify(h)
                return
            finished = 1

    def _queue_finished(self, job: Job) -> None:
        job.done = True
        self.finished.append(job)

    def _finish(self, job: Job) -> None:
        self._queue_finished(job)
        lib.pydoca_handoff_notify(self._h)

    def _submit_async(self, job: Job) -> None:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            t = threading.Thread(target=loop.run_forever, name=f"{self.name}-loop", daemon=True)
            t.start()
            self._loop, self._loop_thread = loop, t

        async def run() -> None:
            try:
                with self._lock:
                    if job.state != Job.QUEUED:   # abandoned before the loop got to it: never runs
                        return
                    job.state = Job.RUNNING
                job.value = await job.fn(*job.args)
            except BaseException as exc:  # noqa: BLE001 - handed to the serving thread
                job.error = exc
            with self._lock:
                job.state = Job.DONE
            self._finish(job)
        job.future = asyncio.run_coroutine_threadsafe(run(), self._loop)

    def abandon(self, job: Job) -> str:
        """A job outlived its timeout; returns the state it was in. ``Job.QUEUED``: it never starts (and never
        comes back through :meth:`take`); ``Job.RUNNING``: it is cancelled if a coroutine, else its thread is
        left to it and replaced, and it comes back through :meth:`take` with ``timed_out`` set when it returns;
        ``Job.DONE``: it finished meanwhile, nothing changed."""
        with self._lock:
            state = job.state
            if state == Job.QUEUED:
                job.state = Job.ABANDONED
                job.args, job.context = (), None          # its request's buffers are not held any longer
            elif state == Job.RUNNING:
                job.timed_out = True
                if job.future is None and not job.here and self._limit < self.max_workers:
                    self._limit += 1
                    job.replaced = True
                    if self._idle < 0 and len(self._threads) < self._limit:   # jobs wait for a thread now
                        self._idle += 1
                        self._spawn_locked()
        future = job.future
        if future is not None and state in (Job.QUEUED, Job.RUNNING):
            future.cancel()
            if state == Job.QUEUED:
                job.future = None         # it never comes back through take(): no cycle through its task
        return state

    def take(self) -> List[Job]:
        """Jobs finished since the last call (and drains the wake-up pipe, unless the pool kicks an engine)."""
        if self._engine is None:
            try:
                while os.read(self._rfd, 4096):
                    pass
            except (BlockingIOError, OSError):
                pass
        out = []
        while self.finished:
            job = self.finished.popleft()
            job.future = None             # its future -> task -> coroutine -> job cycle ends here
            out.append(job)
        return out

    def close(self, timeout: float = 1.0) -> None:
        """Stop the workers; waits up to ``timeout`` for running handlers (threads are daemons)."""
        if self._closed:
            return
        self._closed = True
        self.signal()                     # jobs already submitted still run
        lib.pydoca_handoff_close(self._h)     # then each worker returns; nobody is notified any more
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            log.warning("handlers still running at close", threads=stuck)
        if self._loop is not None and self._loop_thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join(max(0.0, deadline - time.monotonic()))
            if not self._loop_thread.is_alive():
                self._loop.close()
        os.close(self._rfd)
        os.close(self._wfd)


__all__ = ["HandlerPool", "Job"]
