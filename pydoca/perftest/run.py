"""The measurements of ``pydoca bench lat|bw|rate|peer``: rounds, medians, spread.

Each function returns the JSON object the CLI writes: ``backend``,
``transport``, ``op``, ``size``, ``iterations``, ``rounds`` and its figures
(medians over rounds), plus ``*_rounds`` lists so the spread is visible.
"""
from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

from .._child import module_argv
from .session import BenchError, Session, backend_name, transport_env

Tick = Optional[Callable[[], None]]


def _q(values: List[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _base(kind: str, op: str, size: int, iterations: int, rounds: int, transport: str,
          session: Optional[Session] = None) -> Dict[str, Any]:
    """The common JSON fields; ``transport`` is the one the connection used (``transport_requested``: asked)."""
    from pydoca._native import provider_name
    out = {"bench": kind, "backend": backend_name(), "transport": session.transport_used if session else transport,
           "transport_requested": transport, "op": op, "size": size, "iterations": iterations, "rounds": rounds,
           # softdoca's provider (SOFTDOCA_PROVIDER) and, when the connection's operations went through it, the
           # provider's own transports (docs/providers.md)
           "provider": provider_name(),
           "provider_transport": session.provider_transport if session is not None else None}
    if session is not None:
        out["memory"] = session.memory
        # the target's engine thread polled this long after each event (SOFTDOCA_SPIN_US of the target; 0: it
        # slept between operations, its default)
        out["target_spin_us"] = session.target_spin_us
        # under a provider (ucx, ofi) its engine also polled up to this long after serving a peer's operation
        # while they kept coming (SOFTDOCA_SERVE_SPIN_US; 0: not at all, as on the native provider)
        out["target_serve_spin_us"] = session.target_serve_spin_us
    return out


def lat(op: str, size: int, *, iterations: int = 2000, rounds: int = 5, progress: str = "blocking",
        transport: str = "tcp", memory: str = "shared", target_spin_us: int = 0, tick: Tick = None) -> Dict[str, Any]:
    """Completion time of one operation at a time (a full round trip)."""
    p50s, p99s = [], []
    with Session(op, size, progress=progress, transport=transport, memory=memory,
                 target_spin_us=target_spin_us) as s:
        s.latency(max(10, iterations // 10))                            # warm-up
        for _ in range(rounds):
            got = s.latency(iterations)
            p50s.append(_q(got, 0.5) * 1e6)
            p99s.append(_q(got, 0.99) * 1e6)
            if tick:
                tick()
    out = _base("lat", op, size, iterations, rounds, transport, s)
    out.update(progress=progress, p50_us=statistics.median(p50s), p99_us=statistics.median(p99s),
               p50_us_rounds=p50s, p99_us_rounds=p99s)
    return out


def _windowed(kind: str, op: str, size: int, outstanding: int, iterations: int, rounds: int, progress: str,
              transport: str, tick: Tick, batch: bool = False, memory: str = "shared",
              connections: int = 1, one_buffer: bool = False, target_spin_us: int = 0) -> Dict[str, Any]:
    rates, cpu, p50s, p99s = [], [], [], []
    with Session(op, size, slots=outstanding, progress=progress, transport=transport, memory=memory,
                 connections=connections, one_buffer=one_buffer, target_spin_us=target_spin_us) as s:
        measure = s.batched if batch else s.windowed
        iterations = max(outstanding, iterations // outstanding * outstanding) if batch else iterations
        measure(max(outstanding, iterations // 10))                     # warm-up
        for _ in range(rounds):
            elapsed, thread_cpu = measure(iterations)
            rates.append(iterations / elapsed)
            cpu.append(thread_cpu / iterations * 1e6)
            if s.latencies:                                             # windowed: each operation's time
                p50s.append(_q(s.latencies, 0.5) * 1e6)
                p99s.append(_q(s.latencies, 0.99) * 1e6)
            if tick:
                tick()
    out = _base(kind, op, size, iterations, rounds, transport, s)
    out.update(progress=progress, outstanding=outstanding, batched=batch, ops_per_s=statistics.median(rates),
               MBps=statistics.median(rates) * size / 1e6, python_us_per_task=statistics.median(cpu),
               ops_per_s_rounds=rates, python_us_per_task_rounds=cpu, connections=connections,
               one_buffer=one_buffer)
    if p50s:        # submit to completion of each operation under this load (not a lone round trip: see lat)
        out.update(op_p50_us=statistics.median(p50s), op_p99_us=statistics.median(p99s), op_p50_us_rounds=p50s,
                   op_p99_us_rounds=p99s)
    return out


def bw(op: str, size: int, *, outstanding: int = 4, iterations: int = 0, rounds: int = 5,
       progress: str = "blocking", transport: str = "tcp", memory: str = "shared", batch: bool = False,
       connections: int = 1, one_buffer: bool = False, target_spin_us: int = 0,
       tick: Tick = None) -> Dict[str, Any]:
    """Throughput with ``outstanding`` operations in flight (MBps = 10^6 bytes/s), spread round-robin over
    ``connections`` connections (outstanding is rounded up to a multiple of them); ``one_buffer``: all of
    them from one source buffer into one destination (iperf3's memory footprint)."""
    iterations = iterations or max(50, min(5000, (2 << 30) // size))
    if connections < 1:
        raise BenchError(f"connections must be >= 1, got {connections}")
    outstanding = -(-outstanding // connections) * connections
    return _windowed("bw", op, size, outstanding, iterations, rounds, progress, transport, tick, batch, memory,
                     connections, one_buffer, target_spin_us)


def rate(op: str, size: int, *, outstanding: int = 128, iterations: int = 20000, rounds: int = 5,
         progress: str = "blocking", transport: str = "tcp", batch: bool = False, memory: str = "shared",
         target_spin_us: int = 0, tick: Tick = None) -> Dict[str, Any]:
    """Message rate with ``outstanding`` operations in flight, and CPU time of the submitting thread per task;
    ``batch``: ``outstanding`` tasks submitted and completed as one TaskBatch at a time."""
    return _windowed("rate", op, size, outstanding, iterations, rounds, progress, transport, tick, batch, memory,
                     target_spin_us=target_spin_us)


PEER_SPEC = """\
version: 1
name: bench
endpoints:
  - {path: /call, type: call, buffer: {size: 4KiB}, handler: "bench_handlers:echo"}
  - {path: /icall, type: call, buffer: {size: 4KiB}, handler: "bench_handlers:echo", inline: true}
  - {path: /small, type: write, buffer: {size: 4KiB}, handler: "bench_handlers:sink"}
  - {path: /bulk, type: write, buffer: {size: 4MiB}, handler: "bench_handlers:sink", slots: 4}
"""
PEER_HANDLERS = "def echo(payload):\n    return payload\n\n\ndef sink(view, length):\n    pass\n"


def _timed(fn: Callable[[], Any], n: int, after: Optional[Callable[[], Any]] = None) -> List[float]:
    """Seconds of each of ``n`` calls of ``fn`` (``after`` runs untimed between them)."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
        if after is not None:
            after()
    return out


def peer(*, iterations: int = 1000, rounds: int = 5, progress: str = "blocking", transport: str = "tcp",
         tick: Tick = None) -> Dict[str, Any]:
    """The requester/responder layer against raw RDMA writes, interleaved in one run."""
    from ..peer import Requester
    from ..peer.spec import split_address  # noqa: F401 - import check: the peer layer is importable
    bulk_n = max(20, iterations // 50)
    fig: Dict[str, List[float]] = {k: [] for k in ("call_64B_p50_us", "call_64B_inline_p50_us", "write_8B_p50_us",
                                                   "write_8B_posted_p50_us",
                                                   "write_4MiB_MBps", "raw_write_8B_p50_us", "raw_write_4MiB_MBps",
                                                   "write_4MiB_window4_MBps", "raw_write_4MiB_4out_MBps")}
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "spec.yaml"), "w") as fh:
            fh.write(PEER_SPEC)
        with open(os.path.join(tmp, "bench_handlers.py"), "w") as fh:
            fh.write(PEER_HANDLERS)
        from .summary import free_port
        port = free_port()
        env = {**transport_env(transport), "PYTHONUNBUFFERED": "1"}
        serve = subprocess.Popen(module_argv("pydoca.cli", "serve", "spec.yaml", "--listen",
                                             f"127.0.0.1:{port}") + (["--polling"] if progress == "polling" else []),
                                 cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert serve.stdout is not None
            if "serving" not in serve.stdout.readline():
                raise BenchError("pydoca serve did not start")
            small, payload, bulk = os.urandom(8), os.urandom(64), os.urandom(4 << 20)
            # the raw references are one-sided writes, whose targets take no part: they wait blocking, so
            # with polling progress two idle targets do not spin on the cores the measured pair needs
            with Requester.connect(f"127.0.0.1:{port}", progress_mode=progress) as req, \
                    Session("write", 8, progress=progress, transport=transport,
                            target_progress="blocking") as raw8, \
                    Session("write", 4 << 20, progress=progress, transport=transport,
                            target_progress="blocking") as raw4, \
                    Session("write", 4 << 20, slots=4, progress=progress, transport=transport,
                            target_progress="blocking") as raw4w:
                window_n = max(8, bulk_n // 4 * 4)

                async def windowed() -> None:             # 4 awrite() to /bulk outstanding at a time
                    pending: List[Any] = []
                    for _ in range(window_n):
                        if len(pending) == 4:
                            await pending.pop(0)
                        pending.append(asyncio.ensure_future(req.awrite("/bulk", bulk)))
                    for p in pending:
                        await p
                for _ in range(rounds):
                    fig["call_64B_p50_us"].append(_q(_timed(lambda: req.call("/call", payload), iterations), .5) * 1e6)
                    fig["call_64B_inline_p50_us"].append(
                        _q(_timed(lambda: req.call("/icall", payload), iterations), .5) * 1e6)
                    fig["write_8B_p50_us"].append(_q(_timed(lambda: req.write("/small", small), iterations), .5) * 1e6)
                    # each posted write alone (credits back before the next, untimed): its latency, as raw's
                    posted = _timed(lambda: req.write("/small", small, posted=True), iterations, after=req.flush)
                    fig["write_8B_posted_p50_us"].append(_q(posted, .5) * 1e6)
                    fig["raw_write_8B_p50_us"].append(_q(raw8.latency(iterations), 0.5) * 1e6)
                    # bulk after many small operations: a few untimed writes first, for both
                    _timed(lambda: req.write("/bulk", bulk), 3)
                    t = _q(_timed(lambda: req.write("/bulk", bulk), bulk_n), 0.5)
                    fig["write_4MiB_MBps"].append((4 << 20) / t / 1e6)
                    raw4.latency(3)
                    fig["raw_write_4MiB_MBps"].append((4 << 20) / _q(raw4.latency(bulk_n), 0.5) / 1e6)
                    # 4 outstanding: a window of awrite()s against raw writes with 4 in flight (4 buffers)
                    t0 = time.perf_counter()
                    asyncio.run(windowed())
                    fig["write_4MiB_window4_MBps"].append(window_n * (4 << 20) / (time.perf_counter() - t0) / 1e6)
                    raw4w.windowed(4)
                    elapsed, _ = raw4w.windowed(window_n)
                    fig["raw_write_4MiB_4out_MBps"].append(window_n * (4 << 20) / elapsed / 1e6)
                    if tick:
                        tick()
        finally:
            serve.terminate()
            try:
                serve.wait(10)
            except subprocess.TimeoutExpired:
                serve.kill()
                serve.wait(10)
            if serve.stdout is not None:
                serve.stdout.close()
    out = _base("peer", "mixed", 0, iterations, rounds, transport)
    out["progress"] = progress
    out.update({k: statistics.median(v) for k, v in fig.items()})
    out.update({f"{k}_rounds": v for k, v in fig.items()})
    # each round's ratio to raw, measured back to back: robust to drifts between rounds (thread placement
    # on a small VM moves every figure by up to 2x), unlike a ratio of medians taken over all rounds
    for key, raw in PEER_RATIOS:
        per = [a / b for a, b in zip(fig[key], fig[raw])]
        out[f"ratio_{key}"], out[f"ratio_{key}_rounds"] = statistics.median(per), per
    return out


PEER_RATIOS = (("call_64B_p50_us", "raw_write_8B_p50_us"), ("call_64B_inline_p50_us", "raw_write_8B_p50_us"),
               ("write_8B_p50_us", "raw_write_8B_p50_us"), ("write_8B_posted_p50_us", "raw_write_8B_p50_us"),
               ("write_4MiB_MBps", "raw_write_4MiB_MBps"), ("write_4MiB_window4_MBps", "raw_write_4MiB_4out_MBps"))


def _n(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def describe(r: Dict[str, Any]) -> List[str]:
    """Human lines for one result: backend and transport named, medians over rounds with p99 and spread."""
    head = (f"pydoca bench {r['bench']}: {r['op']} {r['size']} B, backend {r['backend']}, "
            f"transport {r['transport']}, {r.get('memory', 'shared')} target memory, "
            f"{r.get('progress', 'blocking')} progress, {_n(r['rounds'], 'round')} x "
            f"{_n(r['iterations'], 'operation')}" + (f", {r['outstanding']} outstanding" if 'outstanding' in r else "")
            + (f" over {r['connections']} connections" if r.get("connections", 1) > 1 else "")
            + (" (task batches)" if r.get("batched") else "")
            + (", one buffer each side" if r.get("one_buffer") else "")
            + (f", target engine polling {r['target_spin_us']} us" if r.get("target_spin_us") else ""))
    if r["bench"] == "peer":
        head = (f"pydoca bench peer: backend {r['backend']}, transport {r['transport']}, "
                f"{r.get('progress', 'blocking')} progress, {_n(r['rounds'], 'round')} (medians; spread min-max over rounds)")

    def spread(key: str, unit: str, fmt: str = "{:.1f}") -> str:
        v = r[f"{key}_rounds"]
        return f"{fmt.format(r[key])} {unit} (rounds {fmt.format(min(v))}-{fmt.format(max(v))})"
    if r["bench"] == "lat":
        return [head, f"  latency p50 {spread('p50_us', 'us')}, p99 {spread('p99_us', 'us')}"]
    if r["bench"] in ("bw", "rate"):
        out = [head, f"  {r['MBps']:.1f} MB/s, {spread('ops_per_s', 'ops/s', '{:,.0f}')}, "
                     f"submitting thread {spread('python_us_per_task', 'us CPU/task', '{:.2f}')}"]
        if "op_p50_us" in r:
            out.append(f"  each operation under load: p50 {spread('op_p50_us', 'us')}, p99 {spread('op_p99_us', 'us')}")
        return out
    lines = [head]
    for key, unit in (("call_64B_p50_us", "us"), ("call_64B_inline_p50_us", "us"), ("write_8B_p50_us", "us"),
                      ("write_8B_posted_p50_us", "us"),
                      ("raw_write_8B_p50_us", "us"),
                      ("write_4MiB_MBps", "MB/s"), ("raw_write_4MiB_MBps", "MB/s"),
                      ("write_4MiB_window4_MBps", "MB/s"), ("raw_write_4MiB_4out_MBps", "MB/s")):
        lines.append(f"  {key:22s} {spread(key, unit)}")
    lines.append(f"  ratios of medians: 8 B write {r['write_8B_p50_us'] / r['raw_write_8B_p50_us']:.2f}x raw (posted "
                 f"{r['write_8B_posted_p50_us'] / r['raw_write_8B_p50_us']:.2f}x), 64 B call "
                 f"{r['call_64B_p50_us'] / r['raw_write_8B_p50_us']:.2f}x raw 8 B write (inline handler "
                 f"{r['call_64B_inline_p50_us'] / r['raw_write_8B_p50_us']:.2f}x), 4 MiB write "
                 f"{r['write_4MiB_MBps'] / r['raw_write_4MiB_MBps']:.2f} of raw bandwidth")
    if "ratio_write_8B_p50_us" in r:

        def per(key: str) -> str:
            v = r[f"ratio_{key}_rounds"]
            return f"{r[f'ratio_{key}']:.2f} ({min(v):.2f}-{max(v):.2f})"
        lines.append(f"  median of per-round ratios: 8 B write {per('write_8B_p50_us')}, posted "
                     f"{per('write_8B_posted_p50_us')}, 64 B call {per('call_64B_p50_us')}, inline "
                     f"{per('call_64B_inline_p50_us')}, 4 MiB write {per('write_4MiB_MBps')}"
                     + (f", 4 MiB window of 4 {per('write_4MiB_window4_MBps')}"
                        if "ratio_write_4MiB_window4_MBps" in r else ""))
    return lines


__all__ = ["bw", "describe", "lat", "peer", "rate"]
