"""Write endpoints with several slots per requester (``slots``): a window of awrite()s to one endpoint
overlaps, every byte lands in the slot its frame names and reaches the handler intact and in order;
the frame's slot field, its checks, and peers that predate it."""
from __future__ import annotations

import asyncio
import hashlib
import threading
from typing import Any, Iterator, List, Tuple

import pytest

from pydoca.peer import Requester, Responder
from pydoca.peer import protocol as P
from pydoca.peer.spec import SpecError, load_spec
from rdma_util import free_port

pytestmark = pytest.mark.timeout(90)
SIZE = 1 << 20


@pytest.fixture
def responder() -> Iterator[Tuple[Responder, List[Tuple[int, str]]]]:
    got: List[Tuple[int, str]] = []          # (first byte, sha256) of each write, in handler order

    def sink(view: Any, length: int) -> None:
        got.append((int(view[0]), hashlib.sha256(view[:length]).hexdigest()))
    resp = Responder(f"127.0.0.1:{free_port()}", name="slots")
    resp.add_endpoint("/bulk", "write", SIZE, sink, slots=4)
    resp.add_endpoint("/one", "write", SIZE, sink)
    resp.start()
    t = threading.Thread(target=resp.serve_forever, name="serving", daemon=True)
    t.start()
    try:
        yield resp, got
    finally:
        resp.stop()
        t.join(5)
        resp.close()


def _payloads(n: int) -> List[bytes]:
    return [bytes([i + 1]) * 1000 + bytes((i * 7 + j) & 0xFF for j in range(SIZE - 1000)) for i in range(n)]


def test_a_window_of_awrites_overlaps_and_every_byte_lands_in_its_slot(responder: Any) -> None:
    resp, got = responder
    data = _payloads(12)
    with Requester.connect(resp.address, window=4) as req:
        bulk = req._remotes["/bulk"]
        assert bulk.slots == 4 and req._remotes["/one"].slots == 1
        held: List[int] = []
        launch = req._launch

        def spy(op: Any) -> None:
            launch(op)
            held.append(sum(1 for k in req._credit if k[0] == bulk.info.id))
        req._launch = spy                      # type: ignore[method-assign]

        async def main() -> None:
            await asyncio.gather(*[req.awrite("/bulk", d) for d in data])
        asyncio.run(main())
        assert max(held) == 4, held            # four staged writes to one endpoint in flight at once
        assert not req._credit
        # in order, each intact (the handler saw the slot its frame named, before the slot was reused)
        assert got == [(d[0], hashlib.sha256(d).hexdigest()) for d in data]


def test_one_slot_endpoints_go_one_at_a_time(responder: Any) -> None:
    resp, got = responder
    data = _payloads(4)
    with Requester.connect(resp.address, window=4) as req:
        one = req._remotes["/one"]
        peak: List[int] = []
        launch = req._launch

        def spy(op: Any) -> None:
            launch(op)
            peak.append(sum(1 for k in req._credit if k[0] == one.info.id))
        req._launch = spy                      # type: ignore[method-assign]

        async def main() -> None:
            await asyncio.gather(*[req.awrite("/one", d) for d in data])
        asyncio.run(main())
        assert max(peak) == 1
        assert got == [(d[0], hashlib.sha256(d).hexdigest()) for d in data]


def test_a_requester_that_predates_slots_uses_the_first(responder: Any) -> None:
    """An old requester ignores the hello's ``slots`` and sends slot 0 (the old zero pad): it works as before."""
    resp, got = responder
    data = _payloads(3)
    with Requester.connect(resp.address) as req:
        req._remotes["/bulk"].slots = 1        # what a requester that predates slots does
        for d in data:
            req.write("/bulk", d)
    assert got == [(d[0], hashlib.sha256(d).hexdigest()) for d in data]


def test_a_slot_past_the_endpoints_is_refused(responder: Any) -> None:
    resp, _ = responder
    with Requester.connect(resp.address) as req:
        bulk = req._remotes["/bulk"]
        bulk.slots = 5                         # claims a slot the responder did not offer (the 5th lies in
        for j in range(4):                     # the requester's region: /one's slot), the first four taken
            req._credit[(bulk.info.id, j)] = object()   # type: ignore[assignment]
        with pytest.raises(Exception, match="has 4 slot\\(s\\) per requester, not slot 4"):
            req.write("/bulk", bytes(SIZE // 2))
        for j in range(4):
            del req._credit[(bulk.info.id, j)]
        req.write("/bulk", bytes(SIZE // 2))   # the connection is fine


def test_slot_field_on_the_wire() -> None:
    frame = P.decode(P.encode(P.Write(3, 100, 1 << 20, b"", 2), 7, P.FLAG_IN_BUFFER))
    assert frame.msg == P.Write(3, 100, 1 << 20, b"", 2)
    assert P.encode(P.Write(3, 0, 4), 1)[P.HEADER.size + 2:P.HEADER.size + 4] == b"\0\0"   # the old pad
    for msg, flags in ((P.Write(1, 0, 3, b"abc", 1), 0), (P.Call(1, 0, 9, b"", 1), P.FLAG_IN_BUFFER),
                       (P.Read(1, 0, 9, b"", 1), 0)):
        with pytest.raises(P.FrameError, match="only a WRITE with FLAG_IN_BUFFER names one"):
            P.decode(P.encode(msg, 1, flags))


def test_slots_in_specs_and_endpoints(tmp_path: Any) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("version: 1\nname: s\nendpoints:\n  - {path: /w, type: write, buffer: {size: 1MiB}, slots: 4}\n")
    assert load_spec(str(path)).endpoints[0].slots == 4
    path.write_text("version: 1\nname: s\nendpoints:\n  - {path: /r, type: read, buffer: {size: 1MiB}, slots: 2}\n")
    with pytest.raises(SpecError, match="only write endpoints take more than 1"):
        load_spec(str(path))
    resp = Responder("127.0.0.1:0", name="x")
    with pytest.raises(ValueError, match="slots must be an integer 1..64"):
        resp.add_endpoint("/w", "write", 64, None, slots=0)
    with pytest.raises(ValueError, match="for write endpoints"):
        resp.add_endpoint("/c", "call", 64, lambda p: p, slots=2)
