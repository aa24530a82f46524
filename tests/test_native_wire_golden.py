"""Golden test of softdoca's native wire (docs/softdoca-contract.md, "Wire" and "mmap export descriptor").

Two softdoca processes (tests/peer_proc.py, SOFTDOCA_PROVIDER=native, SOFTDOCA_TRANSPORT=tcp) talk through a TCP
proxy in this process that records the bytes both ways. The recording is cut into frames and every header field is
read at its documented offset (rdma.h: the 96-byte header) and compared with what the operations put there: the
handshakes (HELLO / HELLO_ACK out of band, CM_REQ / CM_ACCEPT / CM_RTU through RDMA CM), WRITE, WRITE_IMM, READ,
FETCH_ADD, CMP_SWP, SEND, SEND_IMM, their answers, and a refusal (NAK) of a write past the map's end. The 82-byte
mmap export descriptor and the 94-byte sync-event export that embeds it are checked field by field too.

A guard for the provider refactoring (docs/native-provider-plan.md, stage S0): nothing on the wire may move.
"""
from __future__ import annotations

import base64
import contextlib
import selectors
import socket
import struct
import threading
import time
import zlib
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from rdma_util import ALL_REMOTE, PeerProc, forge_export, free_port

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.plain_only("a wire layout check: the sanitizer runs add nothing to it")]

ENV = {"SOFTDOCA_PROVIDER": "native", "SOFTDOCA_TRANSPORT": "tcp", "SOFTDOCA_TIMEOUT_MS": "20000"}
SIZE = 4096

# -- the native wire header (rdma.h, "Wire" in docs/softdoca-contract.md): 96 bytes, little-endian ---------------
HDR_LEN = 96
MAGIC = 0x57524453                      # "SDRW"
# field: (offset, struct format or byte count)
FIELDS: Dict[str, Tuple[int, Any]] = {
    "magic": (0, "<I"), "version": (4, "<B"), "opcode": (5, "<B"), "flags": (6, "<H"), "req_id": (8, "<Q"),
    "payload_len": (16, "<I"), "imm": (20, 4), "status": (24, "<I"), "budget_ms": (28, "<I"),
    "instance": (32, "<Q"), "map_id": (40, "<Q"), "raddr": (48, "<Q"), "rlen": (56, "<Q"), "key": (64, 16),
    "arg0": (80, "<Q"), "arg1": (88, "<Q"),
}
OP = {"HELLO": 1, "HELLO_ACK": 2, "CM_REQ": 3, "CM_ACCEPT": 4, "CM_REJECT": 5, "CM_RTU": 6, "WRITE": 16,
      "WRITE_IMM": 17, "SEND": 18, "SEND_IMM": 19, "READ": 20, "CMP_SWP": 21, "FETCH_ADD": 22, "RESP": 32,
      "READ_RESP": 33, "ATOMIC_RESP": 34, "PING": 48, "PONG": 49, "RNR_WAIT": 50, "DISCONNECT": 51}
OPNAME = {v: k for k, v in OP.items()}
NAK_BOUNDS = 5                          # enum sd_prov_nak_code (providers/provider.h)
DOCA_ERROR_NOT_PERMITTED = 2            # doca_error_t
KEEPALIVE = ("PING", "PONG")

# -- the mmap export descriptor (version 1, 82 bytes) and the sync-event export (94 bytes) --------------------
DESC_LEN = 82
DESC: Dict[str, Tuple[int, Any]] = {
    "magic": (0, 4), "version": (4, "<H"), "length": (6, "<H"), "instance": (8, "<Q"), "map_id": (16, "<Q"),
    "base": (24, "<Q"), "len": (32, "<Q"), "perms": (40, "<I"), "key": (44, 16), "ip": (60, 16),
    "port": (76, "<H"), "crc": (78, "<I"),
}
SE_LEN = 94
SE: Dict[str, Tuple[int, Any]] = {"magic": (0, 4), "version": (4, "<H"), "length": (6, "<H"), "desc": (8, DESC_LEN),
                                  "crc": (90, "<I")}
# the connection details blob (doca_rdma_export, rdma.h): port @48, CRC-32 of bytes 0..59 @60
BLOB_LEN, BLOB_PORT, BLOB_CRC = 64, 48, 60


