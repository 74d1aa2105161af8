#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs the benchmark on 4 local ranks on
# the default backend, printing a verified table (non-zero exit if any result is wrong).
#   bash scripts/main.sh [symmem-bench flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSYMMEM_BUILD_TESTS=OFF > build.configure.log 2>&1 \
  || { cat build.configure.log; exit 1; }
cmake --build build -j "$(nproc)" --target symmem-run symmem-bench
./build/tools/run/symmem-run -n 4 -- ./build/tools/bench/symmem-bench "$@"
