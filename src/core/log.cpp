#include "core/log.hpp"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

#include "symmem/env.hpp"

namespace symmem::detail {
namespace {

constexpr std::array<const char*, static_cast<int>(Subsys::kCount)> kSubsysNames = {
    "INIT", "ENV", "STORE", "IPC", "ALLOC", "COLL", "P2P", "GPU", "PLUGIN"};
constexpr std::array<const char*, 3> kLevelNames = {"WARN", "INFO", "TRACE"};

struct LogConfig {
  int level = 0;
  unsigned mask = ~0u;
  FILE* out = stderr;
  std::string host;
};

std::atomic<int> g_rank{-1};
std::mutex g_mutex;
LogConfig* g_config = nullptr;  // built lazily under g_mutex; leaked on purpose (used at exit)

std::string expand_path(const std::string& pattern, const std::string& host) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[i + 1];
      if (c == 'h') {
        out += host;
        ++i;
        continue;
      }
      if (c == 'p') {
        out += std::to_string(getpid());
        ++i;
        continue;
      }
    }
    out += pattern[i];
  }
  return out;
}

LogConfig& config() {
  // Caller holds g_mutex.
  if (g_config != nullptr) return *g_config;
  auto* c = new LogConfig();
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  c->host = host;
  try {
    std::string lvl = env::debug();
    for (int i = 0; i < 3; ++i) {
      if (lvl == kLevelNames[i]) c->level = i;
    }
  } catch (...) {
    c->level = 0;  // reported by env::validate_all()
  }
  try {
    c->mask = 0;
    for (const auto& name : env::debug_subsys()) {
      for (size_t i = 0; i < kSubsysNames.size(); ++i) {
        if (name == kSubsysNames[i]) c->mask |= 1u << i;
      }
    }
  } catch (...) {
    c->mask = ~0u;
  }
  try {
    std::string path = env::debug_file();
    if (!path.empty()) {
      FILE* f = std::fopen(expand_path(path, c->host).c_str(), "a");
      if (f != nullptr) {
        setvbuf(f, nullptr, _IOLBF, 0);
        c->out = f;
      }
    }
  } catch (...) {
  }
  g_config = c;
  return *c;
}

}  // namespace

bool log_enabled(LogLevel level, Subsys subsys) noexcept {
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto& c = config();
  return static_cast<int>(level) <= c.level && (c.mask & (1u << static_cast<int>(subsys))) != 0;
}

void log_set_rank(int rank) noexcept {
  g_rank.store(rank);
}

void log_reset_for_testing() noexcept {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_config != nullptr && g_config->out != stderr) std::fclose(g_config->out);
  delete g_config;
  g_config = nullptr;
}

void log_write(LogLevel level, Subsys subsys, const char* text, size_t len) noexcept {
  try {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto& c = config();
    int rank = g_rank.load();
    std::string rank_str = rank >= 0 ? std::to_string(rank) : std::string("-");
    std::fprintf(c.out, "%s:%d [%s] symmem %s %s %.*s\n", c.host.c_str(),
                 static_cast<int>(getpid()), rank_str.c_str(), kLevelNames[static_cast<int>(level)],
                 kSubsysNames[static_cast<int>(subsys)], static_cast<int>(len), text);
    std::fflush(c.out);
  } catch (...) {
  }
}

}  // namespace symmem::detail
