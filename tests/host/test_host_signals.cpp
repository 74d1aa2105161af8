// Signals in NVSHMEM's terms on the host backend: SymmetricMemory::signal_op (set, add) and
// wait_until (eq, ne, gt, ge, lt, le), their errors and timeouts. Ranks are threads.

#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "host_test_util.hpp"
#include "symmem/symmem.hpp"
#include "test_util.hpp"

namespace symmem::test {
namespace {

constexpr size_t kSlot = 37;  // a raw slot past the channel slots a 2-rank barrier uses

TEST(HostSignals, SetAddAndEveryComparison) {
  auto errors = run_ranks(2, [&](Group& g) {
    auto buf = allocate(g, 4096);
    if (g.rank() == 1) {
      // Data written before a signal is visible once the peer's wait sees it.
      std::memset(buf.ptr(0), 0x5a, 64);
      buf.signal_op(0, kSlot, 10, SignalOp::set);
      EXPECT_EQ(buf.wait_until(kSlot, Cmp::eq, 1), 1u);  // rank 0's answer, on our pad
      buf.signal_op(0, kSlot, 5, SignalOp::add);         // 15
      EXPECT_EQ(buf.wait_until(kSlot, Cmp::eq, 2), 2u);
      buf.signal_op(0, kSlot, 3, SignalOp::set);  // 3
      return;
    }
    EXPECT_EQ(buf.wait_until(kSlot, Cmp::eq, 10), 10u);
    const auto* bytes = static_cast<const unsigned char*>(buf.ptr(0));
    for (int i = 0; i < 64; ++i) ASSERT_EQ(bytes[i], 0x5a);
    EXPECT_EQ(buf.wait_until(kSlot, Cmp::ne, 0), 10u);
    EXPECT_EQ(buf.wait_until(kSlot, Cmp::le, 10), 10u);
    buf.signal_op(1, kSlot, 1, SignalOp::set);
    EXPECT_EQ(buf.wait_until(kSlot, Cmp::gt, 14), 15u);  // after the add
    EXPECT_EQ(buf.wait_until(kSlot, Cmp::ge, 15), 15u);
    buf.signal_op(1, kSlot, 2, SignalOp::set);
    EXPECT_EQ(buf.wait_until(kSlot, Cmp::lt, 4), 3u);  // after the set to 3
    EXPECT_EQ(buf.wait_until(kSlot, Cmp::le, 3), 3u);
    // A signal to oneself works too, and add wraps.
    buf.signal_op(0, kSlot, 0xffffffffu, SignalOp::add);
    EXPECT_EQ(buf.wait_until(kSlot, Cmp::eq, 2), 2u);
  });
  expect_no_errors(errors);
}

TEST(HostSignals, TimeoutNamesSlotComparisonAndValue) {
  auto errors = run_ranks(2, [&](Group& g) {
    auto buf = allocate(g, 4096);
    expect_error([&] { buf.wait_until(kSlot + 1, Cmp::eq, 7, Millis(200)); }, ErrorCode::Timeout,
                 {"wait_until", "slot 38", "eq 7", "holds 0", g.rank() == 0 ? "rank 0" : "rank 1"});
    expect_error([&] { buf.wait_until(kSlot + 1, Cmp::ne, 0, Millis(0)); }, ErrorCode::Timeout,
                 {"ne 0"});
  });
  expect_no_errors(errors);
}

TEST(HostSignals, BadArgumentsAreNamed) {
  auto errors = run_ranks(2, [&](Group& g) {
    auto buf = allocate(g, 4096);
    const size_t slots = buf.signal_pad_bytes() / 4;
    expect_error([&] { buf.signal_op(2, 0, 1); }, ErrorCode::InvalidArgument, {"'peer'", "2"});
    expect_error([&] { buf.signal_op(1 - g.rank(), slots, 1); }, ErrorCode::InvalidArgument,
                 {"'slot'", std::to_string(slots).c_str()});
    expect_error([&] { buf.wait_until(slots + 3, Cmp::eq, 1); }, ErrorCode::InvalidArgument,
                 {"'slot'"});
    expect_error([&] { buf.signal_op(0, 0, 1, static_cast<SignalOp>(9)); },
                 ErrorCode::InvalidArgument, {"'op'"});
    expect_error([&] { buf.wait_until(0, static_cast<Cmp>(9), 1); }, ErrorCode::InvalidArgument,
                 {"'cmp'"});
    EXPECT_EQ(parse_cmp("ge"), Cmp::ge);
    EXPECT_EQ(parse_signal_op("add"), SignalOp::add);
    expect_error([&] { parse_cmp("gte"); }, ErrorCode::InvalidArgument, {"gte", "eq, ne"});
  });
  expect_no_errors(errors);
}

TEST(HostSignals, AbortEndsAWait) {
  auto errors = run_ranks(2, [&](Group& g) {
    auto buf = allocate(g, 4096);
    std::thread t([g] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      g.abort("signals test");
    });
    expect_error([&] { buf.wait_until(kSlot, Cmp::eq, 99); }, ErrorCode::Aborted, {"signals test"});
    t.join();
  });
  expect_no_errors(errors);
}

}  // namespace
}  // namespace symmem::test
