// symmem-bench: nccl-tests-style benchmark of symmem's collectives, verified. One process per
// rank, started by a launcher:
//
//   symmem-run -n 4 -- symmem-bench                    # all_reduce f32 sum, a size sweep
//   symmem-run -n 4 -- symmem-bench --op all --dtype bf16 -b 1K -e 64M -f 4 --json out.jsonl
//
// Sizes are bytes per rank (nccl-tests convention: the larger buffer of the op). Inputs are small
// integers (exact in every dtype, and so are their sums and averages), so every result has one
// exact answer; -c 1 (default) checks every element of every rank and the exit status is 1 when
// any is wrong. Every iteration is timed (no barrier between iterations); rank 0 prints the table
// (mean, then median/min/max over iterations) and --json FILE gets one object per row. See
// usage() for every option and column.

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench_format.hpp"
#include "bench_mem.hpp"
#include "symmem/symmem.hpp"

namespace symmem::bench {

int moe_main(int argc, char** argv);  // bench_moe.cpp: --op moe_dispatch|moe_combine

namespace {

struct Options {
  std::string backend = "auto";
  std::string op = "all_reduce";
  std::string dtype = "f32";
  std::string redop = "sum";
  std::string algo = "auto";
  std::string mem = "sym";
  size_t min_bytes = 4;
  size_t max_bytes = 16 << 20;
  double factor = 4;
  int iters = 20;
  int warmup = 5;
  int check = 1;
  int root = 0;
  std::string json;
  std::string trace;            // --trace DIR: SYMMEM_TRACE_DIR for this run
  long long trace_buffer = -1;  // --trace-buffer N; -1: enough for the run
};

// The op and dtype lists and the per-op size meanings come from their tables (NOTE [op table],
// NOTE [dtype table]).
std::string usage() {
  std::string ops, types;
  for (OpKind k : all_ops()) ops += std::string(" ") + op_name(k);
  for (size_t i = 0; i < dtype_table_size(); ++i)
    types += std::string(" ") + dtype_table()[i].short_name;
  return "usage: symmem-bench [--backend auto|host|cuda|nvshmem|nccl] [--op OP|all] [--dtype T]\n"
         "                    [--redop sum|avg|min|max] [--algo auto|one_shot|two_shot]\n"
         "                    [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1]\n"
         "                    [--root R] [--mem sym|plain] [--json FILE]\n"
         "                    [--trace DIR [--trace-buffer N]]\n"
         "\n"
         "Times symmem's collectives over a range of sizes and checks their results, like\n"
         "nccl-tests. Every process is one rank: start it under a launcher (symmem-run, torchrun,\n"
         "srun, mpirun; see docs/launching.md), for example\n"
         "    symmem-run -n 4 -- symmem-bench --op all_reduce -b 4K -e 16M\n"
         "Started without one it stops with an error that says what is missing\n"
         "(symmem-run -n 1 -- symmem-bench runs a single rank). Rank 0 prints the table.\n"
         "\n"
         "  --backend B     where buffers live and which transport runs the ops; auto: host for\n"
         "                  CPU memory (the GPU backends use GPU local_rank % device count)\n"
         "  --op OP         one of" +
         ops +
         ", or all; moe_dispatch and moe_combine take their own options\n"
         "                  (symmem-bench --op moe_dispatch --help)\n"
         "  --dtype T       one of" +
         types +
         "\n"
         "                  (or the long names: float32, bfloat16, float8_e4m3fn, ...)\n"
         "  --redop R       the reduction of all_reduce and reduce_scatter\n"
         "  --algo A        all_reduce's algorithm (auto picks by size)\n"
         "  -b, -e SIZE     smallest and largest size: bytes per rank, K/M/G suffixes (x1024)\n"
         "  -f FACTOR       size step (multiply by FACTOR, > 1)\n"
         "  -n ITERS        timed iterations per size (each timed on its own)\n"
         "  -w WARMUP       untimed iterations before them\n"
         "  -c 0|1          1: before timing, run the op once on known inputs and check every\n"
         "                  element on every rank (#wrong; exit status 1 if any is wrong);\n"
         "                  0: no check (#wrong is N/A)\n"
         "  --root R        broadcast's root rank\n"
         "  --mem M         sym: buffers in symmetric memory (zero copy); plain: ordinary memory\n"
         "                  (ops stage it through the group's workspace)\n"
         "  --json FILE     also write one JSON object per row to FILE (rank 0)\n"
         "  --trace DIR     each rank writes its flight recorder to DIR/rank<R>.json at exit\n"
         "                  (and on a timeout or peer failure): sets SYMMEM_TRACE_DIR for the\n"
         "                  run and creates DIR; read the dumps with symmem-trace DIR\n"
         "                  (docs/debugging.md)\n"
         "  --trace-buffer N  ops each group's recorder keeps (SYMMEM_TRACE_BUFFER); default:\n"
         "                  SYMMEM_TRACE_BUFFER if set, else enough for every op of the run\n"
         "Defaults: --op all_reduce --dtype f32 --redop sum -b 4 -e 16M -f 4 -n 20 -w 5 -c 1.\n"
         "\n"
         "What a size is, per op (buffers per rank in units of the op's count argument c, N "
         "ranks):\n"
         "the size is the larger buffer's bytes per rank, as in nccl-tests; sizes too small for "
         "one\n"
         "element per block are skipped.\n" +
         size_help() +
         "\n"
         "Columns (JSON field in brackets):\n"
         "  size        bytes per rank, as above [bytes]\n"
         "  count       elements of that buffer: size / dtype bytes [count]\n"
         "  type, redop the dtype and the reduction (none for data movement) [dtype, redop]\n"
         "  time(us)    mean time per iteration: the slowest rank's time for all ITERS, divided\n"
         "              by ITERS (what nccl-tests prints) [time_us]\n"
         "  algbw(GB/s) size / time [algbw_gbps]\n"
         "  busbw(GB/s) algbw x nccl-tests' bus factor of the op, comparable across rank counts:\n"
         "              all_reduce 2(N-1)/N, reduce_scatter, all_gather and all_to_all(v)\n"
         "              (N-1)/N, broadcast 1 [busbw_gbps]\n"
         "  #wrong      wrong elements over all ranks; N/A with -c 0 [wrong]\n"
         "  algo        the algorithm that ran (all_reduce: what --algo auto chose for this size,\n"
         "              from the built-in table or symmem-tune's file); - for other ops "
         "[algo_ran]\n"
         "  med(us), min(us), max(us)\n"
         "              the median, fastest and slowest of the ITERS iterations of the rank\n"
         "              whose time(us) it is (each iteration timed on its own: CPU clock on the\n"
         "              host backend, CUDA events on GPU backends). A max far above the median\n"
         "              is noise (another program, ranks sharing a CPU); a median far from\n"
         "              time(us) too [time_median_us, time_min_us, time_max_us, iters]\n"
         "The header names each rank's CPUs (sched_getaffinity): symmem-run binds ranks to CPUs\n"
         "of their own by default (--bind-to), and unbound ranks make small sizes noisy.\n";
}

[[noreturn]] void usage_error(const std::string& msg) {
  std::cerr << "symmem-bench: " << msg << "\n" << usage();
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) usage_error(std::string("missing value after ") + argv[i]);
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    try {
      if (a == "-h" || a == "--help") {
        std::cout << usage();
        std::exit(0);
      } else if (a == "--backend")
        o.backend = value(i);
      else if (a == "--op")
        o.op = value(i);
      else if (a == "--dtype" || a == "-d")
        o.dtype = value(i);
      else if (a == "--redop" || a == "-o")
        o.redop = value(i);
      else if (a == "--algo")
        o.algo = value(i);
      else if (a == "--mem")
        o.mem = value(i);
      else if (a == "--json")
        o.json = value(i);
      else if (a == "--trace")
        o.trace = value(i);
      else if (a == "--trace-buffer")
        o.trace_buffer = std::stoll(value(i));
      else if (a == "-b" || a == "--minbytes")
        o.min_bytes = parse_size(value(i));
      else if (a == "-e" || a == "--maxbytes")
        o.max_bytes = parse_size(value(i));
      else if (a == "-f" || a == "--stepfactor")
        o.factor = std::stod(value(i));
      else if (a == "-n" || a == "--iters")
        o.iters = std::stoi(value(i));
      else if (a == "-w" || a == "--warmup_iters")
        o.warmup = std::stoi(value(i));
      else if (a == "-c" || a == "--check")
        o.check = std::stoi(value(i));
      else if (a == "--root")
        o.root = std::stoi(value(i));
      else
        usage_error("unknown argument '" + a + "'");
    } catch (const std::logic_error&) {
      usage_error("bad value for " + a);
    }
  }
  if (o.factor <= 1.0) usage_error("-f must be > 1");
  if (o.iters < 1 || o.warmup < 0) usage_error("-n must be >= 1 and -w >= 0");
  if (o.min_bytes > o.max_bytes) usage_error("-b must be <= -e");
  if (o.mem != "sym" && o.mem != "plain") usage_error("--mem must be sym or plain");
  if (o.check != 0 && o.check != 1) usage_error("-c must be 0 or 1");
  if (o.trace_buffer != -1 && o.trace.empty()) usage_error("--trace-buffer needs --trace DIR");
  if (o.trace_buffer < -1) usage_error("--trace-buffer must be >= 0");
  return o;
}

