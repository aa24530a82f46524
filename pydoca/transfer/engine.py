"""``TransferEngine``: named segments, batched transfers, a connection cache, metadata.

Each engine serves its own segments: a :class:`pydoca.peer.Responder` on
``listen`` answers segment lookups (``/segment``, ``/segments``; the access
descriptor travels only to authenticated peers) and its RDMA context is the
target of peers' one-sided reads and writes, served by the NIC (softdoca's
engine thread) without any progress here. Outgoing transfers use a pool of
``connections_per_peer`` connections per peer, opened lazily, closed when
idle, reopened when a peer restarted; every transfer is sliced
(``slice_size``) and the slices spread over the pool as task batches.
"""
from __future__ import annotations

import base64
import itertools
import json
import socket
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from pydoca._log import get_logger

from ..buffer import BufferInventory
from ..memory import Access, MemoryMap
from ..peer import Requester, Responder
from ..peer.errors import HandlerError, PeerError
from ..peer.spec import split_address
from ..rdma.batch import TaskBatch
from .batch import Op, Request, TransferBatch, _Part
from .errors import SegmentNotFound, StaleSegment, TransferError
from .metadata import PREFIX, MetadataStore
from .stores import open_store
from .segments import LocalSegment, RemoteSegment, as_memory
from .topology import Matrix, choose_device, memory_numa

log = get_logger()
SEGMENTS = f"{PREFIX}/segments/"
STAGE_CHUNK = 64 << 10        # small transfers from/to unregistered memory go through staging chunks


