#!/usr/bin/env bash
# Sanitizer runs (issue: reliability). CPU only.
#   bash scripts/sanitize.sh asan   # AddressSanitizer + UBSan build of the unit and mp tests
#   bash scripts/sanitize.sh tsan   # ThreadSanitizer build of the store tests
#   bash scripts/sanitize.sh        # both
# Logs go to build-asan/ and build-tsan/; the exit status is non-zero on any report or failure.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
common=(-G Ninja -DCMAKE_BUILD_TYPE=Debug -DSYMMEM_WITH_CUDA=OFF -DSYMMEM_WITH_NCCL=OFF
        -DSYMMEM_WITH_NVSHMEM=OFF -DSYMMEM_BUILD_PYTHON=OFF)
rc=0
if [ "$what" = asan ] || [ "$what" = all ]; then
  cmake -S . -B build-asan "${common[@]}" -DSYMMEM_SANITIZE=address,undefined > /dev/null
  cmake --build build-asan -j "$(nproc)"
  # detect_leaks: LeakSanitizer; halt_on_error so a report fails the test.
  ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j "$(nproc)" -L "unit|mp" -LE "fuzz|install|python" \
    || rc=1
fi
if [ "$what" = tsan ] || [ "$what" = all ]; then
  cmake -S . -B build-tsan "${common[@]}" -DSYMMEM_SANITIZE=thread > /dev/null
  cmake --build build-tsan -j "$(nproc)"
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir build-tsan --output-on-failure -j "$(nproc)" -R "store" -LE "fuzz" || rc=1
fi
exit $rc
