#!/usr/bin/env bash
# Build softdoca with -fsanitize=thread, run the C tests under it, then a
# multithreaded subset of pytest against it: libtsan preloaded into the (not
# instrumented) CPython, PYDOCA_SOFTDOCA_LIB pointing at build-tsan/. Python's
# own memory accesses are invisible to TSan (not instrumented), but its
# threads' locks are (pthread calls are intercepted), so what is checked is
# softdoca's engine thread against the application threads that drive it, in
# every process of a test (peer subprocesses inherit the environment).
# Suppressions: softdoca/tsan.supp (documented false positives only).
# Extra arguments replace the default pytest selection (one run, no provider runs).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s -C softdoca tsan check-tsan
lib="$PWD/softdoca/build-tsan/libsoftdoca.so"
tsan="$(gcc -print-file-name=libtsan.so)"
# the real interpreter, not a wrapper script (a pyenv shim is bash: bash under
# a preloaded TSan crashes)
py="$(python3 -c 'import sys; print(sys.executable)')"
tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
  tests=(tests/test_rdma.py tests/test_pe.py tests/test_batch.py tests/test_softdoca_timeout.py
         tests/test_reliability_threads.py tests/test_peer_rdma.py tests/test_pe_wake.py
         tests/test_peer_workers.py)
fi
# run ENV-ASSIGNMENTS PYTEST-ARGS...
run() {
  local envs=$1
  shift
  # shellcheck disable=SC2086
  env $envs PYDOCA_SOFTDOCA_LIB="$lib" PYDOCA_BACKEND=soft PYDOCA_TEST_SANITIZER=tsan LD_PRELOAD="$tsan" \
    TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$PWD/softdoca/tsan.supp" \
    "$py" -m pytest -p no:cacheprovider -q "$@"
}
if [ $# -gt 0 ]; then
  run "" "${tests[@]}"
  exit
fi
# The default selection runs side by side: the native subset, and the RDMA and peer tests through each provider
# built in (the Makefile's test: its headers are there), messages through the provider too: softdoca's bridge,
# its messages and the engine hook under TSan. Each run mostly waits for its peers and timeouts (about half a core
# here), so three fit two vCPUs and take the time of the longest; their outputs follow, one after the other.
# UCX's memory hooks do not live with TSan's interceptors: they are turned off.
has() { echo "#include <$1>" | gcc -E -x c - >/dev/null 2>&1; }
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
names=() pids=()
start() { # NAME ENV-ASSIGNMENTS PYTEST-ARGS...
  local name=$1
  shift
  run "$@" >"$logs/$name" 2>&1 &
  names+=("$name") pids+=($!)
}
start native "" "${tests[@]}"
if has ucp/api/ucp.h; then
  start ucx "SOFTDOCA_PROVIDER=ucx UCX_TLS=tcp UCX_MEM_EVENTS=no UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none" \
    tests/test_rdma.py tests/test_peer_rdma.py
fi
if has rdma/fabric.h; then
  start ofi "SOFTDOCA_PROVIDER=ofi FI_PROVIDER=tcp" tests/test_rdma.py tests/test_peer_rdma.py
fi
rc=0
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then status=ok; else status="FAILED"; rc=1; fi
  echo "== TSan pytest run: ${names[$i]} ($status)"
  cat "$logs/${names[$i]}"
done
exit $rc
