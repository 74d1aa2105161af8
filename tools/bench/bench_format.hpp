#pragma once

// Pure parts of symmem-bench: the ops it runs and their bus-bandwidth factors (from the op
// table), size parsing, the time statistics, the table/JSON row formats, what a size means per op
// (for --help) and the ranks' CPU lists. Header-only so that tests can check them without running
// ranks.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "symmem/op_table.hpp"

namespace symmem::bench {

// The ops symmem-bench runs: the collectives of the op table (NOTE [op table]), in its order.
inline const std::vector<OpKind>& all_ops() {
  static const std::vector<OpKind> ops = [] {
    std::vector<OpKind> v;
    for (int i = 0; i < kOpCount; ++i)
      if (op_table_rows()[i].collective()) v.push_back(op_table_rows()[i].kind);
    return v;
  }();
  return ops;
}

inline const char* op_name(OpKind op) {
  return to_string(op);
}

inline bool parse_op(const std::string& s, OpKind* out) {
  const OpInfo* row = find_op(s);
  if (row == nullptr || !row->collective()) return false;
  *out = row->kind;
  return true;
}

inline bool is_reduction(OpKind op) {
  return op_info(op).reduces();
}

// nccl-tests (doc/PERFORMANCE.md): busbw = algbw * factor (the row's busbw column).
inline double busbw_factor(OpKind op, int ranks) {
  return symmem::busbw_factor(op_info(op).busbw, ranks);
}

// "4096", "4K", "4KiB", "16M", "1G" (powers of 1024). Throws std::invalid_argument.
inline size_t parse_size(const std::string& s) {
  size_t pos = 0;
  unsigned long long v = std::stoull(s, &pos);
  std::string suffix = s.substr(pos);
  unsigned long long mult = 1;
  if (suffix.empty() || suffix == "B")
    mult = 1;
  else if (suffix == "K" || suffix == "k" || suffix == "KiB" || suffix == "KB")
    mult = 1ull << 10;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB" || suffix == "MB")
    mult = 1ull << 20;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB" || suffix == "GB")
    mult = 1ull << 30;
  else
    throw std::invalid_argument("bad size suffix in '" + s + "'");
  return static_cast<size_t>(v * mult);
}

// Spread of per-iteration times (each iteration's time is the slowest rank's).
struct Spread {
  double median_us = NAN, min_us = NAN, max_us = NAN;
};

inline Spread spread_of(std::vector<double> t) {
  Spread s;
  if (t.empty()) return s;
  std::sort(t.begin(), t.end());
  const size_t n = t.size();
  s.median_us = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
  s.min_us = t.front();
  s.max_us = t.back();
  return s;
}

struct Row {
  std::string op, backend, algo, dtype, redop;
  std::string chosen = "-";  // the algorithm that ran (all_reduce: what auto chose)
  int ranks = 0;
  size_t bytes = 0, count = 0;
  double time_us = 0, algbw_gbps = 0, busbw_gbps = 0;
  long long wrong = 0;  // -1: not checked
  int iters = 0;
  Spread spread;  // NaN: not measured
};

inline Row make_row(OpKind op, int ranks, size_t bytes, size_t count, double time_us) {
  Row r;
  r.op = op_name(op);
  r.ranks = ranks;
  r.bytes = bytes;
  r.count = count;
  r.time_us = time_us;
  r.algbw_gbps = time_us > 0 ? static_cast<double>(bytes) / (time_us * 1e3) : 0.0;
  r.busbw_gbps = r.algbw_gbps * busbw_factor(op, ranks);
  return r;
}

// nccl-tests' columns first (size count type redop time algbw busbw #wrong), then the spread.
inline std::string table_header() {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "#%12s %12s %6s %6s   %10s %12s %12s %8s   %9s %9s %9s  %s\n",
                "size", "count", "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
                "#wrong", "med(us)", "min(us)", "max(us)", "algo");
  return buf;
}

