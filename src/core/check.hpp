#pragma once

// Internal check macros. Each stringifies the failing call and adds file:line.
//   SYMMEM_CHECK_SYS(op, rank, ::ftruncate(fd, n));      // -1 -> System error with strerror(errno)
//   SYMMEM_CHECK(op, rank, cond, ErrorCode::Internal, "what");
//   SYMMEM_CHECK_ARG(op, rank, cond, "count", "is " << n << ", larger than ...");
// CUDA checks (with the error's name) live in src/cuda/cuda_check.hpp.

#include <cerrno>
#include <cstring>
#include <sstream>
#include <string>

#include "symmem/error.hpp"

#define SYMMEM_STRINGIFY_(x) #x
#define SYMMEM_STRINGIFY(x) SYMMEM_STRINGIFY_(x)
#define SYMMEM_WHERE __FILE__ ":" SYMMEM_STRINGIFY(__LINE__)

#define SYMMEM_CHECK_SYS(op, rank, call)                                           \
  do {                                                                             \
    if ((call) == -1) {                                                            \
      int symmem_errno_ = errno;                                                   \
      ::symmem::throw_error(::symmem::ErrorCode::System, (op), (rank),             \
                            std::string(#call) + " failed at " SYMMEM_WHERE ": " + \
                                std::strerror(symmem_errno_) + " (errno " +        \
                                std::to_string(symmem_errno_) + ")");              \
    }                                                                              \
  } while (0)

#define SYMMEM_CHECK(op, rank, cond, code, what)                     \
  do {                                                               \
    if (!(cond)) {                                                   \
      std::ostringstream symmem_os_;                                 \
      symmem_os_ << what;                                            \
      ::symmem::throw_error((code), (op), (rank), symmem_os_.str()); \
    }                                                                \
  } while (0)

#define SYMMEM_CHECK_ARG(op, rank, cond, arg, what)                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::ostringstream symmem_os_;                                           \
      symmem_os_ << what;                                                      \
      ::symmem::throw_invalid_argument((op), (rank), (arg), symmem_os_.str()); \
    }                                                                          \
  } while (0)

#define SYMMEM_INTERNAL_CHECK(cond)                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      ::symmem::throw_error(::symmem::ErrorCode::Internal, "internal", -1, \
                            "check '" #cond "' failed at " SYMMEM_WHERE);  \
    }                                                                      \
  } while (0)
