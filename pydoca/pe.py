"""ProgressEngine: where completions and events are delivered.

Callbacks run only inside ``progress()`` on the calling thread. Two progress
modes, chosen per engine: ``blocking`` sleeps on the engine's notification fd
between events (low CPU), ``polling`` spins on ``doca_pe_progress`` (lowest
latency). Both honour a timeout on every wait.
"""
from __future__ import annotations

import enum
import select
import time
from typing import Callable, Optional

from ._native import callbacks, ffi, lib
from .errors import check
from .resource import Resource


class ProgressMode(str, enum.Enum):
    """How ``wait()`` waits for events."""

    BLOCKING = "blocking"
    POLLING = "polling"


class ProgressEngine(Resource):
    """A DOCA progress engine (``doca_pe``) with a pollable notification fd."""

    def __init__(self, *, mode: ProgressMode | str = ProgressMode.BLOCKING) -> None:
        super().__init__(None)
        self.mode = ProgressMode(mode)
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
        self._check_open()
        made = bool(lib.doca_pe_progress(self._pe))
        callbacks.take_error()
        return made

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

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until at least one event is delivered or ``timeout`` (seconds)
        passes; returns True if something was delivered."""
        if self.progress():
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.mode is ProgressMode.POLLING:
            while deadline is None or time.monotonic() < deadline:
                if self.progress():
                    return True
            return False
        while True:
            self.request_notification()
            if self.progress():
                return True
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            # a bounded slice even without a deadline: a missed wake-up cannot stall forever
            slice_ = 0.5 if remaining is None else min(remaining, 0.5)
            ready, _, _ = select.select([self._fd], [], [], slice_)
            if ready:
                self.clear_notification()
            if self.progress():
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def run_until(self, predicate: Callable[[], bool], timeout: float, *, what: str = "condition") -> None:
        """Progress until ``predicate()`` is true; TimeoutError after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
            self.wait(min(remaining, 0.1))

    def __repr__(self) -> str:
        return f"<ProgressEngine mode={self.mode.value} {'closed' if self.closed else 'open'}>"
