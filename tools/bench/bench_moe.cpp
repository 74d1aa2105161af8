// symmem-bench --op moe_dispatch|moe_combine: MoE dispatch and combine (symmem/moe.hpp), timed
// and verified against a reference that every rank computes from the seeded inputs of all ranks.
//
//   symmem-run -n 4 -- symmem-bench --op moe_dispatch --tokens 128 --hidden 7168 --topk 8
//       --experts 256 [--fp8] [--mode ll|normal] [--routing random|zipf] [--seed S]
//
// Tokens are small integers (exact in bf16 and fp8 e4m3), the experts scale their rows by a small
// integer, so dispatch and combine have one exact answer each. dispatch times moe_layout plus
// moe_dispatch (the layout exchange is part of a normal-mode dispatch); combine times
// moe_combine. GB/s: the bytes that cross between ranks (rows and fp8 scales that a rank sends
// to another, summed over the ranks) over the slowest rank's median time.

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
               "                    [--seed S] [-n ITERS] [-w WARMUP]\n"
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
      std::string b = val();
      if (b != "host" && b != "auto") moe_usage("MoE runs on the host backend today (docs/moe.md)");
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
  MoeOptions mo;
  mo.device = Device::cpu();
  if (a.ll) {
    mo.mode = MoeMode::low_latency;
    mo.max_tokens = T;
  }
  MoeLayout layout = moe_layout(mine.data(), DType::i64, T, a.topk, experts, g, mo);
  const size_t rows = layout.recv_rows();
  std::vector<uint8_t> recv(rows * H * es);
  std::vector<float> recv_scales(rows * S);
  OpOptions oo;
  oo.device = Device::cpu();
  moe_dispatch(layout, x.data(), xt, H, a.fp8 ? scales.data() : nullptr, recv.data(),
               a.fp8 ? recv_scales.data() : nullptr, oo);
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
  std::vector<float> weights(T * K);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = 0.125f * static_cast<float>(1 + i % 4);
  std::vector<uint16_t> out(T * H);
  moe_combine(layout, y.data(), DType::bf16, H, weights.data(), out.data(), oo);
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
  // Timing.
  std::vector<double> times;
  for (int it = 0; it < a.warmup + a.iters; ++it) {
    barrier(g);
    double t0 = now_us();
    if (a.op == "moe_dispatch") {
      MoeLayout l = moe_layout(mine.data(), DType::i64, T, a.topk, experts, g, mo);
      moe_dispatch(l, x.data(), xt, H, a.fp8 ? scales.data() : nullptr, recv.data(),
                   a.fp8 ? recv_scales.data() : nullptr, oo);
    } else {
      moe_combine(layout, y.data(), DType::bf16, H, weights.data(), out.data(), oo);
    }
    if (it >= a.warmup) times.push_back(now_us() - t0);
  }
  std::sort(times.begin(), times.end());
  double med = times[times.size() / 2];
  // The slowest rank's median, the total crossing bytes, the wrong elements.
  std::vector<double> stats{med, static_cast<double>(crossing), static_cast<double>(wrong)};
  std::vector<double> all(3 * static_cast<size_t>(world));
  OpOptions h;
  h.device = Device::cpu();
  all_gather(stats.data(), all.data(), 3, DType::f64, g, h);
  if (rank == 0) {
    double slow = 0, bytes = 0, bad = 0;
    for (int r = 0; r < world; ++r) {
      slow = std::max(slow, all[3 * static_cast<size_t>(r)]);
      bytes += all[3 * static_cast<size_t>(r) + 1];
      bad += all[3 * static_cast<size_t>(r) + 2];
    }
    std::printf("# symmem-bench %s: backend %s, ranks %d, mode %s, dtype %s, routing %s\n",
                a.op.c_str(), "host", world, a.ll ? "low_latency" : "normal",
                a.fp8 ? "f8e4m3+scales" : "bf16", a.routing.c_str());
    std::printf("%8s %7s %5s %8s %12s %12s %12s %8s\n", "tokens", "hidden", "topk", "experts",
                "med(us)", "bytes", "GB/s", "#wrong");
    std::printf("%8zu %7zu %5d %8d %12.1f %12.0f %12.3f %8.0f\n", T, H, a.topk, experts, slow,
                bytes, slow > 0 ? bytes / (slow * 1e3) : 0.0, bad);
    std::printf("# %s\n", bad ? "FAILED" : "OK");
    return bad ? 1 : 0;
  }
  return 0;
}

}  // namespace symmem::bench
