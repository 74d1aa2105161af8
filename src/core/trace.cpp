// The flight recorder, its dumps and the metrics file (NOTE [flight recorder] in trace.hpp).

#include "core/trace.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#if SYMMEM_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

#include "core/log.hpp"
#include "symmem/env.hpp"
#include "symmem/op_table.hpp"

namespace symmem::detail {
namespace {

int64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// ---- the op path's clock ----------------------------------------------------------------------
// NOTE [recorder clock]: an entry's times are ticks, read with rdtsc where the TSC is invariant
// (x86-64, CPUID 0x80000007 EDX bit 8): ~11 ns a read against ~28 ns for clock_gettime on the
// development machine, and an op reads three. Elsewhere ticks are CLOCK_REALTIME ns. Ticks
// become CLOCK_REALTIME when read (dumps, metrics), on the line through the anchor (a clock pair
// taken when the first recorder is made, 200 us apart from a second pair that fixes the rate
// for early reads) and a pair taken at the read: a linear fit, exact to the extent that
// CLOCK_REALTIME runs at a steady rate against the TSC between the two (NTP slews it slowly).
struct TickClock {
  bool tsc = false;
  int64_t real0 = 0;
  uint64_t tick0 = 0;
};
const TickClock& tick_clock() noexcept;

inline bool tsc_invariant() noexcept {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) == 0 || a < 0x80000007u) return false;
  __get_cpuid(0x80000007u, &a, &b, &c, &d);
  return (d & (1u << 8)) != 0;
#else
  return false;
#endif
}

inline uint64_t read_ticks(bool tsc) noexcept {
#if defined(__x86_64__)
  if (tsc) return __rdtsc();
#endif
  (void)tsc;
  return static_cast<uint64_t>(now_ns());
}

const TickClock& tick_clock() noexcept {
  static const TickClock c = [] {
    TickClock k;
    k.tsc = tsc_invariant();
    k.real0 = now_ns();
    k.tick0 = read_ticks(k.tsc);
    if (k.tsc) {  // the rate's first baseline (NOTE [recorder clock])
      const int64_t until = k.real0 + 200000;
      while (now_ns() < until) {
      }
    }
    return k;
  }();
  return c;
}

int64_t ticks_now() noexcept {
  static const bool tsc = tick_clock().tsc;
  return static_cast<int64_t>(read_ticks(tsc));
}

// Ticks -> CLOCK_REALTIME ns, on the line through the anchor and a pair read now.
struct TickToReal {
  TickToReal() noexcept {
    const TickClock& c = tick_clock();
    tsc = c.tsc;
    if (!tsc) return;
    const uint64_t t = read_ticks(true);
    const int64_t r = now_ns();
    rate = t > c.tick0 ? static_cast<double>(r - c.real0) / static_cast<double>(t - c.tick0) : 0;
  }
  int64_t operator()(int64_t ticks) const noexcept {
    if (!tsc || ticks == 0) return ticks;
    const TickClock& c = tick_clock();
    return c.real0 +
           static_cast<int64_t>(static_cast<double>(static_cast<int64_t>(ticks - c.tick0)) * rate);
  }
  double ns(int64_t dticks) const noexcept {  // a duration
    return tsc ? static_cast<double>(dticks) * rate : static_cast<double>(dticks);
  }
  bool tsc = false;
  double rate = 1.0;  // ns per tick
};

// ---- wait notes ---------------------------------------------------------------------------------
struct WaitNote {
  int64_t ns = 0;  // when it was made (ticks, NOTE [recorder clock]); 0: never
  int n = 0;
  bool global = false;
  int ranks[kWaitNoteRanks] = {};
};
thread_local WaitNote t_note;

// ---- process state (immortal: NOTE [immortal statics] in env.cpp) -----------------------------
struct Registry {
  std::timed_mutex mu;  // guards recs; held by a dump while it reads them
  std::vector<FlightRecorder*> recs;
};
Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

std::atomic<bool> g_failure_dumped{false};
std::atomic<int> g_metrics_fd{-1};
std::atomic<DeviceTimesFlush> g_flushes[4] = {};
constexpr int kFlushMs = 30;  // of a dump's 100 ms

// The GPU backends' flushes (NOTE [device timestamps]), sharing `wait_ms`.
void flush_device_times(int wait_ms) noexcept {
  for (auto& f : g_flushes) {
    if (DeviceTimesFlush fn = f.load(std::memory_order_acquire)) fn(wait_ms);
  }
}
// A GPU op's kernel has ended: its end is in the slot and not before its start (a slot reused
// after the ring wrapped may first get an older op's end: NOTE [device timestamps]).
inline bool kernel_ended(uint64_t start, uint64_t end) noexcept {
  return start != 0 && end >= start;
}
std::atomic<int> g_last_rank{-1};
std::atomic<int> g_last_world{0};
std::mutex g_setup_mu;  // metrics file and signal setup
std::string* g_metrics_path = new std::string;
bool g_signal_setup = false;
int g_signal_pipe[2] = {-1, -1};

