#pragma once

// Helpers for the host tests: run N ranks as threads of this process over one HashStore.

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "symmem/error.hpp"
#include "symmem/group.hpp"
#include "symmem/store.hpp"

namespace symmem::test {

// Runs fn(group) on `n` threads, one per rank; returns each rank's exception (or null).
inline std::vector<std::exception_ptr> run_ranks(int n, const std::function<void(Group&)>& fn,
                                                 GroupOptions options = {}) {
  auto store = std::make_shared<HashStore>();
  if (options.timeout.count() < 0) options.timeout = Millis(20000);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        Group g = Group::create(store, r, n, options);
        fn(g);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

inline std::string error_text(const std::exception_ptr& e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

// Fails the test for every rank that threw.
inline void expect_no_errors(const std::vector<std::exception_ptr>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    EXPECT_FALSE(errors[r]) << "rank " << r << " threw: " << error_text(errors[r]);
  }
}

// Expects rank `r` to have thrown symmem::Error with `code` and every needle in its message.
inline void expect_rank_error(const std::vector<std::exception_ptr>& errors, size_t r,
                              ErrorCode code, std::initializer_list<std::string> needles) {
  ASSERT_LT(r, errors.size());
  if (!errors[r]) {
    ADD_FAILURE() << "rank " << r << " did not throw (expected " << to_string(code) << ")";
    return;
  }
  try {
    std::rethrow_exception(errors[r]);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << "rank " << r << ": " << e.what();
    for (const auto& n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "rank " << r << ": message '" << e.what() << "' lacks '" << n << "'";
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank " << r << " threw a non-symmem exception: " << e.what();
  }
}

}  // namespace symmem::test
