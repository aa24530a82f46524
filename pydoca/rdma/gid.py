"""GID table of a device and the automatic RoCE v2 GID choice.

DOCA returns raw GIDs but not their type. On real hosts the type comes from
sysfs (``/sys/class/infiniband/<ibdev>/ports/1/gid_attrs/types/<i>``);
softdoca's GIDs are RoCE v2 GIDs derived from the interface addresses.
"""
from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional

from pydoca._log import get_logger

from .._native import backend, ffi, lib
from ..errors import check

if TYPE_CHECKING:
    from ..device import Device, DeviceInfo

log = get_logger()
SYSFS = "/sys/class/infiniband"


@dataclass(frozen=True)
class Gid:
    index: int
    raw: bytes
    type: Optional[str]       # "RoCE v2", "RoCE v1", "IB" or None when unknown

    @property
    def ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        """The address the GID encodes (IPv4 for IPv4-mapped GIDs)."""
        v6 = ipaddress.IPv6Address(self.raw)
        return v6.ipv4_mapped or v6

    @property
    def link_local(self) -> bool:
        return self.raw[:2] == b"\xfe\x80"

    @property
    def empty(self) -> bool:
        return not any(self.raw)

    def __str__(self) -> str:
        return str(ipaddress.IPv6Address(self.raw))


def _gid_type(ibdev: str, index: int) -> Optional[str]:
    if backend.name == "soft":
        return "RoCE v2"
    path = os.path.join(SYSFS, ibdev, "ports", "1", "gid_attrs", "types", str(index))
    try:
        with open(path) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def gid_table(dev: "Device") -> List[Gid]:
    """Every GID of ``dev`` with its type where known."""
    info: "DeviceInfo" = dev.info
    c_info = lib.doca_dev_as_devinfo(dev.handle)
    size = ffi.new("uint32_t *")
    check(lib.doca_rdma_cap_get_gid_table_size(c_info, size), "doca_rdma_cap_get_gid_table_size")
    n = int(size[0])
    if n == 0:
        return []
    arr = ffi.new("struct doca_rdma_gid[]", n)
    check(lib.doca_rdma_cap_get_gid(c_info, 0, n, arr), "doca_rdma_cap_get_gid")
    return [Gid(i, bytes(ffi.buffer(arr[i].raw, 16)), _gid_type(info.ibdev_name, i)) for i in range(n)]


def choose_gid_index(dev: "Device") -> Optional[int]:
    """Prefer a RoCE v2 GID on the device's IPv4 address, never link-local;
    then any RoCE v2 non-link-local GID; None leaves DOCA's default."""
    try:
        table = [g for g in gid_table(dev) if not g.empty]
    except Exception as exc:  # noqa: BLE001 - capability missing: keep DOCA's default
        log.debug("gid table unavailable", error=str(exc))
        return None
    v4 = dev.info.ipv4
    ranked = sorted(
        (g for g in table if not g.link_local),
        key=lambda g: (g.type != "RoCE v2", not (v4 is not None and str(g.ip) == v4), g.index),
    )
    if not ranked:
        log.info("no usable GID found, keeping the default index", device=dev.info.ibdev_name)
        return None
    best = ranked[0]
    log.info("chose GID", device=dev.info.ibdev_name, index=best.index, gid=str(best), type=best.type)
    return best.index
