#pragma once

// The one place where a user's timeout becomes a duration or a deadline. The rule is
// NOTE [timeouts] in symmem/store.hpp; in short: > 0 as given (at most kMaxTimeout), 0 stays 0
// (check once), < 0 the default. Calls that need their peers reject 0 themselves, before
// resolving, with an InvalidArgument naming their own argument.

#include <chrono>

#include "symmem/export.hpp"
#include "symmem/store.hpp"

namespace symmem::detail {

using Clock = std::chrono::steady_clock;

// Ten years is "forever" for a rendezvous and keeps steady_clock (and nanosecond) arithmetic far
// from overflow.
inline constexpr Millis kMaxTimeout = std::chrono::hours(24 * 365 * 10);

// The rule: negative -> `fallback` (the call's default: a group's timeout, say), else
// `timeout`; the result is clamped to [0, kMaxTimeout].
SYMMEM_API Millis resolve_timeout(Millis timeout, Millis fallback);
// The same with the default SYMMEM_TIMEOUT_MS (env::timeout()).
SYMMEM_API Millis resolve_timeout(Millis timeout);

// now + resolve_timeout(timeout): the deadline of a call given `timeout`. Resolving an
// already-resolved timeout changes nothing, so a resolved one may be passed as well.
SYMMEM_API Clock::time_point deadline_for(Millis timeout);

}  // namespace symmem::detail
