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
        {"name": "ofi", "built": False, "available": False, "version": None, "transports": None,
         "detail": "not built yet"},
    ]
    name_fn = soft_fn("softdoca_provider_name", ctypes.c_char_p)
    in_use = (name_fn() or b"native").decode() if name_fn else "native"
    return out, built, in_use


def provider_lines(entries: List[Dict[str, Any]], in_use: Optional[str], indent: str = "") -> List[str]:
    """One line per provider: name, state, version, transports, detail."""
    lines = []
    for p in entries:
        state = "in use" if in_use == p["name"] else ("available" if p["available"] else "unavailable")
        tl = ",".join(p["transports"]) if p.get("transports") else "-"
        lines.append(f"{indent}{p['name']:<6} {state:<12} {p['version'] or '-':<8} {tl:<24} {p['detail']}")
    return lines


__all__ = ["provider_lines", "providers", "ucx_transports"]
