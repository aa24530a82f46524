"""The ``pydoca`` command line. Each subcommand is a module of this package."""
from __future__ import annotations

from .main import main

__all__ = ["main"]
