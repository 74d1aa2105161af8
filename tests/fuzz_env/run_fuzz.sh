#!/usr/bin/env bash
# Builds the settings-parsing fuzz target with clang + libFuzzer (ASan, UBSan) and runs it.
#   run_fuzz.sh SOURCE_DIR WORK_DIR SECONDS
set -euo pipefail
src=$1 work=$2 seconds=${3:-20}
mkdir -p "$work/corpus"
cxx=${CLANGXX:-clang++}
"$cxx" -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$src/include" -I"$src/src" \
  "$src/tests/fuzz_env/env_fuzz.cpp" "$src/src/core/env.cpp" "$src/src/core/log.cpp" \
  "$src/src/core/error.cpp" "$src/src/core/types.cpp" -o "$work/env_fuzz"
printf 'SYMMEM\n' > "$work/corpus/seed1"
printf '\x00WARN\n\x05300\n\x11yes\n\x01^STORE,IPC\n' > "$work/corpus/seed2"
SYMMEM_DEBUG_FILE=/dev/null "$work/env_fuzz" -max_total_time="$seconds" -rss_limit_mb=2048 \
  -print_final_stats=1 "$work/corpus" 2>&1 | tail -15
