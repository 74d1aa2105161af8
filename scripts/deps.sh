#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build and test symmem. Idempotent; quiet when
# everything is present. Needs root (or sudo) for apt-get; pip installs go to the user's Python.
set -euo pipefail

need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v ninja >/dev/null || need_apt+=(ninja-build)
command -v g++ >/dev/null || need_apt+=(g++)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
[ -f /usr/include/gmock/gmock.h ] || need_apt+=(libgmock-dev)
command -v mpirun >/dev/null || need_apt+=(openmpi-bin libopenmpi-dev)
command -v clang++ >/dev/null || need_apt+=(clang)
command -v clang-format >/dev/null || need_apt+=(clang-format)  # scripts/check-format.sh
[ -f /usr/include/nlohmann/json.hpp ] || need_apt+=(nlohmann-json3-dev)  # tuning files
if ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  need_apt+=(libclang-rt-14-dev)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "deps: installing ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
need_pip=()
$PY -c 'import numpy' 2>/dev/null || need_pip+=(numpy)
$PY -c 'import pytest' 2>/dev/null || need_pip+=(pytest)
$PY -c 'import nanobind, sys; sys.exit(tuple(map(int, nanobind.__version__.split(".")[:2])) < (3, 1))' 2>/dev/null || need_pip+=('nanobind>=3.1')
$PY -c 'import scikit_build_core' 2>/dev/null || need_pip+=(scikit-build-core)
# NVSHMEM from its wheel, pinned to the version on the GPU machine (see docs/backends.md), so
# that the nvshmem plugin is compiled here exactly as it runs there.
$PY -c 'import nvidia.nvshmem' 2>/dev/null || need_pip+=(nvidia-nvshmem-cu13==3.4.5)
if [ ${#need_pip[@]} -gt 0 ]; then
  echo "deps: pip installing ${need_pip[*]}"
  $PY -m pip install -q --disable-pip-version-check "${need_pip[@]}"
fi
