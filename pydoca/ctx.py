"""Context and Task: the generic DOCA ctx lifecycle and asynchronous tasks.

A Context is connected to one ProgressEngine (its parent: closing the engine
closes the context first). ``stop()`` drives the engine until the context
reports IDLE, so outstanding tasks are failed and delivered before any memory
they use is released.
"""
from __future__ import annotations

import ctypes
import enum
import time
from typing import Any, Callable, Generator, Generic, List, Optional, Tuple, TypeVar

from pydoca._log import get_logger

from ._native import callbacks, ffi, lib, soft_fn
from .errors import DocaError, InProgressError, check, error_for
from .pe import ProgressEngine
from .resource import Resource

log = get_logger()
T = TypeVar("T")


class CtxState(enum.IntEnum):
    IDLE = 0
    STARTING = 1
    RUNNING = 2
    STOPPING = 3


#: How long a context collected (or left at exit) without close() may take to
#: stop: its in-flight tasks are flushed and delivered within this bound.
FINALIZE_STOP_BOUND = 2.0


def _stop_then_destroy(c_ctx: Any, pe_handle: Any, destroy: Callable[[], Any]) -> None:
    """Finalizer path of a context: stop it (flushing its tasks, progressing its
    engine for at most FINALIZE_STOP_BOUND seconds), then destroy it."""
    state = ffi.new("enum doca_ctx_states *")
    if lib.doca_ctx_get_state(c_ctx, state) == 0 and state[0] != lib.DOCA_CTX_STATE_IDLE:
        lib.doca_ctx_stop(c_ctx)
        deadline = time.monotonic() + FINALIZE_STOP_BOUND
        while (lib.doca_ctx_get_state(c_ctx, state) == 0 and state[0] != lib.DOCA_CTX_STATE_IDLE
               and time.monotonic() < deadline):
            if not lib.doca_pe_progress(pe_handle):
                time.sleep(0.0005)
            else:
                callbacks.drain_done()
    destroy()


class Context(Resource):
    """Base for DOCA contexts (``doca_ctx``). Subclasses create the concrete
    object, then call ``_attach(ctx_ptr)`` before configuring and starting."""

    _close_rank = 0   # an owner closes its contexts before its memory and buffers

    def __init__(self, pe: ProgressEngine, *, owners: tuple[Resource, ...] = ()) -> None:
        super().__init__(pe)
        self.pe = pe
        self._owners = owners
        self._node.context = True     # at exit, contexts are stopped before anything else
        for owner in owners:          # closing (or collecting) any owner closes this context first
            self._add_owner(owner)
        self._ctx: Any = ffi.NULL
        self._id = callbacks.new_id()
        self.state_history: List[tuple[CtxState, CtxState]] = []
        self.on_state: Optional[Callable[[CtxState, CtxState], None]] = None

    def _attach(self, c_ctx: Any) -> None:
        self._ctx = c_ctx
        destroy = self._node.destroy
        if destroy is not None:       # collected or left at exit while running: stop, then destroy
            pe_handle = self.pe.handle
            self._node.destroy = lambda: _stop_then_destroy(c_ctx, pe_handle, destroy)
        callbacks.contexts[self._id] = self
        data = ffi.new("union doca_data *")
        data.u64 = self._id
        check(lib.doca_ctx_set_user_data(c_ctx, data[0]), "doca_ctx_set_user_data")
        check(lib.pydoca_ctx_set_state_cb(c_ctx), "doca_ctx_set_state_changed_cb")
        check(lib.doca_pe_connect_ctx(self.pe.handle, c_ctx), "doca_pe_connect_ctx")

    # -- callbacks from C -------------------------------------------------
    def _on_state(self, prev: int, nxt: int) -> None:
        pair = (CtxState(prev), CtxState(nxt))
        self.state_history.append(pair)
        log.debug("ctx state", ctx=type(self).__name__, prev=pair[0].name, next=pair[1].name)
        if self.on_state is not None:
            self.on_state(*pair)

    def _on_conn_event(self, kind: int, c_conn: Any, conn_ud: int) -> None:  # pragma: no cover
        pass

    # -- lifecycle ----------------------------------------------------------
    @property
    def state(self) -> CtxState:
        self._check_open()
        out = ffi.new("enum doca_ctx_states *")
        check(lib.doca_ctx_get_state(self._ctx, out), "doca_ctx_get_state")
        return CtxState(int(out[0]))

    @property
    def num_inflight(self) -> int:
        self._check_open()
        n = ffi.new("size_t *")
        check(lib.doca_ctx_get_num_inflight_tasks(self._ctx, n), "doca_ctx_get_num_inflight_tasks")
        return int(n[0])

    def start(self, *, timeout: float = 5.0) -> None:
        """Start the context and wait until it is RUNNING."""
        self._check_open()
        rc = lib.doca_ctx_start(self._ctx)
        if rc != 0 and not isinstance(error_for(rc), InProgressError):
            check(rc, "doca_ctx_start")
        self.pe.run_until(lambda: self.state == CtxState.RUNNING, timeout, what="context RUNNING")
        self.pe.progress_all()

    def stop(self, *, timeout: float = 10.0) -> None:
        """Stop the context; outstanding tasks fail and are delivered first."""
        self._check_open()
        if self.state == CtxState.IDLE:
            return
        rc = lib.doca_ctx_stop(self._ctx)
        if rc != 0 and not isinstance(error_for(rc), InProgressError):
            check(rc, "doca_ctx_stop")
        self.pe.run_until(lambda: self.state == CtxState.IDLE, timeout, what="context IDLE")
        self.pe.progress_all()

    def _shutdown(self) -> None:
        try:
            if self._ctx != ffi.NULL and not self.pe.closed and self.state != CtxState.IDLE:
                self.stop()
        finally:
            for batch in list(self.__dict__.get("_batches", {}).values()):   # pydoca.rdma.batch: the rest of
                batch._settle()                                              # a half-fed batch is refused
            callbacks.contexts.pop(self._id, None)
            for owner in self._owners:
                owner._children.pop(self._seq, None)


