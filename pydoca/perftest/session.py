"""The initiator side of ``pydoca bench``: a target process, one connection,
and ``slots`` pre-built buffer pairs so each operation is one task submit."""
from __future__ import annotations

import base64
import collections
import functools
import json
import os
import subprocess
import time
from contextlib import ExitStack
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import pydoca
from pydoca import Access
from pydoca._child import module_argv

from . import ATOMIC, OPS

LOCAL = Access.LOCAL_READ_WRITE


class BenchError(RuntimeError):
    """A benchmark could not run (bad options, target failure, failed operation)."""


def backend_name() -> str:
    from pydoca._native import backend
    return str(backend.name)


def transport_env(transport: str) -> Dict[str, str]:
    """Environment for the bench's processes: softdoca's transport choice (``SOFTDOCA_TRANSPORT``); one
    OpenBLAS thread (numpy's BLAS pool, unused here, otherwise spins for a while in each new process and
    takes a CPU from the measurement on a small machine), unless the caller set it."""
    if transport not in ("tcp", "shm", "auto"):
        raise BenchError(f"unknown transport {transport!r}: tcp, shm or auto")
    if transport != "tcp" and backend_name() == "soft" and not _soft_has_transports():
        raise BenchError(f"this softdoca build has only the tcp transport; --transport {transport} needs the "
                         "same-host transport (not built yet)")
    # the children run on this process's backend, chosen once here (its fallback warning printed once, here)
    return {"OPENBLAS_NUM_THREADS": "1", **os.environ, "SOFTDOCA_TRANSPORT": transport,
            "PYDOCA_BACKEND": backend_name()}


def target_env(transport: str, spin_us: int = 0) -> Dict[str, str]:
    """The target's environment: :func:`transport_env`, and with ``spin_us`` > 0 ``SOFTDOCA_SPIN_US`` for the
    target alone: its engine thread (softdoca's NIC) polls that long after each event before it sleeps, as
    ``ucx_perftest``'s and ``fi_pingpong``'s targets poll, so a one-sided operation does not pay a thread
    wake-up at the target. Real DOCA has no such thread: a NIC serves one-sided operations itself."""
    env = transport_env(transport)
    if spin_us < 0 or spin_us > 100_000:
        raise BenchError(f"--target-spin must be between 0 and 100000 microseconds, got {spin_us}")
    if spin_us:
        if backend_name() != "soft":
            raise BenchError("--target-spin sets softdoca's engine spin (SOFTDOCA_SPIN_US); with real DOCA the "
                             "NIC serves one-sided operations: leave --target-spin out")
        env["SOFTDOCA_SPIN_US"] = str(spin_us)
    return env


def _us_of_text(raw: str, default: int) -> int:
    """A softdoca microseconds variable's text as softdoca reads it: ``strtoull`` (spaces, a sign, leading digits;
    a negative value wraps to a huge one), at most 100000; unset or empty: ``default``."""
    if not raw:
        return default
    text = raw.lstrip(" \t\n\r\f\v")
    sign = text[:1] if text[:1] in "+-" else ""
    digits = ""
    for ch in text[len(sign):]:
        if not ch.isdigit():
            break
        digits += ch
    value = int(digits) if digits else 0
    if sign == "-" and value:
        return 100_000
    return min(value, 100_000)


def _spin_of(env: Dict[str, str]) -> int:
    """SOFTDOCA_SPIN_US as softdoca reads it (default 0)."""
    return _us_of_text(env.get("SOFTDOCA_SPIN_US", ""), 0)


#: softdoca's default serving spin (SD_SERVE_SPIN_US_DEFAULT in softdoca/src/rdma/rdma.h), microseconds
SERVE_SPIN_US_DEFAULT = 100


def _serve_spin_of(env: Dict[str, str]) -> int:
    """The serving spin a softdoca target's engine has under a provider (SOFTDOCA_SERVE_SPIN_US as softdoca reads
    it); 0 on the native provider and with real DOCA, where it does not apply."""
    from pydoca._native import provider_name
    if backend_name() != "soft" or provider_name() in (None, "native"):
        return 0
    return _serve_spin_of_text(env.get("SOFTDOCA_SERVE_SPIN_US", ""))


def _serve_spin_of_text(raw: str) -> int:
    """SOFTDOCA_SERVE_SPIN_US's text as softdoca reads it (microseconds)."""
    return _us_of_text(raw, SERVE_SPIN_US_DEFAULT)


def _soft_has_transports() -> bool:
    """True when the loaded softdoca honours SOFTDOCA_TRANSPORT (exports softdoca_transport_name)."""
    import ctypes
    from pydoca._native import soft_fn
    return soft_fn("softdoca_transport_name", ctypes.c_char_p, ctypes.c_void_p) is not None


