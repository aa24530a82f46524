"""``HOST:PORT`` addresses: parsing with errors that name the problem, and host-name resolution.

Nothing here loads a DOCA backend (the command line parses addresses before it
knows whether it needs one).
"""
from __future__ import annotations

import socket
from typing import Tuple

EXAMPLE = "127.0.0.1:18515"


class AddressError(ValueError):
    """A malformed ``HOST:PORT``; the message names what is wrong and gives an example."""


class UnknownHost(socket.gaierror):
    """A host name that does not resolve. A ``socket.gaierror`` (code in ``errno``), whose message names the host."""

    def __init__(self, host: str, why: str, code: int = 0) -> None:
        super().__init__(f"cannot resolve host {host!r}: {why} (check the name, or give an IP address)")
        self.host = host
        self.errno = code or None           # socket.EAI_* as gaierror carries it


def split_address(text: str, *, allow_zero: bool = False) -> Tuple[str, int]:
    """``"HOST:PORT"`` / ``"[v6]:PORT"`` -> (host, port).

    AddressError (a ValueError) says what is wrong: no port, a port that is not
    a number, or one out of range (1 to 65535; with ``allow_zero``, 0 too: the
    caller picks a free port)."""
    raw = str(text).strip()
    host, sep, port = raw.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    low = 0 if allow_zero else 1
    if not sep or not host:
        raise AddressError(f"expected HOST:PORT (e.g. {EXAMPLE}), got {text!r}")
    if not port.isdigit():
        raise AddressError(f"port {port!r} of {text!r} is not a number: expected HOST:PORT (e.g. {EXAMPLE})")
    if not low <= int(port) <= 65535:
        zero = " (0: pick a free port)" if allow_zero else ""
        raise AddressError(f"port {int(port)} of {text!r} is out of range: ports are {low} to 65535{zero}")
    return host, int(port)


def looks_like_address(text: str) -> bool:
    """Whether ``text`` is meant as ``HOST:PORT`` (ends in ``:DIGITS``), valid or not."""
    _, sep, port = str(text).strip().rpartition(":")
    return bool(sep) and port.isdigit()


def resolve(host: str) -> str:
    """The first IP address of ``host`` (a name or an address); UnknownHost names the host when it does not
    resolve."""
    try:
        return str(socket.getaddrinfo(host, None)[0][4][0])
    except socket.gaierror as exc:
        raise UnknownHost(host, exc.strerror or str(exc), exc.errno or 0) from None
    except UnicodeError as exc:                     # e.g. an empty label: "a..b"
        raise UnknownHost(host, f"not a valid host name ({exc})") from None


def free_port(host: str) -> int:
    """A port nobody listens on at ``host`` now (for listening on ``HOST:0``: DOCA listens on a given port)."""
    ip = resolve(host)
    with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET) as s:
        s.bind((ip, 0))
        return int(s.getsockname()[1])


__all__ = ["AddressError", "EXAMPLE", "UnknownHost", "free_port", "looks_like_address", "resolve", "split_address"]
