"""Handlers off the progress path.

A :class:`HandlerPool` runs endpoint handlers on a bounded set of worker
threads (``async def`` handlers on one event-loop thread), so a slow handler
never stalls progress, other requesters or new connections. Finished jobs
are queued for the serving thread; a pipe made readable on each finish lets
that thread sleep on the progress engine's fd and the pool's fd together.
The serving thread owns every DOCA call; workers only run user code.
"""
from __future__ import annotations

import asyncio
import collections
import inspect
import os
import queue
import threading
import time
from typing import Any, Callable, Deque, List, Optional, Tuple

from pydoca._log import get_logger

log = get_logger()


class Job:
    """One handler invocation; ``value``/``error`` are set when ``done``."""

    __slots__ = ("fn", "args", "context", "deadline", "value", "error", "done", "timed_out", "started", "future")

    def __init__(self, fn: Callable[..., Any], args: Tuple[Any, ...], context: Any, timeout: Optional[float]) -> None:
        self.fn, self.args, self.context = fn, args, context
        self.started = time.monotonic()
        self.deadline = None if timeout is None else self.started + timeout
        self.value: Any = None
        self.error: Optional[BaseException] = None
        self.done = False
        self.timed_out = False
        self.future: Any = None

    def run(self) -> None:
        try:
            self.value = self.fn(*self.args)
        except BaseException as exc:  # noqa: BLE001 - handed to the serving thread
            self.error = exc


class HandlerPool:
    """``workers`` threads (growing up to ``max_workers`` while some are stuck)."""

    def __init__(self, workers: int = 4, *, max_workers: Optional[int] = None, name: str = "pydoca-handler") -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.workers, self.max_workers = workers, max(workers, max_workers or 4 * workers)
        self.name = name
        self.finished: Deque[Job] = collections.deque()
        self._jobs: "queue.SimpleQueue[Optional[Job]]" = queue.SimpleQueue()
        self._threads: List[threading.Thread] = []
        self._idle = 0
        self._limit = workers
        self._lock = threading.Lock()
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._loop_thread: Optional[threading.Thread] = None
        self._closed = False
        #: called on each finish instead of writing the pipe (e.g. ProgressEngine.kick)
        self.notify: Optional[Callable[[], None]] = None

    def fileno(self) -> int:
        """Readable when jobs have finished (call :meth:`take`)."""
        return self._rfd

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
        if spawn:
            t = threading.Thread(target=self._worker, name=f"{self.name}-{len(self._threads)}", daemon=True)
            self._threads.append(t)
            t.start()
        self._jobs.put(job)

    def replace_stuck(self) -> None:
        """A job outlived its timeout and still holds a thread: allow one more (up to ``max_workers``)."""
        with self._lock:
            self._limit = min(self.max_workers, self._limit + 1)

    def _worker(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job.run()
            self._finish(job)
            with self._lock:
                self._idle += 1

    def _finish(self, job: Job) -> None:
        job.done = True
        self.finished.append(job)
        if self.notify is not None:     # wakes the serving thread's progress engine directly
            self.notify()
            return
        try:
            os.write(self._wfd, b"\0")
        except OSError:       # pipe full (the serving thread will drain it) or closed at shutdown
            pass

    def _submit_async(self, job: Job) -> None:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            t = threading.Thread(target=loop.run_forever, name=f"{self.name}-loop", daemon=True)
            t.start()
            self._loop, self._loop_thread = loop, t

        async def run() -> None:
            try:
                job.value = await job.fn(*job.args)
            except BaseException as exc:  # noqa: BLE001 - handed to the serving thread
                job.error = exc
            self._finish(job)
        job.future = asyncio.run_coroutine_threadsafe(run(), self._loop)

    def abandon(self, job: Job) -> None:
        """A job timed out: cancel it if it is a coroutine, else allow a replacement thread."""
        if job.future is not None:
            job.future.cancel()
        else:
            self.replace_stuck()

    def take(self) -> List[Job]:
        """Jobs finished since the last call (drains the wake-up pipe)."""
        if self.notify is None:
            try:
                while os.read(self._rfd, 4096):
                    pass
            except (BlockingIOError, OSError):
                pass
        out = []
        while self.finished:
            out.append(self.finished.popleft())
        return out

    def close(self, timeout: float = 1.0) -> None:
        """Stop the workers; waits up to ``timeout`` for running handlers (threads are daemons)."""
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._jobs.put(None)
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in self._threads if t.is_alive()]
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
