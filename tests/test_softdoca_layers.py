"""softdoca's layering as a test: a module calls only its own layer or the ones below.

``softdoca/src`` has one folder per layer, lowest first (FOLDERS): ``providers/`` (the provider
interface, ``providers/provider.h``, and one folder per provider; a provider never calls the DOCA
layers), ``common/`` (the DOCA Common objects, ``internal.h``), ``engine/`` (the engine) and ``rdma/``
(the DOCA RDMA context layer; ``rdma.h``, the private structures of engine/ and rdma/).

``nm`` lists the symbols each object of ``softdoca/build/obj`` leaves undefined (weak ones included:
an optional call up is still a call up) and the ones it defines; every reference is mapped to the
object that defines it. Checked:

* no call goes from a folder to a higher one;
* outside providers/, only the provider bridge (``rdma/rdma_prov.c``) calls into providers/, and only
  the provider interface (``providers/provider.c``), never a provider itself;
* inside engine/ and rdma/, the finer layers of LAYERS hold as well (rdma.h's module map).

A lower layer reaches an upper one only through the handlers that one registers (function pointers,
invisible to ``nm``): ``struct sd_mmap_hooks`` (common/ -> rdma/: same-host transport, provider
bridge), ``struct sd_eng_hook`` (engine/ -> the bridge), ``struct sd_link_ops`` and
``struct sd_rdma_ops`` (engine/ -> connections), ``struct sd_prov_cbs`` (a provider -> the bridge).
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

# The folders of softdoca/src, lowest first (docs/architecture.md, rdma.h's module map).
FOLDERS = ["providers", "common", "engine", "rdma"]
# The one module outside providers/ that calls into it, and the one module of providers/ it calls.
BRIDGE = "rdma/rdma_prov"
INTERFACE = "providers/provider"

# The layers of engine/ and rdma/, lowest first, as in rdma.h's module map: (name, folder, modules).
LAYERS: List[Tuple[str, str, Tuple[str, ...]]] = [
    ("engine services", "engine", ("rdma_engine",)),
    ("same-host transport", "engine", ("rdma_xport",)),
    ("links", "engine", ("rdma_link",)),
    ("rx framing", "engine", ("rdma_rx",)),
    ("frames", "engine", ("rdma_frames", "rdma_serve")),
    ("engine thread", "engine", ("rdma_loop",)),
    ("connections, data operations, tasks, context", "rdma",
     ("rdma_wire", "rdma_conn", "rdma_cm", "rdma_tasks", "rdma_sync_event", "rdma_ctx",
      "rdma_prov", "rdma_pmsg")),
    ("task API", "rdma", ("rdma_task_api",)),
    ("softdoca extensions", "rdma", ("ext",)),
]

pytestmark = [pytest.mark.skipif(shutil.which("nm") is None or shutil.which("make") is None,
                                 reason="nm and make are needed (binutils, make) to inspect softdoca's objects"),
              pytest.mark.plain_only("it reads the symbols of softdoca's objects; nothing runs")]


def _folder(mod: str) -> str:
    return mod.split("/", 1)[0]


def _stem(mod: str) -> str:
    return mod.rsplit("/", 1)[-1]


@pytest.fixture(scope="module")
def objects() -> Dict[str, Path]:
    """Module ("common/mmap", "providers/ucx/ucx_provider") -> its object, for every object of
    libsoftdoca, brought up to date by softdoca's Makefile."""
    r = subprocess.run(["make", "-s", "-C", str(SOFTDOCA), "build/libsoftdoca.so"], capture_output=True, text=True)
    assert r.returncode == 0, f"make failed:\n{r.stdout}\n{r.stderr}"
    r = subprocess.run(["make", "-s", "--no-print-directory", "-C", str(SOFTDOCA), "print-objs"],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"make print-objs failed:\n{r.stdout}\n{r.stderr}"
    objs: Dict[str, Path] = {}
    for line in r.stdout.split():
        rel = Path(line).relative_to("build/obj")
        objs[str(rel.with_suffix(""))] = SOFTDOCA / line
    assert objs, "make print-objs listed no object"
    return objs


def _nm(obj: Path, *args: str) -> Dict[str, str]:
    """Symbol -> nm's type letter, for the symbols nm lists."""
    out = subprocess.run(["nm", *args, str(obj)], capture_output=True, text=True, check=True).stdout
    syms: Dict[str, str] = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 2:
            syms[f[-1]] = f[-2]
    return syms


@pytest.fixture(scope="module")
def calls(objects: Dict[str, Path]) -> Dict[Tuple[str, str], Set[str]]:
    """(caller, callee) -> the symbols the caller's object takes from the callee's, callee != caller."""
    owner: Dict[str, str] = {}
    for mod, obj in objects.items():
        for sym, kind in _nm(obj, "-g", "--defined-only").items():
            if sym not in owner or kind not in "wvVW":  # a strong definition wins over a weak one
                owner[sym] = mod
    edges: Dict[Tuple[str, str], Set[str]] = {}
    for mod, obj in objects.items():
        for sym in _nm(obj, "-u"):  # weak references too (w, v)
            target = owner.get(sym)
            if target is not None and target != mod:  # None: libc, libdl, the sanitizers
                edges.setdefault((mod, target), set()).add(sym)
    return edges


def _report(edges: Dict[Tuple[str, str], Set[str]]) -> str:
    return "\n".join(f"  {a} -> {b}: {', '.join(sorted(s))}" for (a, b), s in sorted(edges.items()))


def test_every_source_is_in_a_layer_folder() -> None:
    stray = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.c")
                   if p.parent == SRC or p.relative_to(SRC).parts[0] not in FOLDERS)
    assert not stray, f"sources outside the layer folders {FOLDERS}: {stray}"


