#pragma once

// StoreExchange: small collectives over a Store, for setup (rendezvous, id exchange).
// Keys are "<prefix>/<seq>/<rank>"; every user (each backend, each group) passes its own
// prefix, and seq counts this object's calls, so nothing collides. A timeout error names the
// ranks that did not arrive. Keys of call seq-1 are removed once call seq completes.
// Every call (broadcast included) returns only after all ranks have entered it; see
// NOTE [exchange keys and cleanup] in exchange.cpp. A negative timeout means SYMMEM_TIMEOUT_MS.
// A wait that lasts logs which ranks are missing (NOTE [wait reports] in core/wait_report.hpp).
// Peers that leave: where the store supports disconnect keys (TcpStore), each rank registers
// "<prefix>/dead/<rank>" and "<prefix>/dead"; a rank waiting on a peer whose connection ended
// fails within ~200 ms with PeerFailure naming it, instead of waiting for the timeout.
// Not thread-safe: one exchange object is used by one thread at a time, and every rank must make
// the same sequence of calls.

#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/abort.hpp"
#include "core/log.hpp"
#include "symmem/export.hpp"
#include "symmem/store.hpp"

namespace symmem {

class SYMMEM_API StoreExchange {
 public:
  StoreExchange(std::shared_ptr<Store> store, std::string prefix, int rank, int world_size,
                Millis timeout);
  ~StoreExchange();

  std::vector<Bytes> all_gather(const Bytes& mine);
  Bytes broadcast(const Bytes& value, int root);  // value is read on root only
  void barrier();

  template <class T>
  std::vector<T> all_gather(const T& mine) {
    static_assert(std::is_trivially_copyable_v<T>);
    Bytes b(sizeof(T));
    std::memcpy(b.data(), &mine, sizeof(T));
    auto all = all_gather(b);
    std::vector<T> out(all.size());
    for (size_t i = 0; i < all.size(); ++i) std::memcpy(&out[i], all[i].data(), sizeof(T));
    return out;
  }
  template <class T>
  T broadcast(const T& value, int root) {
    static_assert(std::is_trivially_copyable_v<T>);
    Bytes b(sizeof(T));
    std::memcpy(b.data(), &value, sizeof(T));
    Bytes r = broadcast(b, root);
    T out;
    std::memcpy(&out, r.data(), sizeof(T));
    return out;
  }

  // Names the exchange in its wait reports (NOTE [wait reports] in core/wait_report.hpp), e.g.
  // "group g0: creation"; by default "StoreExchange '<prefix>'". Applies to the calls after it.
  void set_what(std::string what, detail::Subsys subsys = detail::Subsys::STORE) {
    what_ = std::move(what);
    subsys_ = subsys;
  }

  // Makes the calls after it fail with ErrorCode::Aborted within ~50 ms once `state` (or an
  // ancestor) is aborted (NOTE [group abort] in core/abort.hpp).
  void set_abort(std::shared_ptr<detail::AbortState> state) { abort_ = std::move(state); }

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::string& prefix() const { return prefix_; }

 private:
  std::shared_ptr<Store> store_;
  std::string prefix_;
  int rank_;
  int world_size_;
  std::vector<Bytes> gather(const Bytes& mine, const char* op);
  // Waits for `keys` (those of `ranks`); returns their values when `values` is true. With
  // disconnect keys it waits in slices and fails fast with PeerFailure once a rank it waits for has
  // left.
  std::vector<Bytes> await(const std::vector<std::string>& keys, const std::vector<int>& ranks,
                           bool values, const char* op);
  void finish(uint64_t seq);  // removes this rank's key of call seq-1

  Millis timeout_;
  std::string what_;  // set_what(); empty: the default
  detail::Subsys subsys_ = detail::Subsys::STORE;
  uint64_t seq_ = 0;
  bool watch_ = false;     // the store watches our connection (disconnect keys registered)
  std::string dead_flag_;  // "<prefix>/dead": set when any rank's connection ends
  std::string dead_mine_;  // "<prefix>/dead/<rank>"
  std::shared_ptr<detail::AbortState> abort_;  // set_abort(); null: none
};

}  // namespace symmem
