#include "symmem/types.hpp"

#include <string>

#include "symmem/error.hpp"

namespace symmem {

std::string to_string(Device d) {
  if (d.type == DeviceType::cpu) return "cpu";
  return "cuda:" + std::to_string(d.index);
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  throw_invalid_argument("dtype_size", -1, "dtype",
                         "has unknown value " + std::to_string(static_cast<int>(t)));
}

const char* to_string(DType t) noexcept {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "unknown";
}

const char* to_string(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
  }
  return "unknown";
}

const char* to_string(Algo a) noexcept {
  switch (a) {
    case Algo::automatic: return "auto";
    case Algo::one_shot: return "one_shot";
    case Algo::two_shot: return "two_shot";
  }
  return "unknown";
}

DType parse_dtype(std::string_view n, std::string_view what) {
  if (n == "f32" || n == "float32" || n == "float") return DType::f32;
  if (n == "f64" || n == "float64" || n == "double") return DType::f64;
  if (n == "f16" || n == "float16" || n == "half") return DType::f16;
  if (n == "bf16" || n == "bfloat16") return DType::bf16;
  if (n == "i32" || n == "int32" || n == "int") return DType::i32;
  if (n == "i64" || n == "int64") return DType::i64;
  throw_invalid_argument("parse_dtype", -1, what,
                         "'" + std::string(n) + "' is not a dtype (f32, f64, f16, bf16, i32, i64)");
}

ReduceOp parse_reduce_op(std::string_view n, std::string_view what) {
  if (n == "sum") return ReduceOp::sum;
  if (n == "avg") return ReduceOp::avg;
  if (n == "min") return ReduceOp::min;
  if (n == "max") return ReduceOp::max;
  throw_invalid_argument("parse_reduce_op", -1, what,
                         "'" + std::string(n) + "' is not a reduction (sum, avg, min, max)");
}

Algo parse_algo(std::string_view n, std::string_view what) {
  if (n == "auto") return Algo::automatic;
  if (n == "one_shot") return Algo::one_shot;
  if (n == "two_shot") return Algo::two_shot;
  throw_invalid_argument("parse_algo", -1, what,
                         "'" + std::string(n) + "' is not an algorithm (auto, one_shot, two_shot)");
}

}  // namespace symmem
