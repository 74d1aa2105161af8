#pragma once

// symmem reports every failure with one exception type, symmem::Error, carrying an ErrorCode.
// Messages start with the operation that failed and include the rank where it is known, e.g.
//   "all_reduce: rank 1: argument 'count' = 4096 does not fit the buffer (1024 elements)".
// Destructors in symmem never throw; the library never calls exit() or abort() on a user error.

#include <stdexcept>
#include <string>
#include <string_view>

#include "symmem/export.hpp"

namespace symmem {

enum class ErrorCode : int {
  InvalidArgument = 1,     // the caller passed something wrong; nothing was touched
  Unsupported = 2,         // the backend cannot do this; the message names the backends that can
  Timeout = 3,             // a wait passed its deadline; the message names ranks/keys/channels
  PeerFailure = 4,         // a peer vanished (socket closed, process died)
  BackendUnavailable = 5,  // the backend's plugin or its dependency cannot be loaded/used
  System = 6,              // an OS call failed (errno)
  Cuda = 7,                // a CUDA driver/runtime call failed
  Internal = 8,            // a bug in symmem
  Aborted = 9,             // the group was aborted (Group::abort, or shrink() of it); the
                           // message gives the reason. Nothing of that group runs any more.
};

// "InvalidArgument", "Timeout", ...
SYMMEM_API const char* to_string(ErrorCode code) noexcept;

class SYMMEM_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// Builds "<op>: rank <rank>: <what>" (or "<op>: <what>" when rank < 0) and throws.
[[noreturn]] SYMMEM_API void throw_error(ErrorCode code, std::string_view op, int rank,
                                         std::string_view what);

// Argument errors name the argument: "<op>: rank R: argument '<arg>' <what>".
[[noreturn]] SYMMEM_API void throw_invalid_argument(std::string_view op, int rank,
                                                    std::string_view arg, std::string_view what);

}  // namespace symmem