// Sequence lock of an entry (written by one thread at a time: the op's).
inline void write_begin(TraceEntry* e) noexcept {
  e->version.store(e->version.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}
inline void write_end(TraceEntry* e) noexcept {
  e->version.store(e->version.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

void copy_cstr(char* dst, size_t cap, const char* src) noexcept {
  size_t n = src ? std::strlen(src) : 0;
  if (n >= cap) n = cap - 1;
  if (n) std::memcpy(dst, src, n);
  dst[n] = '\0';
}

// Scratch entry of a recorder that keeps nothing (SYMMEM_TRACE_BUFFER=0 with a metrics file).
thread_local TraceEntry t_scratch{};

// ---- JSON ---------------------------------------------------------------------------------------
void json_str(std::string& out, const char* s) {
  if (s == nullptr) {
    out += "null";
    return;
  }
  out += '"';
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(s); *p; ++p) {
    const unsigned char c = *p;
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}
void json_str(std::string& out, const std::string& s) {
  json_str(out, s.c_str());
}
void json_int(std::string& out, int64_t v) {
  out += std::to_string(v);
}
void json_uint(std::string& out, uint64_t v) {
  out += std::to_string(v);
}
void json_ns(std::string& out, int64_t v) {
  if (v == 0)
    out += "null";
  else
    json_int(out, v);
}

const char* op_name(int op) noexcept {
  if (op == kTraceAlloc) return "alloc";
  if (op < 0 || op >= kOpCount) return "unknown";
  return to_string(static_cast<OpKind>(op));
}
const char* state_name(TraceState s) noexcept {
  switch (s) {
    case TraceState::enqueued:
      return "enqueued";
    case TraceState::started:
      return "started";
    case TraceState::completed:
      return "completed";
    case TraceState::failed:
      return "failed";
  }
  return "enqueued";
}
std::string device_name(int type, int index) {
  if (type == static_cast<int>(DeviceType::cpu)) return "cpu";
  return "cuda:" + std::to_string(index);
}

void entry_json(std::string& out, const TraceEntryCopy& e) {
  out += "{\"seq\": ";
  json_uint(out, e.seq);
  out += ", \"op\": ";
  json_str(out, op_name(e.op));
  out += ", \"dtype\": ";
  json_str(out, e.dtype >= 0 ? to_string(static_cast<DType>(e.dtype)) : nullptr);
  out += ", \"count\": ";
  json_uint(out, e.count);
  out += ", \"bytes\": ";
  json_uint(out, e.bytes);
  out += ", \"redop\": ";
  json_str(out, e.redop >= 0 ? to_string(static_cast<ReduceOp>(e.redop)) : nullptr);
  out += ", \"root\": ";
  json_int(out, e.root);
  out += ", \"algo\": ";
  json_str(out, e.algo >= 0 ? to_string(static_cast<Algo>(e.algo)) : nullptr);
  out += ", \"backend\": ";
  json_str(out, e.backend[0] ? e.backend : nullptr);
  out += ", \"device\": ";
  json_str(out, device_name(e.device_type, e.device_index));
  out += ", \"stream\": ";
  json_uint(out, e.stream);
  out += ", \"state\": ";
  json_str(out, state_name(e.state));
  out += ", \"enqueue_ns\": ";
  json_ns(out, e.enqueue_ns);
  out += ", \"start_ns\": ";
  json_ns(out, e.start_ns);
  out += ", \"end_ns\": ";
  json_ns(out, e.end_ns);
  out += ", \"error\": ";
  json_str(out, e.error[0] ? e.error : nullptr);
  out += ", \"waiting_for\": [";
  for (int i = 0; i < e.n_waiting; ++i) {
    if (i) out += ", ";
    json_int(out, e.waiting_for[i]);
  }
  out += "]";
  if (e.one_sided) out += ", \"one_sided\": true";
  out += "}";
}

void group_json(std::string& out, const FlightRecorder& r) {
  const auto& g = r.info();
  const std::vector<TraceEntryCopy> entries = r.entries();
  std::string backend;
  for (auto it = entries.rbegin(); it != entries.rend() && backend.empty(); ++it)
    backend = it->backend;
  if (backend.empty()) {
    try {
      backend = env::backend();
    } catch (...) {
      backend = "auto";
    }
  }
  out += "    {\"name\": ";
  json_str(out, g.name);
  out += ", \"rank\": ";
  json_int(out, g.rank);
  out += ", \"world_size\": ";
  json_int(out, g.world_size);
  out += ", \"global_ranks\": [";
  for (size_t i = 0; i < g.global_ranks.size(); ++i) {
    if (i) out += ", ";
    json_int(out, g.global_ranks[i]);
  }
  out += "], \"backend\": ";
  json_str(out, backend);
  uint64_t completed = r.last_completed();  // host ops, and GPU ops their kernel finished
  for (const TraceEntryCopy& e : entries) {
    if (!e.one_sided && e.state == TraceState::completed) completed = std::max(completed, e.seq);
  }
  out += ",\n     \"last_enqueued\": ";
  json_uint(out, r.last_enqueued());
  out += ", \"last_completed\": ";
  json_uint(out, completed);
  out += ",\n     \"entries\": [";
  for (size_t i = 0; i < entries.size(); ++i) {
    out += i ? ",\n       " : "\n       ";
    entry_json(out, entries[i]);
  }
  out += entries.empty() ? "]}" : "\n     ]}";
}

// The process's global rank and world size: from a root group when one is alive.
void process_rank(const std::vector<FlightRecorder*>& recs, int* rank, int* world) {
  *rank = g_last_rank.load();
  *world = g_last_world.load();
  for (const FlightRecorder* r : recs) {
    const auto& g = r->info();
    if (g.rank < 0 || g.rank >= static_cast<int>(g.global_ranks.size())) continue;
    *rank = g.global_ranks[g.rank];
    *world = g.root_world_size;
    if (g.name.find('/') == std::string::npos) break;  // a root group: its answer wins
  }
}

// Builds the dump with the registry held by the caller.
std::string build_json(const std::vector<FlightRecorder*>& recs, const char* reason,
                       const char* error, int rank, int world) {
  std::string out;
  out.reserve(4096);
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown");
  int64_t buffer = 0;
  try {
    buffer = env::trace_buffer();
  } catch (...) {
    buffer = recs.empty() ? 0 : static_cast<int64_t>(recs.front()->capacity());
  }
  out += "{\"format\": \"symmem-trace\", \"version\": 1,\n \"rank\": ";
  json_int(out, rank);
  out += ", \"world_size\": ";
  json_int(out, world);
  out += ", \"host\": ";
  json_str(out, host);
  out += ", \"pid\": ";
  json_int(out, getpid());
  out += ",\n \"reason\": ";
  json_str(out, reason);
  out += ", \"time_ns\": ";
  json_int(out, now_ns());
  out += ",\n \"error\": ";
  json_str(out, error);
  out += ",\n \"buffer\": ";
  json_int(out, buffer);
  out += ",\n \"groups\": [";
  for (size_t i = 0; i < recs.size(); ++i) {
    out += i ? ",\n" : "\n";
    group_json(out, *recs[i]);
  }
  out += recs.empty() ? "]}\n" : "\n ]}\n";
  return out;
}

void make_dirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') ::mkdir(dir.substr(0, i).c_str(), 0755);
  }
}

bool write_file(const std::string& dir, int rank, const std::string& text) {
  make_dirs(dir);
  const std::string path = dir + "/rank" + std::to_string(rank) + ".json";
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      return false;
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return ::rename(tmp.c_str(), path.c_str()) == 0;
}

// ---- metrics ------------------------------------------------------------------------------------
void open_metrics(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_setup_mu);
  if (path == *g_metrics_path) return;
  int old = g_metrics_fd.exchange(-1);
  if (old >= 0) ::close(old);
  *g_metrics_path = path;
  if (path.empty()) return;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    SYMMEM_LOG(WARN, INIT) << "SYMMEM_TRACE_FILE=" << path
                           << ": cannot open: " << std::strerror(errno)
                           << "; no metrics are written";
    return;
  }
  g_metrics_fd.store(fd);
}

