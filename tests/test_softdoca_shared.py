"""Same-host transport into shared memory (pydoca.shared_memory: a sealed memfd). The initiator
maps the target's file and copies with memcpy; every check of the transport still holds: bytes
land, bounds and keys are refused, a stopped map is refused at once. Two processes: the target
is tests/peer_proc.py, the initiator a child with SOFTDOCA_LOG=debug (so the path taken shows)."""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap

import pytest

import pydoca
from pydoca.perftest.session import backend_name

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(backend_name() != "soft", reason="softdoca's same-host transport")]

HERE = os.path.dirname(os.path.abspath(__file__))

INITIATOR = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import pydoca, pydoca.errors as E
    from rdma_util import Local, PeerProc, ALL_REMOTE
    peer, local = PeerProc(transport="shm"), Local()
    try:
        started = peer.call("start", size=8192, access=int(ALL_REMOTE), permissions=int(ALL_REMOTE),
                            mode="oob", fill=0x5A, shared=True)
        conn = local.connect_oob(peer, started)
        rm = local.remote(started["mmap"])
        src = local.local(bytearray(bytes(range(256)) * 16))
        # a write lands in the target's shared memory
        local.rdma.write(conn, local.inv.buffer(src), local.inv.buffer(rm, length=4096)).result(10)
        head = peer.call("digest")["head"]
        print("write", head == bytes(range(64)).hex())
        # a read returns the target's bytes (the untouched second half)
        dst = local.local(bytearray(4096))
        buf = local.inv.buffer(dst, empty=True)
        n = local.rdma.read(conn, local.inv.buffer(rm, offset=4096, length=4096), buf).result(10)
        print("read", n == 4096 and bytes(buf.memoryview()) == b"\\x5a" * 4096)
        case = sys.argv[2]                      # each refusal breaks the connection (RC): one per run
        if case == "stopped":
            peer.call("stop_mmap")
            target = local.inv.buffer(rm, length=4096)
        else:
            import base64
            from rdma_util import forge_export
            blob = base64.b64decode(started["mmap"])
            forged = forge_export(blob, length=1 << 20) if case == "bounds" else forge_export(blob, key_xor=1)
            forged_map = local.remote(base64.b64encode(forged).decode())
            target = local.inv.buffer(forged_map, offset=65536 if case == "bounds" else 0, length=4096)
        try:
            local.rdma.write(conn, local.inv.buffer(src), target).result(10)
            print("refusal", "accepted")
        except E.NotPermittedError as exc:
            print("refusal", " ".join(str(exc).split()))
    finally:
        local.close()
        peer.close()
""")


def test_shared_memory_is_a_sealed_memfd() -> None:
    mem = pydoca.shared_memory(1 << 16)
    assert len(mem) == 1 << 16 and bytes(mem[:8]) == b"\0" * 8
    path = "/proc/self/fd"
    fds = []
    for n in os.listdir(path):                  # the listing's own fd is gone by now
        try:
            if os.readlink(f"{path}/{n}").startswith("/memfd:pydoca"):
                fds.append(int(n))
        except FileNotFoundError:
            pass
    assert fds, "mmap keeps a duplicate of the memfd"
    seals = fcntl.fcntl(fds[-1], fcntl.F_GET_SEALS)
    assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW
    mem.close()
    with pytest.raises(ValueError, match="size must be > 0"):
        pydoca.shared_memory(0)


@pytest.mark.parametrize("case,why", [("stopped", "is not registered on the target"),
                                      ("key", "wrong access key"), ("bounds", "is outside mmap")])
def test_writes_and_reads_use_memcpy_and_keep_the_checks(case: str, why: str) -> None:
    env = {**os.environ, "SOFTDOCA_LOG": "debug", "SOFTDOCA_TRANSPORT": "shm"}
    out = subprocess.run([sys.executable, "-c", INITIATOR, HERE, case], env=env, capture_output=True, text=True,
                         timeout=100)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(ln.split(" ", 1) for ln in out.stdout.splitlines() if " " in ln)
    assert lines.get("write") == "True", out.stdout
    assert lines.get("read") == "True", out.stdout
    assert why in lines.get("refusal", ""), out.stdout
    assert "is a shared file: same-host copies with memcpy" in out.stderr, out.stderr[-3000:]
