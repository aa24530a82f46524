"""The Python peers of ``pydoca bench compare``: what a user would pick instead to call a function in, or hand
bytes to, another Python process (issue 23): pyzmq REQ/REP, ucxx (UCX's Python binding, over tcp) and gRPC's
Python unary call.

Each peer runs as two child processes of its own (a server and a client, both on loopback), so its library
never loads into the bench's process; the client prints one JSON object. A peer whose package is not
installed (``pip install 'pydoca[bench]'``) or that fails is reported with the reason, never fatal::

    python -m pydoca.perftest.peers zmq|ucxx|grpc client --iterations N      (JSON on stdout)

Figures: ``rtt_us`` (median round trip of a 64 B request and its 64 B echo) and ``MBps`` (4 MiB requests
answered by 1 byte, one at a time, median; 10^6 bytes/s) where the peer has them.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional

from .._child import module_argv

PEERS = ("zmq", "ucxx", "grpc")
#: the import that tells whether a peer is installed, and the pip package that provides it
PACKAGES = {"zmq": ("zmq", "pyzmq"), "ucxx": ("ucxx", "ucxx-cu12"), "grpc": ("grpc", "grpcio")}
SMALL, BULK = 64, 4 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _median_us(fn: Callable[[], Any], n: int) -> float:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out) * 1e6


def _bulk_n(n: int) -> int:
    return max(10, n // 50)


# -- pyzmq -----------------------------------------------------------------------------------------
def zmq_server(port: int) -> None:
    import zmq
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REP)
    sock.bind(f"tcp://127.0.0.1:{port}")
    print("ready", flush=True)
    while True:
        msg = sock.recv(copy=False)
        sock.send(msg if len(msg) <= SMALL else b"k", copy=False)   # echo small requests, ack bulk ones


def zmq_client(port: int, n: int) -> Dict[str, float]:
    import zmq
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    sock.connect(f"tcp://127.0.0.1:{port}")
    small, bulk = os.urandom(SMALL), os.urandom(BULK)

    def rt(data: bytes) -> None:
        if len(data) <= SMALL:
            sock.send(data)
        else:
            sock.send(data, copy=False)
        sock.recv(copy=False)
    _median_us(lambda: rt(small), max(10, n // 10))
    rtt = _median_us(lambda: rt(small), n)
    _median_us(lambda: rt(bulk), 3)
    bulk_us = _median_us(lambda: rt(bulk), _bulk_n(n))
    sock.close(linger=0)
    ctx.term()
    return {"rtt_us": rtt, "MBps": BULK / bulk_us}


# -- ucxx (asyncio, tag send/receive through Endpoint.send/recv) ------------------------------------
def _ucxx_env() -> None:
    os.environ.setdefault("UCX_TLS", "tcp")
    os.environ.setdefault("UCX_NET_DEVICES", "lo")
    os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")
    os.environ.setdefault("UCXPY_PROGRESS_MODE", "blocking")     # the fastest of its modes here (thread: ~4x slower)


def ucxx_server(port: int) -> None:
    _ucxx_env()
    import asyncio

    import numpy as np
    import ucxx

    async def handle(ep: Any) -> None:
        head = np.empty(1, dtype=np.uint64)
        small = np.empty(SMALL, dtype=np.uint8)
        bulk = np.empty(BULK, dtype=np.uint8)
        ack = np.ones(1, dtype=np.uint8)
        try:
            while True:
                await ep.recv(head)                  # the size of the next message (0: the client is done)
                size = int(head[0])
                if size == 0:
                    break
                if size <= SMALL:
                    await ep.recv(small[:size])
                    await ep.send(small[:size])
                else:
                    await ep.recv(bulk[:size])
                    await ep.send(ack)
        finally:
            await ep.close()
            done.set()

    async def main() -> None:
        global done
        done = asyncio.Event()
        listener = ucxx.create_listener(handle, port)
        print("ready", flush=True)
        await done.wait()
        listener.close()
    asyncio.run(main())


done: Any = None


def ucxx_client(port: int, n: int) -> Dict[str, float]:
    _ucxx_env()
    import asyncio

    import numpy as np
    import ucxx

    async def main() -> Dict[str, float]:
        ep = await ucxx.create_endpoint("127.0.0.1", port)
        head = np.empty(1, dtype=np.uint64)
        small = np.frombuffer(os.urandom(SMALL), dtype=np.uint8).copy()
        back = np.empty(SMALL, dtype=np.uint8)
        bulk = np.frombuffer(os.urandom(BULK), dtype=np.uint8).copy()
        ack = np.empty(1, dtype=np.uint8)

        async def rt(data: Any, into: Any) -> None:
            head[0] = data.nbytes
            await ep.send(head)
            await ep.send(data)
            await ep.recv(into)

        async def timed(data: Any, into: Any, k: int) -> float:
            out: List[float] = []
            for _ in range(k):
                t0 = time.perf_counter()
                await rt(data, into)
                out.append(time.perf_counter() - t0)
            return statistics.median(out) * 1e6
        await timed(small, back, max(10, n // 10))
        rtt = await timed(small, back, n)
        await timed(bulk, ack, 3)
        bulk_us = await timed(bulk, ack, _bulk_n(n))
        head[0] = 0
        await ep.send(head)
        await ep.close()
        return {"rtt_us": rtt, "MBps": BULK / bulk_us}
    return asyncio.run(main())


# -- gRPC unary (generic handler: bytes in, bytes out, no protobuf) ---------------------------------
def grpc_server(port: int) -> None:
    from concurrent import futures

    import grpc
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                         options=[("grpc.max_receive_message_length", 2 * BULK)])
    handler = grpc.unary_unary_rpc_method_handler(lambda req, ctx: req if len(req) <= SMALL else b"k")
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench", {"echo": handler}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


def grpc_client(port: int, n: int) -> Dict[str, float]:
    import grpc
    with grpc.insecure_channel(f"127.0.0.1:{port}",
                               options=[("grpc.max_send_message_length", 2 * BULK)]) as channel:
        echo = channel.unary_unary("/bench/echo")
        small, bulk = os.urandom(SMALL), os.urandom(BULK)
        _median_us(lambda: echo(small), max(10, n // 10))
        rtt = _median_us(lambda: echo(small), n)
        _median_us(lambda: echo(bulk), 3)
        bulk_us = _median_us(lambda: echo(bulk), _bulk_n(n))
    return {"rtt_us": rtt, "MBps": BULK / bulk_us}


SERVERS: Dict[str, Callable[[int], None]] = {"zmq": zmq_server, "ucxx": ucxx_server, "grpc": grpc_server}
CLIENTS: Dict[str, Callable[[int, int], Dict[str, float]]] = {"zmq": zmq_client, "ucxx": ucxx_client,
                                                               "grpc": grpc_client}


def installed(peer: str) -> Optional[str]:
    """None when ``peer``'s package imports here, else why not (checked in a child: no import in this process)."""
    module, package = PACKAGES[peer]
    try:
        probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True,
                               timeout=120, cwd=os.path.dirname(os.path.abspath(__file__)))
    except subprocess.TimeoutExpired:
        return f"importing {module} timed out"
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"{package} is not installed (pip install 'pydoca[bench]'): {last[-200:]}"
    return None


