"""A scriptable RDMA peer for multi-process tests.

Reads one JSON command per line on stdin, answers one JSON line on stdout.
Between commands it does NOT progress its engine unless told to, so one-sided
operations that land in its memory prove the engine thread served them.
"""
from __future__ import annotations

import base64
import hashlib
import json
import sys
from contextlib import ExitStack
from typing import Any, Dict, List

import pydoca
from pydoca import Access


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


class Peer:
    def __init__(self) -> None:
        self.stack = ExitStack()
        self.recvs: List[Any] = []
        self.events: List[str] = []     # connection states reported by Rdma.on_connection

    def start(self, size: int, access: int, permissions: int, mode: str, port: int = 0,
              accept: bool = True, rnr_retry: int | None = None, fill: int = 0,
              accept_data: str = "", shared: bool = False, iface: str = "lo",
              addr: str = "127.0.0.1") -> Dict[str, Any]:
        s = self.stack
        self.dev = s.enter_context(pydoca.Device.open(iface=iface))
        self.pe = s.enter_context(pydoca.ProgressEngine())
        self.mem = pydoca.shared_memory(size) if shared else bytearray(size)   # shared: a sealed memfd
        self.mem[:] = bytes([fill]) * size
        self.rdma = s.enter_context(pydoca.Rdma(self.dev, self.pe, permissions=Access(permissions),
                                                rnr_retry_count=rnr_retry))
        self.rdma.on_connection = lambda c, st: self.events.append(st.value)
        self.mm = pydoca.MemoryMap(self.dev, self.mem, access=Access(access))
        self.inv = s.enter_context(pydoca.BufferInventory(64))
        out: Dict[str, Any] = {"mmap": b64(self.mm.export_rdma()), "addr": self.mm.address}
        if mode == "oob":
            blob, self.conn = self.rdma.export()
            out["conn"] = b64(blob)
        elif mode == "connect":   # act as the RDMA CM requester
            self.conn = self.rdma.connect_to(addr, port).wait_established(10)
            out["private"] = b64(self.conn.private_data or b"")
        else:
            decision: Any = unb64(accept_data) if accept_data else accept
            self.rdma.listen(port, accept=lambda c: decision)
        return out

    def connect(self, blob: str) -> Dict[str, Any]:
        self.rdma.connect(unb64(blob), self.conn)
        self.conn.wait_established(10)
        return {}

    def wait_conn(self, timeout: float = 10, n: int = 1) -> Dict[str, Any]:
        """Progress until ``n`` connections are established (the first becomes ``conn``)."""
        self.pe.run_until(lambda: sum(c.established for c in self.rdma.connections) >= n, timeout,
                          what="connection")
        self.conn = next(c for c in self.rdma.connections if c.established)
        return {}

    def provider_up(self, timeout: float = 10) -> Dict[str, Any]:
        """Wait until the connection's provider connection is up (SOFTDOCA_PROVIDER); its transport."""
        import time
        from pydoca._native import conn_transports
        deadline = time.monotonic() + timeout
        while conn_transports(self.conn._c)[1] is None and time.monotonic() < deadline:
            self.pe.wait(0.01)
        return {"transport": conn_transports(self.conn._c)[1]}

    def digest(self) -> Dict[str, Any]:
        return {"sha": hashlib.sha256(self.mem).hexdigest(), "head": self.mem[:64].hex()}

    def post_recv(self, n: int, size: int) -> Dict[str, Any]:
        for _ in range(n):
            mem = bytearray(size)
            mm = pydoca.MemoryMap(self.dev, mem, access=Access.LOCAL_READ_WRITE)
            buf = self.inv.buffer(mm, empty=True)
            self.recvs.append(self.rdma.receive(buf))
        return {}

    def recv_results(self, timeout: float = 10) -> Dict[str, Any]:
        res = []
        for t in self.recvs:
            t.wait(timeout)
            if t.error is not None:
                res.append({"error": t.error.name})
            else:
                r = t.value
                res.append({"data": b64(r.data), "len": r.length, "opcode": r.opcode.name, "imm": r.immediate})
        self.recvs = []
        return {"results": res}

    def progress(self, seconds: float) -> Dict[str, Any]:
        import time
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.pe.wait(0.05)
        return {"states": [c.state.value for c in self.rdma.connections]}

    def hold_wakeups(self, seconds: float) -> Dict[str, Any]:
        """Wait on the engine's notification handle with a bare epoll_wait, never clearing it or
        progressing: a waiter that takes the links' wake-ups and reads nothing."""
        import os
        import select
        import time
        ep = select.epoll.fromfd(os.dup(self.pe.fileno()))
        woke, end = 0, time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                if ep.poll(0.05):
                    woke += 1
                    time.sleep(0.01)
        finally:
            ep.close()
        return {"woke": woke}

    def conn_events(self, want: str = "", wait: float = 5.0) -> Dict[str, Any]:
        """Progress until a connection event ``want`` was seen (or ``wait`` seconds); return them all."""
        import time
        end = time.monotonic() + wait
        while time.monotonic() < end and want not in self.events:
            self.pe.wait(0.05)
        return {"events": self.events}

    def connect_more(self, addr: str, port: int, n: int) -> Dict[str, Any]:
        """Connect n more times to the listener at addr:port (RDMA CM; the target progresses meanwhile), each
        connection's provider connection up; see write_rounds."""
        import time
        from pydoca._native import conn_transports
        self.more = [self.rdma.connect_to(addr, port).wait_established(10) for _ in range(n)]
        deadline = time.monotonic() + 10
        while any(conn_transports(c._c)[1] is None for c in self.more) and time.monotonic() < deadline:
            self.pe.wait(0.01)
        return {"transports": [conn_transports(c._c)[1] for c in self.more]}

    def write_rounds(self, blob: str, rounds: int, size: int) -> Dict[str, Any]:
        """rounds times, one write of size bytes on each connection (the first, then connect_more's) in turn,
        into the peer's mmap ``blob`` at consecutive offsets; waits for all. The error of each (None: landed)."""
        rm = pydoca.MemoryMap.from_export(self.dev, unb64(blob))
        self.stack.callback(rm.close)
        conns = [self.conn, *self.more]
        tasks = []
        for i in range(rounds * len(conns)):
            tasks.append(self.rdma.write(conns[i % len(conns)], self.inv.buffer(self.mm, offset=i * size, length=size),
                                         self.inv.buffer(rm, offset=i * size, length=size)))
            if i % len(conns) == len(conns) - 1:
                self.pe.run_until(lambda: all(t.done for t in tasks), 10, what="a round of writes")
        return {"errors": [t.error.name if t.error is not None else None for t in tasks]}

    def write_burst(self, blob: str, n: int, size: int, roff: int = 0) -> Dict[str, Any]:
        """Submit n writes of size bytes into the peer's mmap ``blob`` (from its offset ``roff``) and return
        at once (the tasks stay outstanding); see burst_results."""
        import time
        rm = pydoca.MemoryMap.from_export(self.dev, unb64(blob))
        self.stack.callback(rm.close)
        self.burst = [self.rdma.write(self.conn, self.inv.buffer(self.mm, offset=i * size, length=size),
                                      self.inv.buffer(rm, offset=roff + i * size, length=size)) for i in range(n)]
        submitted = time.monotonic()
        self.pe.progress_all()
        return {"submitted": submitted, "done": sum(t.done for t in self.burst)}

    def burst_results(self, wait: float) -> Dict[str, Any]:
        """Progress until every write of the burst completed; when and how each did."""
        try:
            self.pe.run_until(lambda: all(t.done for t in self.burst), wait, what="the burst")
        except TimeoutError:
            pass
        return {"results": [{"error": t.error.name if t.error is not None else None, "message": str(t.error),
                             "at": t.completed_at} for t in self.burst]}

    def send_then_disconnect(self, text: str) -> Dict[str, Any]:
        mem = bytearray(text.encode())
        mm = pydoca.MemoryMap(self.dev, mem, access=Access.LOCAL_READ_WRITE)
        self.rdma.send(self.conn, self.inv.buffer(mm)).result(10)
        self.conn.disconnect()
        return {}

    def send_many(self, texts: List[str], imm: int = -1, blob: str = "") -> Dict[str, Any]:
        """Send each text (with immediate ``imm`` when >= 0), in order; then, given the peer's mmap
        ``blob``, one 4-byte write-with-immediate ``imm`` at its offset 0."""
        data = [t.encode() for t in texts]
        mem = bytearray(b"".join(data) or b"\0" * 4)
        mm = pydoca.MemoryMap(self.dev, mem, access=Access.LOCAL_READ_WRITE)
        self.stack.callback(mm.close)
        tasks, off = [], 0
        for d in data:
            buf = self.inv.buffer(mm, offset=off, length=len(d))
            tasks.append(self.rdma.send(self.conn, buf) if imm < 0 else self.rdma.send_imm(self.conn, buf, imm))
            off += len(d)
        for t in tasks:
            t.result(10)
        if blob:
            rm = pydoca.MemoryMap.from_export(self.dev, unb64(blob))
            self.stack.callback(rm.close)
            self.rdma.write_imm(self.conn, self.inv.buffer(mm, offset=0, length=4),
                                self.inv.buffer(rm, offset=0, length=4, empty=True), max(imm, 0)).result(10)
        return {}

    def rdma_ops(self, blob: str, ops: List[Dict[str, Any]], timeout: float = 10) -> Dict[str, Any]:
        """One task at a time on ``conn`` against the peer's mmap ``blob``, each waited for: ``kind`` write,
        write_imm, read, fetch_add, compare_swap, send or send_imm, at remote offset ``off`` (``len`` bytes; data:
        ``data`` hex for writes and sends), ``imm``, ``add``, ``compare``/``swap``. For each: its error name (None:
        it succeeded), the data read (hex) or the atomic's previous value."""
        rm = pydoca.MemoryMap.from_export(self.dev, unb64(blob))
        self.stack.callback(rm.close)
        mem = bytearray(4096)
        mm = pydoca.MemoryMap(self.dev, mem, access=Access.LOCAL_READ_WRITE)
        self.stack.callback(mm.close)
        out = []
        for op in ops:
            kind, off, n = op["kind"], op.get("off", 0), op.get("len", 8)
            data = bytes.fromhex(op.get("data", "")) or b"\0" * n
            mem[:len(data)] = data
            if kind in ("write", "write_imm"):
                src = self.inv.buffer(mm, offset=0, length=len(data))
                dst = self.inv.buffer(rm, offset=off, length=len(data), empty=True)
                task: Any = (self.rdma.write(self.conn, src, dst) if kind == "write" else
                             self.rdma.write_imm(self.conn, src, dst, op["imm"]))
            elif kind in ("send", "send_imm"):
                src = self.inv.buffer(mm, offset=0, length=len(data))
                task = (self.rdma.send(self.conn, src) if kind == "send" else
                        self.rdma.send_imm(self.conn, src, op["imm"]))
            elif kind == "read":
                task = self.rdma.read(self.conn, self.inv.buffer(rm, offset=off, length=n),
                                      self.inv.buffer(mm, offset=1024, length=n, empty=True))
            else:
                remote = self.inv.buffer(rm, offset=off, length=8)
                result = self.inv.buffer(mm, offset=2048, length=8, empty=True)
                task = (self.rdma.fetch_add(self.conn, remote, result, add=op["add"]) if kind == "fetch_add" else
                        self.rdma.compare_swap(self.conn, remote, result, compare=op["compare"], swap=op["swap"]))
            task.wait(timeout)
            res: Dict[str, Any] = {"kind": kind, "error": task.error.name if task.error is not None else None}
            if task.error is None and kind == "read":
                res["data"] = bytes(mem[1024:1024 + n]).hex()
            elif task.error is None and kind in ("fetch_add", "compare_swap"):
                res["value"] = task.value
            out.append(res)
        return {"results": out}

    def sync_event_export(self, value: int = 0) -> Dict[str, Any]:
        """A started sync event (remote-net publisher) with ``value``: its remote-net export."""
        ev = self.stack.enter_context(pydoca.SyncEvent(self.dev, remote_net=True, value=value))
        return {"blob": b64(ev.export_to_remote_net())}

    def pid(self) -> Dict[str, Any]:
        """This process's id (under a namespace prefix the test's Popen holds the wrapper's)."""
        import os
        return {"pid": os.getpid()}

    def counters(self, names: List[str]) -> Dict[str, Any]:
        """softdoca_debug_counter of each name (-1: none such)."""
        import ctypes
        from pydoca._native import soft_fn
        fn = soft_fn("softdoca_debug_counter", ctypes.c_long, ctypes.c_char_p)
        return {"values": {n: int(fn(n.encode())) if fn else -1 for n in names}}

    def stop_mmap(self) -> Dict[str, Any]:
        import time
        begin = time.monotonic()
        self.mm.close()
        return {"seconds": time.monotonic() - begin}


def main() -> None:
    peer = Peer()
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            op = cmd.pop("op")
            if op == "exit":
                break
            try:
                out = getattr(peer, op)(**cmd)
                out["ok"] = True
            except Exception as exc:  # noqa: BLE001 - reported to the test
                out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            sys.stdout.write(json.dumps(out) + "\n")
            sys.stdout.flush()
    finally:
        peer.stack.close()


if __name__ == "__main__":
    main()
