"""DOCA 2.9 to 3.3: pydoca loads on runtimes that lack what later releases added.

The runtimes are softdoca relinked per release (tests/doca_shapes.py): the
functions a release lacks are not exported and doca_version_runtime reports
that release. Each is loaded under DOCA's library names with
PYDOCA_BACKEND=doca in a subprocess, the loader path of a DPU host; a basic
flow must work (devices, device open, mmap, inventory, buffers, RDMA write
between two contexts) and a feature that needs a missing function must raise
NotSupportedError naming the release that added it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

from doca_shapes import ShapeBuilder, compiler, exported, hidden_for
from pydoca._native import versions
from test_cdefs import declared_functions

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.plain_only("it compiles and links plain softdoca runtimes of its own, one per DOCA release")

#: What a 3.0 runtime lacks: the optional functions added after 3.0.
AFTER_3_0: Dict[str, str] = {n: v for n, v in versions.OPTIONAL.items()
                             if tuple(int(p) for p in v.split(".")) > (3, 0)}

FLOW = r'''
import json
import pydoca
from pydoca import Access
from pydoca import errors as E
from pydoca._native import backend, ffi, lib, missing, require

ALL = Access.LOCAL_READ_WRITE | Access.RDMA_WRITE | Access.RDMA_READ
out = {"backend": backend.name, "version": backend.version, "missing": missing(),
       "proxied": type(lib).__name__ != "Lib"}


def refused(fn):
    """None when fn() works, else what its NotSupportedError says."""
    try:
        fn()
    except E.NotSupportedError as exc:
        return {"text": str(exc), "symbol": exc.symbol, "added_in": exc.added_in}
    return None


out["devices"] = {d.ibdev_name: d.iface_index for d in pydoca.devices()}
with pydoca.Device.open(iface="lo") as dev, pydoca.ProgressEngine() as pe, \
        pydoca.Rdma(dev, pe, permissions=ALL) as a, pydoca.Rdma(dev, pe, permissions=ALL) as b, \
        pydoca.BufferInventory(16) as inv:
    blob_a, ca = a.export()
    blob_b, cb = b.export()
    a.connect(blob_b, ca)
    b.connect(blob_a, cb)
    ca.wait_established(10)
    cb.wait_established(10)
    src = bytearray(bytes(range(256)) * 16)
    dst = bytearray(len(src))
    sm = pydoca.MemoryMap(dev, src, access=Access.LOCAL_READ_WRITE)
    dm = pydoca.MemoryMap(dev, dst, access=ALL)
    rm = pydoca.MemoryMap.from_export(dev, dm.export_rdma())
    a.write(ca, inv.buffer(sm), inv.buffer(rm)).result(10)
    out["written"] = dst == src
    out["expand"] = refused(lambda: inv.expand(4))
    out["rnr_retry"] = refused(lambda: pydoca.Rdma(dev, pe, permissions=ALL, rnr_retry_count=3).close())
    out["flush"] = refused(lambda: lib.doca_ctx_flush_tasks(ffi.NULL) if "doca_ctx_flush_tasks" in missing()
                           else require("doca_ctx_flush_tasks"))
    info = ffi.new("uint32_t *")
    devinfo = lib.doca_dev_as_devinfo(dev.handle)
    out["iface_index"] = refused(lambda: E.check(lib.doca_devinfo_get_iface_index(devinfo, info),
                                                 "doca_devinfo_get_iface_index"))
    out["reuse"] = refused(lambda: require("doca_buf_inventory_buf_reuse_by_args"))
    for m in (rm, dm, sm):
        m.close()
print("RESULT " + json.dumps(out))
'''


def run_on(lib_dir: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYDOCA_")}
    env.update(PYDOCA_BACKEND="doca", PYDOCA_DOCA_LIB_DIR=str(lib_dir))
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "pydoca.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, cwd=str(ROOT))


def result(done: subprocess.CompletedProcess[str]) -> Dict[str, Any]:
    assert done.returncode == 0, done.stderr[-3000:]
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, done.stdout + done.stderr
    return dict(json.loads(line[-1][len("RESULT "):]))


@pytest.fixture(scope="session")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ShapeBuilder]:
    if compiler() is None:
        pytest.skip("no C compiler to build the shaped runtimes")
    yield ShapeBuilder(tmp_path_factory.mktemp("doca-shapes"))


# -- the table --------------------------------------------------------------

def test_every_cdefs_function_has_a_release() -> None:
    declared = set(declared_functions())
    assert declared == set(versions.ADDED_IN), (
        "classify new cdefs functions in pydoca/_native/versions.py: "
        f"{sorted(declared ^ set(versions.ADDED_IN))}")
    assert set(versions.OPTIONAL) == {n for n, v in versions.ADDED_IN.items() if v != versions.BASELINE}
    assert {"doca_devinfo_get_iface_index", "doca_buf_inventory_buf_reuse_by_args"} <= set(versions.OPTIONAL)
    assert all(versions.ADDED_IN[n] in ("3.1", "3.2", "3.3") for n in versions.ABSENT_IN
               if versions.ABSENT_IN[n] == "3.0")


def test_module_references_exactly_the_optional_functions_weakly() -> None:
    from pydoca._native import ffi
    from pydoca._native import _doca_cffi  # type: ignore[attr-defined]

    real = _doca_cffi.lib
    table = sorted(ffi.string(real.pydoca_optional_name(i)).decode() for i in range(real.pydoca_optional_count()))
    assert table == sorted(versions.OPTIONAL)
    if shutil.which("nm") is None:
        pytest.skip("nm not available")
    done = subprocess.run(["nm", "-D", "--undefined-only", _doca_cffi.__file__], capture_output=True, text=True,
                          check=True)
    kinds = {ln.split()[-1]: ln.split()[0] for ln in done.stdout.splitlines() if "doca_" in ln}
    weak = {n for n, k in kinds.items() if k == "w" and n.startswith("doca_")}
    assert weak - {"doca_task_submit_ex"} == set(versions.OPTIONAL)   # submit_ex: 2.9, weak since batches
    assert all(kinds[n] == "U" for n in kinds if n.startswith("doca_") and n not in weak)


# -- shaped runtimes ----------------------------------------------------------

def test_shape_hides_what_the_release_lacks(shapes: ShapeBuilder) -> None:
    if shutil.which("nm") is None:
        pytest.skip("nm not available")
    for release, count in (("2.9", len(versions.OPTIONAL)), ("3.0", len(AFTER_3_0)), ("3.3", 0)):
        syms = set(exported(shapes.shape(release) / "libdoca_common.so"))
        hidden = hidden_for(release)
        assert len(hidden) == count
        assert not syms & set(hidden)
        assert set(versions.ADDED_IN) - set(hidden) <= syms


def test_doca_2_9(shapes: ShapeBuilder) -> None:
    out = result(run_on(shapes.shape("2.9"), FLOW))
    assert out["backend"] == "doca" and out["version"] == "2.9.0072" and out["proxied"]
    assert out["written"]
    assert set(out["missing"]) == set(versions.OPTIONAL)
    assert out["expand"]["symbol"] == "doca_buf_inventory_expand" and out["expand"]["added_in"] == "3.0"
    assert "DOCA 3.0" in out["expand"]["text"] and "2.9.0072" in out["expand"]["text"]
    assert out["rnr_retry"]["symbol"] == "doca_rdma_set_rnr_retry_count" and "DOCA 3.0" in out["rnr_retry"]["text"]
    assert out["flush"]["symbol"] == "doca_ctx_flush_tasks"           # a void function: its stub raises
    assert out["iface_index"]["added_in"] == "3.2" and "DOCA 3.2" in out["iface_index"]["text"]
    assert set(out["devices"].values()) == {None}


def test_doca_3_0(shapes: ShapeBuilder) -> None:
    """The issue's runtime: 3.0.0058 without doca_devinfo_get_iface_index and buf_reuse_by_args."""
    out = result(run_on(shapes.shape("3.0"), FLOW))
    assert out["version"] == "3.0.0058" and out["proxied"] and out["written"]
    assert out["missing"] == AFTER_3_0
    assert {"doca_devinfo_get_iface_index": "3.2", "doca_buf_inventory_buf_reuse_by_args": "3.2"}.items() \
        <= out["missing"].items()
    assert out["expand"] is None and out["rnr_retry"] is None and out["flush"] is None
    assert out["iface_index"]["symbol"] == "doca_devinfo_get_iface_index"
    assert "needs DOCA 3.2" in out["iface_index"]["text"] and "3.0.0058" in out["iface_index"]["text"]
    assert out["reuse"]["added_in"] == "3.2" and "doca_buf_inventory_buf_reuse_by_args" in out["reuse"]["text"]
    assert set(out["devices"].values()) == {None}                     # DeviceInfo.iface_index degrades