class _Peer:
    """The cached connections to one peer engine."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.conns: List[Requester] = []
        self.instance = ""
        self.used = time.monotonic()
        self.next = 0


class TransferEngine:
    """Register segments, open peers' segments, submit batches of reads and writes."""

    def __init__(self, listen: str = "127.0.0.1:0", *, metadata: Union[MetadataStore, str, None] = None,
                 device: Optional[str] = None, connections_per_peer: int = 2, slice_size: int = 1 << 20,
                 max_inflight: int = 512, token: Optional[bytes] = None, idle_timeout: float = 60.0,
                 timeout: float = 10.0, staging_size: int = 4 << 20, topology: Optional[Matrix] = None) -> None:
        """``listen`` on a wildcard address (``0.0.0.0:PORT``) without ``device`` picks the device by
        topology: ``topology`` (a priority matrix, see pydoca.transfer.topology), else NUMA locality."""
        host, port = split_address(listen) if not listen.endswith(":0") else (listen.rsplit(":", 1)[0], 0)
        if device is None and host in ("0.0.0.0", "::", "*"):
            device, host = _by_topology(topology)
        self.host, self.port = host, port or _free_port(host)
        self.store = metadata if isinstance(metadata, MetadataStore) else open_store(metadata)
        self.device_name, self.token, self.timeout = device, token, timeout
        if connections_per_peer < 1 or slice_size < 1:
            raise ValueError("connections_per_peer and slice_size must be >= 1")
        self.connections_per_peer, self.slice_size, self.max_inflight = connections_per_peer, slice_size, max_inflight
        self.idle_timeout, self.staging_size = idle_timeout, staging_size
        self.segments: Dict[str, LocalSegment] = {}
        self._remotes: List[RemoteSegment] = []
        self._peers: Dict[str, _Peer] = {}
        self._gen = itertools.count(1)
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        self.responder = Responder(f"{self.host}:{self.port}", name="pydoca_transfer", device=device, token=token,
                                   workers=2, max_connections=64)
        self.responder.add_endpoint("/segment", "call", 64 << 10, self._serve_segment, concurrency=4)
        self.responder.add_endpoint("/segments", "call", 1 << 20, self._serve_list)

    @property
    def address(self) -> str:
        """``HOST:PORT`` peers use to reach this engine (the owner part of its segments' names)."""
        return f"{self.host}:{self.port}"

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> "TransferEngine":
        """Listen and serve segment lookups on a background thread."""
        if self._thread is not None:
            return self
        self.responder.start()
        self.dev = self.responder.dev
        self.inventory = BufferInventory(max(1024, 8 * self.max_inflight))
        self._stage = np.zeros(self.staging_size, dtype=np.uint8)
        self._stage_map = MemoryMap(self.dev, self._stage, access=Access.LOCAL_READ_WRITE)
        self._stage_free = list(range(self.staging_size // STAGE_CHUNK))
        self._thread = threading.Thread(target=self.responder.serve_forever, name="pydoca-transfer", daemon=True)
        self._thread.start()
        log.info("transfer engine serving", address=self.address, device=self.dev.info.ibdev_name)
        return self

    def __enter__(self) -> "TransferEngine":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Withdraw every segment, close every connection, stop serving. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for name in list(self.segments):
            self.unregister(name)
        for remote in self._remotes:
            remote.stale = True
            if remote.rmap is not None:
                remote.rmap.close()
        self._remotes.clear()
        for peer in list(self._peers.values()):
            self._drop(peer)
        self.responder.stop()
        if self._thread is not None:
            self._thread.join(5)
        if self._thread is not None:
            self._stage_map.close()
            self.inventory.close()
        self.responder.close()
        self.store.close()

    # -- local segments ------------------------------------------------------------
    def register(self, name: str, obj: Any) -> LocalSegment:
        """Register ``obj`` (buffer protocol or DLPack, zero-copy, kept alive) as segment ``name`` and publish it."""
        self._check()
        if not name or "/" in name:
            raise ValueError(f"segment name {name!r} must be non-empty and contain no '/'")
        if name in self.segments:
            raise TransferError(f"segment {name!r} is already registered; unregister it first")
        seg = LocalSegment(name, obj, self.dev, f"{self.responder.instance}:{next(self._gen)}")
        self.segments[name] = seg
        desc = seg.descriptor(self.address)
        del desc["mmap"]                                      # the access blob never goes into metadata
        self.store.put(f"{SEGMENTS}{self.address}/{name}", desc)
        return seg

    def unregister(self, name: str) -> None:
        """Withdraw segment ``name``: peers' handles become stale, their accesses are refused."""
        seg = self.segments.pop(name, None)
        if seg is None:
            raise SegmentNotFound(f"no local segment {name!r}")
        self.store.delete(f"{SEGMENTS}{self.address}/{name}")
        seg.close()

    def _serve_segment(self, payload: bytes) -> bytes:
        seg = self.segments.get(payload.decode("utf-8", errors="replace"))
        if seg is None:
            raise KeyError(f"no segment {payload[:100]!r} at {self.address}")
        return json.dumps(seg.descriptor(self.address)).encode()

    def _serve_list(self, payload: bytes) -> bytes:
        return json.dumps({n: {"length": s.length, "generation": s.generation} for n, s in
                           self.segments.items()}).encode()

    # -- remote segments ------------------------------------------------------------
    def list_segments(self) -> Dict[str, Dict[str, Any]]:
        """Every segment published in the metadata store (``owner/name`` -> descriptor)."""
        return {k[len(SEGMENTS):]: v for k, v in self.store.list(SEGMENTS).items()}

    def _resolve(self, ref: str) -> Tuple[str, str]:
        """``HOST:PORT/NAME`` as is; ``NAME`` or ``OWNER/NAME`` through the metadata store."""
        owner, _, name = ref.rpartition("/")
        if owner:
            try:
                split_address(owner)
                return owner, name
            except ValueError:
                pass
        found = [k for k in self.list_segments() if k.rpartition("/")[2] == name and
                 (not owner or k.startswith(owner))]
        if not found:
            raise SegmentNotFound(f"no published segment {ref!r} (metadata has {len(self.list_segments())} "
                                  "segments); give HOST:PORT/NAME to ask its owner directly")
        if len(found) > 1:
            raise SegmentNotFound(f"{ref!r} is ambiguous: {', '.join(sorted(found)[:5])}; use OWNER/NAME")
        owner, _, name = found[0].rpartition("/")
        return owner, name

    def open_segment(self, ref: str) -> RemoteSegment:
        """A handle to a peer's segment (``HOST:PORT/NAME``, or a name published in the metadata store)."""
        self._check()
        owner, name = self._resolve(ref)
        peer = self._peer(owner)
        try:
            desc = json.loads(peer.conns[0].call("/segment", name.encode(), timeout=self.timeout))
        except HandlerError as exc:
            raise SegmentNotFound(f"{owner} has no segment {name!r}: {exc}") from None
        rmap = MemoryMap.from_export(self.dev, base64.b64decode(desc["mmap"]))
        seg = RemoteSegment(name, owner, int(desc["length"]), str(desc["generation"]), bool(desc["readonly"]), rmap)
        self._remotes = [r for r in self._remotes if not r.stale]
        self._remotes.append(seg)
        return seg

    # -- connections -------------------------------------------------------------------
    def _peer(self, owner: str) -> _Peer:
        self._reap()
        peer = self._peers.get(owner)
        if peer is None:
            peer = self._peers[owner] = _Peer(owner)
        for dead in [c for c in peer.conns if c.closed or c._fatal is not None]:
            dead.close()
            peer.conns.remove(dead)
        while len(peer.conns) < self.connections_per_peer:
            try:
                conn = Requester.connect(owner, dev=self.dev, token=self.token, timeout=self.timeout,
                                         max_tasks=self.max_inflight, name=f"transfer@{self.address}")
            except PeerError as exc:
                if peer.conns:
                    break
                raise TransferError(f"cannot reach peer engine {owner}: {exc}") from None
            if peer.instance and conn.instance != peer.instance:
                log.info("peer engine restarted: its old segments are stale", peer=owner)
            peer.instance = conn.instance
            peer.conns.append(conn)
        peer.used = time.monotonic()
        return peer

    def _drop(self, peer: _Peer) -> None:
        for c in peer.conns:
            c.close()
        peer.conns.clear()
        self._peers.pop(peer.owner, None)

    def _reap(self) -> None:
        now = time.monotonic()
        for peer in list(self._peers.values()):
            if now - peer.used > self.idle_timeout:
                log.debug("closing idle peer connections", peer=peer.owner)
                self._drop(peer)

    def _check(self) -> None:
        if self._closed:
            raise TransferError("transfer engine is closed")
        if self._thread is None:
            raise TransferError("transfer engine not started: use start() or a with-block")

    # -- transfers ----------------------------------------------------------------------
    def submit(self, requests: Sequence[Request]) -> TransferBatch:
        """Slice and submit every request; returns at once with the batch handle."""
        self._check()
        plan: Dict[Tuple[int, bool, int, int], Dict[str, Any]] = {}    # (connection, read?, local map, remote map)
        conns: Dict[int, Requester] = {}
        cleanup: List[Callable[[], None]] = []
        early: List[Tuple[int, Exception]] = []
        for i, req in enumerate(requests):
            try:
                self._plan(i, req, plan, conns, cleanup)
            except (TransferError, ValueError) as exc:
                early.append((i, exc))
        parts: List[_Part] = []
        for (cid, is_read, _, _), sl in plan.items():
            conn = conns[cid]
            batch = TaskBatch.ranges(conn.rdma, conn._conn(), "read" if is_read else "write", self.inventory,
                                     sl["lmap"], sl["loff"], sl["rmap"], sl["roff"], sl["size"])
            parts.append(_Part(batch, np.array(sl["owner"], dtype=np.int64), np.array(sl["size"], dtype=np.int64)))
            batch.submit()
        return TransferBatch(requests, parts, list({id(c.pe): c.pe for c in conns.values()}.values()), cleanup,
                             early)

    def _plan(self, i: int, req: Request, plan: Dict[Tuple[int, bool, int, int], Dict[str, Any]],
              conns: Dict[int, Requester], cleanup: List[Callable[[], None]]) -> None:
        op = Op(req.op)
        remote = self.open_segment(req.remote) if isinstance(req.remote, str) else req.remote
        remote.check()
        if req.length <= 0 or req.remote_offset < 0 or req.remote_offset + req.length > remote.length:
            raise TransferError(f"{req.length} bytes at offset {req.remote_offset} do not fit {remote.ref} "
                                f"({remote.length} bytes)")
        if op is Op.WRITE and remote.readonly:
            raise TransferError(f"{remote.ref} is read-only (registered from a read-only buffer)")
        lmap, loff = self._local(req, op, cleanup)
        peer = self._peer(remote.owner)
        if peer.instance != remote.generation.split(":")[0]:
            remote.stale = True
            if remote.rmap is not None:
                remote.rmap.close()
            remote.check()
        n = len(peer.conns)
        is_read = op is Op.READ
        for k, start in enumerate(range(0, req.length, self.slice_size)):
            conn = peer.conns[(peer.next + k) % n]
            conns[id(conn)] = conn
            sl = plan.get((id(conn), is_read, id(lmap), id(remote.rmap)))
            if sl is None:
                sl = plan[(id(conn), is_read, id(lmap), id(remote.rmap))] = {
                    "lmap": lmap, "rmap": remote.rmap, "loff": [], "roff": [], "size": [], "owner": []}
            sl["loff"].append(loff + start)
            sl["roff"].append(req.remote_offset + start)
            sl["size"].append(min(self.slice_size, req.length - start))
            sl["owner"].append(i)
        peer.next = (peer.next + 1) % n

    def _local(self, req: Request, op: Op, cleanup: List[Callable[[], None]]) -> Tuple[MemoryMap, int]:
        """The local memory map and offset of a request (a segment, its name, or a bytes-like registered now)."""
        local = req.local
        if isinstance(local, str):
            if local not in self.segments:
                raise SegmentNotFound(f"no local segment {local!r}")
            local = self.segments[local]
        if isinstance(local, LocalSegment):
            if req.local_offset < 0 or req.local_offset + req.length > local.length:
                raise TransferError(f"{req.length} bytes at offset {req.local_offset} do not fit local segment "
                                    f"{local.name} ({local.length} bytes)")
            return local.mmap, req.local_offset
        view = as_memory(local)
        if req.local_offset + req.length > view.nbytes:
            raise TransferError(f"{req.length} bytes at offset {req.local_offset} do not fit the local buffer "
                                f"({view.nbytes} bytes)")
        if op is Op.READ and view.readonly:
            raise TransferError("a read needs a writable local buffer")
        if req.length <= STAGE_CHUNK and self._stage_free:
            return self._staged(view[req.local_offset:req.local_offset + req.length], op, cleanup)
        mm = MemoryMap(self.dev, view, access=Access.LOCAL_READ_ONLY if view.readonly else Access.LOCAL_READ_WRITE)
        cleanup.append(mm.close)
        return mm, req.local_offset

    def _staged(self, view: memoryview, op: Op, cleanup: List[Callable[[], None]]) -> Tuple[MemoryMap, int]:
        """A pre-registered staging chunk for a small transfer (no registration per batch): a write's bytes are
        copied in now; a read's are copied out when the batch is released."""
        chunk = self._stage_free.pop()
        start = chunk * STAGE_CHUNK
        area = self._stage.data[start:start + view.nbytes]
        if op is Op.WRITE:
            area[:] = view

        def release() -> None:
            if op is Op.READ:
                view[:] = area
            self._stage_free.append(chunk)
        cleanup.append(release)
        return self._stage_map, start

    def transfer(self, requests: Sequence[Request], timeout: Optional[float] = 30.0) -> None:
        """Submit and wait; TransferError names the requests that failed."""
        self.submit(requests).result(timeout)

    def __repr__(self) -> str:
        return f"<TransferEngine {self.address} segments={len(self.segments)} peers={len(self._peers)}>"


def _by_topology(matrix: Optional[Matrix]) -> Tuple[str, str]:
    """(device name, its address) for memory local to this thread (first touch decides its node)."""
    import ctypes

    from ..device import devices
    probe = (ctypes.c_uint8 * 4096)()
    probe[0] = 1
    dev = choose_device(devices(), memory_node=memory_numa(ctypes.addressof(probe)), matrix=matrix)
    return dev.ibdev_name, str(dev.ipv4 or dev.ipv6)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


__all__ = ["TransferEngine"]