def _soft_detail(c_task: Any) -> str:
    """softdoca's words for why c_task failed ("; target refused: remote mmap
    ... lacks RDMA_WRITE ..."), or "" (real DOCA has no such getter)."""
    try:
        fn = soft_fn("softdoca_task_get_error_detail", ctypes.c_char_p, ctypes.c_void_p)
        if fn is None:
            return ""
        text = fn(int(ffi.cast("uintptr_t", c_task)))
        return f": {text.decode(errors='replace')}" if text else ""
    except Exception:  # noqa: BLE001 - a detail only
        return ""


class TaskStatus(enum.Enum):
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


_task_ids = callbacks._ids                    # the registry's keys (callbacks.new_id), without a call
_NO_MAPS: List[Any] = []                     # shared empty lists, never appended to: replaced when needed
_NO_CALLBACKS: List[Any] = []
_PENDING = TaskStatus.PENDING
_SUCCEEDED = TaskStatus.SUCCEEDED
_monotonic = time.monotonic


class Task(Generic[T]):
    """One submitted DOCA task. ``wait()`` progresses the engine until it
    completes; ``result()`` returns its value or raises its DocaError. Tasks
    are awaitable (see pydoca.aio)."""

    # slots: a task is created for every operation (fewer allocations, less for the cyclic collector);
    # subclasses that declare none get a __dict__ as before
    __slots__ = ("ctx", "_keep", "_maps", "status", "error", "value", "completed_at", "_done_callbacks", "_id",
                 "_c_task", "_recorded", "_held", "__weakref__")

    def __init__(self, ctx: Context, keep: tuple[Any, ...] = ()) -> None:
        self.ctx = ctx
        self._keep = keep              # buffers & memory the task uses stay alive
        self._maps: List[Any] = _NO_MAPS  # MemoryMaps pinned against close while in flight
        self.status = TaskStatus.PENDING
        self.error: Optional[DocaError] = None
        self.value: Optional[T] = None
        self.completed_at: Optional[float] = None
        self._done_callbacks: List[Callable[["Task[T]"], None]] = _NO_CALLBACKS
        self._id = next(_task_ids)
        self._c_task: Any = ffi.NULL
        self._recorded = False         # its success is recorded in C (pydoca_rdma_submit_fast)
        self._held: Tuple[Any, ...] = ()   # doca_bufs this task holds a reference on while in flight

    # -- C side -------------------------------------------------------------
    def _user_data(self) -> Any:
        data = ffi.new("union doca_data *")
        data.u64 = self._id
        return data[0]

    def _submit(self, c_task: Any) -> "Task[T]":
        """Submit the allocated DOCA task; on failure free it and raise. While in flight it holds a reference
        on each of its Buffers (the tasks the C shim allocates hold theirs there): a Buffer closed under it
        goes back to its inventory once the task completed, never while the runtime may still use it."""
        self._c_task = c_task
        try:
            self._hold()
        except BaseException:
            lib.doca_task_free(c_task)
            self._c_task = ffi.NULL
            raise
        callbacks.tasks[self._id] = self
        rc = lib.doca_task_submit(c_task)
        if rc != 0:
            self._refused(c_task, rc)
        return self._submitted()

    def _hold(self) -> None:
        """A reference on each Buffer of ``_keep`` (dropped by :meth:`_unhold`)."""
        bufs = [b._handle for b in self._keep if getattr(b, "_task_held", False)]
        held: List[Any] = []
        try:
            for h in bufs:
                check(lib.pydoca_hold(h, ffi.NULL), f"doca_buf_inc_refcount ({type(self).__name__}'s buffer)")
                held.append(h)
        except BaseException:
            for h in held:
                lib.pydoca_unhold(h, ffi.NULL)
            raise
        self._held = tuple(held)

    def _unhold(self) -> None:
        held, self._held = self._held, ()
        for h in held:
            lib.pydoca_unhold(h, ffi.NULL)

    def _refused(self, c_task: Any, rc: int) -> None:
        """Submit failed: forget the task, free it, raise its DocaError."""
        callbacks.tasks.pop(self._id, None)
        why = _soft_detail(c_task)
        lib.doca_task_free(c_task)
        self._c_task = ffi.NULL
        if self._held:
            self._unhold()
        check(rc, f"submit {type(self).__name__}{self._detail()}{why}")

    def _submitted(self) -> "Task[T]":
        """Pin the memory maps the task uses: a closing MemoryMap first waits for (or flushes) it."""
        maps = [m for m in (getattr(b, "_mmap", None) for b in self._keep) if m is not None]
        for m in maps:
            m._tasks[self._id] = self
        self._maps = maps
        return self

    def _release_maps(self) -> None:
        for m in self._maps:
            m._tasks.pop(self._id, None)
        self._maps = _NO_MAPS

    def _detail(self) -> str:
        """Extra words for an error message (the buffer sizes involved), or ""."""
        return ""

    def _collect(self, c_task: Any) -> Optional[T]:
        """Read the task's results before it is freed (subclasses)."""
        return None

    def _on_done(self, c_task: Any, success: bool) -> None:
        try:
            if success:
                self.value = self._collect(c_task)
                self.status = TaskStatus.SUCCEEDED
            else:
                rc = int(lib.doca_task_get_status(c_task))
                self.error = error_for(rc or 1, f"{type(self).__name__} failed{self._detail()}{_soft_detail(c_task)}")
                self.status = TaskStatus.FAILED
        finally:
            lib.doca_task_free(c_task)
            self._c_task = ffi.NULL
            if self._held:
                self._unhold()
            self._keep = ()
            self._release_maps()
            self.completed_at = time.monotonic()
        pe = self.ctx.pe
        if pe._pollers:       # task-ring completions recorded before this one reach Python before its callbacks
            pe.run_pollers()
        for cb in self._done_callbacks:
            cb(self)

    def _on_ok(self) -> None:
        """Success recorded in C (single tasks of pydoca_rdma_submit_fast): the C task is freed already,
        and such a task has no result to read."""
        tid = self._id
        for m in self._maps:
            m._tasks.pop(tid, None)
        self._maps = _NO_MAPS
        self._keep = ()
        self.status = _SUCCEEDED
        self.completed_at = _monotonic()
        if self._done_callbacks:
            lib.pydoca_done_unwatch(tid)   # watched after C had recorded it already: forget the key
            if self.ctx.pe._pollers:   # task-ring completions recorded before this one reach Python first
                self.ctx.pe.run_pollers()
            for cb in self._done_callbacks:
                cb(self)

    # -- user side ----------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.status is not TaskStatus.PENDING

    def add_done_callback(self, fn: Callable[["Task[T]"], None]) -> None:
        """Call ``fn(task)`` on completion (inside progress), or now if done."""
        if self.done:
            fn(self)
        elif self._done_callbacks is _NO_CALLBACKS:
            self._done_callbacks = [fn]
            if self._recorded:     # completes through the callback shim: fn runs inside DOCA's completion
                lib.pydoca_done_watch(self._id)
        else:
            self._done_callbacks.append(fn)

    def wait(self, timeout: Optional[float] = 10.0) -> "Task[T]":
        """Progress until done; TimeoutError after ``timeout`` seconds."""
        if self.status is _PENDING:
            pe = self.ctx.pe
            if not pe.progress() or self.status is TaskStatus.PENDING:   # one round first: often enough
                pe.run_until(lambda: self.status is not TaskStatus.PENDING, 1e9 if timeout is None else timeout,
                             what=type(self).__name__)
        return self

    def result(self, timeout: Optional[float] = 10.0) -> Optional[T]:
        """Wait, then return the value or raise the task's DocaError."""
        self.wait(timeout)
        if self.error is not None:
            raise self.error
        return self.value

    def __await__(self) -> Generator[Any, None, Optional[T]]:
        return self._await().__await__()

    async def _await(self, timeout: Optional[float] = 10.0) -> Optional[T]:
        from ._loop import wait_for          # the loop driver knows only the engine (no pydoca.aio here)
        await wait_for(self.ctx.pe, lambda: self.done, timeout=timeout)
        return self.result(0)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.status.value}>"


__all__ = ["Context", "CtxState", "Task", "TaskStatus"]
