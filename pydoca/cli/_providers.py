"""softdoca's providers as ``pydoca doctor`` and ``pydoca devices`` show them (docs/providers.md): built in,
their libraries found, versions, the transports each can use, the one in use."""
from __future__ import annotations

import ctypes
import ctypes.util
import shutil
import subprocess
from functools import lru_cache
from typing import Any, Dict, List, Optional, Tuple


@lru_cache(maxsize=1)
def ucx_transports() -> Optional[List[str]]:
    """The transports UCX finds on this host (``ucx_info -d``, Debian's ucx-utils); None when it is absent."""
    exe = shutil.which("ucx_info")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-d"], capture_output=True, text=True, timeout=20).stdout
    except (subprocess.TimeoutExpired, OSError):
        return None
    found = {ln.split("Transport:", 1)[1].strip() for ln in out.splitlines() if "Transport:" in ln}
    return sorted(t for t in found if t)


def _ucx_version() -> Optional[str]:
    ucp = ctypes.util.find_library("ucp")
    if not ucp:
        return None
    try:
        lib = ctypes.CDLL(ucp)
        major, minor, release = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
        lib.ucp_get_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(release))
    except (OSError, AttributeError):
        return None
    return f"{major.value}.{minor.value}.{release.value}"


@lru_cache(maxsize=1)
def ofi_fabrics() -> Optional[List[str]]:
    """libfabric's providers on this host (``fi_info -l``, Debian's libfabric-bin); None when it is absent."""
    exe = shutil.which("fi_info")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-l"], capture_output=True, text=True, timeout=20).stdout
    except (subprocess.TimeoutExpired, OSError):
        return None
    names = [ln[:-1].strip() for ln in out.splitlines() if ln.endswith(":") and not ln.startswith(" ")]
    return [n for n in names if n and not n.startswith("ofi_hook")]


def _ofi_version() -> Optional[str]:
    try:
        lib = ctypes.CDLL("libfabric.so.1")
        lib.fi_version.restype = ctypes.c_uint32
        v = int(lib.fi_version())
    except (OSError, AttributeError):
        return None
    return f"{v >> 16}.{v & 0xFFFF}"


def providers() -> Tuple[List[Dict[str, Any]], List[str], str]:
    """(one entry per provider, the providers built in, the one in use)."""
    from .._native import soft_fn
    built_fn = soft_fn("softdoca_providers_built", ctypes.c_char_p)
    built = (built_fn() or b"native").decode().split(",") if built_fn else ["native"]
    version = _ucx_version()
    transports = ucx_transports() if version else None
    out: List[Dict[str, Any]] = [
        {"name": "native", "built": True, "available": True, "version": None,
         "transports": ["tcp", "shm"], "detail": "softdoca's own wire (SOFTDOCA_TRANSPORT=tcp|shm|auto)"},
        {"name": "ucx", "built": "ucx" in built, "available": bool(version) and "ucx" in built, "version": version,
         "transports": transports,
         "detail": (("UCX picks its transports (UCX_TLS, UCX_NET_DEVICES)" +
                     ("" if transports is not None else "; ucx_info (Debian: ucx-utils) lists them"))
                    if version else "libucp not found (Debian: libucx0)") if "ucx" in built else
         "not built in (rebuild pydoca with Debian's libucx-dev installed)"},
        _ofi_entry("ofi" in built),
    ]
    name_fn = soft_fn("softdoca_provider_name", ctypes.c_char_p)
    in_use = (name_fn() or b"native").decode() if name_fn else "native"
    return out, built, in_use


def _ofi_entry(built: bool) -> Dict[str, Any]:
    version = _ofi_version() if built else None
    fabrics = ofi_fabrics() if version else None
    detail = ("not built in (rebuild pydoca with Debian's libfabric-dev installed)" if not built else
              "libfabric.so.1 not found (Debian: libfabric1)" if not version else
              "FI_PROVIDER picks the fabric (tcp, shm, verbs, efa, ...)" +
              ("" if fabrics is not None else "; fi_info (Debian: libfabric-bin) lists them"))
    return {"name": "ofi", "built": built, "available": bool(version), "version": version, "transports": fabrics,
            "detail": detail}


def provider_lines(entries: List[Dict[str, Any]], in_use: Optional[str], indent: str = "") -> List[str]:
    """One line per provider: name, state, version, transports, detail."""
    lines = []
    for p in entries:
        state = "in use" if in_use == p["name"] else ("available" if p["available"] else "unavailable")
        tl = ",".join(p["transports"]) if p.get("transports") else "-"
        lines.append(f"{indent}{p['name']:<6} {state:<12} {p['version'] or '-':<8} {tl:<24} {p['detail']}")
    return lines


__all__ = ["provider_lines", "providers", "ucx_transports"]
