// symmem-tune: measures, on this machine and with the ranks of the launch, the crossovers that
// Algo::automatic uses, and writes them to the tuning file that symmem reads (NOTE [tuning
// file] in src/core/tuning.hpp).
//
//   symmem-run -n 4 -- symmem-tune              # world sizes 2..4, host backend
//   symmem-run -n 2 -- symmem-tune --out tuning.json --max-bytes 4M -n 10
//
// For each backend (--backend host, cuda or all: the host backend, and the cuda backend where it
// can serve this rank's GPU, local_rank % GPUs) and each world size w from 2 to the launch's
// (the first w ranks), all_reduce of f32 between two symmetric buffers (out of place, zero copy)
// is timed with one_shot and with two_shot at sizes --min-bytes x 2^i up to --max-bytes (each
// the best of three alternating runs; host: the mean of -n calls by the CPU clock; cuda: the
// median of -n calls by CUDA events on the default stream, the slowest rank's). The threshold
// is the largest size at which one_shot was not slower, before the first two sizes in a row
// where two_shot was faster (one slower size alone is taken for noise); written as host
// "all_reduce.one_shot_max_bytes" (keyed by host_signature()) and as cuda "ll_max_bytes" (the
// piece size below which the GPU collectives go LL, src/cuda/kernels/tuning.hpp; keyed by the
// cuda plugin's signature: GPU model, SMs, GPUs, ranks per GPU, peer access).
//
// The cuda target also times two_shot above the LL crossover with 1 and 2 blocks per SM share
// and writes "two_shot.blocks_per_sm" and "two_shot.blocks_min_bytes" (NOTE [two-shot blocks] in
// src/cuda/kernels/tuning.hpp).
//
// The host target also times a 4 KiB all_reduce, ranks arriving 10 us apart, with several spin
// lengths of the waits (world sizes up to the core count; with more ranks waits do not spin) and
// writes the shortest within 3% of the fastest as host "wait.spin_us" (core/pad_sync.hpp), and
// times the two_shot all_reduce and the broadcast at three sizes up to --max-bytes with several
// chunk sizes (NOTE [host chunk sizes] in src/host/host_ops.cpp): host "all_reduce.piece_bytes"
// and "broadcast.chunk_bytes", the best over the sizes unless the built-in one is within 3%.
//
// Entries of the file for the same backend, key, world size and machine are replaced; the rest
// is kept. Rank 0 prints the measurements and writes the file.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench_format.hpp"  // parse_size, as symmem-bench reads sizes
#include "bench_mem.hpp"     // GPU buffers and CUDA-event timing without linking CUDA
#include "core/tuning.hpp"
#include "decide.hpp"
#include "host/host_ops.hpp"  // the built-in chunk sizes
#include "symmem/backend.hpp"
#include "symmem/symmem.hpp"

#if SYMMEM_HAVE_NLOHMANN_JSON
#include <nlohmann/json.hpp>
#endif

namespace {

using namespace symmem;

struct Args {
  std::string out;
  std::string backend = "all";  // host | cuda | all
  size_t min_bytes = 1 << 10, max_bytes = 16 << 20;
  int iters = 10;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "symmem-tune: " << why
            << "\nusage: symmem-run -n N -- symmem-tune [--backend host|cuda|all] [--out FILE] "
               "[--min-bytes B] [--max-bytes B] [-n ITERS]\n"
               "Measures what the collectives choose from, for 2..N ranks: the host backend's\n"
               "one_shot/two_shot crossover, waits' spin and chunk sizes, and (all, where it\n"
               "can serve) the cuda backend's LL crossover and two-shot grid; writes them to\n"
               "FILE (default: SYMMEM_TUNING_FILE, else ~/.cache/symmem/tuning.json).\n";
  std::exit(2);
}

size_t parse_bytes(const std::string& s) {
  try {
    return bench::parse_size(s);
  } catch (const std::exception&) {
    usage("bad size '" + s + "'");
  }
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value after " + k);
      return argv[++i];
    };
    if (k == "--out")
      a.out = val();
    else if (k == "--backend")
      a.backend = val();
    else if (k == "--min-bytes")
      a.min_bytes = parse_bytes(val());
    else if (k == "--max-bytes")
      a.max_bytes = parse_bytes(val());
    else if (k == "-n")
      a.iters = std::stoi(val());
    else if (k == "-h" || k == "--help")
      usage("tunes symmem's automatic algorithms");
    else
      usage("unknown option " + k);
  }
  if (a.iters < 1 || a.min_bytes < 4 || a.max_bytes < a.min_bytes) usage("bad -n or sizes");
  if (a.backend != "host" && a.backend != "cuda" && a.backend != "all")
    usage("--backend takes host, cuda or all");
  return a;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// What is tuned where: the backend, its device, the key written and the machine's signature.
