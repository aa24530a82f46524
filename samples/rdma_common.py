"""What the RDMA samples share, as DOCA's rdma_common does: the command line,
the device choice, descriptor files, the data pattern and the summary line.
Every DOCA step stays in the samples themselves."""
from __future__ import annotations

import argparse
import atexit
import contextlib
import ipaddress
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional

try:                                      # pydoca loads its backend lazily, on first use of a name
    from pydoca import Device
    from pydoca.descriptor import DescriptorError, read_descriptor, write_descriptor
    from pydoca.errors import DocaError, NotFoundError
    from pydoca.peer.spec import SpecError, parse_size, split_address
    from pydoca.rdma.exchange import ExchangeError
except ImportError as _exc:               # no backend (pydoca.BackendError) or pydoca not installed
    sys.exit(f"{os.path.basename(sys.argv[0])}: FAILED: cannot load pydoca: {_exc}")

KIND = "pydoca-sample"                    # descriptor files: DIR/responder.json and DIR/requester.json


class SampleError(Exception):
    """A failure reported in one line (exit status 1)."""


def pattern(size: int, seed: int = 0) -> bytes:
    """The data the samples move: byte i is ``(i * 31 + 7 + seed) & 0xff``."""
    period = bytes((i * 31 + 7 + seed) & 0xFF for i in range(256))
    return period * (size // 256) + period[:size % 256]


def verify(data: Any, expected: bytes, what: str) -> None:
    """SampleError naming the first differing byte unless ``data == expected``."""
    got = bytes(data)
    if got != expected:
        bad = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b] or [min(len(got), len(expected))]
        raise SampleError(f"{what}: {len(bad)} of {len(got)} bytes differ, first at offset {bad[0]}")


