"""Handlers of the client/server sample (referenced from spec.yaml)."""
from __future__ import annotations

import json
import zlib
from typing import Any, Dict

STATS: Dict[str, Any] = {"uploads": 0, "bytes": 0, "last_crc32": None, "last_from": None}


def on_upload(view: memoryview, length: int, requester: object) -> None:
    """Write handler: runs after the data landed in the /upload buffer."""
    STATS["uploads"] += 1
    STATS["bytes"] += length
    STATS["last_crc32"] = zlib.crc32(view)
    STATS["last_from"] = str(requester)


def fill_stats(view: memoryview, length: int) -> bytes:
    """Read handler: the returned bytes are placed in the buffer, then read by the requester."""
    return json.dumps(STATS).encode()[:length]


def echo(payload: bytes) -> bytes:
    """Call handler: request bytes -> response bytes."""
    return payload


def upper(payload: bytes) -> bytes:
    if payload.startswith(b"boom"):
        raise ValueError("payload starts with boom")
    return payload.upper()
