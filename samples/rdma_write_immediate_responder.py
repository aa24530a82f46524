"""RDMA write-with-immediate responder: exposes memory that the requester
writes a data pattern into; the write then consumes a receive posted here,
carrying 32-bit immediate data, so we learn that the data has landed. Checks
the receive (opcode, immediate) and the data. Mirrors DOCA's
rdma_write_immediate_responder sample.

  python samples/rdma_write_immediate_responder.py --listen 127.0.0.1:7471 [--size 1M]
  python samples/rdma_write_immediate_requester.py --connect 127.0.0.1:7471

  (or --descriptor-dir DIR on both sides: descriptor files instead of RDMA CM)
"""
from __future__ import annotations

import argparse
import contextlib
import sys

import rdma_common as common
from pydoca import Access, BufferInventory, MemoryMap, Opcode, ProgressEngine, Rdma
from pydoca.rdma import exchange

IMMEDIATE = 0x5EED1234                               # what the requester sends along


def run(args: argparse.Namespace) -> str:
    data = bytearray(args.size)                      # the memory the requester writes into
    access = Access.LOCAL_READ_WRITE | Access.RDMA_WRITE
    with (
        common.open_device(args) as dev,             # 1. locate and open the DOCA device
        MemoryMap(dev, data, access=access) as mmap,  # 2. local mmap, remote writes allowed
        ProgressEngine(mode=args.progress) as pe,     # 3. progress engine (PE)
        # 4. RDMA context, remote writes allowed; connected to the PE, configured, then started
        Rdma(dev, pe, permissions=access, start=False) as rdma,
        BufferInventory(1) as inv,                   # 5. a buffer for the receive task
    ):
        rdma.start()
        # 6. Post the receive that the write with immediate will consume (it
        #    brings the immediate, no payload). Without a posted receive the
        #    requester's task fails: post it before the requester can write.
        receive = rdma.receive(inv.buffer(mmap, empty=True))

        # 7. Connect, and hand our mmap descriptor to the requester
        if args.descriptor_dir:                      # out of band: descriptor files
            blob, conn = rdma.export()
            common.write_descriptors(args, connection=blob, memory=mmap.export_rdma())
            rdma.connect(common.read_descriptors(args)["connection"], conn)
            # no wait for "established": the requester may be done and gone by then
        else:                                        # RDMA CM: the descriptor travels as a send
            rdma.listen(args.listen[1])
            common.status(args, f"listening on {args.address}:{args.listen[1]} ({dev.info.ibdev_name})")
            conn = rdma.accept(args.timeout)
            exchange.send_blob(rdma, conn, mmap.export_rdma(), timeout=args.timeout)

        # 8. Progress until the receive completes, then check it and the data
        received = receive.result(args.timeout)
        # Let the requester disconnect first: closing at once could cut the
        # acknowledgement that its last task still waits for (bounded: 2 s)
        with contextlib.suppress(TimeoutError):
            pe.run_until(lambda: conn.closed, min(args.timeout, 2.0), what="the requester to leave")
        if received.opcode is not Opcode.WRITE_WITH_IMM or received.immediate != IMMEDIATE:
            raise common.SampleError(f"receive completed with {received.opcode.name} and immediate "
                                     f"{received.immediate!r}, expected WRITE_WITH_IMM and 0x{IMMEDIATE:08x}")
        common.verify(data, common.pattern(args.size, args.seed), "written data")
    return common.summary(args, args.size, note=f"data and immediate 0x{IMMEDIATE:08x} verified")


if __name__ == "__main__":
    sys.exit(common.main(run, common.parser(__file__, __doc__, pair="rdma_write_immediate", listens=True)))
