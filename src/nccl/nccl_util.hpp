#pragma once

// Small helpers of the nccl plugin: NCCL error checks, the device guard, LSA team arithmetic.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>
#include <string_view>

#include "core/check.hpp"
#include "symmem/error.hpp"

namespace symmem::nccl {

// Maps an NCCL result to symmem's error codes.
inline ErrorCode error_code_of(ncclResult_t r) {
  switch (r) {
    case ncclUnhandledCudaError:
      return ErrorCode::Cuda;
    case ncclSystemError:
      return ErrorCode::System;
    case ncclRemoteError:
      return ErrorCode::PeerFailure;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return ErrorCode::InvalidArgument;
    default:
      return ErrorCode::Internal;
  }
}

[[noreturn]] void throw_nccl(ErrorCode code, std::string_view op, int rank, const char* call,
                             const char* where, ncclResult_t r, ncclComm_t comm);
}  // namespace symmem::nccl

// SYMMEM_NCCL_CHECK(op, rank, comm, call): a failing call throws with the call text, file:line,
// NCCL's error string and ncclGetLastError(comm) (comm may be nullptr).
#define SYMMEM_NCCL_CHECK(op, rank, comm, call)                                               \
  do {                                                                                        \
    ncclResult_t symmem_nccl_r_ = (call);                                                     \
    if (symmem_nccl_r_ != ncclSuccess) {                                                      \
      ::symmem::nccl::throw_nccl(::symmem::nccl::error_code_of(symmem_nccl_r_), (op), (rank), \
                                 #call, SYMMEM_WHERE, symmem_nccl_r_, (comm));                \
    }                                                                                         \
  } while (0)

// As above with an explicit error code (e.g. BackendUnavailable during setup).
#define SYMMEM_NCCL_CHECK_CODE(code, op, rank, comm, call)                                  \
  do {                                                                                      \
    ncclResult_t symmem_nccl_r_ = (call);                                                   \
    if (symmem_nccl_r_ != ncclSuccess) {                                                    \
      ::symmem::nccl::throw_nccl((code), (op), (rank), #call, SYMMEM_WHERE, symmem_nccl_r_, \
                                 (comm));                                                   \
    }                                                                                       \
  } while (0)
