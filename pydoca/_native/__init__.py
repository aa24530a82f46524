"""Backend selection and the cffi handle: ``ffi``, ``lib``, ``backend``.

One code path for both backends: the chosen DOCA libraries are dlopened with
RTLD_GLOBAL, then the compiled API-mode module ``_doca_cffi`` is imported, and
its DOCA calls bind to whichever library is in the global scope.

``PYDOCA_BACKEND=auto|doca|soft`` (default auto): auto uses real DOCA when its
libraries load and softdoca otherwise, with one WARNING log line.
``PYDOCA_DOCA_LIB_DIR`` overrides where the real libraries are looked for;
``PYDOCA_SOFTDOCA_LIB`` points at another softdoca build (e.g. a sanitizer one).
"""
from __future__ import annotations

import ctypes
import glob
import os
import platform
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from pydoca._log import get_logger

log = get_logger()

SUPPORTED_MIN: Tuple[int, int] = (2, 9)
SUPPORTED_MAX: Tuple[int, int] = (3, 3)
DOCA_LIBS = ("libdoca_common.so", "libdoca_rdma.so")


class BackendError(ImportError):
    """No usable DOCA backend (or the requested one could not be loaded)."""


@dataclass(frozen=True)
class BackendInfo:
    """Which backend is in use, from where, and why it was chosen."""

    name: str                 # "doca" or "soft"
    paths: Tuple[str, ...]
    version: str
    reason: str
    attempts: Tuple[str, ...] = field(default_factory=tuple)


def _doca_dirs() -> List[Optional[str]]:
    env = os.environ.get("PYDOCA_DOCA_LIB_DIR")
    if env:
        return [env]
    arch = platform.machine()
    return [None, f"/opt/mellanox/doca/lib/{arch}-linux-gnu"]


def parse_version(text: str) -> Tuple[int, int]:
    """'3.3.0055' -> (3, 3). ValueError when unparsable."""
    parts = text.strip().split(".")
    if len(parts) < 2:
        raise ValueError(f"unparsable DOCA version {text!r}")
    return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or "x")


def check_version(text: str) -> None:
    """Raise BackendError when the runtime is outside the supported range."""
    try:
        ver = parse_version(text)
    except ValueError as exc:
        raise BackendError(str(exc)) from exc
    if not SUPPORTED_MIN <= ver <= SUPPORTED_MAX:
        raise BackendError(
            f"DOCA runtime {text} is not supported: pydoca supports DOCA "
            f"{SUPPORTED_MIN[0]}.{SUPPORTED_MIN[1]} to {SUPPORTED_MAX[0]}.{SUPPORTED_MAX[1]}")


def _runtime_version(handle: ctypes.CDLL) -> str:
    fn = handle.doca_version_runtime
    fn.restype = ctypes.c_char_p
    fn.argtypes = []
    raw = fn()
    return raw.decode() if raw else "unknown"


def _try_doca(attempts: List[str]) -> Optional[BackendInfo]:
    for d in _doca_dirs():
        paths = tuple(lib if d is None else os.path.join(d, lib) for lib in DOCA_LIBS)
        try:
            handles = [ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL) for p in paths]
        except OSError as exc:
            attempts.append(f"{d or 'loader path'}: {exc}")
            continue
        version = _runtime_version(handles[0])
        check_version(version)
        return BackendInfo("doca", paths, version, f"real DOCA libraries found in {d or 'the loader path'}",
                           tuple(attempts))
    return None


def softdoca_path() -> str:
    """Path of the softdoca shared library shipped with this package."""
    env = os.environ.get("PYDOCA_SOFTDOCA_LIB")
    if env:
        return env
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_lib")
    found = sorted(glob.glob(os.path.join(here, "libsoftdoca*.so")))
    if not found:
        raise BackendError(f"softdoca library not found in {here}: reinstall pydoca (pip install .)")
    return found[0]


def _load_soft(reason: str, attempts: List[str]) -> BackendInfo:
    path = softdoca_path()
    try:
        handle = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        raise BackendError(f"cannot load softdoca from {path}: {exc}") from exc
    return BackendInfo("soft", (path,), _runtime_version(handle), reason, tuple(attempts))


def _select() -> BackendInfo:
    choice = os.environ.get("PYDOCA_BACKEND", "auto").strip().lower() or "auto"
    attempts: List[str] = []
    if choice not in ("auto", "doca", "soft"):
        raise BackendError(f"PYDOCA_BACKEND={choice!r}: expected auto, doca or soft")
    if choice == "soft":
        return _load_soft("PYDOCA_BACKEND=soft", attempts)
    info = _try_doca(attempts)
    if info is not None:
        return info
    if choice == "doca":
        raise BackendError("PYDOCA_BACKEND=doca but the DOCA libraries could not be loaded: "
                           + "; ".join(attempts))
    info = _load_soft("real DOCA libraries not found (" + "; ".join(attempts) + ")", attempts)
    log.warning("real DOCA not found: using softdoca, the software DOCA over TCP (no hardware offload); "
                "`pydoca doctor` explains, PYDOCA_BACKEND=soft makes it explicit")
    log.debug("backend attempts", attempts=attempts, library=info.paths[0])
    return info


backend: BackendInfo = _select()

try:
    from ._doca_cffi import ffi, lib  # noqa: E402
except ImportError as exc:  # pragma: no cover - depends on the installed DOCA
    raise BackendError(f"the {backend.name} backend at {backend.paths} lacks a DOCA symbol pydoca needs: {exc}") from exc

__all__ = ["ffi", "lib", "backend", "BackendInfo", "BackendError", "check_version", "parse_version",
           "softdoca_path"]
