"""The package's architecture as a test: no import cycles, layers import downward only."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("import_cycles", ROOT / "tools" / "import_cycles.py")
assert spec is not None and spec.loader is not None
ic = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ic)

# a module may import only from its own layer or the ones below it
LAYERS = [
    ("core", ("pydoca._log", "pydoca.errors", "pydoca._native", "pydoca.resource", "pydoca.pe", "pydoca._loop",
              "pydoca.ctx", "pydoca.device", "pydoca.memory", "pydoca.buffer", "pydoca.descriptor", "pydoca.rdma",
              "pydoca.aio", "pydoca._lib", "pydoca.log", "pydoca.ports", "pydoca.sync_event", "pydoca.buf_pool",
              "pydoca.address", "pydoca._child")),
    ("peer", ("pydoca.peer",)),
    ("transfer", ("pydoca.transfer",)),
    ("tools", ("pydoca.perftest", "pydoca.cli", "pydoca")),
]


def layer_of(mod: str) -> int:
    best = (-1, 0)
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and len(p) > best[1]:
                best = (i, len(p))
    return best[0]


def test_no_import_cycles() -> None:
    assert ic.cycles(ic.graph(False)) == []


def test_layers_import_downward_only() -> None:
    upward = []
    for mod, targets in ic.graph(False).items():
        for t in targets:
            if layer_of(t) > layer_of(mod):
                upward.append(f"{mod} -> {t}")
    assert not upward, "upward imports: " + ", ".join(sorted(upward))


def test_binding_never_imports_the_async_layer() -> None:
    graph = ic.graph(False)
    for mod in ("pydoca.ctx", "pydoca.rdma", "pydoca.rdma.batch", "pydoca.pe", "pydoca.memory"):
        assert "pydoca.aio" not in graph[mod], f"{mod} imports pydoca.aio"