// One line of SYMMEM_TRACE_FILE: `e` took `us` (host ops: call to return; GPU ops: the kernel's
// start to end).
void write_metrics(int fd, const FlightRecorder& r, const TraceEntry& e, double us) noexcept {
  const auto& g = r.info();
  const double algbw = us > 0 ? static_cast<double>(e.bytes) / (us * 1e3) : 0.0;  // GB/s
  double factor = 0;
  if (e.op >= 0 && e.op < kOpCount)
    factor = busbw_factor(op_table_rows()[e.op].busbw, g.world_size);
  const int rank = g.rank >= 0 && g.rank < static_cast<int>(g.global_ranks.size())
                       ? g.global_ranks[g.rank]
                       : g.rank;
  auto quoted = [](const char* s, char* buf, size_t cap) {
    if (s == nullptr || *s == '\0') return std::snprintf(buf, cap, "null");
    return std::snprintf(buf, cap, "\"%s\"", s);
  };
  char dtype[40], algo[40];
  quoted(e.dtype >= 0 ? to_string(static_cast<DType>(e.dtype)) : nullptr, dtype, sizeof(dtype));
  quoted(e.algo >= 0 ? to_string(static_cast<Algo>(e.algo)) : nullptr, algo, sizeof(algo));
  char line[768];
  int n = std::snprintf(
      line, sizeof(line),
      "{\"rank\":%d,\"group\":\"%s\",\"seq\":%llu,\"op\":\"%s\",\"dtype\":%s,\"count\":%llu,"
      "\"bytes\":%llu,\"algo\":%s,\"backend\":\"%s\",\"us\":%.3f,\"algbw_GBps\":%.4f,"
      "\"busbw_GBps\":%.4f}\n",
      rank, g.name.c_str(), static_cast<unsigned long long>(e.seq), op_name(e.op), dtype,
      static_cast<unsigned long long>(e.count), static_cast<unsigned long long>(e.bytes), algo,
      e.backend, us, algbw, algbw * factor);
  if (n <= 0) return;
  if (n >= static_cast<int>(sizeof(line))) {
    n = sizeof(line) - 1;
    line[n - 1] = '\n';
  }
  ssize_t w;
  do {
    w = ::write(fd, line, static_cast<size_t>(n));  // one write per line (O_APPEND)
  } while (w < 0 && errno == EINTR);
}