// --trace: the recorder reads SYMMEM_TRACE_DIR and SYMMEM_TRACE_BUFFER when the first group is
// created, so setting them before Group::from_env is enough (the user asked for it: this is
// the tool's own option, not a dependency configured behind anyone's back). Every rank creates
// DIR (concurrently: an existing directory is fine).
void setup_trace(const Options& o, size_t n_ops) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::absolute(o.trace, ec);
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) {
    std::cerr << "symmem-bench: --trace: cannot create directory '" << o.trace
              << "': " << ec.message() << "\n";
    std::exit(2);
  }
  setenv("SYMMEM_TRACE_DIR", dir.c_str(), 1);
  long long entries = o.trace_buffer;
  if (entries < 0 && std::getenv("SYMMEM_TRACE_BUFFER")) return;  // the user's own setting
  if (entries < 0) {
    // Per op and size: the check, warmup and timed calls, a barrier, the result all_reduces
    // and the buffers' allocation rendezvous (+ slack); the affinity all_gather once.
    long long sizes = 0;
    for (double size = static_cast<double>(o.min_bytes);
         size <= static_cast<double>(o.max_bytes) * 1.0000001; size *= o.factor)
      ++sizes;
    entries = static_cast<long long>(n_ops) * sizes * (o.iters + o.warmup + 12) + 64;
    entries = std::min(entries, 1000000LL);  // SYMMEM_TRACE_BUFFER's largest value
  }
  setenv("SYMMEM_TRACE_BUFFER", std::to_string(entries).c_str(), 1);
}