def test_every_object_is_in_a_layer_folder(objects: Dict[str, Path]) -> None:
    assert {_folder(m) for m in objects} <= set(FOLDERS), sorted(objects)
    # every source of a layer folder is built (providers/<name>/ only where its library's headers are)
    layered = {str(p.relative_to(SRC).with_suffix("")) for f in FOLDERS for p in (SRC / f).glob("*.c")}
    assert layered <= set(objects), sorted(layered - set(objects))


def test_the_core_holds_what_the_makefile_calls_core() -> None:
    m = re.search(r"^CORE\s*:=(.*)$", (SOFTDOCA / "Makefile").read_text(), re.M)
    assert m, "the Makefile's CORE list is gone"
    assert set(m.group(1).split()) <= {p.stem for p in (SRC / "common").glob("*.c")}


def test_every_engine_and_rdma_module_has_a_layer() -> None:
    for folder in ("engine", "rdma"):
        listed = {m for _, f, mods in LAYERS if f == folder for m in mods}
        there = {p.stem for p in (SRC / folder).glob("*.c")}
        assert listed == there, f"place the modules of {folder}/ in LAYERS (and rdma.h's module map)"


def test_layers_match_the_module_map_of_rdma_h() -> None:
    head = (SRC / "rdma" / "rdma.h").read_text().split("*/", 1)[0]
    layers: List[Tuple[str, List[str]]] = []
    for line in head.splitlines():
        m = re.match(r"^ \* \d+ .*\[(\w+)/\]$", line)
        if m:
            layers.append((m.group(1), []))
        elif re.match(r"^ \* \d+ \S", line):
            raise AssertionError(f"rdma.h's module map: a layer heading without its [folder/]: {line!r}")
        m = re.match(r"^ \*\s+(\w+)\.c\s", line)
        if m:
            assert layers, f"{m.group(1)} is listed before the first layer heading of rdma.h's module map"
            layers[-1][1].append(m.group(1))
    assert layers == [(f, list(mods)) for _, f, mods in LAYERS], "rdma.h's module map and LAYERS disagree"


def test_no_call_goes_up_a_folder(calls: Dict[Tuple[str, str], Set[str]]) -> None:
    rank = {f: i for i, f in enumerate(FOLDERS)}
    upward = {(a, b): s for (a, b), s in calls.items() if rank[_folder(b)] > rank[_folder(a)]}
    assert not upward, ("calls from a folder to a higher one (" + " < ".join(FOLDERS) + "); a lower layer "
                        "reaches an upper one only through the handlers that one registers:\n" + _report(upward))


def test_providers_are_reached_through_the_interface_only(calls: Dict[Tuple[str, str], Set[str]]) -> None:
    into = {(a, b): s for (a, b), s in calls.items() if _folder(b) == "providers" and _folder(a) != "providers"}
    wrong = {(a, b): s for (a, b), s in into.items() if (a, b) != (BRIDGE, INTERFACE)}
    assert not wrong, (f"only the provider bridge ({BRIDGE}.c) calls into providers/, and only the provider "
                       f"interface ({INTERFACE}.c):\n" + _report(wrong))


def test_engine_and_rdma_modules_call_only_their_layer_or_below(calls: Dict[Tuple[str, str], Set[str]]) -> None:
    layer = {f"{f}/{m}": i for i, (_, f, mods) in enumerate(LAYERS) for m in mods}
    upward = {(a, b): s for (a, b), s in calls.items() if a in layer and b in layer and layer[b] > layer[a]}
    assert not upward, "calls to a module of a higher layer (rdma.h's module map):\n" + _report(upward)


# Modules of the native data plane that know no DOCA object: no DOCA struct, task, buffer or map, no
# context or connection reached through a link (docs/native-provider-plan.md: the stages that take the
# DOCA types out of native one module at a time). A module joins this list when its stage lands.
DOCA_FREE = ["engine/rdma_xport", "engine/rdma_link", "engine/rdma_rx", "engine/rdma_frames", "engine/rdma_serve", "engine/rdma_loop"]
_DOCA_OBJECT = re.compile(r"\bstruct\s+doca_\w+|\bsd_rtask\b|\bdoca_(?:buf|mmap|rdma|task|ctx|pe)\w*\s*\(|"
                          r"->\s*(?:rdma|conn|mmap)\b")


def _code(path: Path) -> str:
    """The C source without its comments and string literals (they may name DOCA objects)."""
    text = re.sub(r"/\*.*?\*/", " ", path.read_text(), flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


@pytest.mark.parametrize("mod", DOCA_FREE)
def test_native_data_plane_modules_know_no_doca_object(mod: str, objects: Dict[str, Path]) -> None:
    src = SRC / f"{mod}.c"
    hits = [m.group(0) for m in _DOCA_OBJECT.finditer(_code(src))]
    assert not hits, f"{mod}.c names DOCA objects ({sorted(set(hits))}): adapt them in the DOCA layer (rdma/)"
    doca_calls = sorted(s for s in _nm(objects[mod], "-u") if s.startswith("doca_") or s.startswith("sd_rtask"))
    assert not doca_calls, f"{mod}.c calls DOCA functions: {doca_calls}"


def test_the_doca_object_check_sees_doca_objects(tmp_path: Path) -> None:
    """The check above must fail on a module that reaches a DOCA object (else it proves nothing)."""
    bad = tmp_path / "bad.c"
    bad.write_text('/* struct doca_mmap in a comment is fine */\nint f(struct sd_link *l)\n'
                   '{ return l->rdma->permissions; }\nint g(const struct doca_mmap *m);\n')
    assert [m.group(0) for m in _DOCA_OBJECT.finditer(_code(bad))] == ["->rdma", "struct doca_mmap"]