def test_doca_3_3(shapes: ShapeBuilder) -> None:
    done = run_on(shapes.shape("3.3"), FLOW)
    out = result(done)
    assert out["version"] == "3.3.0109" and not out["proxied"] and out["missing"] == {}
    assert out["written"]
    assert all(out[k] is None for k in ("expand", "rnr_retry", "flush", "iface_index", "reuse"))
    assert None not in out["devices"].values()
    assert "newer than" not in done.stderr


def test_newer_runtime_loads_with_one_warning(shapes: ShapeBuilder) -> None:
    done = run_on(shapes.shape("3.4"), FLOW)
    out = result(done)
    assert out["version"] == "3.4.0001" and out["written"] and out["missing"] == {}
    assert done.stderr.count("newer than the newest release pydoca was checked against") == 1, done.stderr


def test_older_runtime_is_refused_naming_its_version(shapes: ShapeBuilder) -> None:
    done = run_on(shapes.shape("2.8"), "import pydoca; pydoca.devices()")
    assert done.returncode != 0
    assert "DOCA runtime 2.8.0079 is not supported" in done.stderr and "2.9" in done.stderr


def test_a_missing_required_function_is_explained(shapes: ShapeBuilder) -> None:
    lib_dir = shapes.shape("3.3", version="3.3.0109", hide=["doca_buf_get_data"])
    done = run_on(lib_dir, "import pydoca; pydoca.devices()")
    assert done.returncode != 0
    assert "BackendError" in done.stderr and "doca_buf_get_data" in done.stderr
    assert re.search(r"DOCA runtime 3\.3\.0109", done.stderr)


def test_doctor_lists_runtime_and_missing_features(shapes: ShapeBuilder) -> None:
    lib_dir = shapes.shape("3.0")
    done = run_on(lib_dir, "", "doctor", "--json")
    report = json.loads(done.stdout)
    assert report["runtime_version"] == "3.0.0058"
    assert {m["symbol"]: m["added_in"] for m in report["optional_missing"]} == AFTER_3_0
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["optional DOCA functions"]["status"] == "warn"
    assert checks["DOCA version"]["status"] == "ok"
    text = run_on(lib_dir, "", "doctor").stdout
    assert "3.0.0058" in text and "doca_devinfo_get_iface_index" in text and "DOCA 3.2" in text
