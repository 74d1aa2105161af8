// symmem-bench --op moe_dispatch|moe_combine: MoE dispatch and combine (symmem/moe.hpp), timed
// and verified against a reference that every rank computes from the seeded inputs of all ranks.
//
//   symmem-run -n 4 -- symmem-bench --op moe_dispatch --tokens 128 --hidden 7168 --topk 8
//       --experts 256 [--fp8] [--mode ll|normal] [--routing random|zipf] [--seed S]
//       [--backend host|cuda|nccl|nvshmem] [--symmetric]
//
// Tokens are small integers (exact in bf16 and fp8 e4m3), the experts scale their rows by a small
// integer, so dispatch and combine have one exact answer each. dispatch times moe_layout plus
// moe_dispatch (the layout exchange is part of a normal-mode dispatch; column med(us)) and
// moe_dispatch alone with the layout kept (column xfer(us): the data movement); combine times
// moe_combine (both columns). GB/s: the bytes that cross between ranks (rows and fp8 scales that
// a rank sends to another, summed over the ranks) over the slowest rank's median xfer time.
// With a GPU backend every buffer (topk_idx too) is device memory, the ops run on the default
// stream and a time is the wall time of the call up to the device's completion (the results are
// read back and checked the same way). --mode ll on a GPU times xfer(us) and combine on a layout
// routed on the device (MoeOptions::device_layout), checked against the host-routed one.
// --symmetric puts x, its scales and y in symmetric memory, from which dispatch and combine then
// read directly (NOTE [moe pull dispatch] in src/core/moe.cpp).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "bench_format.hpp"
#include "bench_mem.hpp"
#include "symmem/symmem.hpp"

namespace symmem::bench {

int moe_main(int argc, char** argv);

namespace {

struct MoeArgs {
  std::string op = "moe_dispatch";
  size_t tokens = 128, hidden = 7168;
  int topk = 8, experts = 0;  // 0: 8 per rank
  bool fp8 = false;
  bool ll = false;
  bool symmetric = false;  // x, its scales and y in symmetric memory: the pull (docs/moe.md)
  std::string backend = "host";
  std::string routing = "random";
  unsigned seed = 1;
  int iters = 10, warmup = 2;
};

[[noreturn]] void moe_usage(const std::string& why) {
  std::cerr << "symmem-bench: " << why
            << "\nusage: symmem-bench --op moe_dispatch|moe_combine [--tokens T] [--hidden H] "
               "[--topk K]\n"
               "                    [--experts E] [--fp8] [--mode normal|ll] "
               "[--routing random|zipf]\n"
               "                    [--seed S] [-n ITERS] [-w WARMUP] "
               "[--backend host|cuda|nccl|nvshmem] [--symmetric]\n"
               "--symmetric: x, its scales and y in symmetric memory (the expert ranks and the\n"
               "token ranks then read them from the peers directly).\n"
               "Defaults: --tokens 128 --hidden 7168 --topk 8 --experts 8 x ranks --mode normal "
               "-n 10 -w 2.\n";
  std::exit(2);
}

MoeArgs parse_moe(int argc, char** argv) {
  MoeArgs a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) moe_usage("missing value after " + k);
      return argv[++i];
    };
    if (k == "--help" || k == "-h") moe_usage("MoE dispatch and combine, timed and verified");
    if (k == "--op")
      a.op = val();
    else if (k == "--tokens")
      a.tokens = std::stoul(val());
    else if (k == "--hidden")
      a.hidden = std::stoul(val());
    else if (k == "--topk")
      a.topk = std::stoi(val());
    else if (k == "--experts")
      a.experts = std::stoi(val());
    else if (k == "--fp8")
      a.fp8 = true;
    else if (k == "--symmetric")
      a.symmetric = true;
    else if (k == "--mode") {
      std::string m = val();
      if (m != "ll" && m != "low_latency" && m != "normal") moe_usage("unknown --mode " + m);
      a.ll = m != "normal";
    } else if (k == "--routing") {
      a.routing = val();
      if (a.routing != "random" && a.routing != "zipf") moe_usage("unknown --routing");
    } else if (k == "--seed")
      a.seed = static_cast<unsigned>(std::stoul(val()));
    else if (k == "-n")
      a.iters = std::stoi(val());
    else if (k == "-w")
      a.warmup = std::stoi(val());
    else if (k == "--backend") {
      a.backend = val();
      if (a.backend == "auto") a.backend = "host";
      if (a.backend != "host" && a.backend != "cuda" && a.backend != "nccl" &&
          a.backend != "nvshmem")
        moe_usage("unknown --backend " + a.backend);
    } else {
      moe_usage("unknown option " + k + " for MoE");
    }
  }
  if (a.op != "moe_dispatch" && a.op != "moe_combine") moe_usage("unknown --op " + a.op);
  if (a.iters < 1 || a.topk < 1) moe_usage("-n and --topk must be >= 1");
  return a;
}

