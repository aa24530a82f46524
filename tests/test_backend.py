"""Backend selection: PYDOCA_BACKEND, PYDOCA_DOCA_LIB_DIR and the version check.

The real-DOCA path is exercised by pointing PYDOCA_DOCA_LIB_DIR at a directory
where libdoca_common.so / libdoca_rdma.so are softdoca under DOCA's names: the
loader then takes the very code path it takes on a DPU host.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pydoca._native import BackendError, check_version, parse_version, softdoca_path


def run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYDOCA_")}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=full)


@pytest.mark.parametrize("text", ["2.9.0", "2.9.0072", "3.0.0", "3.0.0058", "3.3.0055", "3.3.0 (softdoca)"])
def test_supported_versions(text: str) -> None:
    assert check_version(text) is None


@pytest.mark.parametrize("text", ["2.8.1", "2.5.0", "1.5.0", "banana", "3"])
def test_unsupported_versions_are_refused(text: str) -> None:
    with pytest.raises(BackendError) as info:
        check_version(text)
    assert text in str(info.value)


@pytest.mark.parametrize("text", ["3.4.0", "3.10.0001", "4.0.0"])
def test_newer_versions_load_with_a_warning(text: str) -> None:
    warning = check_version(text)
    assert warning is not None and text in warning and "3.3" in warning


def test_parse_version() -> None:
    assert parse_version("3.3.0055") == (3, 3)


def test_doca_backend_without_doca_explains_every_attempt() -> None:
    out = run("import pydoca; pydoca.devices()", PYDOCA_BACKEND="doca")
    assert out.returncode != 0
    assert "BackendError" in out.stderr and "PYDOCA_BACKEND=doca" in out.stderr
    assert "/opt/mellanox/doca/lib" in out.stderr


def test_auto_warns_once_and_soft_is_quiet() -> None:
    code = "import pydoca; print(pydoca.backend.name); pydoca.devices()"
    auto = run(code)
    assert auto.returncode == 0 and auto.stdout.strip() == "soft"
    assert auto.stderr.count("using softdoca") == 1
    soft = run(code, PYDOCA_BACKEND="soft")
    assert soft.returncode == 0 and soft.stdout.strip() == "soft" and soft.stderr == ""


def test_bad_backend_value() -> None:
    out = run("import pydoca; pydoca.devices()", PYDOCA_BACKEND="fpga")
    assert out.returncode != 0 and "expected auto, doca or soft" in out.stderr


def _fake_doca_dir(tmp: Path) -> Path:
    lib = tmp / "doca"
    lib.mkdir()
    for name in ("libdoca_common.so", "libdoca_rdma.so"):
        shutil.copy(softdoca_path(), lib / name)
    return lib


def test_real_doca_path_loads_libraries_by_doca_names(tmp_path: Path) -> None:
    lib = _fake_doca_dir(tmp_path)
    code = ("import pydoca; b = pydoca.backend; print(b.name, b.version);"
            "print([d.ibdev_name for d in pydoca.devices()][:1])")
    for mode in ("auto", "doca"):
        out = run(code, PYDOCA_BACKEND=mode, PYDOCA_DOCA_LIB_DIR=str(lib))
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines()[0].startswith("doca 3.3.0")
        assert "soft_lo" in out.stdout
        assert "using softdoca" not in out.stderr


def test_real_doca_outside_the_supported_range_is_refused(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("gcc not available")
    lib = tmp_path / "old"
    lib.mkdir()
    src = tmp_path / "v.c"
    src.write_text('const char *doca_version_runtime(void) { return "2.7.0033"; }\n')
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib / "libdoca_common.so"), str(src)], check=True)
    shutil.copy(softdoca_path(), lib / "libdoca_rdma.so")
    out = run("import pydoca; pydoca.devices()", PYDOCA_BACKEND="doca", PYDOCA_DOCA_LIB_DIR=str(lib))
    assert out.returncode != 0
    assert "DOCA runtime 2.7.0033 is not supported" in out.stderr
