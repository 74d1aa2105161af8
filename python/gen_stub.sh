#!/usr/bin/env bash
# Regenerates python/symmem/_C.pyi from the built extension (nanobind stubgen).
#   bash python/gen_stub.sh [BUILD_DIR] [OUTPUT]     (OUTPUT defaults to python/symmem/_C.pyi)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
out=${2:-$here/symmem/_C.pyi}
PYTHONPATH="$build/python" "${PYTHON:-python3}" -m nanobind.stubgen -q -m symmem._C -o "$out"
