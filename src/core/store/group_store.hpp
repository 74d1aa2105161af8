#pragma once

// AbortAwareStore: the store Group::from_env() hands out. It forwards every call to the job's
// real store, but splits each blocking call (get, wait, multi_get) into short slices and, between
// slices, checks the job abort key (NOTE [job abort key] in core/group_impl.hpp). When a launcher
// has reported a dead rank there, the call fails at once with PeerFailure carrying that report,
// instead of waiting for its full timeout; so does every StoreExchange built on group.store().
// A key marked as an invalid job (a rank claimed twice) fails the call with InvalidArgument.
// A store made for a group of shrink() tolerates the failures of the ranks that group excluded:
// `tolerated` maps a (launcher) rank to the number of its failures reported at kJobFailedKey
// that do not abort a wait; any further failure does.
// Disconnect keys are forwarded to the inner store only when asked (`forward_disconnect`);
// otherwise set_on_disconnect() answers false, as the default Store does.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "symmem/export.hpp"
#include "symmem/store.hpp"

namespace symmem::detail {

// Whether `failures` reported failures of launcher rank `rank` are within `tolerated` (rank ->
// failures a shrunk group was made without; absent: none).
inline bool failures_tolerated(const std::map<int, int>& tolerated, int rank, int failures) {
  auto it = tolerated.find(rank);
  return failures <= (it == tolerated.end() ? 0 : it->second);
}

class SYMMEM_API AbortAwareStore final : public Store {
 public:
  explicit AbortAwareStore(std::shared_ptr<Store> inner, Millis slice = Millis(200),
                           bool forward_disconnect = false, std::map<int, int> tolerated = {});
  ~AbortAwareStore() override;

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

  const std::shared_ptr<Store>& inner() const { return inner_; }
  const std::map<int, int>& tolerated() const { return tolerated_; }
  bool forwards_disconnect() const { return forward_disconnect_; }
  Millis slice() const { return slice_; }
  // The job abort reason unless every reported failure is tolerated ("" then, and when none).
  std::string abort_reason() noexcept;

 private:
  // Waits until every key exists, in slices; throws Timeout (naming the missing keys, with the
  // caller's total timeout) or PeerFailure (job aborted).
  void wait_sliced(const char* op, const std::vector<std::string>& keys, Millis timeout);

  std::shared_ptr<Store> inner_;
  Millis slice_;
  bool forward_disconnect_;
  std::map<int, int> tolerated_;
};

}  // namespace symmem::detail
