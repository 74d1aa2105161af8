#pragma once

// Shared helpers for symmem tests.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "symmem/env.hpp"
#include "symmem/error.hpp"

namespace symmem::test {

inline constexpr int kSkipExitCode = 77;  // ctest SKIP_RETURN_CODE

// Sets an environment variable for the scope (and drops the settings cache both ways).
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* v) : name(n) {
    setenv(n, v, 1);
    env::reset_cache_for_testing();
  }
  ~ScopedEnv() {
    unsetenv(name.c_str());
    env::reset_cache_for_testing();
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

// True when a CUDA driver and at least one GPU are present (probes libcuda with dlopen; never
// links it). `why` receives the reason when false.
bool have_gpu(std::string* why = nullptr);
int gpu_count();

// Runs `fn`, expects a symmem::Error with `code` whose message contains every `needle`.
template <class Fn>
void expect_error(Fn&& fn, ErrorCode code, std::initializer_list<const char*> needles) {
  try {
    fn();
    ADD_FAILURE() << "expected symmem::Error(" << to_string(code) << "), nothing was thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << "message: " << e.what();
    for (const char* n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message '" << e.what() << "' lacks '" << n << "'";
    }
  }
}

}  // namespace symmem::test