struct Target {
  std::string backend;  // "host" | "cuda"
  Device device;
  std::string key;
  bench::MemIO* io = nullptr;  // cuda: buffers and CUDA-event timing
};

// The slowest rank's mean seconds per call of `call` (host: by the CPU clock), after two
// warm-up calls and a barrier.
template <class Fn>
double time_calls(const Group& g, int iters, Fn call) {
  OpOptions h;
  h.device = Device::cpu();
  for (int i = 0; i < 2; ++i) call();
  barrier(g, h);
  const double t0 = now_s();
  for (int i = 0; i < iters; ++i) call();
  double secs = (now_s() - t0) / iters, slowest = 0;
  all_reduce(&secs, &slowest, 1, DType::f64, ReduceOp::max, g, h);
  return slowest;
}

// The slowest rank's seconds per call of all_reduce with `algo`: host, the mean of `iters`
// calls by the CPU clock; cuda, the median of `iters` calls timed one by one with CUDA events.
double time_algo(const Group& g, const Target& t, const SymmetricMemory& a,
                 const SymmetricMemory& b, size_t count, Algo algo, int iters) {
  OpOptions o;
  o.algo = algo;
  o.device = t.device;
  const void* src = a.ptr(a.rank());
  void* dst = b.ptr(b.rank());
  auto call = [&] { all_reduce(src, dst, count, DType::f32, ReduceOp::sum, g, o); };
  if (t.io == nullptr) return time_calls(g, iters, call);
  for (int i = 0; i < 2; ++i) call();
  OpOptions sync;
  sync.device = t.device;
  barrier(g, sync);  // on the null stream: synchronous on the GPU backends too
  t.io->marks(iters);
  for (int i = 0; i < iters; ++i) {
    t.io->mark(i);
    call();
  }
  t.io->mark(iters);
  t.io->synchronize();
  std::vector<double> us = t.io->durations_us();
  std::sort(us.begin(), us.end());
  double secs = us[us.size() / 2] * 1e-6, slowest = 0;
  OpOptions h;
  h.device = Device::cpu();
  all_reduce(&secs, &slowest, 1, DType::f64, ReduceOp::max, g, h);
  return slowest;
}

struct Result {
  std::string backend, key, signature;
  int world;
  int64_t threshold;
  std::vector<std::tuple<size_t, double, double>> rows;  // bytes, one_shot s, two_shot s
};

// The signature the backend's entries are keyed by, for group `g` on `device`.
std::string signature_of(const Target& t, const Group& g) {
  if (t.backend == "host") return tuning::host_signature();
  auto fn = reinterpret_cast<TuningSignatureFn>(
      get_backend(t.backend)->extension(kTuningSignatureExtension));
  char buf[512];
  const int n = fn != nullptr ? fn(g, t.device.index, buf, sizeof buf) : -1;
  if (n < 0 || static_cast<size_t>(n) >= sizeof buf)
    throw Error(ErrorCode::Internal, "symmem-tune: the " + t.backend +
                                         " backend gave no tuning signature for " +
                                         to_string(t.device));
  return buf;
}

// The all_reduce operands of one world size, --max-bytes each: x (ones) and y.
struct Operands {
  SymmetricMemory x, y;
};

Operands operands(const Group& g, const Target& t, const Args& a) {
  AllocOptions ao;
  ao.backend = t.backend;
  Operands v{allocate(g, a.max_bytes, t.device, ao), allocate(g, a.max_bytes, t.device, ao)};
  std::vector<float> ones(a.max_bytes / 4, 1.0f);
  if (t.io != nullptr)
    t.io->upload(v.x.ptr(v.x.rank()), ones.data(), ones.size() * 4);
  else
    std::memcpy(v.x.ptr(v.x.rank()), ones.data(), ones.size() * 4);
  return v;
}

