"""``pydoca devices``: list DOCA devices (a table, or JSON with --json)."""
from __future__ import annotations

import argparse
import json
from typing import Any

from .main import format_table

COLUMNS = ("ibdev_name", "iface_name", "ipv4", "ipv6", "mac", "pci_addr", "lid", "active_rate")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("devices", help="list DOCA devices")
    p.add_argument("--json", action="store_true", help="print a JSON list of device objects")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..device import devices

    found = devices()
    if args.json:
        print(json.dumps([d.as_dict() for d in found], indent=2))
        return 0
    if not found:
        print("no DOCA devices found (try: pydoca doctor)")
        return 0
    rows = [[getattr(d, c) for c in COLUMNS] for d in found]
    for line in format_table([c.upper() for c in COLUMNS], rows):
        print(line)
    return 0