def fields(layout: Dict[str, Tuple[int, Any]], data: bytes) -> Dict[str, Any]:
    """Each field of ``layout`` read at its offset: ints for struct formats, bytes for byte counts."""
    out: Dict[str, Any] = {}
    for name, (off, fmt) in layout.items():
        if isinstance(fmt, int):
            out[name] = bytes(data[off:off + fmt])
        else:
            out[name] = struct.unpack_from(fmt, data, off)[0]
    return out


def tiles(layout: Dict[str, Tuple[int, Any]], total: int) -> bool:
    """The fields cover [0, total) exactly, without gaps or overlaps."""
    at = 0
    for off, fmt in sorted(layout.values(), key=lambda v: v[0]):
        if off != at:
            return False
        at += fmt if isinstance(fmt, int) else struct.calcsize(fmt)
    return at == total


def frames(stream: bytes) -> List[Dict[str, Any]]:
    """Cut a recorded byte stream into frames: header fields plus ``payload`` and ``op`` (its name)."""
    out: List[Dict[str, Any]] = []
    at = 0
    for _ in range(100000):
        if at == len(stream):
            return out
        assert len(stream) - at >= HDR_LEN, f"a partial header at byte {at}: {stream[at:].hex()}"
        h = fields(FIELDS, stream[at:at + HDR_LEN])
        assert h["magic"] == MAGIC, f"no SDRW magic at byte {at}: {stream[at:at + HDR_LEN].hex()}"
        end = at + HDR_LEN + h["payload_len"]
        assert end <= len(stream), f"a partial payload at byte {at}"
        h["payload"] = bytes(stream[at + HDR_LEN:end])
        h["op"] = OPNAME.get(h["opcode"], str(h["opcode"]))
        out.append(h)
        at = end
    raise AssertionError("more than 100000 frames")


