// NVTX ranges (NOTE [nvtx ranges] in src/core/trace.hpp), seen by a real NVTX tool: the test's
// injection library (nvtx_inject.cpp, through NVTX_INJECTION64_PATH) logs every range of the
// process; one rank runs each op once on the host backend and the log must hold one range per
// op in domain "symmem" with its fields, plus the group rendezvous. Exit 77 (skipped) when the
// library was built without the NVTX3 headers.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/trace.hpp"
#include "symmem/symmem.hpp"

namespace symmem {
namespace {

std::vector<std::string> log_lines() {
  std::ifstream f(std::getenv("SYMMEM_NVTX_LOG"));
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);) out.push_back(l);
  return out;
}

// The "symmem" ranges pushed since `from`, as {message, payload}.
std::vector<std::pair<std::string, std::string>> pushes(size_t from) {
  std::vector<std::pair<std::string, std::string>> out;
  auto lines = log_lines();
  for (size_t i = from; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.rfind("push symmem ", 0) != 0) continue;
    std::string rest = l.substr(12);
    const size_t sp = rest.find(' ');
    out.emplace_back(rest.substr(sp + 1), rest.substr(0, sp));
  }
  return out;
}

int count_prefix(const std::vector<std::string>& lines, const std::string& p) {
  int n = 0;
  for (const auto& l : lines) n += l.rfind(p, 0) == 0;
  return n;
}

TEST(Nvtx, EveryOpIsARangeWithItsFields) {
  auto g = Group::create(std::make_shared<HashStore>(), 0, 1);
  ASSERT_GE(log_lines().size(), 2u) << "the injection library was not loaded";
  {
    auto p = pushes(0);
    ASSERT_FALSE(p.empty());
    EXPECT_EQ(p[0].first, "group_create rendezvous");
  }
  constexpr size_t n = 256;
  auto buf = allocate(g, n * sizeof(float) * 2, Device::cpu());
  auto* x = static_cast<float*>(buf.ptr(0));
  for (size_t i = 0; i < 2 * n; ++i) x[i] = 1.0f;
  size_t mark = log_lines().size();
  all_reduce(buf, n, DType::f32, ReduceOp::sum);
  auto p = pushes(mark);
  ASSERT_EQ(p.size(), 1u);
  const std::string& m = p[0].first;
  for (const char* field : {"all_reduce ", "bytes=1024", "count=256", "dtype=f32", "redop=sum",
                            "algo=", "backend=host", "device=cpu", "group=", "seq=2"}) {
    EXPECT_NE(m.find(field), std::string::npos) << field << " missing in: " << m;
  }
  EXPECT_EQ(p[0].second, "1024") << "payload (bytes)";

  // Every op kind: one range each, named by the op.
  mark = log_lines().size();
  reduce_scatter(buf.ptr(0), static_cast<char*>(buf.ptr(0)) + n * 4, n, DType::f32, ReduceOp::max,
                 g);
  all_gather(buf.ptr(0), static_cast<char*>(buf.ptr(0)) + n * 4, n, DType::f32, g);
  all_to_all(buf.ptr(0), static_cast<char*>(buf.ptr(0)) + n * 4, n, DType::f32, g);
  broadcast(buf.ptr(0), static_cast<char*>(buf.ptr(0)) + n * 4, n, DType::f32, 0, g);
  barrier(g);
  put(buf, 0, x, 16, 0);
  get(buf, 0, x + n, 16, 0);
  p = pushes(mark);
  std::vector<std::string> names;
  for (auto& [msg, payload] : p) names.push_back(msg.substr(0, msg.find(' ')));
  EXPECT_EQ(names, (std::vector<std::string>{"reduce_scatter", "all_gather", "all_to_all",
                                             "broadcast", "barrier", "put", "get"}));
  ASSERT_EQ(p.size(), 7u);
  EXPECT_NE(p[0].first.find("redop=max"), std::string::npos) << p[0].first;
  EXPECT_NE(p[3].first.find("root=0"), std::string::npos) << p[3].first;
  EXPECT_NE(p[5].first.find("peer=0"), std::string::npos) << p[5].first;
  EXPECT_NE(p[5].first.find("after_seq="), std::string::npos) << p[5].first;

  // An allocation is a range too; every push is popped.
  mark = log_lines().size();
  { auto b2 = allocate(g, 4096, Device::cpu()); }
  p = pushes(mark);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].first.rfind("alloc bytes=4096", 0), 0u) << p[0].first;
  auto lines = log_lines();
  EXPECT_EQ(count_prefix(lines, "push symmem"), count_prefix(lines, "pop symmem"));
  EXPECT_EQ(count_prefix(lines, "domain symmem"), 1);
}

}  // namespace
}  // namespace symmem

int main(int argc, char** argv) {
  if (!symmem::detail::nvtx_compiled()) {
    std::printf("SKIPPED: libsymmem was built without the NVTX3 headers (SYMMEM_WITH_NVTX)\n");
    return 77;
  }
  if (std::getenv("NVTX_INJECTION64_PATH") == nullptr ||
      std::getenv("SYMMEM_NVTX_LOG") == nullptr) {
    std::printf("test_nvtx needs NVTX_INJECTION64_PATH and SYMMEM_NVTX_LOG (set by ctest)\n");
    return 2;
  }
  std::remove(std::getenv("SYMMEM_NVTX_LOG"));
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