// Rank r's top-k expert ids: distinct experts, uniform or zipf-skewed.
std::vector<int64_t> routing_of(const MoeArgs& a, int r, int experts) {
  std::mt19937_64 rng(a.seed * 7919u + static_cast<unsigned>(r));
  std::vector<double> w(static_cast<size_t>(experts), 1.0);
  if (a.routing == "zipf")
    for (int e = 0; e < experts; ++e) w[static_cast<size_t>(e)] = 1.0 / std::pow(e + 1, 1.2);
  std::vector<int64_t> idx(a.tokens * static_cast<size_t>(a.topk));
  for (size_t t = 0; t < a.tokens; ++t) {
    std::vector<double> p = w;
    for (int j = 0; j < a.topk; ++j) {
      std::discrete_distribution<int> d(p.begin(), p.end());
      int e = d(rng);
      p[static_cast<size_t>(e)] = 0;  // distinct
      idx[t * static_cast<size_t>(a.topk) + static_cast<size_t>(j)] = e;
    }
  }
  return idx;
}

// Element h of rank r's token t, as a small integer (exact in bf16 and e4m3).
int token_value(int r, size_t t, size_t h) {
  return static_cast<int>((t * 31 + h * 7 + static_cast<size_t>(r) * 13) % 15) - 7;
}

