"""RDMA atomic requester: runs fetch-and-add and compare-and-swap on the
responder's 8-byte counter and checks every value they return (the value
before the operation). DOCA has no atomic sample: this one follows the shape
of rdma_write_requester.

  python samples/rdma_atomic_responder.py --listen 127.0.0.1:7471
  python samples/rdma_atomic_requester.py --connect 127.0.0.1:7471

  (or --descriptor-dir DIR on both sides: descriptor files instead of RDMA CM)
"""
from __future__ import annotations

import argparse
import sys
import time

import rdma_common as common
from pydoca import Access, BufferInventory, MemoryMap, ProgressEngine, Rdma
from pydoca.rdma import exchange

INITIAL, ADD, SWAP = 1000, 234, 0xDEADBEEF00C0FFEE
# (operation, operands, the old value it must return); the counter ends at SWAP + 1
STEPS = (("fetch_add", {"add": ADD}, INITIAL),
         ("compare_swap", {"compare": INITIAL + ADD, "swap": SWAP}, INITIAL + ADD),   # swaps
         ("compare_swap", {"compare": INITIAL, "swap": 7}, SWAP),                     # stale: no swap
         ("fetch_add", {"add": 1}, SWAP))


def run(args: argparse.Namespace) -> str:
    with (
        common.open_device(args) as dev,                 # 1. locate and open the DOCA device
        ProgressEngine(mode=args.progress) as pe,         # 2. progress engine (PE)
        # 3. RDMA context: nothing remote touches our memory; configured, then started
        Rdma(dev, pe, permissions=Access.LOCAL_READ_WRITE, start=False) as rdma,
    ):
        rdma.start()

        # 4. Connect, and get the responder's mmap descriptor
        if args.descriptor_dir:                          # out of band: descriptor files
            peer = common.read_descriptors(args)
            blob, conn = rdma.export()
            common.write_descriptors(args, connection=blob)
            rdma.connect(peer["connection"], conn)
            conn.wait_established(args.timeout)
            descriptor = peer["memory"]
        else:                                            # RDMA CM: the descriptor arrives as a send,
            descriptor_rx = exchange.post_receive_blob(rdma)         # so its receive is posted first
            conn = rdma.connect_to(args.address, args.connect[1]).wait_established(args.timeout)
            descriptor = descriptor_rx.result(args.timeout, conn)

        results = bytearray(8 * len(STEPS))              # each operation returns the old value here
        with (
            MemoryMap.from_export(dev, descriptor) as remote,                     # 5. the counter
            MemoryMap(dev, results, access=Access.LOCAL_READ_WRITE) as local,     # 6. our memory
            BufferInventory(2 * len(STEPS)) as inv,                               # 7. buffers
        ):
            if remote.length != 8:
                raise common.SampleError(f"the responder's counter is {remote.length} bytes, not 8")
            start = time.monotonic()
            for i, (operation, operands, expected) in enumerate(STEPS):   # 8. submit, progress
                target, result = inv.buffer(remote, empty=True), inv.buffer(local, offset=8 * i, length=8, empty=True)
                task = getattr(rdma, operation)(conn, target, result, **operands)
                old = task.result(args.timeout)
                if old != expected:
                    raise common.SampleError(f"step {i + 1} ({operation}): old value 0x{old:x}, "
                                             f"expected 0x{expected:x}")
            elapsed = time.monotonic() - start
        # 9. tell the responder we are done (it posted a receive for this message)
        exchange.send_blob(rdma, conn, b"done", timeout=args.timeout)
    return common.summary(args, len(STEPS), elapsed, unit="operations", note="old values verified")


if __name__ == "__main__":
    sys.exit(common.main(run, common.parser(__file__, __doc__, pair="rdma_atomic", listens=False,
                                            has_size=False)))