def _soft_transport_of(conn: Any) -> Optional[str]:
    """"tcp" or "shm": softdoca's transport of an established connection (None on real DOCA / unknown)."""
    from pydoca._native import conn_transports
    if backend_name() != "soft" or getattr(conn, "_c", None) is None:
        return None
    if not _soft_has_transports():
        return "tcp"
    return conn_transports(conn._c)[0]


def _soft_provider_transport(conn: Any) -> Optional[str]:
    """The provider's own transports of an established connection ("tcp", "rc_mlx5", ...: docs/providers.md);
    None when its operations take softdoca's native link (or on real DOCA)."""
    from pydoca._native import conn_transports
    return conn_transports(getattr(conn, "_c", None))[1]


class Target:
    """``python -m pydoca.perftest.target`` speaking JSON lines."""

    def __init__(self, env: Dict[str, str]) -> None:
        self.proc = subprocess.Popen(module_argv("pydoca.perftest.target"), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)

    def ask(self, cmd: Dict[str, Any], timeout: float = 30.0) -> Dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise BenchError(f"the bench target exited: {err.strip()[-2000:]}")
        reply: Dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


class Session:
    """One connection to a fresh target, ready to submit ``op`` of ``size`` bytes on ``slots`` buffers."""

    def __init__(self, op: str, size: int, *, slots: int = 1, progress: str = "blocking",
                 transport: str = "tcp", memory: str = "shared", connections: int = 1,
                 one_buffer: bool = False, target_progress: Optional[str] = None,
                 target_spin_us: int = 0) -> None:
        if op not in OPS:
            raise BenchError(f"unknown op {op!r}: one of {', '.join(OPS)}")
        if op in ATOMIC and size != 8:
            raise BenchError(f"{op} works on 8 bytes, not {size}")
        if size < 1 or slots < 1:
            raise BenchError("size and outstanding must be >= 1")
        if memory not in ("shared", "private"):
            raise BenchError(f"unknown memory {memory!r}: shared (pydoca.shared_memory) or private (bytearray)")
        if not 1 <= connections <= slots:
            raise BenchError(f"connections must be between 1 and outstanding ({slots}), got {connections}")
        self.op, self.size, self.slots, self.transport, self.memory = op, size, slots, transport, memory
        self.connections = connections
        #: every outstanding operation uses the same buffer on each side (iperf3's footprint: it sends one
        #: buffer again and again into one); default: one buffer per slot, as an RDMA application has
        self.one_buffer = one_buffer
        self.latencies: List[float] = []     # windowed(): seconds from submit to completion of each operation
        self.transport_used = transport
        #: the provider's own transports its connection used (docs/providers.md); None: the native link
        self.provider_transport: Optional[str] = None
        self.stack = ExitStack()
        env = target_env(transport, target_spin_us)
        #: what the target's engine got (an inherited SOFTDOCA_SPIN_US counts too)
        self.target_spin_us = target_spin_us or _spin_of(env)
        #: its serving spin after each operation it served (SOFTDOCA_SERVE_SPIN_US; providers only)
        self.target_serve_spin_us = _serve_spin_of(env)
        self.target = Target(env)
        self.stack.callback(self.target.close)
        try:
            self._open(progress, target_progress or progress)
        except BaseException:
            self.close()
            raise

    def _open(self, progress: str, target_progress: str) -> None:
        s, size, slots = self.stack, self.size, self.slots
        got = self.target.ask({"op": "setup", "size": size, "slots": slots, "kind": self.op,
                               "progress": target_progress, "memory": self.memory, "connections": self.connections})
        dev = s.enter_context(pydoca.Device.open(ip="127.0.0.1"))
        self.pe = s.enter_context(pydoca.ProgressEngine(mode=progress))
        self.rdma = s.enter_context(pydoca.Rdma(dev, self.pe, max_tasks=slots + 16,
                                                max_connections=max(16, self.connections),
                                                send_queue_size=max(64, 2 * slots)))
        exported = [self.rdma.export() for _ in range(self.connections)]
        self.conns = [conn for _, conn in exported]
        self.conn = self.conns[0]
        for (_, conn), theirs in zip(exported, got["conns"]):
            self.rdma.connect(base64.b64decode(theirs), conn)
        ok = self.target.ask({"op": "connect", "conns": [base64.b64encode(blob).decode() for blob, _ in exported]})
        if not ok.get("ok"):
            raise BenchError(f"the target could not connect: {ok}")
        for conn in self.conns:
            conn.wait_established(10)
        used = _soft_transport_of(self.conn)
        self.transport_used = used or self.transport
        if self.transport == "shm" and used is not None and used != "shm":
            raise BenchError("--transport shm: the same-host transport could not be used for this connection "
                             "(SOFTDOCA_LOG=debug says why); it runs over tcp")
        self.mem = bytearray(os.urandom(size * slots))
        local = s.enter_context(pydoca.MemoryMap(dev, self.mem, access=LOCAL))
        remote = s.enter_context(pydoca.MemoryMap.from_export(dev, base64.b64decode(got["mmap"])))
        inv = s.enter_context(pydoca.BufferInventory(2 * slots + 8))
        at = (lambda i: 0) if self.one_buffer else (lambda i: i * size)
        self.local = [s.enter_context(inv.buffer(local, offset=at(i), length=size,
                                                 empty=self.op in ("read",) + ATOMIC)) for i in range(slots)]
        self.remote = [s.enter_context(inv.buffer(remote, offset=at(i), length=size,
                                                  empty=self.op in ("write", "write_imm"))) for i in range(slots)]
        self.submit = self._submitter()
        # per slot, a call with no argument: a bound method for writes (no frame of the bench's own per write)
        self._calls: List[Callable[[], Any]] = [
            functools.partial(self.rdma.write, self.conns[i % len(self.conns)], self.local[i], self.remote[i])
            if self.op == "write" else functools.partial(self.submit, i) for i in range(slots)]

    def _submitter(self) -> Callable[[int], Any]:
        r, loc, rem, op = self.rdma, self.local, self.remote, self.op
        cs = [self.conns[i % len(self.conns)] for i in range(self.slots)]     # slot i: connection i mod N
        table: Dict[str, Callable[[int], Any]] = {
            "write": lambda i: r.write(cs[i], loc[i], rem[i]),
            "write_imm": lambda i: r.write_imm(cs[i], loc[i], rem[i], i),
            "read": lambda i: r.read(cs[i], rem[i], loc[i]),
            "send": lambda i: r.send(cs[i], loc[i]),
            "send_imm": lambda i: r.send_imm(cs[i], loc[i], i),
            "fetch_add": lambda i: r.fetch_add(cs[i], rem[i], loc[i], add=1),
            "compare_swap": lambda i: r.compare_swap(cs[i], rem[i], loc[i], compare=0, swap=0),
        }
        fn = table[op]
        if op in ("read",) + ATOMIC:                 # a destination buffer is emptied before reuse
            def with_reset(i: int) -> Any:
                loc[i].reset()
                return fn(i)
            return with_reset
        return fn

    def latency(self, iterations: int) -> List[float]:
        """Seconds of each operation, one at a time."""
        out: List[float] = []
        clock, submit = time.perf_counter, self.submit
        for _ in range(iterations):
            t0 = clock()
            task = submit(0).wait(10)
            out.append(clock() - t0)
            if task.error is not None:
                raise BenchError(f"{self.op} failed: {task.error}")
        return out

    def windowed(self, iterations: int) -> Tuple[float, float]:
        """(elapsed seconds, submitting thread's CPU seconds) for ``iterations`` with ``slots`` in flight,
        completed in submission order; ``latencies``: each operation's submit-to-completion time."""
        n = self.slots
        order: Deque[int] = collections.deque()
        tasks: List[Any] = [None] * n
        starts = [0.0] * n
        free = list(range(n))
        calls, clock, submitted = self._calls, time.monotonic, 0
        lat: List[float] = []
        add = lat.append
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(iterations):
            while free and submitted < iterations:
                i = free.pop()
                starts[i] = clock()
                tasks[i] = calls[i]()
                order.append(i)
                submitted += 1
            i = order.popleft()
            task = tasks[i]
            if not task.done:
                task.wait(10)
            if task.error is not None:
                raise BenchError(f"{self.op} failed: {task.error}")
            add(task.completed_at - starts[i])
            free.append(i)
        elapsed, cpu = time.perf_counter() - t0, time.thread_time() - c0
        tasks.clear()
        self.latencies = lat
        return elapsed, cpu

    def batched(self, iterations: int) -> Tuple[float, float]:
        """Like :meth:`windowed`, but ``slots`` tasks at a time as one reusable TaskBatch."""
        from pydoca.rdma.batch import TaskBatch
        if self.connections > 1:
            raise BenchError("--batch runs on one connection (a TaskBatch belongs to one)")
        if self.op not in ("write", "read", "send", "write_imm", "send_imm"):
            raise BenchError(f"--batch supports write, read, send, write_imm, send_imm, not {self.op}")
        a, b = (self.remote, self.local) if self.op == "read" else (self.local, self.remote)
        imm = list(range(self.slots)) if self.op.endswith("_imm") else None
        batch = TaskBatch(self.rdma, self.conn, self.op, a, None if self.op.startswith("send") else b, imm)
        rounds = max(1, iterations // self.slots)
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(rounds):
            if self.op == "read":
                for buf in self.local:
                    buf.reset()
            batch.submit().result(10)
        return time.perf_counter() - t0, time.thread_time() - c0

    def close(self) -> None:
        conn = getattr(self, "conn", None)
        if conn is not None and getattr(self, "provider_transport", None) is None:   # what the runs used
            self.provider_transport = _soft_provider_transport(conn)
        try:
            for conn in getattr(self, "conns", []):
                conn.disconnect()
        finally:
            self.stack.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["BenchError", "Session", "Target", "backend_name", "target_env", "transport_env"]
