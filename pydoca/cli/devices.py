"""``pydoca devices``: list DOCA devices (a table, or JSON with --json), with their ports.

Ports (state, link layer, active MTU, GID table and the GID a RoCE connection
would use) come from pyverbs when it imports, else sysfs (``pydoca.ports``);
softdoca's devices are software devices without ports. RDMA devices of the
host that are not devices of the DOCA backend in use are listed after them.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from .main import format_table

if TYPE_CHECKING:
    from ..device import DeviceInfo
    from ..ports import DevicePorts, GidChoice

COLUMNS = ("ibdev_name", "iface_name", "ipv4", "ipv6", "mac", "pci_addr", "lid", "active_rate")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("devices", help="list DOCA devices and their ports")
    p.add_argument("--json", action="store_true", help="print a JSON list of device objects")
    p.set_defaults(run=run)


@dataclass
class PortReport:
    """Ports of the DOCA devices, and of the host's other RDMA devices, with the GID choice of each."""

    own: Dict[str, "DevicePorts"]            # DOCA device name -> its ports
    host: List["DevicePorts"]                # RDMA devices of the host that are not DOCA devices
    choices: Dict[str, Optional["GidChoice"]]

    def entry(self, dp: "DevicePorts") -> Dict[str, Any]:
        choice = self.choices.get(dp.device)
        return {**dp.as_dict(), "gid_choice": choice.as_dict() if choice else None}


def port_report(found: Sequence["DeviceInfo"], software: bool) -> PortReport:
    """Read the ports of ``found`` (DOCA devices; ``software``: softdoca's) and of the host."""
    from .. import ports

    own = {d.ibdev_name: ports.device_ports(d.ibdev_name, software=software) for d in found}
    host = [ports.device_ports(name) for name in ports.rdma_devices() if name not in own]
    by_iface = {d.iface_name: d.ipv4 for d in found if d.iface_name}
    ipv4 = {d.ibdev_name: d.ipv4 for d in found}
    choices: Dict[str, Optional["GidChoice"]] = {}
    for dp in [*own.values(), *host]:
        if dp.ports:
            addr = ipv4.get(dp.device) or next((by_iface[p.netdev] for p in dp.ports if p.netdev in by_iface), None)
            choices[dp.device] = ports.choose_gid(dp.ports, addr, device=dp.device)
    return PortReport(own, host, choices)


def port_lines(entry: Dict[str, Any], indent: str = "  ") -> List[str]:
    """Text lines for the ports of one device, from its JSON form (:meth:`PortReport.entry`)."""
    ports = entry["ports"]
    sub, subsub = indent + "  ", indent + "    "
    lines = [f"{indent}{entry['device']}: " + (f"{entry['source']}, {entry['detail']}" if ports else entry["detail"])]
    if not ports:
        return lines
    rows = [[p["port"], p["state"], p["link_layer"], p["active_mtu"], p["netdev"], len(p["gids"])] for p in ports]
    lines += [sub + ln for ln in format_table(["PORT", "STATE", "LINK_LAYER", "ACTIVE_MTU", "NETDEV", "GIDS"], rows)]
    for p in ports:
        if p["gids"]:
            lines.append(f"{sub}port {p['port']} GID table:")
            grows = [[g["index"], g["gid"], g["type"], g["netdev"]] for g in p["gids"]]
            lines += [subsub + ln for ln in format_table(["INDEX", "GID", "TYPE", "NETDEV"], grows)]
    c = entry.get("gid_choice")
    lines.append(f"{sub}GID choice: " + (f"port {c['port']} index {c['index']} {c['gid']} ({c['type']}): {c['reason']}"
                                         if c else "none (no usable GID on an ACTIVE port)"))
    return lines


def run(args: argparse.Namespace) -> int:
    from .._native import backend
    from ..device import devices

    found = devices()
    report = port_report(found, backend.name == "soft")
    if args.json:
        print(json.dumps([{**d.as_dict(), "ports": report.entry(report.own[d.ibdev_name])} for d in found],
                         indent=2))
        return 0
    if not found:
        print("no DOCA devices found (try: pydoca doctor)")
    else:
        rows = [[getattr(d, c) for c in COLUMNS] for d in found]
        for line in format_table([c.upper() for c in COLUMNS], rows):
            print(line)
        print()
        print("ports:")
        for d in found:
            for line in port_lines(report.entry(report.own[d.ibdev_name])):
                print(line)
    if report.host:
        print()
        print(f"other RDMA devices on this host (not devices of the {backend.name} backend):")
        for dp in report.host:
            for line in port_lines(report.entry(dp)):
                print(line)
    if backend.name == "soft":
        from ._providers import provider_lines, providers
        entries, _, in_use = providers()
        print()
        print("softdoca providers (SOFTDOCA_PROVIDER; docs/providers.md):")
        for line in provider_lines(entries, in_use, "  "):
            print(line)
    return 0