# -- the proxy ----------------------------------------------------------------------------------------------
class Proxy:
    """Listens on 127.0.0.1, takes at most one connection and forwards it to ``upstream`` (a port of 127.0.0.1),
    recording what goes each way: ``up`` (client to upstream), ``down`` (upstream to client). One thread,
    every loop bounded in rounds and by ``seconds``."""

    def __init__(self, upstream: int, seconds: float = 30.0) -> None:
        self.upstream = upstream
        self.deadline = time.monotonic() + seconds
        self.up = bytearray()
        self.down = bytearray()
        self.accepted = threading.Event()
        self.finished = threading.Event()
        self.error: Optional[BaseException] = None
        self._stop = threading.Event()
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(4)
        self.lsock.settimeout(0.05)
        self.port: int = self.lsock.getsockname()[1]
        self.thread = threading.Thread(target=self._run, name=f"proxy:{self.port}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # noqa: BLE001 - reported by close()
            self.error = exc
        finally:
            self.lsock.close()
            self.finished.set()

    def _serve(self) -> None:
        client: Optional[socket.socket] = None
        for _ in range(1000000):
            if self._stop.is_set() or time.monotonic() > self.deadline:
                return
            try:
                client, _addr = self.lsock.accept()
                break
            except socket.timeout:
                continue
        if client is None:
            return
        self.accepted.set()
        server = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
        for s in (client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(5)
        peer = {client: server, server: client}
        record = {client: self.up, server: self.down}
        open_ = {client, server}
        with selectors.DefaultSelector() as sel, client, server:
            for s in open_:
                sel.register(s, selectors.EVENT_READ)
            for _ in range(10000000):
                if not open_ or time.monotonic() > self.deadline:
                    return
                if self._stop.is_set() and not sel.select(0):
                    return                       # told to stop and nothing more to forward
                for key, _ev in sel.select(0.05):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        data = sock.recv(1 << 16)
                    except ConnectionError:
                        data = b""
                    if data:
                        record[sock] += data
                        with contextlib.suppress(OSError):
                            peer[sock].sendall(data)
                        continue
                    sel.unregister(sock)            # EOF (or reset): pass the end on, keep the other way going
                    open_.discard(sock)
                    with contextlib.suppress(OSError):
                        peer[sock].shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._stop.set()
        self.finished.wait(10)
        if self.error is not None:
            raise self.error


def rewrite_blob(blob: bytes, port: int) -> bytes:
    """The connection details with the listener's port replaced (the proxy's), CRC recomputed."""
    b = bytearray(blob)
    assert len(b) == BLOB_LEN and b[:4] == b"SDRC", b.hex()
    struct.pack_into("<H", b, BLOB_PORT, port)
    struct.pack_into("<I", b, BLOB_CRC, zlib.crc32(bytes(b[:BLOB_CRC])))
    return bytes(b)


def blob_port(blob: bytes) -> int:
    port: int = struct.unpack_from("<H", blob, BLOB_PORT)[0]
    return port


@contextlib.contextmanager
def two_peers() -> Iterator[Tuple[PeerProc, PeerProc]]:
    target, requester = PeerProc(env=ENV), PeerProc(env=ENV)
    try:
        yield target, requester
    finally:
        requester.close()
        target.close()


def check_descriptor(desc: bytes, *, size: int, perms: int, base: Optional[int] = None) -> Dict[str, Any]:
    """The 82-byte mmap export descriptor, field by field; its fields."""
    assert tiles(DESC, DESC_LEN)
    assert len(desc) == DESC_LEN, f"the native descriptor is {len(desc)} bytes, not {DESC_LEN}"
    d = fields(DESC, desc)
    assert d["magic"] == b"SDMM" and d["version"] == 1 and d["length"] == DESC_LEN, d
    assert d["instance"] != 0 and d["map_id"] != 0, d
    if base is not None:
        assert d["base"] == base, (hex(d["base"]), hex(base))
    assert d["len"] == size and d["perms"] == perms, d
    assert len(set(d["key"])) > 1, "the access key is not random bytes"
    assert d["ip"] == b"\0" * 10 + b"\xff\xff" + bytes([127, 0, 0, 1]), d["ip"].hex()   # ::ffff:127.0.0.1
    assert d["port"] == 0, d
    assert d["crc"] == zlib.crc32(desc[:78]), d
    return d


def ops_only(fs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [f for f in fs if f["op"] not in KEEPALIVE]


def check_common(fs: List[Dict[str, Any]]) -> None:
    """What every frame has: version 1, flags 0, a known opcode, keepalives with nothing else in them."""
    for f in fs:
        assert f["version"] == 1 and f["flags"] == 0, f
        assert f["opcode"] in OPNAME, f
        if f["op"] in KEEPALIVE:
            assert f["payload_len"] == 0, f


def zero_except(f: Dict[str, Any], *keep: str) -> None:
    """Every header field but the fixed ones (magic, version, opcode, flags, payload_len) and ``keep`` is zero."""
    for name, (_off, fmt) in FIELDS.items():
        if name in ("magic", "version", "opcode", "flags", "payload_len") or name in keep:
            continue
        zero = b"\0" * fmt if isinstance(fmt, int) else 0
        assert f[name] == zero, f"{f['op']}: {name} = {f[name]!r}, expected zero"


def u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


TIMEOUT_MS = int(ENV["SOFTDOCA_TIMEOUT_MS"])     # the RNR budget of two-sided ops at rnr_retry_count 7 (default)
FILL = 0x11
OPS: List[Dict[str, Any]] = [
    {"kind": "write", "off": 64, "data": "0102030405060708"},
    {"kind": "read", "off": 64, "len": 16},
    {"kind": "fetch_add", "off": 128, "add": 5},
    {"kind": "compare_swap", "off": 128, "compare": 0x1111111111111116, "swap": 0x0123456789ABCDEF},
    {"kind": "write_imm", "off": 256, "data": "a1a2a3a4", "imm": 0x01020304},
    {"kind": "send", "data": "68656c6c6f"},
    {"kind": "send_imm", "data": "776f726c64", "imm": 0xA0B0C0D0},
]
REQ_OP = {"write": "WRITE", "read": "READ", "fetch_add": "FETCH_ADD", "compare_swap": "CMP_SWP",
          "write_imm": "WRITE_IMM", "send": "SEND", "send_imm": "SEND_IMM"}
RESP_OP = {"WRITE": "RESP", "WRITE_IMM": "RESP", "SEND": "RESP", "SEND_IMM": "RESP", "READ": "READ_RESP",
           "FETCH_ADD": "ATOMIC_RESP", "CMP_SWP": "ATOMIC_RESP"}


def check_request(f: Dict[str, Any], op: Dict[str, Any], desc: Dict[str, Any], req_id: int) -> None:
    """A request frame of operation ``op`` (OPS) on the map of descriptor ``desc``."""
    name = REQ_OP[op["kind"]]
    assert f["op"] == name and f["req_id"] == req_id and f["status"] == 0, (f, op)
    data = bytes.fromhex(op.get("data", ""))
    assert f["payload_len"] == len(data) and f["payload"] == data, (f, op)
    one_sided = name not in ("SEND", "SEND_IMM")
    if one_sided:        # the target: instance, map id, key of the descriptor, the address in its map
        assert (f["instance"], f["map_id"], f["key"]) == (desc["instance"], desc["map_id"], desc["key"]), f
        assert f["raddr"] == desc["base"] + op["off"], (hex(f["raddr"]), hex(desc["base"]), op)
    keep = ["req_id", "instance", "map_id", "key", "raddr"] if one_sided else ["req_id"]
    if name in ("SEND", "SEND_IMM", "WRITE_IMM"):       # two-sided: the RNR budget (rnr_retry_count 7)
        assert f["budget_ms"] == TIMEOUT_MS, f
        keep.append("budget_ms")
    if name in ("SEND_IMM", "WRITE_IMM"):               # 4 raw bytes, big-endian as the application gave them
        assert f["imm"] == struct.pack(">I", op["imm"]), f
        keep.append("imm")
    if name == "READ":
        assert f["rlen"] == op["len"], f
        keep.append("rlen")
    if name == "FETCH_ADD":
        assert f["arg0"] == op["add"], f
        keep.append("arg0")
    if name == "CMP_SWP":
        assert (f["arg0"], f["arg1"]) == (op["compare"], op["swap"]), f
        keep += ["arg0", "arg1"]
    zero_except(f, *keep)


def check_response(f: Dict[str, Any], req: Dict[str, Any], payload: bytes) -> None:
    """The successful answer to request frame ``req``: its req_id, status 0, ``payload``, nothing else."""
    assert f["op"] == RESP_OP[req["op"]] and f["req_id"] == req["req_id"], (f, req)
    assert f["payload_len"] == len(payload) and f["payload"] == payload, (f, payload)
    zero_except(f, "req_id")


def test_native_wire_oob_handshake_ops_and_nak() -> None:
    """HELLO / HELLO_ACK, every operation and its answer, and a NAK (a write past the map's end through a forged
    descriptor), on a connection made out of band, field by field."""
    assert tiles(FIELDS, HDR_LEN)
    with two_peers() as (target, requester):
        kw: Dict[str, Any] = dict(size=SIZE, access=int(ALL_REMOTE), permissions=int(ALL_REMOTE), mode="oob")
        t = target.call("start", fill=FILL, **kw)
        r = requester.call("start", fill=0x22, **kw)
        tdesc = base64.b64decode(t["mmap"])
        desc = check_descriptor(tdesc, size=SIZE, perms=int(ALL_REMOTE), base=t["addr"])
        check_descriptor(base64.b64decode(r["mmap"]), size=SIZE, perms=int(ALL_REMOTE), base=r["addr"])
        tb, rb = base64.b64decode(t["conn"]), base64.b64decode(r["conn"])
        # the side with the greater (instance, token) dials the other's listener: both go through a proxy
        p_t, p_r = Proxy(blob_port(tb)), Proxy(blob_port(rb))
        try:
            requester.post("connect", blob=b64(rewrite_blob(tb, p_t.port)))
            target.post("connect", blob=b64(rewrite_blob(rb, p_r.port)))
            requester.answer("connect")
            target.answer("connect")
            target.call("post_recv", n=3, size=64)
            res = requester.call("rdma_ops", blob=t["mmap"], ops=OPS)["results"]
            recvs = target.call("recv_results")["results"]
            bad = forge_export(tdesc, length=2 * SIZE)     # re-signed with twice the length: the target refuses
            nak = requester.call("rdma_ops", blob=b64(bad), ops=[{"kind": "write", "off": SIZE, "data": "ff" * 8}])
        finally:
            requester.close()
            target.close()
            p_t.close()
            p_r.close()
    assert [x["error"] for x in res] == [None] * len(OPS), res
    assert res[1]["data"] == "0102030405060708" + "11" * 8 and res[2]["value"] == 0x1111111111111111
    assert res[3]["value"] == 0x1111111111111116, res
    assert [(x["opcode"], x["imm"], base64.b64decode(x["data"])) for x in recvs] == [
        ("WRITE_WITH_IMM", 0x01020304, b""), ("SEND", None, b"hello"), ("SEND_WITH_IMM", 0xA0B0C0D0, b"world")]
    assert nak["results"][0]["error"] == "DOCA_ERROR_NOT_PERMITTED", nak

    assert p_t.accepted.is_set() != p_r.accepted.is_set(), "exactly one side dials"
    requester_dialed = p_t.accepted.is_set()
    dialed = p_t if requester_dialed else p_r
    up, down = frames(bytes(dialed.up)), frames(bytes(dialed.down))
    check_common(up + down)
    r2t, t2r = (up, down) if requester_dialed else (down, up)

    # the handshake: HELLO (dialer instance, dialer token, the token it connects to), HELLO_ACK; nothing else set
    # (the provider offer in raddr is 0: native; no same-host offer under SOFTDOCA_TRANSPORT=tcp)
    dial_blob, acc_blob = (rb, tb) if requester_dialed else (tb, rb)
    hello, ack = ops_only(up)[0], ops_only(down)[0]
    assert hello["op"] == "HELLO" and ack["op"] == "HELLO_ACK", (hello, ack)
    assert hello["payload_len"] == 40 and hello["payload"] == dial_blob[8:16] + dial_blob[16:32] + acc_blob[16:32]
    zero_except(hello)
    assert ack["payload_len"] == 0
    zero_except(ack)
    reqs = [f for f in ops_only(r2t) if f["op"] not in ("HELLO", "HELLO_ACK")]
    resps = [f for f in ops_only(t2r) if f["op"] not in ("HELLO", "HELLO_ACK")]
    assert [f["op"] for f in reqs] == [REQ_OP[o["kind"]] for o in OPS] + ["WRITE"], [f["op"] for f in reqs]
    assert [f["op"] for f in resps] == [RESP_OP[f["op"]] for f in reqs], [f["op"] for f in resps]

    # the requests: one request id after the other from 1, each field where the header puts it
    for i, (f, op) in enumerate(zip(reqs, OPS)):
        check_request(f, op, desc, i + 1)
    answers = [b"", bytes.fromhex(res[1]["data"]), u64(0x1111111111111111), u64(0x1111111111111116), b"", b"", b""]
    for f, req, payload in zip(resps, reqs, answers):
        check_response(f, req, payload)

    # the refused write: a request as any (the forged length is not on the wire), answered with the NAK:
    # status NOT_PERMITTED, arg0 = SD_PROV_NAK_BOUNDS, arg1 = the map's permissions, map id / base / length of the map
    check_request(reqs[-1], {"kind": "write", "off": SIZE, "data": "ff" * 8}, desc, len(OPS) + 1)
    n = resps[-1]
    assert (n["op"], n["req_id"], n["status"], n["payload_len"]) == ("RESP", len(OPS) + 1, DOCA_ERROR_NOT_PERMITTED, 0)
    assert (n["arg0"], n["arg1"]) == (NAK_BOUNDS, int(ALL_REMOTE)), n
    assert (n["map_id"], n["raddr"], n["rlen"]) == (desc["map_id"], desc["base"], SIZE), n
    zero_except(n, "req_id", "status", "arg0", "arg1", "map_id", "raddr", "rlen")


XOFFER_MAGIC = 0x3154524F50584453        # "SDXPORT1": the same-host transport offer (rdma_xport.c)
SE_PERMS = 15                            # LOCAL_READ_WRITE | RDMA_READ | RDMA_WRITE | RDMA_ATOMIC


def test_native_wire_cm_handshake_and_sync_event_export() -> None:
    """CM_REQ / CM_ACCEPT (private data, and the target's same-host offer: it runs SOFTDOCA_TRANSPORT=auto, the
    requester tcp, so the link stays TCP) / CM_RTU, then a write; the sync-event export (94 bytes embedding the
    82-byte descriptor of its value), read and added to over the wire through that embedded descriptor."""
    target = PeerProc(env=dict(ENV, SOFTDOCA_TRANSPORT="auto"))
    requester = PeerProc(env=ENV)
    port = free_port()
    proxy = Proxy(port)
    private = b"golden-private-data"
    try:
        kw: Dict[str, Any] = dict(size=SIZE, access=int(ALL_REMOTE), permissions=int(ALL_REMOTE))
        t = target.call("start", mode="cm", port=port, fill=FILL, accept_data=b64(private), **kw)
        tpid = target.call("pid")["pid"]
        target.post("wait_conn")                       # the target progresses: its listener accepts
        r = requester.call("start", mode="connect", port=proxy.port, **kw)
        target.answer("wait_conn")
        assert base64.b64decode(r["private"]) == private
        se = base64.b64decode(target.call("sync_event_export", value=7)["blob"])
        w = requester.call("rdma_ops", blob=t["mmap"], ops=[OPS[0]])["results"]
        sed = se[8:8 + DESC_LEN]
        got = requester.call("rdma_ops", blob=b64(sed), ops=[{"kind": "read", "off": 0, "len": 8},
                                                             {"kind": "fetch_add", "off": 0, "add": 1}])["results"]
        target.call("post_recv", n=1, size=64)
        requester.call("send_then_disconnect", text="bye")
        bye = target.call("recv_results")["results"]
    finally:
        requester.close()
        target.close()
        proxy.close()
    assert w == [{"kind": "write", "error": None}], w
    assert got[0]["data"] == u64(7).hex() and got[1]["value"] == 7, got
    assert [base64.b64decode(x["data"]) for x in bye] == [b"bye"], bye
    desc = check_descriptor(base64.b64decode(t["mmap"]), size=SIZE, perms=int(ALL_REMOTE), base=t["addr"])
    rdesc = check_descriptor(base64.b64decode(r["mmap"]), size=SIZE, perms=int(ALL_REMOTE), base=r["addr"])

    # the sync-event export: "SDSE", version 1, length 94, the value's 82-byte descriptor, CRC-32 of bytes 0..89
    assert tiles(SE, SE_LEN)
    assert len(se) == SE_LEN, len(se)
    s = fields(SE, se)
    assert (s["magic"], s["version"], s["length"], s["crc"]) == (b"SDSE", 1, SE_LEN, zlib.crc32(se[:90])), s
    sd = check_descriptor(s["desc"], size=8, perms=SE_PERMS)
    assert sd["instance"] == desc["instance"] and sd["map_id"] != desc["map_id"] and sd["base"] % 8 == 0, sd

    assert proxy.accepted.is_set()
    up, down = frames(bytes(proxy.up)), frames(bytes(proxy.down))
    check_common(up + down)
    r2t, t2r = ops_only(up), ops_only(down)
    assert [f["op"] for f in r2t] == ["CM_REQ", "CM_RTU", "WRITE", "READ", "FETCH_ADD", "SEND", "DISCONNECT"], \
        [f["op"] for f in r2t]
    assert [f["op"] for f in t2r] == ["CM_ACCEPT", "RESP", "READ_RESP", "ATOMIC_RESP", "RESP"], [f["op"] for f in t2r]
    req, rtu, acc = r2t[0], r2t[1], t2r[0]
    # CM_REQ: the requester's instance and a random token; no offer from a tcp requester, provider 0 (native)
    assert req["payload_len"] == 24 and req["payload"][:8] == u64(rdesc["instance"]), req
    assert len(set(req["payload"][8:])) > 1
    zero_except(req)
    zero_except(rtu)
    assert rtu["payload_len"] == 0
    # CM_ACCEPT: the private data; the target's same-host offer: arg0 "SDXPORT1", arg1 its host, instance,
    # map_id = pid << 32 | table fd, budget_ms = its rdma ctx's permissions, key = its table's token
    assert acc["payload_len"] == len(private) and acc["payload"] == private, acc
    assert (acc["arg0"], acc["instance"], acc["map_id"] >> 32) == (XOFFER_MAGIC, desc["instance"], tpid), acc
    assert acc["arg1"] != 0 and acc["map_id"] & 0xFFFFFFFF > 0 and acc["budget_ms"] == int(ALL_REMOTE), acc
    assert len(set(acc["key"])) > 1, acc
    zero_except(acc, "arg0", "arg1", "instance", "map_id", "budget_ms", "key")

    check_request(r2t[2], OPS[0], desc, 1)
    check_request(r2t[3], {"kind": "read", "off": 0, "len": 8}, sd, 2)
    check_request(r2t[4], {"kind": "fetch_add", "off": 0, "add": 1}, sd, 3)
    check_request(r2t[5], {"kind": "send", "data": b"bye".hex()}, sd, 4)
    for f, q, payload in zip(t2r[1:], r2t[2:6], [b"", u64(7), u64(7), b""]):
        check_response(f, q, payload)
    # DISCONNECT (doca_rdma_connection_disconnect): nothing but the opcode (a process that exits sends none)
    assert r2t[6]["payload_len"] == 0
    zero_except(r2t[6])
