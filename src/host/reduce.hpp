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

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  // Scaling the shifted exponent/mantissa by 2^112 re-biases normals and normalises
  // subnormals exactly.
  uint32_t scaled = std::bit_cast<uint32_t>(std::bit_cast<float>(em << 13) * 0x1p112f);
  uint32_t special = (em << 13) | 0x7f800000u;  // inf / nan (payload kept)
  uint32_t bits = em >= 0x7c00u ? special : scaled;
  return std::bit_cast<float>(bits | sign);
}

inline uint16_t f32_to_f16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  // Subnormal results: adding 0.5 (as a float whose ulp is 2^-24) rounds in hardware (RNE).
  constexpr uint32_t kMagic = (127u - 15u + 23u - 10u + 1u) << 23;  // 0.5f
  uint32_t sub =
      std::bit_cast<uint32_t>(std::bit_cast<float>(u) + std::bit_cast<float>(kMagic)) - kMagic;
  // Normal results: re-bias the exponent and round the 13 dropped bits to nearest even.
  uint32_t odd = (u >> 13) & 1u;
  uint32_t norm = (u + ((15u - 127u) << 23) + 0xfffu + odd) >> 13;
  uint32_t nan_inf = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  uint32_t r = u >= 0x47800000u ? nan_inf : (u < 0x38800000u ? sub : norm);
  return static_cast<uint16_t>(r | sign);
}

inline float bf16_to_f32(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t nan = (u >> 16) | 0x0040u;  // quiet
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
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
