#!/usr/bin/env bash
# pydoca demo on the software backend: a responder and a requester, two
# processes, moving bytes with RDMA and checking them end to end (the
# responder's line says what it checked; the requester's times the transfer).
#  1. rdma_write over RDMA CM (address:port), 1 MiB x 20
#  2. rdma_read with descriptor files (out of band), 1 MiB
#  3. the requester/responder layer: `pydoca serve` a spec, `pydoca request` it
set -euo pipefail
cd "$(dirname "$0")/.."
export PYDOCA_BACKEND=soft
py=python3
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

free_port() { $py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_listen() {  # port: wait until something listens on 127.0.0.1:port (bounded)
  $py - "$1" <<'PY'
import sys, time
port = int(sys.argv[1]); end = time.monotonic() + 20
while time.monotonic() < end:
    rows = open("/proc/net/tcp").read().splitlines()[1:]
    if any(r.split()[1].endswith(":%04X" % port) and r.split()[3] == "0A" for r in rows):
        sys.exit(0)
    time.sleep(0.05)
sys.exit("nothing listens on port %d" % port)
PY
}

echo "== 1. RDMA write over RDMA CM"
port=$(free_port)
$py samples/rdma_write_responder.py --listen 127.0.0.1:$port --size 1M --timeout 30 & pids+=($!)
wait_listen "$port"
$py samples/rdma_write_requester.py --connect 127.0.0.1:$port --iterations 20 --timeout 30
wait "${pids[-1]}"

echo "== 2. RDMA read with descriptor files"
$py samples/rdma_read_responder.py --descriptor-dir "$tmp/desc" --size 1M --timeout 30 & pids+=($!)
$py samples/rdma_read_requester.py --descriptor-dir "$tmp/desc" --timeout 30
wait "${pids[-1]}"

if [ -f samples/client_server/spec.yaml ]; then
  echo "== 3. pydoca serve / pydoca request"
  port=$(free_port)
  (cd samples/client_server && exec $py -m pydoca.cli serve spec.yaml --listen 127.0.0.1:$port \
      --descriptor-file "$tmp/server.json") & pids+=($!)
  wait_listen "$port"
  $py -m pydoca.cli request 127.0.0.1:$port endpoints
  head -c 65536 /dev/urandom > "$tmp/blob.bin"
  $py -m pydoca.cli request "$tmp/server.json" write /upload --in "$tmp/blob.bin"
  $py -m pydoca.cli request 127.0.0.1:$port call /echo --data "hello over rdma"; echo
  kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
fi
echo "demo OK"
