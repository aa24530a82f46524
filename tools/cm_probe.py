#!/usr/bin/env python3
"""Hostile RDMA CM clients for a softdoca listener, over plain TCP sockets.

softdoca's RDMA CM request is one wire frame: a 96-byte little-endian header
(softdoca/src/rdma.h: magic "SDRW", version 1, opcode SD_OP_CM_REQ = 3,
payload_len 24) and a 24-byte payload (the dialer's instance id u64 and its
16-byte connection token): 120 bytes. A listener (``Rdma.listen``, ``pydoca
serve``) must survive any of these, then still serve a good client:

  valid-close      a valid request, then close before the answer
  valid-garbage    a valid request, then garbage instead of the ready-to-use
  valid-wait       a valid request, then nothing until the answer (then close)
  prefix:N         the first N bytes of a valid request, then close
  garbage          random bytes, then close
  slowloris        a valid request one byte at a time, a pause between each
  connect-close    connect and close at once

Usage (reproduce the listener-killing request of issue "one TCP connection
kills any listener"):

  python3 tools/cm_probe.py --listen 18515 &      # a raw Rdma.listen listener
  python3 tools/cm_probe.py --attack 127.0.0.1:18515 valid-close
"""
from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import time
from typing import List, Optional

HDR_LEN = 96
MAGIC = 0x57524453          # "SDRW"
VERSION = 1
OP_CM_REQ = 3
CMREQ_LEN = 8 + 16
KINDS = ("valid-close", "valid-garbage", "valid-wait", "prefix", "garbage", "slowloris", "connect-close")


def cm_request(instance: Optional[int] = None, token: Optional[bytes] = None) -> bytes:
    """A valid 120-byte softdoca RDMA CM connection request frame."""
    hdr = bytearray(HDR_LEN)
    struct.pack_into("<IBBHQI", hdr, 0, MAGIC, VERSION, OP_CM_REQ, 0, 1, CMREQ_LEN)
    inst = int.from_bytes(os.urandom(8), "little") if instance is None else instance
    payload = struct.pack("<Q", inst) + (os.urandom(16) if token is None else token)
    return bytes(hdr) + payload


def attack(host: str, port: int, kind: str, *, n: int = 0, timeout: float = 2.0, pause: float = 0.05) -> str:
    """One hostile connection of ``kind`` (``n``: prefix length). Returns what the
    listener answered ("closed", "answered N bytes", "silent", "refused")."""
    req = cm_request()
    try:
        s = socket.create_connection((host, port), timeout=timeout)
    except ConnectionRefusedError:
        return "refused"
    with s:
        s.settimeout(timeout)
        try:
            if kind == "connect-close":
                return "closed"
            if kind == "garbage":
                s.sendall(os.urandom(n or 256))
                return "closed"
            if kind == "prefix":
                s.sendall(req[:n])
                return "closed"
            if kind == "slowloris":
                for i in range(len(req)):
                    s.sendall(req[i:i + 1])
                    time.sleep(pause)
            else:
                s.sendall(req)
            if kind == "valid-close":
                return "closed"
            if kind == "valid-garbage":
                s.sendall(os.urandom(n or 200))
                return "closed"
            # valid-wait / slowloris: read the answer (accept or reject), bounded
            got = b""
            end = time.monotonic() + timeout
            while len(got) < HDR_LEN and time.monotonic() < end:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
            return f"answered {len(got)} bytes" if got else "silent"
        except (ConnectionError, socket.timeout, OSError) as exc:
            return f"reset ({type(exc).__name__})"


def serve(port: int, seconds: float) -> int:
    """A raw ``Rdma.listen`` listener accepting everything; prints one line per
    event and exits 1 if an exception escapes its progress loop."""
    import pydoca
    with pydoca.Device.open(iface="lo") as dev, pydoca.ProgressEngine() as pe, \
            pydoca.Rdma(dev, pe) as rdma:
        rdma.listen(port, accept=lambda conn: True)
        print(f"listening on {port}", flush=True)
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                pe.wait(0.1)
        except Exception as exc:  # noqa: BLE001 - this is what the probe reveals
            print(f"LISTENER DIED: {type(exc).__name__}: {exc}", flush=True)
            return 1
    print("listener survived", flush=True)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", type=int, metavar="PORT", help="run a raw Rdma.listen listener")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--attack", metavar="HOST:PORT")
    ap.add_argument("kind", nargs="?", default="valid-close", help=f"one of {', '.join(KINDS)}; prefix:N")
    ap.add_argument("--count", type=int, default=1)
    args = ap.parse_args(argv)
    if args.listen:
        return serve(args.listen, args.seconds)
    if not args.attack:
        ap.error("--listen or --attack")
    host, _, port = args.attack.rpartition(":")
    kind, _, n = args.kind.partition(":")
    if kind not in KINDS:
        ap.error(f"unknown kind {kind}")
    for _ in range(args.count):
        print(attack(host, int(port), kind, n=int(n or 0)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
