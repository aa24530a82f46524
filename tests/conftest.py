"""Shared fixtures: an opened loopback device and a buffer inventory."""
from __future__ import annotations

import gc
from typing import Callable, Iterator

import pytest

from pydoca.buffer import BufferInventory
from pydoca.device import Device


@pytest.fixture
def dev() -> Iterator[Device]:
    """The soft/real device on the loopback interface, closed after the test."""
    device = Device.open(iface="lo")
    yield device
    device.close()


@pytest.fixture
def inventory() -> Iterator[BufferInventory]:
    inv = BufferInventory(16)
    yield inv
    inv.close()


@pytest.fixture
def gc_collect() -> Callable[[], None]:
    """A function running the garbage collector a few times (finalizers run)."""
    def collect() -> None:
        for _ in range(3):
            gc.collect()
    return collect
