"""Build glue: the softdoca shared library and the cffi API-mode module.

Both are compiled from the same cdefs/: softdoca implements the DOCA C API;
``pydoca._native._doca_cffi`` calls it (or the real DOCA libraries, whichever
the loader put in the global symbol scope first).
"""
from __future__ import annotations

import glob
import os

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
WARN = ["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden", "-pthread"]
EXTRA = os.environ.get("SOFTDOCA_CFLAGS", "").split()

softdoca = Extension(
    "pydoca._lib.libsoftdoca",
    sources=sorted(glob.glob("softdoca/src/*.c")),
    include_dirs=["softdoca/include", "cdefs", "softdoca/src"],
    extra_compile_args=WARN + EXTRA,
    extra_link_args=["-pthread"] + EXTRA,
    depends=sorted(glob.glob("softdoca/src/*.h") + glob.glob("cdefs/*.h")),
)

setup(
    ext_modules=[softdoca],
    cffi_modules=["pydoca/_native/_build.py:ffibuilder"],
)
