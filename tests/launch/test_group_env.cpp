// Group::from_env(): launcher variables, precedence, missing and contradictory settings.

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/group_env.hpp"
#include "symmem/env.hpp"
#include "symmem/error.hpp"
#include "symmem/group.hpp"
#include "symmem/store.hpp"
#include "test_util.hpp"

using symmem::ErrorCode;
using symmem::GroupOptions;
using symmem::detail::resolve_launch;

namespace {

// Every variable from_env() reads; each test starts with all of them unset.
const char* const kVars[] = {"SYMMEM_RANK",
                             "SYMMEM_WORLD_SIZE",
                             "SYMMEM_LOCAL_RANK",
                             "SYMMEM_LOCAL_WORLD_SIZE",
                             "SYMMEM_STORE",
                             "SYMMEM_STORE_TOKEN",
                             "SYMMEM_STORE_BIND",
                             "SYMMEM_HOST_ID",
                             "SYMMEM_DEBUG",
                             "SYMMEM_TIMEOUT_MS",
                             "RANK",
                             "WORLD_SIZE",
                             "LOCAL_RANK",
                             "LOCAL_WORLD_SIZE",
                             "MASTER_ADDR",
                             "MASTER_PORT",
                             "OMPI_COMM_WORLD_RANK",
                             "OMPI_COMM_WORLD_SIZE",
                             "OMPI_COMM_WORLD_LOCAL_RANK",
                             "OMPI_COMM_WORLD_LOCAL_SIZE",
                             "SLURM_PROCID",
                             "SLURM_NTASKS",
                             "SLURM_STEP_NUM_TASKS",
                             "SLURM_LOCALID"};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class FromEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) {
      if (const char* old = getenv(v)) saved_[v] = old;
      unsetenv(v);
    }
    symmem::env::reset_cache_for_testing();
  }
  void TearDown() override {
    for (const char* v : kVars) unsetenv(v);
    for (const auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
    symmem::env::reset_cache_for_testing();
  }
  void set(std::map<std::string, std::string> vars) {
    for (const auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
    symmem::env::reset_cache_for_testing();
  }

 private:
  std::map<std::string, std::string> saved_;
};

}  // namespace

TEST_F(FromEnv, Torchrun) {
  set({{"RANK", "3"},
       {"WORLD_SIZE", "8"},
       {"LOCAL_RANK", "1"},
       {"LOCAL_WORLD_SIZE", "2"},
       {"MASTER_ADDR", "10.1.2.3"},
       {"MASTER_PORT", "29500"}});
  auto s = resolve_launch({});
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.world_size, 8);
  EXPECT_EQ(s.local_rank, 1);
  EXPECT_EQ(s.local_world_size, 2);
  EXPECT_EQ(s.launcher, "torchrun");
  EXPECT_EQ(s.master_addr, "10.1.2.3");
  EXPECT_EQ(s.store_port, 29501);  // MASTER_PORT itself belongs to torch.distributed
  EXPECT_TRUE(s.store_url.empty());
}

TEST_F(FromEnv, OpenMpi) {
  set({{"OMPI_COMM_WORLD_RANK", "5"},
       {"OMPI_COMM_WORLD_SIZE", "6"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
       {"SYMMEM_STORE", "tcp://head:7000"}});
  auto s = resolve_launch({});
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.world_size, 6);
  EXPECT_EQ(s.local_rank, 2);
  EXPECT_EQ(s.local_world_size, 3);
  EXPECT_EQ(s.launcher, "Open MPI");
  EXPECT_EQ(s.store_url, "tcp://head:7000");
}

TEST_F(FromEnv, Slurm) {
  set({{"SLURM_PROCID", "7"},
       {"SLURM_NTASKS", "16"},
       {"SLURM_LOCALID", "3"},
       {"MASTER_ADDR", "node01"},
       {"MASTER_PORT", "12000"}});
  auto s = resolve_launch({});
  EXPECT_EQ(s.rank, 7);
  EXPECT_EQ(s.world_size, 16);
  EXPECT_EQ(s.local_rank, 3);
  EXPECT_EQ(s.local_world_size, -1);  // Slurm has no plain per-node count: derived from hosts
  EXPECT_EQ(s.launcher, "Slurm");
  EXPECT_EQ(s.store_port, 12001);
}

