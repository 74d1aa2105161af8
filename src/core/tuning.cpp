// The tuning file (NOTE [tuning file] in tuning.hpp).

#include "core/tuning.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>
#include <vector>

#include "core/log.hpp"
#include "symmem/env.hpp"

#if SYMMEM_HAVE_NLOHMANN_JSON
#include <nlohmann/json.hpp>
#endif

namespace symmem::tuning {

namespace {

struct Entry {
  std::string backend, signature, key, measured;
  int world = 0;
  int64_t value = 0;
};

struct State {
  std::mutex mu;
  bool loaded = false;
  std::string path;
  std::vector<Entry> entries;
  std::set<std::tuple<std::string, std::string, int>> logged;
  std::map<std::tuple<std::string, std::string, int>, int64_t> overrides;  // set_override
};

std::atomic<uint64_t> g_generation{0};

State& state() {
  static State* s = new State;  // never destroyed: lookups may run during exit
  return *s;
}

std::string default_path() {
  std::string base;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    base = x;
  else if (const char* h = std::getenv("HOME"); h && *h)
    base = std::string(h) + "/.cache";
  else
    return "";
  return base + "/symmem/tuning.json";
}

void load(State& s) {
  s.loaded = true;
  const std::string explicit_path = env::tuning_file();
  s.path = write_path();
  if (s.path.empty()) return;
  std::ifstream in(s.path);
  if (!in) {
    if (!explicit_path.empty())
      SYMMEM_LOG(WARN, ENV) << "tuning: SYMMEM_TUNING_FILE=" << s.path
                            << " cannot be read; the built-in tables decide";
    s.path.clear();
    return;
  }
#if SYMMEM_HAVE_NLOHMANN_JSON
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (j.value("format", "") != "symmem-tuning" || j.value("version", 0) != 1)
      throw std::runtime_error("not a symmem tuning file of version 1");
    for (const auto& e : j.at("entries")) {
      Entry x;
      x.backend = e.at("backend").get<std::string>();
      x.signature = e.at("signature").get<std::string>();
      x.key = e.at("key").get<std::string>();
      x.world = e.at("world").get<int>();
      x.value = e.at("value").get<int64_t>();
      x.measured = e.value("measured", "");
      s.entries.push_back(std::move(x));
    }
  } catch (const std::exception& e) {
    SYMMEM_LOG(WARN, ENV) << "tuning: " << s.path << " is ignored: " << e.what();
    s.entries.clear();
  }
#else
  SYMMEM_LOG(WARN, ENV) << "tuning: " << s.path
                        << " is ignored: this libsymmem was built without nlohmann_json "
                           "(install nlohmann-json3-dev and rebuild)";
#endif
}

}  // namespace

std::string host_signature() {
  std::string model = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        model = line.substr(colon + 1);
        model.erase(0, model.find_first_not_of(" \t"));
      }
      break;
    }
  }
  for (char& c : model)
    if (c == ';' || c == '"') c = ' ';
  return "cpu=" + model + ";cores=" + std::to_string(sysconf(_SC_NPROCESSORS_ONLN));
}

std::optional<int64_t> lookup(std::string_view backend, std::string_view key, int world,
                              std::string_view signature) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.overrides.empty()) {
    auto o = s.overrides.find(std::make_tuple(std::string(backend), std::string(key), world));
    if (o != s.overrides.end()) return o->second;
  }
  if (!s.loaded) load(s);
  const Entry* hit = nullptr;
  for (const Entry& e : s.entries)
    if (e.backend == backend && e.key == key && e.world == world && e.signature == signature)
      hit = &e;  // the last one wins (a later measurement appended to the file)
  auto id = std::make_tuple(std::string(backend), std::string(key), world);
  if (s.logged.insert(id).second) {
    if (hit)
      SYMMEM_LOG(INFO, ENV) << "tuning: " << backend << " " << key << " for " << world
                            << " ranks = " << hit->value << " from " << s.path << " (measured "
                            << (hit->measured.empty() ? "?" : hit->measured) << ")";
    else
      SYMMEM_LOG(INFO, ENV) << "tuning: " << backend << " " << key << " for " << world
                            << " ranks: built-in table ("
                            << (s.path.empty() ? "no tuning file"
                                               : "no entry for this machine in " + s.path)
                            << ")";
  }
  return hit ? std::optional<int64_t>(hit->value) : std::nullopt;
}

std::string write_path() {
  std::string explicit_path = env::tuning_file();
  return explicit_path.empty() ? default_path() : explicit_path;
}

std::string file_path() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.loaded) load(s);
  return s.path;
}

void set_override(std::string_view backend, std::string_view key, int world,
                  std::optional<int64_t> value) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto id = std::make_tuple(std::string(backend), std::string(key), world);
  if (value)
    s.overrides[id] = *value;
  else
    s.overrides.erase(id);
  g_generation.fetch_add(1, std::memory_order_release);
}

uint64_t generation() {
  return g_generation.load(std::memory_order_acquire);
}

int64_t host_value(HostEntry& e, int world, int64_t builtin) {
  const uint64_t now = generation();
  if (now != e.gen || world != e.world) {
    static const std::string signature = host_signature();
    const auto v = lookup("host", e.key, world, signature);
    e.value = v && *v >= e.lo && *v <= e.hi ? *v : builtin;
    e.gen = now;
    e.world = world;
  }
  return e.value;
}

void reset_for_testing() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.loaded = false;
  s.path.clear();
  s.entries.clear();
  s.logged.clear();
  s.overrides.clear();
  g_generation.fetch_add(1, std::memory_order_release);
}

}  // namespace symmem::tuning
