#include "core/wait_report.hpp"

#include <algorithm>
#include <cstdio>

#include "symmem/env.hpp"

namespace symmem::detail {
namespace {

std::string seconds(Clock::duration d) {
  double s = std::chrono::duration<double>(d).count();
  if (s < 0) s = 0;
  char buf[32];
  std::snprintf(buf, sizeof(buf), s < 100 ? "%.1f s" : "%.0f s", s);
  return buf;
}

}  // namespace

std::string format_rank_ranges(std::vector<int> ranks, size_t max_items) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  size_t items = 0;
  size_t i = 0;
  while (i < ranks.size()) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (items == max_items) {
      out += " and " + std::to_string(ranks.size() - i) + " more ranks";
      break;
    }
    if (items > 0) out += ",";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    ++items;
    i = j + 1;
  }
  return out;
}

WaitReport::WaitReport(std::string what, Subsys subsys, int rank, Clock::time_point start,
                       Clock::time_point deadline, Millis timeout)
    : what_(std::move(what)),
      subsys_(subsys),
      rank_(rank),
      start_(start),
      deadline_(deadline),
      timeout_(timeout) {
  try {
    interval_ = std::chrono::seconds(env::wait_report_s());
  } catch (...) {
    interval_ = Millis(0);  // reported by env::validate_all()
  }
  next_ = start_ + interval_;
}

Millis WaitReport::slice(Clock::time_point now, Millis fallback) const {
  if (!enabled()) return fallback;
  auto until = std::chrono::duration_cast<Millis>(next_ - now);
  return std::max(Millis(1), std::min(fallback, until));
}

void WaitReport::ranks(const std::vector<int>& missing, int arrived, int expected) {
  std::string body = missing.size() == 1 ? "rank " : "ranks ";
  body += missing.empty() ? std::string("(none: arriving now)") : format_rank_ranges(missing);
  if (arrived >= 0 && expected >= 0) {
    body += " (" + std::to_string(arrived) + " of " + std::to_string(expected) + " arrived)";
  }
  emit(body);
}

void WaitReport::text(const std::string& detail) {
  emit(detail);
}

void WaitReport::emit(const std::string& body) {
  const auto now = Clock::now();
  ++lines_;
  while (next_ <= now) next_ += interval_;
  if (!log_enabled(LogLevel::WARN, subsys_)) return;
  LogLine line(LogLevel::WARN, subsys_);
  line.stream() << what_ << ": "
                << (rank_ >= 0 ? "rank " + std::to_string(rank_) + " has waited " : "waited ")
                << seconds(now - start_) << " for " << body << "; " << seconds(deadline_ - now)
                << " left of the " << seconds(std::chrono::duration_cast<Clock::duration>(timeout_))
                << " timeout";
}

}  // namespace symmem::detail
