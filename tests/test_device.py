"""Device discovery and opening."""
from __future__ import annotations

import dataclasses
import re
from typing import Callable

import pytest

from pydoca.device import Device, DeviceInfo, devices
from pydoca.errors import ClosedError, NotFoundError


def _lo() -> DeviceInfo:
    found = [d for d in devices() if d.iface_name == "lo"]
    assert len(found) == 1, f"no single loopback device in {devices()}"
    return found[0]


def test_devices_lists_loopback() -> None:
    lo = _lo()
    assert lo.ipv4 == "127.0.0.1"
    assert lo.ibdev_name  # soft_lo on softdoca
    assert lo.mac is not None and re.fullmatch(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", lo.mac)
    assert lo.iface_index is not None and lo.iface_index > 0
    assert lo.pci_addr


def test_softdoca_names_loopback_soft_lo() -> None:
    from pydoca._native import backend
    if backend.name != "soft":
        pytest.skip("softdoca naming only")
    assert _lo().ibdev_name == "soft_lo"


def test_device_info_is_frozen_snapshot() -> None:
    lo = _lo()
    with pytest.raises(dataclasses.FrozenInstanceError):
        lo.ipv4 = "1.2.3.4"  # type: ignore[misc]
    assert lo.as_dict()["ibdev_name"] == lo.ibdev_name
    assert lo == _lo()


@pytest.mark.parametrize("criterion", ["ibdev_name", "iface", "ip", "pci", "ip_v6_form"])
def test_open_by_each_criterion(criterion: str) -> None:
    lo = _lo()
    choices: dict[str, dict[str, str | None]] = {
        "ibdev_name": {"ibdev_name": lo.ibdev_name}, "iface": {"iface": "lo"},
        "ip": {"ip": "127.0.0.1"}, "pci": {"pci": lo.pci_addr}}
    kwargs = choices.get(criterion)
    if criterion == "ip_v6_form":
        if lo.ipv6 is None:
            pytest.skip("loopback has no IPv6 address")
        kwargs = {"ip": "0:0:0:0:0:0:0:1"}
    assert kwargs is not None
    with Device.open(**kwargs) as dev:
        assert dev.info == lo
        assert dev.handle is not None
        assert "open" in repr(dev)
    assert dev.closed


def test_open_needs_exactly_one_criterion() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Device.open()
    with pytest.raises(ValueError, match="exactly one"):
        Device.open(iface="lo", ip="127.0.0.1")


def test_open_malformed_ip() -> None:
    with pytest.raises(ValueError):
        Device.open(ip="not-an-ip")


@pytest.mark.parametrize("kwargs", [{"iface": "nosuchif0"}, {"ibdev_name": "mlx5_99"}, {"ip": "192.0.2.77"},
                                    {"pci": "ffff:ff:1f.7"}])
def test_open_no_match_lists_available(kwargs: dict[str, str]) -> None:
    with pytest.raises(NotFoundError) as info:
        Device.open(**kwargs)
    assert "available" in str(info.value)
    assert _lo().ibdev_name in str(info.value)


def test_close_is_idempotent_and_handle_closed() -> None:
    dev = Device.open(iface="lo")
    dev.close()
    dev.close()
    assert dev.closed
    with pytest.raises(ClosedError):
        _ = dev.handle
    assert dev.info.iface_name == "lo"  # the snapshot stays readable


def test_two_opens_are_independent() -> None:
    with Device.open(iface="lo") as a, Device.open(iface="lo") as b:
        assert a.handle != b.handle


def test_unclosed_device_warns(gc_collect: Callable[[], None]) -> None:
    with pytest.warns(ResourceWarning, match="unclosed Device"):
        dev = Device.open(iface="lo")
        del dev
        gc_collect()
