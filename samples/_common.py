"""Shared plumbing of the pydoca RDMA samples (kept here so each sample shows
only its operation).

Every sample runs as two processes, ``responder`` and ``requester``, which
connect in one of two modes:

* RDMA CM: ``responder --listen HOST:PORT`` / ``requester --connect HOST:PORT``;
* descriptor files (out of band, through a shared directory):
  ``--descriptor-dir DIR`` on both sides. The responder writes
  ``DIR/responder.json`` (its connection blob, and its memory descriptor when
  the sample shares memory); the requester reads it and writes
  ``DIR/requester.json``; each side then connects with the other's blob.

Protocol on the connection, after it is established (control messages travel
as send/receive on the connection itself, in fixed control slots):

1. the responder posts its receives (the requester's hello when it shares
   memory, the sample's own receives, the final verdict), then sends its
   *hello*: a JSON message with the sample name, the size and (RDMA CM mode)
   its memory descriptor. The requester waits for it before any operation, so
   no send of the requester can arrive before the matching receive is posted;
2. the requester runs the operation, checks what it can and sends ``b"OK"`` or
   ``b"BAD:<reason>"``;
3. the responder checks what it can and answers ``b"OK"`` or
   ``b"BAD:<reason>"``.

Both processes exit 0 only when every check passed, else 1 with a one-line
reason on stderr. Every wait is bounded by ``--timeout``.
"""
from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import logging
import os
import socket
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

try:                                             # pydoca loads its backend lazily, on first use of a name
    import pydoca
    from pydoca import (Access, Buffer, BufferInventory, Connection, Device, MemoryMap, Opcode, ProgressEngine,
                        Rdma, Received)
    from pydoca.descriptor import DescriptorError, decode_document, encode_payload, read_descriptor, write_descriptor
    from pydoca.errors import DocaError, NotFoundError
    from pydoca.rdma.tasks import ReceiveTask
except ImportError as _exc:                      # no backend (pydoca.BackendError) or not installed
    sys.exit(f"{os.path.basename(sys.argv[0])}: FAILED: cannot load pydoca: {_exc}")

DEFAULT_SIZE = 1 << 20
DEFAULT_TIMEOUT = 30.0
SLOT = 8192                      # one control message (hello, verdict) at most
SLOTS = 16
RESPONDER_FILE = "responder.json"
REQUESTER_FILE = "requester.json"
KIND_RESPONDER = "pydoca-sample-responder"
KIND_REQUESTER = "pydoca-sample-requester"
KIND_HELLO = "pydoca-sample-hello"
OK = b"OK"


class SampleError(Exception):
    """A failure the sample reports in one line (exit status 1)."""


# -- data pattern ----------------------------------------------------------------
def pattern(size: int, seed: int = 0) -> bytes:
    """Deterministic, position-dependent bytes: ``(i * 31 + 7 + seed) & 0xff``."""
    period = bytes((i * 31 + 7 + seed) & 0xFF for i in range(256))     # the pattern repeats every 256 bytes
    whole, rest = divmod(size, 256)
    return period * whole + period[:rest]


def verify(data: Any, expected: bytes, what: str = "data") -> Optional[str]:
    """None when ``data`` equals ``expected``, else a one-line reason."""
    got = np.frombuffer(memoryview(data), dtype=np.uint8)
    want = np.frombuffer(expected, dtype=np.uint8)
    if got.size != want.size:
        return f"{what}: {got.size} bytes, expected {want.size}"
    diff = np.flatnonzero(got != want)
    if diff.size == 0:
        return None
    i = int(diff[0])
    return (f"{what}: {diff.size} of {want.size} bytes differ, first at offset {i} "
            f"(got 0x{int(got[i]):02x}, expected 0x{int(want[i]):02x})")


