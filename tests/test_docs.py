"""Every code block of README.md, docs/**/*.md (the site's pages: docs/*.md, docs/guide/, docs/reference/...)
and samples/README.md runs (so the docs cannot rot).

Conventions of the fenced blocks:

* ```` ```python ````: a complete program, run alone in a fresh directory
  (port 18515 replaced by a free one, as in every runnable block);
* ```` ```python responder ```` then ```` ```python requester ````: two
  processes, the responder first (until it prints a line), port 18515
  replaced by a free one;
* ```` ```yaml file=NAME ```` / ```` ```python file=NAME ````: files the next
  ```` ```sh run ```` block needs, written next to it;
* ```` ```sh run ````: each line runs in turn (``pydoca`` is this package's
  CLI); a line ending in `` &`` runs in the background until the block ends.

Other blocks (``sh`` without ``run``: set-up commands that CI itself runs, or
commands for several hosts; ``text``: formats) are not executed.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from rdma_util import free_port

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "samples" / "README.md",
        *sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.relative_to(ROOT / "docs").parts)]
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)
pytestmark = pytest.mark.plain_only("the plain run proves the docs' examples run; the softdoca paths they take are "
                                    "the other tests', which the sanitizer runs cover")


def blocks() -> List[Tuple[str, int, str, str, str]]:
    """(file, index, language, info, code) of every fenced block."""
    out = []
    for doc in DOCS:
        for i, m in enumerate(FENCE.finditer(doc.read_text())):
            out.append((doc.relative_to(ROOT).as_posix(), i, m.group(1), m.group(2).strip(), m.group(3)))
    return out


def _env() -> Dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "PYTHONUNBUFFERED": "1"}


def _runs(lang: str, info: str) -> bool:
    return (lang == "python" and not info.startswith("file=")) or (lang == "sh" and info == "run")


SINGLE = [b for b in blocks() if b[2] == "python" and b[3] == ""]
PAIRS = []
for _b in blocks():
    if _b[2] == "python" and _b[3] == "responder":
        nxt = [c for c in blocks() if c[0] == _b[0] and c[1] == _b[1] + 1]
        assert nxt and nxt[0][3] == "requester", f"{_b[0]} block {_b[1]}: a responder block needs a requester next"
        PAIRS.append((_b, nxt[0]))


def test_every_runnable_block_is_covered() -> None:
    covered = {(b[0], b[1]) for b in SINGLE} | {(p[0], p[1]) for pair in PAIRS for p in pair} | \
        {(b[0], b[1]) for b in blocks() if b[2] == "sh" and b[3] == "run"}
    runnable = {(b[0], b[1]) for b in blocks() if _runs(b[2], b[3])}
    assert runnable <= covered
    assert SINGLE and PAIRS, "the docs lost their runnable examples"


@pytest.mark.parametrize("block", SINGLE, ids=lambda b: f"{b[0]}#{b[1]}")
def test_python_block_runs(block: Tuple[str, int, str, str, str], tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", block[4].replace("18515", str(free_port()))], cwd=tmp_path, env=_env(), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, f"{block[0]} block {block[1]} failed:\n{out.stderr[-3000:]}"
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0][0]}#{p[0][1]}")
def test_two_process_blocks_run(pair: Tuple[Tuple[str, int, str, str, str], ...], tmp_path: Path) -> None:
    port = str(free_port())
    code = [b[4].replace("18515", port) for b in pair]
    resp = subprocess.Popen([sys.executable, "-c", code[0]], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert resp.stdout is not None
        first = resp.stdout.readline()
        assert first, f"the responder block exited: {resp.stderr.read() if resp.stderr else ''}"[-3000:]
        req = subprocess.run([sys.executable, "-c", code[1]], cwd=tmp_path, env=_env(), capture_output=True,
                             text=True, timeout=60)
        assert req.returncode == 0, f"requester block failed:\n{req.stderr[-3000:]}"
        out, err = resp.communicate(timeout=60)
        assert resp.returncode == 0, f"responder block failed:\n{err[-3000:]}"
    finally:
        if resp.poll() is None:
            resp.kill()
            resp.communicate(timeout=10)


SHELL = [b for b in blocks() if b[2] == "sh" and b[3] == "run"]


@pytest.mark.parametrize("block", SHELL, ids=lambda b: f"{b[0]}#{b[1]}")
def test_shell_block_runs(block: Tuple[str, int, str, str, str], tmp_path: Path) -> None:
    for f in blocks():                                       # the files this block needs
        if f[0] == block[0] and f[1] < block[1] and f[3].startswith("file="):
            (tmp_path / f[3][5:]).write_text(f[4])
    port = str(free_port())
    background = []
    try:
        for line in block[4].replace("18515", port).splitlines():
            line = line.split("  #")[0].strip()
            if not line or line.startswith("#"):
                continue
            argv = shlex.split(line.rstrip("&").strip())
            if argv[0] == "pydoca":
                argv = [sys.executable, "-m", "pydoca.cli", *argv[1:]]
            elif argv[0] == "python3":
                argv = [sys.executable, *argv[1:]]
            if line.endswith("&"):
                proc = subprocess.Popen(argv, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
                background.append(proc)
                assert proc.stdout is not None
                assert proc.stdout.readline(), f"{line!r} exited: {proc.stderr.read() if proc.stderr else ''}"
                continue
            out = subprocess.run(argv, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, f"{line!r} failed:\n{out.stderr[-2000:]}"
    finally:
        for proc in background:
            proc.terminate()
            try:
                proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate(timeout=10)
    time.sleep(0)
