"""cffi builder for ``pydoca._native._doca_cffi`` (API mode, out of line).

The module is compiled against cdefs/ but linked against no DOCA library: its
DOCA calls resolve at import time against whichever backend the loader put in
the global symbol scope (real DOCA or softdoca). DOCA callbacks take
``union doca_data`` by value, which libffi cannot express, so small C shims
(``shim.c``, declared for cffi in ``shim.h``) receive them and forward plain
integers to ``extern "Python"`` handlers, and count task-batch completions in C.
"""
from __future__ import annotations

import os

from cffi import FFI

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CDEFS = os.path.join(ROOT, "cdefs")

def read_cdefs() -> str:
    """The cdefs files joined in their explicit order (cdefs/ORDER)."""
    with open(os.path.join(CDEFS, "ORDER")) as fh:
        names = [n.strip() for n in fh if n.strip() and not n.startswith("#")]
    parts = []
    for name in names:
        with open(os.path.join(CDEFS, name)) as fh:
            parts.append(fh.read())
    return "\n".join(parts)


HERE = os.path.dirname(os.path.abspath(__file__))


def _read(name: str) -> str:
    with open(os.path.join(HERE, name)) as fh:
        return fh.read()


SHIM_CDEF = _read("shim_types.h") + _read("shim.h")       # what cffi parses
SHIM_C = _read("shim.c")           # the shims themselves

ffibuilder = FFI()
ffibuilder.cdef(read_cdefs() + SHIM_CDEF)
ffibuilder.set_source(
    "pydoca._native._doca_cffi",
    SHIM_C,
    include_dirs=[os.path.join(ROOT, "softdoca", "include"), CDEFS, HERE],
    extra_compile_args=["-std=gnu11", "-Wall", "-Wno-unused-function", "-Wno-unused-parameter"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
