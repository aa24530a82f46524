"""The ``pydoca`` command line. Each subcommand is a module of this package."""
from __future__ import annotations

import os

# The CLI's processes (and the bench targets and responders they start) never call BLAS: numpy's
# OpenBLAS worker threads would only compete with softdoca's engine for cores. A user's setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from .main import main  # noqa: E402

__all__ = ["main"]