def _amount(text: str) -> int:
    """'8', '4K', '4KiB', '1M', '2G' -> a positive integer."""
    try:
        return parse_size(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _endpoint(text: str) -> tuple[str, int]:
    try:
        return split_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parser(file: str, doc: str, *, pair: str, listens: bool, size: Optional[int] = 1 << 20,
           has_size: bool = True, iterations: bool = False) -> argparse.ArgumentParser:
    """The options of one sample; ``listens``: the side that listens in RDMA CM mode."""
    name = os.path.basename(file).removesuffix(".py")
    first, _, rest = doc.partition("\n\n")
    p = argparse.ArgumentParser(prog=f"{name}.py", description=first, epilog=rest,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    flag, verb = ("--listen", "listen on") if listens else ("--connect", "connect to")
    mode.add_argument(flag, metavar="HOST:PORT", type=_endpoint, help=f"RDMA CM: {verb} HOST:PORT")
    mode.add_argument("--descriptor-dir", metavar="DIR", help="out of band: exchange descriptor files in DIR")
    p.add_argument("--device", metavar="NAME", help="ibdev or interface name (default: by address, else lo)")
    if has_size:
        p.add_argument("--size", type=_amount, default=size, metavar="BYTES",
                       help=f"bytes to move, K/M/G suffixes (default: {size or 'the size of the peer memory'})")
    if iterations:
        p.add_argument("--iterations", type=_amount, default=1, metavar="N", help="repeat the operation N times")
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS", help="bound of every wait (30)")
    p.add_argument("--progress", choices=("blocking", "polling"), default="blocking", help="progress engine mode")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="data pattern seed (both sides alike)")
    p.add_argument("--debug", action="store_true", help="pydoca debug logs and tracebacks")
    p.set_defaults(name=name, pair=pair, role="responder" if listens else "requester")
    return p


def open_device(args: argparse.Namespace) -> Device:
    """--device (ibdev, then interface name); else the device owning the
    --listen address or the local address that routes to --connect; else lo."""
    if args.device:
        for key in ("ibdev_name", "iface"):
            with contextlib.suppress(NotFoundError):
                return Device.open(**{key: args.device})
        raise SampleError(f"no DOCA device named {args.device!r} (`pydoca devices` lists them)")
    local = args.address                                     # the --listen address, or None
    if getattr(args, "connect", None):
        with socket.socket(socket.AF_INET6 if ":" in local else socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((local, args.connect[1]))              # asks the routing table; sends nothing
            local = s.getsockname()[0]
    try:
        if local is None or ipaddress.ip_address(local).is_unspecified:
            return Device.open(iface="lo")
        return Device.open(ip=local)
    except NotFoundError:
        raise SampleError(f"no DOCA device has address {local}; use --device (`pydoca devices`)") from None


def write_descriptors(args: argparse.Namespace, **payload: bytes) -> None:
    """Write our descriptors (connection, memory) to DIR/<role>.json, removed at exit."""
    os.makedirs(args.descriptor_dir, exist_ok=True)
    path = os.path.join(args.descriptor_dir, f"{args.role}.json")
    write_descriptor(path, KIND, {"sample": args.pair, **payload})    # atomic, mode 0600
    atexit.register(Path(path).unlink, missing_ok=True)
    status(args, f"wrote {path}")


def read_descriptors(args: argparse.Namespace) -> Dict[str, Any]:
    """The peer's descriptors, waiting up to --timeout for its file; a file
    left on this host by a process that has exited is skipped."""
    peer = "requester" if args.role == "responder" else "responder"
    path = os.path.join(args.descriptor_dir, f"{peer}.json")
    deadline = time.monotonic() + args.timeout
    while True:
        try:
            info = read_descriptor(path, KIND, timeout=max(0.0, deadline - time.monotonic()))
        except DescriptorError:
            if os.path.exists(path):
                raise
            raise SampleError(f"{path}: descriptor file not found after waiting {args.timeout:g}s (is the {peer} "
                              "running with the same --descriptor-dir?)") from None
        if info.get("sample") != args.pair:
            raise SampleError(f"{path}: the {peer} runs sample {info.get('sample')!r}, not {args.pair!r}")
        try:
            os.kill(info["pid"], 0) if info.get("host") == socket.gethostname() else None
            return info
        except ProcessLookupError:
            if time.monotonic() >= deadline:
                raise SampleError(f"{path}: stale descriptor (process {info['pid']} has exited), no fresh one "
                                  f"after {args.timeout:g}s") from None
        except (OSError, KeyError, TypeError):
            return info
        time.sleep(0.05)


def status(args: argparse.Namespace, text: str) -> None:
    """A progress note, on stderr (stdout carries only the summary line)."""
    print(f"{args.name}: {text}", file=sys.stderr, flush=True)


def peer_size(args: argparse.Namespace, length: int) -> int:
    """The size of the peer's memory, which --size (if given) must match."""
    if args.size is not None and args.size != length:
        raise SampleError(f"size mismatch: the responder's memory is {length} bytes, --size asks for {args.size}")
    return length


def summary(args: argparse.Namespace, amount: int, elapsed: Optional[float] = None, *,
            unit: str = "bytes", note: str = "") -> str:
    """The one stdout line. Only the requester times the transfer (bytes/s, or
    operations/s for atomics); the other side says what it checked."""
    n = getattr(args, "iterations", 1)
    head = f"{args.name}: OK {amount} {unit}" + (f" x {n}" if n > 1 else "")
    if elapsed is None:
        return f"{head}, {note}"
    per_op = f"{elapsed / n * 1e6:.1f} us/op, " if n > 1 else ""
    rate = f"{amount * n / elapsed / 1e6:.2f} MB/s" if unit == "bytes" else f"{amount * n / elapsed:.0f} ops/s"
    return f"{head} in {elapsed * 1e3:.3f} ms ({per_op}{rate})" + (f", {note}" if note else "")


def main(run: Callable[[argparse.Namespace], str], p: argparse.ArgumentParser) -> int:
    """Parse, run, print the summary line; a one-line reason on stderr and exit 1 on failure."""
    args = p.parse_args()
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING, format="%(message)s")
    try:
        host = (getattr(args, "listen", None) or getattr(args, "connect", None) or (None,))[0]
        args.address = host and (host if ":" in host else socket.gethostbyname(host))   # a name -> IPv4
        line = run(args)
    except KeyboardInterrupt:
        return 130
    except (SampleError, DocaError, DescriptorError, ExchangeError, TimeoutError, OSError) as exc:
        if args.debug:
            raise
        print(f"{args.name}: FAILED: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(line + "\n")                       # one write: the lines of two processes never mix
    sys.stdout.flush()
    return 0
