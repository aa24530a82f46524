"""Device discovery: every DOCA device with its attributes and GID table (GID
types, and the index pydoca would choose for an Rdma context).

    python samples/device_discovery.py [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Dict, List, Optional

try:                                             # pydoca loads its backend lazily, on first use of a name
    import pydoca
    from pydoca import Device
    from pydoca.errors import DocaError
    from pydoca.rdma import choose_gid_index, gid_table
except ImportError as _exc:                      # no backend (pydoca.BackendError) or not installed
    sys.exit(f"device_discovery: FAILED: cannot load pydoca: {_exc}")


def describe(info: pydoca.DeviceInfo) -> Dict[str, Any]:
    """One device's attributes, GID table and chosen GID index."""
    entry: Dict[str, Any] = info.as_dict()
    gids: List[Dict[str, Any]] = []
    chosen: Optional[int] = None
    error: Optional[str] = None
    try:
        with Device.open(ibdev_name=info.ibdev_name) as dev:
            for gid in gid_table(dev):
                gids.append({"index": gid.index, "gid": str(gid), "type": gid.type,
                             "ip": None if gid.empty else str(gid.ip),
                             "link_local": gid.link_local, "empty": gid.empty})
            chosen = choose_gid_index(dev)
    except DocaError as exc:
        error = str(exc)
    entry.update(gids=gids, chosen_gid_index=chosen, error=error)
    return entry


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="device_discovery.py", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        found = [describe(info) for info in pydoca.devices()]
    except DocaError as exc:
        print(f"device_discovery: FAILED: {exc}", file=sys.stderr)
        return 1
    elapsed = time.monotonic() - start
    if args.json:
        print(json.dumps({"backend": pydoca.backend.name, "devices": found}, indent=2))
        return 0
    print(f"backend: {pydoca.backend.name} ({pydoca.backend.reason})")
    for d in found:
        print(f"{d['ibdev_name']}:")
        for key in ("iface_name", "iface_index", "ipv4", "ipv6", "mac", "pci_addr", "lid", "active_rate"):
            print(f"  {key:<12} {'-' if d[key] is None else d[key]}")
        if d["error"]:
            print(f"  error        {d['error']}")
        for g in d["gids"]:
            mark = "  <- chosen" if g["index"] == d["chosen_gid_index"] else ""
            flags = "empty" if g["empty"] else ("link-local" if g["link_local"] else "")
            print(f"  gid[{g['index']}]  {g['gid']:<40} {g['type'] or 'unknown type':<8} {flags}{mark}")
        if d["chosen_gid_index"] is None:
            print("  chosen gid   none (DOCA's default index)")
    print(f"device_discovery: OK {len(found)} devices in {elapsed * 1e3:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
