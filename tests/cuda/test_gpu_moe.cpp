// MoE dispatch and combine on GPU memory (NOTE [moe on the GPU] in src/core/moe.cpp), run by
// every rank under symmem-run with SYMMEM_BACKEND=cuda (ctest label gpu; 2 and 4 ranks share one
// GPU with SYMMEM_ALLOW_SHARED_GPU=1, under MPS for speed). Without a GPU every rank exits 77.
//
// Every case runs the same inputs through the host implementation (CPU buffers, the reference of
// the host tests) and through the GPU path, and compares the layouts, recv_x, the fp8 scales and
// combine's output byte for byte. Routing: uniform, zipf-skewed, all top-k experts on one rank,
// slots dropped (-1), a rank with no tokens; topk_idx int32 and int64, in device or host memory;
// bf16 and fp8 tokens, f32/f16/bf16 expert outputs; normal and low_latency layouts; a layout
// rebuilt with moe_layout_restore; the same calls replayed from a CUDA graph; low_latency layouts
// routed on the device (MoeOptions::device_layout), replayed from a graph with new routing.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_main.hpp"
#include "gpu_test_util.hpp"
#include "symmem/symmem.hpp"
#include "test_util.hpp"

namespace symmem::test {
namespace {

Group g_group;
int g_device = 0;
constexpr Millis kTimeout{60000};

// Ordinary device memory (cudaMalloc) filled with 0xEE, like the host buffers of the reference.
class DevBuf {
 public:
  explicit DevBuf(size_t bytes) : bytes_(bytes) {
    cudaMalloc(&p_, std::max<size_t>(bytes, 16));
    cudaMemset(p_, 0xEE, std::max<size_t>(bytes, 16));
    cudaDeviceSynchronize();  // the memset runs on the legacy stream (test_gpu_ops.cpp says why)
  }
  ~DevBuf() { cudaFree(p_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(p_);
  }
  void upload(const void* h) const {
    if (bytes_ > 0) cudaMemcpy(p_, h, bytes_, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
  }
  std::vector<char> download() const {
    std::vector<char> h(bytes_);
    if (bytes_ > 0) cudaMemcpy(h.data(), p_, bytes_, cudaMemcpyDeviceToHost);
    return h;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// Full-mantissa values in [-2, 2), never NaN.
float value(uint32_t a, uint32_t b) {
  const uint32_t h = mix(a * 2654435761u ^ mix(b * 97u + 12345u));
  return (static_cast<float>(h >> 8) / 16777216.0f) * 4.0f - 2.0f;
}

std::vector<char> floats_as(DType t, const std::vector<float>& f) {
  std::vector<char> out(f.size() * dtype_size(t));
  if (t == DType::f32) {
    std::memcpy(out.data(), f.data(), out.size());
  } else if (!f.empty()) {
    convert_from_f32(t, f.data(), out.data(), f.size());
  }
  return out;
}

enum class Routing { random, zipf, one_rank };

struct Case {
  std::string name;
  size_t tokens = 64;  // per rank
  size_t hidden = 256;
  int topk = 4;
  int experts_per_rank = 4;
  DType x_dtype = DType::bf16;
  DType y_dtype = DType::bf16;
  DType idx_dtype = DType::i64;
  Routing routing = Routing::random;
  double drop = 0.0;         // probability of a -1 slot
  int empty_rank = -1;       // this rank has no tokens
  bool idx_on_host = false;  // topk_idx in host memory (the layout still for the GPU)
  bool low_latency = false;
  uint32_t seed = 1;
  // Where x (and x_scales) and y live: ordinary device memory, or symmetric memory of the group
  // (NOTE [moe pull dispatch]: dispatch then reads the rows from the sources' x, combine from
  // the expert ranks' y) on every rank, on rank 0 only, or at an offset that differs by rank
  // (both of those: no pull, agreed by all ranks).
  enum class XMem { device, symmetric, symmetric_rank0, symmetric_skewed } x_mem = XMem::device;
};

size_t tokens_of(const Case& c, int rank) {
  return rank == c.empty_rank ? 0 : c.tokens + static_cast<size_t>(rank) * 3;
}

// Rank r's topk_idx as int64.
std::vector<int64_t> routing_of(const Case& c, int rank, int world) {
  const int experts = c.experts_per_rank * world;
  const size_t T = tokens_of(c, rank), K = static_cast<size_t>(c.topk);
  std::mt19937_64 rng(c.seed * 7919u + static_cast<unsigned>(rank));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> w(static_cast<size_t>(experts), 1.0);
  if (c.routing == Routing::zipf)
    for (int e = 0; e < experts; ++e) w[static_cast<size_t>(e)] = 1.0 / std::pow(e + 1, 1.2);
  std::vector<int64_t> idx(T * K);
  for (size_t t = 0; t < T; ++t) {
    if (c.routing == Routing::one_rank) {  // every slot on rank t % world (distinct experts)
      const int r = static_cast<int>((t + static_cast<size_t>(rank)) % static_cast<size_t>(world));
      for (size_t j = 0; j < K; ++j)
        idx[t * K + j] = r * c.experts_per_rank +
                         static_cast<int64_t>((j + t) % static_cast<size_t>(c.experts_per_rank));
    } else {
      std::vector<double> p = w;
      for (size_t j = 0; j < K; ++j) {
        std::discrete_distribution<int> d(p.begin(), p.end());
        const int e = d(rng);
        p[static_cast<size_t>(e)] = 0;
        idx[t * K + j] = e;
      }
    }
    for (size_t j = 0; j < K; ++j)
      if (c.drop > 0 && u(rng) < c.drop) idx[t * K + j] = -1;
  }
  return idx;
}

std::vector<char> idx_bytes(const std::vector<int64_t>& idx, DType t) {
  if (t == DType::i64) {
    std::vector<char> out(idx.size() * 8);
    if (!idx.empty()) std::memcpy(out.data(), idx.data(), out.size());
    return out;
  }
  std::vector<int32_t> v(idx.begin(), idx.end());
  std::vector<char> out(v.size() * 4);
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::string first_diff(const std::vector<char>& got, const std::vector<char>& want) {
  if (got.size() != want.size())
    return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i]) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), "byte %zu: got 0x%02x, want 0x%02x", i,
                    static_cast<unsigned>(static_cast<unsigned char>(got[i])),
                    static_cast<unsigned>(static_cast<unsigned char>(want[i])));
      return buf;
    }
  return "equal";
}

#define EXPECT_BYTES_EQ(got, want, what) \
  EXPECT_TRUE((got) == (want)) << (what) << ": " << first_diff((got), (want))

void run_case(const Case& c) {
  SCOPED_TRACE(c.name);
  const Group& g = g_group;
  const int world = g.world_size(), rank = g.rank();
  const int experts = c.experts_per_rank * world;
  const size_t T = tokens_of(c, rank), H = c.hidden, K = static_cast<size_t>(c.topk);
  const bool fp8 = c.x_dtype == DType::f8e4m3 || c.x_dtype == DType::f8e5m2;
  const size_t S = fp8 ? H / 128 : 0;
  size_t max_tokens = 0;
  for (int r = 0; r < world; ++r) max_tokens = std::max(max_tokens, tokens_of(c, r));
  max_tokens = std::max<size_t>(max_tokens, 1);  // low_latency needs a capacity > 0 (1 rank,
                                                 // that rank without tokens)

  // Inputs.
  const std::vector<int64_t> idx64 = routing_of(c, rank, world);
  const std::vector<char> idx = idx_bytes(idx64, c.idx_dtype);
  std::vector<float> xf(T * H), scales(T * S), weights(T * K);
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = value(static_cast<uint32_t>(i), 100u + rank);
  for (size_t i = 0; i < scales.size(); ++i)
    scales[i] = value(static_cast<uint32_t>(i), 200u + rank);
  for (size_t i = 0; i < weights.size(); ++i)
    weights[i] = value(static_cast<uint32_t>(i), 300u + rank) / 2;
  const std::vector<char> x = floats_as(c.x_dtype, xf);

  // The host reference.
  MoeOptions ho;
  ho.device = Device::cpu();
  ho.timeout = kTimeout;
  if (c.low_latency) {
    ho.mode = MoeMode::low_latency;
    ho.max_tokens = max_tokens;
  }
  MoeLayout hl = moe_layout(idx.data(), c.idx_dtype, T, c.topk, experts, g, ho);
  const size_t rows = hl.recv_rows();
  const size_t xes = dtype_size(c.x_dtype), yes = dtype_size(c.y_dtype);
  std::vector<char> recv_h(rows * H * xes, static_cast<char>(0xEE));
  std::vector<char> recv_scales_h(rows * S * 4, static_cast<char>(0xEE));
  OpOptions hopt;
  hopt.device = Device::cpu();
  hopt.timeout = kTimeout;
  moe_dispatch(hl, x.data(), c.x_dtype, H, fp8 ? scales.data() : nullptr, recv_h.data(),
               fp8 ? reinterpret_cast<float*>(recv_scales_h.data()) : nullptr, hopt);
  std::vector<float> yf(rows * H);
  for (size_t i = 0; i < yf.size(); ++i) yf[i] = value(static_cast<uint32_t>(i), 400u + rank);
  const std::vector<char> y = floats_as(c.y_dtype, yf);
  std::vector<char> out_h(T * H * yes, static_cast<char>(0xEE));
  moe_combine(hl, y.data(), c.y_dtype, H, weights.data(), out_h.data(), hopt);

  // The GPU path.
  Stream s;
  MoeOptions go = ho;
  go.device = Device::cuda(g_device);
  go.stream = s.get();
  DevBuf d_idx(idx.size()), d_x(x.size()), d_scales(scales.size() * 4),
      d_weights(weights.size() * 4), d_recv(recv_h.size()), d_recv_scales(recv_scales_h.size()),
      d_y(y.size()), d_out(out_h.size());
  d_idx.upload(idx.data());
  d_x.upload(x.data());
  d_scales.upload(scales.data());
  d_weights.upload(weights.data());
  d_y.upload(y.data());
  // x, its scales and y in symmetric memory (Case::x_mem): collective allocations of the same
  // size on every rank, used at offset 256 (or 256 + 512 * rank: skewed).
  void* x_arg = d_x.get();
  float* scales_arg = d_scales.get<float>();
  void* y_arg = d_y.get();
  SymmetricMemory x_sym, scales_sym, y_sym;
  if (c.x_mem != Case::XMem::device) {
    const size_t slack = 256 + 512 * static_cast<size_t>(world);
    const Device dev = Device::cuda(g_device);
    x_sym = allocate(g, max_tokens * H * xes + slack, dev);
    scales_sym = allocate(g, max_tokens * std::max<size_t>(S, 1) * 4 + slack, dev);
    // y has recv_rows rows here, which differ by rank: room for the most any rank can get.
    y_sym = allocate(g, static_cast<size_t>(world) * max_tokens * K * H * yes + slack, dev);
    const bool here = c.x_mem != Case::XMem::symmetric_rank0 || rank == 0;
    const size_t at = 256 + (c.x_mem == Case::XMem::symmetric_skewed ? 512 * rank : 0);
    if (here) {
      x_arg = static_cast<char*>(x_sym.ptr(rank)) + at;
      scales_arg = reinterpret_cast<float*>(static_cast<char*>(scales_sym.ptr(rank)) + at);
      y_arg = static_cast<char*>(y_sym.ptr(rank)) + at;
      if (!x.empty()) CUDA_OK(cudaMemcpy(x_arg, x.data(), x.size(), cudaMemcpyHostToDevice));
      if (!scales.empty())
        CUDA_OK(cudaMemcpy(scales_arg, scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
      if (!y.empty()) CUDA_OK(cudaMemcpy(y_arg, y.data(), y.size(), cudaMemcpyHostToDevice));
    }
  }
  const void* idx_arg = c.idx_on_host ? static_cast<const void*>(idx.data()) : d_idx.get();
  MoeLayout gl = moe_layout(T > 0 ? idx_arg : nullptr, c.idx_dtype, T, c.topk, experts, g, go);
  ASSERT_EQ(gl.recv_rows(), rows);
  EXPECT_EQ(gl.expert_counts(), hl.expert_counts());
  EXPECT_EQ(gl.row_source(), hl.row_source());
  OpOptions gopt = static_cast<const OpOptions&>(go);
  auto dispatch = [&](const MoeLayout& l) {
    moe_dispatch(l, x_arg, c.x_dtype, H, fp8 ? scales_arg : nullptr, d_recv.get(),
                 fp8 ? d_recv_scales.get<float>() : nullptr, gopt);
  };
  auto combine = [&](const MoeLayout& l) {
    moe_combine(l, y_arg, c.y_dtype, H, d_weights.get<float>(), d_out.get(), gopt);
  };
  auto check = [&](const char* what) {
    CUDA_OK(cudaStreamSynchronize(s.get()));
    SCOPED_TRACE(what);
    EXPECT_BYTES_EQ(d_recv.download(), recv_h, "recv_x");
    if (fp8) {
      EXPECT_BYTES_EQ(d_recv_scales.download(), recv_scales_h, "recv_scales");
    }
    EXPECT_BYTES_EQ(d_out.download(), out_h, "out");
  };
  dispatch(gl);
  combine(gl);
  check("eager");
  // The same again: the layout's device arrays and the scratch are reused.
  CUDA_OK(cudaMemsetAsync(d_out.get(), 0x11, out_h.size(), s.get()));
  dispatch(gl);
  combine(gl);
  check("again");

  // A layout rebuilt from what moe_layout returned (the torch ops' path).
  const auto& src = hl.row_source();
  MoeLayout rl = moe_layout_restore(idx.data(), c.idx_dtype, T, c.topk, experts, src.data(),
                                    src.size() / 3, hl.expert_counts().data(), g, go);
  CUDA_OK(cudaMemsetAsync(d_out.get(), 0x22, out_h.size(), s.get()));
  combine(rl);
  check("restored");

  // Replayed from a CUDA graph (the scratch is large enough after the calls above).
  CUDA_OK(cudaMemsetAsync(d_out.get(), 0x33, out_h.size(), s.get()));
  CUDA_OK(cudaStreamSynchronize(s.get()));
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal));
  bool captured = true;
  try {
    dispatch(gl);
    combine(gl);
  } catch (const Error& e) {
    ADD_FAILURE() << "capture: " << e.what();
    captured = false;
  }
  CUDA_OK(cudaStreamEndCapture(s.get(), &graph));
  if (!captured) {
    cudaGraphDestroy(graph);
    return;
  }
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 2; ++i) CUDA_OK(cudaGraphLaunch(exec, s.get()));
  check("graph");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// The host reference of one routing: recv_x, recv_scales, expert counts and combine's out.
struct HostRun {
  std::vector<char> recv, recv_scales, out;
  std::vector<int64_t> counts;
};
HostRun host_run(const Case& c, const std::vector<char>& idx, size_t T, size_t max_tokens,
                 const std::vector<char>& x, const std::vector<float>& scales,
                 const std::vector<char>& y, const std::vector<float>& weights) {
  const Group& g = g_group;
  const int experts = c.experts_per_rank * g.world_size();
  const bool fp8 = c.x_dtype == DType::f8e4m3 || c.x_dtype == DType::f8e5m2;
  const size_t H = c.hidden, S = fp8 ? H / 128 : 0;
  MoeOptions ho;
  ho.device = Device::cpu();
  ho.timeout = kTimeout;
  ho.mode = MoeMode::low_latency;
  ho.max_tokens = max_tokens;
  MoeLayout hl = moe_layout(idx.data(), c.idx_dtype, T, c.topk, experts, g, ho);
  HostRun h;
  const size_t rows = hl.recv_rows();
  h.recv.assign(rows * H * dtype_size(c.x_dtype), static_cast<char>(0xEE));
  h.recv_scales.assign(rows * S * 4, static_cast<char>(0xEE));
  h.out.assign(T * H * dtype_size(c.y_dtype), static_cast<char>(0xEE));
  const OpOptions& o = ho;
  moe_dispatch(hl, x.data(), c.x_dtype, H, fp8 ? scales.data() : nullptr, h.recv.data(),
               fp8 ? reinterpret_cast<float*>(h.recv_scales.data()) : nullptr, o);
  moe_combine(hl, y.data(), c.y_dtype, H, weights.data(), h.out.data(), o);
  h.counts = hl.expert_counts();
  return h;
}

// A low_latency layout routed on the device (MoeOptions::device_layout): eager, then a CUDA
// graph of dispatch + combine replayed after new routing was written into topk_idx. recv_x is
// reset to 0xEE before each run, so the rows a routing does not write compare too.
void run_device_layout_case(const Case& c) {
  SCOPED_TRACE(c.name + " (device layout)");
  const Group& g = g_group;
  const int world = g.world_size(), rank = g.rank();
  const int experts = c.experts_per_rank * world;
  const size_t T = tokens_of(c, rank), H = c.hidden, K = static_cast<size_t>(c.topk);
  const bool fp8 = c.x_dtype == DType::f8e4m3 || c.x_dtype == DType::f8e5m2;
  const size_t S = fp8 ? H / 128 : 0;
  size_t max_tokens = 0;
  for (int r = 0; r < world; ++r) max_tokens = std::max(max_tokens, tokens_of(c, r));
  max_tokens = std::max<size_t>(max_tokens, 1);  // low_latency needs a capacity > 0 (1 rank,
                                                 // that rank without tokens)
  const size_t L = static_cast<size_t>(c.experts_per_rank), rows = L * world * max_tokens;
  std::vector<float> xf(T * H), scales(T * S), weights(T * K), yf(rows * H);
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = value(static_cast<uint32_t>(i), 500u + rank);
  for (size_t i = 0; i < scales.size(); ++i)
    scales[i] = value(static_cast<uint32_t>(i), 600u + rank);
  for (size_t i = 0; i < weights.size(); ++i)
    weights[i] = value(static_cast<uint32_t>(i), 700u + rank) / 2;
  for (size_t i = 0; i < yf.size(); ++i) yf[i] = value(static_cast<uint32_t>(i), 800u + rank);
  const std::vector<char> x = floats_as(c.x_dtype, xf), y = floats_as(c.y_dtype, yf);
  Case second = c;
  second.seed = c.seed + 1000;
  const std::vector<char> idx1 = idx_bytes(routing_of(c, rank, world), c.idx_dtype);
  const std::vector<char> idx2 = idx_bytes(routing_of(second, rank, world), c.idx_dtype);
  const HostRun h1 = host_run(c, idx1, T, max_tokens, x, scales, y, weights);
  const HostRun h2 = host_run(c, idx2, T, max_tokens, x, scales, y, weights);

  Stream s;
  MoeOptions go;
  go.device = Device::cuda(g_device);
  go.stream = s.get();
  go.timeout = kTimeout;
  go.mode = MoeMode::low_latency;
  go.max_tokens = max_tokens;
  go.device_layout = true;
  DevBuf d_idx(idx1.size()), d_x(x.size()), d_scales(scales.size() * 4),
      d_weights(weights.size() * 4), d_recv(h1.recv.size()), d_recv_scales(h1.recv_scales.size()),
      d_y(y.size()), d_out(h1.out.size());
  d_idx.upload(idx1.data());
  d_x.upload(x.data());
  d_scales.upload(scales.data());
  d_weights.upload(weights.data());
  d_y.upload(y.data());
  MoeLayout gl = moe_layout(d_idx.get(), c.idx_dtype, T, c.topk, experts, g, go);
  ASSERT_TRUE(gl.device_layout());
  ASSERT_EQ(gl.recv_rows(), rows);
  ASSERT_NE(gl.expert_counts_device(), nullptr);
  const OpOptions& gopt = go;
  auto reset = [&] {
    CUDA_OK(cudaMemsetAsync(d_recv.get(), 0xEE, h1.recv.size(), s.get()));
    if (fp8) CUDA_OK(cudaMemsetAsync(d_recv_scales.get(), 0xEE, h1.recv_scales.size(), s.get()));
    CUDA_OK(cudaMemsetAsync(d_out.get(), 0x11, h1.out.size(), s.get()));
  };
  auto both = [&] {
    moe_dispatch(gl, d_x.get(), c.x_dtype, H, fp8 ? d_scales.get<float>() : nullptr, d_recv.get(),
                 fp8 ? d_recv_scales.get<float>() : nullptr, gopt);
    moe_combine(gl, d_y.get(), c.y_dtype, H, d_weights.get<float>(), d_out.get(), gopt);
  };
  auto check = [&](const HostRun& h, const char* what) {
    CUDA_OK(cudaStreamSynchronize(s.get()));
    SCOPED_TRACE(what);
    EXPECT_BYTES_EQ(d_recv.download(), h.recv, "recv_x");
    if (fp8) {
      EXPECT_BYTES_EQ(d_recv_scales.download(), h.recv_scales, "recv_scales");
    }
    EXPECT_BYTES_EQ(d_out.download(), h.out, "out");
    std::vector<int64_t> counts(L);
    CUDA_OK(cudaMemcpy(counts.data(), gl.expert_counts_device(), L * 8, cudaMemcpyDeviceToHost));
    EXPECT_EQ(counts, h.counts);
  };
  reset();
  both();
  check(h1, "eager");
  // The host-side accessors of a device layout say where the counts are.
  EXPECT_THROW((void)gl.expert_counts(), Error);
  EXPECT_THROW((void)gl.row_source(), Error);

  // Captured once, replayed with the first routing, then with the second.
  CUDA_OK(cudaStreamSynchronize(s.get()));
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal));
  bool captured = true;
  try {
    both();
  } catch (const Error& e) {
    ADD_FAILURE() << "capture: " << e.what();
    captured = false;
  }
  CUDA_OK(cudaStreamEndCapture(s.get(), &graph));
  if (!captured) {
    cudaGraphDestroy(graph);
    return;
  }
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  reset();
  CUDA_OK(cudaGraphLaunch(exec, s.get()));
  check(h1, "graph, first routing");
  d_idx.upload(idx2.data());  // synchronises the device: the graph reads it at its next launch
  reset();
  CUDA_OK(cudaGraphLaunch(exec, s.get()));
  check(h2, "graph, second routing");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);

  // Two layouts over the same scratch, dispatching and combining back to back without waiting:
  // each call reuses the area of the one before the last (NOTE [moe direct dispatch] in
  // moe.cpp), so a rank running ahead must not overwrite what a peer still reads.
  DevBuf d_idx1(idx1.size()), d_recv2(h1.recv.size()), d_recv_scales2(h1.recv_scales.size()),
      d_out2(h1.out.size());
  d_idx1.upload(idx1.data());
  MoeLayout gl1 = moe_layout(d_idx1.get(), c.idx_dtype, T, c.topk, experts, g, go);
  for (int round = 0; round < 4; ++round) {
    moe_dispatch(gl, d_x.get(), c.x_dtype, H, fp8 ? d_scales.get<float>() : nullptr, d_recv.get(),
                 fp8 ? d_recv_scales.get<float>() : nullptr, gopt);
    moe_dispatch(gl1, d_x.get(), c.x_dtype, H, fp8 ? d_scales.get<float>() : nullptr, d_recv2.get(),
                 fp8 ? d_recv_scales2.get<float>() : nullptr, gopt);
    // Combines in a row too (each with the latest dispatch of its layout).
    moe_combine(gl, d_y.get(), c.y_dtype, H, d_weights.get<float>(), d_out.get(), gopt);
    moe_combine(gl1, d_y.get(), c.y_dtype, H, d_weights.get<float>(), d_out2.get(), gopt);
    moe_combine(gl, d_y.get(), c.y_dtype, H, d_weights.get<float>(), d_out.get(), gopt);
  }
  CUDA_OK(cudaStreamSynchronize(s.get()));
  {
    SCOPED_TRACE("back to back, two layouts");
    EXPECT_BYTES_EQ(d_out.download(), h2.out, "out of the second routing");
    EXPECT_BYTES_EQ(d_out2.download(), h1.out, "out of the first routing");
    // Rows a routing does not write keep what the earlier runs left: compare the written ones.
    auto written = [&](const HostRun& h, const std::vector<char>& got, const char* what) {
      const size_t row = h.recv.size() / rows;
      size_t bad = 0;
      for (size_t e = 0; e < L; ++e)
        for (int64_t i = 0; i < h.counts[e]; ++i) {
          const size_t at = (e * world * max_tokens + static_cast<size_t>(i)) * row;
          bad += std::memcmp(got.data() + at, h.recv.data() + at, row) != 0 ? 1 : 0;
        }
      EXPECT_EQ(bad, 0u) << what << ": rows that differ from the host's";
    };
    written(h2, d_recv.download(), "layout of the second routing");
    written(h1, d_recv2.download(), "layout of the first routing");
  }
}

