#!/usr/bin/env bash
# Checks NOTE [private static libraries] (CMakeLists.txt) on a build: no shared object that
# symmem ships (libsymmem, the backend plugins, the Python extension) exports code it took from
# a static archive -- libstdc++'s own functions and data (std::..., __cxa_..., operator new) or
# the CUDA runtime's (cuda..., __cuda...). Allowed: weak symbols (template instantiations in our
# own objects) and nvcc's device-link registration stubs (__cudaRegisterLinkedBinary_<hash>_<our
# source>, generated for our own relocatable device code). Exit 1 naming every offending symbol (the first 20 per file).
#
#   bash scripts/check-exports.sh BUILD_DIR
set -euo pipefail
BUILD=${1:?usage: bash scripts/check-exports.sh BUILD_DIR}
command -v nm > /dev/null || { echo "check-exports: nm not found (binutils)"; exit 1; }

mapfile -t FILES < <(find "$BUILD" -maxdepth 3 -type f \
  \( -name 'libsymmem.so*' -o -name 'libsymmem_cuda.so' -o -name 'libsymmem_nccl.so' \
     -o -name 'libsymmem_nvshmem.so' -o -name '_C*.so' \) | sort)
if (( ${#FILES[@]} == 0 )); then
  echo "check-exports: no shared objects of symmem under $BUILD"
  exit 1
fi
bad=0
for f in "${FILES[@]}"; do
  # Strong (T, D, B, R) defined dynamic symbols; demangled names for the report.
  offending=$(nm -D --defined-only "$f" | awk '$2 ~ /^[TDBR]$/ {print $3}' |
    grep -E '^(_ZSt|_ZNSt|_ZNKSt|_ZNSo|_ZNKSo|_ZNSi|_ZNSd|_ZTVSt|_ZTISt|_ZTSSt|_ZN9__gnu_cxx|_ZNK9__gnu_cxx|__cxa_|__gxx_|_Znw|_Zna|_Zdl|_Zda|cuda[A-Z]|__cuda)' |
    grep -v '^__cudaRegisterLinkedBinary_' || true)
  n=$(printf '%s' "$offending" | grep -c . || true)
  if (( n > 0 )); then
    echo "check-exports: $f exports $n symbols of a static library, e.g.:"
    printf '%s\n' "$offending" | head -20 | c++filt | sed 's/^/  /'
    bad=1
  else
    echo "check-exports: $f: ok ($(nm -D --defined-only "$f" | wc -l) defined dynamic symbols)"
  fi
done
if (( bad )); then
  echo "check-exports: FAILED (link the target through symmem_private_static_libs())"
  exit 1
fi
