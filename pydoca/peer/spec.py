"""Endpoint spec files (YAML) and handler references.

Format (``version: 1``)::

    version: 1
    name: demo                    # service name (class name of generated clients)
    listen: 127.0.0.1:18515       # optional default address for `pydoca serve`
    endpoints:
      - path: /ep0
        type: write               # write | read | call
        buffer: {size: 1MiB}      # bytes, or with a unit: KiB, MiB, GiB, K, M, G
        handler: handlers:store   # optional for write/read, required for call
        queue: 16                 # optional: max requests waiting while busy (default: no limit beyond
                                  #   the requesters' windows, max_connections x window)
        concurrency: 1            # optional: handlers of this endpoint running at once (default 1)
        timeout: 30               # optional: seconds a handler may run (default: the responder's call_timeout)
        inline: false             # optional: run the handler on the serving thread (never-blocking handlers only)
        copy: false               # optional, write endpoints: the handler gets a private copy of the data
        slots: 1                  # optional, write endpoints: staged writes of one requester that overlap
        description: text         # optional

Handler modules are imported with the spec file's directory on ``sys.path``.
"""
from __future__ import annotations

import enum
import importlib
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

import yaml

from ..address import split_address as _split_address

SPEC_VERSION = 1
DEFAULT_QUEUE: Optional[int] = None      # bounded by max_connections x window
_PATH_RE = re.compile(r"^/[A-Za-z0-9_.\-/]{0,254}$")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000 ** 2,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1000 ** 3, "gib": 1 << 30}
MAX_BUFFER = 1 << 40
#: most slots a write endpoint may give each requester (``slots``)
MAX_SLOTS = 64


class SpecError(ValueError):
    """A spec file (or endpoint definition) that is not valid."""


class Kind(str, enum.Enum):
    WRITE = "write"
    READ = "read"
    CALL = "call"


@dataclass(frozen=True)
class EndpointSpec:
    """One endpoint: path, kind, buffer size, optional handler reference."""

    path: str
    kind: Kind
    size: int
    handler: Optional[str] = None
    queue: Optional[int] = DEFAULT_QUEUE
    description: str = ""
    concurrency: int = 1
    timeout: Optional[float] = None
    inline: bool = False
    copy: bool = False
    slots: int = 1


@dataclass(frozen=True)
class ServiceSpec:
    """A parsed spec file."""

    name: str
    endpoints: Tuple[EndpointSpec, ...]
    listen: Optional[str] = None
    base_dir: Optional[str] = None


def parse_size(value: Any) -> int:
    """``4096``, ``"64KiB"``, ``"1 MiB"`` -> bytes (SpecError when invalid)."""
    if isinstance(value, bool):
        raise SpecError(f"invalid size {value!r}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", value)
        if not m or m.group(2).lower() not in _UNITS:
            raise SpecError(f"invalid size {value!r} (use bytes or a unit: KiB, MiB, GiB)")
        n = int(m.group(1)) * _UNITS[m.group(2).lower()]
    else:
        raise SpecError(f"invalid size {value!r}")
    if not 0 < n <= MAX_BUFFER:
        raise SpecError(f"size {value!r} out of range (1 byte to 1 TiB)")
    return n


def check_path(path: Any) -> str:
    if not isinstance(path, str) or not _PATH_RE.match(path) or "//" in path:
        raise SpecError(f"invalid endpoint path {path!r}: '/' then letters, digits, '_', '.', '-', '/'")
    return path