TEST(CudaMoe, DeviceLayoutBitwiseEqualToHost) {
  std::vector<Case> cases;
  {
    Case c;
    c.name = "bf16, dropped slots, a rank without tokens";
    c.drop = 0.2;
    c.empty_rank = 1;
    c.seed = 11;
    cases.push_back(c);
  }
  {
    Case c;
    c.name = "fp8 with scales, zipf, int32 topk_idx, f32 out";
    c.x_dtype = DType::f8e4m3;
    c.routing = Routing::zipf;
    c.idx_dtype = DType::i32;
    c.y_dtype = DType::f32;
    c.seed = 12;
    cases.push_back(c);
  }
  {
    Case c;
    c.name = "all top-k on one rank, odd hidden, f16 out";
    c.routing = Routing::one_rank;
    c.hidden = 100;
    c.y_dtype = DType::f16;
    c.seed = 13;
    cases.push_back(c);
  }
  {
    Case c;
    c.name = "DeepEP decode: hidden 7168, top-8, 8 experts per rank, 128 tokens";
    c.tokens = 128;
    c.hidden = 7168;
    c.topk = 8;
    c.experts_per_rank = 8;
    c.seed = 14;
    cases.push_back(c);
  }
  {
    // The route kernel splits the tokens over its warps and walks each warp's run 32 entries at
    // a time: runs longer than one step, and experts split across steps and warps.
    Case c;
    c.name = "1500 tokens, top-6, 24 experts per rank, dropped slots";
    c.tokens = 1500;
    c.hidden = 64;
    c.topk = 6;
    c.experts_per_rank = 24;
    c.drop = 0.1;
    c.seed = 15;
    cases.push_back(c);
  }
  {
    // Counters for thousands of experts leave room for only a few warps in 48 KiB.
    Case c;
    c.name = "512 experts per rank, zipf, 100 tokens";
    c.tokens = 100;
    c.hidden = 32;
    c.topk = 8;
    c.experts_per_rank = 512;
    c.routing = Routing::zipf;
    c.seed = 16;
    cases.push_back(c);
  }
  for (const Case& c : cases) run_device_layout_case(c);
}

