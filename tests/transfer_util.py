"""Helpers of the transfer tests: target engine processes and an etcd server, all bounded."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import List, Optional

from peer_raw import wait_until  # noqa: F401 - re-exported for the transfer tests
from rdma_util import free_port

ROOT = Path(__file__).resolve().parent.parent


class Target:
    """``pydoca transfer serve`` in a subprocess; ``address`` once it serves."""

    def __init__(self, *register: str, metadata: Optional[str] = None, port: int = 0) -> None:
        cmd = [sys.executable, "-m", "pydoca.cli", "transfer", "serve", "--listen", f"127.0.0.1:{port}"]
        for r in register:
            cmd += ["--register", r]
        if metadata:
            cmd += ["--metadata", metadata]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "serving" not in line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            self.kill()
            raise AssertionError(f"transfer target did not start: {line!r} {err[-2000:]}")
        self.address = line.split()[3]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(15)
        finally:
            self.kill()
        return rc


class Etcd:
    """A real etcd server on loopback in a temporary directory (skipped where etcd is not installed)."""

    def __init__(self) -> None:
        exe = shutil.which("etcd")
        if exe is None:
            raise FileNotFoundError("etcd is not installed (Debian: apt-get install etcd-server)")
        self.dir = tempfile.mkdtemp(prefix="pydoca-etcd-")
        client, peer = free_port(), free_port()
        self.endpoint = f"127.0.0.1:{client}"
        self.proc = subprocess.Popen([exe, "--data-dir", self.dir, "--name", "pydoca-test",
                                      "--listen-client-urls", f"http://{self.endpoint}",
                                      "--advertise-client-urls", f"http://{self.endpoint}",
                                      "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                                      "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                                      "--initial-cluster", f"pydoca-test=http://127.0.0.1:{peer}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as r:
                    if b"true" in r.read():
                        return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise AssertionError("etcd did not become healthy within 20 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


__all__: List[str] = ["Etcd", "Target", "wait_until"]
