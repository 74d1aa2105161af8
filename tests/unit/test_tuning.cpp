// The tuning file (NOTE [tuning file] in src/core/tuning.hpp): which entry decides, and that a
// bad or missing file falls back to the built-in tables.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "core/tuning.hpp"
#include "symmem/env.hpp"

namespace symmem {
namespace {

class TuningFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/symmem_tuning_XXXXXX";
    int fd = mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    close(fd);
    path_ = tmpl;
  }
  void TearDown() override {
    std::remove(path_.c_str());
    unsetenv("SYMMEM_TUNING_FILE");
    env::reset_cache_for_testing();
    tuning::reset_for_testing();
  }
  void write(const std::string& text) {
    std::ofstream(path_, std::ios::trunc) << text;
    setenv("SYMMEM_TUNING_FILE", path_.c_str(), 1);
    env::reset_cache_for_testing();
    tuning::reset_for_testing();
  }
  static std::string entry(const std::string& sig, int world, long value) {
    return "{\"backend\": \"host\", \"signature\": \"" + sig +
           "\", \"key\": \"all_reduce.one_shot_max_bytes\", \"world\": " + std::to_string(world) +
           ", \"value\": " + std::to_string(value) + ", \"measured\": \"now\"}";
  }
  std::string path_;
};

constexpr const char* kKey = "all_reduce.one_shot_max_bytes";

TEST_F(TuningFile, MatchingEntryDecides) {
  const std::string sig = tuning::host_signature();
  write("{\"format\": \"symmem-tuning\", \"version\": 1, \"entries\": [" + entry(sig, 2, 4096) +
        ", " + entry(sig, 3, 0) + ", " + entry("cpu=other;cores=64", 4, 77) + ", " +
        entry(sig, 2, 8192) + "]}");
#if SYMMEM_HAVE_NLOHMANN_JSON
  EXPECT_EQ(tuning::file_path(), path_);
  EXPECT_EQ(tuning::lookup("host", kKey, 2, sig), 8192);  // the later entry wins
  EXPECT_EQ(tuning::lookup("host", kKey, 3, sig), 0);
#else
  GTEST_SKIP() << "built without nlohmann_json: tuning files are ignored";
#endif
  EXPECT_EQ(tuning::lookup("host", kKey, 4, sig), std::nullopt);  // another machine's entry
  EXPECT_EQ(tuning::lookup("host", kKey, 5, sig), std::nullopt);  // no entry for 5 ranks
  EXPECT_EQ(tuning::lookup("cuda", kKey, 2, sig), std::nullopt);  // another backend
  EXPECT_EQ(tuning::lookup("host", "other.key", 2, sig), std::nullopt);
}

// symmem-tune's overrides come before the file, for this process only, and move generation().
TEST_F(TuningFile, OverrideComesFirstAndMovesTheGeneration) {
  const std::string sig = tuning::host_signature();
  write("{\"format\": \"symmem-tuning\", \"version\": 1, \"entries\": [" + entry(sig, 2, 4096) +
        "]}");
  const uint64_t g0 = tuning::generation();
  tuning::set_override("host", kKey, 2, 123);
  EXPECT_GT(tuning::generation(), g0);
  EXPECT_EQ(tuning::lookup("host", kKey, 2, sig), 123);
  EXPECT_EQ(tuning::lookup("host", kKey, 2, "cpu=other;cores=64"), 123);  // any signature
  EXPECT_EQ(tuning::lookup("host", kKey, 3, sig), std::nullopt);          // only that world
  const uint64_t g1 = tuning::generation();
  tuning::set_override("host", kKey, 2, std::nullopt);
  EXPECT_GT(tuning::generation(), g1);
#if SYMMEM_HAVE_NLOHMANN_JSON
  EXPECT_EQ(tuning::lookup("host", kKey, 2, sig), 4096);  // the file again
#else
  EXPECT_EQ(tuning::lookup("host", kKey, 2, sig), std::nullopt);
#endif
}

TEST_F(TuningFile, BadFilesAreIgnored) {
  const std::string sig = tuning::host_signature();
  for (const std::string& text :
       {std::string("not json"),
        std::string("{\"format\": \"x\", \"version\": 1, \"entries\": []}"),
        "{\"format\": \"symmem-tuning\", \"version\": 2, \"entries\": [" + entry(sig, 2, 1) + "]}",
        std::string("{\"format\": \"symmem-tuning\", \"version\": 1, \"entries\": "
                    "[{\"backend\": \"host\"}]}")}) {
    write(text);
    EXPECT_EQ(tuning::lookup("host", kKey, 2, sig), std::nullopt) << text;
  }
  unsetenv("SYMMEM_TUNING_FILE");
  setenv("SYMMEM_TUNING_FILE", "/nonexistent/symmem/tuning.json", 1);
  env::reset_cache_for_testing();
  tuning::reset_for_testing();
  EXPECT_EQ(tuning::lookup("host", kKey, 2, sig), std::nullopt);
  EXPECT_EQ(tuning::file_path(), "");
}

TEST(TuningSignature, NamesCpuAndCores) {
  std::string sig = tuning::host_signature();
  EXPECT_EQ(sig.rfind("cpu=", 0), 0u) << sig;
  EXPECT_NE(sig.find(";cores="), std::string::npos) << sig;
}

}  // namespace
}  // namespace symmem
