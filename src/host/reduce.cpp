#include "host/reduce.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "symmem/error.hpp"

// The kernels must vectorise in every build type (GCC 12 at -O2 uses the very-cheap cost model,
// which leaves these loops scalar). Clang vectorises them at -O2 already.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

// NOTE [reduction kernels]
// Each (dtype, op) pair is a template instance working on blocks of kBlock elements: the block
// of input 0 is widened into an accumulator array on the stack (L1), every further input is
// combined into it in rank order, then the block is finalised (avg) and narrowed into `out`.
// Every inner loop is a simple counted loop over restrict pointers, which GCC vectorises at -O2
// (checked with -fopt-info-vec, see docs/performance.md). Evaluation order per element is fixed,
// so the result does not depend on which rank reduces.

namespace symmem::host {
namespace {

constexpr size_t kBlock = 2048;

struct Sum {
  template <class A>
  static A apply(A a, A b) {
    return a + b;
  }
};
struct Min {
  template <class A>
  static A apply(A a, A b) {
    return b < a ? b : a;
  }
};
struct Max {
  template <class A>
  static A apply(A a, A b) {
    return a < b ? b : a;
  }
};

// Storage type T, accumulator type A; integer sums wrap through the unsigned type.
template <class T>
struct Traits {
  using Acc = T;
  static Acc load(T v) { return v; }
  static T store(Acc v) { return v; }
};
template <>
struct Traits<int32_t> {
  using Acc = int32_t;
  static Acc load(int32_t v) { return v; }
  static int32_t store(Acc v) { return v; }
};
// Narrow floats: the storage bits, widened to f32 to combine.
template <class Bits, float (*kLoad)(Bits), Bits (*kStore)(float)>
struct NarrowFloat {
  Bits bits;
};
using F16 = NarrowFloat<uint16_t, f16_to_f32, f32_to_f16>;
using BF16 = NarrowFloat<uint16_t, bf16_to_f32, f32_to_bf16>;
using F8E4M3 = NarrowFloat<uint8_t, e4m3_to_f32, f32_to_e4m3>;
using F8E5M2 = NarrowFloat<uint8_t, e5m2_to_f32, f32_to_e5m2>;
template <class Bits, float (*kLoad)(Bits), Bits (*kStore)(float)>
struct Traits<NarrowFloat<Bits, kLoad, kStore>> {
  using T = NarrowFloat<Bits, kLoad, kStore>;
  using Acc = float;
  static Acc load(T v) { return kLoad(v.bits); }
  static T store(Acc v) { return T{kStore(v)}; }
};

// The storage type of each dtype that reductions take (the rows of SYMMEM_DTYPES with red 1;
// the others only move bytes).
template <DType>
struct HostType;
#define SYMMEM_HOST_TYPE_(id, type) \
  template <>                       \
  struct HostType<DType::id> {      \
    using T = type;                 \
  };
SYMMEM_HOST_TYPE_(f32, float)
SYMMEM_HOST_TYPE_(f64, double)
SYMMEM_HOST_TYPE_(f16, F16)
SYMMEM_HOST_TYPE_(bf16, BF16)
SYMMEM_HOST_TYPE_(i32, int32_t)
SYMMEM_HOST_TYPE_(i64, int64_t)
SYMMEM_HOST_TYPE_(f8e4m3, F8E4M3)
SYMMEM_HOST_TYPE_(f8e5m2, F8E5M2)
#undef SYMMEM_HOST_TYPE_

// Wrapping integer add (signed overflow would be undefined).
template <class Op, class A>
inline A combine(A a, A b) {
  if constexpr (std::is_same_v<Op, Sum> && std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return Op::apply(a, b);
  }
}

template <class T>
void load_block(typename Traits<T>::Acc* __restrict acc, const T* __restrict in, size_t m) {
  for (size_t i = 0; i < m; ++i) acc[i] = Traits<T>::load(in[i]);
}

template <class T, class Op>
void combine_block(typename Traits<T>::Acc* __restrict acc, const T* __restrict in, size_t m) {
  for (size_t i = 0; i < m; ++i) acc[i] = combine<Op>(acc[i], Traits<T>::load(in[i]));
}

template <class T>
void store_block(T* __restrict out, const typename Traits<T>::Acc* __restrict acc, size_t m) {
  for (size_t i = 0; i < m; ++i) out[i] = Traits<T>::store(acc[i]);
}

template <class A>
void divide_block(A* __restrict acc, size_t m, A divisor) {
  for (size_t i = 0; i < m; ++i) acc[i] = acc[i] / divisor;
}

// Two inputs straight into out (the common 2-rank case; no accumulator round trip).
template <class T, class Op>
void combine2(T* out, const T* a, const T* b, size_t m) {
  // out may alias a or b exactly: element i is read before it is written.
  for (size_t i = 0; i < m; ++i)
    out[i] = Traits<T>::store(combine<Op>(Traits<T>::load(a[i]), Traits<T>::load(b[i])));
}

template <class T, class Op>
void reduce_typed(void* out_v, const void* const* ins_v, int n, size_t count, bool avg,
                  int divisor) {
  using A = typename Traits<T>::Acc;
  T* out = static_cast<T*>(out_v);
  const T* const* ins = reinterpret_cast<const T* const*>(ins_v);
  if (n == 2 && !avg &&
      (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_integral_v<T>)) {
    combine2<T, Op>(out, ins[0], ins[1], count);
    return;
  }
  alignas(64) A acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    size_t m = std::min(kBlock, count - base);
    load_block<T>(acc, ins[0] + base, m);
    for (int p = 1; p < n; ++p) combine_block<T, Op>(acc, ins[p] + base, m);
    if (avg) divide_block<A>(acc, m, static_cast<A>(divisor));
    store_block<T>(out + base, acc, m);
  }
}

template <class T>
void reduce_op(void* out, const void* const* ins, int n, size_t count, ReduceOp op, int divisor) {
  switch (op) {
    case ReduceOp::sum:
      return reduce_typed<T, Sum>(out, ins, n, count, false, divisor);
    case ReduceOp::avg:
      return reduce_typed<T, Sum>(out, ins, n, count, true, divisor);
    case ReduceOp::min:
      return reduce_typed<T, Min>(out, ins, n, count, false, divisor);
    case ReduceOp::max:
      return reduce_typed<T, Max>(out, ins, n, count, false, divisor);
  }
  throw_invalid_argument("reduce", -1, "op",
                         "has unknown value " + std::to_string(static_cast<int>(op)));
}

}  // namespace

