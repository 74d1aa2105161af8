// HashStore: an in-process store (a map under a mutex; waiters sleep on a condition variable).

#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include "core/check.hpp"
#include "core/store/store.hpp"
#include "symmem/store.hpp"

namespace symmem {

struct HashStore::Impl {
  std::mutex mu;
  std::condition_variable cv;
  std::unordered_map<std::string, Bytes> map;

  // Caller holds mu.
  std::vector<std::string> missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const auto& k : keys) {
      if (map.find(k) == map.end()) out.push_back(k);
    }
    return out;
  }

  // Waits until every key is present; caller holds `lock`.
  void wait_locked(std::unique_lock<std::mutex>& lock, std::string_view op,
                   const std::vector<std::string>& keys, Millis timeout) {
    timeout = detail::resolve_timeout(timeout);
    auto deadline = detail::deadline_for(timeout);
    auto all_present = [&] {
      for (const auto& k : keys) {
        if (map.find(k) == map.end()) return false;
      }
      return true;
    };
    if (!cv.wait_until(lock, deadline, all_present)) {
      detail::throw_store_timeout(op, missing(keys), timeout);
    }
  }
};

HashStore::HashStore() : impl_(std::make_unique<Impl>()) {}
HashStore::~HashStore() = default;

void HashStore::set(const std::string& key, const Bytes& value) {
  detail::check_key("HashStore::set", key);
  detail::check_value("HashStore::set", key, value);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->map[key] = value;
  }
  impl_->cv.notify_all();
}

Bytes HashStore::get(const std::string& key, Millis timeout) {
  detail::check_key("HashStore::get", key);
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->wait_locked(lock, "HashStore::get", {key}, timeout);
  return impl_->map.at(key);
}

void HashStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  detail::check_keys("HashStore::wait", keys);
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->wait_locked(lock, "HashStore::wait", keys, timeout);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  detail::check_key("HashStore::add", key);
  int64_t result = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->map.find(key);
    int64_t now =
        it == impl_->map.end() ? 0 : detail::parse_counter("HashStore::add", key, it->second);
    result = detail::add_counter("HashStore::add", key, now, delta);
    impl_->map[key] = detail::format_counter(result);
  }
  impl_->cv.notify_all();
  return result;
}

Bytes HashStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  detail::check_key("HashStore::compare_set", key);
  detail::check_value("HashStore::compare_set", key, desired);
  Bytes now;
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->map.find(key);
    if (it == impl_->map.end()) {
      if (expected.empty()) {
        impl_->map[key] = desired;
        now = desired;
        changed = true;
      }
    } else if (it->second == expected) {
      it->second = desired;
      now = desired;
      changed = true;
    } else {
      now = it->second;
    }
  }
  if (changed) impl_->cv.notify_all();
  return now;
}

std::vector<Bytes> HashStore::multi_get(const std::vector<std::string>& keys, Millis timeout) {
  detail::check_keys("HashStore::multi_get", keys);
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->wait_locked(lock, "HashStore::multi_get", keys, timeout);
  std::vector<Bytes> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(impl_->map.at(k));
  return out;
}

void HashStore::multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  SYMMEM_CHECK_ARG("HashStore::multi_set", -1, keys.size() == values.size(), "values",
                   "has " << values.size() << " entries but 'keys' has " << keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    detail::check_key("HashStore::multi_set", keys[i]);
    detail::check_value("HashStore::multi_set", keys[i], values[i]);
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (size_t i = 0; i < keys.size(); ++i) impl_->map[keys[i]] = values[i];
  }
  impl_->cv.notify_all();
}

bool HashStore::remove(const std::string& key) {
  detail::check_key("HashStore::remove", key);
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->map.erase(key) > 0;
}

bool HashStore::check(const std::vector<std::string>& keys) {
  detail::check_keys("HashStore::check", keys);
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->missing(keys).empty();
}

int64_t HashStore::num_keys() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<int64_t>(impl_->map.size());
}

}  // namespace symmem
