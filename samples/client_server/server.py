"""Serve spec.yaml: ``python server.py [--listen HOST:PORT] [--descriptor-file FILE]``.

Same as ``pydoca serve spec.yaml ...``, written out with the Python API.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys

from pydoca.peer import Responder, load_spec

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--listen", default=None, help="HOST:PORT (default: the spec's listen)")
    ap.add_argument("--descriptor-file", default=None, help="also write a descriptor file")
    args = ap.parse_args()
    spec = load_spec(os.path.join(HERE, "spec.yaml"))
    with Responder.from_spec(spec, args.listen) as resp:
        if args.descriptor_file:
            resp.write_descriptor(args.descriptor_file)
        signal.signal(signal.SIGTERM, lambda *_: resp.stop())
        signal.signal(signal.SIGINT, lambda *_: resp.stop())
        print(f"serving {spec.name} on {resp.address}", flush=True)
        resp.serve_forever()
    print("server stopped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
