#pragma once

// CPU reduction kernels and 16-bit float conversions used by the host collectives (and by
// symmem-bench and the tests to build and check inputs).
//
// Contract of reduce(): out[i] = op(ins[0][i], ins[1][i], ..., ins[n-1][i]) evaluated strictly
// left to right (input 0 first), so every rank that reduces the same inputs in the same order
// gets bitwise the same result. f16/bf16/fp8 are widened to f32, reduced in f32 and rounded
// once (round to nearest even). avg = sum / divisor (integer division for i32/i64). Integer sums
// wrap (two's complement). `out` may alias any input exactly (the same element range), never
// partially: inputs of a block are read before its results are stored.
//
// The kernels are plain loops over blocks of elements that the compiler vectorises (see
// docs/performance.md for the report that checks it).

#include <cstddef>
#include <cstdint>

#include "core/float_convert.hpp"
#include "symmem/export.hpp"
#include "symmem/types.hpp"

namespace symmem::host {

// The narrow float conversions (one implementation, shared with the CUDA kernels).
using fp::bf16_to_f32;
using fp::e4m3_to_f32;
using fp::e5m2_to_f32;
using fp::f16_to_f32;
using fp::f32_to_bf16;
using fp::f32_to_e4m3;
using fp::f32_to_e5m2;
using fp::f32_to_f16;
using fp::select_i32;

// Element-wise reduction of `n` inputs (n >= 1) of `count` elements into `out`.
SYMMEM_API void reduce(void* out, const void* const* ins, int n, size_t count, DType dtype,
                       ReduceOp op, int avg_divisor);

// Copy with large-size streaming where it helps (memcpy otherwise).
SYMMEM_API void copy_bytes(void* dst, const void* src, size_t bytes);

}  // namespace symmem::host
