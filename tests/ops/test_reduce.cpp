// Unit tests of the host reduction kernels and 16-bit float conversions (fp8: test_dtype.cpp).
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "host/reduce.hpp"

namespace symmem::host {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Reference: nearest bf16 by exhaustive comparison in double, ties to even.
uint16_t ref_bf16(float f) {
  if (std::isnan(f)) return static_cast<uint16_t>((bits(f) >> 16) | 0x40);
  uint32_t u = bits(f);
  uint16_t lo = static_cast<uint16_t>(u >> 16);
  uint16_t hi = static_cast<uint16_t>(lo + 1);  // next in magnitude (same sign)
  double dlo = bf16_to_f32(lo), dhi = bf16_to_f32(hi), x = f;
  double elo = std::fabs(x - dlo),
         ehi = std::isinf(dhi) ? std::fabs(x - 0x1.ffp127 * 1.0) : std::fabs(dhi - x);
  if ((lo & 0x7f80) == 0x7f80) return lo;  // inf
  if (std::isinf(dhi)) {
    // overflow threshold: halfway between max bf16 and 2^128
    double maxv = std::fabs(bf16_to_f32(lo)), halfway = maxv + (std::ldexp(1.0, 128) - maxv) / 2;
    (void)ehi;
    if (std::fabs(x) < halfway) return lo;
    if (std::fabs(x) > halfway) return hi;
    return (lo & 1) ? hi : lo;
  }
  if (elo < ehi) return lo;
  if (ehi < elo) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(Convert, F16RoundTripEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    _Float16 ref;
    uint16_t hb = static_cast<uint16_t>(h);
    std::memcpy(&ref, &hb, 2);
    if (std::isnan(static_cast<float>(ref))) {
      EXPECT_TRUE(std::isnan(f)) << h;
      uint16_t back = f32_to_f16(f);
      EXPECT_EQ(back & 0x7c00, 0x7c00) << h;
      EXPECT_NE(back & 0x3ff, 0) << h;
      continue;
    }
    ASSERT_EQ(bits(f), bits(static_cast<float>(ref))) << "h=" << h;
    ASSERT_EQ(f32_to_f16(f), h) << "h=" << h;
  }
}

TEST(Convert, F32ToF16MatchesCompilerRounding) {
  std::mt19937 rng(1);
  std::vector<float> values = {
      0.f,           -0.f,     65504.f,        65519.99f,
      65520.f,       1e9f,     -1e9f,          std::numeric_limits<float>::infinity(),
      5.96e-8f,      2.98e-8f, 2.9802322e-08f, 6.1e-5f,
      6.097555e-05f, 1e-10f};
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    values.push_back(f);
  }
  // Every halfway point between adjacent f16 values (ties to even).
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    float a = f16_to_f32(static_cast<uint16_t>(h)), b = f16_to_f32(static_cast<uint16_t>(h + 1));
    values.push_back(static_cast<float>((static_cast<double>(a) + b) / 2));
    values.push_back(-static_cast<float>((static_cast<double>(a) + b) / 2));
  }
  for (float f : values) {
    _Float16 ref = static_cast<_Float16>(f);
    uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    ASSERT_EQ(f32_to_f16(f), rb) << "f=" << f << " bits=" << std::hex << bits(f);
  }
}

TEST(Convert, Bf16) {
  std::mt19937 rng(2);
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bf16_to_f32(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), b);
  }
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = rng();
    if (i % 4 == 0) u = (u & 0xffff0000u) | 0x8000u;  // exact ties
    float f;
    std::memcpy(&f, &u, 4);
    ASSERT_EQ(f32_to_bf16(f), ref_bf16(f)) << std::hex << u;
  }
  float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(nan))));
}

template <class T>
std::vector<T> make(size_t n, int seed) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<T>(static_cast<int>((i * 7 + seed * 13) % 19) - 9);
  return v;
}

