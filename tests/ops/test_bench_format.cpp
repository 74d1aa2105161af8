// symmem-bench's pure parts: bus-bandwidth factors (nccl-tests), sizes, table and JSON rows.
#include <gtest/gtest.h>

#include "bench_format.hpp"

namespace symmem::bench {
namespace {

TEST(BenchFormat, BusBandwidthFactorsMatchNcclTests) {
  EXPECT_DOUBLE_EQ(busbw_factor(OpKind::all_reduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(busbw_factor(OpKind::all_reduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(OpKind::reduce_scatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(OpKind::all_gather, 8), 0.875);
  EXPECT_DOUBLE_EQ(busbw_factor(OpKind::all_to_all, 2), 0.5);
  EXPECT_DOUBLE_EQ(busbw_factor(OpKind::broadcast, 8), 1.0);
}

TEST(BenchFormat, Sizes) {
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("4K"), 4096u);
  EXPECT_EQ(parse_size("16M"), 16u << 20);
  EXPECT_EQ(parse_size("1G"), 1u << 30);
  EXPECT_THROW(parse_size("4X"), std::invalid_argument);
  EXPECT_THROW(parse_size("abc"), std::invalid_argument);
}

TEST(BenchFormat, RowsAndJson) {
  Row r = make_row(OpKind::all_reduce, 4, 1 << 20, (1 << 20) / 4, 100.0);
  EXPECT_NEAR(r.algbw_gbps, 10.48576, 1e-9);
  EXPECT_NEAR(r.busbw_gbps, 15.72864, 1e-9);
  r.backend = "host";
  r.algo = "auto";
  r.dtype = "f32";
  r.redop = "sum";
  r.wrong = 0;
  std::string line = table_row(r);
  EXPECT_NE(line.find("1048576"), std::string::npos);
  EXPECT_NE(line.find("262144"), std::string::npos);
  EXPECT_NE(line.find("10.49"), std::string::npos);
  EXPECT_NE(line.find("15.73"), std::string::npos);
  std::string js = json_row(r);
  for (const char* f : {"\"op\": \"all_reduce\"", "\"backend\": \"host\"", "\"algo\": \"auto\"",
                        "\"dtype\": \"f32\"", "\"redop\": \"sum\"", "\"ranks\": 4",
                        "\"bytes\": 1048576", "\"count\": 262144", "\"time_us\": 100.000",
                        "\"algbw_gbps\"", "\"busbw_gbps\"", "\"wrong\": 0"})
    EXPECT_NE(js.find(f), std::string::npos) << f << " in " << js;
  EXPECT_EQ(js.back(), '\n');
  EXPECT_EQ(js.find('\n'), js.size() - 1);
  EXPECT_NE(table_header().find("#wrong"), std::string::npos);
  OpKind op;
  EXPECT_TRUE(parse_op("all_to_all_v", &op));
  EXPECT_EQ(op, OpKind::all_to_all_v);
  EXPECT_FALSE(parse_op("allreduce", &op));
  EXPECT_FALSE(parse_op("barrier", &op));  // not a collective: nothing to time per byte
  EXPECT_EQ(all_ops().size(), 6u);
}

}  // namespace
}  // namespace symmem::bench
