"""The documentation site builds with warnings as errors and renders in headless Chromium.

The site (Sphinx + MyST + autodoc, ``docs/conf.py``) is built into a temporary
directory with ``sphinx-build -W``; the built pages are then opened in
headless Chromium (Debian's ``chromium``), whose DOM must hold the navigation
(every section of the table of contents) and the API reference (the
documented signature of ``pydoca.peer.Requester.connect``).

Needs the docs extra (``pip install -e '.[docs]'``) and ``chromium``; CI
installs both (``.ci/run``). Elsewhere the tests skip and say which is
missing.
"""
from __future__ import annotations

import html
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.plain_only("it builds and renders the docs site: no softdoca code runs")
DOC_TOOLS = ("sphinx", "myst_parser", "furo")
#: the table of contents: the sidebar's section captions and one page of each
NAV = {
    "Getting started": ["Quickstart"],
    "User guide": ["Devices and memory", "Connections: RDMA CM, descriptors and descriptor files",
                   "Tasks, batches, task rings, progress and asyncio", "The peer layer: services of endpoints",
                   "The transfer engine, with etcd", "The C runtime: softdoca as a DOCA runtime",
                   "Benchmarks: pydoca bench", "Providers and transports", "Troubleshooting"],
    "API reference": ["pydoca", "pydoca.rdma", "pydoca.peer", "pydoca.transfer", "pydoca.aio", "pydoca.errors"],
    "Internals": ["pydoca architecture and the decisions behind it", "About these docs"],
}


def _missing_tools() -> Optional[str]:
    missing = [m for m in DOC_TOOLS if importlib.util.find_spec(m) is None]
    if missing:
        return f"doc tools not installed ({', '.join(missing)}): python3 -m pip install -e '.[docs]'"
    return None


def _browser_env() -> Dict[str, str]:
    """The environment without the sanitizer runtimes the sanitized runs preload (a browser under them hangs)."""
    drop = ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _chromium() -> Optional[str]:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site (sphinx-build -W: any warning fails the build)."""
    why = _missing_tools()
    if why:
        pytest.skip(why)
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYDOCA_BACKEND": "soft"}
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           "-d", str(out / ".doctrees"), str(ROOT / "docs"), str(out / "html")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, f"sphinx-build -W failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return out / "html"


def _dom(page: Path, tmp_path: Path) -> str:
    """The DOM of ``page`` after Chromium rendered it (scripts run)."""
    chromium = _chromium()
    if chromium is None:
        pytest.skip("chromium not installed (Debian: apt-get install chromium)")
    proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           f"--user-data-dir={tmp_path / 'chromium-profile'}", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=90, env=_browser_env())
    assert proc.returncode == 0, f"chromium failed:\n{proc.stderr[-3000:]}"
    assert "<html" in proc.stdout, f"chromium printed no DOM:\n{proc.stderr[-3000:]}"
    return proc.stdout


def _text(dom: str, sep: str = " ") -> str:
    """The visible text of a DOM, whitespace collapsed (``sep``: what a tag becomes; "" inside a line)."""
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", sep, dom)).split())


def test_site_builds_with_every_page(site: Path) -> None:
    for page in ("index", "quickstart", "guide/troubleshooting", "reference/peer", "architecture", "peer",
                 "transfer", "performance", "softdoca-contract", "about"):
        assert (site / f"{page}.html").is_file(), f"{page}.html was not built"


def test_index_renders_the_navigation(site: Path, tmp_path: Path) -> None:
    dom = _dom(site / "index.html", tmp_path)
    nav = re.search(r'<div class="sidebar-tree">(.*?)</div>\s*</div>', dom, re.S)
    assert nav, "no navigation tree in the rendered index page"
    tree = _text(nav.group(1))
    for caption, entries in NAV.items():
        assert caption in tree, f"navigation lacks the section {caption!r}: {tree[:2000]}"
        for entry in entries:
            assert entry in tree, f"navigation lacks {entry!r} under {caption!r}: {tree[:2000]}"
    body = _text(dom)
    assert "Pythonic, RAII-safe bindings" in body


def test_api_reference_renders_signatures(site: Path, tmp_path: Path) -> None:
    dom = _dom(site / "reference" / "peer.html", tmp_path)
    match = re.search(r'<dt[^>]*id="pydoca\.peer\.Requester\.connect".*?</dt>', dom, re.S)
    assert match, "pydoca.peer.Requester.connect is not documented on the rendered API page"
    signature = _text(match.group(0), sep="")
    assert signature.startswith("classmethod connect(address: str, *, timeout: float = 10.0"), signature
    assert "→ Requester" in signature, signature
    write = re.search(r'<dt[^>]*id="pydoca\.peer\.Requester\.write".*?</dt>', dom, re.S)
    assert write and "posted: bool = False" in _text(write.group(0), sep=""), "write() lost its posted= keyword"
    assert "Connect by RDMA CM" in _text(dom)       # the docstring under the signature
