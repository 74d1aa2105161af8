// The dtype table (NOTE [dtype table]) and the fp8 conversions, checked exhaustively against a
// reference written here from the formats' definitions (OCP 8-bit floating point: E4M3FN and
// E5M2) by brute force: decode with ldexp, encode by searching the nearest code.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "host/reduce.hpp"
#include "symmem/error.hpp"
#include "symmem/types.hpp"

namespace symmem {
namespace {

// ---- reference ---------------------------------------------------------------------------
struct Format {
  const char* name;
  DType dtype;
  int e, m;   // exponent and mantissa bits
  bool ieee;  // true: top exponent is inf/NaN (E5M2); false: only S.1111.111 is NaN (E4M3FN)
};
const Format kFormats[] = {{"e4m3", DType::f8e4m3, 4, 3, false},
                           {"e5m2", DType::f8e5m2, 5, 2, true}};

bool ref_is_nan(const Format& f, int code) {
  const int mag = code & 0x7f, top = ((1 << f.e) - 1);
  const int exp = mag >> f.m, man = mag & ((1 << f.m) - 1);
  return f.ieee ? (exp == top && man != 0) : mag == 0x7f;
}
bool ref_is_inf(const Format& f, int code) {
  const int mag = code & 0x7f;
  return f.ieee && mag == (((1 << f.e) - 1) << f.m);
}
// The value of a code that is neither NaN nor infinity.
double ref_value(const Format& f, int code) {
  const int bias = (1 << (f.e - 1)) - 1;
  const int mag = code & 0x7f;
  const int exp = mag >> f.m, man = mag & ((1 << f.m) - 1);
  const double v = exp == 0 ? std::ldexp(man, 1 - bias - f.m)
                            : std::ldexp(1.0 + std::ldexp(man, -f.m), exp - bias);
  return (code & 0x80) ? -v : v;
}
int ref_max_code(const Format& f) {
  return f.ieee ? (((1 << f.e) - 1) << f.m) - 1 : 0x7e;
}

// Round to nearest, ties to the even code; what rounds past the largest finite value overflows
// (to infinity for E5M2, to NaN for E4M3FN, which has no infinity).
int ref_encode(const Format& f, float x) {
  const int sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return sign | 0x7f;
  const int overflow = f.ieee ? ((1 << f.e) - 1) << f.m : 0x7f;
  if (std::isinf(x)) return sign | overflow;
  const double a = std::fabs(static_cast<double>(x));
  const int maxc = ref_max_code(f);
  // Candidates: every finite non-negative code, plus the code past the largest (its value one
  // top-binade step above), which stands for overflow.
  const double top_step = ref_value(f, maxc) - ref_value(f, maxc - 1);
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= maxc + 1; ++c) {
    const double v = c <= maxc ? ref_value(f, c) : ref_value(f, maxc) + top_step;
    const double d = std::fabs(a - v);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  if (a > ref_value(f, maxc) + top_step) best = maxc + 1;
  return sign | (best > maxc ? overflow : best);
}

uint8_t encode(DType t, float x) {
  uint8_t b = 0;
  convert_from_f32(t, &x, &b, 1);
  return b;
}
float decode(DType t, uint8_t b) {
  float x = 0;
  convert_to_f32(t, &b, &x, 1);
  return x;
}

// ---- fp8 conversions -----------------------------------------------------------------------
TEST(Fp8, EveryCodeDecodes) {
  for (const Format& f : kFormats) {
    for (int c = 0; c < 256; ++c) {
      const float got = decode(f.dtype, static_cast<uint8_t>(c));
      if (ref_is_nan(f, c)) {
        EXPECT_TRUE(std::isnan(got)) << f.name << " code " << c;
      } else if (ref_is_inf(f, c)) {
        EXPECT_TRUE(std::isinf(got) && std::signbit(got) == ((c & 0x80) != 0)) << f.name << c;
      } else {
        EXPECT_EQ(static_cast<double>(got), ref_value(f, c)) << f.name << " code " << c;
        EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << f.name << " code " << c;  // -0 too
        // And every finite code encodes back to itself.
        EXPECT_EQ(encode(f.dtype, got), c) << f.name << " code " << c;
      }
    }
  }
}

TEST(Fp8, KnownValues) {
  EXPECT_EQ(decode(DType::f8e4m3, 0x7e), 448.0f);
  EXPECT_EQ(decode(DType::f8e4m3, 0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(decode(DType::f8e5m2, 0x7b), 57344.0f);
  EXPECT_EQ(decode(DType::f8e5m2, 0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(encode(DType::f8e4m3, 464.0f), 0x7e);  // the tie past 448 goes to even (448)
  EXPECT_EQ(encode(DType::f8e4m3, 465.0f), 0x7f);  // NaN: no infinity in E4M3FN
  EXPECT_EQ(encode(DType::f8e4m3, -1e30f), 0xff);
  EXPECT_EQ(encode(DType::f8e5m2, 61440.0f), 0x7c);  // the tie past the max goes to infinity
  EXPECT_EQ(encode(DType::f8e5m2, 61439.0f), 0x7b);
  EXPECT_EQ(encode(DType::f8e5m2, -INFINITY), 0xfc);
}

// Every midpoint between neighbouring codes (ties), each side of it, each code's own value,
// special values, and 200k random floats over the formats' range and beyond.
TEST(Fp8, EncodeMatchesReference) {
  for (const Format& f : kFormats) {
    std::vector<float> xs = {0.0f,
                             -0.0f,
                             INFINITY,
                             -INFINITY,
                             NAN,
                             -NAN,
                             1e-45f,
                             -1e-45f,
                             std::numeric_limits<float>::max(),
                             std::numeric_limits<float>::min()};
    const int maxc = ref_max_code(f);
    for (int c = 0; c <= maxc; ++c) {
      const double lo = ref_value(f, c);
      const double hi = c < maxc
                            ? ref_value(f, c + 1)
                            : ref_value(f, maxc) + (ref_value(f, maxc) - ref_value(f, maxc - 1));
      const float mid = static_cast<float>((lo + hi) / 2);  // exact in f32
      ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
      for (float x : {static_cast<float>(lo), mid, std::nextafter(mid, 0.0f),
                      std::nextafter(mid, INFINITY)}) {
        xs.push_back(x);
        xs.push_back(-x);
      }
    }
    std::mt19937 rng(12345);
    std::uniform_real_distribution<float> e(-30.0f, 20.0f);
    std::uniform_real_distribution<float> m(1.0f, 2.0f);
    for (int i = 0; i < 200000; ++i) {
      const float x = std::ldexp(m(rng), static_cast<int>(e(rng)));
      xs.push_back(i & 1 ? -x : x);
    }
    for (float x : xs) {
      const int want = ref_encode(f, x);
      const int got = encode(f.dtype, x);
      if (std::isnan(x)) {
        ASSERT_TRUE(ref_is_nan(f, got)) << f.name << " NaN gave " << got;
      } else {
        ASSERT_EQ(got, want) << f.name << " x=" << x << " (" << std::hexfloat << x << ")";
      }
    }
  }
}

// Reductions round once: the result is the f32 accumulation (in rank order) of the widened
// inputs, narrowed once, the same bits on every path.
TEST(Fp8, ReduceRoundsOnceFromF32) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> code(0, 255);
  for (const Format& f : kFormats) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max}) {
      for (int n : {1, 2, 3, 4, 8}) {
        const size_t count = 4099;
        std::vector<std::vector<uint8_t>> in(n, std::vector<uint8_t>(count));
        std::vector<const void*> ptrs;
        for (auto& v : in) {
          for (auto& b : v) {
            do b = static_cast<uint8_t>(code(rng));
            while (ref_is_nan(f, b) || ref_is_inf(f, b));
          }
          ptrs.push_back(v.data());
        }
        std::vector<uint8_t> out(count);
        host::reduce(out.data(), ptrs.data(), n, count, f.dtype, op, n);
        for (size_t i = 0; i < count; ++i) {
          float acc = decode(f.dtype, in[0][i]);
          for (int p = 1; p < n; ++p) {
            const float x = decode(f.dtype, in[p][i]);
            acc = op == ReduceOp::min   ? (x < acc ? x : acc)
                  : op == ReduceOp::max ? (acc < x ? x : acc)
                                        : acc + x;
          }
          if (op == ReduceOp::avg) acc = acc / static_cast<float>(n);
          ASSERT_EQ(out[i], ref_encode(f, acc))
              << f.name << " " << to_string(op) << " n=" << n << " i=" << i;
        }
      }
    }
  }
}

// ---- the table -------------------------------------------------------------------------------
TEST(DTypeTable, RowsAreConsistent) {
  ASSERT_EQ(dtype_table_size(), 17u);
  std::set<std::string> names;
  std::set<int> values;
  for (size_t i = 0; i < dtype_table_size(); ++i) {
    const DTypeInfo& r = dtype_table()[i];
    EXPECT_TRUE(values.insert(static_cast<int>(r.dtype)).second) << r.name;
    for (const char* n : {r.short_name, r.name, r.alias1, r.alias2}) {
      if (*n == 0) continue;
      EXPECT_TRUE(names.insert(n).second) << "name '" << n << "' is in two rows";
      EXPECT_EQ(parse_dtype(n), r.dtype) << n;
    }
    EXPECT_EQ(&dtype_info(r.dtype), &r);
    EXPECT_EQ(dtype_size(r.dtype), r.size);
    EXPECT_STREQ(to_string(r.dtype), r.short_name);
  }
  EXPECT_EQ(parse_dtype("float8_e4m3fn"), DType::f8e4m3);
  EXPECT_EQ(parse_dtype("float8_e5m2"), DType::f8e5m2);
  EXPECT_EQ(dtype_size(DType::f8e4m3), 1u);
  EXPECT_TRUE(dtype_info(DType::f8e5m2).is_float);
  EXPECT_FALSE(dtype_info(DType::i64).is_float);
}

TEST(DTypeTable, UnknownNamesAndValuesAreRefused) {
  try {
    parse_dtype("float8", "--dtype");
    FAIL() << "parsed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("--dtype"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f8e4m3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dtype_size(static_cast<DType>(99)), Error);
  EXPECT_THROW(dtype_info(static_cast<DType>(-1)), Error);
  EXPECT_STREQ(to_string(static_cast<DType>(99)), "unknown");
}

}  // namespace
}  // namespace symmem
