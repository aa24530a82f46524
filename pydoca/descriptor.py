"""Versioned descriptor files: how two processes exchange connection and
memory descriptors out of band, through a shared filesystem.

A descriptor file is JSON::

    {"magic": "pydoca-descriptor", "format_version": 1, "kind": "<kind>",
     "created": <unix time>, "pid": <writer pid>, "host": "<writer hostname>",
     ...payload}

Payload values of type ``bytes`` (connection blobs, memory descriptors) are
stored as ``{"b64": "<base64>"}`` and decoded back on reading. Files are
written atomically (a temp file in the same directory, then ``os.replace``)
with mode 0600, since memory descriptors carry access keys. Readers reject
anything malformed with a one-line :class:`DescriptorError`.
"""
from __future__ import annotations

import base64
import binascii
import json
import os
import secrets
import socket
import time
from typing import Any, Dict, Mapping, Union

MAGIC = "pydoca-descriptor"
FORMAT_VERSION = 1
#: Header keys written by :func:`write_descriptor`; a payload may not use them.
RESERVED = frozenset({"magic", "format_version", "kind", "created", "pid", "host"})
#: Descriptor files larger than this are rejected unread (they are a few KiB).
MAX_SIZE = 16 * 1024 * 1024
#: Poll interval bounds while waiting for a file to appear.
_POLL_MIN, _POLL_MAX = 0.01, 0.2

PathLike = Union[str, "os.PathLike[str]"]


class DescriptorError(ValueError):
    """A descriptor file is missing, malformed, of another kind or version."""


# -- payload encoding ----------------------------------------------------------
def encode_value(value: Any) -> Any:
    """``bytes`` (recursively, in dicts and lists) -> ``{"b64": ...}``."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"b64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Mapping):
        return {str(k): encode_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_value(v) for v in value]
    return value


def decode_value(value: Any, *, where: str = "value") -> Any:
    """Inverse of :func:`encode_value`; DescriptorError on bad base64."""
    if isinstance(value, dict):
        if set(value) == {"b64"}:
            text = value["b64"]
            if not isinstance(text, str):
                raise DescriptorError(f"{where}: b64 value is not a string")
            try:
                return base64.b64decode(text.encode("ascii"), validate=True)
            except (binascii.Error, UnicodeEncodeError) as exc:
                raise DescriptorError(f"{where}: invalid base64 ({exc})") from None
        return {k: decode_value(v, where=f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [decode_value(v, where=f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def encode_payload(kind: str, payload: Mapping[str, Any]) -> Dict[str, Any]:
    """The full JSON document (header + encoded payload) for ``kind``."""
    if not isinstance(kind, str) or not kind:
        raise ValueError("descriptor kind must be a non-empty string")
    clash = RESERVED.intersection(payload)
    if clash:
        raise ValueError(f"payload uses reserved descriptor keys: {', '.join(sorted(clash))}")
    doc: Dict[str, Any] = {
        "magic": MAGIC,
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "created": time.time(),
        "pid": os.getpid(),
        "host": socket.gethostname(),
    }
    doc.update(encode_value(dict(payload)))
    return doc


def decode_document(doc: Any, kind: str, *, source: str = "descriptor") -> Dict[str, Any]:
    """Check a parsed document's header and decode it; DescriptorError if invalid."""
    if not isinstance(doc, dict):
        raise DescriptorError(f"{source}: not a pydoca descriptor (top level is {type(doc).__name__}, not an object)")
    if doc.get("magic") != MAGIC:
        raise DescriptorError(f"{source}: not a pydoca descriptor (magic {doc.get('magic')!r}, "
                              f"expected {MAGIC!r})")
    version = doc.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise DescriptorError(f"{source}: format_version {version!r} is not an integer")
    if version != FORMAT_VERSION:
        raise DescriptorError(f"{source}: unsupported descriptor format_version {version} "
                              f"(this pydoca reads version {FORMAT_VERSION})")
    if doc.get("kind") != kind:
        raise DescriptorError(f"{source}: descriptor kind is {doc.get('kind')!r}, expected {kind!r}")
    return {k: decode_value(v, where=f"{source}: {k}") for k, v in doc.items()}


# -- files ---------------------------------------------------------------------
def write_descriptor(path: PathLike, kind: str, payload: Mapping[str, Any]) -> None:
    """Write ``payload`` as a ``kind`` descriptor at ``path``: atomically
    (readers see the old file, no file, or the whole new one) and mode 0600."""
    path = os.fspath(path)
    text = json.dumps(encode_payload(kind, payload), indent=1, sort_keys=True) + "\n"
    directory = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    for _ in range(100):
        tmp = os.path.join(directory, f".{base}.{os.getpid()}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
        except FileExistsError:
            continue
        break
    else:  # pragma: no cover - 100 name collisions in a row
        raise FileExistsError(f"could not create a temporary file next to {path}")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), 0o600)   # whatever the umask did
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _read_once(path: str, kind: str) -> Dict[str, Any]:
    with open(path, "rb") as fh:
        raw = fh.read(MAX_SIZE + 1)
    if len(raw) > MAX_SIZE:
        raise DescriptorError(f"{path}: descriptor file is larger than {MAX_SIZE} bytes")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DescriptorError(f"{path}: not a pydoca descriptor (invalid JSON: {first})") from None
    return decode_document(doc, kind, source=path)


def _writer_gone(doc: Mapping[str, Any]) -> bool:
    """True when the document was written on this host by a process that has exited."""
    pid = doc.get("pid")
    if doc.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:                       # alive, owned by another user
        pass
    return False


def read_descriptor(path: PathLike, kind: str, *, timeout: float = 0, fresh: bool = False) -> Dict[str, Any]:
    """Read a ``kind`` descriptor, waiting up to ``timeout`` seconds for the
    file to appear. Returns the whole document (header included) with bytes
    values decoded. ``fresh``: a file left on this host by a process that has
    exited counts as not there yet (a rerun does not pick up the last run's
    file). DescriptorError when the file is invalid, of another kind or
    version, or still missing (or stale) after the timeout."""
    path = os.fspath(path)
    deadline = time.monotonic() + max(0.0, timeout)
    delay = _POLL_MIN
    stale = ""
    while True:
        try:
            doc = _read_once(path, kind)
            if not (fresh and _writer_gone(doc)):
                return doc
            stale = f" (stale: written by process {doc['pid']}, which has exited)"
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            raise DescriptorError(f"{path}: is a directory, not a descriptor file") from None
        except PermissionError as exc:
            raise DescriptorError(f"{path}: cannot read descriptor ({exc.strerror})") from None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            waited = f" after waiting {timeout:g}s" if timeout > 0 else ""
            what = f"no fresh descriptor file{stale}" if stale else "descriptor file not found"
            raise DescriptorError(f"{path}: {what}{waited}")
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, _POLL_MAX)


__all__ = ["DescriptorError", "FORMAT_VERSION", "MAGIC", "decode_document", "decode_value", "encode_payload",
           "encode_value", "read_descriptor", "write_descriptor"]
