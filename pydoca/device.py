"""DOCA devices: discovery (:func:`devices`) and opening (:class:`Device`).

Discovery takes a snapshot of every ``doca_devinfo`` into a frozen
:class:`DeviceInfo`, so no devinfo list outlives the call that created it.
"""
from __future__ import annotations

import ipaddress
import socket
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from pydoca._log import get_logger

from ._native import ffi, lib
from .errors import NotFoundError, check
from .resource import Resource

log = get_logger()


@dataclass(frozen=True)
class DeviceInfo:
    """A snapshot of one device's ``doca_devinfo`` getters (None: getter failed)."""

    ibdev_name: str
    iface_name: Optional[str]
    iface_index: Optional[int]
    ipv4: Optional[str]
    ipv6: Optional[str]
    mac: Optional[str]
    pci_addr: Optional[str]
    lid: Optional[int]
    active_rate: Optional[int]

    def as_dict(self) -> Dict[str, Any]:
        """Plain dict (for JSON output)."""
        return asdict(self)

    def describe(self) -> str:
        """One short human-readable line: ``ibdev (iface, ip)``."""
        extra = ", ".join(x for x in (self.iface_name, self.ipv4 or self.ipv6) if x)
        return f"{self.ibdev_name} ({extra})" if extra else self.ibdev_name


def _string(getter: Callable[..., int], devinfo: Any, size: int) -> Optional[str]:
    buf = ffi.new("char[]", size)
    if getter(devinfo, buf, size) != 0:
        return None
    return ffi.string(buf).decode(errors="replace") or None


def _raw(getter: Callable[..., int], devinfo: Any, size: int) -> Optional[bytes]:
    buf = ffi.new("uint8_t[]", size)
    if getter(devinfo, buf, size) != 0:
        return None
    return bytes(ffi.buffer(buf, size))


def _scalar(getter: Callable[..., int], devinfo: Any, ctype: str) -> Optional[int]:
    out = ffi.new(ctype)
    if getter(devinfo, out) != 0:
        return None
    return int(out[0])


def _read_info(devinfo: Any) -> DeviceInfo:
    """Snapshot one ``doca_devinfo*``."""
    ibdev = _string(lib.doca_devinfo_get_ibdev_name, devinfo, lib.DOCA_DEVINFO_IBDEV_NAME_SIZE)
    v4 = _raw(lib.doca_devinfo_get_ipv4_addr, devinfo, lib.DOCA_DEVINFO_IPV4_ADDR_SIZE)
    v6 = _raw(lib.doca_devinfo_get_ipv6_addr, devinfo, lib.DOCA_DEVINFO_IPV6_ADDR_SIZE)
    mac = _raw(lib.doca_devinfo_get_mac_addr, devinfo, lib.DOCA_DEVINFO_MAC_ADDR_SIZE)
    pci = ffi.new("char[]", lib.DOCA_DEVINFO_PCI_ADDR_SIZE)
    return DeviceInfo(
        ibdev_name=ibdev or "",
        iface_name=_string(lib.doca_devinfo_get_iface_name, devinfo, lib.DOCA_DEVINFO_IFACE_NAME_SIZE),
        iface_index=_scalar(lib.doca_devinfo_get_iface_index, devinfo, "uint32_t *"),
        ipv4=str(ipaddress.IPv4Address(v4)) if v4 is not None else None,
        ipv6=str(ipaddress.IPv6Address(v6)) if v6 is not None else None,
        mac=":".join(f"{b:02x}" for b in mac) if mac is not None else None,
        pci_addr=(ffi.string(pci).decode(errors="replace") or None)
        if lib.doca_devinfo_get_pci_addr_str(devinfo, pci) == 0 else None,
        lid=_scalar(lib.doca_devinfo_get_lid, devinfo, "uint16_t *"),
        active_rate=_scalar(lib.doca_devinfo_get_active_rate, devinfo, "uint64_t *"),
    )


class _DevinfoList:
    """The C devinfo list, alive only inside a with-block."""

    def __enter__(self) -> List[Any]:
        self._list = ffi.new("struct doca_devinfo ***")
        count = ffi.new("uint32_t *")
        check(lib.doca_devinfo_create_list(self._list, count), "doca_devinfo_create_list")
        return [self._list[0][i] for i in range(count[0])]

    def __exit__(self, *exc: object) -> None:
        check(lib.doca_devinfo_destroy_list(self._list[0]), "doca_devinfo_destroy_list")