// ---- SIGUSR1 ------------------------------------------------------------------------------------
void on_sigusr1(int) {
  const int saved = errno;
  const int fd = g_signal_pipe[1];
  if (fd >= 0) {
    char c = 'u';
    [[maybe_unused]] ssize_t n = ::write(fd, &c, 1);  // async-signal-safe; a full pipe drops it
  }
  errno = saved;
}

void dumper_thread(int fd) {
  for (;;) {
    char buf[64];
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    dump_flight_recorders("signal", nullptr);
  }
}

void at_exit() {
  bool live = false;
  {
    std::unique_lock<std::timed_mutex> lock(registry().mu, std::chrono::milliseconds(100));
    if (!lock.owns_lock()) return;
    live = !registry().recs.empty();
  }
  if (live && !g_failure_dumped.load()) dump_flight_recorders("exit", nullptr);
}

// Called with the first recorder of a process that has SYMMEM_TRACE_DIR set.
void setup_dumps() {
  std::lock_guard<std::mutex> lock(g_setup_mu);
  if (g_signal_setup) return;
  g_signal_setup = true;
  std::atexit(at_exit);
  struct sigaction old {};
  if (sigaction(SIGUSR1, nullptr, &old) != 0) return;
  const bool default_action = (old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler == SIG_DFL;
  if (!default_action) {
    SYMMEM_LOG(INFO, INIT) << "SIGUSR1 has a handler already; flight-recorder dumps on SIGUSR1 "
                              "are off (they still happen on Timeout/PeerFailure and at exit)";
    return;
  }
  if (::pipe2(g_signal_pipe, O_CLOEXEC) != 0) return;
  ::fcntl(g_signal_pipe[1], F_SETFL, O_NONBLOCK);
  try {
    std::thread(dumper_thread, g_signal_pipe[0]).detach();
  } catch (...) {
    return;
  }
  struct sigaction sa {};
  sa.sa_handler = on_sigusr1;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
}

// ---- NVTX ---------------------------------------------------------------------------------------
#if SYMMEM_HAVE_NVTX
nvtxDomainHandle_t nvtx_domain() noexcept {
  static const nvtxDomainHandle_t d = nvtxDomainCreateA("symmem");
  return d;
}
void nvtx_push(const char* message, uint64_t payload) noexcept {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = message;
  a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
  a.payload.ullValue = payload;
  nvtxDomainRangePushEx(nvtx_domain(), &a);
}
void nvtx_pop() noexcept {
  nvtxDomainRangePop(nvtx_domain());
}
#else
void nvtx_push(const char*, uint64_t) noexcept {}
void nvtx_pop() noexcept {}
#endif

}  // namespace

bool nvtx_compiled() noexcept {
  return SYMMEM_HAVE_NVTX != 0;
}

bool nvtx_enabled() noexcept {
  static const bool on = [] {
    if (!nvtx_compiled()) return false;
    const char* inj = std::getenv("NVTX_INJECTION64_PATH");
    return inj != nullptr && inj[0] != '\0';
  }();
  return on;
}

