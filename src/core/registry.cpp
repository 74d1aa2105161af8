// Backend registry and plugin loading.
//
// Built-in backends (host) register themselves from a static initializer. Any other name is a
// plugin: libsymmem_<name>.so, searched in the SYMMEM_PLUGIN_PATH directories (colon-separated,
// in order) and then in the directory of libsymmem itself. The plugin exports
//   extern "C" int symmem_plugin_abi_version();          // == kPluginAbiVersion
//   extern "C" symmem::Backend* symmem_plugin_create();  // new'ed; we own it
// A plugin is loaded once (RTLD_NOW | RTLD_LOCAL) and never unloaded; a failure is remembered
// with its reason, so that asking again gives the same BackendUnavailable error cheaply.

#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "core/check.hpp"
#include "core/log.hpp"
#include "core/registry.hpp"
#include "symmem/backend.hpp"
#include "symmem/env.hpp"
#include "symmem/error.hpp"
#include "symmem/memory.hpp"

namespace symmem {

// ---- definitions for backend.hpp ---------------------------------------------------------------

BackendMemory::~BackendMemory() = default;
Backend::~Backend() = default;

DeviceHandle BackendMemory::device_handle(size_t /*offset*/, size_t length) const {
  DeviceHandle h;
  h.size = length;
  return h;  // no device pointer tables: a host-only backend
}

void BackendMemory::signal_op(int, size_t, uint32_t, SignalOp, Stream) {
  throw_error(
      ErrorCode::Unsupported, "signal_op", -1,
      "this backend has no signal_op yet; the host, cuda, nccl and nvshmem backends have it");
}

uint32_t BackendMemory::wait_until(size_t, Cmp, uint32_t, Millis, Stream) {
  throw_error(
      ErrorCode::Unsupported, "wait_until", -1,
      "this backend has no wait_until yet; the host, cuda, nccl and nvshmem backends have it");
}

namespace {

struct Registry {
  std::recursive_mutex mu;
  std::map<std::string, std::shared_ptr<Backend>> backends;
  std::map<std::string, std::string> failures;  // name -> why it cannot be loaded
};

// Never destroyed: backends may be used from other static destructors.
Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

std::string library_dir() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&library_dir), &info) == 0 || info.dli_fname == nullptr) {
    return "";
  }
  std::string path = info.dli_fname;
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::vector<std::string> plugin_dirs() {
  std::vector<std::string> dirs;
  std::string p = env::plugin_path();
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    if (end > start) dirs.push_back(p.substr(start, end - start));
    start = end + 1;
  }
  std::string own = library_dir();
  if (!own.empty()) dirs.push_back(own);
  return dirs;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s.empty() ? "(none)" : s;
}

// Loads libsymmem_<name>.so. Caller holds the registry lock.
std::shared_ptr<Backend> load_plugin(const std::string& name, std::string* why) {
  std::string file = "libsymmem_" + name + ".so";
  auto dirs = plugin_dirs();
  std::string path;
  for (const auto& d : dirs) {
    if (file_exists(d + "/" + file)) {
      path = d + "/" + file;
      break;
    }
  }
  if (path.empty()) {
    *why = "no plugin " + file + " in " + join(dirs) +
           " (SYMMEM_PLUGIN_PATH, then the directory of libsymmem); was symmem built with "
           "this backend?";
    return nullptr;
  }
  ::dlerror();
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = ::dlerror();
    *why = "cannot load " + path + ": " + (e ? e : "unknown dlopen error");
    return nullptr;
  }
  using AbiFn = int (*)();
  using CreateFn = Backend* (*)();
  auto abi = reinterpret_cast<AbiFn>(::dlsym(h, "symmem_plugin_abi_version"));
  auto create = reinterpret_cast<CreateFn>(::dlsym(h, "symmem_plugin_create"));
  if (abi == nullptr || create == nullptr) {
    *why = path +
           " is not a symmem plugin: it lacks symmem_plugin_abi_version or "
           "symmem_plugin_create";
    return nullptr;  // left loaded: unloading code that may have run initializers is unsafe
  }
  int v = abi();
  if (v != kPluginAbiVersion) {
    *why = path + " has plugin ABI version " + std::to_string(v) + "; this libsymmem needs " +
           std::to_string(kPluginAbiVersion) + " (rebuild the plugin with this symmem)";
    return nullptr;
  }
  std::shared_ptr<Backend> b;
  try {
    b.reset(create());
  } catch (const std::exception& e) {
    *why = path + ": symmem_plugin_create failed: " + e.what();
    return nullptr;
  }
  if (!b) {
    *why = path + ": symmem_plugin_create returned null";
    return nullptr;
  }
  if (name != b->name()) {
    *why = path + " provides backend '" + std::string(b->name()) + "', not '" + name + "'";
    return nullptr;
  }
  SYMMEM_LOG(INFO, PLUGIN) << "loaded backend '" << name << "' from " << path;
  return b;
}

}  // namespace

namespace detail {

// NOTE [auto selection]
// The backends this project ships, with the buffers each serves and its rank in "auto": for a
// device type and the group's placement (one host, several hosts), auto takes the candidate of
// highest priority that loads, else the highest one (whose allocation then says why it cannot
// load). This list is the only place the core names a backend.
struct Shipped {
  const char* name;
  DeviceType device;
  bool one_host, several_hosts;  // placements it is a candidate for
  int priority;
};
constexpr Shipped kShipped[] = {
    {"host", DeviceType::cpu, true, true, 0},
    {"cuda", DeviceType::cuda, true, false, 2},
    {"nvshmem", DeviceType::cuda, false, true, 1},
    {"nccl", DeviceType::cuda, false, true, 0},
};

const std::vector<std::string>& known_backend_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& b : kShipped) v.emplace_back(b.name);
    return v;
  }();
  return names;
}

