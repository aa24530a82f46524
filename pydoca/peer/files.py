"""Descriptor files of responders (kind ``pydoca.peer.responder``).

A responder descriptor names the responder's RDMA CM address and port, its
instance id (random per responder run), its pid and host, its endpoints and,
when the responder requires one, the access token. Requesters read it and
connect by RDMA CM; the hello then proves the instance: a different instance
at that address, or a pid that is gone on this host, means the file is
stale. (Out-of-band ``doca_rdma_export/connect`` needs both sides' blobs per
connection, so a static file cannot serve many requesters: CM can.)
"""
from __future__ import annotations

import errno
import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from ..descriptor import DescriptorError, read_descriptor, write_descriptor
from .errors import StaleDescriptor
from .protocol import VERSION

if TYPE_CHECKING:
    from .spec import ServiceSpec

KIND = "pydoca.peer.responder"


@dataclass(frozen=True)
class ResponderFile:
    """A parsed responder descriptor file."""

    path: str
    service: str
    address: str
    port: int
    instance: Optional[str]
    token: Optional[bytes]
    key_id: str
    responder_pid: Optional[int]
    responder_host: Optional[str]
    endpoints: List[Dict[str, Any]]

    @property
    def target(self) -> str:
        return f"[{self.address}]:{self.port}" if ":" in self.address else f"{self.address}:{self.port}"


def _payload(service: str, address: str, port: int, instance: Optional[str], token: Optional[bytes],
             pid: Optional[int], host: Optional[str], endpoints: List[Dict[str, Any]]) -> Dict[str, Any]:
    doc: Dict[str, Any] = {"protocol": VERSION, "service": service, "address": address, "port": port,
                           "instance": instance, "responder_pid": pid, "responder_host": host,
                           "endpoints": endpoints}
    if token is not None:
        doc["token"] = token
    return doc


def responder_payload(service: str, host: str, port: int, instance: str, token: Optional[bytes],
                      endpoints: Sequence[Tuple[int, str, str, int]]) -> Dict[str, Any]:
    """The payload describing a running responder (this process) from plain values."""
    eps = [{"id": i, "path": p, "kind": k, "size": n} for i, p, k, n in endpoints]
    return _payload(service, host, port, instance, token, os.getpid(), socket.gethostname(), eps)


def write_responder_file(path: str, payload: Dict[str, Any]) -> None:
    """Write a descriptor file (atomic, mode 0600) with a payload from :func:`responder_payload`."""
    write_descriptor(path, KIND, payload)


def write_spec_file(path: str, spec: "ServiceSpec", host: str, port: int, token: Optional[bytes] = None) -> None:
    """A descriptor from a spec for a responder that will listen at host:port (no instance pinned)."""
    eps = [{"id": i, "path": e.path, "kind": e.kind.value, "size": e.size} for i, e in enumerate(spec.endpoints)]
    write_descriptor(path, KIND, _payload(spec.name, host, port, None, token, None, None, eps))


def write_hello_file(path: str, hello: Dict[str, Any], host: str, port: int, token: Optional[bytes]) -> None:
    """A descriptor for a running responder, from the hello it sent us."""
    eps = [{k: e[k] for k in ("id", "path", "kind", "size")} for e in hello["endpoints"]]
    write_descriptor(path, KIND, _payload(str(hello.get("service", "Service")), host, port, hello["instance"], token,
                                          hello.get("pid"), hello.get("host"), eps))


def _opt(doc: Dict[str, Any], key: str, kind: type, path: str) -> Any:
    value = doc.get(key)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise DescriptorError(f"{path}: {key} must be {kind.__name__}, not {type(value).__name__}")
    return value


def read_responder_file(path: str, *, timeout: float = 0) -> ResponderFile:
    """Parse a responder descriptor (DescriptorError when invalid or foreign)."""
    doc = read_descriptor(path, KIND, timeout=timeout)
    if doc.get("protocol") != VERSION:
        raise DescriptorError(f"{path}: peer protocol {doc.get('protocol')!r} is not supported (expected {VERSION})")
    address, port = doc.get("address"), doc.get("port")
    if not isinstance(address, str) or not address or not isinstance(port, int) or not 0 < port < 65536:
        raise DescriptorError(f"{path}: address/port missing or invalid")
    eps = doc.get("endpoints")
    if not isinstance(eps, list) or not all(isinstance(e, dict) for e in eps):
        raise DescriptorError(f"{path}: endpoints must be a list of objects")
    token = doc.get("token")
    if token is not None and not isinstance(token, bytes):
        raise DescriptorError(f"{path}: token must be base64 bytes")
    key_id = _opt(doc, "key_id", str, path) or ""
    return ResponderFile(path, str(doc.get("service", "Service")), address, port, _opt(doc, "instance", str, path),
                         token, key_id, _opt(doc, "responder_pid", int, path), _opt(doc, "responder_host", str, path), eps)


def check_not_stale(rf: ResponderFile) -> None:
    """StaleDescriptor when the file's responder pid is gone on this very host."""
    if rf.responder_pid is None or rf.responder_host != socket.gethostname():
        return
    try:
        os.kill(rf.responder_pid, 0)
    except OSError as exc:
        if exc.errno == errno.ESRCH:
            raise StaleDescriptor(f"descriptor file {rf.path} is stale: its responder (pid {rf.responder_pid} on "
                                  f"this host) is gone") from None


def remove_if_ours(path: str, instance: str) -> None:
    """Delete ``path`` if it still describes responder ``instance``."""
    try:
        doc = read_descriptor(path, KIND)
        if doc.get("instance") == instance:
            os.unlink(path)
    except (DescriptorError, OSError):
        pass


__all__ = ["KIND", "ResponderFile", "check_not_stale", "read_responder_file", "remove_if_ours",
           "responder_payload", "write_hello_file", "write_responder_file", "write_spec_file"]
