"""``pydoca doctor``: which backend is in use and why, and what would break RDMA."""
from __future__ import annotations

import argparse
import difflib
import json
import os
import resource
from typing import Any, Dict, List, Optional, Tuple

MEMLOCK_MIN = 64 << 20  # below this, real RDMA registrations of any size fail
SYS_IB = "/sys/class/infiniband"

Report = Dict[str, Any]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("doctor", help="diagnose the DOCA backend and RDMA readiness")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(run=run)


def _check(report: Report, name: str, status: str, detail: str, hint: Optional[str] = None) -> None:
    report["checks"].append({"check": name, "status": status, "detail": detail, "hint": hint})


def _limit(value: int) -> Optional[int]:
    return None if value == resource.RLIM_INFINITY else value


BACKENDS = ("auto", "doca", "soft")


def backend_choice(env: Optional[str]) -> Tuple[str, str, Optional[str]]:
    """(status, detail, hint) of a PYDOCA_BACKEND value, read the way pydoca._native reads it."""
    if env is None:
        return "ok", "unset (auto: real DOCA when it loads, else softdoca)", None
    choice = env.strip().lower() or "auto"
    if choice in BACKENDS:
        return "ok", f"PYDOCA_BACKEND={env!r}", None
    close = difflib.get_close_matches(choice, BACKENDS, n=1, cutoff=0.5)
    guess = f"did you mean {close[0]!r}? " if close else ""
    return ("error", f"PYDOCA_BACKEND={env!r} is not a backend: every command that uses DOCA fails",
            f"{guess}set PYDOCA_BACKEND to auto (real DOCA, else softdoca), doca (real DOCA only) or soft "
            "(softdoca), or unset it")


def _backend_failed(report: Report, env: Optional[str], exc: BaseException) -> None:
    """Explain why no backend loaded, by what PYDOCA_BACKEND asked for."""
    choice = (env or "auto").strip().lower() or "auto"
    report["backend_error"] = str(exc)
    if choice not in BACKENDS:
        hint = backend_choice(env)[2]
    elif choice == "doca":
        where = os.environ.get("PYDOCA_DOCA_LIB_DIR")
        hint = ("PYDOCA_BACKEND=doca requires NVIDIA DOCA's libdoca_common.so and libdoca_rdma.so: install DOCA, "
                + (f"check PYDOCA_DOCA_LIB_DIR={where!r} (it must hold both libraries), " if where else
                   "set PYDOCA_DOCA_LIB_DIR to the directory holding them, ")
                + "or set PYDOCA_BACKEND=auto (softdoca when DOCA is absent) or soft")
    elif choice == "soft" or "softdoca" in str(exc):
        lib = os.environ.get("PYDOCA_SOFTDOCA_LIB")
        hint = (f"PYDOCA_SOFTDOCA_LIB={lib!r} must be a softdoca build (unset it to use the one installed)"
                if lib else "reinstall pydoca (pip install .): its softdoca library is missing or broken")
    else:
        hint = "reinstall pydoca (pip install .) or fix the DOCA installation / PYDOCA_DOCA_LIB_DIR"
    _check(report, "backend", "error", str(exc), hint)


def collect() -> Report:
    """Gather the doctor report as a JSON-ready dict."""
    from ..ports import sysfs_root

    sys_ib = os.path.join(sysfs_root(), "class", "infiniband")   # SYS_IB, or under $PYDOCA_SYSFS_ROOT
    env = os.environ.get("PYDOCA_BACKEND")
    soft_lim, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    report: Report = {"backend": None, "runtime_version": None, "optional_missing": [], "devices": [],
                      "PYDOCA_BACKEND": env,
                      "memlock": {"soft": _limit(soft_lim), "hard": _limit(_hard)},
                      "sys_class_infiniband": sorted(os.listdir(sys_ib)) if os.path.isdir(sys_ib) else None,
                      "checks": []}
    _check(report, "PYDOCA_BACKEND", *backend_choice(env))
    try:
        from .._native import backend, ffi, lib
    except ImportError as exc:          # BackendError: a bad PYDOCA_BACKEND, DOCA absent, softdoca broken
        _backend_failed(report, env, exc)
        _system(report, sys_ib, soft=(env or "").strip().lower() not in ("doca",))
        return report
    report["backend"] = {"name": backend.name, "paths": list(backend.paths), "version": backend.version,
                         "reason": backend.reason, "attempts": list(backend.attempts)}
    raw = lib.doca_version_runtime()
    report["runtime_version"] = ffi.string(raw).decode() if raw != ffi.NULL else None
    soft = backend.name == "soft"
    if soft:
        _check(report, "backend", "warn", "softdoca in use: RDMA is emulated over TCP, no hardware offload",
               "install NVIDIA DOCA (libdoca_common, libdoca_rdma) and set PYDOCA_BACKEND=doca to require it")
    else:
        _check(report, "backend", "ok", f"real DOCA {backend.version} from {', '.join(backend.paths)}")
    _versions(report, backend)
    if soft:
        _providers(report)
    _ports(report, _devices(report), soft)
    _system(report, sys_ib, soft)
    return report


