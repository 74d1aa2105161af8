#pragma once

// The DLPack ABI (https://dmlc.github.io/dlpack/latest/c_api.html) the Python module exchanges
// through "dltensor" / "dltensor_versioned" capsules. The tensor, device and dtype structs and
// the type codes are nanobind's (nanobind/ndarray.h, namespace nanobind::dlpack, which follows
// dlpack.h and carries DLPack 1.1's fp8 codes); nanobind does not publish the two managed-tensor
// structs of the capsules, so they are declared here on top of its DLTensor, as dlpack.h lays
// them out.

#include <cstdint>

#include <nanobind/ndarray.h>

namespace symmem::py::dl {

namespace nbdl = nanobind::dlpack;

// The version this module produces (ManagedTensorVersioned::version).
inline constexpr uint32_t kMajor = 1;
inline constexpr uint32_t kMinor = 0;

// Device types used here (DLDeviceType).
inline constexpr int32_t kCPU = nanobind::device::cpu::value;
inline constexpr int32_t kCUDA = nanobind::device::cuda::value;
inline constexpr int32_t kCUDAHost = nanobind::device::cuda_host::value;
inline constexpr int32_t kCUDAManaged = nanobind::device::cuda_managed::value;

// Type codes (DLDataTypeCode).
inline constexpr uint8_t kInt = static_cast<uint8_t>(nbdl::dtype_code::Int);
inline constexpr uint8_t kUInt = static_cast<uint8_t>(nbdl::dtype_code::UInt);
inline constexpr uint8_t kFloat = static_cast<uint8_t>(nbdl::dtype_code::Float);
inline constexpr uint8_t kBfloat = static_cast<uint8_t>(nbdl::dtype_code::Bfloat);
inline constexpr uint8_t kBool = static_cast<uint8_t>(nbdl::dtype_code::Bool);
inline constexpr uint8_t kFloat8E4M3FN = static_cast<uint8_t>(nbdl::dtype_code::Float8_E4M3FN);
inline constexpr uint8_t kFloat8E5M2 = static_cast<uint8_t>(nbdl::dtype_code::Float8_E5M2);

// The DLPack codes of symmem's table (SYMMEM_DTYPES, column dl) are the standard's.
static_assert(kFloat == 2 && kBfloat == 4 && kInt == 0 && kFloat8E4M3FN == 10 && kFloat8E5M2 == 12);

inline constexpr uint64_t kFlagReadOnly = 1ull << 0;
inline constexpr uint64_t kFlagIsCopied = 1ull << 1;

using Device = nbdl::device;
using DataType = nbdl::dtype;
using Tensor = nbdl::dltensor;

struct Version {
  uint32_t major;
  uint32_t minor;
};

struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};

struct ManagedTensorVersioned {
  Version version;
  void* manager_ctx;
  void (*deleter)(ManagedTensorVersioned* self);
  uint64_t flags;
  Tensor dl_tensor;
};

}  // namespace symmem::py::dl
