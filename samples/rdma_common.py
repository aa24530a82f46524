"""What the RDMA samples share, as DOCA's rdma_common does: arguments, device choice,
descriptor files, the data pattern, the summary line. Every DOCA step stays in the samples."""
from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Optional

try:                                      # pydoca loads its backend lazily, on first use of a name
    from pydoca import Device
    from pydoca.descriptor import DescriptorError, read_descriptor, write_descriptor
    from pydoca.errors import DocaError, NotFoundError
    from pydoca.peer.spec import parse_size, split_address
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
    if (got := bytes(data)) != expected:
        bad = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b] or [min(len(got), len(expected))]
        raise SampleError(f"{what}: {len(bad)} of {len(got)} bytes differ, first at offset {bad[0]}")


def _arg(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from one of pydoca's parsers (sizes, HOST:PORT)."""
    def parse(text: str) -> Any:
        try:
            return convert(text)
        except ValueError as exc:                     # SpecError is a ValueError
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


def parser(file: str, doc: str, *, pair: str, listens: bool, size: Optional[int] = 1 << 20,
           has_size: bool = True, iterations: bool = False) -> argparse.ArgumentParser:
    """The options of one sample; ``listens``: the side that listens in RDMA CM mode."""
    name = os.path.basename(file).removesuffix(".py")
    first, _, rest = doc.partition("\n\n")
    p = argparse.ArgumentParser(prog=f"{name}.py", description=first, epilog=rest,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    flag, verb = ("--listen", "listen on") if listens else ("--connect", "connect to")
    mode.add_argument(flag, metavar="HOST:PORT", type=_arg(split_address), help=f"RDMA CM: {verb} HOST:PORT")
    mode.add_argument("--descriptor-dir", metavar="DIR", help="out of band: exchange descriptor files in DIR")
    p.add_argument("--device", metavar="NAME", help="ibdev or interface name (default: by address, else lo)")
    if has_size:
        p.add_argument("--size", type=_arg(parse_size), default=size, metavar="BYTES",
                       help=f"bytes to move, K/M/G suffixes (default: {size or 'the size of the peer memory'})")
    if iterations:
        p.add_argument("--iterations", type=_arg(parse_size), default=1, metavar="N", help="repeat N times")
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS", help="bound of every wait (30)")
    p.add_argument("--progress", choices=("blocking", "polling"), default="blocking", help="progress engine mode")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="data pattern seed (both sides alike)")
    p.add_argument("--debug", action="store_true", help="pydoca debug logs and tracebacks")
    p.set_defaults(name=name, pair=pair, role="responder" if listens else "requester")
    return p


def open_device(args: argparse.Namespace) -> Device:
    """--device (ibdev, then interface name), else the device of --listen or of the route to --connect."""
    if args.device:
        for key in ("ibdev_name", "iface"):
            with contextlib.suppress(NotFoundError):
                return Device.open(**{key: args.device})
        raise SampleError(f"no DOCA device named {args.device!r} (`pydoca devices` lists them)")
    return Device.open_route(args.address or "0.0.0.0")


def write_descriptors(args: argparse.Namespace, **payload: bytes) -> None:
    """Write our descriptors (connection, memory) to DIR/<role>.json, removed at exit."""
    os.makedirs(args.descriptor_dir, exist_ok=True)
    path = os.path.join(args.descriptor_dir, f"{args.role}.json")
    write_descriptor(path, KIND, {"sample": args.pair, **payload})    # atomic, mode 0600
    atexit.register(Path(path).unlink, missing_ok=True)
    status(args, f"wrote {path}")


def read_descriptors(args: argparse.Namespace) -> Dict[str, Any]:
    """The peer's descriptors, waiting up to --timeout for a file from a live process."""
    peer = "requester" if args.role == "responder" else "responder"
    path = os.path.join(args.descriptor_dir, f"{peer}.json")
    try:
        info = read_descriptor(path, KIND, timeout=args.timeout, fresh=True)
    except DescriptorError as exc:
        hint = "" if os.path.exists(path) else f" (is the {peer} running with the same --descriptor-dir?)"
        raise SampleError(f"{exc}{hint}") from None
    if info.get("sample") != args.pair:
        raise SampleError(f"{path}: the {peer} runs sample {info.get('sample')!r}, not {args.pair!r}")
    return info


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
    """The one stdout line: the requester's rate (bytes/s; ops/s for atomics), else what was checked."""
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
