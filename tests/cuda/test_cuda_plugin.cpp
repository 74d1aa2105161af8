// Loading the cuda plugin (one process; label unit, runs everywhere). Where there is no GPU or
// driver the registry must report BackendUnavailable with the reason (the loader's or cuInit's
// message); where there is a GPU the plugin loads and serves cuda devices.

#include <gtest/gtest.h>

#include <string>

#include "symmem/backend.hpp"
#include "test_util.hpp"

namespace symmem::test {
namespace {

TEST(CudaPlugin, LoadsOrSaysWhy) {
  std::string why;
  if (have_gpu(&why)) {
    auto b = get_backend("cuda");
    ASSERT_NE(b, nullptr);
    EXPECT_STREQ(b->name(), "cuda");
    EXPECT_TRUE(b->supports(OpKind::barrier, DType::f32, DeviceType::cuda));
    EXPECT_TRUE(b->supports(OpKind::all_reduce, DType::bf16, DeviceType::cuda));
    // Every row of the dtype table has gpu = 1 (NOTE [dtype table]): i32, i64, f64 too.
    for (DType t : {DType::f64, DType::i32, DType::i64, DType::f8e5m2}) {
      EXPECT_TRUE(b->supports(OpKind::all_reduce, t, DeviceType::cuda)) << to_string(t);
      EXPECT_TRUE(b->supports(OpKind::all_to_all_v, t, DeviceType::cuda)) << to_string(t);
    }
    // Data movement takes every dtype, reductions the gpu rows only (NOTE [GPU dtypes]).
    for (DType t : {DType::u8, DType::i8, DType::b8, DType::i16, DType::c64, DType::c128}) {
      for (OpKind k : {OpKind::all_gather, OpKind::all_to_all, OpKind::all_to_all_v,
                       OpKind::broadcast, OpKind::put, OpKind::get}) {
        EXPECT_TRUE(b->supports(k, t, DeviceType::cuda)) << to_string(k) << " " << to_string(t);
      }
      EXPECT_FALSE(b->supports(OpKind::all_reduce, t, DeviceType::cuda)) << to_string(t);
      EXPECT_FALSE(b->supports(OpKind::reduce_scatter, t, DeviceType::cuda)) << to_string(t);
    }
    EXPECT_FALSE(b->supports(OpKind::all_reduce, DType::bf16, DeviceType::cpu));
    EXPECT_TRUE(b->supports(OpKind::put, DType::f64, DeviceType::cuda));  // bytes: no dtype
  } else {
    expect_error([] { get_backend("cuda"); }, ErrorCode::BackendUnavailable,
                 {"cuda", "libcuda.so.1"});
  }
}

}  // namespace
}  // namespace symmem::test
