// symmem-run's binding decision (tools/run/binding.cpp, NOTE [rank binding]) on made-up
// topologies: which CPUs each local rank gets from (affinity mask, ranks, mode).
#include <gtest/gtest.h>

#include <set>

#include "binding.hpp"

namespace symmem::run {
namespace {

using Sets = std::vector<std::vector<int>>;

// `cores` cores of `threads` hardware threads on each of `nodes` nodes, numbered like Linux
// does on x86 (thread t of core c on node n is CPU t * total_cores + n * cores + c).
Topology machine(int nodes, int cores, int threads = 1) {
  Topology t;
  const int total = nodes * cores;
  for (int th = 0; th < threads; ++th)
    for (int n = 0; n < nodes; ++n)
      for (int c = 0; c < cores; ++c)
        t.cpus.push_back({th * total + n * cores + c, n * cores + c, n});
  std::sort(t.cpus.begin(), t.cpus.end(), [](const Cpu& a, const Cpu& b) { return a.id < b.id; });
  return t;
}

// Only the CPUs in `allowed` (an affinity mask the launcher was started under).
Topology only(Topology t, std::set<int> allowed) {
  std::vector<Cpu> keep;
  for (const Cpu& c : t.cpus)
    if (allowed.count(c.id)) keep.push_back(c);
  t.cpus = keep;
  return t;
}

TEST(Binding, ParsesMpirunSpellings) {
  BindMode m = BindMode::automatic;
  EXPECT_TRUE(parse_bind_mode("core", &m));
  EXPECT_EQ(m, BindMode::core);
  EXPECT_TRUE(parse_bind_mode("numa", &m));
  EXPECT_EQ(m, BindMode::numa);
  EXPECT_TRUE(parse_bind_mode("none", &m));
  EXPECT_EQ(m, BindMode::none);
  EXPECT_TRUE(parse_bind_mode("auto", &m));
  EXPECT_EQ(m, BindMode::automatic);
  for (const char* bad : {"", "cores", "Core", "socket", "hwthread", "core "})
    EXPECT_FALSE(parse_bind_mode(bad, &m)) << bad;
  EXPECT_STREQ(to_string(BindMode::core), "core");
  EXPECT_STREQ(to_string(BindMode::automatic), "auto");
}

TEST(Binding, DefaultGivesEachRankItsOwnCore) {
  BindPlan p = plan_binding(machine(1, 2), 2, BindMode::automatic);
  EXPECT_EQ(p.mode, BindMode::core);
  EXPECT_EQ(p.cpus, (Sets{{0}, {1}}));
  EXPECT_EQ(p.note, "");
  EXPECT_EQ(p.error, "");
  // Spread evenly over the cores, in order.
  p = plan_binding(machine(1, 8), 4, BindMode::automatic);
  EXPECT_EQ(p.cpus, (Sets{{0}, {2}, {4}, {6}}));
  p = plan_binding(machine(1, 8), 1, BindMode::automatic);
  EXPECT_EQ(p.cpus, (Sets{{0}}));
}

TEST(Binding, DefaultWithFewerCpusThanRanksBindsNothingAndSaysSo) {
  BindPlan p = plan_binding(machine(1, 2), 3, BindMode::automatic);
  EXPECT_EQ(p.mode, BindMode::none);
  EXPECT_EQ(p.cpus, (Sets{{}, {}, {}}));
  EXPECT_NE(p.note.find("3 ranks"), std::string::npos) << p.note;
  EXPECT_NE(p.note.find("2 cores"), std::string::npos) << p.note;
  EXPECT_NE(p.note.find("not bound"), std::string::npos) << p.note;
  EXPECT_EQ(p.error, "");
}

TEST(Binding, HonoursTheLaunchersAffinityMask) {
  // taskset -c 2,3,5 on an 8-core machine.
  BindPlan p = plan_binding(only(machine(1, 8), {2, 3, 5}), 3, BindMode::automatic);
  EXPECT_EQ(p.mode, BindMode::core);
  EXPECT_EQ(p.cpus, (Sets{{2}, {3}, {5}}));
  // taskset -c 6 with 2 ranks: one CPU for two ranks, so none.
  p = plan_binding(only(machine(1, 8), {6}), 2, BindMode::automatic);
  EXPECT_EQ(p.mode, BindMode::none);
  EXPECT_EQ(p.cpus, (Sets{{}, {}}));
  EXPECT_NE(p.note.find("1 core"), std::string::npos) << p.note;
  // Every plan stays inside the mask.
  for (BindMode m : {BindMode::automatic, BindMode::core, BindMode::numa}) {
    const std::set<int> mask = {1, 4, 5, 9, 12, 13};
    BindPlan q = plan_binding(only(machine(2, 4, 2), mask), 3, m);
    for (const auto& s : q.cpus)
      for (int c : s) EXPECT_TRUE(mask.count(c)) << c << " in mode " << to_string(m);
  }
}

TEST(Binding, CoreTakesEveryHardwareThreadOfTheCore) {
  // 4 cores x 2 threads: CPU c and c + 4 are siblings.
  BindPlan p = plan_binding(machine(1, 4, 2), 2, BindMode::core);
  EXPECT_EQ(p.mode, BindMode::core);
  EXPECT_EQ(p.cpus, (Sets{{0, 4}, {2, 6}}));
  // More ranks than cores but enough threads: a thread each, distinct.
  p = plan_binding(machine(1, 2, 2), 4, BindMode::automatic);
  EXPECT_EQ(p.mode, BindMode::core);
  std::set<int> seen;
  for (const auto& s : p.cpus) {
    ASSERT_EQ(s.size(), 1u);
    seen.insert(s[0]);
  }
  EXPECT_EQ(seen.size(), 4u);
}

TEST(Binding, CoreWithFewerCpusThanRanksIsAnError) {
  BindPlan p = plan_binding(machine(1, 2), 3, BindMode::core);
  EXPECT_NE(p.error, "");
  EXPECT_NE(p.error.find("--bind-to none"), std::string::npos) << p.error;
}

TEST(Binding, Numa) {
  // Two nodes of 4 cores: CPUs 0-3 and 4-7.
  const Topology t = machine(2, 4);
  BindPlan p = plan_binding(t, 2, BindMode::numa);
  EXPECT_EQ(p.mode, BindMode::numa);
  EXPECT_EQ(p.cpus, (Sets{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  // More ranks than nodes: consecutive ranks share a node.
  p = plan_binding(t, 4, BindMode::numa);
  EXPECT_EQ(p.cpus, (Sets{{0, 1, 2, 3}, {0, 1, 2, 3}, {4, 5, 6, 7}, {4, 5, 6, 7}}));
  // The default picks a node per rank when every rank can have one...
  p = plan_binding(t, 2, BindMode::automatic);
  EXPECT_EQ(p.mode, BindMode::numa);
  EXPECT_EQ(p.cpus, (Sets{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  // ... and cores otherwise, node 0's ranks first.
  p = plan_binding(t, 4, BindMode::automatic);
  EXPECT_EQ(p.mode, BindMode::core);
  EXPECT_EQ(p.cpus, (Sets{{0}, {2}, {4}, {6}}));
  // A node with no allowed CPU does not count.
  p = plan_binding(only(t, {0, 1, 2, 3}), 2, BindMode::automatic);
  EXPECT_EQ(p.mode, BindMode::core);
  EXPECT_EQ(p.cpus, (Sets{{0}, {2}}));
}

TEST(Binding, NoneAndUnreadableMask) {
  BindPlan p = plan_binding(machine(1, 8), 2, BindMode::none);
  EXPECT_EQ(p.mode, BindMode::none);
  EXPECT_EQ(p.cpus, (Sets{{}, {}}));
  EXPECT_EQ(p.note, "");
  p = plan_binding(Topology{}, 2, BindMode::automatic);
  EXPECT_EQ(p.mode, BindMode::none);
  EXPECT_EQ(p.error, "");
  p = plan_binding(Topology{}, 2, BindMode::core);
  EXPECT_NE(p.error, "");
}

TEST(Binding, CpuLists) {
  EXPECT_EQ(cpu_list_string({}), "");
  EXPECT_EQ(cpu_list_string({3}), "3");
  EXPECT_EQ(cpu_list_string({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10,11");
  EXPECT_EQ(cpu_list_string({5, 4, 4, 0}), "0,4,5");
  std::vector<int> v;
  EXPECT_TRUE(parse_cpu_list("0-3,8,10-11\n", &v));
  EXPECT_EQ(v, (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_TRUE(parse_cpu_list("", &v));
  EXPECT_TRUE(v.empty());
  for (const char* bad : {"a", "1-", "3-1", "1,", ",1", "1--2"})
    EXPECT_FALSE(parse_cpu_list(bad, &v)) << bad;
}

TEST(Binding, TheRealTopologyIsTheAffinityMask) {
  const Topology t = read_topology();
  ASSERT_FALSE(t.cpus.empty());
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(t.cpus.size(), static_cast<size_t>(CPU_COUNT(&set)));
  for (const Cpu& c : t.cpus) EXPECT_TRUE(CPU_ISSET(c.id, &set)) << c.id;
}

}  // namespace
}  // namespace symmem::run
