"""RDMA receive: posts a receive, into which the sender (rdma_send.py) sends a
data pattern; checks the receive (opcode, length) and the data. Mirrors
DOCA's rdma_receive sample.

  python samples/rdma_receive.py --listen 127.0.0.1:7471 [--size 1M]
  python samples/rdma_send.py --connect 127.0.0.1:7471 [--size 1M]

  (or --descriptor-dir DIR on both sides: descriptor files instead of RDMA CM)
"""
from __future__ import annotations

import argparse
import contextlib
import sys

import rdma_common as common
from pydoca import Access, BufferInventory, MemoryMap, Opcode, ProgressEngine, Rdma


def run(args: argparse.Namespace) -> str:
    data = bytearray(args.size)                      # where the message lands
    with (
        common.open_device(args) as dev,             # 1. locate and open the DOCA device
        MemoryMap(dev, data, access=Access.LOCAL_READ_WRITE) as mmap,   # 2. local mmap
        ProgressEngine(mode=args.progress) as pe,     # 3. progress engine (PE)
        # 4. RDMA context: nothing remote accesses our memory; configured, then started
        Rdma(dev, pe, permissions=Access.LOCAL_READ_WRITE, start=False) as rdma,
        BufferInventory(1) as inv,                   # 5. a buffer for the receive task
    ):
        rdma.start()
        # 6. Post the receive before the sender can connect: a send that finds
        #    no receive posted fails
        receive = rdma.receive(inv.buffer(mmap, empty=True))

        # 7. Connect (nothing else to exchange: the sender needs no descriptor of ours)
        if args.descriptor_dir:                      # out of band: descriptor files
            blob, conn = rdma.export()
            common.write_descriptors(args, connection=blob)
            rdma.connect(common.read_descriptors(args)["connection"], conn)
        else:                                        # RDMA CM: accept requests as they come
            # (the policy runs in DOCA's connection-request callback); we need no
            # Connection object, only the message, which may beat any accept() call
            rdma.listen(args.listen[1], accept=lambda request: True)
            common.status(args, f"listening on {args.address}:{args.listen[1]} ({dev.info.ibdev_name})")

        # 8. Progress until the receive completes, then check it and the data
        received = receive.result(args.timeout)
        # Let the sender disconnect first: closing at once could cut the
        # acknowledgement that its send still waits for (bounded: 2 s)
        with contextlib.suppress(TimeoutError):
            pe.run_until(lambda: not rdma.connections, min(args.timeout, 2.0), what="the sender to leave")
        if received.opcode is not Opcode.SEND or received.length != args.size:
            raise common.SampleError(f"received {received.opcode.name} of {received.length} bytes, "
                                     f"expected SEND of {args.size}")
        common.verify(data, common.pattern(args.size, args.seed), "received data")
    return common.summary(args, args.size, note="data verified")


if __name__ == "__main__":
    sys.exit(common.main(run, common.parser(__file__, __doc__, pair="rdma_send", listens=True)))
