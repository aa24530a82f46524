"""Argument types and output helpers shared by the subcommands.

None of them loads a DOCA backend: building the parser, ``--help`` and
argument errors never need one (``pydoca doctor`` must work when the backend
is what is broken).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Tuple


def size(text: str) -> int:
    """``4096``, ``64KiB``, ``1MiB``... -> bytes (argparse type)."""
    from ..peer.spec import SpecError, parse_size       # pydoca.peer.spec loads no backend
    try:
        return parse_size(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def count(low: int = 1) -> Callable[[str], int]:
    """An integer of at least ``low`` (argparse type)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value
    parse.__name__ = "count"          # argparse names the type in its messages
    return parse


def _address(text: str, allow_zero: bool) -> Tuple[str, int]:
    from ..address import AddressError, UnknownHost, resolve, split_address
    try:
        host, port = split_address(text, allow_zero=allow_zero)
        if host not in ("*",):
            resolve(host)
    except (AddressError, UnknownHost) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return host, port


def address(text: str) -> str:
    """``HOST:PORT`` to connect to (argparse type): the port 1 to 65535, the host resolvable."""
    _address(text, allow_zero=False)
    return text.strip()


def listen_address(text: str) -> str:
    """``HOST:PORT`` to listen on (argparse type); port 0 picks a free port."""
    _address(text, allow_zero=True)
    return text.strip()


def with_free_port(listen: str) -> str:
    """``HOST:0`` -> ``HOST:PORT`` with a free port; other addresses unchanged."""
    from ..address import free_port, split_address
    host, port = split_address(listen, allow_zero=True)
    if port:
        return listen
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{free_port(host)}"


def write_json(obj: Any, path: str) -> None:
    """One JSON object to ``path`` ('-': stdout)."""
    text = json.dumps(obj, indent=2) + "\n"
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def plural(n: int, word: str, many: str = "") -> str:
    """``1 segment``, ``2 segments`` (``many``: an irregular plural)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


__all__ = ["address", "count", "listen_address", "plural", "size", "with_free_port", "write_json"]
