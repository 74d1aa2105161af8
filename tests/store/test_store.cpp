// One typed suite for every Store implementation: each op, blocking behaviour, timeouts that
// name the keys, limits, and concurrent use from threads.

#include <atomic>
#include <chrono>
#include <thread>

#include "store_factories.hpp"
#include "test_util.hpp"

namespace symmem::test {
namespace {

using namespace std::chrono_literals;

template <class F>
class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override { store_ = factory_.make(); }
  F factory_;
  std::shared_ptr<Store> store_;
};

using Factories = ::testing::Types<HashStoreFactory, TcpStoreFactory, FileStoreFactory>;
class FactoryNames {
 public:
  template <class T>
  static std::string GetName(int) {
    return T::kName;
  }
};
TYPED_TEST_SUITE(StoreTest, Factories, FactoryNames);

TYPED_TEST(StoreTest, SetGetRoundTripsBinaryValues) {
  Bytes v = {0, 1, 2, 255, 0, 10, 13};
  this->store_->set("bin", v);
  EXPECT_EQ(this->store_->get("bin", 1s), v);
  this->store_->set("empty", Bytes());
  EXPECT_EQ(this->store_->get("empty", 1s), Bytes());
  this->store_->set("bin", to_bytes("over"));
  EXPECT_EQ(to_string(this->store_->get("bin", 1s)), "over");
  this->store_->set("a/b/c", to_bytes("slashes"));
  EXPECT_EQ(to_string(this->store_->get("a/b/c", 0ms)), "slashes");
}

TYPED_TEST(StoreTest, GetWaitsForALaterSet) {
  auto other = this->factory_.another(this->store_);
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    other->set("late", to_bytes("here"));
  });
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(to_string(this->store_->get("late", 10s)), "here");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
  t.join();
}

TYPED_TEST(StoreTest, GetTimeoutNamesTheKey) {
  auto start = std::chrono::steady_clock::now();
  expect_error([&] { this->store_->get("never/set", 200ms); }, ErrorCode::Timeout,
               {"never/set", "200 ms"});
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 5s);
}

