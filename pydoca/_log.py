"""pydoca's structlog logger, emitted through the stdlib ``logging`` module.

Applications decide where pydoca's logs go with ordinary logging
configuration (logger name ``pydoca``); without any, WARNING and above reach
stderr via logging's last-resort handler. pydoca never writes to stdout.
"""
from __future__ import annotations

import logging
from typing import Any, MutableMapping

import structlog


def _render(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> str:
    msg = str(event.pop("event", ""))
    extra = " ".join(f"{k}={v!r}" if isinstance(v, str) and " " in v else f"{k}={v}" for k, v in event.items())
    return f"pydoca: {msg} {extra}".rstrip()


def get_logger(name: str = "pydoca") -> Any:
    """A structlog logger bound to stdlib logger ``name``."""
    return structlog.wrap_logger(
        logging.getLogger(name),
        processors=[structlog.stdlib.filter_by_level, _render],
        wrapper_class=structlog.stdlib.BoundLogger,
    )
