// symmem-bench's pure parts: bus-bandwidth factors (nccl-tests), sizes, table and JSON rows,
// the time spread, the per-op size help and the ranks' CPU lists.
#include <gtest/gtest.h>

#include <sstream>

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

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> w;
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

TEST(BenchFormat, SpreadOfIterations) {
  Spread s = spread_of({5.0, 1.0, 9.0, 3.0, 2.0});
  EXPECT_DOUBLE_EQ(s.median_us, 3.0);
  EXPECT_DOUBLE_EQ(s.min_us, 1.0);
  EXPECT_DOUBLE_EQ(s.max_us, 9.0);
  s = spread_of({4.0, 1.0, 2.0, 100.0});  // even count: the mean of the middle two
  EXPECT_DOUBLE_EQ(s.median_us, 3.0);
  EXPECT_DOUBLE_EQ(s.max_us, 100.0);
  s = spread_of({});
  EXPECT_TRUE(std::isnan(s.median_us) && std::isnan(s.min_us) && std::isnan(s.max_us));
}

TEST(BenchFormat, TimeColumnsAsNcclTestsThenTheSpread) {
  // nccl-tests' columns keep their positions; the spread comes after #wrong, then the
  // algorithm that ran.
  EXPECT_EQ(
      words(table_header()),
      (std::vector<std::string>{"#", "size", "count", "type", "redop", "time(us)", "algbw(GB/s)",
                                "busbw(GB/s)", "#wrong", "med(us)", "min(us)", "max(us)", "algo"}));
  Row r = make_row(OpKind::all_reduce, 2, 4096, 1024, 3.25);
  r.dtype = "f32";
  r.redop = "sum";
  r.wrong = 0;
  r.iters = 20;
  r.spread = Spread{2.875, 2.5, 61.0};
  r.chosen = "two_shot";
  auto w = words(table_row(r));
  ASSERT_EQ(w.size(), 12u) << table_row(r);
  EXPECT_EQ(w[11], "two_shot");
  EXPECT_EQ(w[0], "4096");
  EXPECT_EQ(w[1], "1024");
  EXPECT_EQ(w[4], "3.25");
  EXPECT_EQ(w[7], "0");
  EXPECT_EQ(w[8], "2.88");    // median
  EXPECT_EQ(w[9], "2.50");    // min
  EXPECT_EQ(w[10], "61.00");  // max
  // Header and rows line up: every column ends where its header ends.
  const std::string h = table_header(), row = table_row(r);
  for (const char* col : {"time(us)", "#wrong", "med(us)", "max(us)"}) {
    const size_t end = h.find(col) + std::string(col).size();
    EXPECT_NE(row[end - 1], ' ') << col << "\n" << h << row;
    EXPECT_TRUE(row[end] == ' ' || row[end] == '\n') << col << "\n" << h << row;
  }
  std::string js = json_row(r);
  for (const char* f : {"\"time_us\": 3.250", "\"iters\": 20", "\"time_median_us\": 2.875",
                        "\"time_min_us\": 2.500", "\"time_max_us\": 61.000", "\"wrong\": 0",
                        "\"busbw_gbps\"", "\"algo_ran\": \"two_shot\""})
    EXPECT_NE(js.find(f), std::string::npos) << f << " in " << js;
  EXPECT_EQ(js.find('\n'), js.size() - 1);
  // Not measured: N/A in the table, null in JSON.
  r.spread = Spread{};
  w = words(table_row(r));
  ASSERT_EQ(w.size(), 12u);
  EXPECT_EQ(w[8], "N/A");
  EXPECT_EQ(w[10], "N/A");
  js = json_row(r);
  EXPECT_NE(js.find("\"time_median_us\": null"), std::string::npos) << js;
  EXPECT_NE(js.find("\"time_max_us\": null"), std::string::npos) << js;
}

TEST(BenchFormat, SizeHelpFollowsTheOpTable) {
  const std::string h = size_help();
  std::vector<std::string> lines;
  std::istringstream in(h);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), all_ops().size()) << h;
  for (size_t i = 0; i < lines.size(); ++i) {
    const OpInfo& row = op_info(all_ops()[i]);
    EXPECT_EQ(words(lines[i])[0], row.name) << lines[i];
    EXPECT_NE(lines[i].find(std::string(row.count_arg) + " = size / dtype bytes"),
              std::string::npos)
        << lines[i];
  }
  auto line_of = [&](const char* op) {
    for (const auto& l : lines)
      if (words(l)[0] == op) return l;
    return std::string();
  };
  EXPECT_NE(line_of("all_reduce").find("send c "), std::string::npos);
  EXPECT_NE(line_of("all_reduce").find("size = each buffer; count = size / dtype bytes"),
            std::string::npos)
      << line_of("all_reduce");
  EXPECT_EQ(line_of("all_reduce").find("/ N"), std::string::npos);
  EXPECT_NE(line_of("reduce_scatter").find("send c x N"), std::string::npos);
  EXPECT_NE(line_of("reduce_scatter").find("size = the send buffer"), std::string::npos);
  EXPECT_NE(line_of("reduce_scatter").find("recv_count = size / dtype bytes / N"),
            std::string::npos);
  EXPECT_NE(line_of("all_gather").find("size = the receive buffer"), std::string::npos);
  EXPECT_NE(line_of("all_gather").find("send_count = size / dtype bytes / N"), std::string::npos);
  EXPECT_NE(line_of("broadcast").find("(root's)"), std::string::npos);
  EXPECT_NE(line_of("all_to_all_v").find("N equal blocks"), std::string::npos);
}

TEST(BenchFormat, CpuListsAndBindingLines) {
  uint64_t m[2] = {0, 0};
  EXPECT_EQ(cpu_list(m, 2), "none");
  m[0] = 0xF | (1u << 8) | (3u << 10);
  EXPECT_EQ(cpu_list(m, 2), "0-3,8,10,11");
  m[0] = uint64_t{1} << 63;
  m[1] = 1;
  EXPECT_EQ(cpu_list(m, 2), "63,64");
  m[1] = 0x7;
  EXPECT_EQ(cpu_list(m, 2), "63-66");
  EXPECT_EQ(binding_lines({"0", "1"}), "# cpus (sched_getaffinity): rank 0: 0, rank 1: 1\n");
  EXPECT_EQ(binding_lines({"0-1", "0-1", "0-1"}), "# cpus (sched_getaffinity): every rank 0-1\n");
  EXPECT_EQ(binding_lines({"5"}), "# cpus (sched_getaffinity): rank 0: 5\n");
  // Many ranks wrap into several lines, each a comment of at most ~100 characters.
  std::vector<std::string> many;
  for (int r = 0; r < 64; ++r) many.push_back(std::to_string(r));
  std::istringstream in(binding_lines(many));
  int n = 0;
  std::string all;
  for (std::string l; std::getline(in, l); ++n) {
    EXPECT_EQ(l[0], '#') << l;
    EXPECT_LE(l.size(), 100u) << l;
    all += l;
  }
  EXPECT_GT(n, 1);
  EXPECT_NE(all.find("rank 63: 63"), std::string::npos);
}

}  // namespace
}  // namespace symmem::bench
