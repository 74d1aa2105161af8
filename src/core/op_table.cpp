// The rows of SYMMEM_OPS (NOTE [op table] in symmem/op_table.hpp) and what backends serve.

#include "symmem/op_table.hpp"

#include <iterator>
#include <string>

#include "symmem/backend.hpp"
#include "symmem/error.hpp"

namespace symmem {
namespace {

using namespace op_table;  // the table's column values: one, world, same, R, count|dtype, ...

constexpr OpInfo kRows[] = {
#define SYMMEM_OP_ROW_(id, count_arg, send, recv, inplace, kind, agree, busbw, py) \
  OpInfo{OpKind::id,       #id,        count_arg, Blocks::send, Blocks::recv,      \
         InPlace::inplace, Kind::kind, (agree),   BusBw::busbw, py},
    SYMMEM_OPS(SYMMEM_OP_ROW_)
#undef SYMMEM_OP_ROW_
};
static_assert(sizeof(kRows) / sizeof(kRows[0]) == kOpCount);

constexpr bool rows_in_enum_order() {
  for (int i = 0; i < kOpCount; ++i)
    if (static_cast<int>(kRows[i].kind) != i) return false;
  return true;
}
static_assert(rows_in_enum_order());

}  // namespace

const OpInfo* op_table_rows() noexcept {
  return kRows;
}

const OpInfo& op_info(OpKind k) {
  const auto i = static_cast<unsigned>(k);
  if (i >= static_cast<unsigned>(kOpCount))
    throw_invalid_argument("op_info", -1, "kind", "has unknown value " + std::to_string(i));
  return kRows[i];
}

const OpInfo* find_op(std::string_view name) noexcept {
  for (const OpInfo& row : kRows)
    if (name == row.name) return &row;
  return nullptr;
}

const char* to_string(OpKind k) noexcept {
  const auto i = static_cast<unsigned>(k);
  return i < static_cast<unsigned>(kOpCount) ? kRows[i].name : "unknown";
}

const char* to_string(op_table::Blocks b) noexcept {
  static const char* const names[] = {"none", "one", "world", "root", "var"};
  const auto i = static_cast<unsigned>(b);
  return i < std::size(names) ? names[i] : "unknown";
}

const char* to_string(op_table::InPlace p) noexcept {
  static const char* const names[] = {"no", "same", "recv_block", "send_block"};
  const auto i = static_cast<unsigned>(p);
  return i < std::size(names) ? names[i] : "unknown";
}

const char* to_string(op_table::Kind k) noexcept {
  static const char* const names[] = {"reduction", "collective", "one_sided", "sync"};
  const auto i = static_cast<unsigned>(k);
  return i < std::size(names) ? names[i] : "unknown";
}

bool Backend::supports(OpKind kind, DType dtype, DeviceType device) const {
  const auto i = static_cast<unsigned>(kind);
  if (i >= static_cast<unsigned>(kOpCount)) return false;
  const bool typed = kRows[i].collective();
  for (const OpSupport& rule : serves_) {
    if (rule.ops.has(kind) && rule.devices.has(device) && (!typed || rule.dtypes.has(dtype)))
      return true;
  }
  return false;
}

bool Backend::serves(DeviceType type) const {
  for (const OpSupport& rule : serves_)
    if (rule.devices.has(type)) return true;
  return false;
}

}  // namespace symmem
