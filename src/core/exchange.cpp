// StoreExchange: all_gather / broadcast / barrier over a Store.
//
// NOTE [exchange keys and cleanup]
// Call number `seq` of an exchange uses keys "<prefix>/<seq>/<rank>". Every call, including
// broadcast, ends only after every rank has *entered* it:
//   - all_gather (and barrier, an all_gather of nothing): each rank sets its key, then reads all.
//   - broadcast: every non-root rank sets an empty arrival key and waits for the root's key; the
//     root waits for all arrival keys before it sets its key with the value.
// So when call `seq` completes on a rank, every rank has finished call seq-1 and nobody will read
// its keys again: the rank then removes its own key of seq-1. The keys of the last call stay in
// the store (there is no later call to prove that everyone has read them).

#include "core/exchange.hpp"

#include <sstream>

#include "core/check.hpp"
#include "core/log.hpp"
#include "core/store/store.hpp"
#include "core/trace.hpp"
#include "core/wait_report.hpp"

namespace symmem {

namespace {

std::string key_of(const std::string& prefix, uint64_t seq, int rank) {
  return prefix + "/" + std::to_string(seq) + "/" + std::to_string(rank);
}

}  // namespace

StoreExchange::StoreExchange(std::shared_ptr<Store> store, std::string prefix, int rank,
                             int world_size, Millis timeout)
    : store_(std::move(store)),
      prefix_(std::move(prefix)),
      rank_(rank),
      world_size_(world_size),
      timeout_(timeout) {
  const char* op = "StoreExchange";
  SYMMEM_CHECK_ARG(op, rank, store_ != nullptr, "store", "is null");
  SYMMEM_CHECK_ARG(op, rank, world_size >= 1, "world_size", "= " << world_size << " must be >= 1");
  SYMMEM_CHECK_ARG(op, rank, rank >= 0 && rank < world_size, "rank",
                   "= " << rank << " is outside [0, " << world_size << ")");
  SYMMEM_CHECK_ARG(op, rank, !prefix_.empty(), "prefix", "is empty");
  timeout_ = detail::resolve_timeout(timeout_);
  dead_flag_ = prefix_ + "/dead";
  dead_mine_ = prefix_ + "/dead/" + std::to_string(rank_);
  try {
    watch_ = store_->set_on_disconnect(dead_mine_, to_bytes(std::to_string(rank_))) &&
             store_->set_on_disconnect(dead_flag_, to_bytes(std::to_string(rank_)));
  } catch (const Error& e) {
    // Failure detection then falls back to timeouts; the first real call reports a dead store.
    SYMMEM_LOG(WARN, STORE) << "StoreExchange '" << prefix_ << "': rank " << rank_
                            << ": cannot register disconnect keys: " << e.what();
    watch_ = false;
  }
}

StoreExchange::~StoreExchange() {
  if (!watch_) return;
  try {
    store_->cancel_on_disconnect(dead_flag_);
    store_->cancel_on_disconnect(dead_mine_);
  } catch (...) {
    // Destructors never throw; the store is gone or going.
  }
}

std::vector<Bytes> StoreExchange::await(const std::vector<std::string>& keys,
                                        const std::vector<int>& ranks, bool values,
                                        const char* op) {
  // Waits in slices: of 200 ms where disconnect keys tell of peers that left, and short enough
  // for the wait report's lines to come on time. With neither, one call waits it all.
  constexpr Millis kSlice(200);
  const auto start = detail::Clock::now();
  const auto deadline = detail::deadline_for(timeout_);
  detail::WaitReport report(what_.empty() ? "StoreExchange '" + prefix_ + "'" : what_, subsys_,
                            rank_, start, deadline, timeout_);
  detail::check_not_aborted(abort_.get(), op, rank_);
  if (!watch_ && !report.enabled() && !abort_) {
    if (values) return store_->multi_get(keys, timeout_);
    store_->wait(keys, timeout_);
    return {};
  }
  constexpr Millis kAbortSlice(50);  // NOTE [group abort]
  for (;;) {
    const auto now = detail::Clock::now();
    auto left = std::chrono::duration_cast<Millis>(deadline - now);
    if (left.count() < 0) left = Millis(0);
    Millis slice = report.slice(now, watch_ ? kSlice : left);
    if (abort_ && slice > kAbortSlice) slice = kAbortSlice;
    const bool last = left <= slice;
    if (last) slice = left;
    try {
      if (values) return store_->multi_get(keys, slice);
      store_->wait(keys, slice);
      return {};
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
      if (last) {
        std::vector<std::string> missing;
        std::vector<int> missing_ranks;
        for (size_t i = 0; i < keys.size(); ++i) {
          if (!store_->check({keys[i]})) {
            missing.push_back(keys[i]);
            missing_ranks.push_back(ranks[i]);
          }
        }
        detail::note_waiting_for(missing_ranks, false);  // for the flight recorder
        detail::throw_store_timeout(op, missing.empty() ? keys : missing, timeout_);
      }
    }
    detail::check_not_aborted(abort_.get(), op, rank_);
    if (report.due(detail::Clock::now())) {
      std::vector<int> missing;
      for (size_t i = 0; i < keys.size(); ++i) {
        if (!store_->check({keys[i]})) missing.push_back(ranks[i]);
      }
      // Counts are known when the keys cover every other rank (all_gather, a broadcast's root);
      // a broadcast's other ranks wait for the root alone.
      const bool all = keys.size() + 1 >= static_cast<size_t>(world_size_);
      report.ranks(missing, all ? world_size_ - static_cast<int>(missing.size()) : -1,
                   all ? world_size_ : -1);
    }
    if (!watch_ || !store_->check({dead_flag_})) continue;
    std::vector<int> gone;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!store_->check({keys[i]}) &&
          store_->check({prefix_ + "/dead/" + std::to_string(ranks[i])})) {
        gone.push_back(ranks[i]);
      }
    }
    if (gone.empty()) continue;
    detail::note_waiting_for(gone, false);  // for the flight recorder (core/trace.hpp)
    std::ostringstream os;
    os << (gone.size() == 1 ? "rank " : "ranks ");
    for (size_t i = 0; i < gone.size() && i < 64; ++i) os << (i ? ", " : "") << gone[i];
    if (gone.size() > 64) os << " and " << gone.size() - 64 << " more";
    os << (gone.size() == 1 ? " has" : " have")
       << " left: the store connection closed before arriving (process exited or died)";
    throw Error(ErrorCode::PeerFailure, os.str());  // the caller adds op, rank and call
  }
}

