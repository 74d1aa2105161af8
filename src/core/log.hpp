#pragma once

// Logging. SYMMEM_DEBUG=WARN|INFO|TRACE picks the level (WARN by default),
// SYMMEM_DEBUG_SUBSYS which subsystems speak, SYMMEM_DEBUG_FILE where lines go.
// Every line starts "host:pid [rank] symmem LEVEL SUBSYS ".
//
//   SYMMEM_LOG(INFO, ALLOC) << "allocated " << bytes << " bytes";
//
// The stream expression is not evaluated when the line is filtered out.
// Logging never throws: a bad SYMMEM_DEBUG* value falls back to the default here and is
// reported as an error by env::validate_all() (called by Group::from_env).

#include <cstddef>
#include <sstream>
#include <string>

#include "symmem/export.hpp"

namespace symmem::detail {

enum class LogLevel : int { WARN = 0, INFO = 1, TRACE = 2 };
enum class Subsys : int { INIT, ENV, STORE, IPC, ALLOC, COLL, P2P, GPU, PLUGIN, kCount };

SYMMEM_API bool log_enabled(LogLevel level, Subsys subsys) noexcept;
SYMMEM_API void log_set_rank(int rank) noexcept;
SYMMEM_API void log_reset_for_testing() noexcept;

// Writes one line (level, subsystem, the text) to the log. Never throws.
SYMMEM_API void log_write(LogLevel level, Subsys subsys, const char* text, size_t len) noexcept;

// NOTE [log line in the caller's library]: the line's stream is built, written to and
// destroyed in the shared object that logs (everything here is inline); only its bytes cross
// into libsymmem (log_write). A toolchain that links libstdc++ statically into each shared object
// (the GPU machine's /opt/gcc) gives every plugin its own copy of the iostreams and locales; a
// stream made in one copy and destroyed in another freed the plugin's static "classic" locale
// (free(): invalid pointer, seen on the first WARN line a plugin logged).
class LogLine {
 public:
  LogLine(LogLevel level, Subsys subsys) noexcept : level_(level), subsys_(subsys) {}
  ~LogLine() {
    try {
      const std::string text = os_.str();
      log_write(level_, subsys_, text.data(), text.size());
    } catch (...) {
    }
  }
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  std::ostringstream& stream() noexcept { return os_; }

 private:
  LogLevel level_;
  Subsys subsys_;
  std::ostringstream os_;
};

struct LogVoidify {
  void operator&(std::ostream&) const noexcept {}
};

}  // namespace symmem::detail

#define SYMMEM_LOG(level, subsys)                                        \
  !::symmem::detail::log_enabled(::symmem::detail::LogLevel::level,      \
                                 ::symmem::detail::Subsys::subsys)       \
      ? (void)0                                                          \
      : ::symmem::detail::LogVoidify() &                                 \
            ::symmem::detail::LogLine(::symmem::detail::LogLevel::level, \
                                      ::symmem::detail::Subsys::subsys)  \
                .stream()
