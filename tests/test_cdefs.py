"""The cdefs/ prototypes: parseable, all implemented by softdoca, and in sync with doca_all.h."""
from __future__ import annotations

import ctypes
import os
import re
from typing import List

import pycparser
from cffi import FFI
from pycparser import c_ast

from pydoca._native import softdoca_path
from pydoca._native._build import CDEFS, ROOT, read_cdefs

PRELUDE = "".join(f"typedef int {t};\n" for t in (
    "uint8_t", "uint16_t", "uint32_t", "uint64_t", "int8_t", "int16_t", "int32_t", "int64_t",
    "size_t", "ssize_t", "uintptr_t", "bool"))


def _order() -> List[str]:
    with open(os.path.join(CDEFS, "ORDER")) as fh:
        return [n.strip() for n in fh if n.strip() and not n.startswith("#")]


def declared_functions() -> List[str]:
    """Names of every function (not typedef'd pointer type) declared in cdefs/."""
    text = "\n".join(line for line in read_cdefs().splitlines() if not line.lstrip().startswith("#"))
    ast = pycparser.CParser().parse(PRELUDE + text, filename="cdefs")
    names = [node.name for node in ast.ext
             if isinstance(node, c_ast.Decl) and isinstance(node.type, c_ast.FuncDecl)]
    assert len(names) == len(set(names)), "a function is declared twice"
    return names


def test_cdefs_parse_with_cffi() -> None:
    ffi = FFI()
    ffi.cdef(read_cdefs())
    assert int(ffi.typeof("doca_error_t").relements["DOCA_SUCCESS"]) == 0


def test_function_list_is_plausible() -> None:
    names = declared_functions()
    for must in ("doca_devinfo_create_list", "doca_mmap_export_rdma", "doca_buf_inventory_buf_get_by_args",
                 "doca_pe_progress", "doca_rdma_create", "doca_error_get_name"):
        assert must in names
    assert all(n.startswith("doca_") for n in names)


def test_every_function_resolves_in_softdoca() -> None:
    lib = ctypes.CDLL(softdoca_path())
    missing = [name for name in declared_functions() if not hasattr(lib, name)]
    assert not missing, f"softdoca lacks {len(missing)} DOCA symbols: {', '.join(missing)}"


def test_doca_all_includes_order_in_order() -> None:
    with open(os.path.join(ROOT, "softdoca", "include", "doca_all.h")) as fh:
        text = fh.read()
    cdef_headers = set(os.listdir(CDEFS)) - {"ORDER"}
    included = [name for name in re.findall(r'#include\s+"([^"]+)"', text) if name in cdef_headers]
    assert included == _order()


def test_order_lists_every_cdefs_header() -> None:
    headers = sorted(n for n in os.listdir(CDEFS) if n.endswith(".h"))
    assert sorted(_order()) == headers
