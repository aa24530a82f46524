"""Lay out softdoca as a DOCA runtime: public headers, pkg-config files, dev links.

Used by setup.py (into pydoca/_lib/doca) and by softdoca/Makefile (into
softdoca/build/doca). The shared libraries themselves are linked by the caller
with the file names and SONAMEs of :data:`LIBS`; this module writes the rest:

* ``include/doca_*.h``: one header per DOCA header softdoca implements, built
  from the exact prototypes of ``cdefs/`` (and ``softdoca/include/decl/`` for
  what pydoca does not bind: doca_argp, and the part of doca_log beyond the
  SDK-log calls of ``cdefs/doca_log.h``, joined after it) wrapped as C
  needs them: include guard (DOCA's names), the ``#include``s between them,
  ``extern "C"``, DOCA's macros and its ``static inline`` helpers.
* ``lib/pkgconfig/doca-{common,rdma,argp}.pc``: relocatable (``${pcfiledir}``),
  so they are right wherever the wheel is installed.
* ``lib/libdoca_X.so -> libdoca_X.so.3`` (the link a linker uses for -ldoca_X).

Run as a script: ``python3 gen_runtime.py OUT_DIR`` writes include/ and
lib/pkgconfig/ under OUT_DIR (and the links, where the libraries exist).
"""
from __future__ import annotations

import os
import sys
from typing import Dict, List, Tuple, Union

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CDEFS = os.path.join(ROOT, "cdefs")
DECL = os.path.join(ROOT, "softdoca", "include", "decl")
#: Headers installed as they are: softdoca's own extensions (softdoca_task_batch_allocate, ...).
VERBATIM = [os.path.join(ROOT, "softdoca", "include", "softdoca_ext.h")]

#: The DOCA release whose API softdoca implements (headers and .pc Version).
VERSION = (3, 3, 0)
#: SONAME major: DOCA 2.x ships libdoca_common.so.2 (-> .so.2.<minor>.<build>),
#: DOCA 3.x files are libdoca_common.so.3.<minor>.<build>; we use the major.
SOVERSION = "3"

#: library -> (pkg-config name, description)
LIBS: Dict[str, Tuple[str, str]] = {
    "doca_common": ("doca-common", "DOCA Common (softdoca: software DOCA over TCP, from pydoca)"),
    "doca_rdma": ("doca-rdma", "DOCA RDMA (softdoca: software DOCA over TCP, from pydoca)"),
    "doca_argp": ("doca-argp", "DOCA Arg Parser (softdoca, from pydoca)"),
}


def soname(lib: str) -> str:
    """'doca_common' -> 'libdoca_common.so.3'."""
    return f"lib{lib}.so.{SOVERSION}"


_STD = ["stdbool.h", "stddef.h", "stdint.h", "sys/types.h"]
_BASE = ["doca_compat.h", "doca_error.h", "doca_types.h"]
#: The C headers each DOCA 3.3 header includes itself (programs rely on them).
_SZ = ["stddef.h", "stdint.h"]

_BUF_INV_INLINE = """
static inline doca_error_t doca_buf_inventory_buf_get_by_addr(struct doca_buf_inventory *inventory,
							      struct doca_mmap *mmap,
							      void *addr,
							      size_t len,
							      struct doca_buf **buf)
{
	return doca_buf_inventory_buf_get_by_args(inventory, mmap, addr, len, addr, 0, buf);
}

static inline doca_error_t doca_buf_inventory_buf_get_by_data(struct doca_buf_inventory *inventory,
							      struct doca_mmap *mmap,
							      void *data,
							      size_t data_len,
							      struct doca_buf **buf)
{
	return doca_buf_inventory_buf_get_by_args(inventory, mmap, data, data_len, data, data_len, buf);
}

static inline doca_error_t doca_buf_inventory_buf_reuse_by_data(struct doca_buf *buf, void *data, size_t data_len)
{
	return doca_buf_inventory_buf_reuse_by_args(buf, data, data_len, data, data_len);
}

static inline doca_error_t doca_buf_inventory_buf_reuse_by_addr(struct doca_buf *buf, void *addr, size_t len)
{
	return doca_buf_inventory_buf_reuse_by_args(buf, addr, len, addr, 0);
}
"""

