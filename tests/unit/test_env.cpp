#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "core/log.hpp"
#include "symmem/env.hpp"
#include "test_util.hpp"

using symmem::ErrorCode;
namespace env = symmem::env;

using symmem::test::ScopedEnv;

TEST(Env, DefaultsApply) {
  env::reset_cache_for_testing();
  EXPECT_EQ(env::get_string("SYMMEM_DEBUG"), "WARN");
  EXPECT_EQ(env::get_int("SYMMEM_TIMEOUT_MS").value(), 300000);
  EXPECT_FALSE(env::get_int("SYMMEM_RANK").has_value());
  EXPECT_FALSE(env::get_bool("SYMMEM_ALLOW_SHARED_GPU"));
}

TEST(Env, BadEnumNamesVariableAndAcceptedValues) {
  ScopedEnv e("SYMMEM_DEBUG", "LOUD");
  symmem::test::expect_error([] { env::get_string("SYMMEM_DEBUG"); }, ErrorCode::InvalidArgument,
                             {"SYMMEM_DEBUG='LOUD'", "WARN|INFO|TRACE"});
  symmem::test::expect_error([] { env::validate_all(); }, ErrorCode::InvalidArgument,
                             {"SYMMEM_DEBUG"});
}

TEST(Env, BadIntAndRange) {
  {
    ScopedEnv e("SYMMEM_TIMEOUT_MS", "soon");
    symmem::test::expect_error([] { env::get_int("SYMMEM_TIMEOUT_MS"); },
                               ErrorCode::InvalidArgument, {"SYMMEM_TIMEOUT_MS", "integer"});
  }
  {
    ScopedEnv e("SYMMEM_TIMEOUT_MS", "0");
    symmem::test::expect_error([] { env::validate_all(); }, ErrorCode::InvalidArgument,
                               {"SYMMEM_TIMEOUT_MS='0'", "1..86400000"});
  }
  ScopedEnv e("SYMMEM_TIMEOUT_MS", "1500");
  EXPECT_EQ(env::get_int("SYMMEM_TIMEOUT_MS").value(), 1500);
}

TEST(Env, BoolAndList) {
  {
    ScopedEnv e("SYMMEM_ALLOW_SHARED_GPU", "yes");
    EXPECT_TRUE(env::get_bool("SYMMEM_ALLOW_SHARED_GPU"));
  }
  {
    ScopedEnv e("SYMMEM_ALLOW_SHARED_GPU", "maybe");
    symmem::test::expect_error([] { env::get_bool("SYMMEM_ALLOW_SHARED_GPU"); },
                               ErrorCode::InvalidArgument, {"SYMMEM_ALLOW_SHARED_GPU='maybe'"});
  }
  {
    ScopedEnv e("SYMMEM_DEBUG_SUBSYS", "^STORE,IPC");
    auto l = env::get_list("SYMMEM_DEBUG_SUBSYS");
    std::set<std::string> s(l.begin(), l.end());
    EXPECT_EQ(s.count("STORE"), 0u);
    EXPECT_EQ(s.count("IPC"), 0u);
    EXPECT_EQ(s.count("ALLOC"), 1u);
  }
  ScopedEnv e("SYMMEM_DEBUG_SUBSYS", "STORE,NOPE");
  symmem::test::expect_error([] { env::get_list("SYMMEM_DEBUG_SUBSYS"); },
                             ErrorCode::InvalidArgument, {"SYMMEM_DEBUG_SUBSYS", "NOPE"});
}

TEST(Env, ValuesAreCached) {
  ScopedEnv e("SYMMEM_BACKEND", "host");
  EXPECT_EQ(env::get_string("SYMMEM_BACKEND"), "host");
  setenv("SYMMEM_BACKEND", "cuda", 1);  // not re-read until the cache is reset
  EXPECT_EQ(env::get_string("SYMMEM_BACKEND"), "host");
}

TEST(Env, UndeclaredSettingIsInternalError) {
  symmem::test::expect_error([] { env::get_string("SYMMEM_NOT_A_SETTING"); }, ErrorCode::Internal,
                             {"SYMMEM_NOT_A_SETTING"});
}

// docs/env.md must list exactly the declared settings, with their defaults.
TEST(Env, DocsListEverySetting) {
  std::ifstream f(SYMMEM_DOCS_ENV_MD);
  ASSERT_TRUE(f.good()) << "cannot read " << SYMMEM_DOCS_ENV_MD;
  std::stringstream ss;
  ss << f.rdbuf();
  std::string doc = ss.str();
  std::set<std::string> documented;
  std::regex row(R"(\|\s*`(SYMMEM_[A-Z0-9_]+)`\s*\|[^|]*\|\s*(`[^`]*`|\(unset\))\s*\|)");
  std::map<std::string, std::string> defaults;
  for (std::sregex_iterator it(doc.begin(), doc.end(), row), end; it != end; ++it) {
    documented.insert((*it)[1]);
    std::string d = (*it)[2];
    defaults[(*it)[1]] = d == "(unset)" ? "" : d.substr(1, d.size() - 2);
  }
  std::set<std::string> declared;
  for (const auto& s : env::settings()) {
    declared.insert(s.name);
    EXPECT_TRUE(documented.count(s.name)) << s.name << " is not documented in docs/env.md";
    if (documented.count(s.name)) {
      EXPECT_EQ(defaults[s.name], s.default_value) << s.name << ": default differs in docs/env.md";
    }
  }
  for (const auto& d : documented) {
    EXPECT_TRUE(declared.count(d)) << d << " is documented but not declared in env.hpp";
  }
}

TEST(Log, LinePrefixAndFileExpansion) {
  std::string path = "/tmp/symmem-log-test-%p.txt";
  ScopedEnv e1("SYMMEM_DEBUG", "INFO");
  ScopedEnv e2("SYMMEM_DEBUG_FILE", path.c_str());
  symmem::detail::log_set_rank(5);
  SYMMEM_LOG(INFO, INIT) << "hello " << 42;
  SYMMEM_LOG(TRACE, INIT) << "filtered";
  std::string actual = "/tmp/symmem-log-test-" + std::to_string(getpid()) + ".txt";
  std::ifstream f(actual);
  std::string line;
  ASSERT_TRUE(std::getline(f, line)) << "no log written to " << actual;
  EXPECT_NE(line.find(":" + std::to_string(getpid()) + " [5] symmem INFO INIT hello 42"),
            std::string::npos)
      << line;
  EXPECT_FALSE(std::getline(f, line)) << "TRACE line was not filtered: " << line;
  symmem::detail::log_set_rank(-1);
  unlink(actual.c_str());
}