def devices() -> List[DeviceInfo]:
    """Every DOCA device on this host, as snapshots."""
    with _DevinfoList() as entries:
        return [_read_info(devinfo) for devinfo in entries]


def _matcher(ibdev_name: Optional[str], iface: Optional[str], ip: Optional[str],
             pci: Optional[str]) -> Tuple[str, Callable[[Any, DeviceInfo], bool]]:
    given = {k: v for k, v in (("ibdev_name", ibdev_name), ("iface", iface), ("ip", ip), ("pci", pci))
             if v is not None}
    if len(given) != 1:
        raise ValueError("Device.open() needs exactly one of ibdev_name=, iface=, ip=, pci= "
                         f"(got {', '.join(given) or 'none'})")
    key, value = next(iter(given.items()))
    what = f"{key}={value!r}"
    if key == "ibdev_name":
        return what, lambda _d, info: info.ibdev_name == value
    if key == "iface":
        return what, lambda _d, info: info.iface_name == value
    if key == "ip":
        want = ipaddress.ip_address(value)  # ValueError on a malformed address
        return what, lambda _d, info: any(
            a is not None and ipaddress.ip_address(a) == want for a in (info.ipv4, info.ipv6))

    def pci_equal(devinfo: Any, _info: DeviceInfo) -> bool:
        equal = ffi.new("uint8_t *")
        return lib.doca_devinfo_is_equal_pci_addr(devinfo, value.encode(), equal) == 0 and bool(equal[0])
    return what, pci_equal


def _close_dev(handle: Any) -> None:
    check(lib.doca_dev_close(handle), "doca_dev_close")


class Device(Resource):
    """An opened DOCA device (``doca_dev``); parent of memory maps and contexts."""

    def __init__(self, handle: Any, info: DeviceInfo) -> None:
        """Wrap an opened handle; use :meth:`Device.open` instead."""
        super().__init__()
        self._handle = handle
        self._info = info
        self._arm(lambda: _close_dev(handle))

    @classmethod
    def open(cls, *, ibdev_name: Optional[str] = None, iface: Optional[str] = None,
             ip: Optional[str] = None, pci: Optional[str] = None) -> "Device":
        """Open the device matching exactly one criterion (NotFoundError if none)."""
        what, match = _matcher(ibdev_name, iface, ip, pci)
        seen: List[DeviceInfo] = []
        with _DevinfoList() as entries:
            for devinfo in entries:
                info = _read_info(devinfo)
                if match(devinfo, info):
                    out = ffi.new("struct doca_dev **")
                    check(lib.doca_dev_open(devinfo, out), f"doca_dev_open({info.ibdev_name})")
                    log.debug("device opened", device=info.ibdev_name, criterion=what)
                    return cls(out[0], info)
                seen.append(info)
        available = "; ".join(i.describe() for i in seen) or "none"
        raise NotFoundError(f"no DOCA device matches {what} (available: {available})")

    @classmethod
    def open_route(cls, host: str) -> "Device":
        """Open the device a connection with ``host`` uses: the one owning
        ``host`` when it is a local address (an unspecified one: lo's), else the
        one owning the source address of the kernel's route to it."""
        from .address import resolve
        ip = resolve(host)                       # UnknownHost names the host
        if ipaddress.ip_address(ip).is_unspecified:
            return cls.open(iface="lo")
        try:
            return cls.open(ip=ip)
        except NotFoundError:
            pass
        with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((ip, 9))                    # asks the routing table; sends nothing
            local = str(s.getsockname()[0])
        try:
            return cls.open(ip=local)
        except NotFoundError:
            raise NotFoundError(f"no DOCA device has address {local}, the source of the route to {host} "
                                "(`pydoca devices` lists them)") from None

    @property
    def info(self) -> DeviceInfo:
        """The snapshot taken when the device was opened."""
        return self._info

    @property
    def handle(self) -> Any:
        """The ``struct doca_dev *`` cdata (for other pydoca modules)."""
        self._check_open()
        return self._handle

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Device {self._info.describe()} {state}>"


__all__ = ["Device", "DeviceInfo", "devices"]