std::string auto_backend(const Group& group, Device device, std::string* why) {
  const bool one_host = group.single_host();
  std::vector<const Shipped*> cands;
  for (const auto& b : kShipped) {
    if (b.device == device.type && (one_host ? b.one_host : b.several_hosts)) cands.push_back(&b);
  }
  std::stable_sort(cands.begin(), cands.end(),
                   [](const Shipped* a, const Shipped* b) { return a->priority > b->priority; });
  const std::string what = std::string(device.is_cuda() ? "GPU" : "CPU") + " buffers" +
                           (one_host ? "" : ", ranks on several hosts");
  if (cands.empty()) {  // a DeviceType outside the enum, which only resolve_backend() passes on
    if (why != nullptr) *why = "auto: no backend serves " + what;
    return "host";
  }
  std::string skipped;
  for (const Shipped* c : cands) {
    std::string load_why;
    if (cands.size() == 1 || try_get_backend(c->name, &load_why) != nullptr) {
      if (why != nullptr) *why = "auto: " + what + ": " + c->name + skipped;
      return c->name;
    }
    skipped += std::string("; ") + c->name + " unavailable (" + load_why + ")";
  }
  if (why != nullptr) *why = "auto: " + what + ": " + cands.front()->name + skipped;
  return cands.front()->name;
}

std::string backend_for(const Group& group, Device device, const std::string& chosen,
                        std::string* why) {
  if (device.is_cuda()) return chosen;
  auto b = try_get_backend(chosen, nullptr);
  if (b == nullptr || b->serves(device.type)) return chosen;
  std::string name = auto_backend(group, device, nullptr);
  if (why != nullptr)
    *why = to_string(device) + " buffers use the " + name + " backend (" + chosen +
           " does not serve them)";
  return name;
}

std::string backend_for(const Group& group, Device device) {
  return backend_for(group, device, resolve_backend(group, device));
}

std::shared_ptr<Backend> try_get_backend(const std::string& name, std::string* why) {
  auto& r = registry();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  auto it = r.backends.find(name);
  if (it != r.backends.end()) return it->second;
  auto f = r.failures.find(name);
  if (f != r.failures.end()) {
    if (why != nullptr) *why = f->second;
    return nullptr;
  }
  std::string reason;
  auto b = load_plugin(name, &reason);
  if (!b) {
    r.failures[name] = reason;
    SYMMEM_LOG(INFO, PLUGIN) << "backend '" << name << "' unavailable: " << reason;
    if (why != nullptr) *why = reason;
    return nullptr;
  }
  r.backends[name] = b;
  return b;
}

}  // namespace detail

void register_backend(std::shared_ptr<Backend> backend) {
  if (!backend) throw_invalid_argument("register_backend", -1, "backend", "is null");
  auto& r = registry();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  std::string name = backend->name();
  r.failures.erase(name);
  r.backends[name] = std::move(backend);
}

std::shared_ptr<Backend> get_backend(const std::string& name) {
  std::string why;
  auto b = detail::try_get_backend(name, &why);
  if (b) return b;
  auto avail = available_backends();
  throw_error(
      ErrorCode::BackendUnavailable, "get_backend", -1,
      "backend '" + name + "' is unavailable: " + why + "; available backends: " + join(avail));
}

namespace detail {
std::vector<std::shared_ptr<Backend>> loaded_backends() {
  auto& r = registry();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  std::vector<std::shared_ptr<Backend>> v;
  for (const auto& [n, b] : r.backends) v.push_back(b);
  return v;
}
}  // namespace detail

std::vector<std::string> available_backends() {
  std::set<std::string> names(detail::known_backend_names().begin(),
                              detail::known_backend_names().end());
  {
    auto& r = registry();
    std::lock_guard<std::recursive_mutex> lock(r.mu);
    for (const auto& [n, b] : r.backends) names.insert(n);
  }
  // Third-party plugins in the search directories.
  for (const auto& d : plugin_dirs()) {
    DIR* dir = ::opendir(d.c_str());
    if (dir == nullptr) continue;
    while (dirent* e = ::readdir(dir)) {
      std::string f = e->d_name;
      const std::string pre = "libsymmem_", suf = ".so";
      if (f.size() > pre.size() + suf.size() && f.compare(0, pre.size(), pre) == 0 &&
          f.compare(f.size() - suf.size(), suf.size(), suf) == 0) {
        names.insert(f.substr(pre.size(), f.size() - pre.size() - suf.size()));
      }
    }
    ::closedir(dir);
  }
  std::vector<std::string> out;
  for (const auto& n : names) {
    if (detail::try_get_backend(n, nullptr) != nullptr) out.push_back(n);
  }
  // The shipped backends first, in their list's order, then the rest in name order.
  const auto& shipped = detail::known_backend_names();
  auto rank_of = [&](const std::string& n) {
    return std::find(shipped.begin(), shipped.end(), n) - shipped.begin();
  };
  std::stable_sort(out.begin(), out.end(), [&](const std::string& a, const std::string& b) {
    return rank_of(a) < rank_of(b);
  });
  return out;
}

}  // namespace symmem
