#include "symmem/env.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <map>
#include <mutex>

#include "core/log.hpp"
#include "symmem/error.hpp"

extern char** environ;

namespace symmem::env {
namespace {

std::mutex g_mutex;
// NOTE [immortal statics]: the settings table and the cache are never destroyed, so that
// destructors running at exit (a global Group's, as in the tests) can still read settings.
std::map<std::string, std::optional<std::string>, std::less<>>& cache() {
  static auto* c = new std::map<std::string, std::optional<std::string>, std::less<>>;
  return *c;
}

const SettingInfo& find(std::string_view name) {
  for (const auto& s : settings()) {
    if (name == s.name) return s;
  }
  throw_error(ErrorCode::Internal, "env", -1,
              "setting '" + std::string(name) + "' is not declared in symmem/env.hpp");
}

// Parsed values of the hot settings (read on every op), so a call costs one map lookup.
template <class T>
std::map<std::string, T, std::less<>>& parsed() {
  static auto* c = new std::map<std::string, T, std::less<>>;  // immortal, see the NOTE
  return *c;
}
template <class T>
std::optional<T> parsed_get(std::string_view name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = parsed<T>().find(name);
  if (it == parsed<T>().end()) return std::nullopt;
  return it->second;
}
template <class T>
void parsed_put(std::string_view name, const T& v) {
  std::lock_guard<std::mutex> lock(g_mutex);
  parsed<T>().emplace(std::string(name), v);
}

// The raw value: read from the environment once, then cached.
std::optional<std::string> raw(std::string_view name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = cache().find(name);
  if (it != cache().end()) return it->second;
  std::string key(name);
  const char* v = std::getenv(key.c_str());
  std::optional<std::string> value;
  if (v != nullptr) value = std::string(v);
  cache().emplace(key, value);
  return value;
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string_view::npos) end = s.size();
    out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

[[noreturn]] void bad_value(const SettingInfo& s, const std::string& value,
                            const std::string& why) {
  std::string msg =
      "environment variable " + std::string(s.name) + "='" + value + "' is invalid: " + why;
  throw Error(ErrorCode::InvalidArgument, "env: " + msg);
}

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

bool parse_bool(const SettingInfo& s, const std::string& v) {
  std::string l = upper(v);
  if (l == "1" || l == "TRUE" || l == "YES" || l == "ON") return true;
  if (l == "0" || l == "FALSE" || l == "NO" || l == "OFF" || l.empty()) return false;
  bad_value(s, v, "expected one of 0|1|true|false|yes|no|on|off");
}

int64_t parse_int(const SettingInfo& s, const std::string& v) {
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size()) {
    bad_value(s, v, std::string("expected an integer in ") + s.accepted);
  }
  auto range = split(s.accepted, '.');  // "min..max" -> {min, "", max}
  if (range.size() == 3) {
    int64_t lo = std::strtoll(range[0].c_str(), nullptr, 10);
    int64_t hi = std::strtoll(range[2].c_str(), nullptr, 10);
    if (out < lo || out > hi) bad_value(s, v, std::string("expected an integer in ") + s.accepted);
  }
  return out;
}

std::string parse_enum(const SettingInfo& s, const std::string& v) {
  for (const auto& a : split(s.accepted, '|')) {
    if (a == v || upper(a) == upper(v)) return a;
  }
  bad_value(s, v, std::string("accepted values are ") + s.accepted);
}

std::vector<std::string> parse_list(const SettingInfo& s, const std::string& v) {
  auto accepted = split(s.accepted, '|');
  std::string_view body = v;
  bool invert = !body.empty() && body[0] == '^';
  if (invert) body.remove_prefix(1);
  std::vector<std::string> chosen;
  for (auto item : split(body, ',')) {
    if (item.empty()) continue;
    item = upper(item);
    if (std::find(accepted.begin(), accepted.end(), item) == accepted.end()) {
      bad_value(s, v, "'" + item + "' is not one of " + s.accepted);
    }
    chosen.push_back(item);
  }
  if (!invert) return chosen;
  std::vector<std::string> out;
  for (const auto& a : accepted) {
    if (a != "ALL" && std::find(chosen.begin(), chosen.end(), a) == chosen.end()) out.push_back(a);
  }
  return out;
}

void check_type(const SettingInfo& s, std::string_view type) {
  if (type != s.type) {
    throw_error(ErrorCode::Internal, "env", -1,
                std::string(s.name) + " is a " + s.type + " setting, read as " + std::string(type));
  }
}

}  // namespace

