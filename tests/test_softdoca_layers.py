"""softdoca's RDMA layering as a test: a module calls only its own layer or the ones below.

``nm`` lists the ``sd_*`` symbols each object of ``softdoca/build/obj`` leaves
undefined and the ones it defines; every reference is mapped to the object
that defines it. The engine services are the lowest RDMA layer: the layers
above reach back down freely, a lower layer reaches an upper one only through
the handlers that one registers (function pointers, invisible to ``nm``).
The layer list below must match the module map at the top of
``softdoca/src/rdma.h``.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOFTDOCA = ROOT / "softdoca"
SRC = SOFTDOCA / "src"
OBJ = SOFTDOCA / "build" / "obj"

# Every module that is not an rdma one is core (internal.h), below every rdma
# module, except these, which sit on top of everything.
ABOVE = ("ext",)

# Lowest first, as in rdma.h's module map (the core layer is filled in below).
LAYERS: List[Tuple[str, Tuple[str, ...]]] = [
    ("engine services", ("rdma_engine",)),
    ("links", ("rdma_link",)),
    ("rx framing", ("rdma_rx",)),
    ("engine thread", ("rdma_loop",)),
    ("connections, data operations, tasks, context",
     ("rdma_wire", "rdma_xport", "rdma_conn", "rdma_cm", "rdma_tasks", "rdma_sync_event", "rdma_ctx",
      "rdma_prov")),
    ("task API", ("rdma_task_api",)),
]

pytestmark = pytest.mark.skipif(shutil.which("nm") is None or shutil.which("make") is None,
                                reason="nm and make are needed (binutils, make) to inspect softdoca's objects")


def _sources() -> Dict[str, Path]:
    """Module (file stem) -> its source in the layer folders (common/, engine/, rdma/)."""
    return {p.stem: p for d in ("common", "engine", "rdma") for p in sorted((SRC / d).glob("*.c"))}


def _rdma_modules() -> List[str]:
    return sorted(m for m in _sources() if m.startswith("rdma_"))


def _core_modules() -> List[str]:
    return sorted(m for m in _sources() if not m.startswith("rdma_") and m not in ABOVE)


@pytest.fixture(scope="module")
def objects() -> Dict[str, Path]:
    """Every module's object, brought up to date by softdoca's Makefile."""
    rel = {m: p.relative_to(SRC).with_suffix(".o") for m, p in _sources().items()}
    targets = [f"build/obj/{r}" for r in rel.values()]
    r = subprocess.run(["make", "-s", "-C", str(SOFTDOCA), *targets], capture_output=True, text=True)
    assert r.returncode == 0, f"make failed:\n{r.stdout}\n{r.stderr}"
    return {m: OBJ / r for m, r in rel.items()}


def _nm(obj: Path, *args: str, strong: bool = False) -> Set[str]:
    """The sd_* symbols nm lists; strong: leave out weak ones (w, v, V, W)."""
    out = subprocess.run(["nm", *args, str(obj)], capture_output=True, text=True, check=True).stdout
    syms: Set[str] = set()
    for line in out.splitlines():
        f = line.split()
        if f and f[-1].startswith("sd_") and not (strong and len(f) >= 2 and f[-2] in "wvVW"):
            syms.add(f[-1])
    return syms


def _layer_of() -> Dict[str, int]:
    """Module -> layer index: 0 for the core, rdma layers from 1."""
    layer = {m: 0 for m in _core_modules()}
    layer.update({m: i + 1 for i, (_, mods) in enumerate(LAYERS) for m in mods})
    return layer


def test_the_core_holds_what_the_makefile_calls_core() -> None:
    m = re.search(r"^CORE\s*:=(.*)$", (SOFTDOCA / "Makefile").read_text(), re.M)
    assert m, "the Makefile's CORE list is gone"
    assert set(m.group(1).split()) <= set(_core_modules())


def test_every_rdma_module_has_a_layer() -> None:
    listed = {m for _, mods in LAYERS for m in mods if m.startswith("rdma_")}
    assert listed == set(_rdma_modules()), "place new rdma modules in LAYERS (and rdma.h's module map)"


def test_layers_match_the_module_map_of_rdma_h() -> None:
    head = (SRC / "rdma" / "rdma.h").read_text().split("*/", 1)[0]
    layers: List[List[str]] = []
    for line in head.splitlines():
        if re.match(r"^ \* \d+ \S", line):
            layers.append([])
        m = re.match(r"^ \*\s+(rdma_\w+)\.c\s", line)
        if m:
            assert layers, f"{m.group(1)} is listed before the first layer heading of rdma.h's module map"
            layers[-1].append(m.group(1))
    assert layers == [list(mods) for _, mods in LAYERS], "rdma.h's module map and LAYERS disagree"


def test_modules_call_only_their_layer_or_below(objects: Dict[str, Path]) -> None:
    owner: Dict[str, str] = {}
    for mod, obj in objects.items():
        for sym in _nm(obj, "-g", "--defined-only"):
            owner[sym] = mod
    layer = _layer_of()
    upward: Dict[Tuple[str, str], Set[str]] = {}
    # core modules may reach rdma ones only weakly (optional hooks, e.g. mmap -> rdma_xport)
    checked = [(m, False) for m in _rdma_modules()] + [(m, True) for m in _core_modules()]
    for mod, strong in checked:
        for sym in _nm(objects[mod], "-u", strong=strong):
            target = owner.get(sym)
            if target is None:
                continue  # defined outside softdoca's objects (none today)
            if target not in layer or layer[target] > layer[mod]:
                upward.setdefault((mod, target), set()).add(sym)
    assert not upward, "calls to a module of a higher layer (or of none):\n" + "\n".join(
        f"  {a} -> {b}: {', '.join(sorted(s))}" for (a, b), s in sorted(upward.items()))
