"""A responder with credentials for the security tests.

    peer_auth_server.py PORT CONFIG_JSON

CONFIG_JSON: {"credentials": {KEY_ID: {"token": HEX, "rights": {PATTERN: LETTERS}}}, "allow": [CIDR, ...]}
Serves the test spec's endpoints until SIGTERM; prints "serving" once listening.
"""
from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

from peer_util import SPEC

import yaml

from pydoca.peer import Responder
from pydoca.peer.auth import Credential
from pydoca.peer.spec import parse_spec


def main() -> int:
    port, cfg = int(sys.argv[1]), json.loads(sys.argv[2])
    creds = {k: Credential(bytes.fromhex(v["token"]), v.get("rights", {"*": "rwc"}))
             for k, v in cfg.get("credentials", {}).items()}
    spec = parse_spec(yaml.safe_load(SPEC), base_dir=str(Path(__file__).parent))
    resp = Responder.from_spec(spec, f"127.0.0.1:{port}", credentials=creds or None, allow=cfg.get("allow"))
    signal.signal(signal.SIGTERM, lambda *_: resp.stop())
    with resp:
        print("serving", flush=True)
        resp.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
