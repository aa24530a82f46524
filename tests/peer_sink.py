"""A receive-only RDMA CM peer: posts 64 receives of 8 KiB, prints how many
messages arrived (and their lengths) after its stdin closes."""
from __future__ import annotations

import select
import sys

import pydoca
from pydoca import Access

SLOT, SLOTS = 8192, 64


def main(port: int) -> None:
    with pydoca.Device.open(iface="lo") as dev, pydoca.ProgressEngine() as pe, pydoca.Rdma(dev, pe) as rdma, \
            pydoca.BufferInventory(SLOTS) as inv:
        mem = bytearray(SLOT * SLOTS)
        lengths = []
        with pydoca.MemoryMap(dev, mem, access=Access.LOCAL_READ_WRITE) as mm:
            bufs = [inv.buffer(mm, offset=i * SLOT, length=SLOT, empty=True) for i in range(SLOTS)]
            for b in bufs:
                rdma.receive(b).add_done_callback(lambda t: lengths.append(t.value.length) if t.value else None)
            rdma.listen(port, accept=lambda c: True)
            print("ready", flush=True)
            while not select.select([sys.stdin], [], [], 0)[0]:
                pe.wait(0.05)
            sys.stdin.read()
            pe.progress_all()    # completions the engine already placed, not yet delivered
            print(" ".join(map(str, lengths)), flush=True)
            for c in rdma.connections:
                c.disconnect()
            rdma.stop()
            for b in bufs:
                b.close()


if __name__ == "__main__":
    main(int(sys.argv[1]))
