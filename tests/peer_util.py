"""Helpers of the peer tests: a `pydoca serve` subprocess and worker processes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from rdma_util import free_port  # noqa: F401 - shared by the peer tests

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WAIT = 30.0

SPEC = """\
version: 1
name: testsvc
endpoints:
  - {path: /store, type: write, buffer: {size: 4MiB}, handler: "peer_handlers:check_write"}
  - {path: /plain, type: write, buffer: {size: 64KiB}}
  - {path: /pattern, type: read, buffer: {size: 1MiB}, handler: "peer_handlers:fill_pattern"}
  - {path: /blob, type: read, buffer: {size: 4MiB}}
  - {path: /badread, type: read, buffer: {size: 4KiB}, handler: "peer_handlers:fail_read"}
  - {path: /echo, type: call, buffer: {size: 256KiB}, handler: "peer_handlers:echo"}
  - {path: /reverse, type: call, buffer: {size: 64KiB}, handler: "peer_handlers:reverse"}
  - {path: /lastcrc, type: call, buffer: {size: 64}, handler: "peer_handlers:last_crc"}
  - {path: /fail, type: call, buffer: {size: 4KiB}, handler: "peer_handlers:fail"}
  - {path: /sized, type: call, buffer: {size: 16KiB}, handler: "peer_handlers:sized"}
  - {path: /slow, type: call, buffer: {size: 64}, handler: "peer_handlers:slow"}
  - {path: /single, type: write, buffer: {size: 4KiB}, handler: "peer_handlers:slow_write", queue: 0}
  - {path: /aecho, type: call, buffer: {size: 64KiB}, handler: "peer_handlers:async_echo"}
  - {path: /big, type: write, buffer: {size: 4MiB}}
"""



def env() -> Dict[str, str]:
    path = os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


class Proc:
    """A subprocess with stdout/stderr collected by threads."""

    def __init__(self, argv: Sequence[str], cwd: Optional[Path] = None) -> None:
        self.argv = [sys.executable, *argv]
        self.popen = subprocess.Popen(self.argv, cwd=cwd or ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      stdin=subprocess.DEVNULL, env=env())
        self.out: List[bytes] = []
        self.err: List[bytes] = []
        self._threads = [threading.Thread(target=self._pump, args=(s, d), daemon=True)
                         for s, d in ((self.popen.stdout, self.out), (self.popen.stderr, self.err))]
        for t in self._threads:
            t.start()

    @staticmethod
    def _pump(stream: object, dst: List[bytes]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            dst.append(line)
        stream.close()  # type: ignore[attr-defined]

    @property
    def stdout(self) -> str:
        return b"".join(self.out).decode(errors="replace")

    @property
    def stderr(self) -> str:
        return b"".join(self.err).decode(errors="replace")

    def wait_for(self, needle: str, timeout: float = WAIT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.stdout:
                return
            if self.popen.poll() is not None:
                raise AssertionError(f"{self.argv} exited {self.popen.returncode} before {needle!r}:\n"
                                     f"{self.stdout}\n{self.stderr[-3000:]}")
            time.sleep(0.02)
        raise AssertionError(f"{self.argv}: no {needle!r} within {timeout}s:\n{self.stderr[-3000:]}")

    def finish(self, timeout: float = WAIT) -> int:
        try:
            rc = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.argv} did not finish within {timeout}s:\n{self.stderr[-3000:]}")
        for t in self._threads:
            t.join(5)
        return rc

    def terminate(self) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        return self.finish()

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(10)
        for t in self._threads:
            t.join(5)


class Server(Proc):
    """`pydoca serve` of a spec on a free loopback port."""

    def __init__(self, spec_path: Path, *extra: str, descriptor: Optional[Path] = None) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.descriptor = descriptor
        argv = ["-m", "pydoca.cli", "serve", str(spec_path.resolve()), "--listen", self.address, *extra]
        if descriptor is not None:
            argv += ["--descriptor-file", str(descriptor.resolve())]
        super().__init__(argv)
        try:
            self.wait_for("pydoca serve: serving")
        except BaseException:
            self.kill()
            raise


def write_spec(directory: Path, text: str = SPEC) -> Path:
    path = directory / "spec.yaml"
    path.write_text(text)
    return path