NvtxRange::NvtxRange(const char* message, uint64_t payload) noexcept : on_(nvtx_enabled()) {
  if (on_) nvtx_push(message, payload);
}
NvtxRange::~NvtxRange() {
  if (on_) nvtx_pop();
}

KernelRange::KernelRange(const char* name, int blocks) noexcept : on_(nvtx_enabled()) {
  if (!on_) return;
  char msg[96];
  std::snprintf(msg, sizeof(msg), "kernel %s blocks=%d", name, blocks);
  nvtx_push(msg, static_cast<uint64_t>(blocks));
}
KernelRange::~KernelRange() {
  if (on_) nvtx_pop();
}

// ---- wait notes ---------------------------------------------------------------------------------
void note_waiting_for(const int* ranks, int n, bool global) noexcept {
  WaitNote& w = t_note;
  w.n = std::min(std::max(n, 0), kWaitNoteRanks);
  for (int i = 0; i < w.n; ++i) w.ranks[i] = ranks[i];
  w.global = global;
  w.ns = ticks_now();
}

// ---- TraceScope ---------------------------------------------------------------------------------
void TraceScope::begin_(const TraceOp& op) noexcept {
  if (rec_->times_handed_.load(std::memory_order_relaxed)) {  // GPU ops ran on this group
    const int fd = g_metrics_fd.load(std::memory_order_relaxed);
    if (fd >= 0) rec_->report_gpu_metrics(fd);
  }
  op_ = op;
  begin_ns_ = ticks_now();
  one_sided_ = op.one_sided;
  seq_ = op.one_sided ? rec_->seq_.load(std::memory_order_relaxed)
                      : rec_->seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  TraceEntry* e = rec_->capacity_ != 0
                      ? rec_->slot(rec_->slots_.fetch_add(1, std::memory_order_relaxed))
                      : &t_scratch;
  write_begin(e);
  e->state = TraceState::enqueued;
  e->one_sided = op.one_sided ? 1 : 0;
  e->n_waiting = 0;
  e->device_type = static_cast<uint8_t>(DeviceType::cpu);
  e->device_index = 0;
  e->op = op.op;
  e->dtype = op.dtype;
  e->redop = op.redop;
  e->algo = op.algo;
  e->root = op.root;
  e->seq = seq_;
  e->count = op.count;
  e->bytes = 0;
  e->stream = 0;
  e->enqueue_ns = begin_ns_;
  e->start_ns = 0;
  e->end_ns = 0;
  e->backend[0] = '\0';
  e->error[0] = '\0';
  write_end(e);
  e_ = e;
}

void TraceScope::set_backend_(const char* backend, Device device) noexcept {
  if (started_) return;
  write_begin(e_);
  copy_cstr(e_->backend, sizeof(e_->backend), backend);
  e_->device_type = static_cast<uint8_t>(device.type);
  e_->device_index = device.index;
  write_end(e_);
}

void TraceScope::set_algo_(int algo) noexcept {
  if (e_->algo == algo) return;
  write_begin(e_);
  e_->algo = algo;
  write_end(e_);
}

void TraceScope::start_(const char* backend, Device device, const void* stream, uint64_t count,
                        uint64_t bytes, bool synchronous) noexcept {
  if (!e_) return;
  started_ = true;
  if (nvtx_enabled()) nvtx_push_(backend, device, count, bytes);
  const int64_t t = synchronous ? ticks_now() : 0;  // a GPU op's start is the device's
  write_begin(e_);
  copy_cstr(e_->backend, sizeof(e_->backend), backend);
  e_->device_type = static_cast<uint8_t>(device.type);
  e_->device_index = device.index;
  e_->stream = reinterpret_cast<uintptr_t>(stream);
  e_->count = count;
  e_->bytes = bytes;
  // A GPU op is only enqueued here; its start is the device's (NOTE [device timestamps]).
  if (synchronous) {
    e_->state = TraceState::started;
    e_->start_ns = t;
  } else if (rec_->times_ != nullptr && e_ != &t_scratch) {
    times_ = rec_->times_for(e_);
  }
  write_end(e_);
}