namespace {

// After a Timeout (or PeerFailure) from the store: which ranks' keys of call `seq` are missing?
// Rethrows with that list; if the store cannot even answer, rethrows the store's error with the
// exchange's context.
[[noreturn]] void rethrow_with_ranks(const Error& e, Store& store, const std::string& prefix,
                                     uint64_t seq, int rank, int world, int root, const char* op,
                                     Millis timeout) {
  std::ostringstream os;
  os << "prefix '" << prefix << "' call " << seq << ": ";
  if (e.code() == ErrorCode::Timeout) {
    std::vector<int> missing;
    try {
      for (int r = 0; r < world; ++r) {
        if (!store.check({key_of(prefix, seq, r)})) missing.push_back(r);
      }
    } catch (const Error&) {
      missing.clear();
    }
    if (!missing.empty()) {
      detail::note_waiting_for(missing, false);  // for the flight recorder (core/trace.hpp)
      os << (missing.size() == 1 ? "rank " : "ranks ");
      for (size_t i = 0; i < missing.size() && i < 64; ++i) os << (i ? ", " : "") << missing[i];
      if (missing.size() > 64) os << " and " << missing.size() - 64 << " more";
      os << " did not arrive within " << timeout.count() << " ms";
      if (root >= 0) os << " (root " << root << ")";
      os << "; store said: " << e.what();
      throw_error(ErrorCode::Timeout, op, rank, os.str());
    }
  }
  os << e.what();
  throw_error(e.code(), op, rank, os.str());
}

}  // namespace

std::vector<Bytes> StoreExchange::all_gather(const Bytes& mine) {
  return gather(mine, "StoreExchange::all_gather");
}

std::vector<Bytes> StoreExchange::gather(const Bytes& mine, const char* op) {
  const uint64_t seq = seq_++;
  std::vector<std::string> keys(world_size_);
  for (int r = 0; r < world_size_; ++r) keys[r] = key_of(prefix_, seq, r);
  std::vector<Bytes> out;
  try {
    store_->set(keys[rank_], mine);
    std::vector<int> ranks(world_size_);
    for (int r = 0; r < world_size_; ++r) ranks[r] = r;
    out = await(keys, ranks, true, op);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::InvalidArgument) throw;
    rethrow_with_ranks(e, *store_, prefix_, seq, rank_, world_size_, -1, op, timeout_);
  }
  finish(seq);
  return out;
}

Bytes StoreExchange::broadcast(const Bytes& value, int root) {
  SYMMEM_CHECK_ARG("StoreExchange::broadcast", rank_, root >= 0 && root < world_size_, "root",
                   "= " << root << " is outside [0, " << world_size_ << ")");
  const uint64_t seq = seq_++;
  const std::string root_key = key_of(prefix_, seq, root);
  Bytes out;
  try {
    if (rank_ == root) {
      std::vector<std::string> others;
      std::vector<int> ranks;
      for (int r = 0; r < world_size_; ++r) {
        if (r != root) {
          others.push_back(key_of(prefix_, seq, r));
          ranks.push_back(r);
        }
      }
      if (!others.empty()) await(others, ranks, false, "StoreExchange::broadcast");
      store_->set(root_key, value);
      out = value;
    } else {
      store_->set(key_of(prefix_, seq, rank_), Bytes());
      out = std::move(await({root_key}, {root}, true, "StoreExchange::broadcast")[0]);
    }
  } catch (const Error& e) {
    if (e.code() == ErrorCode::InvalidArgument) throw;
    rethrow_with_ranks(e, *store_, prefix_, seq, rank_, world_size_, root,
                       "StoreExchange::broadcast", timeout_);
  }
  finish(seq);
  return out;
}

void StoreExchange::barrier() {
  gather(Bytes(), "StoreExchange::barrier");
}

void StoreExchange::finish(uint64_t seq) {
  if (seq == 0) return;
  const std::string old = key_of(prefix_, seq - 1, rank_);
  try {
    store_->remove(old);
  } catch (const Error& e) {
    // The call itself succeeded; a failed cleanup only leaves a key behind.
    SYMMEM_LOG(WARN, STORE) << "StoreExchange: rank " << rank_ << ": could not remove key '" << old
                            << "': " << e.what();
  }
}

}  // namespace symmem
