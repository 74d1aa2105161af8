#include "core/store/group_store.hpp"

#include <algorithm>
#include <chrono>

#include "core/check.hpp"
#include "core/group_impl.hpp"
#include "core/store/store.hpp"
#include "symmem/error.hpp"

namespace symmem::detail {

AbortAwareStore::AbortAwareStore(std::shared_ptr<Store> inner, Millis slice,
                                 bool forward_disconnect, std::map<int, int> tolerated)
    : inner_(std::move(inner)),
      slice_(slice),
      forward_disconnect_(forward_disconnect),
      tolerated_(std::move(tolerated)) {
  SYMMEM_INTERNAL_CHECK(inner_ != nullptr && slice_.count() > 0);
}

AbortAwareStore::~AbortAwareStore() = default;

std::string AbortAwareStore::abort_reason() noexcept {
  std::string reason = job_abort_reason(*inner_);
  if (reason.empty() || tolerated_.empty()) return reason;
  for (const auto& [rank, n] : job_failed_counts(*inner_)) {
    if (!failures_tolerated(tolerated_, rank, n)) return reason;
  }
  return "";  // every failure so far is one this group was made without
}

void AbortAwareStore::wait_sliced(const char* op, const std::vector<std::string>& keys,
                                  Millis timeout) {
  timeout = resolve_timeout(timeout);
  const auto deadline = deadline_for(timeout);
  // Waiting on many keys costs more per slice: slice longer.
  const Millis slice = keys.size() > 64 ? std::max(slice_, Millis(1000)) : slice_;
  for (;;) {
    auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    if (left.count() < 0) left = Millis(0);
    try {
      inner_->wait(keys, std::min(left, slice));
      return;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
    }
    std::string reason = abort_reason();
    const bool expired = Clock::now() >= deadline;
    if (reason.empty() && !expired) continue;
    std::vector<std::string> missing;
    try {
      for (const auto& k : keys) {
        if (!inner_->check({k})) missing.push_back(k);
      }
    } catch (const Error&) {
      missing = keys;
    }
    if (missing.empty()) return;  // arrived at the last moment
    if (!reason.empty()) {
      ErrorCode code = ErrorCode::PeerFailure;
      std::string text = job_abort_text(reason, &code);
      throw_error(code, op, -1,
                  "job aborted while waiting for " + join_keys(missing, 8) + ": " + text);
    }
    throw_store_timeout(op, missing, timeout);
  }
}

void AbortAwareStore::set(const std::string& key, const Bytes& value) {
  inner_->set(key, value);
}

Bytes AbortAwareStore::get(const std::string& key, Millis timeout) {
  check_key("Store::get", key);
  wait_sliced("Store::get", {key}, timeout);
  return inner_->get(key, slice_);
}

void AbortAwareStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  check_keys("Store::wait", keys);
  wait_sliced("Store::wait", keys, timeout);
}

int64_t AbortAwareStore::add(const std::string& key, int64_t delta) {
  return inner_->add(key, delta);
}

Bytes AbortAwareStore::compare_set(const std::string& key, const Bytes& expected,
                                   const Bytes& desired) {
  return inner_->compare_set(key, expected, desired);
}

std::vector<Bytes> AbortAwareStore::multi_get(const std::vector<std::string>& keys,
                                              Millis timeout) {
  check_keys("Store::multi_get", keys);
  wait_sliced("Store::multi_get", keys, timeout);
  return inner_->multi_get(keys, slice_);
}

void AbortAwareStore::multi_set(const std::vector<std::string>& keys,
                                const std::vector<Bytes>& values) {
  inner_->multi_set(keys, values);
}

bool AbortAwareStore::remove(const std::string& key) {
  return inner_->remove(key);
}

bool AbortAwareStore::check(const std::vector<std::string>& keys) {
  return inner_->check(keys);
}

int64_t AbortAwareStore::num_keys() {
  return inner_->num_keys();
}

bool AbortAwareStore::set_on_disconnect(const std::string& key, const Bytes& value) {
  return forward_disconnect_ && inner_->set_on_disconnect(key, value);
}

void AbortAwareStore::cancel_on_disconnect(const std::string& key) {
  if (forward_disconnect_) inner_->cancel_on_disconnect(key);
}

}  // namespace symmem::detail
