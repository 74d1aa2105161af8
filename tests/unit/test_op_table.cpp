// The op table (NOTE [op table]): its rows, the helpers computed from them, and what backends
// serve as data (anything outside a backend's rules is Unsupported, naming who serves it).
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

#include "symmem/backend.hpp"
#include "symmem/error.hpp"
#include "symmem/memory.hpp"
#include "symmem/ops.hpp"
#include "symmem/store.hpp"
#include "test_util.hpp"

namespace symmem::test {
namespace {

TEST(OpTable, RowsAreInEnumOrderWithUniqueNames) {
  std::set<std::string> names;
  for (int i = 0; i < kOpCount; ++i) {
    const OpInfo& row = op_table_rows()[i];
    EXPECT_EQ(static_cast<int>(row.kind), i);
    EXPECT_TRUE(names.insert(row.name).second) << row.name;
    EXPECT_STREQ(to_string(row.kind), row.name);
    ASSERT_NE(find_op(row.name), nullptr);
    EXPECT_EQ(find_op(row.name)->kind, row.kind);
    // Collectives are typed and have a count; their schema starts with their tensors.
    if (row.collective()) {
      EXPECT_NE(std::string(row.count_arg), "") << row.name;
      EXPECT_EQ(std::string(row.py_signature).rfind("Tensor", 0), 0u) << row.name;
      EXPECT_TRUE(row.must_agree(op_table::dtype)) << row.name;
    }
  }
  EXPECT_EQ(find_op("allreduce"), nullptr);
  EXPECT_STREQ(to_string(static_cast<OpKind>(99)), "unknown");
  expect_error([] { (void)op_info(static_cast<OpKind>(99)); }, ErrorCode::InvalidArgument,
               {"kind", "99"});
}

TEST(OpTable, ShapesAndBusBandwidth) {
  const OpInfo& rs = op_info(OpKind::reduce_scatter);
  EXPECT_EQ(block_elems(rs.send, 10, 4), 40u);
  EXPECT_EQ(block_elems(rs.recv, 10, 4), 10u);
  EXPECT_EQ(rs.in_place, op_table::InPlace::recv_block);
  EXPECT_TRUE(rs.reduces());
  const OpInfo& ag = op_info(OpKind::all_gather);
  EXPECT_EQ(block_elems(ag.send, 10, 4), 10u);
  EXPECT_EQ(block_elems(ag.recv, 10, 4), 40u);
  EXPECT_FALSE(ag.reduces());
  EXPECT_EQ(block_elems(op_info(OpKind::all_to_all_v).send, 10, 4), 0u);  // given by counts
  EXPECT_DOUBLE_EQ(busbw_factor(op_info(OpKind::all_reduce).busbw, 4), 1.5);
  EXPECT_DOUBLE_EQ(busbw_factor(rs.busbw, 8), 0.875);
  EXPECT_DOUBLE_EQ(busbw_factor(op_info(OpKind::broadcast).busbw, 8), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(op_info(OpKind::all_reduce).busbw, 1), 0.0);
  EXPECT_TRUE(op_info(OpKind::all_reduce).must_agree(op_table::algo));
  EXPECT_FALSE(op_info(OpKind::all_gather).must_agree(op_table::redop));
  EXPECT_TRUE(op_info(OpKind::broadcast).must_agree(op_table::root));
}

TEST(OpTable, DTypeSetsComeFromTheDTypeTable) {
  for (size_t i = 0; i < dtype_table_size(); ++i) {
    const DTypeInfo& row = dtype_table()[i];
    EXPECT_TRUE(DTypeSet::all().has(row.dtype)) << row.name;
    EXPECT_EQ(DTypeSet::gpu_reducible().has(row.dtype), row.gpu_reduce) << row.name;
  }
  EXPECT_FALSE(DTypeSet::all().has(static_cast<DType>(63)));
  EXPECT_FALSE(DTypeSet::all().has(static_cast<DType>(-1)));
}

// A backend that serves CPU barriers only: its rules are all the core looks at.
class BarrierOnly final : public Backend {
 public:
  BarrierOnly()
      : Backend({{OpSet::of({OpKind::barrier}), DTypeSet{}, DeviceTypeSet::of(DeviceType::cpu)}}) {}
  const char* name() const override { return "barrieronly"; }
  bool can_serve(const Group&, Device d, std::string*) const override { return !d.is_cuda(); }
  std::shared_ptr<BackendMemory> allocate(const Group&, const RendezvousInfo&) override {
    return nullptr;
  }
  void run(const OpArgs& a) override { ran = a.kind; }
  OpKind ran = OpKind::kCount;
};

TEST(OpTable, AnOpOutsideABackendsRulesIsUnsupportedNamingWhoServesIt) {
  auto b = std::make_shared<BarrierOnly>();
  register_backend(b);
  EXPECT_TRUE(b->supports(OpKind::barrier, DType::f64, DeviceType::cpu));  // untyped
  EXPECT_FALSE(b->supports(OpKind::barrier, DType::f32, DeviceType::cuda));
  EXPECT_FALSE(b->supports(OpKind::all_reduce, DType::f32, DeviceType::cpu));
  EXPECT_TRUE(b->serves(DeviceType::cpu));
  EXPECT_FALSE(b->serves(DeviceType::cuda));
  select_backend("barrieronly");
  auto g = Group::create(std::make_shared<HashStore>(), 0, 1);
  float x[4] = {1, 2, 3, 4}, y[4] = {};
  expect_error([&] { all_reduce(x, y, 4, DType::f32, ReduceOp::sum, g); }, ErrorCode::Unsupported,
               {"all_reduce: rank 0", "backend 'barrieronly' has no all_reduce for dtype f32",
                "CPU buffers", "backends that have it: host"});
  expect_error([&] { all_gather(x, y, 4, DType::bf16, g); }, ErrorCode::Unsupported,
               {"has no all_gather for dtype bf16", "have it: host"});
  barrier(g);
  EXPECT_EQ(b->ran, OpKind::barrier);
}

// The reductions' dtype set is the table's `red` column; the byte dtypes are moved only.
TEST(OpTable, ReducibleIsTheRedColumn) {
  size_t moved_only = 0;
  for (size_t i = 0; i < dtype_table_size(); ++i) {
    const DTypeInfo& row = dtype_table()[i];
    EXPECT_EQ(DTypeSet::reducible().has(row.dtype), row.reducible) << row.name;
    if (row.gpu_reduce) {
      EXPECT_TRUE(row.reducible) << row.name << ": the GPU reduces it";
    }
    moved_only += row.reducible ? 0 : 1;
  }
  EXPECT_EQ(moved_only, 9u);
  EXPECT_FALSE(DTypeSet::reducible().has(DType::u8));
  EXPECT_TRUE(DTypeSet::reducible().has(DType::f8e5m2));
  EXPECT_EQ(dtype_size(DType::c128), 16u);
  EXPECT_EQ(parse_dtype("bool"), DType::b8);
  EXPECT_EQ(parse_dtype("cfloat"), DType::c64);
}

}  // namespace
}  // namespace symmem::test
