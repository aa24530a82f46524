"""RDMA read responder: exposes memory holding a data pattern, which the
requester reads. Mirrors DOCA's rdma_read_responder sample.

  python samples/rdma_read_responder.py --listen 127.0.0.1:7471 [--size 1M]
  python samples/rdma_read_requester.py --connect 127.0.0.1:7471

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
    data = common.pattern(args.size, args.seed)      # the memory the requester reads
    access = Access.LOCAL_READ_ONLY | Access.RDMA_READ
    with (
        common.open_device(args) as dev,             # 1. locate and open the DOCA device
        MemoryMap(dev, data, access=access) as mmap,  # 2. local mmap, remote reads allowed
        ProgressEngine(mode=args.progress) as pe,     # 3. progress engine (PE)
        # 4. RDMA context, remote reads allowed; connected to the PE, configured, then started
        Rdma(dev, pe, permissions=Access.LOCAL_READ_WRITE | Access.RDMA_READ, start=False) as rdma,
    ):
        rdma.start()
        # Reads are served from our memory with no software involved here: we
        # wait for one message from the requester once it is done (DOCA's
        # sample waits for its user instead). Its receive is posted first.
        done = exchange.post_receive_blob(rdma)

        # 5. Connect, and hand our mmap descriptor to the requester
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

        done.result(args.timeout, conn)              # 6. the requester has finished reading
        # Let the requester disconnect first: closing at once could cut the
        # acknowledgement that its last task still waits for (bounded: 2 s)
        with contextlib.suppress(TimeoutError):
            pe.run_until(lambda: conn.closed, min(args.timeout, 2.0), what="the requester to leave")
    return common.summary(args, args.size, note="data served")          # 7. all closed by the with


if __name__ == "__main__":
    sys.exit(common.main(run, common.parser(__file__, __doc__, pair="rdma_read", listens=True)))
