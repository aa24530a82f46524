"""``EtcdStore``: segment metadata in a real etcd cluster (v3 JSON gateway over HTTP).

Entries are written under one lease per store, kept alive by a daemon thread
every ``ttl/3`` seconds; ``close()`` revokes it, and a crashed process's lease
expires after ``ttl`` seconds, so its segments disappear from lookups. Uses
only the standard library (urllib); every request has a timeout, and an
unreachable cluster is a :class:`MetadataError` naming the endpoints tried.
"""
from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional

from pydoca._log import get_logger

from .errors import MetadataError
from .metadata import MetadataStore

log = get_logger()


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _prefix_end(prefix: str) -> str:
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return base64.b64encode(bytes(raw)).decode()


class EtcdStore(MetadataStore):
    """Entries under a lease of ``ttl`` seconds on the etcd cluster at ``endpoints`` (``host:port``)."""

    def __init__(self, endpoints: List[str], *, ttl: int = 10, timeout: float = 5.0) -> None:
        if not endpoints:
            raise MetadataError("no etcd endpoints given (etcd://host:2379)")
        self.endpoints = [e if e.startswith("http") else f"http://{e}" for e in endpoints]
        self.ttl, self.timeout = ttl, timeout
        self._stop = threading.Event()
        self._lease = int(self._call("/v3/lease/grant", {"TTL": ttl})["ID"])
        self._keeper = threading.Thread(target=self._keepalive, name="pydoca-etcd-lease", daemon=True)
        self._keeper.start()

    def _call(self, path: str, body: Dict[str, Any]) -> Dict[str, Any]:
        data = json.dumps(body).encode()
        errors = []
        for ep in self.endpoints:
            req = urllib.request.Request(ep + path, data=data, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    out: Dict[str, Any] = json.loads(resp.read() or b"{}")
                    return out
            except (urllib.error.URLError, OSError, ValueError) as exc:
                errors.append(f"{ep}: {exc}")
        raise MetadataError(f"etcd unreachable ({'; '.join(errors)}); is etcd running and --metadata right?")

    def _keepalive(self) -> None:
        while not self._stop.wait(max(0.5, self.ttl / 3)):
            try:
                self._call("/v3/lease/keepalive", {"ID": self._lease})
            except MetadataError as exc:
                log.warning("etcd lease keep-alive failed", error=str(exc))

    def put(self, key: str, value: Dict[str, Any]) -> None:
        self._call("/v3/kv/put", {"key": _b64(key), "value": _b64(json.dumps(value)), "lease": self._lease})

    def get(self, key: str) -> Optional[Dict[str, Any]]:
        kvs = self._call("/v3/kv/range", {"key": _b64(key)}).get("kvs") or []
        return self._decode(kvs[0]) if kvs else None

    def list(self, prefix: str) -> Dict[str, Dict[str, Any]]:
        kvs = self._call("/v3/kv/range", {"key": _b64(prefix), "range_end": _prefix_end(prefix)}).get("kvs") or []
        return {base64.b64decode(kv["key"]).decode(): self._decode(kv) for kv in kvs}

    @staticmethod
    def _decode(kv: Dict[str, Any]) -> Dict[str, Any]:
        try:
            value = json.loads(base64.b64decode(kv.get("value", "")))
        except ValueError as exc:
            raise MetadataError(f"etcd entry {kv.get('key')!r} is not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise MetadataError(f"etcd entry {kv.get('key')!r} is not an object")
        return value

    def delete(self, key: str) -> None:
        self._call("/v3/kv/deleterange", {"key": _b64(key)})

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._keeper.join(self.timeout)
        try:
            self._call("/v3/lease/revoke", {"ID": self._lease})
        except MetadataError as exc:
            log.warning("etcd lease revoke failed (it expires by itself)", error=str(exc))


__all__ = ["EtcdStore"]