// ---- exact values -----------------------------------------------------------------------------
// Element i of rank r: a(i) + d(r, i) with sum_r d(r, i) = 0, so sum = n * a(i) and avg = a(i)
// exactly; every value and partial sum is a small integer (|x| < 256), exact in f16 and bf16.
// fp8 cannot hold all of them, so the expected results model the reduction's contract instead:
// inputs as stored in the dtype, accumulated in f32 in rank order, rounded once.
double value(int r, size_t i, int n) {
  double a = static_cast<double>(i % 9) - 4.0;
  double b = n <= 64 ? static_cast<double>((i / 9) % 3) : 0.0;
  return a + (r == 0 ? -(n - 1) * b : b);
}

// f64, the integer types (truncated to the element's width: wrapping, little-endian), bool (as
// v != 0) and complex (as (v, 0)) are stored and read back exactly, with no f32 round trip, so
// their check is exact; the narrow floats go through f32.
template <class T>
double load_as(const void* in) {
  T x;
  std::memcpy(&x, in, sizeof(T));
  return static_cast<double>(x);
}

// The real part of a complex element; an impossible value when the imaginary part is not 0 (the
// check never expects one).
template <class T>
double load_real(const void* in) {
  T c[2];
  std::memcpy(c, in, sizeof(c));
  return c[1] == 0 ? static_cast<double>(c[0]) : -1e300;
}

template <class T>
void store_complex(double v, void* out) {
  const T c[2] = {static_cast<T>(v), 0};
  std::memcpy(out, c, sizeof(c));
}

void encode(DType t, double v, void* out) {
  const int64_t x = static_cast<int64_t>(v);
  switch (t) {
    case DType::f64:
      std::memcpy(out, &v, 8);
      return;
    case DType::i32:
    case DType::i64:
    case DType::u8:
    case DType::i8:
    case DType::i16:
    case DType::u16:
    case DType::u32:
    case DType::u64:
      std::memcpy(out, &x, dtype_size(t));  // the low bytes (x86 is little-endian)
      return;
    case DType::b8:
      *static_cast<unsigned char*>(out) = v != 0 ? 1 : 0;
      return;
    case DType::c64:
      return store_complex<float>(v, out);
    case DType::c128:
      return store_complex<double>(v, out);
    default: {
      const float f = static_cast<float>(v);
      convert_from_f32(t, &f, out, 1);
    }
  }
}

