"""asyncio integration: event driven, with a safety timer (the driver lives in pydoca._loop).

A ProgressEngine is attached to the running loop once: ``loop.add_reader`` on
its notification fd progresses it when events arrive, and a periodic safety
timer (``SAFETY_INTERVAL``) progresses it too, so a missed wake-up can only
delay, never stall, an awaiting coroutine. Tasks are awaitable
(``await rdma.write(...)``); ``wait_for`` awaits any condition with a timeout.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Optional, TypeVar

from pydoca._log import get_logger

from ._loop import SAFETY_INTERVAL, wait_for
from .ctx import Task

if TYPE_CHECKING:
    from .rdma import Connection, Rdma

log = get_logger()
T = TypeVar("T")


async def wait_task(task: "Task[T]", *, timeout: Optional[float] = 10.0) -> Optional[T]:
    """Await a task's completion and return its result (or raise its error)."""
    return await task._await(timeout)


async def gather_tasks(*tasks: "Task[Any]", timeout: Optional[float] = 10.0) -> list[Any]:
    """Await several tasks; results in order."""
    return list(await asyncio.gather(*(wait_task(t, timeout=timeout) for t in tasks)))


async def established(conn: "Connection", *, timeout: Optional[float] = 10.0) -> "Connection":
    """Await an RDMA connection's establishment; raises if it fails instead."""
    from .rdma.connection import ConnectionState
    await wait_for(conn.rdma.pe, lambda: conn.state is not ConnectionState.PENDING, timeout=timeout)
    return conn.wait_established(0)


async def next_request(rdma: "Rdma", *, timeout: Optional[float] = 10.0) -> "Connection":
    """Await the next undecided incoming RDMA CM request (``rdma.listen(port)``
    without an accept policy); accept or reject it."""
    await wait_for(rdma.pe, lambda: bool(rdma.requests), timeout=timeout)
    return rdma.requests.popleft()


__all__ = ["SAFETY_INTERVAL", "established", "gather_tasks", "next_request", "wait_for", "wait_task"]
