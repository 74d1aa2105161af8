#!/usr/bin/env bash
# The test command: installs what is missing, builds everything (GPU plugins where their
# toolkits are present), and runs every test. GPU tests are reported as skipped without a GPU.
#   bash scripts/test.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bash scripts/deps.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSYMMEM_BUILD_TESTS=ON -DSYMMEM_WERROR=ON \
  -DSYMMEM_BUILD_PYTHON=ON > "$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
grep -E "^-- symmem" "$build.configure.log" || true
cmake --build "$build" -j "$(nproc)"
cd "$build"
ctest --output-on-failure -j "$(nproc)" --timeout 900
