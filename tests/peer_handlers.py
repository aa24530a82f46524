"""Handlers of the peer tests' spec (imported by `pydoca serve` via PYTHONPATH)."""
from __future__ import annotations

import hashlib
import struct
import time
import zlib
from typing import Any, Dict

LAST: Dict[str, int] = {}        # requester name -> crc32 of its last write
COUNTS: Dict[str, int] = {}      # requester name -> reads served


def framed(body: bytes) -> bytes:
    """crc32 of ``body`` (4 bytes LE) + body: what check_write verifies."""
    return struct.pack("<I", zlib.crc32(body)) + body


def pattern(name: str, n: int, length: int) -> bytes:
    """The bytes the n-th read of ``name`` returns."""
    block = hashlib.sha256(f"{name}:{n}".encode()).digest()
    return (block * (length // len(block) + 1))[:length]


def check_write(view: memoryview, length: int, requester: Any) -> None:
    data = bytes(view)
    if length < 4 or zlib.crc32(data[4:]) != struct.unpack_from("<I", data)[0]:
        raise ValueError(f"crc mismatch in a {length}-byte write")
    LAST[requester.name] = zlib.crc32(data[4:])


def fill_pattern(view: memoryview, length: int, requester: Any) -> None:
    n = COUNTS[requester.name] = COUNTS.get(requester.name, 0) + 1
    view[:] = pattern(requester.name, n, length)


def last_crc(payload: bytes, requester: Any) -> bytes:
    return str(LAST.get(requester.name)).encode()


def echo(payload: bytes) -> bytes:
    return payload


def reverse(payload: bytes) -> bytes:
    return payload[::-1]


def fail(payload: bytes) -> bytes:
    raise RuntimeError(f"handler failed on purpose ({len(payload)} bytes)")


def sized(payload: bytes) -> bytes:
    """A response of int(payload) bytes (TooLarge beyond the buffer)."""
    return b"z" * int(payload)


def slow(payload: bytes) -> bytes:
    time.sleep(float(payload or b"0.5"))
    return b"slept"


def fail_read(view: memoryview, length: int) -> None:
    raise KeyError("nothing to read")


def slow_write(view: memoryview, length: int) -> None:
    """Sleeps float(data) seconds: keeps a write endpoint busy."""
    time.sleep(float(bytes(view) or b"0.5"))


async def async_echo(payload: bytes) -> bytes:
    import asyncio
    await asyncio.sleep(0.01)
    return payload[::-1]


def slow_fail(view: memoryview, length: int) -> None:
    """Sleeps float(data) seconds, then fails: a posted write whose failure comes late."""
    time.sleep(float(bytes(view)))
    raise RuntimeError("failed late on purpose")


def slow_sized(payload: bytes) -> bytes:
    """``b"SECONDS:N"``: sleeps SECONDS, then returns N bytes (in the slot beyond the inline size)."""
    secs, _, n = payload.partition(b":")
    time.sleep(float(secs))
    return b"r" * int(n or b"16")
