// libFuzzer target for settings parsing: the input is split into NAME=VALUE lines, each set in
// the environment, then every accessor and validate_all() run. Any exception other than
// symmem::Error(InvalidArgument), any crash or sanitizer report is a finding.
#include <stdlib.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "symmem/env.hpp"
#include "symmem/error.hpp"
#include "symmem/types.hpp"

namespace {

void try_call(void (*fn)(const std::string&), const std::string& arg) {
  try {
    fn(arg);
  } catch (const symmem::Error& e) {
    if (e.code() != symmem::ErrorCode::InvalidArgument) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const auto& settings = symmem::env::settings();
  std::vector<std::string> set_names;
  size_t line_no = 0;
  while (!in.empty()) {
    size_t nl = in.find('\n');
    std::string line(in.substr(0, nl));
    in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
    if (line.find('\0') != std::string::npos) continue;
    // The first byte of a line picks a declared setting, the rest is its value.
    if (line.empty()) continue;
    const auto& s = settings[static_cast<unsigned char>(line[0]) % settings.size()];
    setenv(s.name, line.c_str() + 1, 1);
    set_names.push_back(s.name);
    if (++line_no > 32) break;
  }
  symmem::env::reset_cache_for_testing();
  for (const auto& s : settings) {
    try_call(
        [](const std::string& n) {
          const auto& all = symmem::env::settings();
          for (const auto& t : all) {
            if (n != t.name) continue;
            std::string ty = t.type;
            if (ty == "int")
              symmem::env::get_int(n);
            else if (ty == "bool")
              symmem::env::get_bool(n);
            else if (ty == "list")
              symmem::env::get_list(n);
            else
              symmem::env::get_string(n);
          }
        },
        s.name);
  }
  try_call([](const std::string&) { symmem::env::validate_all(); }, "");
  std::string raw(reinterpret_cast<const char*>(data), size);
  try_call([](const std::string& v) { symmem::parse_dtype(v); }, raw);
  try_call([](const std::string& v) { symmem::parse_reduce_op(v); }, raw);
  try_call([](const std::string& v) { symmem::parse_algo(v); }, raw);
  for (const auto& n : set_names) unsetenv(n.c_str());
  symmem::env::reset_cache_for_testing();
  return 0;
}