void TraceScope::nvtx_push_(const char* backend, Device device, uint64_t count,
                            uint64_t bytes) noexcept {
  char msg[256];
  int n =
      std::snprintf(msg, sizeof(msg), "%s bytes=%llu count=%llu", op_name(op_.op),
                    static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(count));
  auto add = [&](const char* key, const char* value) {
    if (value == nullptr || n < 0 || n >= static_cast<int>(sizeof(msg))) return;
    n += std::snprintf(msg + n, sizeof(msg) - static_cast<size_t>(n), " %s=%s", key, value);
  };
  if (op_.dtype >= 0) add("dtype", to_string(static_cast<DType>(op_.dtype)));
  if (op_.redop >= 0) add("redop", to_string(static_cast<ReduceOp>(op_.redop)));
  if (op_.algo >= 0) add("algo", to_string(static_cast<Algo>(op_.algo)));
  if (op_.root >= 0) add(op_.one_sided ? "peer" : "root", std::to_string(op_.root).c_str());
  add("backend", backend);
  add("device", device_name(static_cast<int>(device.type), device.index).c_str());
  add("group", rec_->info_.name.c_str());
  add(op_.one_sided ? "after_seq" : "seq", std::to_string(seq_).c_str());
  nvtx_push(msg, bytes);
  nvtx_ = true;
}

void TraceScope::finish_(bool completed) noexcept {
  if (nvtx_) {
    nvtx_pop();
    nvtx_ = false;
  }
  if (!e_) return;
  if (!completed) {
    // A GPU op: its kernel writes the device times (NOTE [device timestamps]).
    e_ = nullptr;
    return;
  }
  const int64_t t = ticks_now();
  write_begin(e_);
  e_->state = TraceState::completed;
  e_->end_ns = t;
  write_end(e_);
  if (!one_sided_) {
    uint64_t c = rec_->completed_.load(std::memory_order_relaxed);
    while (seq_ > c &&
           !rec_->completed_.compare_exchange_weak(c, seq_, std::memory_order_relaxed)) {
    }
  }
  const int fd = g_metrics_fd.load(std::memory_order_relaxed);
  if (fd >= 0)  // NOTE [recorder clock]
    write_metrics(fd, *rec_, *e_, TickToReal().ns(e_->end_ns - e_->enqueue_ns) / 1e3);
  e_ = nullptr;
}

void TraceScope::failed_(ErrorCode code, const char* what) noexcept {
  if (nvtx_) {
    nvtx_pop();
    nvtx_ = false;
  }
  if (!e_) return;
  const int64_t t = ticks_now();
  const WaitNote& note = t_note;
  write_begin(e_);
  e_->state = TraceState::failed;
  e_->end_ns = t;
  copy_cstr(e_->error, sizeof(e_->error), what);
  e_->n_waiting = 0;
  if (note.ns != 0 && note.ns >= begin_ns_) {
    const auto& global = rec_->info_.global_ranks;
    for (int i = 0; i < note.n; ++i) {
      int r = note.ranks[i];
      if (!note.global) {
        if (r < 0 || r >= static_cast<int>(global.size())) continue;
        r = global[r];
      }
      e_->waiting_for[e_->n_waiting++] = r;
    }
  }
  write_end(e_);
  e_ = nullptr;
  if (code == ErrorCode::Timeout || code == ErrorCode::PeerFailure)
    dump_flight_recorders_on_failure(code == ErrorCode::Timeout ? "timeout" : "peer_failure", what);
}

void* TraceScope::device_times_ring() const noexcept {
  return times_ != nullptr ? rec_->times_ : nullptr;
}
size_t TraceScope::device_times_ring_bytes() const noexcept {
  return times_ != nullptr ? rec_->times_bytes_ : 0;
}

// ---- FlightRecorder -----------------------------------------------------------------------------
FlightRecorder::FlightRecorder(TraceGroupInfo info, size_t capacity)
    : info_(std::move(info)), capacity_(capacity) {
  (void)tick_clock();  // the anchor of NOTE [recorder clock], before the first op
  if (capacity_ != 0) {
    ring_ = static_cast<TraceEntry*>(std::calloc(capacity_, sizeof(TraceEntry)));
    if (ring_ == nullptr) capacity_ = 0;
  }
  // NOTE [device timestamps]: pages are touched only by GPU ops.
  if (capacity_ != 0 && env::trace_device_times()) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    times_bytes_ = (capacity_ * sizeof(DeviceTimes) + page - 1) / page * page;
    void* m =
        ::mmap(nullptr, times_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) {
      times_ = static_cast<DeviceTimes*>(m);
    } else {
      times_bytes_ = 0;
    }
  }
  if (info_.rank >= 0 && info_.rank < static_cast<int>(info_.global_ranks.size())) {
    g_last_rank.store(info_.global_ranks[info_.rank]);
    g_last_world.store(info_.root_world_size);
  }
  std::lock_guard<std::timed_mutex> lock(registry().mu);
  registry().recs.push_back(this);
}

