"""RDMA send with immediate: sends a data pattern with 32-bit immediate data
into the receive that the receiver (rdma_receive_immediate.py) posted.
Mirrors DOCA's rdma_send_immediate sample.

  python samples/rdma_receive_immediate.py --listen 127.0.0.1:7471 [--size 1M]
  python samples/rdma_send_immediate.py --connect 127.0.0.1:7471 [--size 1M]

  (or --descriptor-dir DIR on both sides: descriptor files instead of RDMA CM)
"""
from __future__ import annotations

import argparse
import sys
import time

import rdma_common as common
from pydoca import Access, BufferInventory, MemoryMap, ProgressEngine, Rdma

IMMEDIATE = 0xC0DE5EED                               # sent along with the message


def run(args: argparse.Namespace) -> str:
    data = common.pattern(args.size, args.seed)      # the message
    with (
        common.open_device(args) as dev,             # 1. locate and open the DOCA device
        MemoryMap(dev, data, access=Access.LOCAL_READ_ONLY) as mmap,    # 2. local mmap
        ProgressEngine(mode=args.progress) as pe,     # 3. progress engine (PE)
        # 4. RDMA context: nothing remote accesses our memory; configured, then started
        Rdma(dev, pe, permissions=Access.LOCAL_READ_WRITE, start=False) as rdma,
        BufferInventory(1) as inv,                   # 5. a buffer for the send task
    ):
        rdma.start()

        # 6. Connect
        if args.descriptor_dir:                      # out of band: descriptor files
            peer = common.read_descriptors(args)
            blob, conn = rdma.export()
            common.write_descriptors(args, connection=blob)
            rdma.connect(peer["connection"], conn)
            conn.wait_established(args.timeout)
        else:                                        # RDMA CM
            conn = rdma.connect_to(args.address, args.connect[1]).wait_established(args.timeout)

        # 7. Submit the send with immediate, progress until it completes (the receiver has it)
        start = time.monotonic()
        rdma.send_imm(conn, inv.buffer(mmap), IMMEDIATE).result(args.timeout)
        elapsed = time.monotonic() - start
    return common.summary(args, args.size, elapsed)


if __name__ == "__main__":
    sys.exit(common.main(run, common.parser(__file__, __doc__, pair="rdma_send_immediate", listens=False)))
