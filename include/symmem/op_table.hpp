#pragma once

// NOTE [op table]
// Every op is one row of SYMMEM_OPS. The OpKind enum, to_string, the core's argument checks
// (buffer sizes, in-place forms, the reduction argument), the collective agreement (which
// arguments the ranks must pass alike), the bus-bandwidth factor of symmem-bench, the Python
// bindings' shape checks and the torch custom ops (their schemas and fake kernels) all read it,
// so adding an op is adding a row plus its entry point and kernels (docs/design.md, "Adding an
// op"). Columns:
//   id        enumerator and name ("all_reduce")
//   count     the name of the op's count argument, as errors print it ("" when it has none)
//   send/recv elements of each buffer per rank, in units of `count`:
//               none (no such buffer), one (count), world (count * world_size),
//               root (count, read on the root only), var (given by counts arrays; all_to_all_v)
//   inplace   which send/recv pair is the op's in-place form:
//               no, same (recv == send), recv_block (recv is this rank's block of send),
//               send_block (send is this rank's block of recv)
//   kind      R reduction (takes a ReduceOp), C collective data movement, P one-sided, S sync
//   agree     what every rank must pass alike (collective agreement; `|`-joined flags):
//               count, dtype, redop, algo, root, known (recv_counts_known), none
//   busbw     nccl-tests' bus-bandwidth factor: ar 2(n-1)/n, ring (n-1)/n, one 1, none 0
//   py        the Python/torch argument list after the op's tensors' names: the torch schema
//             of the custom op symmem::<id> (Tensor(a!) marks a tensor the op writes)
// clang-format off
#define SYMMEM_OPS(X)                                                                           \
  /* id           count          send  recv   inplace     kind agree                     busbw */ \
  X(all_reduce,     "count",       one,  one,   same,       R, count|dtype|redop|algo,   ar,     \
    "Tensor(a!) x, str op='sum', str algo='auto', str group=''")                                \
  X(reduce_scatter, "recv_count",  world, one,  recv_block, R, count|dtype|redop,        ring,   \
    "Tensor send, Tensor(a!) recv, str op='sum', str group=''")                                 \
  X(all_gather,     "send_count",  one,  world, send_block, C, count|dtype,              ring,   \
    "Tensor send, Tensor(a!) recv, str group=''")                                               \
  X(all_to_all,     "count",       world, world, same,      C, count|dtype,              ring,   \
    "Tensor send, Tensor(a!) recv, str group=''")                                               \
  X(all_to_all_v,   "recv_capacity", var, var,  no,         C, dtype|known,              ring,   \
    "Tensor send, Tensor send_counts, Tensor(a!) recv, Tensor(b!) recv_counts, "                \
    "Tensor(c!) recv_offsets, bool recv_counts_known=False, str group=''")                      \
  X(broadcast,      "count",       root, one,   same,       C, count|dtype|root,         one,    \
    "Tensor(a!) x, int root=0, str group=''")                                                   \
  X(put,            "bytes",       none, none,  no,         P, none,                     one,    \
    "Tensor(a!) dst, Tensor src, int peer, int offset=0, bool signal=False, int channel=0")     \
  X(get,            "bytes",       none, none,  no,         P, none,                     one,    \
    "Tensor src, Tensor(a!) dst, int peer, int offset=0, bool signal=False, int channel=0")     \
  X(barrier,        "",            none, none,  no,         S, none,                     none,   \
    "")
// clang-format on

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "symmem/export.hpp"
#include "symmem/types.hpp"

namespace symmem {

enum class OpKind : int {
#define SYMMEM_OP_ENUM_(id, ...) id,
  SYMMEM_OPS(SYMMEM_OP_ENUM_)
#undef SYMMEM_OP_ENUM_
      kCount
};
inline constexpr int kOpCount = static_cast<int>(OpKind::kCount);

namespace op_table {
enum class Blocks : uint8_t { none, one, world, root, var };
enum class InPlace : uint8_t { no, same, recv_block, send_block };
enum class Kind : uint8_t { R, C, P, S };
enum class BusBw : uint8_t { ar, ring, one, none };
// Agreement flags (the `agree` column).
inline constexpr uint32_t none = 0, count = 1, dtype = 2, redop = 4, algo = 8, root = 16,
                          known = 32;
}  // namespace op_table

struct OpInfo {
  OpKind kind;
  const char* name;       // "all_reduce"
  const char* count_arg;  // "recv_count"; "" when the op has no count
  op_table::Blocks send, recv;
  op_table::InPlace in_place;
  op_table::Kind op_kind;
  uint32_t agree;  // op_table::count | ...
  op_table::BusBw busbw;
  const char* py_signature;  // the torch schema's arguments (column `py`)