def _providers(report: Report) -> None:
    """softdoca's providers (docs/providers.md): built in, their libraries found, the one in use."""
    from ._providers import providers

    report["providers"], built, in_use = providers()
    asked = os.environ.get("SOFTDOCA_PROVIDER") or "native"
    report["provider"] = {"SOFTDOCA_PROVIDER": os.environ.get("SOFTDOCA_PROVIDER"), "name": in_use}
    wanted = "native" if asked == "auto" else asked
    if wanted != in_use:
        _check(report, "SOFTDOCA_PROVIDER", "fail", f"{asked!r} asked for, {in_use} in use: RDMA contexts and "
               "memory maps will refuse to start", "set SOFTDOCA_PROVIDER=native (or unset it), or install what "
               "the provider needs (docs/providers.md)")
    else:
        _check(report, "SOFTDOCA_PROVIDER", "ok", f"{in_use} (providers built in: {', '.join(built)})")


def _system(report: Report, sys_ib: str, soft: bool) -> None:
    """The kernel's RDMA devices and the memlock limit (no backend needed)."""
    soft_lim = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    if report["sys_class_infiniband"] is None:
        _check(report, "kernel RDMA", "info" if soft else "error", f"{sys_ib} does not exist",
               "real DOCA needs the mlx5 driver (modprobe mlx5_core mlx5_ib) and rdma-core")
    else:
        _check(report, "kernel RDMA", "ok", f"{sys_ib}: {', '.join(report['sys_class_infiniband']) or 'empty'}")
    low = soft_lim != resource.RLIM_INFINITY and soft_lim < MEMLOCK_MIN
    _check(report, "ulimit -l", "warn" if low and not soft else "ok",
           "memlock " + ("unlimited" if soft_lim == resource.RLIM_INFINITY else f"{soft_lim} bytes")
           + (" (softdoca does not pin pages)" if soft and low else ""),
           "raise it: ulimit -l unlimited, or a memlock line in /etc/security/limits.conf" if low else None)


def _versions(report: Report, backend: Any) -> None:
    """The runtime version against the supported range, and the optional DOCA functions it lacks."""
    from .._native import SUPPORTED_MAX, SUPPORTED_MIN, missing, versions

    lo, hi = (f"{v[0]}.{v[1]}" for v in (SUPPORTED_MIN, SUPPORTED_MAX))
    absent = missing()
    report["supported_versions"] = {"min": lo, "max": hi}
    report["optional_missing"] = [{"symbol": n, "added_in": v, "feature": versions.feature(n)}
                                  for n, v in sorted(absent.items(), key=lambda kv: (kv[1], kv[0]))]
    if backend.warning:
        _check(report, "DOCA version", "warn", backend.warning,
               f"pydoca was checked against DOCA {lo} to {hi}; report problems with this runtime")
    else:
        _check(report, "DOCA version", "ok", f"runtime {backend.version} (supported: DOCA {lo} to {hi})")
    total = len(versions.OPTIONAL)
    if absent:
        newest = max(absent.values(), key=lambda v: tuple(int(x) for x in v.split(".")))
        _check(report, "optional DOCA functions", "warn",
               f"{len(absent)} of {total} missing from runtime {backend.version}: "
               + "; ".join(f"{m['feature']} ({m['symbol']}, DOCA {m['added_in']})"
                           for m in report["optional_missing"]),
               f"those features are unavailable (NotSupportedError, or None for device facts); "
               f"DOCA {newest} or newer has them all")
    else:
        _check(report, "optional DOCA functions", "ok", f"all {total} present")


def _devices(report: Report) -> List[Any]:
    from ..device import devices

    try:
        found = devices()
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        _check(report, "devices", "error", f"device discovery failed: {exc}", "run pydoca doctor --debug")
        return []
    report["devices"] = [d.as_dict() for d in found]
    with_v4 = [d.ibdev_name for d in found if d.ipv4]
    if not found:
        _check(report, "devices", "error", "no DOCA device found", "check the driver / network interfaces")
    elif not with_v4:
        _check(report, "devices", "warn", "no device has an IPv4 address",
               "RDMA CM connections need an IPv4 address on the interface (ip addr add ... dev IFACE)")
    else:
        _check(report, "devices", "ok", f"{len(found)} device(s); with IPv4: {', '.join(with_v4)}")
    return list(found)