Result tune_world(const Group& g, const Target& t, const Args& a, const Operands& v) {
  Result r{t.backend, t.key, signature_of(t, g), g.world_size(), 0, {}};
  const SymmetricMemory &x = v.x, &y = v.y;
  for (size_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= 2) {
    const size_t count = bytes / 4;
    // Alternate the two, best of three, so that drift hits both alike.
    double one = 1e30, two = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      one = std::min(one, time_algo(g, t, x, y, count, Algo::one_shot, a.iters));
      two = std::min(two, time_algo(g, t, x, y, count, Algo::two_shot, a.iters));
    }
    r.rows.emplace_back(bytes, one, two);
  }
  r.threshold = tune::crossover(r.rows);
  return r;
}

// The two-shot's blocks per SM share (NOTE [two-shot blocks] in src/cuda/kernels/tuning.hpp):
// two_shot all_reduce at the sizes above the LL crossover `ll` (from --min-bytes when that is
// larger) up to --max-bytes, with 1 and with 2 blocks per SM share (an override that every rank
// sets in lockstep), best of three alternating runs. The wider grid is kept from the smallest
// size at which it was at least 3% faster at that size and every larger one; else 1. Two
// results: "two_shot.blocks_per_sm" and "two_shot.blocks_min_bytes" (0 with 1 block).
std::pair<Result, Result> tune_two_shot_blocks(const Group& g, const Target& t, const Args& a,
                                               const Operands& v, int64_t ll) {
  const char* kPerSm = "two_shot.blocks_per_sm";
  const char* kFrom = "two_shot.blocks_min_bytes";
  const std::string sig = signature_of(t, g);
  const int w = g.world_size();
  Result per_sm{t.backend, kPerSm, sig, w, 1, {}};
  Result from{t.backend, kFrom, sig, w, 0, {}};
  size_t start = a.min_bytes;
  while (start <= static_cast<size_t>(std::max<int64_t>(ll, 0)) && start <= a.max_bytes / 2)
    start *= 2;
  const SymmetricMemory &x = v.x, &y = v.y;
  tuning::set_override(t.backend, kFrom, w, 0);
  for (size_t bytes = start; bytes <= a.max_bytes; bytes *= 2) {
    double one = 1e30, two = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      tuning::set_override(t.backend, kPerSm, w, 1);
      one = std::min(one, time_algo(g, t, x, y, bytes / 4, Algo::two_shot, a.iters));
      tuning::set_override(t.backend, kPerSm, w, 2);
      two = std::min(two, time_algo(g, t, x, y, bytes / 4, Algo::two_shot, a.iters));
    }
    per_sm.rows.emplace_back(bytes, one, two);
  }
  tuning::set_override(t.backend, kPerSm, w, std::nullopt);
  tuning::set_override(t.backend, kFrom, w, std::nullopt);
  std::tie(per_sm.threshold, from.threshold) = tune::wider_grid_from(per_sm.rows);
  return {per_sm, from};
}

// The slowest rank's mean seconds per 4 KiB-class all_reduce (Algo::automatic) when the ranks
// arrive apart: before call i, rank i % world works `skew_us` first (as ranks of a real program
// finish their compute at different times), so the others wait that long.
double time_skewed(const Group& g, const SymmetricMemory& a, const SymmetricMemory& b, size_t count,
                   int iters, double skew_us) {
  OpOptions o;
  o.device = Device::cpu();
  const void* src = a.ptr(a.rank());
  void* dst = b.ptr(b.rank());
  barrier(g, o);
  const double t0 = now_s();
  for (int i = 0; i < iters; ++i) {
    if (i % g.world_size() == g.rank()) {
      const double until = now_s() + skew_us * 1e-6;
      while (now_s() < until) {
      }
    }
    all_reduce(src, dst, count, DType::f32, ReduceOp::sum, g, o);
  }
  double secs = (now_s() - t0) / iters, slowest = 0;
  all_reduce(&secs, &slowest, 1, DType::f64, ReduceOp::max, g, o);
  return slowest;
}

