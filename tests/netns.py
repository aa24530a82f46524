"""Two network namespaces joined by a veth pair, for tests that cross a link
other than the loopback. Shared by test_samples.py and test_peer_netns.py.

Use it from a module-scoped fixture (one setup per test module)::

    @pytest.fixture(scope="module")
    def netns() -> Iterator[NetnsPair]:
        with veth_namespaces("10.200.77") as pair:
            yield pair

The namespaces get random names, the addresses live only on the veth pair
inside them (nothing is configured in the namespace the tests run in), and
everything is deleted on exit, also after a failure. Without root, without
iproute2, or where ``ip netns`` does not work (some containers), the test is
skipped with the reason."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional

import pytest


@dataclass(frozen=True)
class NetnsPair:
    """Namespace ``a`` holds veth ``va`` with ``ip_a``, namespace ``b`` holds ``vb`` with ``ip_b`` (a /30)."""
    a: str
    b: str
    va: str
    vb: str
    ip_a: str
    ip_b: str


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def ns_exec(ns: str) -> List[str]:
    """The argv prefix that runs a command inside namespace ``ns``."""
    return ["ip", "netns", "exec", ns]


def _pids(ns: str) -> List[int]:
    res = ip("netns", "pids", ns, check=False)
    return [int(p) for p in res.stdout.split() if p.isdigit()]


def _cleanup(created: List[str]) -> None:
    """Kill what still runs in our namespaces (only processes the tests started
    can be there), then delete them; deleting a namespace deletes its veth end
    and with it the peer."""
    for ns in created:
        for pid in _pids(ns):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5
    while any(_pids(ns) for ns in created) and time.monotonic() < deadline:
        time.sleep(0.05)
    for ns in created:
        ip("netns", "delete", ns, check=False)


@contextmanager
def veth_namespaces(subnet: str = "10.200.77") -> Iterator[NetnsPair]:
    """Create namespaces A (``subnet``.1/30) and B (``subnet``.2/30) joined by a
    veth pair, loopbacks up; skip the calling test when that is not possible."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if shutil.which("ip") is None:
        pytest.skip("iproute2 'ip' not installed")
    tag = uuid.uuid4().hex[:6]
    pair = NetnsPair(a=f"pydoca-a-{tag}", b=f"pydoca-b-{tag}", va=f"pda{tag}", vb=f"pdb{tag}",
                     ip_a=f"{subnet}.1", ip_b=f"{subnet}.2")
    created: List[str] = []
    try:
        for ns in (pair.a, pair.b):
            res = ip("netns", "add", ns, check=False)
            if res.returncode != 0:
                pytest.skip(f"'ip netns add' does not work here: {res.stderr.strip()}")
            created.append(ns)
        res = ip("link", "add", pair.va, "netns", pair.a, "type", "veth", "peer", "name", pair.vb, "netns", pair.b,
                 check=False)
        if res.returncode != 0:
            pytest.skip(f"cannot create a veth pair: {res.stderr.strip()}")
        for ns, dev, addr in ((pair.a, pair.va, pair.ip_a), (pair.b, pair.vb, pair.ip_b)):
            ip("-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        # The kernel marks a new veth running (IFF_RUNNING, operstate UP) up to a second after both ends are
        # up (link watch). Programs that list the usable interfaces once at start (UCX does) must not start
        # before: wait for it, bounded.
        wait_running((pair.a, pair.va), (pair.b, pair.vb))
        probe = subprocess.run([*ns_exec(pair.b), sys.executable, "-c",
                                "import socket; s=socket.socket(); s.settimeout(5); "
                                f"print(s.connect_ex(({pair.ip_a!r}, 9)))"],
                               capture_output=True, text=True, timeout=30)
        if probe.returncode != 0:
            pytest.skip(f"'ip netns exec' does not work here: {probe.stderr.strip()[-200:]}")
        yield pair
    finally:
        _cleanup(created)


def wait_running(*links: "tuple[str, str]", timeout: float = 10.0) -> None:
    """Wait (bounded) until each (namespace, device) is running: operstate UP, which the kernel sets up to a
    second after both ends of a new veth pair are up."""
    deadline = time.monotonic() + timeout
    for ns, dev in links:
        while "state UP" not in ip("-n", ns, "link", "show", "dev", dev).stdout and time.monotonic() < deadline:
            time.sleep(0.02)


def _hex_ipv4(addr: str) -> str:
    """/proc/net/tcp spelling of an IPv4 address (host byte order, little endian)."""
    return "".join(f"{int(x):02X}" for x in reversed(addr.split(".")))


def listening(ns: str, addr: str, port: int) -> bool:
    """Whether a TCP socket in namespace ``ns`` listens on addr:port (or on the wildcard)."""
    res = subprocess.run([*ns_exec(ns), "cat", "/proc/net/tcp"], capture_output=True, text=True, timeout=30)
    want = {f"{_hex_ipv4(addr)}:{port:04X}", f"00000000:{port:04X}"}
    for row in res.stdout.splitlines()[1:]:
        cols = row.split()
        if len(cols) > 3 and cols[1] in want and cols[3] == "0A":      # 0A: TCP_LISTEN
            return True
    return False


def wait_listening(ns: str, addr: str, port: int, timeout: float = 30.0,
                   proc: "Optional[subprocess.Popen[Any]]" = None) -> None:
    """Poll (bounded) until something listens on addr:port inside ``ns``; fail
    early when ``proc`` (the would-be listener) exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if listening(ns, addr, port):
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{proc.args!r} exited {proc.returncode} before listening on {addr}:{port}")
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {addr}:{port} in namespace {ns} after {timeout}s")