# -- command line ------------------------------------------------------------------
def parse_size(text: str) -> int:
    """'4096', '4K', '4KiB', '1M', '1MiB', '2G' -> bytes (binary units)."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in units and t[-1:] != "" and not t[-1:].isdigit() else ""
    try:
        value = int(t[:-1] if unit else t) * units[unit]
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (e.g. 8, 4K, 1M)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, got {text!r}")
    return value


def parse_endpoint(text: str) -> Tuple[str, int]:
    """'HOST:PORT' or '[V6]:PORT' -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        number = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port in {text!r}") from None
    if not 0 < number < 65536:
        raise argparse.ArgumentTypeError(f"port out of range in {text!r}")
    return host, number


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def make_parser(name: str, description: str, *, size: bool = True, iterations: bool = False) -> argparse.ArgumentParser:
    """The sample's parser: subcommands ``responder`` and ``requester``."""
    parser = argparse.ArgumentParser(
        prog=f"{name}.py", description=description,
        epilog=f"example: python samples/{name}.py responder --listen 127.0.0.1:7471 & "
               f"python samples/{name}.py requester --connect 127.0.0.1:7471")
    roles = parser.add_subparsers(dest="role", required=True, metavar="ROLE")
    for role, text in (("responder", "serve one requester, then exit"),
                       ("requester", "connect to a responder, run the operation, then exit")):
        sub = roles.add_parser(role, help=text, description=f"{name} {role}: {text}")
        mode = sub.add_mutually_exclusive_group(required=True)
        if role == "responder":
            mode.add_argument("--listen", metavar="HOST:PORT", type=parse_endpoint,
                              help="RDMA CM: listen on PORT of the device that owns HOST")
        else:
            mode.add_argument("--connect", metavar="HOST:PORT", type=parse_endpoint,
                              help="RDMA CM: connect to a responder listening on HOST:PORT")
        mode.add_argument("--descriptor-dir", metavar="DIR",
                          help=f"out of band: exchange {RESPONDER_FILE}/{REQUESTER_FILE} in DIR")
        sub.add_argument("--device", metavar="NAME",
                         help="DOCA device (ibdev or interface name); default: the device owning the "
                              "--listen address or the local address routing to --connect, else 'lo'")
        if size:
            sub.add_argument("--size", type=parse_size, metavar="BYTES",
                             default=DEFAULT_SIZE if role == "responder" else None,
                             help="bytes to transfer (K/M/G suffixes; default 1M" +
                                  (")" if role == "responder" else ", or whatever the responder uses)"))
        if iterations and role == "requester":
            sub.add_argument("--iterations", type=positive_int, default=1, metavar="N",
                             help="repeat the operation N times (default 1)")
        sub.add_argument("--seed", type=int, default=0, metavar="N",
                         help="data pattern seed; both sides must use the same (default 0)")
        sub.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                         help=f"bound of every wait (default {DEFAULT_TIMEOUT:g})")
        sub.add_argument("--progress", choices=("blocking", "polling"), default="blocking",
                         help="progress engine mode (polling: lowest latency, one busy core)")
        sub.add_argument("--debug", action="store_true", help="pydoca debug logs and tracebacks")
    return parser


