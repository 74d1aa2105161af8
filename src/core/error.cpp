#include "symmem/error.hpp"

#include <string>

namespace symmem {

const char* to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::InvalidArgument:
      return "InvalidArgument";
    case ErrorCode::Unsupported:
      return "Unsupported";
    case ErrorCode::Timeout:
      return "Timeout";
    case ErrorCode::PeerFailure:
      return "PeerFailure";
    case ErrorCode::BackendUnavailable:
      return "BackendUnavailable";
    case ErrorCode::System:
      return "System";
    case ErrorCode::Cuda:
      return "Cuda";
    case ErrorCode::Internal:
      return "Internal";
    case ErrorCode::Aborted:
      return "Aborted";
  }
  return "Unknown";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(message), code_(code) {}

void throw_error(ErrorCode code, std::string_view op, int rank, std::string_view what) {
  std::string msg(op);
  if (rank >= 0) msg += ": rank " + std::to_string(rank);
  msg += ": ";
  msg += what;
  throw Error(code, msg);
}

void throw_invalid_argument(std::string_view op, int rank, std::string_view arg,
                            std::string_view what) {
  std::string msg = "argument '";
  msg += arg;
  msg += "' ";
  msg += what;
  throw_error(ErrorCode::InvalidArgument, op, rank, msg);
}

}  // namespace symmem
