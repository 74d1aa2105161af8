#pragma once

// Pure parts of symmem-bench: the ops it runs and their bus-bandwidth factors (from the op
// table), size parsing, and the table/JSON row formats. Header-only so that tests can check them
// without running ranks.

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

struct Row {
  std::string op, backend, algo, dtype, redop;
  int ranks = 0;
  size_t bytes = 0, count = 0;
  double time_us = 0, algbw_gbps = 0, busbw_gbps = 0;
  long long wrong = 0;  // -1: not checked
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

inline std::string table_header() {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "#%12s %12s %6s %6s   %10s %12s %12s %8s\n", "size", "count",
                "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  return buf;
}

inline std::string table_row(const Row& r) {
  char buf[256];
  std::string wrong = r.wrong < 0 ? "N/A" : std::to_string(r.wrong);
  std::snprintf(buf, sizeof(buf), " %12zu %12zu %6s %6s   %10.2f %12.2f %12.2f %8s\n", r.bytes,
                r.count, r.dtype.c_str(), r.redop.c_str(), r.time_us, r.algbw_gbps, r.busbw_gbps,
                wrong.c_str());
  return buf;
}

inline std::string json_row(const Row& r) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "{\"op\": \"%s\", \"backend\": \"%s\", \"algo\": \"%s\", \"dtype\": \"%s\", "
                "\"redop\": \"%s\", \"ranks\": %d, \"bytes\": %zu, \"count\": %zu, "
                "\"time_us\": %.3f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"wrong\": %lld}\n",
                r.op.c_str(), r.backend.c_str(), r.algo.c_str(), r.dtype.c_str(), r.redop.c_str(),
                r.ranks, r.bytes, r.count, r.time_us, r.algbw_gbps, r.busbw_gbps, r.wrong);
  return buf;
}

}  // namespace symmem::bench