// Every value the check can expect is exact in a double (|x| < 2^53).
double decode(DType t, const void* in) {
  switch (t) {
    case DType::f64:
      return load_as<double>(in);
    case DType::i64:
      return load_as<int64_t>(in);
    case DType::i32:
      return load_as<int32_t>(in);
    case DType::u8:
      return load_as<uint8_t>(in);
    case DType::i8:
      return load_as<int8_t>(in);
    case DType::b8:
      return *static_cast<const unsigned char*>(in) != 0 ? 1 : 0;
    case DType::i16:
      return load_as<int16_t>(in);
    case DType::u16:
      return load_as<uint16_t>(in);
    case DType::u32:
      return load_as<uint32_t>(in);
    case DType::u64:
      return load_as<uint64_t>(in);
    case DType::c64:
      return load_real<float>(in);
    case DType::c128:
      return load_real<double>(in);
    default: {
      float f;
      convert_to_f32(t, in, &f, 1);
      return f;
    }
  }
}

// `v` as the dtype stores it.
double stored(DType t, double v) {
  unsigned char buf[16];  // the widest dtype (c128)
  encode(t, v, buf);
  return decode(t, buf);
}

double expected_reduce(size_t i, int n, ReduceOp op, DType dt) {
  if (dt == DType::f64 || !dtype_info(dt).is_float) {  // exact in the accumulator
    double acc = value(0, i, n);
    for (int r = 1; r < n; ++r) {
      double v = value(r, i, n);
      if (op == ReduceOp::sum || op == ReduceOp::avg) acc += v;
      if (op == ReduceOp::min) acc = std::min(acc, v);
      if (op == ReduceOp::max) acc = std::max(acc, v);
    }
    if (op != ReduceOp::avg) return acc;
    return dt == DType::f64 ? acc / n : std::trunc(acc / n);  // integer division truncates
  }
  float acc = static_cast<float>(stored(dt, value(0, i, n)));
  for (int r = 1; r < n; ++r) {
    const float v = static_cast<float>(stored(dt, value(r, i, n)));
    if (op == ReduceOp::sum || op == ReduceOp::avg) acc += v;
    if (op == ReduceOp::min) acc = v < acc ? v : acc;
    if (op == ReduceOp::max) acc = acc < v ? v : acc;
  }
  if (op == ReduceOp::avg) acc = acc / static_cast<float>(n);
  return stored(dt, acc);
}

// ---- one op -----------------------------------------------------------------------------------
struct Shape {
  size_t send_elems = 0, recv_elems = 0;  // per rank
  size_t count = 0;                       // the op's count argument
  size_t bytes = 0;                       // reported size (bytes per rank)
};

// Per-rank element counts from the op's row: `count` is the largest count whose buffers fit in
// `size` bytes (all_to_all_v, whose blocks vary, is timed with world_size equal blocks).
Shape shape_of(OpKind op, size_t size, size_t es, int n) {
  using op_table::Blocks;
  const OpInfo& row = op_info(op);
  auto blocks = [](Blocks b) { return b == Blocks::var ? Blocks::world : b; };
  const Blocks sb = blocks(row.send), rb = blocks(row.recv);
  Shape s;
  s.count = size / es / (count_is_per_rank(row) ? static_cast<size_t>(n) : 1);
  s.send_elems = block_elems(sb, s.count, n);
  s.recv_elems = block_elems(rb, s.count, n);
  s.bytes = std::max(s.send_elems, s.recv_elems) * es;
  return s;
}

class Runner {
 public:
  Runner(const Group& g, const Options& o, DType dt, ReduceOp redop, Algo algo, Device device,
         MemIO& io)
      : g_(g), o_(o), dt_(dt), redop_(redop), algo_(algo), device_(device), io_(io) {}

