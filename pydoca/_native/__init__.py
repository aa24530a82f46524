"""Backend selection and the cffi handle: ``ffi``, ``lib``, ``backend``.

One code path for both backends: the chosen DOCA libraries are dlopened with
RTLD_GLOBAL, then the compiled API-mode module ``_doca_cffi`` is imported, and
its DOCA calls bind to whichever library is in the global scope.

``PYDOCA_BACKEND=auto|doca|soft`` (default auto): auto uses real DOCA when its
libraries load and softdoca otherwise, with one WARNING log line.
``PYDOCA_DOCA_LIB_DIR`` overrides where the real libraries are looked for;
``PYDOCA_SOFTDOCA_LIB`` points at another softdoca build (e.g. a sanitizer one).

DOCA versions: the runtime must be 2.9 or newer (older is refused, newer than
3.3 loads with one warning). The module needs only what DOCA 2.9 has; the
functions added later (``versions.OPTIONAL``) are weak references. When the
runtime lacks some, ``lib`` is a copy of the cffi lib in which each missing
function is a stub: one returning ``doca_error_t`` returns
DOCA_ERROR_NOT_SUPPORTED (so ``errors.check`` raises ``NotSupportedError``
naming the release that added it, and code testing ``!= 0`` degrades), any
other raises that ``NotSupportedError`` at once. Nothing ever calls NULL.
``has(name)``, ``require(name)``, ``missing()`` expose the same facts.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
import platform
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from pydoca._log import get_logger
from pydoca import errors as _errors
from pydoca.errors import NotSupportedError

from . import versions

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
    warning: Optional[str] = None    # e.g. a runtime newer than SUPPORTED_MAX


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


def _fmt(ver: Tuple[int, int]) -> str:
    return f"{ver[0]}.{ver[1]}"


def check_version(text: str) -> Optional[str]:
    """Raise BackendError when the runtime is older than SUPPORTED_MIN (or unparsable).

    A runtime newer than SUPPORTED_MAX is accepted: the returned text is the
    one warning to log. None when the version is in the checked range.
    """
    try:
        ver = parse_version(text)
    except ValueError as exc:
        raise BackendError(str(exc)) from exc
    if ver < SUPPORTED_MIN:
        raise BackendError(
            f"DOCA runtime {text} is not supported: pydoca needs DOCA {_fmt(SUPPORTED_MIN)} or newer "
            f"(checked against {_fmt(SUPPORTED_MIN)} to {_fmt(SUPPORTED_MAX)})")
    if ver > SUPPORTED_MAX:
        return (f"DOCA runtime {text} is newer than the newest release pydoca was checked against "
                f"({_fmt(SUPPORTED_MAX)}): loading it anyway")
    return None


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
        if not os.environ.get("PYDOCA_DOCA_LIB_DIR") and hasattr(handles[0], "softdoca_debug_live_objects"):
            # softdoca's own runtime found by its DOCA names (LD_LIBRARY_PATH from
            # `pydoca softdoca --env`): not real DOCA.
            attempts.append(f"{d or 'loader path'}: libdoca_common.so there is softdoca")
            continue
        version = _runtime_version(handles[0])
        warning = check_version(version)
        if warning:
            log.warning(warning)
        return BackendInfo("doca", paths, version, f"real DOCA libraries found in {d or 'the loader path'}",
                           tuple(attempts), warning)
    return None


def softdoca_path() -> str:
    """Path of the softdoca shared library shipped with this package."""
    env = os.environ.get("PYDOCA_SOFTDOCA_LIB")
    if env:
        return env
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_lib")
    # softdoca installed as a DOCA runtime (setup.py): libdoca_common carries it all.
    found = sorted(glob.glob(os.path.join(here, "doca", "lib", "libdoca_common.so.*")))
    found += sorted(glob.glob(os.path.join(here, "libsoftdoca*.so")))
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
        import difflib
        close = difflib.get_close_matches(choice, ("auto", "doca", "soft"), n=1, cutoff=0.5)
        raise BackendError(f"PYDOCA_BACKEND={choice!r} is not a backend: expected auto, doca or soft"
                           + (f" (did you mean {close[0]!r}?)" if close else ""))
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
    from ._doca_cffi import ffi, lib as _cffi_lib  # noqa: E402
except ImportError as exc:  # a function every supported release has is missing (tests: test_versions)
    _sym = str(exc).rsplit("undefined symbol: ", 1)[-1].strip() if "undefined symbol" in str(exc) else ""
    _why = (f" ({_sym} is in every DOCA release pydoca supports, from {versions.BASELINE} on)"
            if _sym in versions.ADDED_IN else "")
    raise BackendError(f"the {backend.name} backend at {backend.paths} (DOCA runtime {backend.version}) "
                       f"lacks a DOCA symbol pydoca needs: {exc}{_why}") from exc

DOCA_ERROR_NOT_SUPPORTED = 4


def _read_missing() -> Dict[str, str]:
    """The optional functions the loaded runtime lacks: name -> DOCA release that added it."""
    out: Dict[str, str] = {}
    for i in range(_cffi_lib.pydoca_optional_count()):
        if not _cffi_lib.pydoca_optional_present(i):
            name = ffi.string(_cffi_lib.pydoca_optional_name(i)).decode()
            out[name] = versions.added_in(name)
    return out


_MISSING: Dict[str, str] = _read_missing()


def missing() -> Dict[str, str]:
    """Optional DOCA functions this runtime lacks: name -> the DOCA release that added them."""
    return dict(_MISSING)


def has(name: str) -> bool:
    """Whether the runtime provides the DOCA function ``name``."""
    return name not in _MISSING and hasattr(_cffi_lib, name)


def not_supported(name: str, what: Optional[str] = None) -> NotSupportedError:
    """The NotSupportedError for calling ``name``, which this runtime lacks."""
    since = versions.added_in(name)
    after = versions.ABSENT_IN.get(name)
    exc = NotSupportedError(
        f"{what or versions.feature(name)}: {name} is not in this DOCA runtime ({backend.version}); "
        f"it needs DOCA {since} or newer" + (f" (added after {after})" if after else ""),
        code=DOCA_ERROR_NOT_SUPPORTED)
    exc.symbol = name
    exc.added_in = since
    return exc


def require(name: str, what: Optional[str] = None) -> None:
    """Raise NotSupportedError (naming the DOCA release) unless the runtime has ``name``."""
    if name in _MISSING:
        raise not_supported(name, what)


def optional(name: str) -> Optional[Callable[..., Any]]:
    """The DOCA function ``name``, or None when the runtime lacks it."""
    return None if name in _MISSING else getattr(_cffi_lib, name)


def _stub(name: str) -> Callable[..., Any]:
    try:
        result = ffi.typeof(ffi.addressof(_cffi_lib, name)).result.cname
    except (AttributeError, TypeError, ffi.error):  # pragma: no cover - defensive
        result = ""
    returns_code = result in ("doca_error_t", "enum doca_error")

    def missing_call(*args: Any) -> Any:
        if returns_code:
            return DOCA_ERROR_NOT_SUPPORTED
        raise not_supported(name)
    missing_call.__name__ = name
    missing_call.__qualname__ = name
    missing_call.__doc__ = f"{name}: not in this DOCA runtime (added in DOCA {versions.added_in(name)})"
    return missing_call


class _Lib:
    """The cffi lib with stubs in place of the DOCA functions the runtime lacks."""

    def __init__(self, real: Any, absent: Dict[str, str]) -> None:
        for name in dir(real):
            if name not in absent:
                self.__dict__[name] = getattr(real, name)
        for name in absent:
            self.__dict__[name] = _stub(name)
        self.__dict__["_pydoca_real_lib"] = real

    def __getattr__(self, name: str) -> Any:   # anything dir() did not list
        return getattr(self.__dict__["_pydoca_real_lib"], name)

    def __repr__(self) -> str:
        return f"<pydoca lib, {len(_MISSING)} DOCA function(s) missing from runtime {backend.version}>"


lib: Any = _Lib(_cffi_lib, _MISSING) if _MISSING else _cffi_lib
if _MISSING:
    log.debug("optional DOCA functions missing", runtime=backend.version, missing=sorted(_MISSING))


def missing_note(message: str) -> Optional[NotSupportedError]:
    """For errors.check: the detailed NotSupportedError when ``message`` names a missing function."""
    head = message.split(" ", 1)[0].split(":", 1)[0].strip() if message else ""
    return not_supported(head) if head in _MISSING else None


@functools.lru_cache(maxsize=None)
def soft_fn(name: str, restype: Any, *argtypes: Any) -> Optional[Any]:
    """softdoca's extension function ``name`` (softdoca_ext.h) through ctypes, typed (the GIL is
    released while it runs); None on real DOCA, which keeps these facts internal, or on a softdoca
    build without it. Looked up once."""
    if backend.name != "soft":
        return None
    try:
        fn = getattr(ctypes.CDLL(backend.paths[0]), name)
    except (AttributeError, OSError):
        return None
    fn.argtypes, fn.restype = list(argtypes), restype
    return fn


def provider_name() -> Optional[str]:
    """softdoca's provider in use (``SOFTDOCA_PROVIDER``, docs/providers.md: "native" or "ucx"); None on real
    DOCA, where the NIC moves the bytes."""
    if backend.name != "soft":
        return None
    fn = soft_fn("softdoca_provider_name", ctypes.c_char_p)
    return (fn() or b"native").decode() if fn is not None else "native"


def conn_transports(conn_handle: Any) -> Tuple[Optional[str], Optional[str]]:
    """softdoca's transports of an established connection (a ``doca_rdma_connection *``): its own link's
    ("tcp" or "shm") and the provider's when one moves its one-sided operations ("tcp", "posix,cma",
    "rc_mlx5": docs/providers.md), else None. (None, None) on real DOCA."""
    if backend.name != "soft" or conn_handle is None or conn_handle == ffi.NULL:
        return None, None
    addr = int(ffi.cast("uintptr_t", conn_handle))
    out: List[Optional[str]] = []
    for name in ("softdoca_transport_name", "softdoca_provider_transport"):
        fn = soft_fn(name, ctypes.c_char_p, ctypes.c_void_p)
        raw = fn(addr) if fn is not None else None
        out.append(raw.decode() if raw else None)
    return out[0], out[1]


def _describe(code: int) -> str:
    raw = lib.doca_error_get_descr(code)
    return ffi.string(raw).decode() if raw != ffi.NULL else ""


_errors.HOOKS.update(describe=_describe, missing=missing_note)


__all__ = ["ffi", "lib", "backend", "BackendInfo", "BackendError", "check_version", "parse_version",
           "softdoca_path", "soft_fn", "conn_transports", "has", "missing", "not_supported", "optional", "require",
           "SUPPORTED_MIN", "SUPPORTED_MAX"]
