"""List import cycles among pydoca's modules (module-level imports, TYPE_CHECKING blocks excluded;
imports inside functions count too, since they are still dependencies). Exit 1 when any exists.

    python3 tools/import_cycles.py [--lazy-ok]

``--lazy-ok`` ignores imports made inside functions (run-time only).
"""
from __future__ import annotations

import ast
import os
import sys
from typing import Dict, List, Set

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pydoca")


def module_name(path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
    return rel[:-9] if rel.endswith(".__init__") else rel


def resolve(mod: str, is_pkg: bool, level: int, name: str) -> str:
    if level == 0:
        return name
    parts = mod.split(".")
    base = parts if is_pkg else parts[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def graph(lazy_ok: bool) -> Dict[str, Set[str]]:
    mods: Dict[str, str] = {}
    for d, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                p = os.path.join(d, f)
                mods[module_name(p)] = p
    edges: Dict[str, Set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        with open(path) as fh:
            tree = ast.parse(fh.read())
        is_pkg = path.endswith("__init__.py")
        skip: Set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
                skip.update(id(n) for n in ast.walk(node))
            if lazy_ok and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                skip.update(id(n) for n in ast.walk(node) if n is not node)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: List[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = resolve(mod, is_pkg, node.level, node.module or "")
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != mod and t.startswith("pydoca") and not mod.startswith(t + "."):
                    edges[mod].add(t)
    return edges


def cycles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    out: List[List[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


if __name__ == "__main__":
    found = cycles(graph("--lazy-ok" in sys.argv))
    for c in found:
        print("cycle:", " <-> ".join(c))
    print(f"{len(found)} import cycle(s)")
    sys.exit(1 if found else 0)
