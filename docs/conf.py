"""Sphinx configuration of pydoca's documentation site.

Build it (warnings are errors, as in CI)::

    python3 -m pip install -e '.[docs]'
    python3 -m sphinx -W --keep-going -b html docs docs/_build/html

``tests/test_docs_site.py`` builds the same site into a temporary directory
and opens it in headless Chromium.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The API reference imports pydoca (autodoc); softdoca is always there, so the
# build neither needs real DOCA nor logs the "real DOCA not found" fallback.
os.environ.setdefault("PYDOCA_BACKEND", "soft")

project = "pydoca"
author = "pydoca developers"
copyright = "pydoca developers, Apache-2.0"
release = version = "0.1.0"

extensions = [
    "myst_parser",              # the Markdown pages, docs/*.md included as they are
    "sphinx.ext.autodoc",       # the API reference, from the docstrings
    "sphinx.ext.napoleon",      # Google/NumPy-style sections in docstrings
    "sphinx.ext.viewcode",      # "[source]" links next to each documented name
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
# The design notes show illustrative, not strictly valid, JSON (docs/peer.md: "created": ...);
# Pygments then falls back to relaxed highlighting, which is fine.
suppress_warnings = ["misc.highlighting_failure"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_inherit_docstrings = True
napoleon_google_docstring = True
napoleon_numpy_docstring = True

html_theme = "furo"
html_title = "pydoca"
html_static_path: list[str] = []
