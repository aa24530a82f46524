"""RDMA atomic responder: exposes an 8-byte counter on which the requester
runs fetch-and-add and compare-and-swap, then checks its final value. DOCA
has no atomic sample: this one follows the shape of rdma_write_responder.

  python samples/rdma_atomic_responder.py --listen 127.0.0.1:7471
  python samples/rdma_atomic_requester.py --connect 127.0.0.1:7471

  (or --descriptor-dir DIR on both sides: descriptor files instead of RDMA CM)
"""
from __future__ import annotations

import argparse
import contextlib
import sys

import rdma_common as common
from pydoca import Access, MemoryMap, ProgressEngine, Rdma
from pydoca.rdma import exchange

INITIAL, FINAL = 1000, 0xDEADBEEF00C0FFEE + 1      # see the requester's STEPS


def run(args: argparse.Namespace) -> str:
    counter = bytearray(INITIAL.to_bytes(8, sys.byteorder))             # a 64-bit counter, host order
    access = Access.LOCAL_READ_WRITE | Access.RDMA_ATOMIC
    with (
        common.open_device(args) as dev,                 # 1. locate and open the DOCA device
        MemoryMap(dev, counter, access=access) as mmap,   # 2. local mmap, remote atomics allowed
        ProgressEngine(mode=args.progress) as pe,         # 3. progress engine (PE)
        # 4. RDMA context, remote atomics allowed; connected to the PE, configured, then started
        Rdma(dev, pe, permissions=access, start=False) as rdma,
    ):
        rdma.start()
        # Atomics complete in our memory with no software involved here: we
        # wait for one message from the requester once it is done. Its
        # receive is posted first.
        done = exchange.post_receive_blob(rdma)

        # 5. Connect, and hand our mmap descriptor to the requester
        if args.descriptor_dir:                          # out of band: descriptor files
            blob, conn = rdma.export()
            common.write_descriptors(args, connection=blob, memory=mmap.export_rdma())
            rdma.connect(common.read_descriptors(args)["connection"], conn)
            # no wait for "established": the requester may be done and gone by then
        else:                                            # RDMA CM: the descriptor travels as a send
            rdma.listen(args.listen[1])
            common.status(args, f"listening on {args.address}:{args.listen[1]} ({dev.info.ibdev_name})")
            conn = rdma.accept(args.timeout)
            exchange.send_blob(rdma, conn, mmap.export_rdma(), timeout=args.timeout)

        done.result(args.timeout, conn)                  # 6. the requester is done: check the counter
        # Let the requester disconnect first: closing at once could cut the
        # acknowledgement that its last task still waits for (bounded: 2 s)
        with contextlib.suppress(TimeoutError):
            pe.run_until(lambda: conn.closed, min(args.timeout, 2.0), what="the requester to leave")
        value = int.from_bytes(counter, sys.byteorder)
        if value != FINAL:
            raise common.SampleError(f"counter is 0x{value:x}, expected 0x{FINAL:x}")
    return common.summary(args, 8, note=f"counter 0x{FINAL:x} verified")


if __name__ == "__main__":
    sys.exit(common.main(run, common.parser(__file__, __doc__, pair="rdma_atomic", listens=True, has_size=False)))
