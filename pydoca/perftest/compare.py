"""``pydoca bench compare``: pydoca's matrix against the peers on this machine, as same-run ratios.

Peers, each used only when found: ``ucx_perftest`` (Debian's ucx-utils) over
TCP (``UCX_TLS=tcp``) and shared memory (``UCX_TLS=posix,cma``), ``iperf3 -l
1M``, numpy's single-core memcpy, Python sockets, and for the peer layer the
Python peers of :mod:`.peers` (pyzmq REQ/REP, ucxx over tcp, gRPC unary;
``pip install 'pydoca[bench]'``; a missing one is reported, not fatal). Rounds interleave every
system so drift hits each alike; figures are medians with their spread.
Ratios are read against the performance targets (issue "Performance").
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import run as R
from .session import backend_name
from .summary import TcpBench, _spawn, free_port, timed


def _ucx(test: str, size: int, iters: int, tls: str, app_memory: bool = False) -> Optional[Tuple[float, float]]:
    """(p50 one-way latency us, message rate /s) of ``ucx_perftest -t test``; None when unavailable.
    ``app_memory``: its buffers from the heap (``UCX_ALLOC_PRIO=heap``), as a DOCA mmap registers the
    application's memory, instead of shared segments UCX allocates and the peer maps (which UCX 1.13's
    shared-memory put needs for its one-copy path)."""
    exe = shutil.which("ucx_perftest")
    if exe is None:
        return None
    port = free_port()
    env = {**os.environ, "UCX_TLS": tls, "UCX_NET_DEVICES": "lo" if tls == "tcp" else "all"}
    if app_memory:
        env["UCX_ALLOC_PRIO"] = "heap"
    server = subprocess.Popen([exe, "-p", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        out = subprocess.run([exe, "127.0.0.1", "-p", str(port), "-t", test, "-s", str(size), "-n", str(iters)],
                             env=env, capture_output=True, text=True, timeout=60)
        final = [ln for ln in out.stdout.splitlines() if ln.startswith("Final:")]
        if not final:
            return None
        cols = final[-1].split()
        return float(cols[2]), float(cols[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return None
    finally:
        server.kill()
        server.wait(10)


def _iperf3(seconds: float = 2.0) -> Optional[float]:
    """iperf3 -l 1M over loopback, MB/s (10^6 bytes/s); None when unavailable."""
    exe = shutil.which("iperf3")
    if exe is None:
        return None
    port = free_port()
    server = subprocess.Popen([exe, "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for attempt in range(10):           # the server may not listen yet on a loaded machine: try again
            time.sleep(0.3)
            out = subprocess.run([exe, "-c", "127.0.0.1", "-p", str(port), "-l", "1M", "-t", str(seconds), "-J"],
                                 capture_output=True, text=True, timeout=30 + seconds)
            try:
                return float(json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"]) / 8e6
            except (ValueError, KeyError):
                if server.poll() is not None:
                    return None
        return None
    except subprocess.TimeoutExpired:
        return None
    finally:
        server.kill()
        server.wait(10)


def _memcpy_MBps(size: int = 1 << 20, n: int = 2000) -> float:
    import numpy as np
    src, dst = np.ones(size, dtype=np.uint8), np.empty(size, dtype=np.uint8)
    np.copyto(dst, src)
    t0 = time.perf_counter()
    for _ in range(n):
        np.copyto(dst, src)
    return size * n / (time.perf_counter() - t0) / 1e6


def _python_tcp(iters: int) -> Tuple[float, float]:
    """Python sockets over loopback: (8 B ping-pong us, 1 MiB send+ack MB/s)."""
    port = free_port()
    proc = _spawn(["pydoca.perftest.summary", "--tcp-server", str(port)], dict(os.environ))
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        tcp = TcpBench(port)
        try:
            lat = timed(tcp.ping, iters, iters // 10) * 1e6
            bw = (1 << 20) / timed(lambda: tcp.bulk(1 << 20), max(20, iters // 20), 3) / 1e6
        finally:
            tcp.close()
        return lat, bw
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def one_round(quick: bool) -> Dict[str, Optional[float]]:
    n = 300 if quick else 3000
    f: Dict[str, Optional[float]] = {}
    f["pydoca_lat_write_8B_blocking_us"] = R.lat("write", 8, iterations=n, rounds=1)["p50_us"]
    f["pydoca_lat_write_8B_polling_us"] = R.lat("write", 8, iterations=n, rounds=1, progress="polling")["p50_us"]
    f["pydoca_rate_write_8B_ops"] = R.rate("write", 8, iterations=10 * n, rounds=1)["ops_per_s"]
    bw_n = n // 3 if quick else 2048      # ~0.4 s, as long as a bench bw round (iperf3 runs 2 s)
    f["pydoca_bw_write_1MiB_MBps"] = R.bw("write", 1 << 20, iterations=bw_n, rounds=1)["MBps"]
    # iperf3 -l 1M sends one 1 MiB buffer again and again into one: the same memory footprint (cache-resident);
    # four outstanding writes from and into four buffers move 4 MiB through each side's caches instead
    f["pydoca_bw_write_1MiB_one_buffer_MBps"] = R.bw("write", 1 << 20, iterations=bw_n, rounds=1,
                                                      one_buffer=True)["MBps"]
    f["pydoca_rate_write_8B_batch_ops"] = R.rate("write", 8, iterations=100 * n, rounds=1, batch=True)["ops_per_s"]
    one = R.bw("write", 1 << 20, outstanding=8, iterations=bw_n, rounds=1)
    eight = R.bw("write", 1 << 20, outstanding=8, connections=8, iterations=bw_n, rounds=1)
    f["pydoca_bw_write_1MiB_1conn_MBps"], f["pydoca_bw_write_1MiB_8conn_MBps"] = one["MBps"], eight["MBps"]
    f["pydoca_8conn_op_p99_us"], f["pydoca_8conn_op_p50_us"] = eight["op_p99_us"], eight["op_p50_us"]
    f["three_x_p50_us"] = 3 * eight["op_p50_us"]
    shm = _same_host()
    if shm:                                            # softdoca's same-host transport (a memfd target)
        f["pydoca_shm_lat_write_8B_us"] = R.lat("write", 8, iterations=n, rounds=1, transport="shm")["p50_us"]
        f["pydoca_shm_rate_write_8B_batch_ops"] = R.rate("write", 8, iterations=100 * n, rounds=1, batch=True,
                                                         transport="shm")["ops_per_s"]
        f["pydoca_shm_bw_write_1MiB_MBps"] = R.bw("write", 1 << 20, outstanding=1, iterations=n // 3, rounds=1,
                                                  batch=True, transport="shm")["MBps"]
        # numpy's copy loop: one 1 MiB source into one destination again and again (both cache-resident);
        # batches of 8 such writes carry the Python cost of one batch, not of one write each
        f["pydoca_shm_bw_write_1MiB_one_buffer_MBps"] = R.bw("write", 1 << 20, outstanding=8, iterations=bw_n,
                                                             rounds=1, batch=True, one_buffer=True,
                                                             transport="shm")["MBps"]
    ucx_lat = _ucx("ucp_put_lat", 8, 10 * n, "tcp")
    ucx_bw = _ucx("ucp_put_bw", 8, 100 * n, "tcp")
    ucx_shm = _ucx("ucp_put_lat", 8, 10 * n, "posix,cma")
    ucx_shm_app = _ucx("ucp_put_lat", 8, 10 * n, "posix,cma", app_memory=True)
    ucx_shm_app_bw = _ucx("ucp_put_bw", 1 << 20, max(200, n // 3), "posix,cma", app_memory=True)
    f["ucx_tcp_put_lat_rtt_us"] = None if ucx_lat is None else 2 * ucx_lat[0]
    f["ucx_tcp_put_bw_8B_ops"] = None if ucx_bw is None else ucx_bw[1]
    f["ucx_shm_put_lat_rtt_us"] = None if ucx_shm is None else 2 * ucx_shm[0]
    f["ucx_shm_app_memory_put_lat_rtt_us"] = None if ucx_shm_app is None else 2 * ucx_shm_app[0]
    # MB/s (10^6 bytes/s) from its rate of 1 MiB puts
    f["ucx_shm_app_memory_put_bw_1MiB_MBps"] = None if ucx_shm_app_bw is None else ucx_shm_app_bw[1] * (1 << 20) / 1e6
    f["one_million_ops"] = 1e6 if shm else None        # the same-host rate target, as a fixed peer
    f["iperf3_1M_MBps"] = _iperf3(1.0 if quick else 2.0)
    f["numpy_memcpy_1MiB_MBps"] = _memcpy_MBps(n=200 if quick else 2000)
    f["python_tcp_pingpong_8B_us"], f["python_tcp_1MiB_MBps"] = _python_tcp(n)
    f.update(_peer_layer(n))
    f.update(_python_peers(n))
    f.update(_ucx_provider(n))
    f.update(_ofi_provider(n))
    return f


def _provider_ready(name: str, library: str) -> bool:
    """softdoca built with provider ``name`` (ucx, ofi), and its library (ucp, fabric) found
    (docs/providers.md)."""
    import ctypes
    import ctypes.util
    from .._native import soft_fn
    if backend_name() != "soft" or ctypes.util.find_library(library) is None:
        return False
    built = soft_fn("softdoca_providers_built", ctypes.c_char_p)
    return built is not None and name.encode() in (built() or b"").split(b",")


def _ucx_provider_ready() -> bool:
    return _provider_ready("ucx", "ucp")


def _ofi_provider_ready() -> bool:
    return _provider_ready("ofi", "fabric")


def _bench_child(kind: str, args: List[str], env: Dict[str, str], rounds: int = 1) -> Optional[Dict[str, Any]]:
    """``pydoca bench KIND ARGS --json -`` in a child with env (a provider is chosen once per process)."""
    from .._child import module_argv
    try:
        out = subprocess.run(module_argv("pydoca.cli", "bench", kind, *args, "--rounds", str(rounds), "--json", "-"),
                             capture_output=True, text=True, timeout=300, env={**os.environ, **env})
        got: Dict[str, Any] = json.loads(out.stdout)
        return got
    except (subprocess.TimeoutExpired, ValueError):
        return None


def _ucx_provider(n: int) -> Dict[str, Optional[float]]:
    """softdoca with SOFTDOCA_PROVIDER=ucx (issue 22): UCX over tcp and over shared memory under the DOCA API,
    against ucx_perftest on the same transport (its rows in RATIOS)."""
    keys = ("pydoca_ucx_tcp_lat_write_8B_polling_us", "pydoca_ucx_tcp_lat_write_8B_polling_tspin_us",
            "pydoca_ucx_tcp_rate_write_8B_batch_ops", "pydoca_ucx_shm_lat_write_8B_polling_us",
            "pydoca_ucx_shm_lat_write_8B_polling_tspin_us", "pydoca_ucx_shm_bw_write_1MiB_MBps")
    f: Dict[str, Optional[float]] = {k: None for k in keys}
    if not _ucx_provider_ready():
        MISSING["ucx provider"] = "softdoca built without UCX's headers or libucp absent (Debian: libucx-dev)"
        return f
    MISSING.pop("ucx provider", None)
    for tls, tag in (("tcp", "tcp"), ("posix,cma", "shm")):
        env = {"SOFTDOCA_PROVIDER": "ucx", "UCX_TLS": tls}
        lat = _bench_child("lat", ["--op", "write", "--size", "8", "--progress", "polling", "--iterations", str(n)],
                           env)
        f[f"pydoca_ucx_{tag}_lat_write_8B_polling_us"] = lat["p50_us"] if lat else None
        # the same with the target's engine thread polling, as ucx_perftest's target polls its worker
        lat = _bench_child("lat", ["--op", "write", "--size", "8", "--progress", "polling", "--iterations", str(n),
                                   "--target-spin", str(TARGET_SPIN_US)], env)
        f[f"pydoca_ucx_{tag}_lat_write_8B_polling_tspin_us"] = lat["p50_us"] if lat else None
        if tag == "tcp":
            # the Python rows are measured polling (as ucx_perftest's sides poll)
            rate = _bench_child("rate", ["--op", "write", "--size", "8", "--batch", "--progress", "polling",
                                         "--iterations", str(100 * n)], env)
            f["pydoca_ucx_tcp_rate_write_8B_batch_ops"] = rate["ops_per_s"] if rate else None
        else:
            bw = _bench_child("bw", ["--op", "write", "--size", "1MiB", "--outstanding", "8", "--batch",
                                     "--one-buffer", "--progress", "polling", "--iterations", str(max(64, n // 3))],
                              env)
            f["pydoca_ucx_shm_bw_write_1MiB_MBps"] = bw["MBps"] if bw else None
    return f


#: the target's engine spin of the "target engine polling" rows (bench --target-spin), microseconds
TARGET_SPIN_US = 1000


def _fi_pingpong_rtt_us(fabric: str, iters: int) -> Optional[float]:
    """The round trip of libfabric's own ``fi_pingpong`` (libfabric-bin), 8 B: twice its usec/xfer (one
    transfer is one way); tcp on MSG endpoints, shm on RDM ones, as the ofi provider uses them. Up to three
    pairs, each on a fresh port; why the last one failed goes to MISSING."""
    exe = shutil.which("fi_pingpong")
    if exe is None:
        return None
    args = ["-p", fabric, "-e", "msg" if fabric == "tcp" else "rdm", "-S", "8", "-I", str(iters)]
    why = "no result"
    for _ in range(3):
        port = free_port()
        server = subprocess.Popen([exe, *args, "-B", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
        try:
            for _ in range(10):             # the server may not listen yet on a loaded machine: try again
                time.sleep(0.3)
                out = subprocess.run([exe, *args, "-P", str(port), "127.0.0.1"], capture_output=True, text=True,
                                     timeout=60)
                lines = [ln.split() for ln in out.stdout.splitlines() if ln.strip()]
                if out.returncode == 0 and len(lines) >= 2 and len(lines[-1]) == len(lines[0]) and \
                        "usec/xfer" in lines[0]:
                    MISSING.pop(f"fi_pingpong {fabric}", None)
                    return 2 * float(lines[-1][lines[0].index("usec/xfer")])
                why = f"client exit {out.returncode}: {(out.stderr or out.stdout).strip()[-200:]}"
                if server.poll() is not None:
                    why += f"; server exit {server.returncode}"
                    break
        except (subprocess.TimeoutExpired, ValueError) as exc:
            why = f"{type(exc).__name__}: {exc}"
        finally:
            server.kill()
            _, err = server.communicate(timeout=10)
            if err and err.strip():
                why += f"; server: {err.strip()[-200:]}"
    MISSING[f"fi_pingpong {fabric}"] = why
    return None


def _ofi_raw_exe() -> Optional[str]:
    """softdoca's raw libfabric program (softdoca/bench/ofi_raw_bw.c, built by ``make -C softdoca
    build/bench/ofi_raw_bw``): PYDOCA_OFI_RAW_BW, else the build folder of a source tree."""
    exe = os.environ.get("PYDOCA_OFI_RAW_BW")
    if exe:
        return exe if os.access(exe, os.X_OK) else None
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "softdoca", "build", "bench", "ofi_raw_bw")
    return here if os.access(here, os.X_OK) else None


def _ofi_raw_MBps(fabric: str) -> Optional[float]:
    """1 MiB writes, 16 in flight, one buffer each side, delivery-complete (a DOCA write's completion), from the
    raw libfabric program: its median MB/s (2^20 bytes/us)."""
    exe = _ofi_raw_exe()
    if exe is None:
        MISSING["ofi raw program"] = ("softdoca/bench/ofi_raw_bw not built: make -C softdoca build/bench/ofi_raw_bw "
                                      "(or set PYDOCA_OFI_RAW_BW)")
        return None
    MISSING.pop("ofi raw program", None)
    try:
        out = subprocess.run([exe, "--dc"], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "FI_PROVIDER": fabric})
        got = [w for w in out.stdout.split() if w.startswith("write1M_MBps_median=")]
        # the program divides bytes by microseconds: 10^6 bytes/s, as MBps everywhere here
        return float(got[0].split("=", 1)[1]) if got else None
    except (subprocess.TimeoutExpired, ValueError):
        return None


def _ofi_provider(n: int) -> Dict[str, Optional[float]]:
    """softdoca with SOFTDOCA_PROVIDER=ofi (issue 24), over libfabric's tcp and shm, against fi_pingpong and the
    raw libfabric program on the same fabric (their rows in RATIOS)."""
    keys = ("pydoca_ofi_tcp_lat_write_8B_polling_us", "pydoca_ofi_tcp_lat_write_8B_polling_tspin_us",
            "pydoca_ofi_shm_lat_write_8B_polling_us", "pydoca_ofi_shm_lat_write_8B_polling_tspin_us",
            "pydoca_ofi_tcp_bw_write_1MiB_tspin_MBps", "pydoca_ofi_tcp_bw_write_1MiB_batch_tspin_MBps",
            "fi_pingpong_tcp_rtt_us", "fi_pingpong_shm_rtt_us", "ofi_raw_tcp_write_1MiB_MBps")
    f: Dict[str, Optional[float]] = {k: None for k in keys}
    if not _ofi_provider_ready():
        MISSING["ofi provider"] = ("softdoca built without libfabric's headers or libfabric absent (Debian: "
                                   "libfabric-dev)")
        return f
    MISSING.pop("ofi provider", None)
    tcp = {"SOFTDOCA_PROVIDER": "ofi", "FI_PROVIDER": "tcp"}
    shm = {"SOFTDOCA_PROVIDER": "ofi", "FI_PROVIDER": "shm"}

    def lat(env: Dict[str, str], iters: int, *extra: str) -> Optional[float]:
        got = _bench_child("lat", ["--op", "write", "--size", "8", "--progress", "polling", "--iterations",
                                   str(iters), *extra], env)
        return got["p50_us"] if got else None
    spin = ("--target-spin", str(TARGET_SPIN_US))
    f["pydoca_ofi_tcp_lat_write_8B_polling_us"] = lat(tcp, n)
    f["pydoca_ofi_tcp_lat_write_8B_polling_tspin_us"] = lat(tcp, n, *spin)
    # as many writes as the row below: with shm's doorbell and the target's serving promise (docs/providers.md)
    # a write no longer waits for the target's millisecond poll, which once made this row run fewer
    f["pydoca_ofi_shm_lat_write_8B_polling_us"] = lat(shm, n)
    # with the target's engine polling (on shm: for as long as it runs, nothing tells it a peer posted)
    f["pydoca_ofi_shm_lat_write_8B_polling_tspin_us"] = lat(shm, n, *spin)
    # the raw program's footprint and its median of 3 rounds: one 1 MiB buffer each side, 16 in flight, 512
    # writes a round, its target polling (a lone round of 0.1 s moved by 30% here: TCP's buffers still growing)
    # single tasks, then the same 16 in flight as one TaskBatch at a time (pydoca's bulk path, as the same-host
    # rows use)
    for key, batch in (("pydoca_ofi_tcp_bw_write_1MiB_tspin_MBps", ()),
                       ("pydoca_ofi_tcp_bw_write_1MiB_batch_tspin_MBps", ("--batch",))):
        bw = _bench_child("bw", ["--op", "write", "--size", "1MiB", "--outstanding", "16", *batch, "--one-buffer",
                                 "--iterations", "512", *spin], tcp, rounds=3)
        f[key] = bw["MBps"] if bw else None
    f["fi_pingpong_tcp_rtt_us"] = _fi_pingpong_rtt_us("tcp", 10 * n)
    f["fi_pingpong_shm_rtt_us"] = _fi_pingpong_rtt_us("shm", 10 * n)
    f["ofi_raw_tcp_write_1MiB_MBps"] = _ofi_raw_MBps("tcp")
    return f


#: why a Python peer gave no figures in the last round (peer -> reason), reported beside the table
MISSING: Dict[str, str] = {}
PY_PEERS = (("zmq", "pyzmq_reqrep"), ("ucxx", "ucxx_tcp"), ("grpc", "grpc_unary"))


def _peer_layer(n: int) -> Dict[str, Optional[float]]:
    """pydoca.peer (calls, confirmed, posted and bulk endpoint writes) and the raw writes of the same round."""
    p = R.peer(iterations=n, rounds=1)
    keys = ("call_64B_p50_us", "call_64B_inline_p50_us", "write_8B_p50_us", "write_8B_posted_p50_us",
            "raw_write_8B_p50_us", "write_4MiB_MBps", "raw_write_4MiB_MBps", "write_4MiB_window4_MBps",
            "raw_write_4MiB_4out_MBps")
    return {f"pydoca_peer_{k.replace('_p50', '')}": p[k] for k in keys}


def _python_peers(n: int) -> Dict[str, Optional[float]]:
    """pyzmq REQ/REP, ucxx over tcp and gRPC's unary call: a 64 B round trip and 4 MiB requests (MB/s)."""
    from .peers import measure
    out: Dict[str, Optional[float]] = {}
    for peer, prefix in PY_PEERS:
        got = measure(peer, n)
        if "error" in got:
            MISSING[peer] = str(got["error"])
        else:
            MISSING.pop(peer, None)
        out[f"{prefix}_64B_rtt_us"] = got.get("rtt_us")
        out[f"{prefix}_4MiB_MBps"] = got.get("MBps")
    return out


RATIOS: List[Tuple[str, str, str, str, Callable[[float], bool]]] = [
    ("8 B write latency (TCP) / UCX put_lat RTT", "pydoca_lat_write_8B_polling_us", "ucx_tcp_put_lat_rtt_us",
     "<= 2x", lambda r: r <= 2),
    ("8 B write rate 128 outstanding, one task at a time / UCX put_bw", "pydoca_rate_write_8B_ops",
     "ucx_tcp_put_bw_8B_ops", ">= 0.5", lambda r: r >= 0.5),
    ("1 MiB write bandwidth, one buffer each side / iperf3 -l 1M", "pydoca_bw_write_1MiB_one_buffer_MBps",
     "iperf3_1M_MBps", ">= 0.8", lambda r: r >= 0.8),
    ("1 MiB write bandwidth, a buffer per write / iperf3 -l 1M", "pydoca_bw_write_1MiB_MBps", "iperf3_1M_MBps",
     "(info)", lambda r: True),
    ("8 B write latency (blocking) / Python TCP ping-pong", "pydoca_lat_write_8B_blocking_us",
     "python_tcp_pingpong_8B_us", "(info)", lambda r: True),
    ("8 B write rate, task batches of 128 / UCX put_bw", "pydoca_rate_write_8B_batch_ops", "ucx_tcp_put_bw_8B_ops",
     ">= 1.0", lambda r: r >= 1),
    ("scale: 1 MiB writes, 8 connections / 1 connection", "pydoca_bw_write_1MiB_8conn_MBps",
     "pydoca_bw_write_1MiB_1conn_MBps", ">= 0.9", lambda r: r >= 0.9),
    ("scale: 8 connections, p99 / (3 x p50) of each write", "pydoca_8conn_op_p99_us", "three_x_p50_us", "<= 1.0",
     lambda r: r <= 1),
    ("same host: 8 B write latency / UCX posix,cma RTT", "pydoca_shm_lat_write_8B_us", "ucx_shm_put_lat_rtt_us",
     "<= 15x", lambda r: r <= 15),
    ("same host: 8 B write rate, batches / 1,000,000", "pydoca_shm_rate_write_8B_batch_ops", "one_million_ops",
     ">= 1.0", lambda r: r >= 1),
    ("same host: 1 MiB write bandwidth, batches of 8, one buffer each side / numpy memcpy",
     "pydoca_shm_bw_write_1MiB_one_buffer_MBps", "numpy_memcpy_1MiB_MBps", ">= 0.8", lambda r: r >= 0.8),
    ("same host: 1 MiB write bandwidth, one write at a time / numpy memcpy", "pydoca_shm_bw_write_1MiB_MBps",
     "numpy_memcpy_1MiB_MBps", "(info)", lambda r: True),
    # the requester/responder layer against what a user would pick instead between two Python processes
    ("peer: 64 B call, handler on the worker pool / pyzmq REQ/REP 64 B round trip", "pydoca_peer_call_64B_us",
     "pyzmq_reqrep_64B_rtt_us", "<= 1.0", lambda r: r <= 1),
    ("peer: 64 B call, inline handler / pyzmq REQ/REP 64 B round trip", "pydoca_peer_call_64B_inline_us",
     "pyzmq_reqrep_64B_rtt_us", "<= 0.75", lambda r: r <= 0.75),
    ("peer: 8 B confirmed endpoint write / pyzmq REQ/REP 64 B round trip", "pydoca_peer_write_8B_us",
     "pyzmq_reqrep_64B_rtt_us", "<= 1.0", lambda r: r <= 1),
    ("peer: 8 B posted endpoint write / raw 8 B write", "pydoca_peer_write_8B_posted_us",
     "pydoca_peer_raw_write_8B_us", "<= 1.5", lambda r: r <= 1.5),
    ("peer: 4 MiB endpoint write / raw 4 MiB write, one at a time", "pydoca_peer_write_4MiB_MBps",
     "pydoca_peer_raw_write_4MiB_MBps", ">= 0.9", lambda r: r >= 0.9),
    ("peer: 4 MiB awrite(), 4 outstanding / raw 4 MiB writes, 4 outstanding", "pydoca_peer_write_4MiB_window4_MBps",
     "pydoca_peer_raw_write_4MiB_4out_MBps", ">= 0.9", lambda r: r >= 0.9),
    ("peer: 4 MiB endpoint write / pyzmq REQ/REP 4 MiB request", "pydoca_peer_write_4MiB_MBps",
     "pyzmq_reqrep_4MiB_MBps", ">= 1.0", lambda r: r >= 1),
    ("peer: 64 B call, worker pool / ucxx 64 B round trip (tcp)", "pydoca_peer_call_64B_us",
     "ucxx_tcp_64B_rtt_us", "<= 1.0", lambda r: r <= 1),
    ("peer: 4 MiB endpoint write / ucxx 4 MiB message (tcp)", "pydoca_peer_write_4MiB_MBps", "ucxx_tcp_4MiB_MBps",
     ">= 1.0", lambda r: r >= 1),
    ("peer: 64 B call, worker pool / gRPC unary 64 B call", "pydoca_peer_call_64B_us", "grpc_unary_64B_rtt_us",
     "<= 1.0", lambda r: r <= 1),
    ("peer: 4 MiB endpoint write / gRPC unary 4 MiB request", "pydoca_peer_write_4MiB_MBps", "grpc_unary_4MiB_MBps",
     "(info)", lambda r: True),
    # softdoca's ucx provider (SOFTDOCA_PROVIDER=ucx) against UCX's own tool on the same transport (issue 22)
    ("ucx provider, tcp: 8 B write latency (polling, target as by default: serving spin) / UCX put_lat RTT",
     "pydoca_ucx_tcp_lat_write_8B_polling_us",
     "ucx_tcp_put_lat_rtt_us", "<= 1.5x", lambda r: r <= 1.5),
    ("ucx provider, tcp: 8 B write latency (polling, target engine polling) / UCX put_lat RTT",
     "pydoca_ucx_tcp_lat_write_8B_polling_tspin_us", "ucx_tcp_put_lat_rtt_us", "<= 1.5x", lambda r: r <= 1.5),
    ("ucx provider, tcp: 8 B write rate, task batches (polling) / UCX put_bw", "pydoca_ucx_tcp_rate_write_8B_batch_ops",
     "ucx_tcp_put_bw_8B_ops", ">= 1.0", lambda r: r >= 1),
    ("ucx provider, posix+cma: 8 B write latency (polling, target as by default: serving spin) / UCX posix,cma RTT",
     "pydoca_ucx_shm_lat_write_8B_polling_us", "ucx_shm_put_lat_rtt_us", "<= 10x", lambda r: r <= 10),
    ("ucx provider, posix+cma: 8 B write latency (polling, target engine polling) / UCX posix,cma RTT",
     "pydoca_ucx_shm_lat_write_8B_polling_tspin_us", "ucx_shm_put_lat_rtt_us", "<= 10x", lambda r: r <= 10),
    # ucx_perftest on the application's memory (UCX_ALLOC_PRIO=heap), the memory a DOCA mmap registers
    ("ucx provider, posix+cma: 8 B write latency (polling, target engine polling) / UCX posix,cma RTT on "
     "application memory", "pydoca_ucx_shm_lat_write_8B_polling_tspin_us", "ucx_shm_app_memory_put_lat_rtt_us",
     "<= 10x", lambda r: r <= 10),
    ("ucx provider, posix+cma: 1 MiB write bandwidth, batches of 8, one buffer (polling) / numpy memcpy",
     "pydoca_ucx_shm_bw_write_1MiB_MBps", "numpy_memcpy_1MiB_MBps", ">= 1.0", lambda r: r >= 1),
    ("ucx provider, posix+cma: 1 MiB write bandwidth, batches of 8, one buffer (polling) / UCX put_bw on application memory",
     "pydoca_ucx_shm_bw_write_1MiB_MBps", "ucx_shm_app_memory_put_bw_1MiB_MBps", ">= 0.9", lambda r: r >= 0.9),
    # softdoca's ofi provider (SOFTDOCA_PROVIDER=ofi) against libfabric's own figures on the same fabric (issue 24)
    ("ofi provider, tcp: 8 B write latency (polling, target as by default: serving spin) / fi_pingpong tcp RTT",
     "pydoca_ofi_tcp_lat_write_8B_polling_us",
     "fi_pingpong_tcp_rtt_us", "<= 2x", lambda r: r <= 2),
    ("ofi provider, tcp: 8 B write latency (polling, target engine polling) / fi_pingpong tcp RTT",
     "pydoca_ofi_tcp_lat_write_8B_polling_tspin_us", "fi_pingpong_tcp_rtt_us", "<= 2x", lambda r: r <= 2),
    ("ofi provider, shm: 8 B write latency (polling, target as by default: serving spin) / fi_pingpong shm RTT",
     "pydoca_ofi_shm_lat_write_8B_polling_us",
     "fi_pingpong_shm_rtt_us", "<= 10x", lambda r: r <= 10),
    ("ofi provider, shm: 8 B write latency (polling, target engine polling) / fi_pingpong shm RTT",
     "pydoca_ofi_shm_lat_write_8B_polling_tspin_us", "fi_pingpong_shm_rtt_us", "<= 10x", lambda r: r <= 10),
    ("ofi provider, tcp: 1 MiB write bandwidth, 16 outstanding, one buffer / raw libfabric fi_write (delivery "
     "complete)", "pydoca_ofi_tcp_bw_write_1MiB_tspin_MBps", "ofi_raw_tcp_write_1MiB_MBps", ">= 0.9",
     lambda r: r >= 0.9),
    ("ofi provider, tcp: 1 MiB write bandwidth, task batches of 16, one buffer / raw libfabric fi_write (delivery "
     "complete)", "pydoca_ofi_tcp_bw_write_1MiB_batch_tspin_MBps", "ofi_raw_tcp_write_1MiB_MBps", ">= 0.9",
     lambda r: r >= 0.9),
]


def _same_host() -> bool:
    """True when the backend has softdoca's same-host transport (real DOCA has no such thing)."""
    from .session import _soft_has_transports
    return backend_name() == "soft" and _soft_has_transports()


#: round figures that are not measurements: fixed targets or figures derived from one, used as the
#: denominators of RATIOS (kept in the JSON, never printed as measured)
HELPERS = {"one_million_ops": "the same-host rate target, 1,000,000 operations/s",
           "three_x_p50_us": "3 x the p50 of each write over 8 connections"}
TARGETS_NOTE = "the targets are pydoca's own goals (docs/performance.md), not external standards"


def report(med: Dict[str, Optional[float]], rounds: List[Dict[str, Optional[float]]], backend: str,
           n_rounds: int) -> Tuple[List[str], List[Dict[str, Any]]]:
    """The printed lines and the ratio table: measured figures first (helper constants left out), then each
    ratio against its target, in columns as wide as the longest label."""
    lines = [f"pydoca bench compare: backend {backend}, {n_rounds} interleaved round{'s' if n_rounds != 1 else ''} "
             "(medians)", "", "measured figures:"]
    figures = [k for k in med if k not in HELPERS]
    width = max(len(k) for k in figures)
    for key in figures:
        value = med[key]
        vals = [r[key] for r in rounds if r.get(key) is not None]
        shown = ("not available" if value is None else
                 f"{value:,.1f}" + (f" (rounds {min(vals):,.1f}-{max(vals):,.1f})"  # type: ignore[type-var]
                                    if len(vals) > 1 else ""))
        lines.append(f"  {key:<{width}}  {shown}")
    table: List[Dict[str, Any]] = []
    rows: List[Tuple[str, str, str, str]] = []
    for label, a, b, target, ok in RATIOS:
        if med.get(a) is None or med.get(b) is None or not med[b]:
            rows.append((label, "n/a", target, "peer missing"))
            continue
        ratio = float(med[a]) / float(med[b])  # type: ignore[arg-type]
        met = ok(ratio)
        table.append({"measure": label, "ratio": ratio, "target": target, "met": met})
        rows.append((label, f"{ratio:.2f}", target, "" if target == "(info)" else ("met" if met else "NOT MET")))
    lw = max(len(r[0]) for r in rows + [("measure (same run)", "", "", "")])
    rw = max(len(r[1]) for r in rows + [("", "ratio", "", "")])
    tw = max(len(r[2]) for r in rows + [("", "", "target", "")])
    lines += ["", f"same-run ratios against targets; {TARGETS_NOTE}; (info) rows have none:",
              f"  {'measure (same run)':<{lw}}  {'ratio':>{rw}}  {'target':<{tw}}  result"]
    lines += [f"  {label:<{lw}}  {ratio:>{rw}}  {target:<{tw}}  {result}".rstrip()
              for label, ratio, target, result in rows]
    return lines, table


def _rounds_with_progress(n: int, quick: bool) -> List[Dict[str, Optional[float]]]:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    console = Console(stderr=True)
    out = []
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console,
                  transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task(f"bench compare: {n} round{'s' if n != 1 else ''}", total=n)
        for _ in range(n):
            out.append(one_round(quick))
            bar.advance(task)
    return out


def run(args: argparse.Namespace) -> int:
    rounds = _rounds_with_progress(args.rounds, args.quick)
    med: Dict[str, Optional[float]] = {}
    for key in rounds[0]:
        vals = [r[key] for r in rounds if r[key] is not None]
        med[key] = statistics.median(vals) if vals else None   # type: ignore[type-var]
    lines, table = report(med, rounds, backend_name(), args.rounds)
    if MISSING:
        lines += ["", "Python peers missing (their rows read 'peer missing'):"]
        lines += [f"  {peer}: {why}" for peer, why in sorted(MISSING.items())]
    out_json = getattr(args, "json", None)
    human = sys.stderr if out_json == "-" else sys.stdout
    print("\n".join(lines), file=human, flush=True)
    if out_json:
        text = json.dumps({"backend": backend_name(), "rounds": rounds, "medians": med, "ratios": table,
                           "missing": dict(MISSING)},
                          indent=2) + "\n"
        if out_json == "-":
            sys.stdout.write(text)
        else:
            with open(out_json, "w", encoding="utf-8") as fh:
                fh.write(text)
    if args.plot:
        _plot(table, args.plot, f"pydoca bench compare: backend {backend_name()}, {args.rounds} interleaved "
                                f"round{'s' if args.rounds != 1 else ''}, medians")
    return 0


def headroom(ratio: float, target: str) -> Optional[float]:
    """How far a ratio is on the good side of its target, as one number: >= 1 means met, whichever way
    the target points (``<= 2x``: 2 / ratio; ``>= 0.8``: ratio / 0.8); None for an ``(info)`` row."""
    t = target.strip()
    if t.startswith("<=") or t.startswith(">="):
        limit = float(t[2:].strip().rstrip("x"))
        if t.startswith("<="):
            return limit / ratio if ratio > 0 else float("inf")
        return ratio / limit
    return None


def legend_labels() -> List[str]:
    """What the chart's legend says (green, red, the line at 1)."""
    return ["target met (headroom >= 1)", "target not met (headroom < 1)",
            "1 = exactly on target (pydoca's own goals)"]


def _plot(table: List[Dict[str, Any]], path: str, title: str = "") -> List[str]:
    """One bar per target row: its headroom on a log axis (the line at 1 is the target), annotated with the
    ratio and the target, and a legend for the colours and the line; info rows are left to the printed table.
    Returns the legend's texts."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install 'pydoca[plot]'") from None
    import textwrap
    rows: List[Tuple[Dict[str, Any], float]] = []
    for t in table:
        h = headroom(t["ratio"], t["target"])
        if h is not None:
            rows.append((t, h))
    if not rows:
        raise RuntimeError("nothing to plot: no target row had both figures")
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(rows) + 1.8))
    labels = [textwrap.fill(t["measure"], 44) for t, _ in rows]
    heights = [max(h, 1e-3) for _, h in rows]
    ax.barh(range(len(rows)), heights, color=["tab:green" if h >= 1 else "tab:red" for h in heights])
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", lw=1)
    for i, (t, h) in enumerate(rows):
        ax.annotate(f" {t['ratio']:.2f} (target {t['target']})", (heights[i], i), va="center", fontsize=8)
    lo, hi = min(heights), max(heights)
    ax.set_xlim(min(lo, 1.0) / 2, max(hi, 1.0) * 6)
    ax.set_xlabel("headroom against the target (log; >= 1: met; same-run ratio and target on each bar)")
    ax.set_title(title or "pydoca bench compare", fontsize=10)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    met, missed, line = legend_labels()
    shown = ax.legend(handles=[Patch(color="tab:green", label=met), Patch(color="tab:red", label=missed),
                       Line2D([0], [0], color="black", lw=1, label=line)],
              loc="lower right", fontsize=7, framealpha=0.9)
    legend = [t.get_text() for t in shown.get_texts()]
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return legend


__all__ = ["HELPERS", "headroom", "legend_labels", "one_round", "report", "run"]
