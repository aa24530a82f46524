"""Who may connect and what they may touch: tokens, rights, source allow-lists.

The token never travels. After ``IDENT`` (name, key id, requester nonce) the
responder answers ``CHALLENGE`` (its own nonce); the requester proves it
holds the token with ``AUTH`` = HMAC-SHA256(token, "client" | both nonces |
name | key id), and the responder proves it in turn in its hello (``proof`` =
HMAC-SHA256(token, "server" | both nonces)). Fresh nonces on both sides make
a recorded exchange worthless on another connection.

Rights are per endpoint: ``w`` write, ``r`` read, ``c`` call; a credential
lists them by path pattern (``fnmatch``), ``{"*": "rwc"}`` by default.
"""
from __future__ import annotations

import fnmatch
import hashlib
import hmac
import ipaddress
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Sequence, Tuple, Union

KIND_RIGHT = {"write": "w", "read": "r", "call": "c"}
Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]


@dataclass(frozen=True)
class Credential:
    """A token and the rights it grants (path pattern -> letters of ``rwc``)."""

    token: bytes
    rights: Mapping[str, str] = field(default_factory=lambda: {"*": "rwc"})

    def __post_init__(self) -> None:
        if not isinstance(self.token, (bytes, bytearray)) or len(self.token) < 16:
            raise ValueError("a token is at least 16 bytes (secrets.token_bytes(16))")
        for pattern, letters in self.rights.items():
            if not isinstance(pattern, str) or not isinstance(letters, str) or set(letters) - set("rwc"):
                raise ValueError(f"rights map path patterns to letters of 'rwc', got {pattern!r}: {letters!r}")

    def allows(self, path: str, kind: str) -> bool:
        """True when some pattern matching ``path`` grants the right ``kind`` needs."""
        need = KIND_RIGHT[kind]
        return any(need in letters and fnmatch.fnmatchcase(path, pat) for pat, letters in self.rights.items())


ALL_RIGHTS = Credential(b"\0" * 16)          # the rights of everybody when no token is configured


def client_mac(token: bytes, client_nonce: bytes, server_nonce: bytes, name: str, key_id: str) -> bytes:
    msg = b"pydoca-peer-2 client|" + client_nonce + server_nonce + name.encode() + b"|" + key_id.encode()
    return hmac.new(token, msg, hashlib.sha256).digest()


def server_proof(token: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(token, b"pydoca-peer-2 server|" + client_nonce + server_nonce, hashlib.sha256).digest()


def parse_networks(items: Optional[Iterable[str]]) -> Optional[Tuple[Network, ...]]:
    """``["127.0.0.0/8", "::1"]`` -> networks; None means everybody (ValueError names a bad entry)."""
    if items is None:
        return None
    nets = []
    for item in items:
        try:
            nets.append(ipaddress.ip_network(item.strip(), strict=False))
        except ValueError:
            raise ValueError(f"allow-list entry {item!r} is not an address or CIDR network "
                             "(e.g. 10.0.0.0/8 or ::1)") from None
    return tuple(nets)


def address_allowed(address: Optional[str], nets: Optional[Sequence[Network]]) -> bool:
    """True when ``nets`` is None or ``address`` lies in one of them (unknown addresses are refused)."""
    if nets is None:
        return True
    if not address:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip.version == n.version and ip in n for n in nets)


__all__ = ["ALL_RIGHTS", "Credential", "KIND_RIGHT", "address_allowed", "client_mac", "parse_networks",
           "server_proof"]
