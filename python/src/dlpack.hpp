#pragma once

// The DLPack ABI (https://dmlc.github.io/dlpack/latest/c_api.html), version 1.0: the structs the
// Python module exchanges through "dltensor" / "dltensor_versioned" capsules. Written from the
// specification; layout-compatible with dlpack.h.

#include <cstdint>

namespace symmem::py::dl {

inline constexpr uint32_t kMajor = 1;
inline constexpr uint32_t kMinor = 0;

// Device types used here (DLDeviceType).
inline constexpr int32_t kCPU = 1;
inline constexpr int32_t kCUDA = 2;
inline constexpr int32_t kCUDAHost = 3;
inline constexpr int32_t kCUDAManaged = 13;

// Type codes (DLDataTypeCode).
inline constexpr uint8_t kInt = 0;
inline constexpr uint8_t kUInt = 1;
inline constexpr uint8_t kFloat = 2;
inline constexpr uint8_t kBfloat = 4;
inline constexpr uint8_t kBool = 6;

inline constexpr uint64_t kFlagReadOnly = 1ull << 0;
inline constexpr uint64_t kFlagIsCopied = 1ull << 1;

struct Version {
  uint32_t major;
  uint32_t minor;
};

struct Device {
  int32_t device_type;  // DLDeviceType (a C enum: int-sized)
  int32_t device_id;
};

struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; nullptr: compact row-major
  uint64_t byte_offset;
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
