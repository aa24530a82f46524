"""``pydoca bench summary``: pydoca RDMA and pydoca.peer against a TCP peer, in one run.

    pydoca bench summary [--iterations N] [--rounds R] [--progress blocking|polling] [--json FILE]

Starts three server processes on loopback: a plain TCP echo server (the peer
we compare against: what the same job costs with Python sockets over the same
kernel), a raw Rdma target exporting a 4 MiB buffer, and a ``pydoca serve``
responder. From this process it measures, in interleaved rounds (medians):

* TCP: 8 B ping-pong latency; 1 MiB and 4 MiB send-and-acknowledge throughput;
* raw RDMA write: 8 B latency; 1 MiB and 4 MiB throughput (one write at a time);
* peer: 64 B call latency, 8 B write latency, 4 MiB write throughput;

and prints ratios (RDMA over TCP, peer over raw RDMA). Every server is stopped
at the end. Figures from softdoca say nothing about RDMA hardware.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

from .._child import module_argv

SPEC = """\
version: 1
name: bench
endpoints:
  - {path: /call, type: call, buffer: {size: 4KiB}, handler: "bench_handlers:echo"}
  - {path: /small, type: write, buffer: {size: 4KiB}}
  - {path: /bulk, type: write, buffer: {size: 4MiB}}
"""
HANDLERS = "def echo(payload):\n    return payload\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def raw_server(port: int, polling: bool) -> None:
    """Child process: an Rdma target with a 4 MiB RDMA-writable buffer."""
    import pydoca
    from pydoca import Access
    with pydoca.Device.open(ip="127.0.0.1") as dev, \
            pydoca.ProgressEngine(mode="polling" if polling else "blocking") as pe, \
            pydoca.Rdma(dev, pe) as rdma:
        mem = bytearray(4 << 20)
        with pydoca.MemoryMap(dev, mem, access=Access.LOCAL_READ_WRITE | Access.RDMA_WRITE) as mm:
            rdma.listen(port, accept=lambda c: True)
            print(base64.b64encode(mm.export_rdma()).decode(), flush=True)
            stop = []
            signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
            while not stop:
                pe.wait(0.1)


def tcp_server(port: int) -> None:
    """Child process: echo 8-byte pings; acknowledge bulk messages with one byte."""
    with socket.create_server(("127.0.0.1", port)) as srv:
        print("ready", flush=True)
        conn, _ = srv.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buf = bytearray(4 << 20)
            view = memoryview(buf)
            while True:
                head = _recv_exact(conn, view[:8])
                if head is None:
                    return
                size = int.from_bytes(view[:8], "little")
                if size == 0:                      # ping
                    conn.sendall(view[:8])
                    continue
                if _recv_exact(conn, view[:size]) is None:
                    return
                conn.sendall(b"k")


def _recv_exact(sock: socket.socket, view: memoryview) -> Optional[int]:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            return None
        got += n
    return got


class TcpBench:
    """The TCP peer: same loopback, same one-at-a-time pattern, Python sockets."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.data = os.urandom(4 << 20)
        self.reply = bytearray(8)

    def ping(self) -> None:
        self.sock.sendall(bytes(8))
        _recv_exact(self.sock, memoryview(self.reply))

    def bulk(self, size: int) -> None:
        self.sock.sendall(size.to_bytes(8, "little"))
        self.sock.sendall(memoryview(self.data)[:size])
        _recv_exact(self.sock, memoryview(self.reply)[:1])

    def close(self) -> None:
        self.sock.close()


def timed(fn: Callable[[], Any], iters: int, warmup: int) -> float:
    """Seconds per call of ``fn`` (after ``warmup`` calls)."""
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


class RawBench:
    """A raw Rdma connection to the raw server and its local/remote buffers."""

    def __init__(self, port: int, blob: bytes, polling: bool) -> None:
        import pydoca
        from pydoca import Access
        self.stack = contextlib.ExitStack()
        s = self.stack
        dev = s.enter_context(pydoca.Device.open(ip="127.0.0.1"))
        pe = s.enter_context(pydoca.ProgressEngine(mode="polling" if polling else "blocking"))
        self.rdma = s.enter_context(pydoca.Rdma(dev, pe))
        inv = s.enter_context(pydoca.BufferInventory(16))
        self.conn = self.rdma.connect_to("127.0.0.1", port)
        self.conn.wait_established(10)
        self.src_mem = bytearray(os.urandom(4 << 20))
        local = s.enter_context(pydoca.MemoryMap(dev, self.src_mem, access=Access.LOCAL_READ_WRITE))
        remote = s.enter_context(pydoca.MemoryMap.from_export(dev, blob))
        self.bufs = {size: (s.enter_context(inv.buffer(local, length=size, data_len=size)),
                            s.enter_context(inv.buffer(remote, length=size, empty=True)))
                     for size in (8, 1 << 20, 4 << 20)}

    def write(self, size: int) -> None:
        src, dst = self.bufs[size]
        self.rdma.write(self.conn, src, dst).result(10)

    def close(self) -> None:
        self.conn.disconnect()
        self.stack.close()