TEST_F(FromEnv, SlurmStepSizeWinsOverAllocationSize) {
  set({{"SLURM_PROCID", "1"},
       {"SLURM_NTASKS", "16"},
       {"SLURM_STEP_NUM_TASKS", "4"},
       {"SYMMEM_STORE", "file:///tmp/x"}});
  EXPECT_EQ(resolve_launch({}).world_size, 4);
}

TEST_F(FromEnv, SymmemVariables) {
  set({{"SYMMEM_RANK", "2"},
       {"SYMMEM_WORLD_SIZE", "4"},
       {"SYMMEM_LOCAL_RANK", "0"},
       {"SYMMEM_LOCAL_WORLD_SIZE", "1"},
       {"SYMMEM_STORE", "tcp://127.0.0.1:1234"}});
  auto s = resolve_launch({});
  EXPECT_EQ(s.rank, 2);
  EXPECT_EQ(s.world_size, 4);
  EXPECT_EQ(s.local_rank, 0);
  EXPECT_EQ(s.local_world_size, 1);
  EXPECT_EQ(s.launcher, "SYMMEM_RANK");
}

TEST_F(FromEnv, PrecedenceOptionsThenSymmemThenTorchrunThenMpiThenSlurm) {
  set({{"SYMMEM_RANK", "1"},
       {"RANK", "2"},
       {"WORLD_SIZE", "8"},
       {"OMPI_COMM_WORLD_RANK", "3"},
       {"OMPI_COMM_WORLD_SIZE", "9"},
       {"SLURM_PROCID", "4"},
       {"SLURM_NTASKS", "10"},
       {"SYMMEM_STORE", "tcp://a:1"},
       {"MASTER_ADDR", "b"},
       {"MASTER_PORT", "2"}});
  auto s = resolve_launch({});
  EXPECT_EQ(s.rank, 1);        // SYMMEM_RANK over RANK
  EXPECT_EQ(s.world_size, 8);  // torchrun's WORLD_SIZE: torchrun is the launcher
  EXPECT_EQ(s.store_url, "tcp://a:1");
  EXPECT_TRUE(s.master_addr.empty());

  GroupOptions o;
  o.rank = 0;
  o.world_size = 2;
  o.store_url = "file:///x";
  s = resolve_launch(o);
  EXPECT_EQ(s.rank, 0);
  EXPECT_EQ(s.world_size, 2);
  EXPECT_EQ(s.store_url, "file:///x");
  EXPECT_EQ(s.launcher, "options.rank");

  // Without torchrun, Open MPI wins over Slurm (mpirun inside an allocation).
  unsetenv("SYMMEM_RANK");
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  symmem::env::reset_cache_for_testing();
  s = resolve_launch({});
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.world_size, 9);
  EXPECT_EQ(s.launcher, "Open MPI");
}

TEST_F(FromEnv, LeakedSlurmDoesNotMixIntoTorchrun) {
  // torchrun started inside sbatch: SLURM_* of the batch step are present too.
  set({{"RANK", "5"},
       {"WORLD_SIZE", "8"},
       {"LOCAL_RANK", "1"},
       {"SLURM_PROCID", "0"},
       {"SLURM_NTASKS", "1"},
       {"SLURM_LOCALID", "0"},
       {"SYMMEM_STORE", "tcp://h:1"}});
  auto s = resolve_launch({});
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.world_size, 8);
  EXPECT_EQ(s.local_rank, 1);
}

TEST_F(FromEnv, LocalRankOnlyFromTheSourceOfTheRank) {
  // SYMMEM_RANK given by hand: the launcher's LOCAL_RANK describes another numbering.
  set({{"SYMMEM_RANK", "3"},
       {"SYMMEM_WORLD_SIZE", "4"},
       {"SLURM_PROCID", "0"},
       {"SLURM_NTASKS", "1"},
       {"SLURM_LOCALID", "0"},
       {"SYMMEM_STORE", "tcp://h:1"}});
  auto s = resolve_launch({});
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.world_size, 4);
  EXPECT_EQ(s.local_rank, -1);
}