// The host waits' spin before they yield (core/pad_sync.hpp, "wait.spin_us"): a 4 KiB
// all_reduce with Algo::automatic and ranks arriving 10 us apart (time_skewed), for each
// candidate (every rank sets the same override in lockstep), best of three alternating rounds.
// The shortest spin within 3% of the fastest wins: spinning longer burns a core for nothing
// measurable.
Result tune_spin(const Group& g, const Target& t, const Args& a) {
  const std::vector<int64_t> kCandidates = {0, 5, 20, 50, 200};
  const char* key = "wait.spin_us";
  Result r{t.backend, key, signature_of(t, g), g.world_size(), 0, {}};
  const size_t bytes = std::min<size_t>(4096, a.max_bytes);
  AllocOptions ao;
  ao.backend = t.backend;
  SymmetricMemory x = allocate(g, bytes, t.device, ao);
  SymmetricMemory y = allocate(g, bytes, t.device, ao);
  std::memset(x.ptr(x.rank()), 0, bytes);
  const int iters = std::max(100, 10 * a.iters);
  std::vector<double> best(kCandidates.size(), 1e30);
  for (int rep = 0; rep < 3; ++rep) {
    for (size_t i = 0; i < kCandidates.size(); ++i) {
      tuning::set_override("host", key, g.world_size(), kCandidates[i]);
      best[i] = std::min(best[i], time_skewed(g, x, y, bytes / 4, iters, 10.0));
    }
  }
  tuning::set_override("host", key, g.world_size(), std::nullopt);
  for (size_t i = 0; i < kCandidates.size(); ++i)
    r.rows.emplace_back(static_cast<size_t>(kCandidates[i]), best[i], 0.0);
  r.threshold = tune::shortest_within(kCandidates, best);
  x.free();
  y.free();
  return r;
}

// A host chunk size (NOTE [host chunk sizes] in src/host/host_ops.cpp): `call(count)` (an op of
// `count` f32) timed with each candidate size (every rank sets the same override in lockstep) at
// --max-bytes / 16, / 4 and / 1, best of three alternating rounds. One size serves every message,
// so a candidate's score is the sum over the sizes of its time over the fastest candidate's
// there (the number of sizes for one that is fastest at each). The best score is written unless
// the built-in size's is within 3% of it. Rows: the candidate, its score, its time at --max-bytes.
template <class Fn>
Result tune_chunk(const Group& g, const Target& t, const Args& a, const char* key, size_t builtin,
                  Fn call) {
  const std::vector<int64_t> kCandidates = {32 << 10,  64 << 10, 128 << 10, 256 << 10,
                                            512 << 10, 1 << 20,  2 << 20};
  Result r{t.backend, key, signature_of(t, g), g.world_size(), 0, {}};
  std::vector<double> score(kCandidates.size(), 0.0), at_max(kCandidates.size(), 0.0);
  for (size_t div : {16, 4, 1}) {
    const size_t count = std::max<size_t>(1, a.max_bytes / div / 4);
    std::vector<double> best(kCandidates.size(), 1e30);
    for (int rep = 0; rep < 3; ++rep) {
      for (size_t i = 0; i < kCandidates.size(); ++i) {
        tuning::set_override("host", key, g.world_size(), kCandidates[i]);
        best[i] = std::min(best[i], time_calls(g, a.iters, [&] { call(count); }));
      }
    }
    const double fastest = *std::min_element(best.begin(), best.end());
    for (size_t i = 0; i < kCandidates.size(); ++i) score[i] += best[i] / fastest;
    at_max = best;
  }
  tuning::set_override("host", key, g.world_size(), std::nullopt);
  for (size_t i = 0; i < kCandidates.size(); ++i)
    r.rows.emplace_back(static_cast<size_t>(kCandidates[i]), score[i], at_max[i]);
  r.threshold = tune::fastest_unless_within(kCandidates, score, static_cast<int64_t>(builtin));
  return r;
}

