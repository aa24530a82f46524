"""Build glue: softdoca as a DOCA runtime, and the cffi API-mode module.

Both are compiled from the same cdefs/: softdoca implements the DOCA C API;
``pydoca._native._doca_cffi`` calls it (or the real DOCA libraries, whichever
the loader put in the global symbol scope first).

softdoca is laid out under ``pydoca/_lib/doca`` as a DOCA runtime that C
programs build against (``pydoca softdoca --env``):

* ``lib/libdoca_common.so.3``: all of softdoca but argp (pydoca loads this one);
* ``lib/libdoca_rdma.so.3``: a thin library depending on libdoca_common;
* ``lib/libdoca_argp.so.3``: doca_argp;
* ``lib/libdoca_*.so`` links, ``lib/pkgconfig/doca-*.pc``, ``include/doca_*.h``
  (softdoca/runtime/gen_runtime.py).
"""
from __future__ import annotations

import glob
import importlib.util
import os
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
WARN = ["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden", "-pthread"]
EXTRA = os.environ.get("SOFTDOCA_CFLAGS", "").split()
def _have_header(name: str) -> bool:
    """Whether the C compiler finds <name> (the ucx provider needs Debian's libucx-dev to build, the ofi
    provider libfabric-dev)."""
    cc = os.environ.get("CC", "cc").split()
    try:
        return subprocess.run([*cc, "-E", "-x", "c", "-"], input=f"#include <{name}>\n", capture_output=True,
                              text=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


HAVE_UCX = _have_header("ucp/api/ucp.h")
if HAVE_UCX:
    WARN.append("-DSD_HAVE_UCX")
HAVE_OFI = _have_header("rdma/fabric.h")  # libfabric.so.1 is dlopened at run time
if HAVE_OFI:
    WARN.append("-DSD_HAVE_OFI")
# softdoca/src: one folder per layer, lowest first (docs/architecture.md), as in softdoca/Makefile's LAYER_DIRS;
# providers/ (the provider interface, one folder per provider) apart.
LAYER_DIRS = ["common", "engine", "rdma"]
SRC = [c for d in LAYER_DIRS for c in sorted(glob.glob(f"softdoca/src/{d}/*.c"))] + \
    ["softdoca/src/providers/provider.c"] + \
    (sorted(glob.glob("softdoca/src/providers/ucx/*.c")) if HAVE_UCX else []) + \
    (sorted(glob.glob("softdoca/src/providers/ofi/*.c")) if HAVE_OFI else [])
DEPENDS = sorted([h for d in LAYER_DIRS for h in glob.glob(f"softdoca/src/{d}/*.h")]
                 + glob.glob("softdoca/src/providers/*.h") + glob.glob("softdoca/src/providers/ucx/*.h")
                 + glob.glob("softdoca/src/providers/ofi/*.h")
                 + glob.glob("cdefs/*.h")
                 + glob.glob("softdoca/include/decl/*.h"))
INCLUDES = ["softdoca/include", "cdefs", "softdoca/src"] + [f"softdoca/src/{d}" for d in LAYER_DIRS]


def _gen_runtime():
    spec = importlib.util.spec_from_file_location("gen_runtime", os.path.join(HERE, "softdoca/runtime/gen_runtime.py"))
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


GEN = _gen_runtime()
PKG = "pydoca._lib.doca.lib."


def _lib(name: str, sources, link_with_common: bool) -> Extension:
    ext = Extension(PKG + "lib" + name, sources=sources, include_dirs=INCLUDES, libraries=["dl"],
                    extra_compile_args=WARN + EXTRA,
                    extra_link_args=["-pthread", f"-Wl,-soname,{GEN.soname(name)}"] + EXTRA,
                    depends=DEPENDS)
    ext._softdoca_link_common = link_with_common  # type: ignore[attr-defined]
    return ext


RUNTIME = [
    _lib("doca_common", [s for s in SRC if not s.endswith("/argp.c")], False),
    _lib("doca_rdma", ["softdoca/runtime/doca_rdma_lib.c"], True),
    _lib("doca_argp", ["softdoca/src/common/argp.c"], True),
]


def _without_rpath(args: list) -> list:
    """A link command without its run-path options (-Wl,-rpath,DIR, -Wl,-R,DIR,
    -Wl,-rpath=DIR, -Wl,--enable-new-dtags...; -Xlinker -rpath -Xlinker DIR)."""
    out = []
    skip = 0
    for i, arg in enumerate(args):
        if skip:
            skip -= 1
            continue
        if arg.startswith("-Wl,"):
            parts = arg[4:].split(",")
            kept = []
            j = 0
            while j < len(parts):
                p = parts[j]
                if p in ("-rpath", "-R", "--rpath"):
                    j += 2
                    continue
                if p.startswith(("-rpath=", "--rpath=", "-R/")):
                    j += 1
                    continue
                kept.append(p)
                j += 1
            if kept:
                out.append("-Wl," + ",".join(kept))
            continue
        if arg == "-Xlinker" and args[i + 1:i + 2] in (["-rpath"], ["-R"]):
            skip = 3  # -rpath -Xlinker DIR
            continue
        out.append(arg)
    return out


class BuildExt(build_ext):
    """Names the softdoca libraries as DOCA does and writes the rest of the runtime."""

    def get_ext_filename(self, fullname: str) -> str:
        # distutils asks with the last component only, setuptools with the full name.
        short = fullname[len(PKG):] if fullname.startswith(PKG) else fullname
        if short.startswith("lib") and short[3:] in GEN.LIBS:
            name = GEN.soname(short[3:])
            return os.path.join(*PKG.split(".")[:-1], name) if fullname.startswith(PKG) else name
        return super().get_ext_filename(fullname)

    def build_extension(self, ext: Extension) -> None:
        if ext not in RUNTIME:
            super().build_extension(ext)
            return
        if getattr(ext, "_softdoca_link_common", False):
            # After the sources: the full path of the (already built) libdoca_common,
            # kept as a dependency even when unused (--no-as-needed).
            common = os.path.join(os.path.dirname(self._regular_path(ext.name)), GEN.soname("doca_common"))
            ext.extra_link_args = list(ext.extra_link_args) + ["-Wl,-rpath,$ORIGIN", "-Wl,--no-as-needed", common]
        # The runtime libraries carry no run path but $ORIGIN: the link command of
        # this Python (LDSHARED, LDFLAGS) may name its own library folder with
        # -Wl,-rpath (pyenv, conda), which has nothing to do with DOCA programs.
        linker = getattr(self.compiler, "linker_so", None)
        if linker is not None:
            self.compiler.linker_so = _without_rpath(linker)
        try:
            super().build_extension(ext)
        finally:
            if linker is not None:
                self.compiler.linker_so = linker

    def _regular_path(self, fullname: str) -> str:
        old, self.inplace = self.inplace, 0
        try:
            return self.get_ext_fullpath(fullname)
        finally:
            self.inplace = old

    def run(self) -> None:
        if self.inplace:
            os.makedirs(os.path.join(HERE, "pydoca", "_lib", "doca", "lib"), exist_ok=True)
        super().run()
        # The headers, pkg-config files and dev links next to the libraries, in the
        # build tree (wheel) and, for an in-place/editable build, in the source tree.
        dirs = {os.path.dirname(os.path.dirname(self._regular_path(RUNTIME[0].name)))}
        if self.inplace:
            dirs.add(os.path.join(HERE, "pydoca", "_lib", "doca"))
        for prefix in dirs:
            GEN.generate(prefix)


setup(
    ext_modules=RUNTIME,
    cmdclass={"build_ext": BuildExt},
    cffi_modules=["pydoca/_native/_build.py:ffibuilder"],
)
