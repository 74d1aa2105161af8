#include "binding.hpp"

#include <dirent.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>
#include <tuple>
#include <utility>

namespace symmem::run {

bool parse_bind_mode(const std::string& s, BindMode* out) {
  if (s == "core")
    *out = BindMode::core;
  else if (s == "numa")
    *out = BindMode::numa;
  else if (s == "none")
    *out = BindMode::none;
  else if (s == "auto")
    *out = BindMode::automatic;
  else
    return false;
  return true;
}

const char* to_string(BindMode m) {
  switch (m) {
    case BindMode::core:
      return "core";
    case BindMode::numa:
      return "numa";
    case BindMode::none:
      return "none";
    case BindMode::automatic:
      break;
  }
  return "auto";
}

namespace {

// CPUs grouped: groups in (node, core) order, each group's CPU ids sorted.
std::vector<std::vector<int>> group_by(const Topology& t, bool by_core) {
  std::map<std::pair<int, int>, std::vector<int>> g;
  for (const Cpu& c : t.cpus) g[{c.node, by_core ? c.core : 0}].push_back(c.id);
  std::vector<std::vector<int>> out;
  for (auto& [key, ids] : g) {
    std::sort(ids.begin(), ids.end());
    out.push_back(std::move(ids));
  }
  return out;
}

// Rank r of n gets unit r * units / n: units spread evenly, in order, never shared when
// units >= n.
std::vector<std::vector<int>> spread(const std::vector<std::vector<int>>& units, int n) {
  std::vector<std::vector<int>> out(static_cast<size_t>(n));
  const size_t u = units.size();
  for (int r = 0; r < n; ++r) {
    out[static_cast<size_t>(r)] = units[static_cast<size_t>(r) * u / static_cast<size_t>(n)];
  }
  return out;
}

// One hardware thread per unit: every core's first thread (in (node, core) order), then every
// core's second, ..., so that ranks fill distinct cores before they share one.
std::vector<std::vector<int>> hw_threads(const Topology& t) {
  const auto cores = group_by(t, true);
  std::vector<std::vector<int>> out;
  for (size_t k = 0; out.size() < t.cpus.size(); ++k) {
    for (const auto& core : cores) {
      if (k < core.size()) out.push_back({core[k]});
    }
  }
  return out;
}

std::string count_str(size_t n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

}  // namespace

BindPlan plan_binding(const Topology& topo, int nranks, BindMode mode) {
  BindPlan plan;
  plan.cpus.assign(static_cast<size_t>(std::max(nranks, 0)), {});
  if (mode == BindMode::none || nranks <= 0) {
    plan.mode = BindMode::none;
    return plan;
  }
  if (topo.cpus.empty()) {
    plan.mode = BindMode::none;
    if (mode != BindMode::automatic)
      plan.error = "cannot bind: symmem-run cannot read its own CPU affinity";
    return plan;
  }
  const auto cores = group_by(topo, true);
  const auto nodes = group_by(topo, false);
  const size_t n = static_cast<size_t>(nranks);
  const std::string have = count_str(cores.size(), "core") + " (" +
                           count_str(topo.cpus.size(), "CPU") + ", " +
                           count_str(nodes.size(), "NUMA node") + ")";

  if (mode == BindMode::numa ||
      (mode == BindMode::automatic && nodes.size() > 1 && nodes.size() >= n)) {
    plan.mode = BindMode::numa;
    plan.cpus = spread(nodes, nranks);
    return plan;
  }
  // core (asked for, or auto on one node / with more ranks than nodes).
  if (cores.size() >= n) {
    plan.mode = BindMode::core;
    plan.cpus = spread(cores, nranks);
    return plan;
  }
  if (topo.cpus.size() >= n) {  // not a core each, but a hardware thread each
    plan.mode = BindMode::core;
    plan.cpus = spread(hw_threads(topo), nranks);
    return plan;
  }
  plan.mode = BindMode::none;
  const std::string why = std::to_string(nranks) + " ranks but symmem-run may use only " + have;
  if (mode == BindMode::core) {
    plan.error = "--bind-to core: " + why + "; use --bind-to none to run them unbound";
  } else {
    plan.note = why + ": ranks are not bound to CPUs (as with --bind-to none)";
  }
  return plan;
}

std::string cpu_list_string(const std::vector<int>& cpus) {
  std::vector<int> v = cpus;
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  std::string s;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += std::to_string(v[i]);
    if (j > i) s += (j == i + 1 ? "," : "-") + std::to_string(v[j]);
    i = j + 1;
  }
  return s;
}

bool parse_cpu_list(const std::string& s, std::vector<int>* out) {
  out->clear();
  size_t pos = 0;
  std::string t = s;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  auto number = [&](int* v) {
    if (pos >= t.size() || t[pos] < '0' || t[pos] > '9') return false;
    long x = 0;
    while (pos < t.size() && t[pos] >= '0' && t[pos] <= '9') {
      x = x * 10 + (t[pos++] - '0');
      if (x > (1 << 20)) return false;
    }
    *v = static_cast<int>(x);
    return true;
  };
  if (t.empty()) return true;
  while (pos < t.size()) {
    int a = 0, b = 0;
    if (!number(&a)) return false;
    b = a;
    if (pos < t.size() && t[pos] == '-') {
      ++pos;
      if (!number(&b) || b < a) return false;
    }
    for (int c = a; c <= b; ++c) out->push_back(c);
    if (pos < t.size()) {
      if (t[pos] != ',') return false;
      ++pos;
      if (pos >= t.size()) return false;
    }
  }
  return true;
}

namespace {

bool read_int(const std::string& path, int* v) {
  std::ifstream f(path);
  long x = 0;
  if (!(f >> x)) return false;
  *v = static_cast<int>(x);
  return true;
}

}  // namespace

Topology read_topology() {
  Topology t;
  std::vector<int> allowed;
  {
    // Sized for any CPU count the kernel reports (EINVAL: mask too small, grow it).
    for (size_t ncpu = 1024; ncpu <= (1u << 20); ncpu *= 4) {
      cpu_set_t* set = CPU_ALLOC(ncpu);
      if (set == nullptr) return t;
      const size_t sz = CPU_ALLOC_SIZE(ncpu);
      CPU_ZERO_S(sz, set);
      if (sched_getaffinity(0, sz, set) == 0) {
        for (size_t c = 0; c < ncpu; ++c) {
          if (CPU_ISSET_S(c, sz, set)) allowed.push_back(static_cast<int>(c));
        }
        CPU_FREE(set);
        break;
      }
      const int e = errno;
      CPU_FREE(set);
      if (e != EINVAL) return t;
    }
  }
  // NUMA node of each CPU, from /sys/devices/system/node/node*/cpulist.
  std::map<int, int> node_of;
  if (DIR* d = opendir("/sys/devices/system/node")) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.rfind("node", 0) != 0 || name.size() == 4) continue;
      char* end = nullptr;
      const long node = std::strtol(name.c_str() + 4, &end, 10);
      if (*end != '\0') continue;
      std::ifstream f("/sys/devices/system/node/" + name + "/cpulist");
      std::string line;
      std::getline(f, line);
      std::vector<int> ids;
      if (!parse_cpu_list(line, &ids)) continue;
      for (int c : ids) node_of[c] = static_cast<int>(node);
    }
    closedir(d);
  }
  for (int id : allowed) {
    Cpu c;
    c.id = id;
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(id) + "/topology/";
    int core = 0, pkg = 0;
    // Core ids repeat across packages: a core is (package, core_id). Unknown: its own core.
    if (read_int(base + "core_id", &core) && read_int(base + "physical_package_id", &pkg)) {
      c.core = pkg * 65536 + core;
    } else {
      c.core = -1 - id;
    }
    auto it = node_of.find(id);
    c.node = it != node_of.end() ? it->second : 0;
    t.cpus.push_back(c);
  }
  return t;
}

}  // namespace symmem::run
