#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then builds and runs a consumer with
# find_package(symmem CONFIG REQUIRED) and another with pkg-config, and runs the installed
# symmem-run and symmem-bench from the prefix; symmem-trace (a Python script) is installed beside
# them.
set -euo pipefail
build_dir=$1 consumer_src=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build_dir" --prefix "$prefix" > "$work/install.log"

echo "== ldd of the installed core library (must list no CUDA/NCCL/NVSHMEM library)"
lib=$(ls "$prefix"/lib*/libsymmem.so | head -1)
ldd "$lib"
if ldd "$lib" | grep -Ei 'libcuda|libcudart|libnccl|libnvshmem'; then
  echo "FAIL: libsymmem.so depends on a GPU library" >&2
  exit 1
fi

echo "== CMake consumer"
cmake -S "$consumer_src" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" > "$work/cmake.log"
cmake --build "$work/cmake-build" > "$work/build.log"
"$work/cmake-build/consumer"

echo "== pkg-config consumer"
export PKG_CONFIG_PATH=$(dirname "$lib")/pkgconfig
c++ "$consumer_src/consumer.cpp" -o "$work/pc-consumer" $(pkg-config --cflags --libs symmem) \
  -Wl,-rpath,"$(dirname "$lib")"
"$work/pc-consumer"
echo "== installed tools run from the prefix (RUNPATH, no LD_LIBRARY_PATH)"
for tool in symmem-run symmem-bench symmem-store symmem-tune; do
  readelf -d "$prefix/bin/$tool" | grep -E 'RUNPATH|RPATH' || { echo "FAIL: $tool has no RUNPATH" >&2; exit 1; }
done
env -u LD_LIBRARY_PATH SYMMEM_BACKEND=host "$prefix/bin/symmem-run" -n 2 -- \
  "$prefix/bin/symmem-bench" -b 4096 -e 65536 -f 4 -n 5 -w 1
test -x "$prefix/bin/symmem-trace" || { echo "FAIL: symmem-trace not installed to bin" >&2; exit 1; }
if command -v python3 > /dev/null; then
  "$prefix/bin/symmem-trace" --help > /dev/null
fi
echo "install consumer tests passed"
