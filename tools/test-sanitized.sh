#!/usr/bin/env bash
# Build softdoca with -fsanitize=address,undefined and run the C tests (leak
# checks on) and the pytest suite against it (the Python interpreter itself is
# not instrumented, so leak detection is off there).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s -C softdoca asan check-asan
lib="$PWD/softdoca/build-asan/libsoftdoca.so"
asan="$(gcc -print-file-name=libasan.so)"
ubsan="$(gcc -print-file-name=libubsan.so)"
PYDOCA_SOFTDOCA_LIB="$lib" PYDOCA_BACKEND=soft PYDOCA_TEST_SANITIZER=asan \
LD_PRELOAD="$asan:$ubsan" \
ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1" \
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  python3 -m pytest -p no:cacheprovider "$@"
