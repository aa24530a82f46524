"""A hostile peer's worker address cannot take a ucx target down.

Under SOFTDOCA_PROVIDER=ucx each side sends its UCP worker address in a PROV_ADDR frame on the native link, and
the receiver hands it to ucp_ep_create, which takes no length and trusts it: UCX 1.13 aborts the process on an
address format it does not know (found by a fuzz campaign: one frame from any client the CM listener accepted
killed the target and every other connection with it). The blob's crc is no defence (the peer computes it).
softdoca now refuses such an address with a reason; the target and its other requesters go on.
"""
from __future__ import annotations

import ctypes.util
import os
import random
import socket
import struct
import time
import zlib
from typing import Dict, Tuple

import pytest

from rdma_util import ALL_REMOTE, PeerProc
from test_softdoca_hostile_link import HDR, frame
from test_softdoca_ucx import _built_with_ucx

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not (ctypes.util.find_library("ucp") and _built_with_ucx()),
                       reason="UCX absent (Debian: libucx0 at run time, libucx-dev to build softdoca's ucx provider)"),
]

SIZE, CHUNK = 1 << 16, 4096
CM_REQ, CM_ACCEPT, CM_RTU, PROV_ADDR = 3, 4, 6, 52
ENV = {"SOFTDOCA_PROVIDER": "ucx", "UCX_TLS": "tcp"}


def ucx_offer() -> int:
    """What a requester offering the ucx provider puts in its CM request (raddr: "PROV" and a hash of the name)."""
    h = 0
    for ch in b"ucx":
        h = (h * 31 + ch) & 0xFFFFFFFF
    return (0x50524F56 << 32) | (h or 1)


def recv_exact(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        got = s.recv(n - len(out))
        if not got:
            raise ConnectionError("the target closed the connection")
        out += got
    return out


def read_frame(s: socket.socket) -> Tuple[int, bytes]:
    h = HDR.unpack(recv_exact(s, HDR.size))
    return h[2], recv_exact(s, h[5]) if h[5] else b""


def hostile_addr(port: int, other_instance: bool) -> socket.socket:
    """A raw CM client offering ucx that answers the target's PROV_ADDR with its own blob, well formed (crc
    included) but with a worker address of 0xFF bytes; as another process (other_instance) or as the target's."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(frame(CM_REQ, 24, raddr=ucx_offer()) + os.urandom(24))
    assert read_frame(s)[0] == CM_ACCEPT
    s.sendall(frame(CM_RTU))
    deadline = time.monotonic() + 10
    while True:
        assert time.monotonic() < deadline, "the target sent no PROV_ADDR"
        op, payload = read_frame(s)
        if op == PROV_ADDR:
            break
    blob = bytearray(payload[24:])              # after PROV_ADDR's own 24 bytes: the provider blob (providers.h)
    uid, _, alen, _ = struct.unpack_from("<QQII", blob, 32)
    assert len(blob) == 56 + alen
    if other_instance:
        struct.pack_into("<Q", blob, 32, uid ^ 0x5A5A5A5A5A5A5A5A)
    blob[56:] = b"\xff" * alen
    struct.pack_into("<I", blob, 28, 0)
    struct.pack_into("<I", blob, 28, zlib.crc32(bytes(blob)))
    msg = payload[:24] + bytes(blob)
    s.sendall(frame(PROV_ADDR, len(msg)) + msg)
    return s


@pytest.mark.parametrize("other_instance", [False, True], ids=["as-itself", "as-another-process"])
def test_a_forged_worker_address_is_refused_and_the_target_goes_on(other_instance: bool) -> None:
    target, legit = PeerProc(env=ENV), PeerProc(env=ENV)
    hostile = None
    try:
        port = random.randint(20000, 40000)
        started: Dict[str, str] = target.call("start", size=SIZE, access=int(ALL_REMOTE),
                                              permissions=int(ALL_REMOTE), mode="cm", port=port, fill=0x22)
        target.post("progress", seconds=3)              # the target's engine serves the handshake meanwhile
        hostile = hostile_addr(port, other_instance)
        target.answer("progress")
        assert target.proc.poll() is None, "the target died of the forged worker address"
        target.post("wait_conn")
        legit.call("start", size=SIZE, access=int(ALL_REMOTE), permissions=int(ALL_REMOTE), mode="connect",
                   port=port, fill=0x5C)
        target.answer("wait_conn")
        assert legit.call("provider_up")["transport"] == "tcp"
        legit.call("write_burst", blob=started["mmap"], n=2, size=CHUNK)
        assert [r["error"] for r in legit.call("burst_results", wait=10)["results"]] == [None, None]
        assert target.proc.poll() is None
    finally:
        if hostile is not None:
            hostile.close()
        legit.close()
        target.close()