_VERSION_PRE = """
#define DOCA_VERSION_MAJOR {0}
#define DOCA_VERSION_MINOR {1}
#define DOCA_VERSION_PATCH {2}
#define DOCA_VERSION_STRING "{0}.{1}.{2}"
#define DOCA_VERSION_CALC_EXACT(major, minor, patch) ((size_t)((major) << 24 | (minor) << 16 | (patch)))
#define DOCA_VERSION_EXACT DOCA_VERSION_CALC_EXACT(DOCA_VERSION_MAJOR, DOCA_VERSION_MINOR, DOCA_VERSION_PATCH)
#define DOCA_VERSION_CALC(major, minor, patch) ((size_t)((major) << 24 | (minor) << 16 | (patch * 1000)))
#define DOCA_VERSION_OFFICIAL DOCA_VERSION_CALC(DOCA_VERSION_MAJOR, DOCA_VERSION_MINOR, DOCA_VERSION_PATCH)
#define DOCA_VERSION_EQ_CURRENT(major, minor, patch) (DOCA_VERSION_CALC(major, minor, patch) == DOCA_VERSION_OFFICIAL)
#define DOCA_VERSION_LTE_CURRENT(major, minor, patch) (DOCA_VERSION_CALC(major, minor, patch) <= DOCA_VERSION_OFFICIAL)

static inline const char *doca_version(void)
{{
	return DOCA_VERSION_STRING;
}}
""".format(*VERSION)

_ERROR_POST = """
#ifndef doca_likely
#define doca_likely(x) __builtin_expect(!!(x), 1)
#endif
#ifndef doca_unlikely
#define doca_unlikely(x) __builtin_expect(!!(x), 0)
#endif

#define DOCA_IS_ERROR(r) doca_unlikely((r) != DOCA_SUCCESS)

#define DOCA_ERROR_PROPAGATE(r, t) \\
	do { \\
		if (r == DOCA_SUCCESS) \\
			r = t; \\
	} while (0)
"""

_TYPES_PRE = """
#define doca_event_invalid_handle -1
"""

#: header -> (source file(s), includes, text before the declarations, text after)
HEADERS: Dict[str, Tuple[Union[str, Tuple[str, ...]], List[str], str, str]] = {
    "doca_types.h": (os.path.join(CDEFS, "doca_types.h"), _STD + ["linux/types.h", "doca_compat.h"], _TYPES_PRE,
                     ""),
    "doca_error.h": (os.path.join(CDEFS, "doca_error.h"), ["doca_compat.h"], "", _ERROR_POST),
    "doca_version.h": (os.path.join(CDEFS, "doca_version.h"), ["stddef.h", "doca_compat.h"], _VERSION_PRE, ""),
    "doca_dev.h": (os.path.join(CDEFS, "doca_dev.h"), ["stdint.h"] + _BASE, "", ""),
    "doca_mmap.h": (os.path.join(CDEFS, "doca_mmap.h"), _SZ + _BASE, "", ""),
    "doca_buf.h": (os.path.join(CDEFS, "doca_buf.h"), _SZ + _BASE, "", ""),
    "doca_buf_inventory.h": (os.path.join(CDEFS, "doca_buf_inventory.h"), _SZ + _BASE, "", _BUF_INV_INLINE),
    "doca_buf_pool.h": (os.path.join(CDEFS, "doca_buf_pool.h"), _SZ + _BASE, "", ""),
    "doca_pe.h": (os.path.join(CDEFS, "doca_pe.h"), ["stdint.h", "stdlib.h"] + _BASE, "", ""),
    "doca_ctx.h": (os.path.join(CDEFS, "doca_ctx.h"), _SZ + _BASE, "", ""),
    "doca_sync_event.h": (os.path.join(CDEFS, "doca_sync_event.h"), _SZ + _BASE, "", ""),
    "doca_rdma.h": (os.path.join(CDEFS, "doca_rdma.h"), ["stdbool.h", "stdint.h"] + _BASE + ["doca_ctx.h"], "", ""),
    "doca_log.h": ((os.path.join(CDEFS, "doca_log.h"), os.path.join(DECL, "doca_log.h")),
                   ["stddef.h", "stdio.h", "stdint.h", "doca_compat.h", "doca_error.h"], "", ""),
    "doca_argp.h": (os.path.join(DECL, "doca_argp.h"),
                    ["stdarg.h", "stdbool.h", "doca_compat.h", "doca_dev.h", "doca_error.h", "doca_log.h"], "", ""),
}

