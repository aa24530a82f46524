"""Python child processes that import the same pydoca as their parent, from any working directory.

``python -m pydoca.x`` puts the working directory first on the child's ``sys.path``: started from a source
tree (the repository root, where ``./pydoca`` is unbuilt) while the parent runs an installed pydoca, the
child would import ``./pydoca`` instead. :func:`module_argv` starts the module through a one-line bootstrap
that puts the directory the parent's pydoca came from first on ``sys.path`` (the working directory comes
right after it, so handler modules there are still found) and runs the module as ``-m`` would
(``runpy.run_module(..., run_name="__main__", alter_sys=True)``). The same bootstrap on every Python
(``-P`` exists only from 3.11, and would drop a source checkout the parent imported from its working
directory).
"""
from __future__ import annotations

import os
import sys
from typing import List

#: run in the child as ``python -c BOOTSTRAP ROOT MODULE ARGS...``
BOOTSTRAP = (
    "import sys, runpy\n"
    "root, mod = sys.argv[1], sys.argv[2]\n"
    "del sys.argv[1:3]\n"
    "here = sys.path.pop(0) if sys.path and sys.path[0] in ('', '.') else None\n"
    "at = sys.path.index(root) + 1 if root in sys.path else 0\n"
    "sys.path[at:at] = ([] if at else [root]) + ([] if here is None else [here])\n"
    "runpy.run_module(mod, run_name='__main__', alter_sys=True)\n"
)


def package_root() -> str:
    """The directory holding the ``pydoca`` package this process imported."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def module_argv(module: str, *args: str) -> List[str]:
    """``[python, ..., module args]``: like ``[sys.executable, "-m", module, *args]``, but the child imports
    this process's pydoca whatever its working directory holds."""
    return [sys.executable, "-c", BOOTSTRAP, package_root(), module, *args]


__all__ = ["BOOTSTRAP", "module_argv", "package_root"]
