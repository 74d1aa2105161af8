#pragma once

// The TcpStore wire protocol (version 1). Pure encoding and parsing: no I/O, no globals, no
// exceptions from parse_frame, so the parser can run under a fuzzer.
//
// Every message, in both directions, is one frame; integers are little-endian:
//
//   header (16 bytes)
//     u32 magic     0x4D4D5953 ("SYMM")
//     u8  version   kTcpProtocolVersion
//     u8  op        a request op (client -> server) or a reply status (server -> client)
//     u16 reserved  0
//     u32 body_len  bytes after the header, <= kTcpMaxBodyBytes
//     u32 id        chosen by the client; the reply carries the same id
//   body
//     u32 nkeys,   then nkeys   x (u32 len, len bytes)    each key 1..kStoreMaxKeyBytes bytes
//     u32 nvalues, then nvalues x (u32 len, len bytes)    each value <= kStoreMaxValueBytes
//     i64 num                                             timeout (ms), delta, count, ...
//   A frame whose body holds bytes after `num` is malformed.
//
// Requests and their shapes (keys, values, num):
//   kHello       0, 1 (token, <= kTcpMaxTokenBytes), 0   must be the first frame
//   kSet         1, 1, 0
//   kGet         1, 0, timeout_ms >= 0                   parked until the key exists
//   kWait        n, 0, timeout_ms >= 0                   parked until all keys exist
//   kAdd         1, 0, delta
//   kCompareSet  1, 2 (expected, desired), 0
//   kMultiGet    n, 0, timeout_ms >= 0                   parked until all keys exist
//   kMultiSet    n, n, 0
//   kRemove      1, 0, 0
//   kCheck       n, 0, 0
//   kNumKeys     0, 0, 0
//   kSetOnClose  1, 1, 0                                 server sets key=value when this
//                                                        connection ends (not on server stop)
//   kCancelOnClose 1, 0, 0                               forgets that; num = 1 if it existed
// Replies:
//   kOk          results: values (get, multi_get, compare_set) or num (add, remove, check,
//                num_keys: the integer / 0 or 1)
//   kTimeout     keys = the keys still missing at the deadline
//   kError       num = ErrorCode, values[0] = message; for protocol errors the server then
//                closes the connection

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "symmem/export.hpp"
#include "symmem/store.hpp"

namespace symmem::tcp {

inline constexpr uint32_t kTcpMagic = 0x4D4D5953u;
inline constexpr uint8_t kTcpProtocolVersion = 1;
inline constexpr size_t kTcpHeaderBytes = 16;
inline constexpr size_t kTcpMaxTokenBytes = 4096;
// Largest body: compare_set carries two maximal values; 16 MiB more for keys and lengths.
inline constexpr size_t kTcpMaxBodyBytes = 2 * kStoreMaxValueBytes + (16u << 20);
// Body limit before the client has presented its token (a kHello frame and nothing else).
inline constexpr size_t kTcpMaxHelloBodyBytes = kTcpMaxTokenBytes + 64;
// Disconnect keys one connection may register.
inline constexpr size_t kTcpMaxDisconnectKeys = 4096;

enum class Op : uint8_t {
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kWait = 4,
  kAdd = 5,
  kCompareSet = 6,
  kMultiGet = 7,
  kMultiSet = 8,
  kRemove = 9,
  kCheck = 10,
  kNumKeys = 11,
  kSetOnClose = 12,
  kCancelOnClose = 13,
  kOk = 0x80,
  kTimeout = 0x81,
  kError = 0x82,
};

SYMMEM_API const char* op_name(Op op) noexcept;

struct Frame {
  uint8_t version = kTcpProtocolVersion;
  Op op = Op::kOk;
  uint32_t id = 0;
  std::vector<std::string> keys;
  std::vector<Bytes> values;
  int64_t num = 0;
};

enum class Direction { kRequest, kReply };

enum class ParseStatus {
  kIncomplete,  // more bytes are needed; `needed` says how many in total when known
  kFrame,       // one frame parsed into *out; `consumed` bytes belong to it
  kBad,         // malformed; `error` says why. The connection cannot be resynchronised.
};

struct ParseResult {
  ParseStatus status = ParseStatus::kIncomplete;
  size_t consumed = 0;
  size_t needed = 0;  // total bytes of the frame once the header is known (else 0)
  std::string error;
};

// Parses the frame at the start of data[0, size). Checks magic, version, reserved bits, the body
// length against `max_body`, the op against `dir`, every length against the data and the store
// limits, and the shape of the op (see the table above). Never throws (allocation failure is
// reported as kBad), never reads outside the range.
SYMMEM_API ParseResult parse_frame(const uint8_t* data, size_t size, Direction dir, size_t max_body,
                                   Frame* out) noexcept;

// Appends the encoding of `f` to `out`. Returns false (and appends nothing) when the body would
// exceed kTcpMaxBodyBytes.
SYMMEM_API bool encode_frame(const Frame& f, Bytes* out);
// Encoded body size of a frame with these contents.
SYMMEM_API size_t body_size(const std::vector<std::string>& keys, const std::vector<Bytes>& values);

}  // namespace symmem::tcp
