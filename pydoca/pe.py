"""ProgressEngine: where completions and events are delivered.

Callbacks run only inside ``progress()`` on the calling thread; so do the
pollers added with ``add_poller`` (after each call that delivered anything:
owners of task rings drain their completions there). Two progress
modes, chosen per engine: ``blocking`` sleeps on the engine's notification fd
between events (low CPU), ``polling`` spins on ``doca_pe_progress`` (lowest
latency). Both honour a timeout on every wait.

On softdoca a blocking wait sleeps in ``softdoca_pe_wait``: the thread waits
on the engine's notification set itself, so the input of its connections
wakes it directly (one thread wake-up per completion, not two) and is read
in C before the call returns.
"""
from __future__ import annotations

import ctypes
import enum
import math
import os
import select
import time
from typing import Callable, List, Optional, Tuple

from pydoca._log import get_logger

from ._native import callbacks, ffi, lib, soft_fn
from .errors import check
from .resource import Resource


log = get_logger()
SPIN_US = 150
_drain_done = callbacks.drain_done
_pending_errors = callbacks.pending_errors


class ProgressMode(str, enum.Enum):
    """How ``wait()`` waits for events."""

    BLOCKING = "blocking"
    POLLING = "polling"


class ProgressEngine(Resource):
    """A DOCA progress engine (``doca_pe``) with a pollable notification fd."""

    def __init__(self, *, mode: ProgressMode | str = ProgressMode.BLOCKING, spin_us: Optional[int] = None) -> None:
        super().__init__(None)
        self.mode = ProgressMode(mode)
        #: how long a blocking wait for a result (run_until, Task.wait) looks for it before sleeping
        #: (adaptive, softdoca): PYDOCA_SPIN_US, default 150; 0 sleeps at once
        self.spin_us = int(os.environ.get("PYDOCA_SPIN_US", SPIN_US)) if spin_us is None else int(spin_us)
        if not 0 <= self.spin_us <= 10_000:
            raise ValueError(f"spin_us must be 0..10000 microseconds, got {self.spin_us}")
        out = ffi.new("struct doca_pe **")
        check(lib.doca_pe_create(out), "doca_pe_create")
        self._pe = out[0]
        handle = ffi.new("doca_notification_handle_t *")
        try:
            check(lib.doca_pe_get_notification_handle(self._pe, handle), "doca_pe_get_notification_handle")
        except Exception:
            lib.doca_pe_destroy(self._pe)
            raise
        self._fd = int(handle[0])
        self._pollers: List[Callable[[], None]] = []
        #: run by close() while the notification fd is still open (the asyncio driver removes its reader)
        self._closing_hooks: List[Callable[[], None]] = []
        self._addr = int(ffi.cast("uintptr_t", self._pe))
        self._soft_wait = soft_fn("softdoca_pe_wait", ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int)
        self._soft_kick = soft_fn("softdoca_pe_kick", None, ctypes.c_void_p)
        pe = self._pe
        self._arm(lambda: check(lib.doca_pe_destroy(pe), "doca_pe_destroy"))

    @property
    def handle(self) -> object:
        self._check_open()
        return self._pe

    def fileno(self) -> int:
        """The notification fd: readable once an armed engine has events."""
        self._check_open()
        return self._fd

    @property
    def num_inflight(self) -> int:
        self._check_open()
        n = ffi.new("size_t *")
        check(lib.doca_pe_get_num_inflight_tasks(self._pe, n), "doca_pe_get_num_inflight_tasks")
        return int(n[0])

    def progress(self) -> bool:
        """Deliver pending completions/events once; True if anything happened.
        Re-raises an exception that a callback raised during delivery."""
        if self._closed:
            self._check_open()
        made = bool(lib.doca_pe_progress(self._pe))
        if made:
            _drain_done()           # single-task successes recorded in C, before the pollers
            if self._pollers:
                self.run_pollers()
        if _pending_errors:
            callbacks.take_error()
        return made

    def run_pollers(self) -> None:
        """Run the pollers now. Contexts call this before handing any other event to Python, so that
        completions recorded in C earlier in the same ``progress()`` are delivered first, in order."""
        for fn in self._pollers:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - re-raised by progress(); the event it precedes goes on
                callbacks.pending_errors.append(exc)

    def _shutdown(self) -> None:
        hooks, self._closing_hooks = self._closing_hooks, []
        for fn in hooks:
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - closing goes on
                log.debug("a progress engine closing hook raised", error=repr(exc))

    def add_closing_hook(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` once when :meth:`close` runs, before the engine is destroyed: e.g. stop C code
        that would still wake it (hold the engine meanwhile, so that only close() destroys it)."""
        self._check_open()
        self._closing_hooks.append(fn)

    def remove_closing_hook(self, fn: Callable[[], None]) -> None:
        """Stop calling ``fn`` at close (no error if it was not added)."""
        self._closing_hooks = [f for f in self._closing_hooks if f != fn]

    def add_poller(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` after every :meth:`progress` that delivered something, and before any callback
        of a task or connection event of this engine's contexts (e.g. drain a task ring)."""
        self._pollers = self._pollers + [fn]

    def remove_poller(self, fn: Callable[[], None]) -> None:
        """Stop calling ``fn`` (no error if it was not added)."""
        self._pollers = [f for f in self._pollers if f != fn]

    def progress_all(self, *, limit: int = 10_000) -> int:
        """Progress until idle (bounded); returns the number of productive rounds."""
        n = 0
        while n < limit and self.progress():
            n += 1
        return n

    def request_notification(self) -> None:
        """Arm the fd; it becomes readable on the next event (or at once if one is pending)."""
        self._check_open()
        check(lib.doca_pe_request_notification(self._pe), "doca_pe_request_notification")

    def clear_notification(self) -> None:
        self._check_open()
        check(lib.doca_pe_clear_notification(self._pe, self._fd), "doca_pe_clear_notification")

    @property
    def can_kick(self) -> bool:
        """Whether :meth:`kick` can wake a thread blocked in :meth:`sleep` (softdoca)."""
        return self._soft_kick is not None

    def kick(self) -> None:
        """Wake the thread blocked in :meth:`sleep` (or make its next sleep return at once); any thread."""
        if self._soft_kick is None:
            raise NotImplementedError("this DOCA runtime has no way to wake a progress engine's waiter")
        if not self.closed:
            self._soft_kick(self._addr)

    def soft_addresses(self) -> Optional[Tuple[int, int, int]]:
        """(softdoca_pe_wait, softdoca_pe_kick, this engine) as addresses, for C code that waits on or
        wakes this engine without the interpreter lock (the handler pool's hand-off); None on real DOCA."""
        self._check_open()
        if self._soft_wait is None or self._soft_kick is None:
            return None
        wait, kick = (ctypes.cast(f, ctypes.c_void_p).value for f in (self._soft_wait, self._soft_kick))
        assert wait is not None and kick is not None
        return wait, kick, self._addr

    def sleep(self, timeout: float, *, spin: bool = False) -> bool:
        """One blocking wait for the engine's next event (or :meth:`kick`), at most ``timeout`` s; call
        :meth:`progress` next. Events pending already end it at once. True if it delivered events itself
        (a DOCA runtime is progressed once after arming, so that none is missed). ``spin``: look for the
        event for up to ``spin_us`` before sleeping (softdoca; adaptive: it stops while waits are long),
        for a result expected soon; a thread woken on an idle CPU can take tens of microseconds to run."""
        self._check_open()
        if self._soft_wait is not None:
            self._soft_wait(self._addr, max(0, math.ceil(timeout * 1000)), self.spin_us if spin else 0)
            return False
        self.request_notification()
        if self.progress():
            return True
        ready, _, _ = select.select([self._fd], [], [], max(0.0, timeout))
        if ready:
            self.clear_notification()
        return False

    def wait(self, timeout: Optional[float] = None, *, spin: bool = False) -> bool:
        """Wait until at least one event is delivered or ``timeout`` (seconds)
        passes; returns True if something was delivered. ``spin``: see :meth:`sleep`."""
        if self.progress():
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.mode is ProgressMode.POLLING:
            while deadline is None or time.monotonic() < deadline:
                if self.progress():
                    return True
            return False
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            # a bounded slice even without a deadline: a missed wake-up cannot stall forever
            if self.sleep(0.5 if remaining is None else min(remaining, 0.5), spin=spin) | self.progress():
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def run_until(self, predicate: Callable[[], bool], timeout: float, *, what: str = "condition") -> None:
        """Progress until ``predicate()`` is true; TimeoutError after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        polling = self.mode is ProgressMode.POLLING
        progress, sleep = self.progress, self.sleep
        while not predicate():
            made = progress()
            remaining = deadline - time.monotonic()
            if remaining <= 0:                  # checked on every turn: steady traffic must not defeat it
                if predicate():                 # this very progress() may have settled it
                    return
                raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
            if not made and not polling:
                sleep(min(remaining, 0.5), spin=True)   # then progress (the loop) delivers what woke it

    def __repr__(self) -> str:
        return f"<ProgressEngine mode={self.mode.value} {'closed' if self.closed else 'open'}>"
