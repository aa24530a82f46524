"""Opening a metadata store from its text form (``--metadata STORE``)."""
from __future__ import annotations

import urllib.parse
from typing import Optional

from .errors import MetadataError
from .etcd import EtcdStore
from .metadata import EmbeddedStore, MetadataStore


def open_store(spec: Optional[str]) -> MetadataStore:
    """``None``/``"embedded"``: EmbeddedStore; ``"dir:/path"``: with a host directory;
    ``"etcd://host:port[,host:port][?ttl=SECONDS]"``: EtcdStore."""
    if spec in (None, "", "embedded"):
        return EmbeddedStore()
    assert spec is not None
    if spec.startswith("dir:"):
        return EmbeddedStore(spec[4:])
    if spec.startswith("etcd://"):
        where, _, query = spec[7:].partition("?")
        opts = urllib.parse.parse_qs(query)
        ttl = int(opts.get("ttl", ["10"])[0])
        return EtcdStore([e for e in where.split(",") if e], ttl=ttl)
    raise MetadataError(f"unknown metadata store {spec!r}: use 'embedded', 'dir:/path' or 'etcd://host:port'")


__all__ = ["open_store"]
