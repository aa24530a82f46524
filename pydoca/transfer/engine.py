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
from ..peer.errors import Disconnected, HandlerError, PeerError
from ..address import split_address
from ..rdma.batch import TaskBatch
from .batch import Op, Request, TransferBatch, _Part

_OP_BY_NAME: Dict[str, Op] = {op.value: op for op in Op}    # "write" -> Op.WRITE without an enum call
from .errors import SegmentNotFound, StaleSegment, TransferError
from .metadata import PREFIX, MetadataStore
from .stores import open_store
from .segments import LocalSegment, RemoteSegment, as_memory
from .topology import Matrix, choose_device, memory_numa

log = get_logger()
SEGMENTS = f"{PREFIX}/segments/"
STAGE_CHUNK = 64 << 10        # small transfers from/to unregistered memory go through staging chunks


class _Route:
    """One cached connection: from local device ``local`` to the peer's path (device) ``path``."""

    def __init__(self, conn: Requester, local: int, path: int) -> None:
        self.conn, self.local, self.path = conn, local, path


class _Peer:
    """The cached connections to one peer engine, spread over local devices and the peer's paths."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.paths: List[str] = [owner]          # the peer's serving addresses, learned from a descriptor
        self.routes: List[_Route] = []
        self.instance = ""
        self.used = time.monotonic()
        self.next = 0


class TransferEngine:
    """Register segments, open peers' segments, submit batches of reads and writes."""

    def __init__(self, listen: str = "127.0.0.1:0", *, metadata: Union[MetadataStore, str, None] = None,
                 device: Optional[str] = None, connections_per_peer: int = 2, slice_size: int = 1 << 20,
                 max_inflight: int = 512, token: Optional[bytes] = None, idle_timeout: float = 60.0,
                 timeout: float = 10.0, staging_size: int = 4 << 20, topology: Optional[Matrix] = None,
                 devices: Optional[Sequence[str]] = None) -> None:
        """``listen`` on a wildcard address (``0.0.0.0:PORT``) without ``device`` picks the device by
        topology: ``topology`` (a priority matrix, see pydoca.transfer.topology), else NUMA locality.
        ``devices``: more local devices (ibdev or interface names) to serve on (same port, each device's
        address) and to spread outgoing connections over."""
        host, port = split_address(listen, allow_zero=True)      # port 0: a free one
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
        self.responders = [self._responder(f"{self.host}:{self.port}", device)]
        for name in devices or ():
            ibdev, extra = _device_address(name)
            if extra != self.host:
                self.responders.append(self._responder(f"{extra}:{self.port}", ibdev))
        self.responder = self.responders[0]
        for resp in self.responders[1:]:
            resp.instance = self.responder.instance          # one engine, one instance on every path
        self.stats: Dict[Tuple[int, int], int] = {}      # slices sent per (local device, peer path)

    def _responder(self, listen: str, device: Optional[str]) -> Responder:
        # idle_evict=None: peers move their data with one-sided operations this responder never sees, so a
        # connection with no lookup for a while may be in the middle of a transfer (peers close idle
        # connections themselves, after idle_timeout)
        resp = Responder(listen, name="pydoca_transfer", device=device, token=self.token, workers=2,
                         max_connections=64, idle_evict=None)
        resp.add_endpoint("/segment", "call", 64 << 10, self._serve_segment, concurrency=4)
        resp.add_endpoint("/segments", "call", 1 << 20, self._serve_list)
        return resp

    @property
    def address(self) -> str:
        """``HOST:PORT`` peers use to reach this engine (the owner part of its segments' names)."""
        return f"{self.host}:{self.port}"

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> "TransferEngine":
        """Listen and serve segment lookups on a background thread."""
        if self._thread is not None:
            return self
        for resp in self.responders:
            resp.start()
        self.devs = [r.dev for r in self.responders]
        self.dev = self.devs[0]
        self.paths = [r.address for r in self.responders]
        self.inventory = BufferInventory(max(1024, 8 * self.max_inflight))
        self._stage = np.zeros(self.staging_size, dtype=np.uint8)
        self._stage_maps = [MemoryMap(d, self._stage, access=Access.LOCAL_READ_WRITE) for d in self.devs]
        self._stage_free = list(range(self.staging_size // STAGE_CHUNK))
        self._threads = [threading.Thread(target=r.serve_forever, name=f"pydoca-transfer-{i}", daemon=True)
                         for i, r in enumerate(self.responders)]
        for t in self._threads:
            t.start()
        self._thread = self._threads[0]
        log.info("transfer engine serving", address=self.address, paths=self.paths,
                 devices=[d.info.ibdev_name for d in self.devs])
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
            remote.close()
        self._remotes.clear()
        for peer in list(self._peers.values()):
            self._drop(peer)
        for resp in self.responders:
            resp.stop()
        for t in getattr(self, "_threads", []):
            t.join(5)
        if self._thread is not None:
            for m in self._stage_maps:
                m.close()
            self.inventory.close()
        for resp in self.responders:
            resp.close()
        self.store.close()

    # -- local segments ------------------------------------------------------------
    def register(self, name: str, obj: Any) -> LocalSegment:
        """Register ``obj`` (buffer protocol or DLPack, zero-copy, kept alive) as segment ``name`` and publish it."""
        self._check()
        if not name or "/" in name:
            raise ValueError(f"segment name {name!r} must be non-empty and contain no '/'")
        if name in self.segments:
            raise TransferError(f"segment {name!r} is already registered; unregister it first")
        seg = LocalSegment(name, obj, self.devs, f"{self.responder.instance}:{next(self._gen)}")
        self.segments[name] = seg
        desc = seg.descriptor(self.paths)
        desc["paths"] = [{"address": p["address"]} for p in desc["paths"]]   # access blobs never go into metadata
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
        name = payload.decode("utf-8", errors="replace")
        seg = self.segments.get(name)
        if seg is None:
            # a peer's mistake, not this engine's: one log line, and an answer the peer turns into SegmentNotFound
            log.info("segment lookup: no such segment", segment=name[:100], serving=len(self.segments))
            return json.dumps({"error": "no such segment", "segment": name[:100],
                               "segments": sorted(self.segments)[:20]}).encode()
        return json.dumps(seg.descriptor(self.paths)).encode()

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
        self._reap()
        for attempt in (0, 1):
            peer = self._peer(owner)
            route = peer.routes[0]
            try:
                desc = json.loads(route.conn.call("/segment", name.encode(), timeout=self.timeout))
                if "error" in desc:
                    have = ", ".join(desc.get("segments") or []) or "none"
                    raise SegmentNotFound(f"{owner} has no segment {name!r} (it serves: {have})")
                break
            except HandlerError as exc:
                raise SegmentNotFound(f"{owner} has no segment {name!r}: {exc}") from None
            except Disconnected:
                # the connection died (the peer restarted) before its end was delivered to us: the
                # question never left, so forget that route and ask once more on a fresh connection
                if attempt:
                    raise
                route.conn.close()
                peer.routes.remove(route)
        paths = [(str(p["address"]), base64.b64decode(p["mmap"])) for p in desc["paths"]]
        if [a for a, _ in paths] != peer.paths:
            peer.paths = [a for a, _ in paths]
            self._peer(owner)                                 # spread the pool over the peer's paths too
        seg = RemoteSegment(name, owner, int(desc["length"]), str(desc["generation"]), bool(desc["readonly"]), paths)
        self._remotes = [r for r in self._remotes if not r.stale]
        self._remotes.append(seg)
        return seg

    # -- connections -------------------------------------------------------------------
    def _peer(self, owner: str) -> _Peer:
        peer = self._peers.get(owner)
        if peer is None:
            peer = self._peers[owner] = _Peer(owner)
        for dead in [r for r in peer.routes if r.conn.closed or r.conn._fatal is not None]:
            dead.conn.close()
            peer.routes.remove(dead)
        want = max(self.connections_per_peer, len(self.devs), len(peer.paths))
        have = {(r.local, r.path) for r in peer.routes}
        for k in range(want):                                  # routes k: local device k, peer path k (mod)
            local, path = k % len(self.devs), k % len(peer.paths)
            if sum(1 for r in peer.routes if (r.local, r.path) == (local, path)) >= \
                    sum(1 for j in range(want) if (j % len(self.devs), j % len(peer.paths)) == (local, path)):
                continue
            try:
                conn = Requester.connect(peer.paths[path], dev=self.devs[local], token=self.token,
                                         timeout=self.timeout, max_tasks=self.max_inflight,
                                         name=f"transfer@{self.address}")
            except PeerError as exc:
                if peer.routes:
                    log.warning("a path to a peer engine is unreachable", peer=owner, path=peer.paths[path],
                                error=str(exc))
                    continue
                raise TransferError(f"cannot reach peer engine {owner}: {exc}") from None
            if peer.instance and conn.instance != peer.instance:
                log.info("peer engine restarted: its old segments are stale", peer=owner)
            peer.instance = conn.instance
            peer.routes.append(_Route(conn, local, path))
            have.add((local, path))
        peer.used = time.monotonic()
        return peer

    def _drop(self, peer: _Peer) -> None:
        for r in peer.routes:
            r.conn.close()
        peer.routes.clear()
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
        self._reap()
        peers: Dict[str, _Peer] = {}                            # looked up once per batch
        lanes: Dict[Tuple[int, int, int, bool], Dict[str, Any]] = {}  # (remote, segment, route, read?) -> plan
        for i, req in enumerate(requests):
            try:
                self._plan(i, req, plan, conns, cleanup, peers, lanes)
            except (TransferError, ValueError) as exc:
                early.append((i, exc))
        parts: List[_Part] = []
        for (cid, is_read, _, _), sl in plan.items():
            conn = conns[cid]
            self.stats[sl["route"]] = self.stats.get(sl["route"], 0) + len(sl["size"])
            batch = TaskBatch.ranges(conn.rdma, conn._conn(), "read" if is_read else "write", self.inventory,
                                     sl["lmap"], sl["loff"], sl["rmap"], sl["roff"], sl["size"])
            parts.append(_Part(batch, np.array(sl["owner"], dtype=np.int64), np.array(sl["size"], dtype=np.int64)))
            batch.submit()
        return TransferBatch(requests, parts, list({id(c.pe): c.pe for c in conns.values()}.values()), cleanup,
                             early)

    def _plan(self, i: int, req: Request, plan: Dict[Tuple[int, bool, int, int], Dict[str, Any]],
              conns: Dict[int, Requester], cleanup: List[Callable[[], None]], peers: Dict[str, _Peer],
              lanes: Dict[Tuple[int, int, int, bool], Dict[str, Any]]) -> None:
        op = req.op if req.op.__class__ is Op else _OP_BY_NAME.get(req.op) or Op(req.op)
        remote = self.open_segment(req.remote) if isinstance(req.remote, str) else req.remote
        remote.check()
        if req.length <= 0 or req.remote_offset < 0 or req.remote_offset + req.length > remote.length:
            raise TransferError(f"{req.length} bytes at offset {req.remote_offset} do not fit {remote.ref} "
                                f"({remote.length} bytes)")
        if op is Op.WRITE and remote.readonly:
            raise TransferError(f"{remote.ref} is read-only (registered from a read-only buffer)")
        lmap, loff = self._local(req, op, cleanup)
        peer = peers.get(remote.owner)
        if peer is None:
            peer = peers[remote.owner] = self._peer(remote.owner)
        if not remote.generation.startswith(peer.instance + ":") and remote.generation != peer.instance:
            remote.close()                                    # stale: refused before anything is written
            remote.check()
        n = len(peer.routes)
        is_read = op is Op.READ
        rpath = len(remote.paths) - 1
        size, length, roff0 = self.slice_size, req.length, req.remote_offset
        seg = getattr(lmap, "__self__", None)                 # a segment's maps (see _local): plan once a lane
        if length <= size and seg is not None:
            k = peer.next
            peer.next = (k + 1) % n
            lane = (id(remote), id(seg), k, is_read)
            sl = lanes.get(lane)
            if sl is None:
                route = peer.routes[k]
                sl = lanes[lane] = self._slice_plan(plan, conns, route, is_read, lmap(route.local),
                                                    remote.rmap(self.devs, route.local, min(route.path, rpath)))
            sl["loff"].append(loff)
            sl["roff"].append(roff0)
            sl["size"].append(length)
            sl["owner"].append(i)
            return
        for k, start in enumerate(range(0, length, size) if length > size else (0,)):
            route = peer.routes[(peer.next + k) % n]
            sl = self._slice_plan(plan, conns, route, is_read, lmap(route.local),
                                  remote.rmap(self.devs, route.local, min(route.path, rpath)))
            sl["loff"].append(loff + start)
            sl["roff"].append(roff0 + start)
            sl["size"].append(min(size, length - start))
            sl["owner"].append(i)
        peer.next = (peer.next + 1) % n

    @staticmethod
    def _slice_plan(plan: Dict[Tuple[int, bool, int, int], Dict[str, Any]], conns: Dict[int, Requester],
                    route: _Route, is_read: bool, lm: MemoryMap, rm: MemoryMap) -> Dict[str, Any]:
        """The slices going over ``route`` between ``lm`` and ``rm`` (one TaskBatch.ranges)."""
        key = (id(route.conn), is_read, id(lm), id(rm))
        sl = plan.get(key)
        if sl is None:
            conns[id(route.conn)] = route.conn
            sl = plan[key] = {"lmap": lm, "rmap": rm, "loff": [], "roff": [], "size": [], "owner": [],
                              "route": (route.local, route.path)}
        return sl

    def _local(self, req: Request, op: Op,
               cleanup: List[Callable[[], None]]) -> Tuple[Callable[[int], MemoryMap], int]:
        """The local memory of a request, per local device (a segment, its name, or a bytes-like: staged when
        small, else registered for the batch on the devices its slices use), and its offset."""
        local = req.local
        if isinstance(local, str):
            if local not in self.segments:
                raise SegmentNotFound(f"no local segment {local!r}")
            local = self.segments[local]
        if isinstance(local, LocalSegment):
            if req.local_offset < 0 or req.local_offset + req.length > local.length:
                raise TransferError(f"{req.length} bytes at offset {req.local_offset} do not fit local segment "
                                    f"{local.name} ({local.length} bytes)")
            return local.mmaps.__getitem__, req.local_offset
        view = as_memory(local)
        if req.local_offset + req.length > view.nbytes:
            raise TransferError(f"{req.length} bytes at offset {req.local_offset} do not fit the local buffer "
                                f"({view.nbytes} bytes)")
        if op is Op.READ and view.readonly:
            raise TransferError("a read needs a writable local buffer")
        if req.length <= STAGE_CHUNK and self._stage_free:
            start = self._staged(view[req.local_offset:req.local_offset + req.length], op, cleanup)
            return (lambda d: self._stage_maps[d]), start
        maps: Dict[int, MemoryMap] = {}
        access = Access.LOCAL_READ_ONLY if view.readonly else Access.LOCAL_READ_WRITE

        def on_device(d: int) -> MemoryMap:
            if d not in maps:
                maps[d] = MemoryMap(self.devs[d], view, access=access)
                cleanup.append(maps[d].close)
            return maps[d]
        return on_device, req.local_offset

    def _staged(self, view: memoryview, op: Op, cleanup: List[Callable[[], None]]) -> int:
        """A pre-registered staging chunk for a small transfer (no registration per batch): a write's bytes are
        copied in now; a read's are copied out when the batch is released. Returns its offset."""
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
        return start

    def transfer(self, requests: Sequence[Request], timeout: Optional[float] = 30.0) -> None:
        """Submit and wait; TransferError names the requests that failed."""
        self.submit(requests).result(timeout)

    def transports(self) -> Tuple[List[str], List[str]]:
        """The transports the cached connections use: softdoca's own link ("tcp", "shm") and, where a provider
        moves their one-sided operations (SOFTDOCA_PROVIDER, docs/providers.md), the provider's ("tcp",
        "posix,cma", "rc_mlx5", ...). Both empty on real DOCA, where the NIC moves the bytes."""
        from .._native import conn_transports
        links: List[str] = []
        provs: List[str] = []
        with self._lock:
            conns = [r.conn.conn for p in self._peers.values() for r in p.routes if getattr(r.conn, "conn", None)]
        for conn in conns:
            link, prov = conn_transports(getattr(conn, "_c", None))
            if link and link not in links:
                links.append(link)
            if prov and prov not in provs:
                provs.append(prov)
        return links, provs

    def __repr__(self) -> str:
        return f"<TransferEngine {self.address} segments={len(self.segments)} peers={len(self._peers)}>"


def _device_address(name: str) -> Tuple[str, str]:
    """(ibdev name, address it serves on) of a local device given by ibdev or interface name."""
    from ..device import devices
    for d in devices():
        if name in (d.ibdev_name, d.iface_name):
            if not (d.ipv4 or d.ipv6):
                raise TransferError(f"device {name} has no IP address to serve on")
            return d.ibdev_name, str(d.ipv4 or d.ipv6)
    raise TransferError(f"no DOCA device {name!r} (pydoca devices lists them)")


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
