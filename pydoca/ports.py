"""Ports of the host's RDMA devices: state, link layer, active MTU and GID table.

DOCA says little about ports and nothing about GID types, so these facts come
from below DOCA, first source that knows the device wins:

1. pyverbs (rdma-core's Python bindings, the optional extra ``pydoca[verbs]``):
   ``Context(name=...)``, ``query_port``, ``query_gid``, ``query_gid_type``;
2. sysfs: ``<root>/class/infiniband/<dev>/ports/<n>/{state,link_layer,gids/<i>,
   gid_attrs/types/<i>,gid_attrs/ndevs/<i>}``, root ``/sys`` unless
   ``PYDOCA_SYSFS_ROOT`` (or ``sysfs_root=``) says otherwise. The kernel has
   no ``active_mtu`` file: an ``active_mtu`` file is read where one exists,
   else a RoCE port's MTU is derived from its netdev's MTU as the kernel does
   (the largest IB MTU that fits with the RoCE headers);
3. nothing: softdoca's devices are software devices, with no ports.

:func:`choose_gid` picks the GID a RoCE connection should use and logs which
entry and why (structlog event ``chose GID``).
"""
from __future__ import annotations

import ipaddress
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ._log import get_logger

log = get_logger("pydoca.ports")

SYSFS_ENV = "PYDOCA_SYSFS_ROOT"
ROCE_V2 = "RoCE v2"
ROCE_V1 = "RoCE v1"
IB = "IB"

# ibv_port_state, ibv_port_attr.link_layer and ibv_mtu (rdma-core's verbs.h).
_PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
_LINK_LAYERS = {1: "InfiniBand", 2: "Ethernet"}
_IB_MTUS = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
# ibv_query_gid_type: IBV_GID_TYPE_SYSFS_IB_ROCE_V1 = 0, IBV_GID_TYPE_SYSFS_ROCE_V2 = 1.
_VERBS_GID_ROCE_V2 = 1
# What a RoCE packet carries besides its payload (GRH, UDP, BTH, XRC and AtomicETH
# extension headers, ICRC): the kernel's iboe_get_mtu() subtracts the same.
_ROCE_OVERHEAD = 40 + 8 + 12 + 4 + 28 + 4


