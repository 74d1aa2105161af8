#pragma once

// Key-value rendezvous store. Every blocking call has a deadline; a Timeout error names the
// keys still missing. Values are arbitrary bytes.
//
//   auto store = symmem::Store::connect("tcp://127.0.0.1:29500", token);
//   store->set("k", symmem::to_bytes("v"));
//   auto v = store->get("k", std::chrono::seconds(10));
//
// Implementations: TcpStore (client of a TcpStoreServer), FileStore (shared filesystem),
// HashStore (in-process, for tests). All are safe to use from several threads.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "symmem/export.hpp"

namespace symmem {

using Bytes = std::vector<uint8_t>;
using Millis = std::chrono::milliseconds;

// NOTE [timeouts]: every Millis timeout symmem takes (Store, Group, SymmetricMemory, ops)
// follows one rule.
//   > 0  wait at most this long (anything above ten years counts as ten years).
//   0    do not wait: the call checks once and throws Timeout if what it waits for is not
//        there yet (Store::get/wait/multi_get, SymmetricMemory::barrier/put_signal/
//        wait_signal). Calls that cannot finish without waiting for their peers, and so could
//        only fail, reject 0 with InvalidArgument: GroupOptions::timeout and the ops of ops.hpp.
//   < 0  the default. Spell it kDefaultTimeout (-1); every other negative value means the same.
//        The default is the group's timeout (GroupOptions::timeout) for a SymmetricMemory's
//        barrier/put_signal/wait_signal, and SYMMEM_TIMEOUT_MS (env::timeout(); its default is
//        declared in symmem/env.hpp) everywhere else.
// The library resolves a timeout once, where the call enters it; backends and kernels receive
// the resolved value (>= 0).
inline constexpr Millis kDefaultTimeout{-1};

SYMMEM_API Bytes to_bytes(std::string_view s);
SYMMEM_API std::string to_string(const Bytes& b);

// Limits enforced by every store (and by the TCP wire protocol).
inline constexpr size_t kStoreMaxKeyBytes = 4096;
inline constexpr size_t kStoreMaxValueBytes = 64u << 20;  // 64 MiB

class SYMMEM_API Store {
 public:
  virtual ~Store();

  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Waits until `key` exists (up to `timeout`), then returns its value.
  virtual Bytes get(const std::string& key, Millis timeout) = 0;
  // Waits until every key exists. Timeout error names the missing keys.
  virtual void wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  // Atomically adds `delta` to the integer stored at `key` (absent = 0) and returns the result.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // If the value at `key` equals `expected` (absent matches an empty `expected`), replaces it with
  // `desired`. Returns the value now stored.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected,
                            const Bytes& desired) = 0;
  // Waits for all keys, returns their values in order.
  virtual std::vector<Bytes> multi_get(const std::vector<std::string>& keys, Millis timeout) = 0;
  virtual void multi_set(const std::vector<std::string>& keys,
                         const std::vector<Bytes>& values) = 0;
  // Removes `key`; returns whether it existed.
  virtual bool remove(const std::string& key) = 0;
  // Non-blocking: do all these keys exist?
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual int64_t num_keys() = 0;

  // Disconnect keys ("last will"): asks the store to set `key` to `value` if this client's
  // connection ends before cancel_on_disconnect(key) — the process exited or died, or the network
  // dropped it. Peers waiting on this client can then fail fast instead of timing out. Returns
  // false where the store has no connection to watch (HashStore, FileStore: the default); then
  // callers rely on timeouts alone.
  virtual bool set_on_disconnect(const std::string& key, const Bytes& value);
  virtual void cancel_on_disconnect(const std::string& key);

  // Connects to "tcp://host:port" or opens "file:///path". `token` is presented to TCP servers
  // (empty: SYMMEM_STORE_TOKEN). Retries a refused TCP connection until `timeout`.
  static std::shared_ptr<Store> connect(const std::string& url, const std::string& token = "",
                                        Millis timeout = kDefaultTimeout);
};

// In-process store (tests, single-process groups).
class SYMMEM_API HashStore final : public Store {
 public:
  HashStore();
  ~HashStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys, Millis timeout) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  bool remove(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t num_keys() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Store on a shared filesystem: one directory, safe for concurrent processes on any host that
// mounts it.
class SYMMEM_API FileStore final : public Store {
 public:
  explicit FileStore(const std::string& path);
  ~FileStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys, Millis timeout) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  bool remove(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t num_keys() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Client of a TcpStoreServer. One connection per client; thread-safe (calls are serialised).
// A server that goes away mid-call is a PeerFailure error.
class SYMMEM_API TcpStore final : public Store {
 public:
  TcpStore(const std::string& host, uint16_t port, const std::string& token,
           Millis connect_timeout);
  ~TcpStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys, Millis timeout) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  bool remove(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t num_keys() override;
  bool set_on_disconnect(const std::string& key, const Bytes& value) override;
  void cancel_on_disconnect(const std::string& key) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The TCP store server: one event-loop thread serving any number of clients. Binds to loopback
// unless `host` says otherwise; port 0 picks a free port. With a non-empty token, a client must
// present it in its first frame or is dropped. A malformed frame, unknown op or oversized
// key/value closes only that connection (with a logged reason).
class SYMMEM_API TcpStoreServer {
 public:
  static std::unique_ptr<TcpStoreServer> start(const std::string& host = "127.0.0.1",
                                               uint16_t port = 0, const std::string& token = "");
  ~TcpStoreServer();
  uint16_t port() const;
  const std::string& host() const;
  // Stops the loop and closes every connection. Idempotent; also done by the destructor.
  void stop();
  // Runs the loop on the calling thread until stop() (for the symmem-store program).
  void serve_forever();

 private:
  TcpStoreServer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace symmem