TYPED_TEST(StoreTest, WaitTimeoutNamesOnlyMissingKeys) {
  this->store_->set("w/present", to_bytes("x"));
  try {
    this->store_->wait({"w/present", "w/missing1", "w/missing2"}, 150ms);
    ADD_FAILURE() << "wait did not time out";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(e.code(), ErrorCode::Timeout) << msg;
    EXPECT_NE(msg.find("w/missing1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("w/missing2"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("w/present"), std::string::npos) << msg;
  }
  this->store_->set("w/missing1", Bytes());
  this->store_->set("w/missing2", Bytes());
  this->store_->wait({"w/present", "w/missing1", "w/missing2"}, 0ms);
  this->store_->wait({}, 0ms);
}

TYPED_TEST(StoreTest, MultiGetTimeoutNamesMissingKeys) {
  this->store_->set("m/0", to_bytes("0"));
  expect_error(
      [&] {
        this->store_->multi_get({"m/0", "m/1"}, 100ms);
      },
      ErrorCode::Timeout, {"'m/1'"});
}

TYPED_TEST(StoreTest, AddCounts) {
  EXPECT_EQ(this->store_->add("ctr", 5), 5);
  EXPECT_EQ(this->store_->add("ctr", -7), -2);
  EXPECT_EQ(this->store_->add("ctr", 0), -2);
  EXPECT_EQ(to_string(this->store_->get("ctr", 0ms)), "-2");
  this->store_->set("text", to_bytes("abc"));
  expect_error([&] { this->store_->add("text", 1); }, ErrorCode::InvalidArgument, {"text"});
  this->store_->set("big", to_bytes(std::to_string(INT64_MAX)));
  expect_error([&] { this->store_->add("big", 1); }, ErrorCode::InvalidArgument, {"big"});
}

TYPED_TEST(StoreTest, AddIsAtomicAcrossThreads) {
  constexpr int kThreads = 4, kEach = 200;
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i) {
    auto s = this->factory_.another(this->store_);
    ts.emplace_back([s] {
      try {
        for (int j = 0; j < kEach; ++j) s->add("atomic", 1);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(this->store_->add("atomic", 0), kThreads * kEach);
}

TYPED_TEST(StoreTest, CompareSet) {
  // Absent matches an empty expected value.
  EXPECT_EQ(to_string(this->store_->compare_set("cs", Bytes(), to_bytes("one"))), "one");
  // Mismatch: unchanged, returns the current value.
  EXPECT_EQ(to_string(this->store_->compare_set("cs", to_bytes("zzz"), to_bytes("two"))), "one");
  // Match: replaced.
  EXPECT_EQ(to_string(this->store_->compare_set("cs", to_bytes("one"), to_bytes("two"))), "two");
  EXPECT_EQ(to_string(this->store_->get("cs", 0ms)), "two");
  // Absent with a non-empty expected value: nothing is stored.
  EXPECT_EQ(this->store_->compare_set("cs2", to_bytes("x"), to_bytes("y")), Bytes());
  EXPECT_FALSE(this->store_->check({"cs2"}));
}

TYPED_TEST(StoreTest, CompareSetElectsOneWinner) {
  constexpr int kThreads = 4;
  std::atomic<int> winners{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i) {
    auto s = this->factory_.another(this->store_);
    ts.emplace_back([s, i, &winners] {
      Bytes mine = to_bytes("t" + std::to_string(i));
      try {
        if (s->compare_set("leader", Bytes(), mine) == mine) ++winners;
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(winners.load(), 1);
}

TYPED_TEST(StoreTest, MultiSetMultiGet) {
  this->store_->multi_set({"k1", "k2", "k3"}, {to_bytes("1"), to_bytes("22"), Bytes()});
  auto vals = this->store_->multi_get({"k3", "k1", "k2", "k1"}, 1s);
  ASSERT_EQ(vals.size(), 4u);
  EXPECT_EQ(vals[0], Bytes());
  EXPECT_EQ(to_string(vals[1]), "1");
  EXPECT_EQ(to_string(vals[2]), "22");
  EXPECT_EQ(to_string(vals[3]), "1");
  EXPECT_TRUE(this->store_->multi_get({}, 0ms).empty());
  expect_error(
      [&] {
        this->store_->multi_set({"a", "b"}, {Bytes()});
      },
      ErrorCode::InvalidArgument, {"values"});
}

TYPED_TEST(StoreTest, RemoveCheckNumKeys) {
  EXPECT_EQ(this->store_->num_keys(), 0);
  this->store_->set("r1", to_bytes("x"));
  this->store_->set("r2", to_bytes("y"));
  this->store_->add("r3", 1);
  EXPECT_EQ(this->store_->num_keys(), 3);
  EXPECT_TRUE(this->store_->check({"r1", "r2", "r3"}));
  EXPECT_FALSE(this->store_->check({"r1", "nope"}));
  EXPECT_TRUE(this->store_->check({}));
  EXPECT_TRUE(this->store_->remove("r1"));
  EXPECT_FALSE(this->store_->remove("r1"));
  EXPECT_FALSE(this->store_->check({"r1"}));
  EXPECT_EQ(this->store_->num_keys(), 2);
  expect_error([&] { this->store_->get("r1", 50ms); }, ErrorCode::Timeout, {"r1"});
}

TYPED_TEST(StoreTest, LimitsAreEnforced) {
  expect_error([&] { this->store_->set("", Bytes()); }, ErrorCode::InvalidArgument,
               {"'key'", "empty"});
  std::string max_key(kStoreMaxKeyBytes, 'k');
  this->store_->set(max_key, to_bytes("ok"));
  EXPECT_EQ(to_string(this->store_->get(max_key, 0ms)), "ok");
  std::string long_key(kStoreMaxKeyBytes + 1, 'k');
  expect_error([&] { this->store_->set(long_key, Bytes()); }, ErrorCode::InvalidArgument,
               {"'key'", "kStoreMaxKeyBytes"});
  expect_error([&] { this->store_->get(long_key, 0ms); }, ErrorCode::InvalidArgument,
               {"'key'", "kStoreMaxKeyBytes"});
  expect_error(
      [&] {
        this->store_->wait({"ok", long_key}, 0ms);
      },
      ErrorCode::InvalidArgument, {"'key'"});
  Bytes too_big(kStoreMaxValueBytes + 1, 7);
  expect_error([&] { this->store_->set("big", too_big); }, ErrorCode::InvalidArgument,
               {"'value'", "kStoreMaxValueBytes"});
  EXPECT_FALSE(this->store_->check({"big"}));
}

TYPED_TEST(StoreTest, LargestValueRoundTrips) {
  Bytes v(kStoreMaxValueBytes);
  for (size_t i = 0; i < v.size(); i += 4093) v[i] = static_cast<uint8_t>(i * 31);
  this->store_->set("largest", v);
  EXPECT_EQ(this->store_->get("largest", 10s), v);
}

TYPED_TEST(StoreTest, ConcurrentThreadsSeeEachOthersKeys) {
  constexpr int kThreads = 4, kKeys = 50;
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (int i = 0; i < kThreads; ++i) {
    auto s = this->factory_.another(this->store_);
    ts.emplace_back([s, i, &bad] {
      try {
        for (int k = 0; k < kKeys; ++k) {
          s->set("c/" + std::to_string(i) + "/" + std::to_string(k),
                 to_bytes(std::to_string(k * i)));
        }
        int peer = (i + 1) % kThreads;
        for (int k = 0; k < kKeys; ++k) {
          auto v = s->get("c/" + std::to_string(peer) + "/" + std::to_string(k), 10s);
          if (to_string(v) != std::to_string(k * peer)) ++bad;
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "thread " << i << ": " << e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(StoreBytes, ToBytesToString) {
  EXPECT_EQ(to_string(to_bytes("hello")), "hello");
  EXPECT_EQ(to_bytes(std::string_view("a\0b", 3)).size(), 3u);
  EXPECT_TRUE(to_bytes("").empty());
}

}  // namespace
}  // namespace symmem::test

namespace symmem::test {
namespace {

TEST(FileStoreUrl, ConnectOpensTheDirectory) {
  FileStoreFactory f;
  auto a = f.make();
  auto b = Store::connect("file://" + f.dir);
  a->set("shared/key", to_bytes("v"));
  EXPECT_EQ(to_string(b->get("shared/key", std::chrono::seconds(1))), "v");
  EXPECT_EQ(b->num_keys(), 1);
}

}  // namespace
}  // namespace symmem::test
