"""pydoca's structlog logger, emitted through the stdlib ``logging`` module.

Applications decide where pydoca's logs go with ordinary logging
configuration (logger name ``pydoca``); without any, WARNING and above reach
stderr via logging's last-resort handler. pydoca never writes to stdout.

While ``structlog.testing.capture_logs()`` is active, pydoca's events go to it
(as every structlog logger's do) with their fields, ``log_level`` and
``logger`` (the stdlib logger name), instead of to ``logging``.
"""
from __future__ import annotations

import logging
from typing import Any, MutableMapping

import structlog
from structlog.testing import LogCapture


def _to_capture(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Inside ``structlog.testing.capture_logs()``: hand the event to its LogCapture, which drops it."""
    for proc in structlog.get_config()["processors"]:
        if isinstance(proc, LogCapture):
            entry = dict(event)
            entry.setdefault("logger", getattr(logger, "name", None))
            proc(logger, method, entry)      # records the entry, raises DropEvent
    return event


def _render(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> str:
    msg = str(event.pop("event", ""))
    extra = " ".join(f"{k}={v!r}" if isinstance(v, str) and " " in v else f"{k}={v}" for k, v in event.items())
    return f"pydoca: {msg} {extra}".rstrip()


def get_logger(name: str = "pydoca") -> Any:
    """A structlog logger bound to stdlib logger ``name``."""
    return structlog.wrap_logger(
        logging.getLogger(name),
        processors=[_to_capture, structlog.stdlib.filter_by_level, _render],
        wrapper_class=structlog.stdlib.BoundLogger,
    )
