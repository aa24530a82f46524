"""Dispatch of DOCA callbacks into Python objects.

The C shims in ``_doca_cffi`` forward every DOCA callback to one of three
``extern "Python"`` functions, passing ``union doca_data`` values as integers.
Those integers are keys in the registries below: a task's user data names its
Python ``Task``, a context's user data names its ``Context`` (which also
receives connection events). Callbacks run inside ``doca_pe_progress`` on the
progressing thread; an exception raised by a handler is never allowed to
unwind into C: it is stored and re-raised by ``ProgressEngine.progress()``.
"""
from __future__ import annotations

import itertools
import weakref
from typing import Any, Dict, List, Protocol

from . import ffi, lib

_ids = itertools.count(1)


class TaskSink(Protocol):
    def _on_done(self, c_task: Any, success: bool) -> None: ...

    def _on_ok(self) -> None: ...


class CtxSink(Protocol):
    def _on_state(self, prev: int, nxt: int) -> None: ...

    def _on_conn_event(self, kind: int, c_conn: Any, conn_ud: int) -> None: ...


tasks: Dict[int, TaskSink] = {}
# weak: an unreferenced context is collected (and stopped, then destroyed) like any
# resource; its in-flight tasks reference it, so it lives at least as long as they do
contexts: "weakref.WeakValueDictionary[int, CtxSink]" = weakref.WeakValueDictionary()
pending_errors: List[BaseException] = []


def new_id() -> int:
    """A fresh non-zero key for a registry (user data value)."""
    return next(_ids)


def take_error() -> None:
    """Re-raise the first exception a callback stored, if any."""
    if pending_errors:
        exc = pending_errors.pop(0)
        pending_errors.clear()
        raise exc


#: the key bit of a single task whose success C records (shim.c's PYDOCA_DONE_TAG)
DONE_TAG = 1 << 61


def drain_done() -> None:
    """Deliver the single-task successes C recorded on this thread (pydoca_rdma_submit_fast), in order.
    Called after every ``doca_pe_progress`` that made progress, and before any task callback."""
    view = lib.pydoca_done_take()
    n = view.n
    if not n:
        return
    pop = tasks.pop
    for key in ffi.unpack(view.ids, n):    # copied first: a callback below may progress (and record) again
        sink = pop(key, None)
        if sink is not None:
            try:
                sink._on_ok()
            except BaseException as exc:  # noqa: BLE001 - re-raised by progress(); the others go on
                pending_errors.append(exc)


@ffi.def_extern()  # type: ignore[untyped-decorator]
def _pydoca_task_done(c_task: Any, task_ud: int, success: int) -> None:
    try:
        if task_ud & DONE_TAG:
            task_ud &= ~DONE_TAG
            drain_done()              # successes recorded before this completion reach Python first
        sink = tasks.pop(task_ud, None)
        if sink is not None:
            sink._on_done(c_task, bool(success))
    except BaseException as exc:  # noqa: BLE001 - must not unwind into C
        pending_errors.append(exc)


@ffi.def_extern()  # type: ignore[untyped-decorator]
def _pydoca_ctx_state(ctx_ud: int, c_ctx: Any, prev: int, nxt: int) -> None:
    try:
        sink = contexts.get(ctx_ud)
        if sink is not None:
            sink._on_state(prev, nxt)
    except BaseException as exc:  # noqa: BLE001
        pending_errors.append(exc)


@ffi.def_extern()  # type: ignore[untyped-decorator]
def _pydoca_conn_event(kind: int, c_conn: Any, conn_ud: int, ctx_ud: int) -> None:
    try:
        sink = contexts.get(ctx_ud)
        if sink is not None:
            sink._on_conn_event(kind, c_conn, conn_ud)
    except BaseException as exc:  # noqa: BLE001
        pending_errors.append(exc)