FlightRecorder::~FlightRecorder() {
  const int fd = g_metrics_fd.load();
  if (fd >= 0 && times_handed_.load()) {
    flush_device_times(kFlushMs);
    report_gpu_metrics(fd);
  }
  {
    std::lock_guard<std::timed_mutex> lock(registry().mu);
    auto& v = registry().recs;
    v.erase(std::remove(v.begin(), v.end(), this), v.end());
  }
  std::free(ring_);
  // A ring handed to a backend may be registered with CUDA: it stays (NOTE [device timestamps]).
  if (times_ != nullptr && !times_handed_.load()) ::munmap(times_, times_bytes_);
}

DeviceTimes* FlightRecorder::times_for(const TraceEntry* e) noexcept {
  DeviceTimes* d = &times_[e - ring_];
  std::memset(static_cast<void*>(d), 0, sizeof(*d));
  times_handed_.store(true, std::memory_order_relaxed);
  return d;
}

void FlightRecorder::report_gpu_metrics(int fd) noexcept {
  if (capacity_ == 0 || times_ == nullptr || reporting_.exchange(true, std::memory_order_acquire))
    return;
  const uint64_t end = slots_.load(std::memory_order_acquire);
  uint64_t n = std::max(gpu_metrics_.load(std::memory_order_relaxed),
                        end > capacity_ ? end - capacity_ : uint64_t{0});
  for (; n < end; ++n) {
    const TraceEntry& e = ring_[n % capacity_];
    if (e.version.load(std::memory_order_acquire) & 1) break;  // being written: next time
    // Host ops wrote their line when they returned; failed ops have none.
    if (e.device_type != static_cast<uint8_t>(DeviceType::cuda) || e.state != TraceState::enqueued)
      continue;
    const volatile DeviceTimes* d = &times_[n % capacity_];
    const uint64_t armed = d->armed;
    if (armed != 1) continue;  // not timed (no SyncArgs kernel, graph capture) or timed out
    const uint64_t start = d->start, stop = d->end;
    // Still running (or its end not yet moved into the slot), and the ops after it.
    if (!kernel_ended(start, stop)) break;
    write_metrics(fd, *this, e, static_cast<double>(stop - start) / 1e3);
  }
  gpu_metrics_.store(n, std::memory_order_relaxed);
  reporting_.store(false, std::memory_order_release);
}

std::vector<TraceEntryCopy> FlightRecorder::entries() const {
  std::vector<TraceEntryCopy> out;
  if (capacity_ == 0) return out;
  const TickToReal to_real;
  const uint64_t end = slots_.load(std::memory_order_acquire);
  const uint64_t begin = end > capacity_ ? end - capacity_ : 0;
  out.reserve(static_cast<size_t>(end - begin));
  for (uint64_t n = begin; n < end; ++n) {
    const TraceEntry& e = ring_[n % capacity_];
    TraceEntryCopy c{};
    // Sequence lock: retry a copy that raced with the op's thread; after a few tries keep the
    // last copy (an op stuck mid-write cannot happen: writes are a handful of stores).
    for (int attempt = 0; attempt < 100; ++attempt) {
      const uint32_t v1 = e.version.load(std::memory_order_acquire);
      c.state = e.state;
      c.one_sided = e.one_sided != 0;
      c.n_waiting = std::min<int>(e.n_waiting, kWaitNoteRanks);
      c.device_type = e.device_type;
      c.device_index = e.device_index;
      c.op = e.op;
      c.dtype = e.dtype;
      c.redop = e.redop;
      c.algo = e.algo;
      c.root = e.root;
      c.seq = e.seq;
      c.count = e.count;
      c.bytes = e.bytes;
      c.stream = e.stream;
      c.enqueue_ns = e.enqueue_ns;
      c.start_ns = e.start_ns;
      c.end_ns = e.end_ns;
      std::memcpy(c.backend, e.backend, sizeof(c.backend));
      std::memcpy(c.waiting_for, e.waiting_for, sizeof(c.waiting_for));
      std::memcpy(c.error, e.error, sizeof(c.error));
      std::atomic_thread_fence(std::memory_order_acquire);
      const uint32_t v2 = e.version.load(std::memory_order_relaxed);
      if (v1 == v2 && (v1 & 1) == 0) break;
      std::this_thread::yield();
    }
    c.backend[sizeof(c.backend) - 1] = '\0';
    c.error[sizeof(c.error) - 1] = '\0';
    if (c.enqueue_ns == 0) continue;       // never written
    c.enqueue_ns = to_real(c.enqueue_ns);  // ticks -> CLOCK_REALTIME (NOTE [recorder clock])
    c.start_ns = to_real(c.start_ns);
    c.end_ns = to_real(c.end_ns);
    if (times_ != nullptr && c.device_type == static_cast<int>(DeviceType::cuda) &&
        c.state == TraceState::enqueued) {
      // The kernel's times, read now (NOTE [device timestamps]).
      const volatile DeviceTimes* d = &times_[n % capacity_];
      const uint64_t armed = d->armed;
      const int64_t offset = d->offset;
      const uint64_t start = d->start;
      const uint64_t end = d->end;
      if (armed != 0 && start != 0) {
        const bool ended = kernel_ended(start, end);
        c.state = ended ? TraceState::completed : TraceState::started;
        c.start_ns = static_cast<int64_t>(start) + offset;
        if (ended) c.end_ns = static_cast<int64_t>(end) + offset;
      }
      if (armed == 2) {  // a wait of its kernel timed out (the kernel still ends its epoch)
        c.state = TraceState::failed;
        if (c.error[0] == '\0')
          copy_cstr(c.error, sizeof(c.error), "a wait of its GPU kernel timed out");
      }
    }
    out.push_back(c);
  }
  return out;
}

