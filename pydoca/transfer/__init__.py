"""pydoca.transfer: named segments, batched transfers and cluster metadata.

Like Mooncake's Transfer Engine or NIXL, on DOCA RDMA::

    with TransferEngine("10.0.0.1:18600", metadata="etcd://10.0.0.9:2379") as te:
        te.register("kv", array)                       # zero-copy, published under a lease
        peer = te.open_segment("10.0.0.2:18600/kv")    # or just "kv" through the metadata store
        batch = te.submit([Request("write", "kv", peer, length=1 << 20, local_offset=0, remote_offset=0)])
        batch.wait(10); print(batch.status())

See docs/transfer.md.
"""
from __future__ import annotations

from .batch import Op, Request, RequestStatus, State, TransferBatch
from .engine import TransferEngine
from .errors import MetadataError, SegmentNotFound, StaleSegment, TransferError
from .metadata import EmbeddedStore, MetadataStore
from .stores import open_store
from .segments import LocalSegment, RemoteSegment

__all__ = ["EmbeddedStore", "LocalSegment", "MetadataError", "MetadataStore", "Op", "RemoteSegment", "Request",
           "RequestStatus", "SegmentNotFound", "StaleSegment", "State", "TransferBatch", "TransferEngine",
           "TransferError", "open_store"]