def measure(tcp: TcpBench, raw: RawBench, req: Any, iters: int) -> Dict[str, float]:
    """One round of every measurement (seconds per operation)."""
    bulk_n = max(10, iters // 100)
    payload, small, bulk = os.urandom(64), os.urandom(8), os.urandom(4 << 20)
    return {
        "tcp_pingpong_8B_s": timed(tcp.ping, iters, max(3, iters // 10)),
        "tcp_bulk_1MiB_s": timed(lambda: tcp.bulk(1 << 20), max(20, iters // 50), 3),
        "tcp_bulk_4MiB_s": timed(lambda: tcp.bulk(4 << 20), bulk_n, 3),
        "raw_write_8B_s": timed(lambda: raw.write(8), iters, max(3, iters // 10)),
        "raw_write_1MiB_s": timed(lambda: raw.write(1 << 20), max(20, iters // 50), 3),
        "raw_write_4MiB_s": timed(lambda: raw.write(4 << 20), bulk_n, 3),
        "peer_call_64B_s": timed(lambda: req.call("/call", payload), iters, max(10, iters // 10)),
        "peer_write_8B_s": timed(lambda: req.write("/small", small), iters, max(10, iters // 10)),
        "peer_write_4MiB_s": timed(lambda: req.write("/bulk", bulk), bulk_n, 3),
    }


def run_rounds(tcp_port: int, raw_port: int, blob: bytes, peer_address: str, iters: int, rounds: int,
               polling: bool) -> Dict[str, float]:
    """Median over ``rounds`` interleaved rounds (all systems alternate, so drift hits each)."""
    from pydoca.peer import Requester
    tcp = TcpBench(tcp_port)
    raw = RawBench(raw_port, blob, polling)
    try:
        with Requester.connect(peer_address, progress_mode="polling" if polling else "blocking") as req:
            per_round = [measure(tcp, raw, req, iters) for _ in range(rounds)]
    finally:
        raw.close()
        tcp.close()
    return {k: statistics.median(r[k] for r in per_round) for k in per_round[0]}


def _mb(size: int, seconds: float) -> float:
    return size / seconds / 1e6


def report(r: Dict[str, float]) -> List[str]:
    return [
        f"tcp  ping-pong 8 B latency {r['tcp_pingpong_8B_s'] * 1e6:9.1f} us   (peer: Python sockets, same loopback)",
        f"tcp  bulk 1 MiB    {_mb(1 << 20, r['tcp_bulk_1MiB_s']):9.1f} MB/s",
        f"tcp  bulk 4 MiB    {_mb(4 << 20, r['tcp_bulk_4MiB_s']):9.1f} MB/s",
        f"raw  write 8 B     latency {r['raw_write_8B_s'] * 1e6:9.1f} us",
        f"raw  write 1 MiB   {_mb(1 << 20, r['raw_write_1MiB_s']):9.1f} MB/s",
        f"raw  write 4 MiB   {_mb(4 << 20, r['raw_write_4MiB_s']):9.1f} MB/s",
        f"peer call 64 B     latency {r['peer_call_64B_s'] * 1e6:9.1f} us",
        f"peer write 8 B     latency {r['peer_write_8B_s'] * 1e6:9.1f} us",
        f"peer write 4 MiB   {_mb(4 << 20, r['peer_write_4MiB_s']):9.1f} MB/s",
        f"ratio raw write 8 B latency / tcp ping-pong:  {r['raw_write_8B_s'] / r['tcp_pingpong_8B_s']:6.2f}x",
        f"ratio raw write 1 MiB throughput / tcp:       {r['tcp_bulk_1MiB_s'] / r['raw_write_1MiB_s']:6.2f}",
        f"ratio raw write 4 MiB throughput / tcp:       {r['tcp_bulk_4MiB_s'] / r['raw_write_4MiB_s']:6.2f}",
        f"ratio call 64 B / raw write 8 B latency:   {r['peer_call_64B_s'] / r['raw_write_8B_s']:6.2f}x",
        f"ratio write 8 B  / raw write 8 B latency:  {r['peer_write_8B_s'] / r['raw_write_8B_s']:6.2f}x",
        f"ratio write 4 MiB throughput peer / raw:   {r['raw_write_4MiB_s'] / r['peer_write_4MiB_s']:6.2f}"
        " (1.00 = no overhead)",
    ]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The summary's own options (``pydoca bench summary`` adds --rounds and --json itself)."""
    ap.add_argument("--iterations", type=int, default=2000, metavar="N",
                    help="latency operations per round (default 2000)")
    ap.add_argument("--iters", type=int, dest="iterations", help=argparse.SUPPRESS)        # old spelling
    ap.add_argument("--progress", default="blocking", choices=("blocking", "polling"),
                    help="progress mode of the engines on both sides (default blocking)")
    ap.add_argument("--polling", action="store_const", const="polling", dest="progress",
                    help=argparse.SUPPRESS)                                                # old spelling


def _spawn(args: List[str], env: Dict[str, str], cwd: Optional[str] = None,
           stderr: Any = subprocess.DEVNULL) -> "subprocess.Popen[str]":
    """A ``python -m`` child; its stderr (log lines, "stopped") is dropped unless ``stderr`` says otherwise."""
    return subprocess.Popen(module_argv(*args), stdout=subprocess.PIPE, stderr=stderr, text=True,
                            env=env, cwd=cwd)


def child_env() -> Dict[str, str]:
    """The environment of the bench's children: this process's backend, chosen once (its fallback warning,
    if any, is printed once, here)."""
    from pydoca._native import backend
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYDOCA_BACKEND": backend.name}


def run(args: argparse.Namespace) -> int:
    """Start the servers, measure, stop the servers, print."""
    procs: List["subprocess.Popen[str]"] = []
    polling = args.progress == "polling"
    mode = ["--progress", args.progress]
    out_json = getattr(args, "json", None)
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "spec.yaml"), "w") as fh:
            fh.write(SPEC)
        with open(os.path.join(tmp, "bench_handlers.py"), "w") as fh:
            fh.write(HANDLERS)
        env = child_env()
        try:
            tcp_port, raw_port, peer_port = free_port(), free_port(), free_port()
            tcp = _spawn(["pydoca.perftest.summary", "--tcp-server", str(tcp_port)], env)
            raw = _spawn(["pydoca.perftest.summary", "--raw-server", str(raw_port)] + mode, env)
            serve = _spawn(["pydoca.cli", "serve", os.path.join(tmp, "spec.yaml"),
                            "--listen", f"127.0.0.1:{peer_port}"] + (["--polling"] if polling else []), env, cwd=tmp)
            procs += [tcp, raw, serve]
            assert tcp.stdout is not None and raw.stdout is not None and serve.stdout is not None
            if tcp.stdout.readline().strip() != "ready":
                raise RuntimeError("the TCP echo server did not start")
            blob = base64.b64decode(raw.stdout.readline())
            if not blob:
                raise RuntimeError("the raw RDMA target did not start")
            if "serving" not in serve.stdout.readline():
                raise RuntimeError("pydoca serve did not start")
            results = run_rounds(tcp_port, raw_port, blob, f"127.0.0.1:{peer_port}", args.iterations, args.rounds,
                                 polling)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)
                if p.stdout is not None:
                    p.stdout.close()
    human = sys.stderr if out_json == "-" else sys.stdout
    print("\n".join(report(results)), file=human, flush=True)
    if out_json:
        text = json.dumps(results, indent=2) + "\n"
        if out_json == "-":
            sys.stdout.write(text)
        else:
            with open(out_json, "w", encoding="utf-8") as fh:
                fh.write(text)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    ap.add_argument("--rounds", type=int, default=5, metavar="N", help="rounds; medians are reported (default 5)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE ('-': stdout)")
    ap.add_argument("--raw-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--tcp-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.raw_server:
        raw_server(args.raw_server, args.progress == "polling")
        return 0
    if args.tcp_server:
        tcp_server(args.tcp_server)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
