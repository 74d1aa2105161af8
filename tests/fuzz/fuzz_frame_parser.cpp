// libFuzzer target for the TcpStore frame parser (src/core/store/tcp_protocol.cpp).
// Properties checked on every input, in both directions and with both body limits:
//   - parse_frame never crashes, never reads out of bounds (ASan), never hits UB (UBSan);
//   - a parsed frame consumed no more than the input, and re-encodes to exactly those bytes;
//   - kBad always comes with a reason; kIncomplete never claims fewer bytes than it has.
// Short run: ctest -L fuzz. Longer: see docs/store.md.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/store/tcp_protocol.hpp"

using namespace symmem::tcp;

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

void one(const uint8_t* data, size_t size, Direction dir, size_t max_body) {
  Frame f;
  ParseResult r = parse_frame(data, size, dir, max_body, &f);
  switch (r.status) {
    case ParseStatus::kFrame: {
      check(r.consumed >= kTcpHeaderBytes && r.consumed <= size);
      symmem::Bytes again;
      check(encode_frame(f, &again));
      check(again.size() == r.consumed && std::memcmp(again.data(), data, r.consumed) == 0);
      Frame g;
      ParseResult r2 = parse_frame(again.data(), again.size(), dir, max_body, &g);
      check(r2.status == ParseStatus::kFrame && r2.consumed == again.size());
      check(g.keys == f.keys && g.values == f.values && g.num == f.num && g.op == f.op);
      break;
    }
    case ParseStatus::kBad:
      check(!r.error.empty());
      break;
    case ParseStatus::kIncomplete:
      check(r.needed == 0 || r.needed > size);
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  one(data, size, Direction::kRequest, kTcpMaxBodyBytes);
  one(data, size, Direction::kRequest, kTcpMaxHelloBodyBytes);
  one(data, size, Direction::kReply, kTcpMaxBodyBytes);
  return 0;
}
