"""A peer that keeps asking on softdoca's native link without reading the answers cannot grow the target's memory.

Every request on the native wire gets an answer frame (a PONG for a PING, a response for a write, the data of a
read). A peer that sends requests and never reads made the target queue the answers without bound (about 1 MB of
memory per MB the peer sent: 277 MB after 3 million PINGs). Now a link whose queued answers hold SD_CTRLQ_HIGH
(64 MiB) stops being read until they drain (TCP's flow control then holds the peer), and a peer that neither reads nor lets
the target read is declared dead after SOFTDOCA_TIMEOUT_MS, as any silent peer; the target's other connections go on.
"""
from __future__ import annotations

import os
import random
import socket
import struct
import time

import pytest

from rdma_util import ALL_REMOTE, PeerProc

pytestmark = pytest.mark.timeout(120)

SIZE, CHUNK = 1 << 16, 4096
TIMEOUT_MS = 4000


def frame(opcode: int, payload_len: int = 0) -> bytes:
    """A native wire header (docs/softdoca-contract.md): magic "SDRW", version 1, opcode, ..., payload length."""
    out = bytearray(96)
    struct.pack_into("<IBBHQI", out, 0, 0x57524453, 1, opcode, 0, 0, payload_len)
    return bytes(out)


CM_REQ, CM_RTU, PING = 3, 6, 48


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_peer_that_never_reads_is_held_and_dropped() -> None:
    target = PeerProc(env={"SOFTDOCA_TIMEOUT_MS": str(TIMEOUT_MS)})
    legit = PeerProc()
    hostile = socket.socket()
    try:
        port = random.randint(20000, 40000)
        started = target.call("start", size=SIZE, access=int(ALL_REMOTE), permissions=int(ALL_REMOTE), mode="cm",
                              port=port, fill=0x22)
        target.post("wait_conn", n=2)
        hostile.settimeout(10)
        hostile.connect(("127.0.0.1", port))
        hostile.sendall(frame(CM_REQ, 24) + os.urandom(24))         # instance + token of a made-up requester
        assert len(hostile.recv(96)) > 0                             # CM_ACCEPT
        hostile.sendall(frame(CM_RTU))
        legit.call("start", size=SIZE, access=int(ALL_REMOTE), permissions=int(ALL_REMOTE), mode="connect",
                   port=port, fill=0x5C)
        target.answer("wait_conn")
        pid = target.proc.pid
        base = rss_mb(pid)

        # 10,000 PINGs (960 KB) at a time, until the target stops taking them or 400 MB went; it holds at most
        # 64 MiB of answers for a link (SD_CTRLQ_HIGH), then the kernel's socket buffers fill
        hostile.settimeout(0.3)
        burst, sent = frame(PING) * 10000, 0
        try:
            while sent < 400 << 20:
                hostile.sendall(burst)
                sent += len(burst)
        except (socket.timeout, BlockingIOError):
            pass
        grew = rss_mb(pid) - base
        assert sent < 150 << 20, f"the target took {sent >> 20} MB of requests whose answers nobody read"
        if not os.environ.get("PYDOCA_TEST_SANITIZER"):     # ASan's and TSan's own memory swamps the figure
            assert grew < 100, f"the target's memory grew {grew:.0f} MB for {sent >> 20} MB of unread answers"

        # held, it does not spin: the engine stops watching that link's input
        c0 = cpu_s(pid)
        time.sleep(1.0)
        assert cpu_s(pid) - c0 < 0.5, "the target spins while the peer's input waits"

        # the other requester is served meanwhile
        legit.call("write_burst", blob=started["mmap"], n=2, size=CHUNK)
        assert [r["error"] for r in legit.call("burst_results", wait=10)["results"]] == [None, None]

        # and the silent peer is declared dead after the timeout
        events = target.call("conn_events", want="disconnected", wait=4 * TIMEOUT_MS / 1000)["events"]
        assert "disconnected" in events, events
        legit.call("write_burst", blob=started["mmap"], n=1, size=CHUNK)
        assert [r["error"] for r in legit.call("burst_results", wait=10)["results"]] == [None]
    finally:
        hostile.close()
        legit.close()
        target.close()
