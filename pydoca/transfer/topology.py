"""Device choice by topology: NUMA locality of memory and devices, from sysfs.

A device's NUMA node comes from its PCI function (``/sys/bus/pci/devices/
PCI/numa_node``) or, for softdoca devices that map to network interfaces,
from the interface (``/sys/class/net/IFACE/device/numa_node``); -1 means
unknown (loopback, virtual devices). A memory range's node is asked from the
kernel (``move_pages`` with no target: a query). A user-supplied matrix
(``{"numa:0": ["mlx5_0"], "*": ["mlx5_1"]}``, first match wins) overrides the
automatic choice; the choice and why is logged.
"""
from __future__ import annotations

import ctypes
import os
from typing import Any, Dict, List, Optional, Sequence

from pydoca._log import get_logger

log = get_logger()
Matrix = Dict[str, List[str]]
_SYS_MOVE_PAGES = {"x86_64": 279, "aarch64": 239}


def _read_int(path: str) -> int:
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return -1


def device_numa(info: Any) -> int:
    """NUMA node of a device (a pydoca DeviceInfo), -1 when unknown."""
    pci = getattr(info, "pci_addr", None)
    if pci and os.path.exists(f"/sys/bus/pci/devices/{pci}/numa_node"):
        return _read_int(f"/sys/bus/pci/devices/{pci}/numa_node")
    iface = getattr(info, "iface_name", None)
    if iface:
        return _read_int(f"/sys/class/net/{iface}/device/numa_node")
    return -1


def memory_numa(address: int) -> int:
    """NUMA node of the page at ``address`` (touched memory only), -1 when unknown."""
    nr = _SYS_MOVE_PAGES.get(os.uname().machine)
    if nr is None:
        return -1
    page = address & ~(os.sysconf("SC_PAGE_SIZE") - 1)
    pages = (ctypes.c_void_p * 1)(page)
    status = (ctypes.c_int * 1)(-1)
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.syscall(nr, 0, 1, pages, None, status, 0)
    return int(status[0]) if rc == 0 and status[0] >= 0 else -1


def choose_device(devices: Sequence[Any], *, memory_node: int = -1, matrix: Optional[Matrix] = None,
                  want_ip: bool = True) -> Any:
    """The device to use for memory on ``memory_node``: the matrix's first present entry for
    ``numa:N`` (then ``*``), else a device on the same node, else the first with an address."""
    usable = [d for d in devices if not want_ip or d.ipv4 or d.ipv6]
    if not usable:
        raise LookupError("no DOCA device with an IP address")
    by_name = {d.ibdev_name: d for d in usable}
    by_name.update({d.iface_name: d for d in usable if d.iface_name})
    for key in (f"numa:{memory_node}", "*"):
        for name in (matrix or {}).get(key, []):
            if name in by_name:
                log.info("device chosen by the topology matrix", device=by_name[name].ibdev_name, rule=key)
                return by_name[name]
    if memory_node >= 0:
        local = [d for d in usable if device_numa(d) == memory_node]
        if local:
            log.info("device chosen by NUMA locality", device=local[0].ibdev_name, numa=memory_node)
            return local[0]
    log.info("device chosen: first with an address (NUMA locality unknown)", device=usable[0].ibdev_name)
    return usable[0]


__all__ = ["Matrix", "choose_device", "device_numa", "memory_numa"]
