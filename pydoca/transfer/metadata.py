"""Where segments and services are published: the ``MetadataStore`` interface.

Keys are paths (``/pydoca/segments/HOST:PORT/NAME``), values JSON objects.
Entries are published under a *lease*: the publisher keeps it alive; when it
dies the lease expires and its entries disappear, so a crashed peer vanishes
from lookups. Two implementations:

* :class:`EmbeddedStore` needs no service: this process's own entries, plus
  (optionally) a directory of one JSON file per entry for the processes of
  one host; leases are the publisher's pid (a dead pid's files are ignored
  and removed). Across hosts, a segment's address (``HOST:PORT/NAME``) is
  enough: the engine asks the owner directly (peer-to-peer handshake).
* :class:`~pydoca.transfer.etcd.EtcdStore`: a real etcd cluster (v3 JSON
  gateway), leases with keep-alive, for clusters.
"""
from __future__ import annotations

import abc
import json
import os
import threading
import urllib.parse
from typing import Any, Dict, List, Optional

from ..descriptor import DescriptorError, read_descriptor, write_descriptor
from .errors import MetadataError

PREFIX = "/pydoca"
KIND = "pydoca.transfer.entry"


class MetadataStore(abc.ABC):
    """Publish, look up and list JSON entries under leases."""

    @abc.abstractmethod
    def put(self, key: str, value: Dict[str, Any]) -> None:
        """Publish ``value`` at ``key`` under this store's lease (replaces an older value)."""

    @abc.abstractmethod
    def get(self, key: str) -> Optional[Dict[str, Any]]:
        """The live value at ``key``, or None."""

    @abc.abstractmethod
    def list(self, prefix: str) -> Dict[str, Dict[str, Any]]:
        """Every live entry whose key starts with ``prefix``."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Withdraw ``key`` (no error when absent)."""

    def close(self) -> None:
        """Withdraw this store's entries (its lease) and release it."""

    def __enter__(self) -> "MetadataStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class EmbeddedStore(MetadataStore):
    """No service: in-process entries, plus a shared directory for one host (``directory``)."""

    def __init__(self, directory: Optional[str] = None) -> None:
        self.directory = directory
        self._own: Dict[str, Dict[str, Any]] = {}
        self._lock = threading.Lock()
        if directory:
            os.makedirs(directory, mode=0o700, exist_ok=True)

    def _file(self, key: str) -> str:
        assert self.directory is not None
        return os.path.join(self.directory, urllib.parse.quote(key, safe="") + ".json")

    def put(self, key: str, value: Dict[str, Any]) -> None:
        with self._lock:
            self._own[key] = value
        if self.directory:
            write_descriptor(self._file(key), KIND, {"key": key, "owner_pid": os.getpid(), "value": json.dumps(value)})

    def get(self, key: str) -> Optional[Dict[str, Any]]:
        with self._lock:
            if key in self._own:
                return self._own[key]
        if not self.directory:
            return None
        return self._read(self._file(key))

    def _read(self, path: str) -> Optional[Dict[str, Any]]:
        try:
            doc = read_descriptor(path, KIND)
            value = json.loads(doc["value"])
        except FileNotFoundError:
            return None
        except (DescriptorError, KeyError, TypeError, ValueError) as exc:
            raise MetadataError(f"{path} is not a pydoca metadata entry ({exc}); remove it") from None
        if not isinstance(value, dict) or not isinstance(doc.get("owner_pid"), int):
            raise MetadataError(f"{path} is not a pydoca metadata entry; remove it")
        if not _alive(doc["owner_pid"]):            # the publisher's lease: its pid
            try:
                os.unlink(path)
            except OSError:
                pass
            return None
        return value

    def list(self, prefix: str) -> Dict[str, Dict[str, Any]]:
        out: Dict[str, Dict[str, Any]] = {}
        if self.directory:
            for name in sorted(os.listdir(self.directory)):
                key = urllib.parse.unquote(name[:-5]) if name.endswith(".json") else ""
                if key.startswith(prefix):
                    value = self._read(os.path.join(self.directory, name))
                    if value is not None:
                        out[key] = value
        with self._lock:
            out.update({k: v for k, v in self._own.items() if k.startswith(prefix)})
        return out

    def delete(self, key: str) -> None:
        with self._lock:
            self._own.pop(key, None)
        if self.directory:
            try:
                os.unlink(self._file(key))
            except FileNotFoundError:
                pass

    def close(self) -> None:
        for key in list(self._own):
            self.delete(key)


__all__ = ["EmbeddedStore", "KIND", "MetadataStore", "PREFIX"]
