// The one timeout rule (NOTE [timeouts] in symmem/store.hpp) and the typed settings accessors
// generated from the table in symmem/env.hpp.
#include <stdlib.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "core/timeout.hpp"
#include "symmem/env.hpp"
#include "symmem/group.hpp"
#include "symmem/ops.hpp"
#include "symmem/store.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
using symmem::ErrorCode;
using symmem::Millis;
namespace env = symmem::env;
namespace detail = symmem::detail;

using symmem::test::ScopedEnv;

// ---- generated accessors -------------------------------------------------------------------

static_assert(std::is_same_v<decltype(env::timeout_ms()), int64_t>);
static_assert(std::is_same_v<decltype(env::rank()), std::optional<int64_t>>);
static_assert(std::is_same_v<decltype(env::backend()), std::string>);
static_assert(std::is_same_v<decltype(env::debug_subsys()), std::vector<std::string>>);
static_assert(std::is_same_v<decltype(env::allow_shared_gpu()), bool>);
static_assert(env::defaults::timeout_ms.as_int() > 0);
static_assert(env::defaults::rank.empty());

TEST(EnvAccessors, MatchTheTable) {
  env::reset_cache_for_testing();
  for (const auto& s : env::settings()) {
    if (std::string(s.name) == "SYMMEM_TIMEOUT_MS") {
      EXPECT_EQ(std::string(env::defaults::timeout_ms.text), s.default_value);
    }
  }
  EXPECT_EQ(env::timeout_ms(), env::defaults::timeout_ms.as_int());
  EXPECT_EQ(env::timeout(), Millis(env::get_int("SYMMEM_TIMEOUT_MS").value()));
  EXPECT_EQ(env::signal_pad_bytes(), env::defaults::signal_pad_bytes.as_int());
  EXPECT_EQ(env::backend(), env::get_string("SYMMEM_BACKEND"));
  EXPECT_FALSE(env::rank().has_value());
  EXPECT_FALSE(env::allow_shared_gpu());
  {
    ScopedEnv e("SYMMEM_TIMEOUT_MS", "1500");
    EXPECT_EQ(env::timeout(), 1500ms);
  }
  {
    ScopedEnv e("SYMMEM_RANK", "3");
    EXPECT_EQ(env::rank(), std::optional<int64_t>(3));
  }
  ScopedEnv e("SYMMEM_TIMEOUT_MS", "never");
  symmem::test::expect_error([] { env::timeout(); }, ErrorCode::InvalidArgument,
                             {"SYMMEM_TIMEOUT_MS='never'"});
}

// ---- the rule ------------------------------------------------------------------------------

TEST(TimeoutRule, MinusOneAndOtherNegativesMeanTheDefault) {
  env::reset_cache_for_testing();
  EXPECT_EQ(detail::resolve_timeout(symmem::kDefaultTimeout), env::timeout());
  EXPECT_EQ(detail::resolve_timeout(Millis(-1)), env::timeout());
  EXPECT_EQ(detail::resolve_timeout(Millis(-7)), env::timeout());
  EXPECT_EQ(detail::resolve_timeout(Millis::min()), env::timeout());
  // With a context's default (a group's timeout, say).
  EXPECT_EQ(detail::resolve_timeout(Millis(-1), 42ms), 42ms);
  EXPECT_EQ(detail::resolve_timeout(Millis(-9), 42ms), 42ms);
  ScopedEnv e("SYMMEM_TIMEOUT_MS", "1500");
  EXPECT_EQ(detail::resolve_timeout(Millis(-1)), 1500ms);
  EXPECT_EQ(detail::resolve_timeout(Millis(-2)), 1500ms);
}

TEST(TimeoutRule, ZeroMeansDoNotWait) {
  EXPECT_EQ(detail::resolve_timeout(0ms), 0ms);
  EXPECT_EQ(detail::resolve_timeout(0ms, 42ms), 0ms);
  {
    // 0 never reads SYMMEM_TIMEOUT_MS (a bad value only fails the calls that want the default).
    ScopedEnv e("SYMMEM_TIMEOUT_MS", "never");
    EXPECT_EQ(detail::resolve_timeout(0ms), 0ms);
    EXPECT_EQ(detail::resolve_timeout(250ms), 250ms);
  }
  const auto before = detail::Clock::now();
  const auto d = detail::deadline_for(0ms);
  EXPECT_GE(d, before);
  EXPECT_LE(d, detail::Clock::now());
  // A store checks once.
  symmem::HashStore store;
  const auto start = detail::Clock::now();
  symmem::test::expect_error([&] { store.get("missing", 0ms); }, ErrorCode::Timeout, {"missing"});
  EXPECT_LT(detail::Clock::now() - start, 1s);
  store.set("present", symmem::to_bytes("x"));
  EXPECT_EQ(symmem::to_string(store.get("present", 0ms)), "x");
}

TEST(TimeoutRule, PositiveIsKeptUpToTenYears) {
  EXPECT_EQ(detail::resolve_timeout(1ms), 1ms);
  EXPECT_EQ(detail::resolve_timeout(250ms, 42ms), 250ms);
  EXPECT_EQ(detail::resolve_timeout(Millis::max()), detail::kMaxTimeout);
  const auto before = detail::Clock::now();
  const auto d = detail::deadline_for(Millis::max());  // no overflow
  EXPECT_GE(d - before, detail::kMaxTimeout - 1s);
  const auto d2 = detail::deadline_for(200ms);
  EXPECT_GE(d2 - before, 200ms);
  EXPECT_LT(d2 - before, 200ms + 10s);
}

TEST(TimeoutRule, DeadlineOfTheDefault) {
  ScopedEnv e("SYMMEM_TIMEOUT_MS", "1500");
  const auto before = detail::Clock::now();
  const auto d = detail::deadline_for(symmem::kDefaultTimeout);
  EXPECT_GE(d - before, 1500ms);
  EXPECT_LT(d - before, 1500ms + 10s);
}

// Calls that need their peers reject 0; negatives are the default.
TEST(TimeoutRule, GroupRejectsZeroAndResolvesNegatives) {
  auto store = std::make_shared<symmem::HashStore>();
  symmem::GroupOptions o;
  o.timeout = 0ms;
  symmem::test::expect_error([&] { symmem::Group::create(store, 0, 1, o); },
                             ErrorCode::InvalidArgument, {"options.timeout", "0 ms"});
  env::reset_cache_for_testing();
  o.timeout = Millis(-3);
  EXPECT_EQ(symmem::Group::create(store, 0, 1, o).timeout(), env::timeout());
  o.timeout = symmem::kDefaultTimeout;
  EXPECT_EQ(symmem::Group::create(store, 0, 1, o).timeout(), env::timeout());
  o.timeout = 1234ms;
  EXPECT_EQ(symmem::Group::create(store, 0, 1, o).timeout(), 1234ms);
}

// The ops take any negative as the default (before the one rule, only -1) and reject 0.
TEST(TimeoutRule, OpsRejectZeroAndTakeAnyNegative) {
  auto store = std::make_shared<symmem::HashStore>();
  symmem::Group g = symmem::Group::create(store, 0, 1);
  symmem::OpOptions o;
  o.timeout = 0ms;
  symmem::test::expect_error([&] { symmem::barrier(g, o); }, ErrorCode::InvalidArgument,
                             {"timeout", "0 ms"});
  o.timeout = Millis(-2);
  symmem::barrier(g, o);
  o.timeout = symmem::kDefaultTimeout;
  symmem::barrier(g, o);
  o.timeout = 5000ms;
  symmem::barrier(g, o);
}
