"""pytest parameters for the softdoca providers this machine has (SOFTDOCA_PROVIDER with its fabric), each
skipped with the Debian packages to install where its headers or library are missing."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib", "/usr/local/lib")


def have(lib: str, header: str) -> bool:
    """The header (softdoca built the provider) and the library (it loads) are both here."""
    return os.path.exists(header) and any(Path(d, lib).exists() for d in LIB_DIRS)


def _ucx() -> Any:
    return pytest.mark.skipif(not have("libucp.so.0", "/usr/include/ucp/api/ucp.h"),
                              reason="UCX not installed (Debian: libucx-dev + libucx0)")


def _ofi() -> Any:
    return pytest.mark.skipif(not have("libfabric.so.1", "/usr/include/rdma/fabric.h"),
                              reason="libfabric not installed (Debian: libfabric-dev + libfabric1)")


UCX_TCP = pytest.param({"SOFTDOCA_PROVIDER": "ucx", "UCX_TLS": "tcp"}, id="ucx-tcp", marks=_ucx())
UCX_SHM = pytest.param({"SOFTDOCA_PROVIDER": "ucx", "UCX_TLS": "posix,cma"}, id="ucx-posix-cma", marks=_ucx())
OFI_TCP = pytest.param({"SOFTDOCA_PROVIDER": "ofi", "FI_PROVIDER": "tcp"}, id="ofi-tcp", marks=_ofi())
OFI_SHM = pytest.param({"SOFTDOCA_PROVIDER": "ofi", "FI_PROVIDER": "shm"}, id="ofi-shm", marks=_ofi())
