"""Shared fixtures: an opened loopback device and a buffer inventory."""
from __future__ import annotations

import gc
import os
from typing import Any, Callable, Dict, Iterator, List

import pytest

from pydoca.buffer import BufferInventory
from pydoca.device import Device


# -- the sanitizer runs (tools/test-sanitized.sh, tools/test-tsan.sh set PYDOCA_TEST_SANITIZER) -------------
SANITIZER = os.environ.get("PYDOCA_TEST_SANITIZER", "")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "plain_only(why): left out of the sanitizer runs, which would add nothing to "
                                       "it (no softdoca code of its own runs, or it builds and runs a plain softdoca)")


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    if not SANITIZER:
        return
    for item in items:
        mark = item.get_closest_marker("plain_only")
        if mark is not None:
            why = mark.args[0] if mark.args else "the plain run covers it"
            item.add_marker(pytest.mark.skip(reason=f"not under {SANITIZER}: {why}"))


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


# -- reliability figures: tests append rows, printed as one table at the end ------------
_RELIABILITY_ROWS: List[Dict[str, Any]] = []


class ReliabilityReport:
    """Rows for the end-of-run reliability table (tests/test_reliability_*.py)."""

    def add(self, name: str, *, trials: int, passed: int, failed: int, **figures: Any) -> None:
        _RELIABILITY_ROWS.append({"name": name, "trials": trials, "passed": passed, "failed": failed,
                                  "figures": figures})


@pytest.fixture
def reliability_report() -> ReliabilityReport:
    return ReliabilityReport()


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _RELIABILITY_ROWS:
        return
    tr = terminalreporter
    tr.section("reliability figures")
    width = max(len(r["name"]) for r in _RELIABILITY_ROWS)
    tr.write_line(f"{'test':<{width}}  {'trials':>6} {'passed':>6} {'failed':>6}  figures")
    for r in _RELIABILITY_ROWS:
        figs = " ".join(f"{k}={_fmt(v)}" for k, v in r["figures"].items())
        tr.write_line(f"{r['name']:<{width}}  {r['trials']:>6} {r['passed']:>6} {r['failed']:>6}  {figs}")
