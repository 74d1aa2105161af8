#include "core/timeout.hpp"

#include <algorithm>

#include "symmem/env.hpp"

namespace symmem::detail {

Millis resolve_timeout(Millis timeout, Millis fallback) {
  const Millis t = timeout.count() < 0 ? fallback : timeout;
  return std::clamp(t, Millis(0), kMaxTimeout);
}

Millis resolve_timeout(Millis timeout) {
  // SYMMEM_TIMEOUT_MS is read only when the default is wanted: a bad value fails the calls
  // that use it, not those given an explicit timeout.
  if (timeout.count() >= 0) return std::min(timeout, kMaxTimeout);
  return resolve_timeout(timeout, env::timeout());
}

Clock::time_point deadline_for(Millis timeout) {
  return Clock::now() + resolve_timeout(timeout);
}

}  // namespace symmem::detail
