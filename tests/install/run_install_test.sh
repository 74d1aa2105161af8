#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then builds and runs a consumer with
# find_package(symmem CONFIG REQUIRED) and another with pkg-config.
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
echo "install consumer tests passed"
