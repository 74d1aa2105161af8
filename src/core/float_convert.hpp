#pragma once

// The one implementation of the narrow float formats' conversions to and from f32: IEEE
// binary16 (f16), bfloat16 (bf16), and the OCP 8-bit formats E4M3FN (f8e4m3) and E5M2 (f8e5m2).
// Used by the host reductions, the public symmem::convert_* functions, and the CUDA kernels for
// fp8 (so host and device round alike, bit for bit). All narrowing rounds to nearest even.
//   f16, bf16, f8e5m2: overflow gives infinity; NaN stays NaN (sign kept; f16 0x7e00, bf16 quiet
//   with its payload, f8e5m2 0x7f).
//   f8e4m3 (no infinity): what rounds past 448 (the largest finite), and +-inf, give NaN (0x7f,
//   sign kept), as torch.float8_e4m3fn does.
// Widening is exact. Subnormals are exact where representable.
//
// Branch-free: selects are masks on signed 32-bit lanes, which GCC vectorises for SSE2, AVX2 and
// AVX-512 alike (a `?:` on unsigned values stays scalar before AVX-512).

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SYMMEM_FC_HD __host__ __device__ __forceinline__
#else
#define SYMMEM_FC_HD inline
#endif

namespace symmem::fp {

SYMMEM_FC_HD int32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_int(f);
#else
  int32_t i;
  std::memcpy(&i, &f, 4);
  return i;
#endif
}
SYMMEM_FC_HD float float_of(int32_t i) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(i);
#else
  float f;
  std::memcpy(&f, &i, 4);
  return f;
#endif
}
SYMMEM_FC_HD int32_t select_i32(bool c, int32_t a, int32_t b) {
  const int32_t m = -static_cast<int32_t>(c);
  return (a & m) | (b & ~m);
}

// A binary float format with E exponent bits (bias 2^(E-1) - 1) and M mantissa bits, its
// handling of the top exponent (IEEE-like: infinity and NaNs; or "fn": only the all-ones code is
// NaN, no infinity), and the code narrowing gives a NaN (magnitude bits).
template <int E, int M, bool kIeeeTop, int32_t kNanCode>
struct Narrow {
  static constexpr int kBias = (1 << (E - 1)) - 1;
  static constexpr int kShift = 23 - M;                 // f32 mantissa bits dropped
  static constexpr int32_t kTop = ((1 << E) - 1) << M;  // the top exponent's first code
  static constexpr int32_t kMagMask = (1 << (E + M)) - 1;
  static constexpr int32_t kNan = kNanCode;
  static constexpr int32_t kOverflow = kIeeeTop ? kTop : kMagMask;  // infinity, or NaN for fn
  static constexpr int32_t kMaxFinite = kIeeeTop ? kTop - 1 : kMagMask - 1;
  static constexpr int32_t kSignShift = 32 - 1 - E - M;

  static SYMMEM_FC_HD int32_t from_f32(float f) {
    const int32_t u = bits_of(f);
    const int32_t sign = (u >> kSignShift) & (1 << (E + M));
    const int32_t a = u & 0x7fffffff;
    // Below the smallest normal: adding a float whose ulp is the format's subnormal step rounds
    // (to nearest even) in the FPU; the difference of the bit patterns is the code (which may
    // round up into the smallest normal, correctly encoded).
    constexpr int32_t kMagic = (127 + 1 - kBias - M + 23) << 23;
    const int32_t sub = bits_of(float_of(a) + float_of(kMagic)) - kMagic;
    // Normal: round the dropped mantissa bits to nearest even, then re-bias the exponent.
    const uint32_t ua = static_cast<uint32_t>(a);
    const uint32_t odd = (ua >> kShift) & 1u;
    const int32_t norm = static_cast<int32_t>((ua + ((1u << (kShift - 1)) - 1u) + odd) >> kShift) -
                         ((127 - kBias) << M);
    const int32_t fin = select_i32(a < ((127 + 1 - kBias) << 23), sub, norm);
    const int32_t r =
        select_i32(a > 0x7f800000, kNan, select_i32(fin > kMaxFinite, kOverflow, fin));
    return r | sign;
  }

  static SYMMEM_FC_HD float to_f32(int32_t x) {
    const int32_t sign = (x & (1 << (E + M))) << kSignShift;
    const int32_t em = x & kMagMask;
    // The exponent and mantissa placed in an f32's fields and scaled by 2^(127 - bias): exact
    // for normals, and for subnormals (an f32 subnormal times a power of two).
    const float scaled = float_of(em << kShift) * float_of((127 + 127 - kBias) << 23);
    int32_t special;
    bool is_special;
    if constexpr (kIeeeTop) {
      special = (em << kShift) | 0x7f800000;  // inf, or NaN with its payload
      is_special = em >= kTop;
    } else {
      special = 0x7fc00000;
      is_special = em == kMagMask;
    }
    return float_of(select_i32(is_special, special, bits_of(scaled)) | sign);
  }
};

using F16Format = Narrow<5, 10, true, 0x7e00>;  // quiet NaN
using E4M3Format = Narrow<4, 3, false, 0x7f>;   // the one NaN code
using E5M2Format = Narrow<5, 2, true, 0x7f>;    // all ones, as torch and CUDA give

SYMMEM_FC_HD float f16_to_f32(uint16_t h) {
  return F16Format::to_f32(h);
}
SYMMEM_FC_HD uint16_t f32_to_f16(float f) {
  return static_cast<uint16_t>(F16Format::from_f32(f));
}

SYMMEM_FC_HD float bf16_to_f32(uint16_t b) {
  return float_of(static_cast<int32_t>(b) << 16);
}
SYMMEM_FC_HD uint16_t f32_to_bf16(float f) {
  const uint32_t u = static_cast<uint32_t>(bits_of(f));
  const int32_t rounded = static_cast<int32_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  const int32_t nan = static_cast<int32_t>((u >> 16) | 0x0040u);  // quiet
  const int32_t mag = static_cast<int32_t>(u & 0x7fffffffu);
  return static_cast<uint16_t>(select_i32(mag > 0x7f800000, nan, rounded));
}

SYMMEM_FC_HD float e4m3_to_f32(uint8_t b) {
  return E4M3Format::to_f32(b);
}
SYMMEM_FC_HD uint8_t f32_to_e4m3(float f) {
  return static_cast<uint8_t>(E4M3Format::from_f32(f));
}
SYMMEM_FC_HD float e5m2_to_f32(uint8_t b) {
  return E5M2Format::to_f32(b);
}
SYMMEM_FC_HD uint8_t f32_to_e5m2(float f) {
  return static_cast<uint8_t>(E5M2Format::from_f32(f));
}

}  // namespace symmem::fp