  // Returns false when the size is too small for this op (no row).
  Algo chosen() const { return chosen_; }
  bool run(OpKind op, size_t size, Row* row) {
    const int n = g_.world_size(), r = g_.rank();
    const size_t es = dtype_size(dt_);
    Shape s = shape_of(op, size, es, n);
    if (s.count == 0) return false;
    ensure(s.send_elems * es, s.recv_elems * es);
    std::vector<int64_t> counts(n, static_cast<int64_t>(s.count)), rcounts(n), roffs(n);
    OpOptions oo;
    oo.algo = algo_;
    oo.device = device_;
    oo.chosen_algo = &chosen_;
    AllToAllVOptions vo;
    vo.device = device_;
    vo.recv_counts_known = false;
    int64_t *dcounts = counts.data(), *drc = rcounts.data(), *dro = roffs.data();
    if (device_.is_cuda()) {  // counts live in device memory on GPU backends
      dcounts = static_cast<int64_t*>(counts_dev_);
      drc = dcounts + n;
      dro = dcounts + 2 * n;
      io_.upload(dcounts, counts.data(), n * sizeof(int64_t));
    }
    auto once = [&] {
      switch (op) {
        case OpKind::all_reduce:
          all_reduce(send_, recv_, s.count, dt_, redop_, g_, oo);
          break;
        case OpKind::reduce_scatter:
          reduce_scatter(send_, recv_, s.count, dt_, redop_, g_, oo);
          break;
        case OpKind::all_gather:
          all_gather(send_, recv_, s.count, dt_, g_, oo);
          break;
        case OpKind::all_to_all:
          all_to_all(send_, recv_, s.count, dt_, g_, oo);
          break;
        case OpKind::all_to_all_v:
          all_to_all_v(send_, dcounts, recv_, drc, dro, s.recv_elems, dt_, g_, vo);
          break;
        case OpKind::broadcast:
          broadcast(send_, recv_, s.count, dt_, o_.root, g_, oo);
          break;
        default:  // all_ops() holds the collectives only
          break;
      }
    };

    long long wrong = -1;
    if (o_.check) {
      fill_send(op, s, es);
      std::vector<unsigned char> junk(s.recv_elems * es, 0xA5);
      io_.upload(recv_, junk.data(), junk.size());
      once();
      io_.synchronize();
      wrong = count_wrong(op, s, es);
      if (op == OpKind::all_to_all_v) {
        if (device_.is_cuda()) io_.download(rcounts.data(), drc, n * sizeof(int64_t));
        for (int p = 0; p < n; ++p) wrong += rcounts[p] != static_cast<int64_t>(s.count);
      }
    } else {
      fill_send(op, s, es);
    }
    for (int i = 0; i < o_.warmup; ++i) once();
    io_.synchronize();
    barrier(g_);
    // No barrier between iterations: each is timed between marks (host clock or CUDA events).
    io_.marks(o_.iters);
    auto t0 = std::chrono::steady_clock::now();
    io_.mark(0);
    for (int i = 0; i < o_.iters; ++i) {
      once();
      io_.mark(i + 1);
    }
    io_.synchronize();
    auto t1 = std::chrono::steady_clock::now();
    double us = std::chrono::duration<double, std::micro>(t1 - t0).count() / o_.iters;
    // The slowest rank's time; wrong elements summed over ranks (host memory, host backend).
    double t_all = us;
    all_reduce(&us, &t_all, 1, DType::f64, ReduceOp::max, g_, host_opts());
    // The spread of the iterations of that slowest rank (the lowest one if several), so that
    // min <= time <= max holds: clocks of different ranks (and GPUs) are not compared.
    const Spread own = spread_of(io_.durations_us());
    double slow_in = us == t_all ? r : n, slow = slow_in;
    all_reduce(&slow_in, &slow, 1, DType::f64, ReduceOp::min, g_, host_opts());
    double sp[3] = {-1, -1, -1}, sp_all[3];
    if (r == static_cast<int>(slow)) {
      sp[0] = own.median_us;
      sp[1] = own.min_us;
      sp[2] = own.max_us;
    }
    all_reduce(sp, sp_all, 3, DType::f64, ReduceOp::max, g_, host_opts());
    long long w_all = wrong;
    if (o_.check) all_reduce(&wrong, &w_all, 1, DType::i64, ReduceOp::sum, g_, host_opts());
    *row = make_row(op, n, s.bytes, s.bytes / es, t_all);
    row->wrong = o_.check ? w_all : -1;
    row->iters = o_.iters;
    row->spread = Spread{sp_all[0], sp_all[1], sp_all[2]};
    return true;
  }

  ~Runner() { free_buffers(); }

 private:
  OpOptions host_opts() const {
    OpOptions h;
    h.device = Device::cpu();
    return h;
  }

