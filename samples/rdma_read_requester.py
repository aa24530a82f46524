"""RDMA read requester: reads the responder's data pattern and verifies it.
Mirrors DOCA's rdma_read_requester sample.

  python samples/rdma_read_responder.py --listen 127.0.0.1:7471
  python samples/rdma_read_requester.py --connect 127.0.0.1:7471 [--iterations 20]

  (or --descriptor-dir DIR on both sides: descriptor files instead of RDMA CM)
"""
from __future__ import annotations

import argparse
import sys
import time

import rdma_common as common
from pydoca import Access, BufferInventory, MemoryMap, ProgressEngine, Rdma
from pydoca.rdma import exchange


def run(args: argparse.Namespace) -> str:
    with (
        common.open_device(args) as dev,             # 1. locate and open the DOCA device
        ProgressEngine(mode=args.progress) as pe,     # 2. progress engine (PE)
        # 3. RDMA context: nothing remote touches our memory; configured, then started
        Rdma(dev, pe, permissions=Access.LOCAL_READ_WRITE, start=False) as rdma,
    ):
        rdma.start()

        # 4. Connect, and get the responder's mmap descriptor
        if args.descriptor_dir:                      # out of band: descriptor files
            peer = common.read_descriptors(args)
            blob, conn = rdma.export()
            common.write_descriptors(args, connection=blob)
            rdma.connect(peer["connection"], conn)
            conn.wait_established(args.timeout)
            descriptor = peer["memory"]
        else:                                        # RDMA CM: the descriptor arrives as a send,
            descriptor_rx = exchange.post_receive_blob(rdma)     # so its receive is posted first
            conn = rdma.connect_to(args.address, args.connect[1]).wait_established(args.timeout)
            descriptor = descriptor_rx.result(args.timeout, conn)

        with MemoryMap.from_export(dev, descriptor) as remote:   # 5. the responder's memory
            size = common.peer_size(args, remote.length)
            data = bytearray(size)
            with (
                MemoryMap(dev, data, access=Access.LOCAL_READ_WRITE) as local,  # 6. where we read to
                BufferInventory(2) as inv,                                      # 7. buffers for the task
            ):
                src, dst = inv.buffer(remote), inv.buffer(local, empty=True)
                start = time.monotonic()
                for _ in range(args.iterations):     # 8. submit the read, progress until it completes
                    dst.reset()
                    rdma.read(conn, src, dst).result(args.timeout)
                elapsed = time.monotonic() - start
        # 9. tell the responder we are done (it posted a receive for this message), then verify
        exchange.send_blob(rdma, conn, b"done", timeout=args.timeout)
    common.verify(data, common.pattern(size, args.seed), "read data")
    return common.summary(args, size, elapsed, note="data verified")


if __name__ == "__main__":
    sys.exit(common.main(run, common.parser(__file__, __doc__, pair="rdma_read", listens=False, size=None,
                                            iterations=True)))
