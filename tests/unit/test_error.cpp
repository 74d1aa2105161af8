#include <gtest/gtest.h>

#include "core/check.hpp"
#include "symmem/error.hpp"
#include "symmem/types.hpp"
#include "test_util.hpp"

using symmem::ErrorCode;

TEST(Error, CarriesCodeAndFormatsOpAndRank) {
  try {
    symmem::throw_error(ErrorCode::Timeout, "barrier", 3, "waited 10 ms for rank 1 on channel 2");
    FAIL() << "no throw";
  } catch (const symmem::Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout);
    EXPECT_STREQ(e.what(), "barrier: rank 3: waited 10 ms for rank 1 on channel 2");
  }
  symmem::test::expect_error(
      [] { symmem::throw_invalid_argument("all_reduce", 1, "count", "is too large"); },
      ErrorCode::InvalidArgument, {"all_reduce: rank 1: argument 'count' is too large"});
}

TEST(Error, CodesHaveNames) {
  EXPECT_STREQ(symmem::to_string(ErrorCode::InvalidArgument), "InvalidArgument");
  EXPECT_STREQ(symmem::to_string(ErrorCode::BackendUnavailable), "BackendUnavailable");
  EXPECT_STREQ(symmem::to_string(ErrorCode::PeerFailure), "PeerFailure");
}

TEST(Error, SysCheckStringifiesCallWithErrno) {
  auto fail = [] {
    errno = 0;
    SYMMEM_CHECK_SYS("open_thing", 2, ::close(-1));
  };
  symmem::test::expect_error(
      fail, ErrorCode::System,
      {"open_thing: rank 2: ::close(-1) failed at", "test_error.cpp:", "Bad file descriptor"});
}

TEST(Error, ArgCheckNamesArgument) {
  auto fail = [] {
    int root = 9;
    SYMMEM_CHECK_ARG("broadcast", 0, root < 4, "root", "= " << root << " is outside [0, 4)");
  };
  symmem::test::expect_error(fail, ErrorCode::InvalidArgument,
                             {"broadcast: rank 0: argument 'root' = 9 is outside [0, 4)"});
}

TEST(Types, ParseAndPrint) {
  EXPECT_EQ(symmem::parse_dtype("bfloat16"), symmem::DType::bf16);
  EXPECT_EQ(symmem::dtype_size(symmem::DType::i64), 8u);
  EXPECT_STREQ(symmem::to_string(symmem::ReduceOp::avg), "avg");
  EXPECT_EQ(symmem::parse_algo("two_shot"), symmem::Algo::two_shot);
  symmem::test::expect_error([] { symmem::parse_dtype("f8"); }, ErrorCode::InvalidArgument,
                             {"'dtype'", "f8"});
  symmem::test::expect_error([] { symmem::dtype_size(static_cast<symmem::DType>(42)); },
                             ErrorCode::InvalidArgument, {"dtype", "42"});
}
