// The nccl and nvshmem plugins load on a machine without a GPU (no unresolved symbols, their
// dependencies found through the rpath), answer what they support, and refuse CPU memory with a
// reason, and the nccl plugin loads no NCCL before it needs one. Runs everywhere (label unit); the
// GPU behaviour is in tests/nccl and tests/nvshmem.

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "symmem/backend.hpp"
#include "symmem/error.hpp"
#include "symmem/store.hpp"

namespace symmem {
namespace {

class PluginLoads : public ::testing::TestWithParam<std::string> {};

TEST_P(PluginLoads, LoadsAndDescribesItself) {
  const std::string name = GetParam();
  std::shared_ptr<Backend> b;
  try {
    b = get_backend(name);
  } catch (const Error& e) {
    FAIL() << "get_backend(\"" << name << "\") failed: " << e.what();
  }
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(std::string(b->name()), name);
  constexpr DeviceType gpu = DeviceType::cuda;
  for (int i = 0; i < kOpCount; ++i) {
    const OpInfo& op = op_table_rows()[i];
    EXPECT_TRUE(b->supports(op.kind, DType::f32, gpu)) << op.name;
    EXPECT_TRUE(b->supports(op.kind, DType::bf16, gpu)) << op.name;
    EXPECT_TRUE(b->supports(op.kind, DType::f8e4m3, gpu)) << op.name;
    // Reductions take the dtypes the cuda kernels reduce (gpu = 1 in the dtype table), i32, i64
    // and f64 too; every other op moves every dtype (NOTE [GPU dtypes] in cuda/gpu_rules.hpp).
    for (size_t t = 0; t < dtype_table_size(); ++t) {
      const DTypeInfo& row = dtype_table()[t];
      EXPECT_EQ(b->supports(op.kind, row.dtype, gpu), row.gpu_reduce || !op.reduces())
          << op.name << " " << row.short_name;
    }
    EXPECT_TRUE(b->supports(op.kind, DType::i64, gpu)) << op.name;
    EXPECT_FALSE(b->supports(op.kind, DType::f32, DeviceType::cpu)) << op.name;
  }
  EXPECT_TRUE(b->serves(gpu));
  EXPECT_FALSE(b->serves(DeviceType::cpu));
  auto g = Group::create(std::make_shared<HashStore>(), 0, 1);
  std::string why;
  EXPECT_FALSE(b->can_serve(g, Device::cpu(), &why));
  EXPECT_NE(why.find("CUDA devices only"), std::string::npos) << why;
  EXPECT_EQ(b->extension("no_such_entry_point"), nullptr);
  if (name == "nccl") {
    EXPECT_NE(b->extension("use_nccl_comm"), nullptr);
    // NOTE [which NCCL]: loading the plugin (and asking it what it serves) loads no NCCL; a
    // framework imported later brings its own.
    EXPECT_EQ(dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD), nullptr)
        << "the nccl plugin loaded libnccl.so.2 before its first NCCL call";
  }
}

INSTANTIATE_TEST_SUITE_P(Plugins, PluginLoads,
                         ::testing::Values(std::string("nccl"), std::string("nvshmem")));

}  // namespace
}  // namespace symmem
