#pragma once

// Progress lines of waits on other ranks (internal).
//
// NOTE [wait reports]
// A wait on other ranks that lasts longer than SYMMEM_WAIT_REPORT_S seconds (env::wait_report_s;
// 0 turns the lines off) logs one WARN line per interval while it lasts: what it waits for,
// which ranks have not arrived (as a range list, "1,3-7"), how many have, and the time left
// before its Timeout. The waits that report: the store exchanges (group creation, split(),
// store_barrier(), allocation rendezvous; StoreExchange::await), the CPU pad barriers and waits
// (core/pad_sync.hpp), rank 0's wait at exit for the others to check out, and a TcpStore client's
// attempts to reach its server, and the cuda backend's synchronous device-side syncs (barrier/
// put_signal/wait_signal on the null stream: the kernel notes the peer it waits for in a
// host-mapped progress record, NOTE [wait progress] in cuda/timeout_record.hpp). Other GPU-side
// waits (explicit streams, collective kernels) only have their deadline.
//
// Usage, in a wait loop that wakes at least every slice(now):
//   WaitReport report("group g0: creation", Subsys::INIT, rank, start, deadline, timeout);
//   ...
//   if (report.due(now)) report.ranks(missing, arrived, expected);

#include <chrono>
#include <string>
#include <vector>

#include "core/log.hpp"
#include "core/timeout.hpp"
#include "symmem/export.hpp"

namespace symmem::detail {

// Ranks as a sorted, deduplicated range list: {7, 1, 3, 4, 5, 6} -> "1,3-7"; {} -> "". When the
// list has more than `max_items` items (single ranks or ranges), the first `max_items` are
// written, then " and N more ranks" (N counting ranks, not items).
SYMMEM_API std::string format_rank_ranges(std::vector<int> ranks, size_t max_items = 32);

class SYMMEM_API WaitReport {
 public:
  // `what` names the wait ("group g0: creation"); `rank` is the waiting rank (-1: none);
  // `start`, `deadline` and `timeout` are the wait's own. The interval is read from
  // SYMMEM_WAIT_REPORT_S here (a bad value turns the lines off: env::validate_all() reports it).
  WaitReport(std::string what, Subsys subsys, int rank, Clock::time_point start,
             Clock::time_point deadline, Millis timeout);

  bool enabled() const { return interval_.count() > 0; }
  // True when a line is due at `now` (never when disabled).
  bool due(Clock::time_point now) const { return enabled() && now >= next_; }
  // The longest the caller may block at `now` so that the next line is on time (`fallback`
  // when disabled); never below 1 ms.
  Millis slice(Clock::time_point now, Millis fallback) const;

  // Logs "<what>: rank R has waited 10.0 s for ranks 1,3-7 (2 of 8 arrived); 290 s left of the
  // 300 s timeout" and schedules the next line. `arrived`/`expected` < 0: not written.
  void ranks(const std::vector<int>& missing, int arrived, int expected);
  // The same with free text in place of the ranks: "<what>: rank R has waited 10.0 s for
  // <detail>; ...".
  void text(const std::string& detail);
  // Number of lines logged so far.
  int lines() const { return lines_; }

 private:
  void emit(const std::string& body);

  std::string what_;
  Subsys subsys_;
  int rank_;
  Clock::time_point start_;
  Clock::time_point deadline_;
  Millis timeout_;
  Millis interval_{0};
  Clock::time_point next_;
  int lines_ = 0;
};

}  // namespace symmem::detail