TEST_F(FromEnv, NothingSetIsAOneRankJob) {
  // No launcher at all: like an MPI program started alone, a world of one.
  auto s = resolve_launch({});
  EXPECT_EQ(s.rank, 0);
  EXPECT_EQ(s.world_size, 1);
  EXPECT_EQ(s.launcher, symmem::detail::kNoLauncher);
  EXPECT_TRUE(s.store_url.empty());
  EXPECT_TRUE(s.master_addr.empty());

  const std::string path = "/tmp/symmem-singleton-log-" + std::to_string(getpid()) + ".txt";
  unlink(path.c_str());
  {
    symmem::test::ScopedEnv level("SYMMEM_DEBUG", "INFO");
    symmem::test::ScopedEnv file("SYMMEM_DEBUG_FILE", path.c_str());
    auto g = symmem::Group::from_env();
    EXPECT_EQ(g.rank(), 0);
    EXPECT_EQ(g.world_size(), 1);
    EXPECT_EQ(g.local_rank(), 0);
    EXPECT_NE(dynamic_cast<symmem::HashStore*>(g.store().get()), nullptr) << "in-process store";
    g.store_barrier();
  }
  std::string log = slurp(path);
  unlink(path.c_str());
  EXPECT_NE(log.find("symmem INFO INIT from_env: no launcher variables"), std::string::npos) << log;
  EXPECT_NE(log.find("running as a job of one rank (rank 0 of 1)"), std::string::npos) << log;
}

TEST_F(FromEnv, OnlyAStoreIsNotAOneRankJob) {
  set({{"SYMMEM_STORE", "tcp://h:1"}});
  symmem::test::expect_error(
      [] { resolve_launch({}); }, ErrorCode::InvalidArgument,
      {"Group::from_env", "Found: SYMMEM_STORE=tcp://h:1", "Missing: rank", "world size",
       "Start the program with symmem-run, torchrun, srun or mpirun"});
}

