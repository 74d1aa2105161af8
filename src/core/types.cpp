#include "symmem/types.hpp"

#include <string>

#include "symmem/error.hpp"

namespace symmem {

std::string to_string(Device d) {
  if (d.type == DeviceType::cpu) return "cpu";
  return "cuda:" + std::to_string(d.index);
}

namespace {

// SYMMEM_DTYPES expanded into rows (NOTE [dtype table]).
#define SYMMEM_DTYPE_ROW_(id, value, size, dl, kind, gpu, nccl, name, alias1, alias2, red) \
  DTypeInfo{DType::id, #id, name, alias1, alias2, size, dl, #kind[0] == 'F', gpu != 0, red != 0},
constexpr DTypeInfo kTable[] = {SYMMEM_DTYPES(SYMMEM_DTYPE_ROW_)};
#undef SYMMEM_DTYPE_ROW_
constexpr size_t kTableSize = sizeof(kTable) / sizeof(kTable[0]);

std::string dtype_names() {
  std::string s;
  for (const auto& row : kTable) s += std::string(s.empty() ? "" : ", ") + row.short_name;
  return s;
}

}  // namespace

const DTypeInfo* dtype_table() noexcept {
  return kTable;
}
const DTypeInfo* find_dtype(DType t) noexcept {
  // The rows are declared in value order (0, 1, ...), so the value is the row's index; the scan
  // is for a table that ever stops being so.
  const auto i = static_cast<size_t>(t);
  if (i < kTableSize && kTable[i].dtype == t) return &kTable[i];
  for (const auto& row : kTable)
    if (row.dtype == t) return &row;
  return nullptr;
}
const DTypeInfo* find_dtype(std::string_view n) noexcept {
  for (const auto& row : kTable) {
    if (n == row.short_name || n == row.name || (*row.alias1 != 0 && n == row.alias1) ||
        (*row.alias2 != 0 && n == row.alias2))
      return &row;
  }
  return nullptr;
}
size_t dtype_table_size() noexcept {
  return kTableSize;
}

const DTypeInfo& dtype_info(DType t) {
  if (const DTypeInfo* row = find_dtype(t)) return *row;
  throw_invalid_argument("dtype_info", -1, "dtype",
                         "has unknown value " + std::to_string(static_cast<int>(t)));
}

size_t dtype_size(DType t) {
  if (const DTypeInfo* row = find_dtype(t)) return row->size;
  throw_invalid_argument("dtype_size", -1, "dtype",
                         "has unknown value " + std::to_string(static_cast<int>(t)));
}

const char* to_string(DType t) noexcept {
  const DTypeInfo* row = find_dtype(t);
  return row != nullptr ? row->short_name : "unknown";
}

const char* to_string(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::min:
      return "min";
    case ReduceOp::max:
      return "max";
  }
  return "unknown";
}

const char* to_string(Algo a) noexcept {
  switch (a) {
    case Algo::automatic:
      return "auto";
    case Algo::one_shot:
      return "one_shot";
    case Algo::two_shot:
      return "two_shot";
  }
  return "unknown";
}

DType parse_dtype(std::string_view n, std::string_view what) {
  if (const DTypeInfo* row = find_dtype(n)) return row->dtype;
  throw_invalid_argument("parse_dtype", -1, what,
                         "'" + std::string(n) + "' is not a dtype (" + dtype_names() + ")");
}

ReduceOp parse_reduce_op(std::string_view n, std::string_view what) {
  if (n == "sum") return ReduceOp::sum;
  if (n == "avg") return ReduceOp::avg;
  if (n == "min") return ReduceOp::min;
  if (n == "max") return ReduceOp::max;
  throw_invalid_argument("parse_reduce_op", -1, what,
                         "'" + std::string(n) + "' is not a reduction (sum, avg, min, max)");
}

Algo parse_algo(std::string_view n, std::string_view what) {
  if (n == "auto") return Algo::automatic;
  if (n == "one_shot") return Algo::one_shot;
  if (n == "two_shot") return Algo::two_shot;
  throw_invalid_argument("parse_algo", -1, what,
                         "'" + std::string(n) + "' is not an algorithm (auto, one_shot, two_shot)");
}

namespace {
constexpr const char* kSignalOps[] = {"set", "add"};
constexpr const char* kCmps[] = {"eq", "ne", "gt", "ge", "lt", "le"};
}  // namespace

const char* to_string(SignalOp op) noexcept {
  const auto i = static_cast<unsigned>(op);
  return i < 2 ? kSignalOps[i] : "unknown";
}

const char* to_string(Cmp cmp) noexcept {
  const auto i = static_cast<unsigned>(cmp);
  return i < 6 ? kCmps[i] : "unknown";
}

SignalOp parse_signal_op(std::string_view n, std::string_view what) {
  for (int i = 0; i < 2; ++i) {
    if (n == kSignalOps[i]) return static_cast<SignalOp>(i);
  }
  throw_invalid_argument("parse_signal_op", -1, what,
                         "'" + std::string(n) + "' is not a signal op (set, add)");
}

Cmp parse_cmp(std::string_view n, std::string_view what) {
  for (int i = 0; i < 6; ++i) {
    if (n == kCmps[i]) return static_cast<Cmp>(i);
  }
  throw_invalid_argument("parse_cmp", -1, what,
                         "'" + std::string(n) + "' is not a comparison (eq, ne, gt, ge, lt, le)");
}

}  // namespace symmem