TEST(CudaMoe, BitwiseEqualToHost) {
  std::vector<Case> cases;
  {
    Case c;
    c.name = "random bf16";
    cases.push_back(c);
    c.name = "random bf16, int32 topk_idx on the host, f32 out";
    c.idx_dtype = DType::i32;
    c.idx_on_host = true;
    c.y_dtype = DType::f32;
    c.seed = 2;
    cases.push_back(c);
  }
  {
    Case c;
    c.name = "zipf, dropped slots, a rank without tokens, f16 out";
    c.routing = Routing::zipf;
    c.drop = 0.2;
    c.empty_rank = 1;
    c.y_dtype = DType::f16;
    c.seed = 3;
    cases.push_back(c);
  }
  {
    Case c;
    c.name = "all top-k on one rank, odd hidden";
    c.routing = Routing::one_rank;
    c.hidden = 100;  // rows of 200 bytes: no 16-byte vectors
    c.seed = 4;
    cases.push_back(c);
  }
  {
    Case c;
    c.name = "fp8 e4m3 with scales, dropped slots";
    c.x_dtype = DType::f8e4m3;
    c.hidden = 384;
    c.drop = 0.1;
    c.seed = 5;
    cases.push_back(c);
  }
  {
    Case c;
    c.name = "low_latency fp8, zipf, a rank without tokens";
    c.x_dtype = DType::f8e4m3;
    c.low_latency = true;
    c.routing = Routing::zipf;
    c.empty_rank = 0;
    c.seed = 6;
    cases.push_back(c);
  }
  {
    Case c;
    c.name = "DeepEP-like: hidden 7168, top-8, 8 experts per rank, 128 tokens";
    c.tokens = 128;
    c.hidden = 7168;
    c.topk = 8;
    c.experts_per_rank = 8;
    c.seed = 7;
    cases.push_back(c);
  }
  {
    // NOTE [moe pull dispatch]: x in symmetric memory, read by the expert ranks.
    Case c;
    c.name = "x and y in symmetric memory (pull), zipf, dropped slots, a rank without tokens";
    c.x_mem = Case::XMem::symmetric;
    c.routing = Routing::zipf;
    c.drop = 0.2;
    c.empty_rank = 1;
    c.seed = 8;
    cases.push_back(c);
    c.name = "fp8 x and scales, f32 y in symmetric memory (pull)";
    c.y_dtype = DType::f32;
    c.x_dtype = DType::f8e4m3;
    c.hidden = 384;
    c.empty_rank = -1;
    c.seed = 9;
    cases.push_back(c);
    c.name = "low_latency, x and y in symmetric memory (pull), odd hidden";
    c.x_dtype = DType::bf16;
    c.y_dtype = DType::bf16;
    c.hidden = 100;
    c.low_latency = true;
    c.seed = 10;
    cases.push_back(c);
    c.name = "x and y in symmetric memory on rank 0 only (no pull)";
    c.low_latency = false;
    c.hidden = 256;
    c.x_mem = Case::XMem::symmetric_rank0;
    c.seed = 11;
    cases.push_back(c);
    c.name = "x and y in symmetric memory at offsets that differ by rank (no pull)";
    c.x_mem = Case::XMem::symmetric_skewed;
    c.seed = 12;
    cases.push_back(c);
  }
  for (const Case& c : cases) run_case(c);
}

TEST(CudaMoe, Fp8HiddenNotMultipleOf128IsRefused) {
  const Group& g = g_group;
  const int world = g.world_size();
  const size_t T = 8, H = 100;
  std::vector<int64_t> idx(T * 2);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i % (2 * world));
  MoeOptions o;
  o.device = Device::cuda(g_device);
  o.timeout = kTimeout;
  MoeLayout l = moe_layout(idx.data(), DType::i64, T, 2, 2 * world, g, o);
  DevBuf x(T * H), sc(T * 4), recv(l.recv_rows() * H + 16), rsc(l.recv_rows() * 4 + 16);
  try {
    moe_dispatch(l, x.get(), DType::f8e4m3, H, sc.get<float>(), recv.get(), rsc.get<float>(),
                 static_cast<const OpOptions&>(o));
    FAIL() << "fp8 with hidden 100 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("multiple of 128"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace symmem::test

int main(int argc, char** argv) {
  return symmem::test::gpu_test_main(argc, argv, symmem::test::g_group, symmem::test::g_device);
}
