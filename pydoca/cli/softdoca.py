"""``pydoca softdoca``: where softdoca is installed as a DOCA runtime, for C programs.

The wheel carries softdoca under DOCA's library names (``libdoca_common.so.3``,
``libdoca_rdma.so.3``, ``libdoca_argp.so.3``), headers and the pkg-config files
``doca-common``, ``doca-rdma``, ``doca-argp`` (relocatable: ``${pcfiledir}``)::

    eval "$(pydoca softdoca --env)"
    cc prog.c $(pkg-config --cflags --libs doca-common doca-rdma doca-argp)

Nothing here loads a DOCA backend.
"""
from __future__ import annotations

import argparse
import os
import shlex
from typing import Any, Dict

PC_NAMES = ("doca-common", "doca-rdma", "doca-argp")


def prefix() -> str:
    """The softdoca runtime prefix (``include/``, ``lib/``, ``lib/pkgconfig/``)."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_lib", "doca")


def paths() -> Dict[str, str]:
    """prefix, libdir, includedir, pkgconfig dir."""
    root = prefix()
    lib = os.path.join(root, "lib")
    return {"prefix": root, "libdir": lib, "includedir": os.path.join(root, "include"),
            "pkg_config_path": os.path.join(lib, "pkgconfig")}


def _prepend(var: str, value: str) -> str:
    old = os.environ.get(var, "")
    parts = [value] + [p for p in old.split(":") if p and p != value]
    return ":".join(parts)


def env_lines() -> str:
    """Shell lines setting PKG_CONFIG_PATH and LD_LIBRARY_PATH (for ``eval``)."""
    p = paths()
    return "\n".join([
        f"export PKG_CONFIG_PATH={shlex.quote(_prepend('PKG_CONFIG_PATH', p['pkg_config_path']))}",
        f"export LD_LIBRARY_PATH={shlex.quote(_prepend('LD_LIBRARY_PATH', p['libdir']))}",
    ])


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("softdoca", help="where softdoca's DOCA runtime (libs, headers, pkg-config) is, for C")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--prefix", action="store_true", help="print the runtime prefix (include/, lib/)")
    g.add_argument("--libdir", action="store_true", help="print the library directory")
    g.add_argument("--includedir", action="store_true", help="print the header directory")
    g.add_argument("--pkg-config-path", action="store_true", help="print the directory of doca-*.pc")
    g.add_argument("--env", action="store_true",
                   help='print shell exports: eval "$(pydoca softdoca --env)" sets PKG_CONFIG_PATH, LD_LIBRARY_PATH')
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    p = paths()
    missing = [n for n in PC_NAMES if not os.path.exists(os.path.join(p["pkg_config_path"], n + ".pc"))]
    if missing:
        raise FileNotFoundError(f"softdoca runtime incomplete in {p['prefix']} (no {', '.join(missing)}.pc): "
                                "reinstall pydoca (pip install .)")
    if args.env:
        print(env_lines())
    elif args.libdir:
        print(p["libdir"])
    elif args.includedir:
        print(p["includedir"])
    elif args.pkg_config_path:
        print(p["pkg_config_path"])
    elif args.prefix:
        print(p["prefix"])
    else:
        print(f"prefix:          {p['prefix']}")
        print(f"headers:         {p['includedir']}")
        print(f"libraries:       {p['libdir']}")
        print(f"PKG_CONFIG_PATH: {p['pkg_config_path']}  (pkg-config names: {' '.join(PC_NAMES)})")
        print('set up a shell:  eval "$(pydoca softdoca --env)"')
    return 0