std::unique_ptr<FlightRecorder> make_flight_recorder(TraceGroupInfo info) {
  const int64_t buffer = env::trace_buffer();
  const std::string file = env::trace_file();
  const std::string dir = env::trace_dir();
  open_metrics(file);
  if (buffer == 0 && file.empty() && !nvtx_enabled()) return nullptr;
  if (!dir.empty()) setup_dumps();
  return std::make_unique<FlightRecorder>(std::move(info), static_cast<size_t>(buffer));
}

// ---- dumps --------------------------------------------------------------------------------------
void add_device_times_flush(DeviceTimesFlush flush) noexcept {
  for (auto& f : g_flushes) {
    DeviceTimesFlush none = nullptr;
    if (f.load() == flush || f.compare_exchange_strong(none, flush)) return;
  }
}

std::string flight_recorder_json(const char* reason, const char* error) {
  flush_device_times(kFlushMs);
  std::unique_lock<std::timed_mutex> lock(registry().mu, std::chrono::milliseconds(100));
  if (!lock.owns_lock()) return "";
  int rank = -1, world = 0;
  process_rank(registry().recs, &rank, &world);
  return build_json(registry().recs, reason, error, rank, world);
}

namespace {

// `flushed`: the caller ran flush_device_times just before (the exit dump).
bool dump_recorders(const char* reason, const char* error, bool flushed) noexcept {
  try {
    const std::string dir = env::trace_dir();
    if (dir.empty()) return false;
    std::string text;
    int rank = -1, world = 0;
    if (!flushed) flush_device_times(kFlushMs);
    {
      // Bounded: a dump from a failing op must not hold it up (NOTE [flight recorder]).
      std::unique_lock<std::timed_mutex> lock(registry().mu,
                                              std::chrono::milliseconds(100 - kFlushMs));
      if (!lock.owns_lock()) {
        SYMMEM_LOG(WARN, INIT) << "flight recorder: no dump (" << reason
                               << "): the recorders are busy";
        return false;
      }
      process_rank(registry().recs, &rank, &world);
      if (rank < 0) return false;
      text = build_json(registry().recs, reason, error, rank, world);
    }
    const bool ok = write_file(dir, rank, text);
    if (ok) {
      SYMMEM_LOG(INFO, INIT) << "flight recorder: wrote " << dir << "/rank" << rank << ".json ("
                             << reason << ")";
    } else {
      SYMMEM_LOG(WARN, INIT) << "flight recorder: cannot write " << dir << "/rank" << rank
                             << ".json: " << std::strerror(errno);
    }
    return ok;
  } catch (...) {
    return false;
  }
}

}  // namespace

bool dump_flight_recorders(const char* reason, const char* error) noexcept {
  return dump_recorders(reason, error, false);
}

bool dump_flight_recorders_on_failure(const char* reason, const char* error) noexcept {
  if (!dump_recorders(reason, error, false)) return false;
  g_failure_dumped.store(true);
  return true;
}

void flight_recorder_exit_dump() noexcept {
  const int fd = g_metrics_fd.load();
  const bool flushed = fd >= 0;
  if (fd >= 0) {  // the GPU ops whose lines are still due (NOTE [device timestamps])
    flush_device_times(kFlushMs);
    std::unique_lock<std::timed_mutex> lock(registry().mu, std::chrono::milliseconds(100));
    if (lock.owns_lock()) {
      for (FlightRecorder* r : registry().recs) r->report_gpu_metrics(fd);
    }
  }
  if (g_failure_dumped.load()) return;
  dump_recorders("exit", nullptr, flushed);
}

void reset_trace_for_testing() noexcept {
  g_failure_dumped.store(false);
  try {
    open_metrics("");
  } catch (...) {
  }
}

}  // namespace symmem::detail