# -- device choice -------------------------------------------------------------------
def _resolve(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise SampleError(f"cannot resolve {host!r}: {exc.strerror}") from None
    infos.sort(key=lambda i: i[0] != socket.AF_INET)     # prefer IPv4
    return str(infos[0][4][0])


def _source_address(ip: str, port: int) -> Optional[str]:
    """The local address the kernel routes to ``ip`` from (no packet is sent)."""
    family = socket.AF_INET6 if ipaddress.ip_address(ip).version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.connect((ip, port))
        except OSError:
            return None
        return str(s.getsockname()[0])


def _available() -> str:
    return "; ".join(d.describe() for d in pydoca.devices()) or "none"


def open_device(args: argparse.Namespace) -> Device:
    """--device (ibdev, then interface name), else by address, else 'lo'."""
    if args.device:
        for key in ("ibdev_name", "iface"):
            try:
                return Device.open(**{key: args.device})
            except NotFoundError:
                continue
        raise SampleError(f"no DOCA device named {args.device!r} (available: {_available()})")
    endpoint = getattr(args, "listen", None) or getattr(args, "connect", None)
    if endpoint is not None:
        ip = args.address
        local: Optional[str] = ip
        if getattr(args, "connect", None) is not None:
            local = _source_address(ip, endpoint[1])
        if local is not None and not ipaddress.ip_address(local).is_unspecified:
            try:
                return Device.open(ip=local)
            except NotFoundError:
                raise SampleError(f"no DOCA device has address {local} (use --device; available: "
                                  f"{_available()})") from None
    try:
        return Device.open(iface="lo")
    except NotFoundError:
        raise SampleError(f"no DOCA device on 'lo'; use --device (available: {_available()})") from None


# -- the session ---------------------------------------------------------------------------
class Session:
    """Everything one side of a sample owns, closed in dependency order.

    ``memory``/``mmap``: the sample's data (``size`` bytes, registered with
    ``access``); ``peer_mmap``: the peer's shared memory (when it shares);
    ``conn``: the established connection.
    """

    def __init__(self, args: argparse.Namespace, name: str, *, size: Optional[int], access: Access,
                 share: bool, peer_shares: bool, fill: bool = False,
                 initial: Optional[Callable[[int], bytes]] = None, permissions: Optional[Access] = None) -> None:
        self.args, self.name, self.role = args, name, args.role
        self.size, self.access, self.share, self.peer_shares = 0, access, share, peer_shares
        if fill:
            initial = self.expected
        self.initial = initial
        self.mmap: Optional[MemoryMap] = None
        self.timeout: float = args.timeout
        self.stack = contextlib.ExitStack()
        self.conn: Optional[Connection] = None
        self.peer_mmap: Optional[MemoryMap] = None
        self.peer_info: Dict[str, Any] = {}
        self._slot = 0
        self._verdict_rx: Optional[ReceiveTask] = None
        self._peer_hello_rx: Optional[ReceiveTask] = None
        self.established_at = 0.0
        try:
            self._open(size, permissions)
        except BaseException:
            self.stack.close()
            raise

    def _open(self, size: Optional[int], permissions: Optional[Access]) -> None:
        enter = self.stack.enter_context
        self.dev = enter(open_device(self.args))
        self.pe = enter(ProgressEngine(mode=self.args.progress))
        # memory goes on its own stack, closed after the Rdma context has stopped
        self.mem = enter(contextlib.ExitStack())
        self.ctrl = bytearray(SLOT * SLOTS)
        self.ctrl_mmap = self.mem.enter_context(MemoryMap(self.dev, self.ctrl, access=Access.LOCAL_READ_WRITE))
        self.inv = self.mem.enter_context(BufferInventory(64))
        default = Access.LOCAL_READ_WRITE | Access.RDMA_WRITE | Access.RDMA_READ
        self.rdma = enter(Rdma(self.dev, self.pe, permissions=permissions or default))
        if size is not None:
            self._register(size)

    def _register(self, size: int) -> None:
        """Allocate and register the sample's memory (``initial(size)`` or zeros)."""
        self.size = size
        self.memory = bytearray(self.initial(size) if self.initial is not None else bytes(size))
        self.mmap = self.mem.enter_context(MemoryMap(self.dev, self.memory, access=self.access))

    def expected(self, size: Optional[int] = None) -> bytes:
        """The data pattern (``--seed``) of ``size`` (default: the sample's size) bytes."""
        return pattern(self.size if size is None else size, self.args.seed)

    @property
    def local(self) -> MemoryMap:
        if self.mmap is None:
            raise SampleError("memory not registered yet")
        return self.mmap

    def close(self) -> None:
        self.stack.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- buffers and control messages -----------------------------------------------------
    def buffer(self, mmap: Optional[MemoryMap] = None, *, offset: int = 0, length: Optional[int] = None,
               empty: bool = False) -> Buffer:
        """A Buffer on ``mmap`` (default: the sample's memory)."""
        return self.inv.buffer(mmap or self.local, offset=offset, length=length, empty=empty)

    def _ctrl_slot(self) -> int:
        if self._slot >= SLOTS:
            raise SampleError("out of control slots")
        self._slot += 1
        return (self._slot - 1) * SLOT

    def post_receive(self, buf: Optional[Buffer] = None) -> ReceiveTask:
        """Post a receive (default: into a fresh control slot)."""
        if buf is None:
            buf = self.buffer(self.ctrl_mmap, offset=self._ctrl_slot(), length=SLOT, empty=True)
        return self.rdma.receive(buf)

    def send_message(self, payload: bytes, what: str) -> None:
        """Send ``payload`` from a control slot; wait until the peer consumed it."""
        if len(payload) > SLOT:
            raise SampleError(f"{what} is {len(payload)} bytes, more than a control slot ({SLOT})")
        off = self._ctrl_slot()
        self.ctrl[off:off + len(payload)] = payload
        task = self.rdma.send(self.connection, self.buffer(self.ctrl_mmap, offset=off, length=len(payload)))
        self.result(task, f"sending the {what}")

    def receive_message(self, task: ReceiveTask, what: str) -> bytes:
        received: Received = self.result(task, f"receiving the {what}")
        return received.data

    def result(self, task: Any, what: str) -> Any:
        """``task.result()`` bounded by --timeout, with a clear message on failure."""
        try:
            return task.result(self.timeout)
        except DocaError as exc:              # the task completed with an error status
            raise SampleError(f"{what} failed: {exc}") from None
        except TimeoutError:                  # our wait ran out
            raise SampleError(f"{what}: no completion within {self.timeout:g}s") from None

    @property
    def connection(self) -> Connection:
        if self.conn is None:
            raise SampleError("not connected")
        return self.conn

    def _hello(self) -> bytes:
        payload: Dict[str, Any] = {"sample": self.name, "size": self.size, "role": self.role}
        if self.share and self.mode == "cm":
            payload["memory"] = self.local.export_rdma()
        return json.dumps(encode_payload(KIND_HELLO, payload)).encode()

    def _check_peer(self, info: Dict[str, Any], source: str) -> None:
        if info.get("sample") != self.name:
            raise SampleError(f"{source}: the peer runs sample {info.get('sample')!r}, not {self.name!r}")
        if self.role == "requester":
            size = info.get("size")
            if not isinstance(size, int) or size <= 0:
                raise SampleError(f"{source}: invalid size {size!r}")
            want = getattr(self.args, "size", None)
            if want is not None and want != size:
                raise SampleError(f"size mismatch: the responder uses {size} bytes, --size asks for {want}")
            if self.mmap is None:
                self._register(size)
        if self.peer_shares and "memory" in info:
            if not isinstance(info["memory"], bytes):
                raise SampleError(f"{source}: memory descriptor is not a b64 blob")
            try:
                self.peer_mmap = self.mem.enter_context(MemoryMap.from_export(self.dev, info["memory"]))
            except DocaError as exc:
                raise SampleError(f"{source}: the peer's memory descriptor was refused: {exc}") from None
        self.peer_info = info

    @property
    def mode(self) -> str:
        return "dir" if self.args.descriptor_dir else "cm"

    # -- connection setup ------------------------------------------------------------------------
    def _wait_established(self, conn: Connection, what: str, hint: str = "") -> None:
        try:
            conn.wait_established(self.timeout)
        except TimeoutError:
            raise SampleError(f"timed out after {self.timeout:g}s waiting for {what}{hint}") from None
        except DocaError:
            raise SampleError(f"{what} failed: connection {conn.state.value}{hint}") from None

    def _responder_connect(self) -> None:
        if self.mode == "cm":
            port = self.args.listen[1]
            try:
                self.rdma.listen(port, accept=lambda c: True)
            except DocaError as exc:
                raise SampleError(f"cannot listen on port {port} of {self.dev.info.describe()}: {exc}") from None
            host = self.args.address
            if ipaddress.ip_address(host).is_unspecified:
                host = self.dev.info.ipv4 or self.dev.info.ipv6 or host
            shown = f"[{host}]" if ":" in host else host
            print_status(f"{self.name} responder: listening on {shown}:{port} ({self.dev.info.ibdev_name})")
            try:
                self.pe.run_until(lambda: any(c.established for c in self.rdma.connections), self.timeout,
                                  what=f"a requester to connect to port {port}")
            except TimeoutError as exc:
                raise SampleError(str(exc)) from None
            self.conn = next(c for c in self.rdma.connections if c.established)
            return
        directory = self.args.descriptor_dir
        os.makedirs(directory, exist_ok=True)
        mine, theirs = os.path.join(directory, RESPONDER_FILE), os.path.join(directory, REQUESTER_FILE)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(theirs)                          # a stale one from an earlier run
        blob, conn = self.rdma.export()
        payload: Dict[str, Any] = {"sample": self.name, "size": self.size, "connection": blob}
        if self.share:
            payload["memory"] = self.local.export_rdma()
        write_descriptor(mine, KIND_RESPONDER, payload)
        self.stack.callback(_unlink_own, mine)
        print_status(f"{self.name} responder: wrote {mine}, waiting for {REQUESTER_FILE}")
        info = read_fresh(theirs, KIND_REQUESTER, self.timeout)
        self._check_peer(info, theirs)
        self._oob_connect(info, conn, theirs)
        self._wait_established(conn, "the connection to the requester")
        self.conn = conn

    def _oob_connect(self, info: Dict[str, Any], conn: Connection, source: str) -> None:
        blob = info.get("connection")
        if not isinstance(blob, bytes) or not blob:
            raise SampleError(f"{source}: no connection blob")
        try:
            self.rdma.connect(blob, conn)
        except DocaError as exc:
            raise SampleError(f"{source}: connecting with the peer's blob failed: {exc}") from None

    def _requester_connect(self) -> ReceiveTask:
        if self.mode == "cm":
            host, port = self.args.connect
            hello_rx = self.post_receive()             # before the responder can send its hello
            try:
                conn = self.rdma.connect_to(self.args.address, port)
            except DocaError as exc:
                raise SampleError(f"cannot connect to {host}:{port}: {exc}") from None
            self._wait_established(conn, f"connecting to {host}:{port}", " (is a responder listening there?)")
            self.conn = conn
            return hello_rx
        directory = self.args.descriptor_dir
        theirs, mine = os.path.join(directory, RESPONDER_FILE), os.path.join(directory, REQUESTER_FILE)
        info = read_fresh(theirs, KIND_RESPONDER, self.timeout)
        self._check_peer(info, theirs)
        blob, conn = self.rdma.export()
        payload: Dict[str, Any] = {"sample": self.name, "size": self.size, "connection": blob}
        if self.share:
            payload["memory"] = self.local.export_rdma()
        hello_rx = self.post_receive()
        write_descriptor(mine, KIND_REQUESTER, payload)
        self.stack.callback(_unlink_own, mine)
        self._oob_connect(info, conn, theirs)
        self._wait_established(conn, "the connection to the responder")
        self.conn = conn
        return hello_rx

    # -- the two roles ---------------------------------------------------------------------------
    def respond(self, post_receives: Callable[[], None] = lambda: None) -> None:
        """Connect, post the peer-hello receive, the sample's receives
        (``post_receives``) and the verdict receive, then send the hello."""
        self._responder_connect()
        self.established_at = time.monotonic()
        if self.peer_shares and self.mode == "cm":
            self._peer_hello_rx = self.post_receive()
        post_receives()
        self._verdict_rx = self.post_receive()
        self.send_message(self._hello(), "hello")
        if self._peer_hello_rx is not None:
            info = self._decode_hello(self.receive_message(self._peer_hello_rx, "requester's hello"))
            self._check_peer(info, "requester's hello")

    def request(self) -> None:
        """Connect and wait for the responder's hello (its memory and size)."""
        hello_rx = self._requester_connect()
        info = self._decode_hello(self.receive_message(hello_rx, "responder's hello"))
        if self.mode == "cm":
            self._check_peer(info, "responder's hello")
        if self.peer_shares and self.peer_mmap is None:
            raise SampleError("the responder did not share its memory")
        if self.share and self.mode == "cm":
            self.send_message(self._hello(), "hello")
        self.established_at = time.monotonic()

    def _decode_hello(self, raw: bytes) -> Dict[str, Any]:
        try:
            doc = json.loads(raw.decode())
            info = decode_document(doc, KIND_HELLO, source="hello")
        except (UnicodeDecodeError, ValueError) as exc:
            raise SampleError(f"invalid hello message from the peer: {exc}") from None
        if info.get("sample") != self.name:
            raise SampleError(f"the peer runs sample {info.get('sample')!r}, not {self.name!r}")
        return info

    def finish_requester(self, problem: Optional[str]) -> None:
        """Send our verdict (None: OK) and wait for the responder's; SampleError unless both OK."""
        rx = self.post_receive()
        self.send_message(OK if problem is None else b"BAD:" + problem.encode()[:SLOT - 4], "verdict")
        answer = self.receive_message(rx, "responder's verdict")
        if problem is not None:
            raise SampleError(problem)
        if answer != OK:
            raise SampleError(f"the responder reports: {_reason(answer)}")

    def finish_responder(self, check: Callable[[], Optional[str]] = lambda: None) -> None:
        """Wait for the requester's verdict, run our ``check``, answer; SampleError unless both OK."""
        assert self._verdict_rx is not None
        verdict = self.receive_message(self._verdict_rx, "requester's verdict")
        problem: Optional[str] = f"the requester reports: {_reason(verdict)}" if verdict != OK else None
        if problem is None:
            try:
                problem = check()
            except SampleError as exc:
                problem = str(exc)
        self.send_message(OK if problem is None else b"BAD:" + problem.encode()[:SLOT - 4], "verdict")
        if problem is not None:
            raise SampleError(problem)


def check_received(s: Session, task: ReceiveTask, opcode: Opcode, immediate: Optional[int]) -> Optional[str]:
    """None when the receive ``task`` saw ``opcode`` (and ``immediate``) and
    the sample's memory holds the pattern, else a one-line reason."""
    received: Received = s.result(task, "the data receive")
    if received.opcode is not opcode:
        return f"the receive completed with opcode {received.opcode.name}, expected {opcode.name}"
    if immediate is not None and received.immediate != immediate:
        got = "none" if received.immediate is None else f"0x{received.immediate:08x}"
        return f"immediate data {got}, expected 0x{immediate:08x}"
    if opcode is not Opcode.WRITE_WITH_IMM and received.length != s.size:
        return f"received {received.length} bytes, expected {s.size}"
    what = "written data" if opcode is Opcode.WRITE_WITH_IMM else "received data"
    return verify(s.memory, s.expected(), what)


def _reason(message: bytes) -> str:
    text = message.decode(errors="replace")
    return text[4:] if text.startswith("BAD:") else f"unexpected message {text[:80]!r}"


def _unlink_own(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _stale(info: Dict[str, Any]) -> bool:
    """A descriptor written on this host by a process that is gone."""
    if info.get("host") != socket.gethostname() or not isinstance(info.get("pid"), int):
        return False
    try:
        os.kill(info["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def read_fresh(path: str, kind: str, timeout: float) -> Dict[str, Any]:
    """read_descriptor, skipping a stale file (its writer has exited) until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            info = read_descriptor(path, kind, timeout=max(0.0, deadline - time.monotonic()))
        except DescriptorError as exc:
            if not os.path.exists(path):
                peer = "responder" if kind == KIND_RESPONDER else "requester"
                raise SampleError(f"{path}: descriptor file not found after waiting {timeout:g}s "
                                  f"(is the {peer} running with the same --descriptor-dir?)") from None
            raise SampleError(str(exc)) from None
        if not _stale(info):
            return info
        if time.monotonic() >= deadline:
            raise SampleError(f"{path}: stale descriptor (process {info['pid']} has exited) and no fresh one "
                              f"after {timeout:g}s")
        time.sleep(0.05)


# -- output ------------------------------------------------------------------------------------
def print_status(text: str) -> None:
    """Progress notes go to stderr; stdout carries only the summary line."""
    print(text, file=sys.stderr, flush=True)


def summary(name: str, role: str, nbytes: int, elapsed: float, *, iterations: int = 1, note: str = "") -> str:
    """'<name> <role>: OK <bytes> bytes [x N] in <ms> ms (<us>/op, <MB/s>)'."""
    total = nbytes * iterations
    rate = total / elapsed / 1e6 if elapsed > 0 else float("inf")
    count = f" x {iterations}" if iterations > 1 else ""
    per_op = f"{elapsed / iterations * 1e6:.1f} us/op, " if iterations > 1 else ""
    extra = f", {note}" if note else ""
    return (f"{name} {role}: OK {nbytes} bytes{count} in {elapsed * 1e3:.3f} ms "
            f"({per_op}{rate:.2f} MB/s){extra}")


def run(parser: argparse.ArgumentParser, roles: Dict[str, Callable[[argparse.Namespace], str]],
        argv: Optional[Sequence[str]] = None) -> int:
    """Parse, dispatch to ``roles[args.role]`` (returns the summary line),
    print it; one-line errors on stderr and exit status 1."""
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING, stream=sys.stderr,
                        format="%(message)s")
    label = f"{parser.prog.removesuffix('.py')} {args.role}"
    try:
        endpoint = getattr(args, "listen", None) or getattr(args, "connect", None)
        args.address = _resolve(endpoint[0]) if endpoint is not None else None
        line = roles[args.role](args)
    except KeyboardInterrupt:
        print(f"{label}: interrupted", file=sys.stderr)
        return 130
    except (SampleError, DocaError, DescriptorError, OSError, TimeoutError) as exc:
        if args.debug:
            raise
        print(f"{label}: FAILED: {exc}", file=sys.stderr)
        return 1
    print(line, flush=True)
    return 0


__all__ = ["Access", "Opcode", "Session", "check_received", "SampleError", "make_parser", "pattern", "run", "summary", "verify"]