def _endpoint(i: int, raw: Any) -> EndpointSpec:
    where = f"endpoints[{i}]"
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: expected a mapping")
    unknown = set(raw) - {"path", "type", "kind", "buffer", "size", "handler", "queue", "description",
                          "concurrency", "timeout", "inline", "copy", "slots"}
    if unknown:
        raise SpecError(f"{where}: unknown keys {sorted(unknown)}")
    path = check_path(raw.get("path"))
    kind_raw = raw.get("type", raw.get("kind"))
    if kind_raw == "send":
        kind_raw = "call"
    try:
        kind = Kind(kind_raw)
    except ValueError:
        raise SpecError(f"{where} ({path}): type must be write, read or call, not {kind_raw!r}") from None
    buffer = raw.get("buffer", {})
    if isinstance(buffer, dict):
        if set(buffer) - {"size"}:
            raise SpecError(f"{where} ({path}): buffer takes only 'size'")
        size_raw = buffer.get("size", raw.get("size"))
    else:
        size_raw = buffer
    if size_raw is None:
        raise SpecError(f"{where} ({path}): buffer.size is required")
    handler = raw.get("handler")
    if handler is not None and (not isinstance(handler, str) or handler.count(":") != 1):
        raise SpecError(f"{where} ({path}): handler must be 'module:function', not {handler!r}")
    if kind is Kind.CALL and handler is None:
        raise SpecError(f"{where} ({path}): a call endpoint needs a handler")
    queue = raw.get("queue", DEFAULT_QUEUE)
    if queue is not None and (not isinstance(queue, int) or isinstance(queue, bool) or not 0 <= queue <= 65536):
        raise SpecError(f"{where} ({path}): queue must be an integer 0..65536")
    concurrency = raw.get("concurrency", 1)
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or not 1 <= concurrency <= 1024:
        raise SpecError(f"{where} ({path}): concurrency must be an integer 1..1024")
    timeout = raw.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise SpecError(f"{where} ({path}): timeout must be a number of seconds > 0")
    inline = raw.get("inline", False)
    if not isinstance(inline, bool):
        raise SpecError(f"{where} ({path}): inline must be true or false")
    copy = raw.get("copy", False)
    if not isinstance(copy, bool) or (copy and kind is not Kind.WRITE):
        raise SpecError(f"{where} ({path}): copy must be true or false, and only write endpoints take it")
    slots = raw.get("slots", 1)
    if not isinstance(slots, int) or isinstance(slots, bool) or not 1 <= slots <= MAX_SLOTS or \
            (slots > 1 and kind is not Kind.WRITE):
        raise SpecError(f"{where} ({path}): slots must be an integer 1..{MAX_SLOTS}, and only write endpoints "
                        "take more than 1")
    desc = raw.get("description", "")
    return EndpointSpec(path, kind, parse_size(size_raw), handler, queue, str(desc), concurrency,
                        None if timeout is None else float(timeout), inline, copy, slots)


def parse_spec(doc: Any, *, base_dir: Optional[str] = None) -> ServiceSpec:
    """Validate a loaded spec document."""
    if not isinstance(doc, dict):
        raise SpecError("a spec is a mapping with 'version' and 'endpoints'")
    unknown = set(doc) - {"version", "name", "listen", "endpoints", "description"}
    if unknown:
        raise SpecError(f"unknown top-level keys {sorted(unknown)}")
    if doc.get("version", SPEC_VERSION) != SPEC_VERSION:
        raise SpecError(f"spec version {doc.get('version')!r} is not supported (expected {SPEC_VERSION})")
    name = doc.get("name", "Service")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise SpecError(f"invalid service name {name!r}: a Python identifier")
    raw_eps = doc.get("endpoints")
    if not isinstance(raw_eps, list) or not raw_eps:
        raise SpecError("'endpoints' must be a non-empty list")
    if len(raw_eps) > 0xFFFF:
        raise SpecError("at most 65535 endpoints")
    eps = tuple(_endpoint(i, e) for i, e in enumerate(raw_eps))
    seen: Dict[str, int] = {}
    for i, ep in enumerate(eps):
        if ep.path in seen:
            raise SpecError(f"duplicate endpoint path {ep.path!r} (endpoints[{seen[ep.path]}] and [{i}])")
        seen[ep.path] = i
    listen = doc.get("listen")
    if listen is not None and not isinstance(listen, str):
        raise SpecError("'listen' must be a 'HOST:PORT' string")
    return ServiceSpec(name, eps, listen, base_dir)


def load_spec(path: str) -> ServiceSpec:
    """Read and validate a YAML spec file."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
    except OSError as exc:
        raise SpecError(f"cannot read spec {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise SpecError(f"{path} is not valid YAML: {exc}") from exc
    try:
        return parse_spec(doc, base_dir=os.path.dirname(os.path.abspath(path)))
    except SpecError as exc:
        raise SpecError(f"{path}: {exc}") from None


def resolve_handler(ref: str, base_dir: Optional[str] = None) -> Callable[..., Any]:
    """Import ``module:function`` (with ``base_dir`` on sys.path)."""
    module_name, _, func_name = ref.partition(":")
    if base_dir and base_dir not in sys.path:
        sys.path.insert(0, base_dir)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(f"handler {ref!r}: cannot import {module_name!r}: {exc}") from exc
    fn = getattr(module, func_name, None)
    if not callable(fn):
        raise SpecError(f"handler {ref!r}: {module_name} has no callable {func_name!r}")
    return fn  # type: ignore[no-any-return]


def split_address(text: str, *, allow_zero: bool = False) -> Tuple[str, int]:
    """``"HOST:PORT"`` / ``"[v6]:PORT"`` -> (host, port); ValueError naming what is wrong when malformed
    (:func:`pydoca.address.split_address`)."""
    return _split_address(text, allow_zero=allow_zero)


__all__ = ["EndpointSpec", "Kind", "ServiceSpec", "SpecError", "check_path", "load_spec", "parse_size",
           "parse_spec", "resolve_handler", "split_address"]