  void ensure(size_t send_bytes, size_t recv_bytes) {
    if (send_ && send_cap_ >= send_bytes && recv_cap_ >= recv_bytes) return;
    free_buffers();
    send_cap_ = std::max<size_t>(send_bytes, 64);
    recv_cap_ = std::max<size_t>(recv_bytes, 64);
    if (o_.mem == "sym") {
      send_sym_ = allocate(g_, send_cap_, device_);
      recv_sym_ = allocate(g_, recv_cap_, device_);
      send_ = send_sym_.ptr(g_.rank());
      recv_ = recv_sym_.ptr(g_.rank());
    } else {
      send_ = io_.alloc(send_cap_);
      recv_ = io_.alloc(recv_cap_);
    }
    if (device_.is_cuda() && !counts_dev_)
      counts_dev_ = io_.alloc(3 * g_.world_size() * sizeof(int64_t));
  }

  void free_buffers() {
    if (o_.mem == "plain") {
      if (send_) io_.release(send_);
      if (recv_) io_.release(recv_);
    }
    send_sym_ = SymmetricMemory();
    recv_sym_ = SymmetricMemory();
    send_ = recv_ = nullptr;
  }

  void fill_send(OpKind op, const Shape& s, size_t es) {
    const int n = g_.world_size(), r = g_.rank();
    std::vector<unsigned char> host(s.send_elems * es);
    if (op == OpKind::broadcast && r != o_.root) {
      // Non-root inputs are ignored; fill them with other values to catch mistakes.
      for (size_t i = 0; i < s.send_elems; ++i) encode(dt_, 100.0, &host[i * es]);
    } else {
      for (size_t i = 0; i < s.send_elems; ++i) encode(dt_, value(r, i, n), &host[i * es]);
    }
    io_.upload(send_, host.data(), host.size());
  }

  long long count_wrong(OpKind op, const Shape& s, size_t es) {
    const int n = g_.world_size(), r = g_.rank();
    std::vector<unsigned char> host(s.recv_elems * es);
    io_.download(host.data(), recv_, host.size());
    long long wrong = 0;
    for (size_t j = 0; j < s.recv_elems; ++j) {
      double want = 0;
      size_t blk = s.count ? j / s.count : 0, i = s.count ? j % s.count : 0;
      switch (op) {
        case OpKind::all_reduce:
          want = expected_reduce(j, n, redop_, dt_);
          break;
        case OpKind::reduce_scatter:
          want = expected_reduce(r * s.count + j, n, redop_, dt_);
          break;
        case OpKind::all_gather:
          want = stored(dt_, value(static_cast<int>(blk), i, n));
          break;
        case OpKind::all_to_all:
        case OpKind::all_to_all_v:
          want = stored(dt_, value(static_cast<int>(blk), r * s.count + i, n));
          break;
        case OpKind::broadcast:
          want = stored(dt_, value(o_.root, j, n));
          break;
        default:
          break;
      }
      wrong += decode(dt_, &host[j * es]) != want;
    }
    return wrong;
  }

  Group g_;
  const Options& o_;
  DType dt_;
  ReduceOp redop_;
  Algo algo_;
  Algo chosen_ = Algo::automatic;  // what the last all_reduce ran
  Device device_;
  MemIO& io_;
  SymmetricMemory send_sym_, recv_sym_;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  void* counts_dev_ = nullptr;
  size_t send_cap_ = 0, recv_cap_ = 0;
};

