"""Build softdoca shaped like an older or newer DOCA release, under DOCA's names.

A *shape* is a DOCA release: softdoca relinked so that the functions that
release lacks (``pydoca._native.versions``: every optional function added
after it) are local, not exported, and ``doca_version_runtime`` reports that
release (``-DSOFTDOCA_RUNTIME_VERSION``, read by softdoca/src/common/error.c). The
result is a directory holding ``libdoca_common.so`` and ``libdoca_rdma.so``
(a symlink: one object, loaded once), for ``PYDOCA_BACKEND=doca`` with
``PYDOCA_DOCA_LIB_DIR``: the loader path a DPU host takes.

softdoca's objects are compiled once per :class:`ShapeBuilder` (in parallel,
-O1, no -Werror so a warning from an edit in progress does not stop the
tests); each shape recompiles only error.c and relinks. Needs gcc (or $CC).

CLI: ``python tests/doca_shapes.py 3.0 OUTDIR`` (release or full version string).
"""
from __future__ import annotations

import os
import runpy
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
SOFTDOCA = ROOT / "softdoca"
# softdoca/src: one folder per layer (setup.py, softdoca/Makefile); providers/ apart
LAYER_DIRS = ("common", "engine", "rdma")
VERSIONS = ROOT / "pydoca" / "_native" / "versions.py"

#: The version string each shape reports (the patch numbers of real releases).
RUNTIME_VERSIONS: Dict[str, str] = {
    "2.8": "2.8.0079",
    "2.9": "2.9.0072",
    "3.0": "3.0.0058",
    "3.1": "3.1.0105",
    "3.2": "3.2.0118",
    "3.3": "3.3.0109",
    "3.4": "3.4.0001",
}
CFLAGS = ["-std=gnu11", "-O1", "-g0", "-fPIC", "-fvisibility=hidden", "-pthread"]
TIMEOUT_S = 120


def _key(release: str) -> Tuple[int, ...]:
    return tuple(int(p) for p in release.split(".")[:2])


def optional_table() -> Dict[str, str]:
    """versions.OPTIONAL (name -> release that added it), read without importing pydoca."""
    return dict(runpy.run_path(str(VERSIONS))["OPTIONAL"])


def hidden_for(release: str) -> List[str]:
    """The optional functions a runtime of ``release`` lacks."""
    return sorted(n for n, since in optional_table().items() if _key(since) > _key(release))


def compiler() -> Optional[str]:
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


class ShapeBuilder:
    """softdoca objects compiled once; :meth:`shape` links one runtime per call."""

    def __init__(self, workdir: Path, cc: Optional[str] = None) -> None:
        self.cc = cc or compiler()
        if not self.cc:
            raise RuntimeError("no C compiler (gcc/cc) found")
        self.workdir = Path(workdir)
        self.objdir = self.workdir / "obj"
        self.objdir.mkdir(parents=True, exist_ok=True)
        self._objs: Optional[List[Path]] = None
        self._shapes: Dict[Tuple[str, Tuple[str, ...]], Path] = {}

    def _cc(self, args: Sequence[str]) -> None:
        cmd = [self.cc, *CFLAGS, "-I", str(SOFTDOCA / "include"), "-I", str(ROOT / "cdefs"),
               "-I", str(SOFTDOCA / "src"), *(a for d in LAYER_DIRS for a in ("-I", str(SOFTDOCA / "src" / d))),
               *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-4000:]}")

    def objects(self) -> List[Path]:
        """softdoca/src/{common,engine,rdma}/*.c but error.c, and the provider interface (no ucx provider:
        these shapes stand for DOCA), compiled (once)."""
        if self._objs is None:
            srcs = [p for d in LAYER_DIRS for p in sorted((SOFTDOCA / "src" / d).glob("*.c")) if p.name != "error.c"]
            srcs.append(SOFTDOCA / "src" / "providers" / "provider.c")
            objs = [self.objdir / (p.stem + ".o") for p in srcs]
            with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
                list(pool.map(lambda so: self._cc(["-c", str(so[0]), "-o", str(so[1])]), zip(srcs, objs)))
            self._objs = objs
        return self._objs

    def shape(self, release: str, *, version: Optional[str] = None,
              hide: Optional[Iterable[str]] = None) -> Path:
        """A directory with libdoca_common.so/libdoca_rdma.so shaped like ``release``."""
        version = version or RUNTIME_VERSIONS.get(release, f"{release}.0000")
        hidden = tuple(sorted(hidden_for(release) if hide is None else hide))
        cached = self._shapes.get((version, hidden))
        if cached is not None:
            return cached
        out = self.workdir / f"doca-{version.replace(' ', '_')}-{len(self._shapes)}"
        out.mkdir(parents=True)
        err_o = out / "error.o"
        self._cc([f'-DSOFTDOCA_RUNTIME_VERSION="{version}"', "-c", str(SOFTDOCA / "src" / "common" / "error.c"),
                  "-o", str(err_o)])
        script = out / "shape.map"
        local = "".join(f" {n};" for n in hidden)
        script.write_text("{ global: *;" + (f" local:{local}" if local else "") + " };\n")
        lib = out / "libdoca_common.so"
        cmd = [self.cc, "-shared", "-pthread", "-o", str(lib), *map(str, self.objects()), str(err_o),
               f"-Wl,--version-script={script}"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"link failed:\n{done.stderr[-4000:]}")
        os.symlink("libdoca_common.so", out / "libdoca_rdma.so")
        self._shapes[(version, hidden)] = out
        return out


def exported(lib: Path) -> List[str]:
    """The dynamic symbols ``lib`` defines (nm -D --defined-only)."""
    done = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    return sorted(line.split()[-1] for line in done.stdout.splitlines() if line.strip())


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    release, outdir = argv
    ver = release if release.count(".") >= 2 else None
    rel = ".".join(release.split(".")[:2])
    built = ShapeBuilder(Path(outdir) / "build").shape(rel, version=ver)
    print(built)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