@dataclass(frozen=True)
class GidEntry:
    """One non-empty entry of a port's GID table."""

    index: int
    gid: str                      # IPv6 text, compressed ('::ffff:10.0.0.1', 'fe80::1')
    type: Optional[str]           # "RoCE v2", "RoCE v1", "IB", or None when unknown
    netdev: Optional[str] = None  # the network device of a RoCE GID

    @property
    def address(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        """The address the GID encodes (IPv4 for an IPv4-mapped GID)."""
        v6 = ipaddress.IPv6Address(self.gid)
        return v6.ipv4_mapped or v6

    @property
    def ipv4(self) -> Optional[str]:
        v4 = ipaddress.IPv6Address(self.gid).ipv4_mapped
        return None if v4 is None else str(v4)

    @property
    def link_local(self) -> bool:
        return ipaddress.IPv6Address(self.gid).is_link_local

    def as_dict(self) -> Dict[str, Any]:
        return {**asdict(self), "ipv4": self.ipv4}


@dataclass(frozen=True)
class PortInfo:
    """One port of an RDMA device."""

    device: str
    port: int
    state: str                    # "ACTIVE", "DOWN", "INIT", "ARMED", ... or "UNKNOWN"
    link_layer: str               # "Ethernet", "InfiniBand" or "Unknown"
    active_mtu: Optional[int]     # bytes (256 to 4096), None when unknown
    gids: Tuple[GidEntry, ...] = ()
    netdev: Optional[str] = None
    mtu_source: Optional[str] = None   # where active_mtu comes from

    @property
    def active(self) -> bool:
        return self.state in ("ACTIVE", "ACTIVE_DEFER")

    def as_dict(self) -> Dict[str, Any]:
        out = asdict(self)
        out["gids"] = [g.as_dict() for g in self.gids]
        return out


@dataclass(frozen=True)
class DevicePorts:
    """The ports of one device and where they were read from."""

    device: str
    source: str                   # "pyverbs", "sysfs" or "none"
    detail: str                   # why that source (and what the others said)
    ports: Tuple[PortInfo, ...] = field(default_factory=tuple)

    def as_dict(self) -> Dict[str, Any]:
        return {"device": self.device, "source": self.source, "detail": self.detail,
                "ports": [p.as_dict() for p in self.ports]}


@dataclass(frozen=True)
class GidChoice:
    """The GID :func:`choose_gid` picked, and why."""

    device: str
    port: int
    entry: GidEntry
    reason: str

    @property
    def index(self) -> int:
        return self.entry.index

    def as_dict(self) -> Dict[str, Any]:
        return {"device": self.device, "port": self.port, "index": self.entry.index, "gid": self.entry.gid,
                "type": self.entry.type, "reason": self.reason}


# -- sources -------------------------------------------------------------------

def sysfs_root(root: Optional[str] = None) -> str:
    """The sysfs root: ``root``, else $PYDOCA_SYSFS_ROOT, else /sys."""
    return root or os.environ.get(SYSFS_ENV) or "/sys"


def _ib_dir(root: Optional[str]) -> str:
    return os.path.join(sysfs_root(root), "class", "infiniband")


def pyverbs_status() -> Tuple[bool, str]:
    """Whether pyverbs imports, and what it is (or why not)."""
    try:
        import pyverbs.device  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken rdma-core install
        return False, f"pyverbs not importable: {type(exc).__name__}: {exc}"
    import pyverbs

    return True, f"pyverbs {getattr(pyverbs, '__version__', '')}".rstrip()


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _gid_text(text: str) -> Optional[str]:
    """Compressed IPv6 text of a GID; None for an empty (all-zero) or malformed one."""
    try:
        addr = ipaddress.IPv6Address(text.strip())
    except ValueError:
        return None
    if int(addr) == 0:
        return None
    v4 = addr.ipv4_mapped
    return f"::ffff:{v4}" if v4 is not None else str(addr)


def _gid_type(text: Optional[str], link_layer: str) -> Optional[str]:
    """sysfs/verbs GID type -> "RoCE v2" | "RoCE v1" | "IB"."""
    if not text:
        return None
    t = text.strip().lower()
    if "v2" in t:
        return ROCE_V2
    if "roce" in t or t == "ib":               # "IB/RoCE v1": the link layer decides
        return IB if link_layer == "InfiniBand" else ROCE_V1
    return None


def roce_mtu(netdev_mtu: int) -> Optional[int]:
    """The active IB MTU of a RoCE port whose netdev has MTU ``netdev_mtu`` (kernel's iboe_get_mtu)."""
    room = netdev_mtu - _ROCE_OVERHEAD
    for mtu in (4096, 2048, 1024, 512, 256):
        if room >= mtu:
            return mtu
    return None


def _int_tail(text: Optional[str]) -> Optional[int]:
    if not text:
        return None
    tail = text.replace(":", " ").split()[-1]
    return int(tail) if tail.isdigit() else None


def _sysfs_port(device: str, port_dir: str, port: int, root: Optional[str]) -> PortInfo:
    state_text = _read(os.path.join(port_dir, "state")) or ""
    state = state_text.split(":", 1)[-1].strip().upper() or "UNKNOWN"
    link = _read(os.path.join(port_dir, "link_layer")) or "Unknown"
    gids: List[GidEntry] = []
    gid_dir = os.path.join(port_dir, "gids")
    try:
        names = sorted((n for n in os.listdir(gid_dir) if n.isdigit()), key=int)
    except OSError:
        names = []
    for name in names:
        text = _gid_text(_read(os.path.join(gid_dir, name)) or "")
        if text is None:
            continue
        gids.append(GidEntry(int(name), text,
                             _gid_type(_read(os.path.join(port_dir, "gid_attrs", "types", name)), link),
                             _read(os.path.join(port_dir, "gid_attrs", "ndevs", name)) or None))
    netdev = next((g.netdev for g in gids if g.netdev), None)
    mtu = _int_tail(_read(os.path.join(port_dir, "active_mtu")))
    mtu_source = "sysfs active_mtu" if mtu is not None else None
    if mtu is None and netdev and link == "Ethernet":
        ndev_mtu = _int_tail(_read(os.path.join(sysfs_root(root), "class", "net", netdev, "mtu")))
        if ndev_mtu is not None:
            mtu = roce_mtu(ndev_mtu)
            mtu_source = f"netdev {netdev} mtu {ndev_mtu}"
    return PortInfo(device, port, state, link, mtu, tuple(gids), netdev, mtu_source)


def read_sysfs(device: str, root: Optional[str] = None) -> Optional[Tuple[PortInfo, ...]]:
    """The ports of ``device`` from sysfs; None when sysfs has no such RDMA device."""
    ports_dir = os.path.join(_ib_dir(root), device, "ports")
    if not os.path.isdir(os.path.join(_ib_dir(root), device)):
        return None
    try:
        numbers = sorted(int(n) for n in os.listdir(ports_dir) if n.isdigit())
    except OSError:
        numbers = []
    return tuple(_sysfs_port(device, os.path.join(ports_dir, str(n)), n, root) for n in numbers)


def read_pyverbs(device: str, root: Optional[str] = None) -> Tuple[PortInfo, ...]:
    """The ports of ``device`` from pyverbs (raises when pyverbs or the device is missing).

    The netdev of each GID is not a verbs fact: it is read from sysfs where present.
    """
    from pyverbs.device import Context

    ctx = Context(name=device)
    try:
        out: List[PortInfo] = []
        for port in range(1, int(ctx.query_device().phys_port_cnt) + 1):
            attr = ctx.query_port(port)
            link = _LINK_LAYERS.get(int(attr.link_layer), "Unknown")
            gid_attrs = os.path.join(_ib_dir(root), device, "ports", str(port), "gid_attrs")
            gids: List[GidEntry] = []
            for index in range(int(attr.gid_tbl_len)):
                try:
                    text = _gid_text(str(ctx.query_gid(port, index)))
                except Exception:  # noqa: BLE001 - an unreadable entry is an empty one
                    continue
                if text is None:
                    continue
                try:
                    verbs_type: Optional[str] = ("RoCE v2" if int(ctx.query_gid_type(port, index))
                                                 == _VERBS_GID_ROCE_V2 else "IB/RoCE v1")
                except Exception:  # noqa: BLE001
                    verbs_type = None
                gids.append(GidEntry(index, text, _gid_type(verbs_type, link),
                                     _read(os.path.join(gid_attrs, "ndevs", str(index))) or None))
            out.append(PortInfo(device, port, _PORT_STATES.get(int(attr.state), "UNKNOWN"), link,
                                _IB_MTUS.get(int(attr.active_mtu)), tuple(gids),
                                next((g.netdev for g in gids if g.netdev), None), "pyverbs"))
        return tuple(out)
    finally:
        ctx.close()


def device_ports(device: str, *, software: bool = False, sysfs_root: Optional[str] = None,
                 use_pyverbs: bool = True) -> DevicePorts:
    """The ports of ``device``: from pyverbs, else sysfs, else none (``software``: a softdoca device)."""
    if software:
        return DevicePorts(device, "none", "software device (softdoca), no ports")
    notes: List[str] = []
    if use_pyverbs:
        ok, what = pyverbs_status()
        if ok:
            try:
                ports = read_pyverbs(device, sysfs_root)
            except Exception as exc:  # noqa: BLE001 - e.g. the device is not a verbs device
                notes.append(f"{what}: {type(exc).__name__}: {exc}")
            else:
                result = DevicePorts(device, "pyverbs", what, ports)
                log.debug("ports read", device=device, source=result.source, detail=result.detail)
                return result
        else:
            notes.append(what)
    where = os.path.join(_ib_dir(sysfs_root), device)
    found = read_sysfs(device, sysfs_root)
    if found is not None:
        result = DevicePorts(device, "sysfs", "; ".join([where, *notes]), found)
    else:
        result = DevicePorts(device, "none", "; ".join([f"no RDMA device {device} in {where}", *notes]))
    log.debug("ports read", device=device, source=result.source, detail=result.detail)
    return result


def rdma_devices(sysfs_root: Optional[str] = None, *, use_pyverbs: bool = True) -> List[str]:
    """Names of the host's RDMA devices (pyverbs' device list and sysfs, merged)."""
    names: set[str] = set()
    try:
        names.update(n for n in os.listdir(_ib_dir(sysfs_root)) if not n.startswith("."))
    except OSError:
        pass
    if use_pyverbs and pyverbs_status()[0]:
        try:
            from pyverbs.device import get_device_list

            for dev in get_device_list():
                raw = dev.name
                names.add(raw.decode() if isinstance(raw, bytes) else str(raw))
        except Exception:  # noqa: BLE001 - sysfs still answers
            pass
    return sorted(names)


def scan(sysfs_root: Optional[str] = None, *, use_pyverbs: bool = True) -> List[DevicePorts]:
    """:func:`device_ports` of every RDMA device of the host."""
    return [device_ports(name, sysfs_root=sysfs_root, use_pyverbs=use_pyverbs)
            for name in rdma_devices(sysfs_root, use_pyverbs=use_pyverbs)]


# -- the GID choice ----------------------------------------------------------------

def _rank(entry: GidEntry, ipv4: Optional[str]) -> Optional[Tuple[int, str]]:
    """(rank, reason) of a GID on an active port; None when it is never chosen."""
    if entry.type == ROCE_V2:
        if entry.ipv4 is not None:
            if ipv4 is not None and entry.ipv4 == ipv4:
                return 0, f"RoCE v2 IPv4-mapped GID of the interface address {ipv4}"
            why = (f"no RoCE v2 GID carries the interface address {ipv4}" if ipv4 is not None
                   else "no interface IPv4 address to match")
            return 1, f"RoCE v2 IPv4-mapped GID ({why})"
        if entry.link_local:
            return None                        # a link-local RoCE v2 GID does not route
        return 2, "RoCE v2 IPv6 GID (no RoCE v2 IPv4-mapped GID on an active port)"
    if entry.type == ROCE_V1:
        return 3, "RoCE v1 GID (no RoCE v2 GID on an active port)"
    if entry.type == IB:
        return 3, "IB GID (InfiniBand port)"
    return 4, "GID of unknown type (no typed GID on an active port)"


def choose_gid(ports: Iterable[PortInfo], ipv4: Optional[str] = None, *,
               device: Optional[str] = None) -> Optional[GidChoice]:
    """The GID to use on these ports, logging which entry and why (None when none fits).

    Only ACTIVE ports count. Order: the RoCE v2 IPv4-mapped GID of ``ipv4`` (the
    interface's address), any RoCE v2 IPv4-mapped GID, a RoCE v2 IPv6 GID that
    is not link-local, then RoCE v1 / IB, then untyped ones; lowest port and
    index first within each.
    """
    ports = list(ports)
    name = device or (ports[0].device if ports else "?")
    inactive = [f"{p.port} {p.state}" for p in ports if not p.active]
    best: Optional[Tuple[Tuple[int, int, int], PortInfo, GidEntry, str]] = None
    for p in ports:
        if not p.active:
            continue
        for g in p.gids:
            ranked = _rank(g, ipv4)
            if ranked is None:
                continue
            key = (ranked[0], p.port, g.index)
            if best is None or key < best[0]:
                best = (key, p, g, ranked[1])
    if best is None:
        why = ("no ports" if not ports else "no ACTIVE port" if len(inactive) == len(ports)
               else "no usable GID on an ACTIVE port (RoCE v2 link-local GIDs are never chosen)")
        log.warning("no GID chosen", device=name, reason=why, ports_not_active=inactive or None)
        return None
    _, port, entry, reason = best
    if inactive:
        reason += f"; skipped port(s) not ACTIVE: {', '.join(inactive)}"
    choice = GidChoice(name, port.port, entry, reason)
    log.info("chose GID", device=name, port=port.port, index=entry.index, gid=entry.gid, type=entry.type,
             reason=reason)
    return choice


__all__ = ["DevicePorts", "GidChoice", "GidEntry", "IB", "PortInfo", "ROCE_V1", "ROCE_V2", "SYSFS_ENV",
           "choose_gid", "device_ports", "pyverbs_status", "rdma_devices", "read_pyverbs", "read_sysfs",
           "roce_mtu", "scan", "sysfs_root"]

