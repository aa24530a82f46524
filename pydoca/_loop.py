"""The asyncio driver of progress engines (internal; public API: pydoca.aio).

A ProgressEngine is attached to the running loop once: ``loop.add_reader`` on
its notification fd progresses it when events arrive, and a periodic safety
timer (``SAFETY_INTERVAL``) progresses it too, so a missed wake-up can only
delay, never stall, an awaiting coroutine. It knows only the engine, so the
binding's awaitables (tasks, batches) use it without importing pydoca.aio.
An engine closed under waiting coroutines ends their waits at once: each
predicate is checked a last time (a close may have settled it), the rest
fail with ClosedError, and the reader is removed by the fd it was added with.
"""
from __future__ import annotations

import asyncio
import weakref
from typing import Callable, Dict, Optional, Tuple

from pydoca._log import get_logger

from .errors import ClosedError
from .pe import ProgressEngine

log = get_logger()
SAFETY_INTERVAL = 0.05


class _Driver:
    """Progresses one engine from one event loop while anyone waits."""

    def __init__(self, pe: ProgressEngine, loop: asyncio.AbstractEventLoop) -> None:
        self.pe = pe
        self.loop = loop
        # key -> (check: settles the waiter's future if its predicate holds, fail: ends it with an error)
        self.waiters: Dict[int, Tuple[Callable[[], bool], Callable[[BaseException], None]]] = {}
        self._next = 0
        self._timer: Optional[asyncio.TimerHandle] = None
        self._fd: Optional[int] = None        # the fd add_reader was given (a closed engine has none to ask)

    def add(self, check: Callable[[], bool], fail: Callable[[BaseException], None]) -> int:
        if self._fd is None:
            fd = self.pe.fileno()             # raises ClosedError on a closed engine: nothing is registered
            self.loop.add_reader(fd, self._on_readable)
            self._fd = fd
            self.pe.add_closing_hook(self._engine_closing)
        self._next += 1
        self.waiters[self._next] = (check, fail)
        self._arm()
        return self._next

    def _engine_closing(self) -> None:
        """The engine is closing (its fd still open): drop the reader now, so that a new engine given the
        same fd number is registered afresh; the waiters are settled or failed by the next run."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self._stop()
            self.loop.call_soon(self._run)
        else:                                 # closed from another thread: only the loop's thread may act
            self.loop.call_soon_threadsafe(self._run)

    def remove(self, key: int) -> None:
        self.waiters.pop(key, None)
        if not self.waiters:
            self._stop()

    def _stop(self) -> None:
        self.pe.remove_closing_hook(self._engine_closing)
        if self._fd is not None:
            try:
                self.loop.remove_reader(self._fd)
            except Exception:  # noqa: BLE001 - the loop may be closing
                pass
            self._fd = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        if self.pe.closed:
            return
        self.pe.request_notification()
        if self._timer is None:
            self._timer = self.loop.call_later(SAFETY_INTERVAL, self._on_timer)

    def _run(self) -> None:
        if self.pe.closed:
            self._stop()
            for check, fail in list(self.waiters.values()):
                if not check():
                    fail(ClosedError("the progress engine was closed while a coroutine waited on it"))
            return
        try:
            self.pe.progress_all(limit=1000)
        except BaseException as exc:  # noqa: BLE001 - logged, then raised to the loop's exception handler
            log.error("progress raised in the asyncio driver", error=repr(exc))
            raise
        finally:
            for check, _ in list(self.waiters.values()):
                check()
            if self.waiters:
                self._arm()

    def _on_readable(self) -> None:
        if not self.pe.closed:
            self.pe.clear_notification()
        self._run()

    def _on_timer(self) -> None:
        self._timer = None
        self._run()


_drivers: "weakref.WeakKeyDictionary[ProgressEngine, Dict[int, _Driver]]" = weakref.WeakKeyDictionary()


def _driver(pe: ProgressEngine) -> _Driver:
    loop = asyncio.get_running_loop()
    per_loop = _drivers.setdefault(pe, {})
    drv = per_loop.get(id(loop))
    if drv is None or drv.loop is not loop:
        drv = per_loop[id(loop)] = _Driver(pe, loop)
    return drv


async def wait_for(pe: ProgressEngine, predicate: Callable[[], bool], *, timeout: Optional[float] = 10.0) -> None:
    """Await until ``predicate()`` is true while ``pe`` is progressed."""
    if predicate():
        return
    loop = asyncio.get_running_loop()
    fut: "asyncio.Future[None]" = loop.create_future()

    def check() -> bool:
        if not fut.done():
            try:
                if predicate():
                    fut.set_result(None)
            except BaseException as exc:  # noqa: BLE001 - this waiter fails, the others are still checked
                fut.set_exception(exc)
        return fut.done()

    def fail(exc: BaseException) -> None:
        if not fut.done():
            fut.set_exception(exc)

    drv = _driver(pe)
    key = drv.add(check, fail)
    try:
        loop.call_soon(drv._run)
        await asyncio.wait_for(fut, timeout)
    finally:
        drv.remove(key)


__all__ = ["SAFETY_INTERVAL", "wait_for"]