namespace detail {
inline std::string fixed(double v, int width, int prec) {
  char buf[64];
  if (std::isnan(v))
    std::snprintf(buf, sizeof(buf), "%*s", width, "N/A");
  else
    std::snprintf(buf, sizeof(buf), "%*.*f", width, prec, v);
  return buf;
}
inline std::string json_number(double v, int prec) {
  if (std::isnan(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", prec, v);
  return buf;
}
}  // namespace detail

inline std::string table_row(const Row& r) {
  char buf[256];
  std::string wrong = r.wrong < 0 ? "N/A" : std::to_string(r.wrong);
  std::snprintf(buf, sizeof(buf),
                " %12zu %12zu %6s %6s   %10.2f %12.2f %12.2f %8s   %s %s %s  %s\n", r.bytes,
                r.count, r.dtype.c_str(), r.redop.c_str(), r.time_us, r.algbw_gbps, r.busbw_gbps,
                wrong.c_str(), detail::fixed(r.spread.median_us, 9, 2).c_str(),
                detail::fixed(r.spread.min_us, 9, 2).c_str(),
                detail::fixed(r.spread.max_us, 9, 2).c_str(), r.chosen.c_str());
  return buf;
}

inline std::string json_row(const Row& r) {
  char buf[768];
  std::snprintf(buf, sizeof(buf),
                "{\"op\": \"%s\", \"backend\": \"%s\", \"algo\": \"%s\", \"dtype\": \"%s\", "
                "\"redop\": \"%s\", \"ranks\": %d, \"bytes\": %zu, \"count\": %zu, "
                "\"time_us\": %.3f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"wrong\": %lld, "
                "\"iters\": %d, \"time_median_us\": %s, \"time_min_us\": %s, "
                "\"time_max_us\": %s, \"algo_ran\": \"%s\"}\n",
                r.op.c_str(), r.backend.c_str(), r.algo.c_str(), r.dtype.c_str(), r.redop.c_str(),
                r.ranks, r.bytes, r.count, r.time_us, r.algbw_gbps, r.busbw_gbps, r.wrong, r.iters,
                detail::json_number(r.spread.median_us, 3).c_str(),
                detail::json_number(r.spread.min_us, 3).c_str(),
                detail::json_number(r.spread.max_us, 3).c_str(), r.chosen.c_str());
  return buf;
}

// Whether the op's count is per rank: a buffer holds world_size blocks of it (all_to_all_v, whose
// blocks vary, is timed with world_size equal blocks), so count = size / dtype bytes / N.
inline bool count_is_per_rank(const OpInfo& row) {
  using op_table::Blocks;
  auto split = [](Blocks b) { return b == Blocks::world || b == Blocks::var; };
  return split(row.send) || split(row.recv);
}

// ---- --help: what a size means for each op, from the op table
// ------------------------------------
inline const char* blocks_text(op_table::Blocks b) {
  switch (b) {
    case op_table::Blocks::one:
      return "c";
    case op_table::Blocks::world:
      return "c x N";
    case op_table::Blocks::root:
      return "c (root's)";
    case op_table::Blocks::var:
      return "N blocks";
    default:
      return "-";
  }
}

// One line per op: its buffers per rank in units of its count argument c (N ranks), and how the
// size given with -b/-e becomes c (the count is the larger buffer's, as in shape_of()).
inline std::string size_help() {
  using op_table::Blocks;
  std::string out;
  for (OpKind k : all_ops()) {
    const OpInfo& row = op_info(k);
    const bool per_rank = count_is_per_rank(row);
    const bool send_larger = row.send == Blocks::world && row.recv != Blocks::world;
    const bool recv_larger = row.recv == Blocks::world && row.send != Blocks::world;
    std::string size_is = send_larger   ? "the send buffer"
                          : recv_larger ? "the receive buffer"
                                        : "each buffer";
    std::string c = std::string(row.count_arg) + " = size / dtype bytes" + (per_rank ? " / N" : "");
    if (row.send == Blocks::var) c += " (timed with N equal blocks)";
    char buf[256];
    std::snprintf(buf, sizeof(buf), "    %-15s send %-10s recv %-10s size = %s; %s\n", row.name,
                  blocks_text(row.send), blocks_text(row.recv), size_is.c_str(), c.c_str());
    out += buf;
  }
  return out;
}

// ---- the ranks' CPUs
// ----------------------------------------------------------------------------- "0-3,8,10,11" from
// the set bits of a CPU mask (64 CPUs a word).
inline std::string cpu_list(const uint64_t* words, size_t nwords) {
  std::string s;
  const int total = static_cast<int>(nwords * 64);
  auto on = [&](int c) { return c < total && ((words[c / 64] >> (c % 64)) & 1u) != 0; };
  for (int c = 0; c < total;) {
    if (!on(c)) {
      ++c;
      continue;
    }
    int e = c;
    while (on(e + 1)) ++e;
    if (!s.empty()) s += ',';
    s += std::to_string(c);
    if (e > c) s += (e == c + 1 ? "," : "-") + std::to_string(e);
    c = e + 1;
  }
  return s.empty() ? "none" : s;
}

// Header lines naming each rank's CPUs ("# cpus: rank 0: 0, rank 1: 1"), wrapped; one line when
// every rank has the same mask (then they are not bound apart).
inline std::string binding_lines(const std::vector<std::string>& per_rank) {
  if (per_rank.empty()) return "";
  const bool same = std::all_of(per_rank.begin(), per_rank.end(),
                                [&](const std::string& s) { return s == per_rank[0]; });
  if (same && per_rank.size() > 1)
    return "# cpus (sched_getaffinity): every rank " + per_rank[0] + "\n";
  std::string out, line = "# cpus (sched_getaffinity):";
  for (size_t r = 0; r < per_rank.size(); ++r) {
    std::string item =
        " rank " + std::to_string(r) + ": " + per_rank[r] + (r + 1 < per_rank.size() ? "," : "");
    if (line.size() + item.size() > 96 && line != "# cpus (sched_getaffinity):" && line != "#  ") {
      out += line + "\n";
      line = "#  ";
    }
    line += item;
  }
  return out + line + "\n";
}

}  // namespace symmem::bench