int main_impl(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)  // MoE has its own options (bench_moe.cpp)
    if (std::string(argv[i]) == "--op" && std::string(argv[i + 1]).rfind("moe_", 0) == 0)
      return moe_main(argc, argv);
  Options o = parse(argc, argv);
  std::vector<OpKind> ops;
  if (o.op == "all") {
    ops = all_ops();
  } else {
    OpKind one;
    if (!parse_op(o.op, &one)) usage_error("unknown --op '" + o.op + "'");
    ops.push_back(one);
  }
  DType dt = parse_dtype(o.dtype, "--dtype");
  ReduceOp redop = parse_reduce_op(o.redop, "--redop");
  Algo algo = parse_algo(o.algo, "--algo");
  if (!o.trace.empty()) setup_trace(o, ops.size());

  Group g = Group::from_env();
  if (o.backend != "auto") select_backend(o.backend);
  const bool gpu = o.backend == "cuda" || o.backend == "nccl" || o.backend == "nvshmem";
  // Several ranks may share one GPU (SYMMEM_ALLOW_SHARED_GPU=1): local_rank % device count.
  Device device =
      gpu ? Device::cuda(g.local_rank() % std::max(1, cuda_device_count())) : Device::cpu();
  std::unique_ptr<MemIO> io;
  if (gpu) {
    std::string why;
    io = make_cuda_io(device.index, &why);
    if (!io) {
      std::cerr << "symmem-bench: rank " << g.rank() << ": backend " << o.backend << ": " << why
                << "\n";
      return 3;
    }
  } else {
    io = make_host_io();
  }
  if (o.root < 0 || o.root >= g.world_size()) usage_error("--root out of range");
  std::string backend = resolve_backend(g, device);
  const bool lead = g.rank() == 0;
  std::ofstream json;
  if (lead && !o.json.empty()) {
    json.open(o.json, std::ios::out | std::ios::trunc);
    if (!json) {
      std::cerr << "symmem-bench: cannot open --json file '" << o.json << "'\n";
      return 2;
    }
  }
  if (lead) {
    std::printf(
        "# symmem-bench %s: backend %s, ranks %d, memory %s, iters %d, warmup %d, check %d\n",
        SYMMEM_VERSION_STRING, backend.c_str(), g.world_size(), o.mem.c_str(), o.iters, o.warmup,
        o.check);
  }
  // Each rank's CPUs, gathered to rank 0 with the library's own all_gather (host memory).
  {
    constexpr size_t kWords = 16;  // the first 1024 CPUs
    std::vector<uint64_t> mine(kWords, 0), all(kWords * static_cast<size_t>(g.world_size()));
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
      for (int c = 0; c < static_cast<int>(kWords * 64) && c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &set)) mine[c / 64] |= uint64_t{1} << (c % 64);
      }
    }
    OpOptions h;
    h.device = Device::cpu();
    all_gather(mine.data(), all.data(), kWords, DType::i64, g, h);
    if (lead) {
      std::vector<std::string> lists;
      for (int r = 0; r < g.world_size(); ++r) {
        lists.push_back(cpu_list(all.data() + r * kWords, kWords));
      }
      std::printf("%s", binding_lines(lists).c_str());
    }
  }
  Runner runner(g, o, dt, redop, algo, device, *io);
  long long total_wrong = 0;
  for (OpKind op : ops) {
    if (is_reduction(op) && !dtype_info(dt).reducible) {
      if (lead) {
        std::printf("#\n# op %s: skipped: dtype %s is moved, not reduced\n", op_name(op),
                    to_string(dt));
      }
      continue;
    }
    std::string algo_name = op == OpKind::all_reduce ? to_string(algo) : "-";
    std::string redop_name = is_reduction(op) ? to_string(redop) : "none";
    if (lead) {
      std::printf("#\n# op %s, algorithm %s, dtype %s, redop %s%s\n", op_name(op),
                  algo_name.c_str(), to_string(dt), redop_name.c_str(),
                  op == OpKind::broadcast ? (", root " + std::to_string(o.root)).c_str() : "");
      std::printf("%s", table_header().c_str());
      std::fflush(stdout);
    }
    for (double size = static_cast<double>(o.min_bytes);
         size <= static_cast<double>(o.max_bytes) * 1.0000001; size *= o.factor) {
      Row row;
      if (!runner.run(op, static_cast<size_t>(size), &row)) continue;
      row.backend = backend;
      row.algo = algo_name;
      if (op == OpKind::all_reduce) row.chosen = to_string(runner.chosen());
      row.dtype = to_string(dt);
      row.redop = redop_name;
      if (row.wrong > 0) total_wrong += row.wrong;
      if (lead) {
        std::printf("%s", table_row(row).c_str());
        std::fflush(stdout);
        if (json.is_open()) json << json_row(row) << std::flush;  // one object per line
      }
    }
  }
  if (lead) {
    std::printf("#\n# %s: %lld wrong element(s)\n", total_wrong ? "FAILED" : "OK", total_wrong);
  }
  return total_wrong ? 1 : 0;
}

}  // namespace
}  // namespace symmem::bench

int main(int argc, char** argv) {
  try {
    return symmem::bench::main_impl(argc, argv);
  } catch (const symmem::Error& e) {
    std::cerr << "symmem-bench: " << e.what() << " [" << symmem::to_string(e.code()) << "]\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "symmem-bench: " << e.what() << "\n";
    return 1;
  }
}