def measure(peer: str, iterations: int, timeout: float = 240.0) -> Dict[str, Any]:
    """``{"rtt_us": .., "MBps": ..}`` of one peer, or ``{"error": why}``: a server and a client process."""
    why = installed(peer)
    if why is not None:
        return {"error": why}
    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OPENBLAS_NUM_THREADS": "1"}
    server = subprocess.Popen(module_argv("pydoca.perftest.peers", peer, "server", "--port", str(port)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            err = server.stderr.read() if server.stderr else ""
            return {"error": f"the {peer} server did not start: {err.strip()[-300:]}"}
        client = subprocess.run(module_argv("pydoca.perftest.peers", peer, "client", "--port", str(port),
                                            "--iterations", str(iterations)),
                                capture_output=True, text=True, env=env, timeout=timeout)
        lines = [ln for ln in client.stdout.splitlines() if ln.startswith("{")]
        if client.returncode != 0 or not lines:
            return {"error": f"the {peer} client failed: {client.stderr.strip()[-300:]}"}
        result: Dict[str, Any] = json.loads(lines[-1])
        return result
    except subprocess.TimeoutExpired:
        return {"error": f"the {peer} client took over {timeout:.0f} s"}
    finally:
        server.kill()
        server.wait(10)
        for stream in (server.stdout, server.stderr):
            if stream is not None:
                stream.close()


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("peer", choices=PEERS)
    ap.add_argument("role", choices=("server", "client", "measure"))
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--iterations", type=int, default=2000)
    args = ap.parse_args(argv)
    if args.role == "server":
        SERVERS[args.peer](args.port)
        return 0
    out = (CLIENTS[args.peer](args.port, args.iterations) if args.role == "client"
           else measure(args.peer, args.iterations))
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["PACKAGES", "PEERS", "installed", "measure"]
