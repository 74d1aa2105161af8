// The wire protocol's encoder and pure parser.

#include <random>

#include "core/store/tcp_protocol.hpp"
#include "test_util.hpp"

namespace symmem::test {
namespace {

using namespace symmem::tcp;

Bytes encode(const Frame& f) {
  Bytes b;
  EXPECT_TRUE(encode_frame(f, &b));
  return b;
}

ParseResult parse(const Bytes& b, Frame* out, Direction dir = Direction::kRequest,
                  size_t max_body = kTcpMaxBodyBytes) {
  return parse_frame(b.data(), b.size(), dir, max_body, out);
}

Frame set_frame() {
  Frame f;
  f.op = Op::kSet;
  f.id = 42;
  f.keys = {"a/b"};
  f.values = {Bytes{1, 2, 0, 3}};
  return f;
}

TEST(TcpProtocol, RoundTripAndEveryPrefixIsIncomplete) {
  Frame f = set_frame();
  Bytes b = encode(f);
  Frame g;
  auto r = parse(b, &g);
  ASSERT_EQ(r.status, ParseStatus::kFrame) << r.error;
  EXPECT_EQ(r.consumed, b.size());
  EXPECT_EQ(g.op, Op::kSet);
  EXPECT_EQ(g.id, 42u);
  EXPECT_EQ(g.keys, f.keys);
  EXPECT_EQ(g.values, f.values);
  for (size_t n = 0; n < b.size(); ++n) {
    Bytes prefix(b.begin(), b.begin() + static_cast<ptrdiff_t>(n));
    EXPECT_EQ(parse(prefix, &g).status, ParseStatus::kIncomplete) << "prefix " << n;
  }
  // Two frames back to back: the first is parsed, `consumed` points at the second.
  Bytes two = b;
  two.insert(two.end(), b.begin(), b.end());
  r = parse(two, &g);
  EXPECT_EQ(r.status, ParseStatus::kFrame);
  EXPECT_EQ(r.consumed, b.size());
}

TEST(TcpProtocol, RejectsBadHeaders) {
  Frame g;
  Bytes b = encode(set_frame());
  Bytes bad = b;
  bad[0] ^= 1;
  auto r = parse(bad, &g);
  EXPECT_EQ(r.status, ParseStatus::kBad);
  EXPECT_NE(r.error.find("magic"), std::string::npos);
  bad = b;
  bad[4] = 9;
  r = parse(bad, &g);
  EXPECT_EQ(r.status, ParseStatus::kBad);
  EXPECT_NE(r.error.find("version 9"), std::string::npos) << r.error;
  bad = b;
  bad[5] = 99;
  r = parse(bad, &g);
  EXPECT_EQ(r.status, ParseStatus::kBad);
  EXPECT_NE(r.error.find("unknown request op 99"), std::string::npos) << r.error;
  // A reply op is not a request, and the other way round.
  EXPECT_EQ(parse(b, &g, Direction::kReply).status, ParseStatus::kBad);
  bad = b;
  bad[6] = 1;
  EXPECT_EQ(parse(bad, &g).status, ParseStatus::kBad);
  // Oversized body: rejected from the header alone, before the body arrives.
  bad = Bytes(b.begin(), b.begin() + kTcpHeaderBytes);
  bad[8] = bad[9] = bad[10] = bad[11] = 0xff;
  r = parse(bad, &g);
  EXPECT_EQ(r.status, ParseStatus::kBad);
  EXPECT_NE(r.error.find("exceeds the limit"), std::string::npos) << r.error;
  // A smaller limit (before authentication).
  Frame big = set_frame();
  big.values[0].resize(kTcpMaxHelloBodyBytes + 1);
  Bytes bb = encode(big);
  EXPECT_EQ(parse(Bytes(bb.begin(), bb.begin() + kTcpHeaderBytes), &g, Direction::kRequest,
                  kTcpMaxHelloBodyBytes)
                .status,
            ParseStatus::kBad);
}

TEST(TcpProtocol, RejectsBadBodies) {
  Frame g;
  // Empty key.
  Frame f = set_frame();
  f.keys = {""};
  EXPECT_EQ(parse(encode(f), &g).status, ParseStatus::kBad);
  // Oversized key.
  f.keys = {std::string(kStoreMaxKeyBytes + 1, 'k')};
  auto r = parse(encode(f), &g);
  EXPECT_EQ(r.status, ParseStatus::kBad);
  EXPECT_NE(r.error.find("kStoreMaxKeyBytes"), std::string::npos) << r.error;
  // Wrong shapes.
  f = set_frame();
  f.values.clear();
  r = parse(encode(f), &g);
  EXPECT_EQ(r.status, ParseStatus::kBad);
  EXPECT_NE(r.error.find("set expects 1 key and 1 value"), std::string::npos) << r.error;
  f = Frame();
  f.op = Op::kGet;
  f.keys = {"k"};
  f.num = -5;
  EXPECT_EQ(parse(encode(f), &g).status, ParseStatus::kBad);
  f.op = Op::kMultiSet;
  f.keys = {"a", "b"};
  f.values = {Bytes()};
  f.num = 0;
  EXPECT_EQ(parse(encode(f), &g).status, ParseStatus::kBad);
  f = Frame();
  f.op = Op::kHello;
  f.values = {Bytes(kTcpMaxTokenBytes + 1, 't')};
  EXPECT_EQ(parse(encode(f), &g).status, ParseStatus::kBad);
  // Trailing bytes inside the declared body.
  Bytes b = encode(set_frame());
  b.push_back(0);
  b[8] += 1;
  r = parse(b, &g);
  EXPECT_EQ(r.status, ParseStatus::kBad);
  EXPECT_NE(r.error.find("unexpected bytes"), std::string::npos) << r.error;
  // A key count that lies.
  b = encode(set_frame());
  b[kTcpHeaderBytes + 3] = 0x7f;
  EXPECT_EQ(parse(b, &g).status, ParseStatus::kBad);
}

TEST(TcpProtocol, RandomMutationsNeverCrash) {
  std::mt19937 rng(1234);
  Frame f;
  f.op = Op::kMultiSet;
  f.keys = {"x", "yy", "zzz"};
  f.values = {Bytes{1}, Bytes{}, Bytes(100, 7)};
  const Bytes base = encode(f);
  int frames = 0, bad = 0, incomplete = 0;
  for (int i = 0; i < 20000; ++i) {
    Bytes b = base;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 3) {
        case 0:
          b[rng() % b.size()] = static_cast<uint8_t>(rng());
          break;
        case 1:
          b.resize(rng() % (b.size() + 1));
          break;
        case 2:
          b.insert(b.begin() + static_cast<ptrdiff_t>(rng() % (b.size() + 1)), uint8_t(rng()));
          break;
      }
      if (b.empty()) b.push_back(0);
    }
    Frame g;
    auto r = parse_frame(b.data(), b.size(), i % 2 ? Direction::kReply : Direction::kRequest,
                         kTcpMaxBodyBytes, &g);
    if (r.status == ParseStatus::kFrame) {
      ++frames;
      EXPECT_LE(r.consumed, b.size());
    } else if (r.status == ParseStatus::kBad) {
      ++bad;
      EXPECT_FALSE(r.error.empty());
    } else {
      ++incomplete;
    }
  }
  EXPECT_GT(bad, 0);
  EXPECT_GT(incomplete, 0);
}

}  // namespace
}  // namespace symmem::test
