#pragma once

// CPU reduction kernels and 16-bit float conversions used by the host collectives (and by
// symmem-bench and the tests to build and check inputs).
//
// Contract of reduce(): out[i] = op(ins[0][i], ins[1][i], ..., ins[n-1][i]) evaluated strictly
// left to right (input 0 first), so every rank that reduces the same inputs in the same order
// gets bitwise the same result. f16/bf16 are widened to f32, reduced in f32 and rounded once
// (round to nearest even). avg = sum / divisor (integer division for i32/i64). Integer sums wrap
// (two's complement). `out` may alias any input exactly (the same element range), never
// partially: inputs of a block are read before its results are stored.
//
// The kernels are plain loops over blocks of elements that the compiler vectorises (see
// docs/performance.md for the report that checks it).

#include <bit>
#include <cstddef>
#include <cstdint>

#include "symmem/export.hpp"
#include "symmem/types.hpp"

namespace symmem::host {

// ---- 16-bit floats (IEEE binary16 and bfloat16), round to nearest even --------------------
// NaN stays NaN (quiet, sign kept); overflow gives infinity; subnormals are exact where
// representable.

// Branch-free (selects written as masks on signed 32-bit lanes, which GCC vectorises for SSE2,
// AVX2 and AVX-512 alike; a `?:` on unsigned values stays scalar before AVX-512).
inline int32_t select_i32(bool c, int32_t a, int32_t b) {
  int32_t m = -static_cast<int32_t>(c);
  return (a & m) | (b & ~m);
}

inline float f16_to_f32(uint16_t h) {
  int32_t x = h;
  int32_t sign = (x & 0x8000) << 16;
  int32_t em = x & 0x7fff;
  // Scaling the shifted exponent/mantissa by 2^112 re-biases normals and normalises
  // subnormals exactly.
  int32_t scaled = std::bit_cast<int32_t>(std::bit_cast<float>(em << 13) * 0x1p112f);
  int32_t special = (em << 13) | 0x7f800000;  // inf / nan (payload kept)
  return std::bit_cast<float>(select_i32(em >= 0x7c00, special, scaled) | sign);
}

inline uint16_t f32_to_f16(float f) {
  int32_t u = std::bit_cast<int32_t>(f);
  int32_t sign = (u >> 16) & 0x8000;
  u &= 0x7fffffff;
  // Subnormal results: adding 0.5 (as a float whose ulp is 2^-24) rounds in hardware (RNE).
  constexpr int32_t kMagic = (127 - 15 + 23 - 10 + 1) << 23;  // 0.5f
  int32_t sub =
      std::bit_cast<int32_t>(std::bit_cast<float>(u) + std::bit_cast<float>(kMagic)) - kMagic;
  // Normal results: re-bias the exponent and round the 13 dropped bits to nearest even.
  uint32_t odd = (static_cast<uint32_t>(u) >> 13) & 1u;
  int32_t norm = static_cast<int32_t>(
      (static_cast<uint32_t>(u) + static_cast<uint32_t>((15 - 127) * (1 << 23)) + 0xfffu + odd) >>
      13);
  int32_t nan_inf = select_i32(u > 0x7f800000, 0x7e00, 0x7c00);
  int32_t r = select_i32(u >= 0x47800000, nan_inf, select_i32(u < 0x38800000, sub, norm));
  return static_cast<uint16_t>(r | sign);
}

inline float bf16_to_f32(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  int32_t rounded = static_cast<int32_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  int32_t nan = static_cast<int32_t>((u >> 16) | 0x0040u);  // quiet
  int32_t mag = static_cast<int32_t>(u & 0x7fffffffu);
  return static_cast<uint16_t>(select_i32(mag > 0x7f800000, nan, rounded));
}

// Element-wise reduction of `n` inputs (n >= 1) of `count` elements into `out`.
SYMMEM_API void reduce(void* out, const void* const* ins, int n, size_t count, DType dtype,
                       ReduceOp op, int avg_divisor);

// Bulk conversions (vectorised), used by tests/bench to fill and check 16-bit buffers.
SYMMEM_API void convert_f32_to(DType dtype, const float* in, void* out, size_t count);
SYMMEM_API void convert_to_f32(DType dtype, const void* in, float* out, size_t count);

// Copy with large-size streaming where it helps (memcpy otherwise).
SYMMEM_API void copy_bytes(void* dst, const void* src, size_t bytes);

}  // namespace symmem::host
