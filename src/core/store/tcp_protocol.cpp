#include "core/store/tcp_protocol.hpp"

#include <algorithm>
#include <cstring>
#include <new>

namespace symmem::tcp {

namespace {

uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint16_t load_u16(const uint8_t* p) {
  return uint16_t(p[0] | p[1] << 8);
}
uint64_t load_u64(const uint8_t* p) {
  return uint64_t(load_u32(p)) | uint64_t(load_u32(p + 4)) << 32;
}
void store_u32(Bytes* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(uint8_t(v >> (8 * i)));
}
void store_u64(Bytes* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(uint8_t(v >> (8 * i)));
}

bool is_request(Op op) {
  return op >= Op::kHello && op <= Op::kCancelOnClose;
}
bool is_reply(Op op) {
  return op == Op::kOk || op == Op::kTimeout || op == Op::kError;
}

// Reads a body in order; every read checks the remaining length first.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  size_t left() const { return n_ - pos_; }
  bool u32(uint32_t* v) {
    if (left() < 4) return false;
    *v = load_u32(p_ + pos_);
    pos_ += 4;
    return true;
  }
  bool u64(uint64_t* v) {
    if (left() < 8) return false;
    *v = load_u64(p_ + pos_);
    pos_ += 8;
    return true;
  }
  const uint8_t* take(size_t len) {
    if (left() < len) return nullptr;
    const uint8_t* r = p_ + pos_;
    pos_ += len;
    return r;
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

ParseResult bad(std::string why) {
  ParseResult r;
  r.status = ParseStatus::kBad;
  r.error = std::move(why);
  return r;
}

// Checks the op's shape; returns an empty string when it fits.
std::string check_shape(const Frame& f) {
  const size_t k = f.keys.size(), v = f.values.size();
  auto want = [&](bool ok, const char* shape) -> std::string {
    if (ok) return {};
    return std::string(op_name(f.op)) + " expects " + shape + ", got " + std::to_string(k) +
           " keys and " + std::to_string(v) + " values";
  };
  switch (f.op) {
    case Op::kHello:
      if (k == 0 && v == 1 && f.values[0].size() > kTcpMaxTokenBytes) return "token is too long";
      return want(k == 0 && v == 1, "0 keys and 1 value");
    case Op::kSet:
    case Op::kSetOnClose:
      return want(k == 1 && v == 1, "1 key and 1 value");
    case Op::kGet:
      if (f.num < 0) return "get with a negative timeout";
      return want(k == 1 && v == 0, "1 key and 0 values");
    case Op::kWait:
    case Op::kMultiGet:
      if (f.num < 0) return std::string(op_name(f.op)) + " with a negative timeout";
      return want(v == 0, "0 values");
    case Op::kAdd:
    case Op::kRemove:
    case Op::kCancelOnClose:
      return want(k == 1 && v == 0, "1 key and 0 values");
    case Op::kCompareSet:
      return want(k == 1 && v == 2, "1 key and 2 values");
    case Op::kMultiSet:
      return want(k == v, "as many values as keys");
    case Op::kCheck:
      return want(v == 0, "0 values");
    case Op::kNumKeys:
      return want(k == 0 && v == 0, "0 keys and 0 values");
    case Op::kOk:
      return {};
    case Op::kTimeout:
      return want(v == 0, "0 values");
    case Op::kError:
      return want(k == 0 && v == 1, "0 keys and 1 value");
  }
  return "unknown op";
}

}  // namespace

const char* op_name(Op op) noexcept {
  switch (op) {
    case Op::kHello:
      return "hello";
    case Op::kSet:
      return "set";
    case Op::kGet:
      return "get";
    case Op::kWait:
      return "wait";
    case Op::kAdd:
      return "add";
    case Op::kCompareSet:
      return "compare_set";
    case Op::kMultiGet:
      return "multi_get";
    case Op::kMultiSet:
      return "multi_set";
    case Op::kRemove:
      return "remove";
    case Op::kCheck:
      return "check";
    case Op::kNumKeys:
      return "num_keys";
    case Op::kSetOnClose:
      return "set_on_disconnect";
    case Op::kCancelOnClose:
      return "cancel_on_disconnect";
    case Op::kOk:
      return "ok";
    case Op::kTimeout:
      return "timeout";
    case Op::kError:
      return "error";
  }
  return "unknown";
}

ParseResult parse_frame(const uint8_t* data, size_t size, Direction dir, size_t max_body,
                        Frame* out) noexcept {
  if (size < 4) return {};
  const uint32_t magic = load_u32(data);
  if (magic != kTcpMagic) return bad("bad magic (not a symmem store frame)");
  if (size < kTcpHeaderBytes) return {};
  const uint8_t version = data[4];
  const uint8_t op_byte = data[5];
  const uint16_t reserved = load_u16(data + 6);
  const uint32_t body_len = load_u32(data + 8);
  const uint32_t id = load_u32(data + 12);
  if (version != kTcpProtocolVersion) {
    return bad("unsupported protocol version " + std::to_string(version) + " (this side speaks " +
               std::to_string(kTcpProtocolVersion) + ")");
  }
  const Op op = static_cast<Op>(op_byte);
  if (dir == Direction::kRequest ? !is_request(op) : !is_reply(op)) {
    return bad("unknown " + std::string(dir == Direction::kRequest ? "request" : "reply") + " op " +
               std::to_string(op_byte));
  }
  if (reserved != 0) return bad("reserved header bits are set");
  if (body_len > max_body || body_len > kTcpMaxBodyBytes) {
    return bad("frame body of " + std::to_string(body_len) + " bytes exceeds the limit of " +
               std::to_string(std::min(max_body, kTcpMaxBodyBytes)) + " bytes");
  }
  ParseResult r;
  r.needed = kTcpHeaderBytes + body_len;
  if (size < r.needed) return r;  // kIncomplete

  try {
    Frame f;
    f.version = version;
    f.op = op;
    f.id = id;
    Reader rd(data + kTcpHeaderBytes, body_len);
    uint32_t nkeys = 0;
    if (!rd.u32(&nkeys)) return bad("body too short for the key count");
    // Each key takes at least 5 bytes (length + one byte): no huge reservation from a lie.
    if (nkeys > rd.left() / 5)
      return bad("key count " + std::to_string(nkeys) + " exceeds the body");
    f.keys.reserve(nkeys);
    for (uint32_t i = 0; i < nkeys; ++i) {
      uint32_t len = 0;
      if (!rd.u32(&len)) return bad("body too short for key " + std::to_string(i));
      if (len == 0) return bad("key " + std::to_string(i) + " is empty");
      if (len > kStoreMaxKeyBytes) {
        return bad("key " + std::to_string(i) + " has " + std::to_string(len) +
                   " bytes, more than kStoreMaxKeyBytes = " + std::to_string(kStoreMaxKeyBytes));
      }
      const uint8_t* p = rd.take(len);
      if (p == nullptr) return bad("key " + std::to_string(i) + " runs past the body");
      f.keys.emplace_back(reinterpret_cast<const char*>(p), len);
    }
    uint32_t nvalues = 0;
    if (!rd.u32(&nvalues)) return bad("body too short for the value count");
    if (nvalues > rd.left() / 4) {
      return bad("value count " + std::to_string(nvalues) + " exceeds the body");
    }
    f.values.reserve(nvalues);
    for (uint32_t i = 0; i < nvalues; ++i) {
      uint32_t len = 0;
      if (!rd.u32(&len)) return bad("body too short for value " + std::to_string(i));
      if (len > kStoreMaxValueBytes) {
        return bad(
            "value " + std::to_string(i) + " has " + std::to_string(len) +
            " bytes, more than kStoreMaxValueBytes = " + std::to_string(kStoreMaxValueBytes));
      }
      const uint8_t* p = rd.take(len);
      if (p == nullptr) return bad("value " + std::to_string(i) + " runs past the body");
      f.values.emplace_back(p, p + len);
    }
    uint64_t num = 0;
    if (!rd.u64(&num)) return bad("body too short for the number field");
    f.num = static_cast<int64_t>(num);
    if (rd.left() != 0) {
      return bad(std::to_string(rd.left()) + " unexpected bytes after the body");
    }
    std::string shape = check_shape(f);
    if (!shape.empty()) return bad(shape);
    *out = std::move(f);
    r.status = ParseStatus::kFrame;
    r.consumed = r.needed;
    return r;
  } catch (const std::bad_alloc&) {
    return bad("out of memory while parsing a frame");
  } catch (...) {
    return bad("unexpected failure while parsing a frame");
  }
}

size_t body_size(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  size_t n = 4 + 4 + 8;
  for (const auto& k : keys) n += 4 + k.size();
  for (const auto& v : values) n += 4 + v.size();
  return n;
}

bool encode_frame(const Frame& f, Bytes* out) {
  const size_t body = body_size(f.keys, f.values);
  if (body > kTcpMaxBodyBytes) return false;
  out->reserve(out->size() + kTcpHeaderBytes + body);
  store_u32(out, kTcpMagic);
  out->push_back(f.version);
  out->push_back(static_cast<uint8_t>(f.op));
  out->push_back(0);
  out->push_back(0);
  store_u32(out, static_cast<uint32_t>(body));
  store_u32(out, f.id);
  store_u32(out, static_cast<uint32_t>(f.keys.size()));
  for (const auto& k : f.keys) {
    store_u32(out, static_cast<uint32_t>(k.size()));
    out->insert(out->end(), k.begin(), k.end());
  }
  store_u32(out, static_cast<uint32_t>(f.values.size()));
  for (const auto& v : f.values) {
    store_u32(out, static_cast<uint32_t>(v.size()));
    out->insert(out->end(), v.begin(), v.end());
  }
  store_u64(out, static_cast<uint64_t>(f.num));
  return true;
}

}  // namespace symmem::tcp