// The host's two chunk sizes for one world size, on the tune's operands (x, y of --max-bytes):
// the zero-copy two_shot all_reduce x -> y, and a broadcast from rank 0 of x into y.
std::vector<Result> tune_host_chunks(const Group& g, const Target& t, const Args& a,
                                     const Operands& v) {
  const void* x = v.x.ptr(v.x.rank());
  void* y = v.y.ptr(v.y.rank());
  OpOptions two;
  two.device = Device::cpu();
  two.algo = Algo::two_shot;
  OpOptions cpu;
  cpu.device = Device::cpu();
  return {tune_chunk(g, t, a, "all_reduce.piece_bytes", kHostPieceBytes,
                     [&](size_t n) { all_reduce(x, y, n, DType::f32, ReduceOp::sum, g, two); }),
          tune_chunk(g, t, a, "broadcast.chunk_bytes", kHostBroadcastChunkBytes,
                     [&](size_t n) { broadcast(x, y, n, DType::f32, 0, g, cpu); })};
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

void mkdirs(const std::string& file) {
  for (size_t p = file.find('/', 1); p != std::string::npos; p = file.find('/', p + 1))
    ::mkdir(file.substr(0, p).c_str(), 0755);
}

int write_file(const std::string& path, const std::vector<Result>& results) {
#if SYMMEM_HAVE_NLOHMANN_JSON
  nlohmann::json j = {
      {"format", "symmem-tuning"}, {"version", 1}, {"entries", nlohmann::json::array()}};
  if (std::ifstream in(path); in) {
    try {
      nlohmann::json old = nlohmann::json::parse(in);
      for (const auto& e : old.at("entries")) {
        bool replaced = false;
        for (const Result& r : results)
          replaced |= e.value("backend", "") == r.backend && e.value("key", "") == r.key &&
                      e.value("signature", "") == r.signature && e.value("world", 0) == r.world;
        if (!replaced) j["entries"].push_back(e);
      }
    } catch (const std::exception& e) {
      std::cerr << "symmem-tune: " << path << " is not a tuning file (" << e.what()
                << "); writing a new one\n";
    }
  }
  const std::string when = utc_now();
  for (const Result& r : results)
    j["entries"].push_back({{"backend", r.backend},
                            {"signature", r.signature},
                            {"key", r.key},
                            {"world", r.world},
                            {"value", r.threshold},
                            {"measured", when}});
  mkdirs(path);
  std::ofstream out(path, std::ios::trunc);
  out << j.dump(1) << "\n";
  if (!out) {
    std::cerr << "symmem-tune: cannot write " << path << "\n";
    return 1;
  }
  std::printf("# wrote %zu entries to %s\n", results.size(), path.c_str());
  for (const Result& r : results)
    std::printf("#   %s %s, %d ranks = %lld (signature %s)\n", r.backend.c_str(), r.key.c_str(),
                r.world, static_cast<long long>(r.threshold), r.signature.c_str());
  return 0;
#else
  (void)results;
  std::cerr << "symmem-tune: built without nlohmann_json: cannot write " << path << "\n";
  return 1;
#endif
}

// The backends to tune: host, and cuda where it can serve this rank's GPU on every rank (agreed
// over the group, so that every rank takes the same steps). `io` keeps the cuda target's
// buffers' reader alive.
std::vector<Target> targets(const Group& g, const Args& a, std::unique_ptr<bench::MemIO>& io) {
  std::vector<Target> t;
  if (a.backend != "cuda") t.push_back({"host", Device::cpu(), "all_reduce.one_shot_max_bytes"});
  if (a.backend == "host") return t;
  std::string why;
  const int gpus = bench::cuda_device_count();
  const Device dev = Device::cuda(g.local_rank() % std::max(1, gpus));
  int ok = 0;
  if (gpus > 0) {
    try {
      ok = get_backend("cuda")->can_serve(g, dev, &why) ? 1 : 0;
    } catch (const Error& e) {
      why = e.what();
    }
    if (ok) {
      io = bench::make_cuda_io(dev.index, &why);
      ok = io != nullptr ? 1 : 0;
    }
  } else {
    why = "no GPU (libcuda.so.1 missing or no device)";
  }
  int all_ok = 0;
  OpOptions h;
  h.device = Device::cpu();
  all_reduce(&ok, &all_ok, 1, DType::i32, ReduceOp::min, g, h);
  if (all_ok == 1) {
    t.push_back({"cuda", dev, "ll_max_bytes", io.get()});
  } else if (a.backend == "cuda") {
    usage("the cuda backend cannot serve here" + (why.empty() ? "" : ": " + why));
  } else if (g.rank() == 0) {
    std::printf("# cuda: not tuned (%s)\n",
                why.empty() ? "not every rank can use it" : why.c_str());
  }
  return t;
}

// A result's rows: bytes and the two timings, in us.
void print_rows(const Result& r, const char* first, const char* second) {
  std::printf("%12s %14s %14s\n", "bytes", first, second);
  for (auto [bytes, one, two] : r.rows)
    std::printf("%12zu %14.2f %14.2f\n", bytes, one * 1e6, two * 1e6);
  std::fflush(stdout);
}

int run(int argc, char** argv) {
  Args a = parse(argc, argv);
  Group g = Group::from_env();
  if (g.world_size() < 2) usage("needs 2 or more ranks (symmem-run -n N -- symmem-tune)");
  std::unique_ptr<bench::MemIO> io;
  std::vector<Result> results;
  for (const Target& t : targets(g, a, io)) {
    for (int w = 2; w <= g.world_size(); ++w) {
      std::vector<int> ranks(static_cast<size_t>(w));
      for (int i = 0; i < w; ++i) ranks[static_cast<size_t>(i)] = i;
      if (g.rank() < w) {
        Group sub = g.split(ranks);
        Operands v = operands(sub, t, a);
        Result r = tune_world(sub, t, a, v);
        if (g.rank() == 0) {
          std::printf("# %s all_reduce, %d ranks: %s = %lld bytes\n", t.backend.c_str(), w,
                      t.key.c_str(), static_cast<long long>(r.threshold));
          print_rows(r, "one_shot(us)", "two_shot(us)");
        }
        results.push_back(r);
        if (t.backend == "cuda" && env::gpu_blocks_per_sm().has_value()) {
          if (g.rank() == 0)
            std::printf(
                "# cuda, %d ranks: two_shot.blocks_per_sm not tuned "
                "(SYMMEM_GPU_BLOCKS_PER_SM is set and decides every kernel)\n",
                w);
        } else if (t.backend == "cuda") {
          auto [per_sm, from] = tune_two_shot_blocks(sub, t, a, v, r.threshold);
          if (g.rank() == 0) {
            std::printf("# cuda two_shot all_reduce, %d ranks: %s = %lld from %s = %lld bytes\n", w,
                        per_sm.key.c_str(), static_cast<long long>(per_sm.threshold),
                        from.key.c_str(), static_cast<long long>(from.threshold));
            print_rows(per_sm, "1/SM(us)", "2/SM(us)");
          }
          results.push_back(per_sm);
          results.push_back(from);
        }
        if (t.backend == "host") {
          for (Result& c : tune_host_chunks(sub, t, a, v)) {
            if (g.rank() == 0) {
              std::printf("# host %s, %d ranks, up to %zu bytes: %s = %lld\n",
                          c.key.substr(0, c.key.find('.')).c_str(), w, a.max_bytes, c.key.c_str(),
                          static_cast<long long>(c.threshold));
              std::printf("%12s %14s %14s\n", "chunk(B)", "score", "at max(us)");
              for (auto [size, sc, us] : c.rows)
                std::printf("%12zu %14.3f %14.2f\n", size, sc, us * 1e6);
              std::fflush(stdout);
            }
            results.push_back(std::move(c));
          }
        }
        v.x.free();
        v.y.free();
        if (t.backend == "host") {
          static const long cores = sysconf(_SC_NPROCESSORS_ONLN);
          if (w <= cores) {
            Result sp = tune_spin(sub, t, a);
            if (g.rank() == 0) {
              std::printf("# host 4 KiB all_reduce, %d ranks: wait.spin_us = %lld\n", w,
                          static_cast<long long>(sp.threshold));
              std::printf("%12s %14s\n", "spin(us)", "auto(us)");
              for (auto [spin, us, unused] : sp.rows) std::printf("%12zu %14.2f\n", spin, us * 1e6);
              std::fflush(stdout);
            }
            results.push_back(sp);
          } else if (g.rank() == 0) {
            std::printf(
                "# host, %d ranks: wait.spin_us not tuned (more ranks than the %ld "
                "cores: waits do not spin)\n",
                w, cores);
          }
        }
      }
      barrier(g);
    }
  }
  if (g.rank() != 0) return 0;
  std::string path = !a.out.empty() ? a.out : tuning::write_path();
  if (path.empty()) usage("no --out, no SYMMEM_TUNING_FILE and no home directory to write to");
  return write_file(path, results);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const symmem::Error& e) {
    std::cerr << "symmem-tune: " << e.what() << " [" << symmem::to_string(e.code()) << "]\n";
    return 1;
  }
}