_COMPAT = """/* softdoca: DOCA's symbol annotation macros (generated by softdoca/runtime/gen_runtime.py). */
#ifndef DOCA_COMPAT_H_
#define DOCA_COMPAT_H_

#define DOCA_USED __attribute__((used))
#define DOCA_STABLE __attribute__((visibility("default"))) DOCA_USED

#ifndef DOCA_ALLOW_EXPERIMENTAL_API
#define DOCA_EXPERIMENTAL \\
	__attribute__((deprecated("Symbol is defined as experimental"), section(".text.experimental"))) DOCA_STABLE
#else
#define DOCA_EXPERIMENTAL __attribute__((section(".text.experimental"))) DOCA_STABLE
#endif

#ifndef DOCA_ALLOW_DEPRECATED_API
#define DOCA_DEPRECATED \\
	__attribute__((deprecated("Symbol is defined as deprecated"), section(".text.deprecated"))) DOCA_STABLE
#define DOCA_DEPRECATED_ENUM __attribute__((deprecated("Enum is defined as deprecated")))
#else
#define DOCA_DEPRECATED __attribute__((section(".text.deprecated"))) DOCA_STABLE
#define DOCA_DEPRECATED_ENUM
#endif

/* As DOCA's doca_compat.h (its compatibility helpers, on by default): programs
 * written against DOCA call memset, strncpy, free, assert... with only DOCA
 * headers included. */
#include <string.h>
#include <stdint.h>
#include <stdlib.h>
#include <assert.h>

#include <doca_version.h>

#endif /* DOCA_COMPAT_H_ */
"""


def _guard(name: str) -> str:
    return name.upper().replace(".", "_") + "_"


def header_text(name: str) -> str:
    """The public header ``name`` (e.g. 'doca_mmap.h')."""
    if name == "doca_compat.h":
        return _COMPAT
    src, includes, pre, post = HEADERS[name]
    srcs = (src,) if isinstance(src, str) else src
    parts = []
    for path in srcs:
        with open(path, encoding="utf-8") as fh:
            parts.append(fh.read().rstrip() + "\n")
    body = "\n".join(parts)
    rel = " and ".join(os.path.relpath(path, ROOT) for path in srcs)
    out = [f"/* softdoca: DOCA {VERSION[0]}.{VERSION[1]} {name} (generated by softdoca/runtime/gen_runtime.py "
           f"from {rel}). */",
           f"#ifndef {_guard(name)}", f"#define {_guard(name)}", ""]
    for inc in includes:
        out.append(f"#include <{inc}>")
    out += ["", "#ifdef __cplusplus", 'extern "C" {', "#endif", pre.rstrip(), "", body.rstrip(), post.rstrip(), "",
            "#ifdef __cplusplus", '} /* extern "C" */', "#endif", "", f"#endif /* {_guard(name)} */", ""]
    return "\n".join(out)


def pc_text(lib: str) -> str:
    """pkg-config file of ``lib``, relocatable through ${pcfiledir}."""
    name, descr = LIBS[lib]
    requires = "" if lib == "doca_common" else "Requires: doca-common\n"
    rpath = " -Wl,-rpath,${libdir}"
    return (f"prefix=${{pcfiledir}}/../..\nlibdir=${{prefix}}/lib\nincludedir=${{prefix}}/include\n\n"
            f"Name: {name}\nDescription: {descr}\nVersion: {VERSION[0]}.{VERSION[1]}.{VERSION[2]}\n{requires}"
            f"Libs: -L${{libdir}}{rpath} -l{lib}\nCflags: -I${{includedir}}\n")


def _write(path: str, text: str) -> None:
    try:
        with open(path, encoding="utf-8") as fh:
            if fh.read() == text:
                return
    except OSError:
        pass
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def generate(prefix: str) -> None:
    """Write include/, lib/pkgconfig/ and the lib/*.so links under ``prefix``."""
    inc = os.path.join(prefix, "include")
    lib = os.path.join(prefix, "lib")
    pc = os.path.join(lib, "pkgconfig")
    for d in (inc, lib, pc):
        os.makedirs(d, exist_ok=True)
    for name in ["doca_compat.h", *HEADERS]:
        _write(os.path.join(inc, name), header_text(name))
    for path in VERBATIM:
        with open(path, encoding="utf-8") as fh:
            _write(os.path.join(inc, os.path.basename(path)), fh.read())
    for name in LIBS:
        _write(os.path.join(pc, LIBS[name][0] + ".pc"), pc_text(name))
        dev = os.path.join(lib, f"lib{name}.so")
        if os.path.exists(os.path.join(lib, soname(name))):
            if os.path.islink(dev) or os.path.exists(dev):
                if os.path.islink(dev) and os.readlink(dev) == soname(name):
                    continue
                os.remove(dev)
            os.symlink(soname(name), dev)


if __name__ == "__main__":
    generate(sys.argv[1])