def _port_text(dp: Any) -> str:
    return "; ".join(f"port {p.port} {p.state} {p.link_layer} MTU {p.active_mtu or '-'}" for p in dp.ports)


def _ports(report: Report, found: List[Any], soft: bool) -> None:
    """Ports of the DOCA devices and of the host's other RDMA devices (pyverbs, else sysfs)."""
    from .. import ports
    from .devices import port_report

    ok, what = ports.pyverbs_status()
    report["pyverbs"] = {"available": ok, "detail": what}
    try:
        pr = port_report(found, soft)
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        _check(report, "ports", "error", f"reading ports failed: {type(exc).__name__}: {exc}",
               "run pydoca doctor --debug")
        return
    for entry in report["devices"]:
        dp = pr.own.get(entry["ibdev_name"])
        if dp is not None:
            entry["ports"] = pr.entry(dp)
    report["rdma_devices"] = [pr.entry(dp) for dp in pr.host]
    _check(report, "pyverbs", "ok" if ok else "info",
           what if ok else f"{what}: ports are read from sysfs ({ports.sysfs_root()})",
           None if ok else "for port facts from rdma-core itself: pip install 'pydoca[verbs]' (pyverbs)")
    if soft:
        host = [f"{dp.device} ({_port_text(dp) or dp.detail})" for dp in pr.host]
        _check(report, "ports", "info", "softdoca devices are software devices, no ports"
               + (f"; RDMA devices on this host: {', '.join(host)}" if host else ""),
               "real DOCA would use the host's RDMA devices" if host else None)
        return
    down: List[str] = []
    unknown: List[str] = []
    fine: List[str] = []
    for dp in pr.own.values():
        choice = pr.choices.get(dp.device)
        if not dp.ports:
            unknown.append(f"{dp.device}: {dp.detail}")
        elif not any(p.active for p in dp.ports):
            down.append(f"{dp.device}: no ACTIVE port ({_port_text(dp)})")
        else:
            fine.append(f"{dp.device} {_port_text(dp)}"
                        + (f", GID {choice.index} ({choice.entry.type})" if choice else ", no usable GID"))
    if down:
        _check(report, "ports", "error", "; ".join(down + unknown + fine),
               "bring the link up (ip link set IFACE up; check the cable / subnet manager)")
    elif unknown:
        _check(report, "ports", "warn", "; ".join(unknown + fine),
               "install rdma-core (pyverbs) or check /sys/class/infiniband")
    else:
        _check(report, "ports", "ok", "; ".join(fine) or "no devices")


def _print(report: Report) -> None:
    b = report["backend"]
    print(f"backend:         {b['name'] if b else 'NOT LOADED'}")
    if b:
        print(f"  reason:        {b['reason']}")
        print(f"  libraries:     {', '.join(b['paths'])}")
        for attempt in b["attempts"]:
            print(f"  tried:         {attempt}")
    print(f"DOCA runtime:    {report['runtime_version'] or '-'}")
    if report["optional_missing"]:
        print(f"missing:         {len(report['optional_missing'])} optional DOCA function(s)")
        for m in report["optional_missing"]:
            print(f"  DOCA {m['added_in']:<5} {m['symbol']:<50} {m['feature']}")
    print(f"PYDOCA_BACKEND:  {report['PYDOCA_BACKEND'] or 'unset (auto)'}")
    from ._providers import provider_lines
    for line in provider_lines(report.get("providers", []), report.get("provider", {}).get("name"), "provider "):
        print(line)
    print(f"devices:         {len(report['devices'])}")
    for d in report["devices"]:
        print(f"  {d['ibdev_name']:<16} {d['iface_name'] or '-':<12} {d['ipv4'] or '-':<16} {d['mac'] or '-'}")
    _print_ports(report)
    print("checks:")
    for c in report["checks"]:
        print(f"  [{c['status']}] {c['check']}: {c['detail']}")
        if c["hint"] and c["status"] != "ok":
            print(f"         hint: {c['hint']}")


def _print_ports(report: Report) -> None:
    from .devices import port_lines

    own = [d["ports"] for d in report["devices"] if d.get("ports")]
    host = report.get("rdma_devices") or []
    if not own and not host:
        return
    pv = report.get("pyverbs") or {}
    print(f"ports:           from {'pyverbs' if pv.get('available') else 'sysfs'} ({pv.get('detail', '-')})")
    for entry in own:
        for line in port_lines(entry):
            print(line)
    if host:
        print("  other RDMA devices on this host:")
        for entry in host:
            for line in port_lines(entry, indent="    "):
                print(line)


def run(args: argparse.Namespace) -> int:
    report = collect()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
    return 1 if report["backend"] is None else 0


__all__: List[str] = ["collect", "register", "run"]