TEST_F(FromEnv, OpenMpiWithoutMasterGivesMpirunFix) {
  set({{"OMPI_COMM_WORLD_RANK", "1"},
       {"OMPI_COMM_WORLD_SIZE", "4"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  try {
    resolve_launch({});
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const symmem::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << what;
    EXPECT_NE(what.find("Found: OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=4"), std::string::npos)
        << what;
    EXPECT_NE(what.find("Missing: a store"), std::string::npos) << what;
    EXPECT_NE(what.find("Found Open MPI's OMPI_COMM_WORLD_* variables"), std::string::npos) << what;
    EXPECT_NE(what.find("-x MASTER_ADDR=<rank-0 host> -x MASTER_PORT=<port>"), std::string::npos)
        << what;
    EXPECT_EQ(what.find("Start the program with symmem-run"), std::string::npos)
        << "generic advice despite a recognised launcher: " << what;
  }
}

TEST_F(FromEnv, SlurmWithoutMasterGivesBatchScriptFix) {
  set({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "0"}});
  try {
    resolve_launch({});
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const symmem::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << what;
    EXPECT_NE(what.find("Found Slurm's SLURM_* variables"), std::string::npos) << what;
    EXPECT_NE(what.find("export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | "
                        "head -n 1)"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("export MASTER_PORT=29500"), std::string::npos) << what;
    EXPECT_EQ(what.find("Start the program with symmem-run"), std::string::npos) << what;
    EXPECT_EQ(what.find("mpirun"), std::string::npos) << what;
  }
}

TEST_F(FromEnv, TorchrunVariablesByHandGiveTorchrunAdvice) {
  set({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  symmem::test::expect_error([] { resolve_launch({}); }, ErrorCode::InvalidArgument,
                             {"Missing: a store", "Found torchrun's variables",
                              "torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT"});
}

TEST_F(FromEnv, PartialSettingsListFoundAndMissing) {
  set({{"RANK", "1"}, {"MASTER_ADDR", "127.0.0.1"}});
  symmem::test::expect_error(
      [] { resolve_launch({}); }, ErrorCode::InvalidArgument,
      {"Found: RANK=1, MASTER_ADDR=127.0.0.1", "Missing: world size (SYMMEM_WORLD_SIZE, WORLD_SIZE",
       "MASTER_PORT (MASTER_ADDR is set)"});
}

TEST_F(FromEnv, ContradictionsAreListed) {
  set({{"RANK", "4"},
       {"WORLD_SIZE", "4"},
       {"LOCAL_RANK", "2"},
       {"LOCAL_WORLD_SIZE", "2"},
       {"SYMMEM_STORE", "tcp://h:1"}});
  symmem::test::expect_error(
      [] { resolve_launch({}); }, ErrorCode::InvalidArgument,
      {"Contradictory:", "rank 4 (from RANK (torchrun)) is not below world size 4 (from WORLD_SIZE",
       "local rank 2 (from LOCAL_RANK (torchrun)) is not below local world size 2"});
  set({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "5"}});
  symmem::test::expect_error([] { resolve_launch({}); }, ErrorCode::InvalidArgument,
                             {"local world size 5", "exceeds world size 4"});
}

TEST_F(FromEnv, BadLauncherValueNamesTheVariable) {
  set({{"RANK", "one"}, {"WORLD_SIZE", "4"}, {"SYMMEM_STORE", "tcp://h:1"}});
  symmem::test::expect_error([] { resolve_launch({}); }, ErrorCode::InvalidArgument,
                             {"RANK='one'", "integer"});
  set({{"RANK", "1"}, {"WORLD_SIZE", "0"}});
  symmem::test::expect_error([] { resolve_launch({}); }, ErrorCode::InvalidArgument,
                             {"WORLD_SIZE='0'", ">= 1"});
  set({{"WORLD_SIZE", "4"}, {"SYMMEM_RANK", "-1"}});
  symmem::test::expect_error([] { resolve_launch({}); }, ErrorCode::InvalidArgument,
                             {"SYMMEM_RANK='-1'"});
  unsetenv("SYMMEM_RANK");
  unsetenv("SYMMEM_STORE");
  set({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "65535"}});
  symmem::test::expect_error([] { resolve_launch({}); }, ErrorCode::InvalidArgument,
                             {"MASTER_PORT='65535'", "MASTER_PORT+1"});
}

TEST_F(FromEnv, WorldOfOneNeedsNoStore) {
  set({{"SYMMEM_RANK", "0"}, {"SYMMEM_WORLD_SIZE", "1"}});
  auto s = resolve_launch({});
  EXPECT_TRUE(s.store_url.empty());
  EXPECT_TRUE(s.master_addr.empty());
  auto g = symmem::Group::from_env();
  EXPECT_EQ(g.rank(), 0);
  EXPECT_EQ(g.world_size(), 1);
  EXPECT_EQ(g.local_world_size(), 1);
  g.store_barrier();
}

TEST_F(FromEnv, ValidatesEverySettingFirst) {
  set({{"SYMMEM_RANK", "0"}, {"SYMMEM_WORLD_SIZE", "1"}, {"SYMMEM_DEBUG", "LOUD"}});
  symmem::test::expect_error([] { symmem::Group::from_env(); }, ErrorCode::InvalidArgument,
                             {"SYMMEM_DEBUG='LOUD'"});
}

TEST_F(FromEnv, ExplicitStoreObjectWins) {
  set({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"SYMMEM_STORE", "tcp://nowhere.invalid:1"}});
  GroupOptions o;
  o.store = std::make_shared<symmem::HashStore>();
  auto g = symmem::Group::from_env(o);
  EXPECT_EQ(g.store(), o.store);
}

TEST_F(FromEnv, HostIdOverride) {
  set({{"SYMMEM_RANK", "0"}, {"SYMMEM_WORLD_SIZE", "1"}, {"SYMMEM_HOST_ID", "box-7"}});
  EXPECT_EQ(symmem::Group::from_env().host_id(), "box-7");
  unsetenv("SYMMEM_HOST_ID");
  symmem::env::reset_cache_for_testing();
  std::string id = symmem::Group::from_env().host_id();
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(id.rfind(host, 0), 0u) << id;  // hostname first, then the boot id
  EXPECT_GT(id.size(), std::string(host).size() + 30) << id;
}

TEST_F(FromEnv, SlurmRankCountMismatchTimeoutBlamesStartsWithoutSrun) {
  char dir[] = "/tmp/symmem-slurm-store-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string url = std::string("file://") + dir;
  // The batch step's ./app: SLURM_PROCID=0 of the allocation's 2 tasks, nobody else comes.
  set({{"SLURM_PROCID", "0"},
       {"SLURM_NTASKS", "2"},
       {"SYMMEM_STORE", url},
       {"SYMMEM_TIMEOUT_MS", "300"}});
  symmem::test::expect_error(
      [] { symmem::Group::from_env(); }, ErrorCode::Timeout,
      {"rank 1 did not arrive within 300 ms",
       "Under Slurm the usual cause is ranks started without srun", "Start every rank with srun"});
  // The same under torchrun's variables: no Slurm advice.
  unsetenv("SLURM_PROCID");
  unsetenv("SLURM_NTASKS");
  set({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  try {
    symmem::Group::from_env();
    ADD_FAILURE() << "expected Timeout";
  } catch (const symmem::Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
    EXPECT_EQ(std::string(e.what()).find("srun"), std::string::npos) << e.what();
  }
  std::string rm = std::string("rm -rf ") + dir;
  EXPECT_EQ(system(rm.c_str()), 0);
}