TEST(Reduce, AllTypesAndOpsAgainstScalar) {
  for (int n : {1, 2, 3, 5, 8}) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{2048}, size_t{4099}}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max}) {
        for (size_t row = 0; row < dtype_table_size(); ++row) {
          if (!dtype_table()[row].reducible) continue;  // moved, not reduced
          const DType dt = dtype_table()[row].dtype;
          size_t es = dtype_size(dt);
          std::vector<std::vector<char>> in(n, std::vector<char>(count * es));
          std::vector<std::vector<float>> src;
          std::vector<const void*> ptrs;
          for (int p = 0; p < n; ++p) {
            src.push_back(make<float>(count, p));
            convert_from_f32(dt, src[p].data(), in[p].data(), count);
            convert_to_f32(dt, in[p].data(), src[p].data(), count);  // the inputs as stored
            ptrs.push_back(in[p].data());
          }
          std::vector<char> out(count * es);
          reduce(out.data(), ptrs.data(), n, count, dt, op, n);
          std::vector<float> got(count);
          convert_to_f32(dt, out.data(), got.data(), count);
          for (size_t i = 0; i < count; ++i) {
            double acc = 0, mn = 1e9, mx = -1e9;
            for (int p = 0; p < n; ++p) {
              double v = src[p][i];
              acc += v;
              mn = std::min(mn, v);
              mx = std::max(mx, v);
            }
            double want = op == ReduceOp::sum   ? acc
                          : op == ReduceOp::min ? mn
                          : op == ReduceOp::max ? mx
                                                : acc / n;
            if (op == ReduceOp::avg && (dt == DType::i32 || dt == DType::i64))
              want = std::trunc(acc / n);
            // One rounding of the exact result: within one ulp (relative) of the dtype.
            const double ulp = dt == DType::f8e5m2   ? 0x1p-2
                               : dt == DType::f8e4m3 ? 0x1p-3
                               : dt == DType::bf16   ? 0x1p-7
                               : dt == DType::f16    ? 0x1p-10
                                                     : 1e-6;
            double tol = op == ReduceOp::avg || (op == ReduceOp::sum && es < 4) ? ulp : 0;
            ASSERT_NEAR(got[i], want, tol * std::fabs(want) + 1e-30)
                << to_string(dt) << " " << to_string(op) << " n=" << n << " count=" << count
                << " i=" << i;
          }
        }
      }
    }
  }
}

TEST(Reduce, InPlaceAliasAndFixedOrder) {
  // out aliasing input 1 gives the same bits as a separate output.
  size_t count = 5000;
  std::vector<float> a(count), b(count), c(count);
  for (size_t i = 0; i < count; ++i) {
    a[i] = 1e8f;
    b[i] = 1.0f + static_cast<float>(i % 3);
    c[i] = -1e8f;
  }
  std::vector<float> out(count);
  const void* ins[] = {a.data(), b.data(), c.data()};
  reduce(out.data(), ins, 3, count, DType::f32, ReduceOp::sum, 3);
  // Left to right: (1e8 + b) - 1e8 loses b's low bits the same way every time.
  for (size_t i = 0; i < count; ++i) EXPECT_EQ(out[i], (a[i] + b[i]) + c[i]);
  std::vector<float> b2 = b;
  const void* ins2[] = {a.data(), b2.data(), c.data()};
  reduce(b2.data(), ins2, 3, count, DType::f32, ReduceOp::sum, 3);
  EXPECT_EQ(0, std::memcmp(b2.data(), out.data(), count * 4));
  const void* two[] = {a.data(), b.data()};
  std::vector<float> b3 = b;
  const void* two3[] = {a.data(), b3.data()};
  reduce(out.data(), two, 2, count, DType::f32, ReduceOp::max, 2);
  reduce(b3.data(), two3, 2, count, DType::f32, ReduceOp::max, 2);
  EXPECT_EQ(0, std::memcmp(b3.data(), out.data(), count * 4));
}

TEST(Reduce, IntegerSumWraps) {
  std::vector<int32_t> a = {std::numeric_limits<int32_t>::max()}, b = {1}, out(1);
  const void* ins[] = {a.data(), b.data(), b.data()};
  reduce(out.data(), ins, 3, 1, DType::i32, ReduceOp::sum, 3);
  EXPECT_EQ(out[0], std::numeric_limits<int32_t>::min() + 1);
}

TEST(Reduce, F16AccumulatesInF32) {
  // 2048 + 1 + 1 in f16 step by step would stay 2048 (ulp 2); in f32 it is 2050.
  uint16_t big = f32_to_f16(2048.f), one = f32_to_f16(1.f), out = 0;
  const void* ins[] = {&big, &one, &one};
  reduce(&out, ins, 3, 1, DType::f16, ReduceOp::sum, 3);
  EXPECT_EQ(f16_to_f32(out), 2050.f);
  uint16_t bbig = f32_to_bf16(256.f), bone = f32_to_bf16(1.f), bout = 0;
  const void* bins[] = {&bbig, &bone, &bone};
  reduce(&bout, bins, 3, 1, DType::bf16, ReduceOp::sum, 3);
  EXPECT_EQ(bf16_to_f32(bout), 258.f);
}

}  // namespace
}  // namespace symmem::host
