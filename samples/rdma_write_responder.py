"""RDMA write responder: exposes memory that the requester writes a data
pattern into, then verifies it. Mirrors DOCA's rdma_write_responder sample.

  python samples/rdma_write_responder.py --listen 127.0.0.1:7471 [--size 1M]
  python samples/rdma_write_requester.py --connect 127.0.0.1:7471

  (or --descriptor-dir DIR on both sides: descriptor files instead of RDMA CM)
"""
from __future__ import annotations

import argparse
import contextlib
import sys

import rdma_common as common
from pydoca import Access, MemoryMap, ProgressEngine, Rdma
from pydoca.rdma import exchange


def run(args: argparse.Namespace) -> str:
    data = bytearray(args.size)                      # the memory the requester writes into
    access = Access.LOCAL_READ_WRITE | Access.RDMA_WRITE
    with (
        common.open_device(args) as dev,             # 1. locate and open the DOCA device
        MemoryMap(dev, data, access=access) as mmap,  # 2. local mmap, remote writes allowed
        ProgressEngine(mode=args.progress) as pe,     # 3. progress engine (PE)
        # 4. RDMA context, remote writes allowed; connected to the PE, configured, then started
        Rdma(dev, pe, permissions=access, start=False) as rdma,
    ):
        rdma.start()
        # A write completes in our memory with no software involved here, so we
        # cannot see it happen: as DOCA's sample waits for its user to press
        # Enter, we wait for one message from the requester once it is done.
        # Its receive is posted now, before the requester can send it.
        done = exchange.post_receive_blob(rdma)

        # 5. Connect, and hand our mmap descriptor to the requester
        if args.descriptor_dir:                      # out of band: descriptor files
            blob, conn = rdma.export()
            common.write_descriptors(args, connection=blob, memory=mmap.export_rdma())
            rdma.connect(common.read_descriptors(args)["connection"], conn)
            # no wait for "established" here: the requester may be finished and
            # gone by then; its message (below) is what we wait for
        else:                                        # RDMA CM: the descriptor travels as a send
            rdma.listen(args.listen[1])
            common.status(args, f"listening on {args.address}:{args.listen[1]} ({dev.info.ibdev_name})")
            conn = rdma.accept(args.timeout)
            exchange.send_blob(rdma, conn, mmap.export_rdma(), timeout=args.timeout)

        # 6. Wait until the requester is done, then check what it wrote
        done.result(args.timeout, conn)
        # Let the requester disconnect first: closing at once could cut the
        # acknowledgement that its last task still waits for (bounded: 2 s)
        with contextlib.suppress(TimeoutError):
            pe.run_until(lambda: conn.closed, min(args.timeout, 2.0), what="the requester to leave")
        common.verify(data, common.pattern(args.size, args.seed), "written data")
    return common.summary(args, args.size, note="data verified")        # 7. all closed by the with


if __name__ == "__main__":
    sys.exit(common.main(run, common.parser(__file__, __doc__, pair="rdma_write", listens=True)))