  bool reduces() const { return op_kind == op_table::Kind::R; }
  // Collectives move typed elements over the whole group (reductions and data movement).
  bool collective() const { return op_kind == op_table::Kind::R || op_kind == op_table::Kind::C; }
  bool must_agree(uint32_t what) const { return (agree & what) != 0; }
};

// Every row, in enum order (kOpCount of them).
SYMMEM_API const OpInfo* op_table_rows() noexcept;
SYMMEM_API const OpInfo& op_info(OpKind k);  // InvalidArgument for a value that is no row
SYMMEM_API const OpInfo* find_op(std::string_view name) noexcept;  // nullptr: no such op
SYMMEM_API const char* to_string(OpKind k) noexcept;
// The columns' values by name, as symmem.op_table() shows them: "world", "recv_block",
// "reduction" / "collective" / "one_sided" / "sync".
SYMMEM_API const char* to_string(op_table::Blocks b) noexcept;
SYMMEM_API const char* to_string(op_table::InPlace p) noexcept;
SYMMEM_API const char* to_string(op_table::Kind k) noexcept;
// The `agree` flags with the argument each stands for ("op" for redop), in the order
// symmem.op_table() lists them.
struct AgreeFlag {
  uint32_t flag;
  const char* arg;
};
inline constexpr AgreeFlag kAgreeFlags[] = {
    {op_table::count, "count"}, {op_table::dtype, "dtype"}, {op_table::redop, "op"},
    {op_table::algo, "algo"},   {op_table::root, "root"},   {op_table::known, "recv_counts_known"}};

// Elements of a buffer with `b` blocks of `count` elements for a group of `world` ranks
// (none/var: 0).
constexpr size_t block_elems(op_table::Blocks b, size_t count, int world) {
  switch (b) {
    case op_table::Blocks::one:
    case op_table::Blocks::root:
      return count;
    case op_table::Blocks::world:
      return count * static_cast<size_t>(world);
    default:
      return 0;
  }
}

// nccl-tests' bus bandwidth factor (doc/PERFORMANCE.md there): busbw = algbw * factor.
constexpr double busbw_factor(op_table::BusBw b, int world) {
  const double n = world;
  switch (b) {
    case op_table::BusBw::ar:
      return n > 1 ? 2.0 * (n - 1) / n : 0.0;
    case op_table::BusBw::ring:
      return n > 1 ? (n - 1) / n : 0.0;
    case op_table::BusBw::one:
      return 1.0;
    default:
      return 0.0;
  }
}

// ---- what a backend serves, as data ------------------------------------------------------------
// A backend lists rules; (op, dtype, device type) is served when some rule holds all three. The
// dtype of one-sided ops and of barrier is not looked at. Anything no rule holds is Unsupported,
// and the error names the backends whose rules hold it.
struct OpSet {
  uint32_t bits = 0;
  static constexpr OpSet all() { return OpSet{(1u << kOpCount) - 1}; }
  static constexpr OpSet of(std::initializer_list<OpKind> ops) {
    OpSet s;
    for (OpKind k : ops) s.bits |= 1u << static_cast<int>(k);
    return s;
  }
  constexpr bool has(OpKind k) const { return (bits >> static_cast<int>(k)) & 1u; }
};
#define SYMMEM_DTYPE_BIT_ALL_(id, value, ...) | (uint64_t{1} << (value))
#define SYMMEM_DTYPE_BIT_GPU_(id, value, size, dl, kind, gpu, ...) | (uint64_t{gpu} << (value))
#define SYMMEM_DTYPE_BIT_RED_(id, value, size, dl, kind, gpu, nccl, name, a1, a2, red) \
  | (uint64_t{red} << (value))
struct DTypeSet {
  uint64_t bits = 0;
  // Every row of the dtype table.
  static constexpr DTypeSet all() { return DTypeSet{0 SYMMEM_DTYPES(SYMMEM_DTYPE_BIT_ALL_)}; }
  // The rows whose `gpu` column is 1: what the library's CUDA kernels reduce (NOTE [dtype
  // table]).
  static constexpr DTypeSet gpu_reducible() {
    return DTypeSet{0 SYMMEM_DTYPES(SYMMEM_DTYPE_BIT_GPU_)};
  }
  // The rows whose `red` column is 1: what reductions take.
  static constexpr DTypeSet reducible() { return DTypeSet{0 SYMMEM_DTYPES(SYMMEM_DTYPE_BIT_RED_)}; }
  constexpr bool has(DType t) const {
    const auto v = static_cast<unsigned>(t);
    return v < 64 && ((bits >> v) & 1u) != 0;
  }
};
#undef SYMMEM_DTYPE_BIT_ALL_
#undef SYMMEM_DTYPE_BIT_GPU_
#undef SYMMEM_DTYPE_BIT_RED_
struct DeviceTypeSet {
  uint32_t bits = 0;
  static constexpr DeviceTypeSet of(DeviceType t) {
    return DeviceTypeSet{1u << static_cast<int>(t)};
  }
  constexpr bool has(DeviceType t) const { return (bits >> static_cast<int>(t)) & 1u; }
};
struct OpSupport {
  OpSet ops;
  DTypeSet dtypes;
  DeviceTypeSet devices;
};

}  // namespace symmem
