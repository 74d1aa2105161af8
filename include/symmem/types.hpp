#pragma once

// Small value types shared by the whole API.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "symmem/export.hpp"

namespace symmem {

enum class DeviceType : int { cpu = 0, cuda = 1 };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  static constexpr Device cpu() { return Device{DeviceType::cpu, 0}; }
  static constexpr Device cuda(int index) { return Device{DeviceType::cuda, index}; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device&) const = default;
};
SYMMEM_API std::string to_string(Device d);  // "cpu", "cuda:1"

// A CUDA stream as an opaque pointer (cudaStream_t); nullptr is the default (legacy) stream.
// Ignored by the host backend.
using Stream = void*;

enum class DType : int { f32 = 0, f64 = 1, f16 = 2, bf16 = 3, i32 = 4, i64 = 5 };
enum class ReduceOp : int { sum = 0, avg = 1, min = 2, max = 3 };
enum class Algo : int { automatic = 0, one_shot = 1, two_shot = 2 };

SYMMEM_API size_t dtype_size(DType t);               // InvalidArgument for an unknown value
SYMMEM_API const char* to_string(DType t) noexcept;  // "f32", ... "unknown"
SYMMEM_API const char* to_string(ReduceOp op) noexcept;
SYMMEM_API const char* to_string(Algo a) noexcept;   // "auto", "one_shot", "two_shot"
// Parse names ("f32"/"float32"/"float", "bf16"/"bfloat16", "sum", "one_shot", ...);
// InvalidArgument naming `what` on an unknown name.
SYMMEM_API DType parse_dtype(std::string_view name, std::string_view what = "dtype");
SYMMEM_API ReduceOp parse_reduce_op(std::string_view name, std::string_view what = "op");
SYMMEM_API Algo parse_algo(std::string_view name, std::string_view what = "algo");

}  // namespace symmem