const std::vector<SettingInfo>& settings() {
#define SYMMEM_ENV_ENTRY(ID, NAME, TYPE, DEFAULT, ACCEPTED, MEANING) \
  SettingInfo{NAME, TYPE, DEFAULT, ACCEPTED, MEANING},
  static const auto* all =
      new std::vector<SettingInfo>{SYMMEM_ENV_SETTINGS(SYMMEM_ENV_ENTRY)};  // immortal (above)
#undef SYMMEM_ENV_ENTRY
  return *all;
}

std::string get_string(std::string_view name) {
  if (auto hit = parsed_get<std::string>(name)) return *hit;
  const auto& s = find(name);
  std::string v = raw(name).value_or(s.default_value);
  if (std::string_view(s.type) == "enum") v = parse_enum(s, v);
  parsed_put(name, v);
  return v;
}

std::optional<int64_t> get_int(std::string_view name) {
  if (auto hit = parsed_get<std::optional<int64_t>>(name)) return *hit;
  const auto& s = find(name);
  check_type(s, "int");
  auto v = raw(name);
  std::optional<int64_t> out;
  if (!v || v->empty()) {
    if (!std::string_view(s.default_value).empty()) out = parse_int(s, s.default_value);
  } else {
    out = parse_int(s, *v);
  }
  parsed_put(name, out);
  return out;
}

int64_t get_int_or(std::string_view name, int64_t fallback) {
  return get_int(name).value_or(fallback);
}

bool get_bool(std::string_view name) {
  const auto& s = find(name);
  check_type(s, "bool");
  return parse_bool(s, raw(name).value_or(s.default_value));
}

bool is_set(std::string_view name) {
  find(name);
  return raw(name).has_value();
}

std::vector<std::string> get_list(std::string_view name) {
  const auto& s = find(name);
  check_type(s, "list");
  auto items = parse_list(s, raw(name).value_or(s.default_value));
  if (std::find(items.begin(), items.end(), "ALL") != items.end()) {
    items.clear();
    for (const auto& a : split(s.accepted, '|')) {
      if (a != "ALL") items.push_back(a);
    }
  }
  return items;
}

void validate_all() {
  for (const auto& s : settings()) {
    auto v = raw(s.name);
    if (!v) continue;
    std::string_view type = s.type;
    if (type == "enum")
      parse_enum(s, *v);
    else if (type == "int" && !v->empty())
      parse_int(s, *v);
    else if (type == "bool")
      parse_bool(s, *v);
    else if (type == "list")
      parse_list(s, *v);
  }
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    if (kv.rfind("SYMMEM_", 0) != 0) continue;
    std::string_view key = kv.substr(0, kv.find('='));
    bool known = std::any_of(settings().begin(), settings().end(),
                             [&](const SettingInfo& s) { return key == s.name; });
    if (!known) SYMMEM_LOG(WARN, ENV) << "unknown setting " << key << " ignored (see docs/env.md)";
  }
}

std::atomic<uint64_t> g_generation{0};

uint64_t cache_generation() noexcept {
  return g_generation.load(std::memory_order_acquire);
}

void reset_cache_for_testing() {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_generation.fetch_add(1, std::memory_order_acq_rel);
    cache().clear();
    parsed<std::string>().clear();
    parsed<std::optional<int64_t>>().clear();
  }
  detail::log_reset_for_testing();
}

}  // namespace symmem::env