// GCC: one clone per ISA level (AVX-512, AVX2, baseline SSE2), picked at load time; `flatten`
// inlines every kernel into each clone so each gets its own vector width. Clang refuses
// target_clones together with flatten, so a clang build has the baseline version only.
#if defined(__clang__)
#define SYMMEM_REDUCE_CLONES
#else
#define SYMMEM_REDUCE_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "avx2", "default"), flatten))
#endif
SYMMEM_REDUCE_CLONES void reduce(void* out, const void* const* ins, int n, size_t count,
                                 DType dtype, ReduceOp op, int avg_divisor) {
  if (n < 1) throw_invalid_argument("reduce", -1, "n", "must be >= 1");
  if (avg_divisor < 1) avg_divisor = 1;
  switch (dtype) {
#define SYMMEM_REDUCE_CASE_(id, value, size, dl, kind, gpu, nccl, name, a1, a2, red) \
  SYMMEM_DTYPE_IF_##red(                                                             \
      case DType::id                                                                 \
      : return reduce_op<HostType<DType::id>::T>(out, ins, n, count, op, avg_divisor);)
    SYMMEM_DTYPES(SYMMEM_REDUCE_CASE_)
#undef SYMMEM_REDUCE_CASE_
    default:
      break;
  }
  throw_invalid_argument("reduce", -1, "dtype",
                         "= " + std::string(to_string(dtype)) + " is not reduced (value " +
                             std::to_string(static_cast<int>(dtype)) + ")");
}

namespace {

template <class T>
void from_f32(const float* __restrict in, void* out_v, size_t count) {
  T* __restrict out = static_cast<T*>(out_v);
  for (size_t i = 0; i < count; ++i)
    out[i] = Traits<T>::store(static_cast<typename Traits<T>::Acc>(in[i]));
}

template <class T>
void to_f32(const void* in_v, float* __restrict out, size_t count) {
  const T* __restrict in = static_cast<const T*>(in_v);
  for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(Traits<T>::load(in[i]));
}

}  // namespace

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes) std::memcpy(dst, src, bytes);
}

}  // namespace symmem::host

namespace symmem {

void convert_from_f32(DType dtype, const float* in, void* out, size_t count) {
  switch (dtype) {
#define SYMMEM_CONVERT_CASE_(id, value, size, dl, kind, gpu, nccl, name, a1, a2, red) \
  SYMMEM_DTYPE_IF_##red(case DType::id                                                \
                        : return host::from_f32<host::HostType<DType::id>::T>(in, out, count);)
    SYMMEM_DTYPES(SYMMEM_CONVERT_CASE_)
#undef SYMMEM_CONVERT_CASE_
    default:
      break;
  }
  throw_invalid_argument("convert_from_f32", -1, "dtype", "has an unknown value");
}

void convert_to_f32(DType dtype, const void* in, float* out, size_t count) {
  switch (dtype) {
#define SYMMEM_CONVERT_CASE_(id, value, size, dl, kind, gpu, nccl, name, a1, a2, red) \
  SYMMEM_DTYPE_IF_##red(case DType::id                                                \
                        : return host::to_f32<host::HostType<DType::id>::T>(in, out, count);)
    SYMMEM_DTYPES(SYMMEM_CONVERT_CASE_)
#undef SYMMEM_CONVERT_CASE_
    default:
      break;
  }
  throw_invalid_argument("convert_to_f32", -1, "dtype", "has an unknown value");
}

}  // namespace symmem
