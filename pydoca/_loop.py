"""The asyncio driver of progress engines (internal; public API: pydoca.aio).

A ProgressEngine is attached to the running loop once: ``loop.add_reader`` on
its notification fd progresses it when events arrive, and a periodic safety
timer (``SAFETY_INTERVAL``) progresses it too, so a missed wake-up can only
delay, never stall, an awaiting coroutine. It knows only the engine, so the
binding's awaitables (tasks, batches) use it without importing pydoca.aio.
"""
from __future__ import annotations

import asyncio
import weakref
from typing import Callable, Dict, Optional

from pydoca._log import get_logger

from .pe import ProgressEngine

log = get_logger()
SAFETY_INTERVAL = 0.05


class _Driver:
    """Progresses one engine from one event loop while anyone waits."""

    def __init__(self, pe: ProgressEngine, loop: asyncio.AbstractEventLoop) -> None:
        self.pe = pe
        self.loop = loop
        self.waiters: Dict[int, Callable[[], bool]] = {}
        self._next = 0
        self._timer: Optional[asyncio.TimerHandle] = None
        self._reading = False

    def add(self, check: Callable[[], bool]) -> int:
        self._next += 1
        self.waiters[self._next] = check
        if not self._reading:
            self.loop.add_reader(self.pe.fileno(), self._on_readable)
            self._reading = True
        self._arm()
        return self._next

    def remove(self, key: int) -> None:
        self.waiters.pop(key, None)
        if not self.waiters:
            self._stop()

    def _stop(self) -> None:
        if self._reading:
            try:
                self.loop.remove_reader(self.pe.fileno())
            except Exception:  # noqa: BLE001 - engine may be closed already
                pass
            self._reading = False
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
            return
        try:
            self.pe.progress_all(limit=1000)
        except BaseException as exc:  # noqa: BLE001 - surfaced to every waiter
            log.error("progress raised in the asyncio driver", error=repr(exc))
            raise
        finally:
            for check in list(self.waiters.values()):
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
        if not fut.done() and predicate():
            fut.set_result(None)
        return fut.done()

    drv = _driver(pe)
    key = drv.add(check)
    try:
        loop.call_soon(drv._run)
        await asyncio.wait_for(fut, timeout)
    finally:
        drv.remove(key)


__all__ = ["SAFETY_INTERVAL", "wait_for"]