// One element of dtype t to and from f32 (the library's conversions).
float to_f32(DType t, const void* p) {
  float f;
  convert_to_f32(t, p, &f, 1);
  return f;
}
uint16_t bf16(float f) {
  uint16_t b;
  convert_from_f32(DType::bf16, &f, &b, 1);
  return b;
}

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int moe_main(int argc, char** argv) {
  MoeArgs a = parse_moe(argc, argv);
  Group g = Group::from_env();
  const int world = g.world_size(), rank = g.rank();
  const int experts = a.experts ? a.experts : 8 * world;
  if (experts % world) moe_usage("--experts must be a multiple of the number of ranks");
  if (a.topk > experts) moe_usage("--topk larger than --experts");
  const int local = experts / world;
  const size_t T = a.tokens, H = a.hidden, K = static_cast<size_t>(a.topk);
  const DType xt = a.fp8 ? DType::f8e4m3 : DType::bf16;
  if (a.fp8 && H % 128) moe_usage("--fp8 needs --hidden a multiple of 128");
  const size_t es = dtype_size(xt), S = a.fp8 ? H / 128 : 0;

  // Where the buffers live.
  const bool gpu = a.backend != "host";
  if (gpu) select_backend(a.backend);
  const Device device =
      gpu ? Device::cuda(g.local_rank() % std::max(1, cuda_device_count())) : Device::cpu();
  std::unique_ptr<MemIO> io;
  if (gpu) {
    std::string why;
    io = make_cuda_io(device.index, &why);
    if (!io) {
      std::cerr << "symmem-bench: rank " << rank << ": backend " << a.backend << ": " << why
                << "\n";
      return 3;
    }
  } else {
    io = make_host_io();
  }
  struct Buf {  // `bytes` of the bench's memory kind
    MemIO* io;
    void* p;
    Buf(MemIO* m, size_t bytes) : io(m), p(m->alloc(bytes)) {}
    ~Buf() { io->release(p); }
    Buf(const Buf&) = delete;
    Buf& operator=(const Buf&) = delete;
  };

  std::vector<std::vector<int64_t>> idx(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) idx[static_cast<size_t>(r)] = routing_of(a, r, experts);
  const auto& mine = idx[static_cast<size_t>(rank)];
  std::vector<uint8_t> x(T * H * es);
  std::vector<float> scales(T * S, 1.0f);
  for (size_t t = 0; t < T; ++t)
    for (size_t h = 0; h < H; ++h) {
      float v = static_cast<float>(token_value(rank, t, h));
      convert_from_f32(xt, &v, &x[(t * H + h) * es], 1);
    }
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<float>(rank + 1 + i % 3);
  std::vector<float> weights(T * K);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = 0.125f * static_cast<float>(1 + i % 4);
  Buf d_idx(io.get(), mine.size() * 8), d_x(io.get(), x.size()), d_sc(io.get(), scales.size() * 4),
      d_w(io.get(), weights.size() * 4);
  // --symmetric: x and its scales in symmetric memory (every rank has T tokens: one size).
  SymmetricMemory x_sym, sc_sym, y_sym;
  void* x_p = d_x.p;
  void* sc_p = d_sc.p;
  if (a.symmetric) {
    x_sym = allocate(g, std::max<size_t>(x.size(), 1), device);
    sc_sym = allocate(g, std::max<size_t>(scales.size() * 4, 1), device);
    x_p = x_sym.ptr(rank);
    sc_p = sc_sym.ptr(rank);
  }
  if (!mine.empty()) io->upload(d_idx.p, mine.data(), mine.size() * 8);
  if (!x.empty()) io->upload(x_p, x.data(), x.size());
  if (!scales.empty()) io->upload(sc_p, scales.data(), scales.size() * 4);
  if (!weights.empty()) io->upload(d_w.p, weights.data(), weights.size() * 4);
  auto* x_scales = a.fp8 ? static_cast<float*>(sc_p) : nullptr;

  MoeOptions mo;
  mo.device = device;
  if (a.ll) {
    mo.mode = MoeMode::low_latency;
    mo.max_tokens = T;
  }
  MoeLayout layout = moe_layout(d_idx.p, DType::i64, T, a.topk, experts, g, mo);
  const size_t rows = layout.recv_rows();
  Buf d_recv(io.get(), rows * H * es), d_rsc(io.get(), rows * S * 4), d_y(io.get(), rows * H * 2),
      d_out(io.get(), T * H * 2);
  auto* recv_scales_p = a.fp8 ? static_cast<float*>(d_rsc.p) : nullptr;
  OpOptions oo;
  oo.device = device;
  OpOptions cpu;
  cpu.device = Device::cpu();
  void* y_p = d_y.p;
  if (a.symmetric) {  // y has recv_rows rows, which differ by rank: the most any rank has
    const auto mine_rows = static_cast<int64_t>(rows);
    int64_t most = 0;
    all_reduce(&mine_rows, &most, 1, DType::i64, ReduceOp::max, g, cpu);
    y_sym = allocate(g, std::max<size_t>(static_cast<size_t>(most) * H * 2, 1), device);
    y_p = y_sym.ptr(rank);
  }
  moe_dispatch(layout, x_p, xt, H, x_scales, d_recv.p, recv_scales_p, oo);
  io->synchronize();
  std::vector<uint8_t> recv(rows * H * es);
  std::vector<float> recv_scales(rows * S);
  if (!recv.empty()) io->download(recv.data(), d_recv.p, recv.size());
  if (!recv_scales.empty()) io->download(recv_scales.data(), d_rsc.p, recv_scales.size() * 4);
  // Check dispatch: every written row is its source token (and scales).
  long long wrong = 0;
  const auto& src = layout.row_source();
  for (size_t i = 0; i < rows; ++i) {
    int64_t s = src[3 * i], t = src[3 * i + 1];
    if (s < 0) continue;
    for (size_t h = 0; h < H; ++h) {
      float want = static_cast<float>(token_value(static_cast<int>(s), static_cast<size_t>(t), h));
      float got = to_f32(xt, &recv[(i * H + h) * es]);
      wrong += got != want;
    }
    for (size_t c = 0; c < S; ++c)
      wrong += recv_scales[i * S + c] !=
               static_cast<float>(s + 1 + (static_cast<size_t>(t) * S + c) % 3);
  }
  // Experts: y = (e % 3 + 1) * x in bf16 (the fp8 rows dequantised without their scales).
  std::vector<uint16_t> y(rows * H);
  for (int e = 0; e < local; ++e) {
    const size_t first = layout.expert_offset(e);
    const auto n = static_cast<size_t>(layout.expert_counts()[static_cast<size_t>(e)]);
    const float f = static_cast<float>((rank * local + e) % 3 + 1);
    for (size_t i = first; i < first + n; ++i)
      for (size_t h = 0; h < H; ++h) {
        float v = to_f32(xt, &recv[(i * H + h) * es]);
        y[i * H + h] = bf16(f * v);
      }
  }
  if (!y.empty()) io->upload(y_p, y.data(), y.size() * 2);
  moe_combine(layout, y_p, DType::bf16, H, static_cast<float*>(d_w.p), d_out.p, oo);
  io->synchronize();
  std::vector<uint16_t> out(T * H);
  if (!out.empty()) io->download(out.data(), d_out.p, out.size() * 2);
  for (size_t t = 0; t < T; ++t)
    for (size_t h = 0; h < H; ++h) {
      float acc = 0;
      for (size_t j = 0; j < K; ++j) {
        int64_t e = mine[t * K + j];
        float v = static_cast<float>(token_value(rank, t, h));
        uint16_t yb = bf16(static_cast<float>(e % 3 + 1) * v);
        float yv = to_f32(DType::bf16, &yb);
        float prod = weights[t * K + j] * yv;
        acc = acc + prod;
      }
      wrong += out[t * H + h] != bf16(acc);
    }
  // Bytes that cross between ranks.
  long long crossing = 0;
  if (a.op == "moe_dispatch") {
    for (int r = 0; r < world; ++r) {
      if (r == rank) continue;
      for (size_t t = 0; t < T; ++t) {
        bool to_r = false;
        for (size_t j = 0; j < K; ++j) to_r |= mine[t * K + j] / local == r;
        crossing += to_r ? static_cast<long long>(H * es + S * 4) : 0;
      }
    }
  } else {
    for (size_t i = 0; i < rows; ++i)
      if (src[3 * i] >= 0 && src[3 * i] != rank) crossing += static_cast<long long>(H * 2);
  }
  // low_latency on a GPU: the data movement is timed on a layout routed on the device (no host
  // synchronisation; MoeOptions::device_layout), whose rows and sums must equal the ones above.
  MoeLayout moved = layout;
  if (gpu && a.ll) {
    MoeOptions dmo = mo;
    dmo.device_layout = true;
    moved = moe_layout(d_idx.p, DType::i64, T, a.topk, experts, g, dmo);
    moe_dispatch(moved, x_p, xt, H, x_scales, d_recv.p, recv_scales_p, oo);
    moe_combine(moved, y_p, DType::bf16, H, static_cast<float*>(d_w.p), d_out.p, oo);
    io->synchronize();
    std::vector<uint8_t> recv_d(rows * H * es);
    std::vector<float> scales_d(rows * S);
    std::vector<uint16_t> out_d(T * H);
    if (!recv_d.empty()) io->download(recv_d.data(), d_recv.p, recv_d.size());
    if (!scales_d.empty()) io->download(scales_d.data(), d_rsc.p, scales_d.size() * 4);
    if (!out_d.empty()) io->download(out_d.data(), d_out.p, out_d.size() * 2);
    for (size_t i = 0; i < rows; ++i) {  // the written rows (the others were never written)
      if (src[3 * i] < 0) continue;
      wrong += std::memcmp(&recv_d[i * H * es], &recv[i * H * es], H * es) != 0;
      if (S) wrong += std::memcmp(&scales_d[i * S], &recv_scales[i * S], S * 4) != 0;
    }
    wrong += out_d != out;
  }
  // Timing: the whole call (dispatch: layout + dispatch), then the data movement alone.
  auto timed = [&](bool with_layout) {
    std::vector<double> times;
    for (int it = 0; it < a.warmup + a.iters; ++it) {
      barrier(g, cpu);
      double t0 = now_us();
      if (a.op == "moe_dispatch") {
        if (with_layout) {
          MoeLayout l = moe_layout(d_idx.p, DType::i64, T, a.topk, experts, g, mo);
          moe_dispatch(l, x_p, xt, H, x_scales, d_recv.p, recv_scales_p, oo);
        } else {
          moe_dispatch(moved, x_p, xt, H, x_scales, d_recv.p, recv_scales_p, oo);
        }
      } else {
        moe_combine(moved, y_p, DType::bf16, H, static_cast<float*>(d_w.p), d_out.p, oo);
      }
      io->synchronize();
      if (it >= a.warmup) times.push_back(now_us() - t0);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  const double med = timed(true);
  const double xfer = a.op == "moe_dispatch" ? timed(false) : med;
  // The results of the timed calls are checked again (the same inputs, the same answers).
  std::vector<uint16_t> out2(T * H);
  if (!out2.empty()) io->download(out2.data(), d_out.p, out2.size() * 2);
  if (a.op == "moe_combine" && out2 != out) wrong += 1;
  std::vector<uint8_t> recv2(rows * H * es);
  if (!recv2.empty()) io->download(recv2.data(), d_recv.p, recv2.size());
  if (a.op == "moe_dispatch" && recv2 != recv) wrong += 1;
  // The slowest rank's medians, the total crossing bytes, the wrong elements.
  std::vector<double> stats{med, xfer, static_cast<double>(crossing), static_cast<double>(wrong)};
  std::vector<double> all(4 * static_cast<size_t>(world));
  all_gather(stats.data(), all.data(), 4, DType::f64, g, cpu);
  if (rank == 0) {
    double slow = 0, slow_xfer = 0, bytes = 0, bad = 0;
    for (int r = 0; r < world; ++r) {
      const auto* v = &all[4 * static_cast<size_t>(r)];
      slow = std::max(slow, v[0]);
      slow_xfer = std::max(slow_xfer, v[1]);
      bytes += v[2];
      bad += v[3];
    }
    std::printf("# symmem-bench %s: backend %s, ranks %d, mode %s, dtype %s, routing %s%s\n",
                a.op.c_str(), resolve_backend(g, device).c_str(), world,
                a.ll ? "low_latency" : "normal", a.fp8 ? "f8e4m3+scales" : "bf16",
                a.routing.c_str(), a.symmetric ? ", x and y symmetric" : "");
    std::printf("%8s %7s %5s %8s %12s %12s %12s %12s %8s\n", "tokens", "hidden", "topk", "experts",
                "med(us)", "xfer(us)", "bytes", "GB/s", "#wrong");
    std::printf("%8zu %7zu %5d %8d %12.1f %12.1f %12.0f %12.3f %8.0f\n", T, H, a.topk, experts,
                slow, slow_xfer, bytes, slow_xfer > 0 ? bytes / (slow_xfer * 1e3) : 0.0, bad);
    std::printf("# %s\n", bad ? "FAILED" : "OK");
    return bad ? 1 : 0;
  }
  return 0;
}

}  // namespace symmem::bench
