// Multi-process tests of the host collectives (run by ctest through symmem-run with 2, 3, 4, 8
// ranks). Every rank can generate every rank's input, so each rank computes the exact expected
// result itself: reductions in rank order 0..n-1 (the documented fixed order) with the reference
// kernel, compared bit for bit. Hashes of the results are also exchanged through the store to
// check that all ranks hold identical bits.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "host/reduce.hpp"
#include "symmem/symmem.hpp"
#include "test_util.hpp"

namespace symmem {
namespace {

Group* g_group = nullptr;
const Group& G() {
  return *g_group;
}

const DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};
const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max};
const Algo kAlgos[] = {Algo::automatic, Algo::one_shot, Algo::two_shot};

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Rank r's input element i (tag separates calls): floats with full mantissas (so the order of a
// sum shows in the bits), integers in [-500, 500].
void gen(DType t, int r, uint64_t tag, size_t count, void* out) {
  std::vector<float> f(count);
  for (size_t i = 0; i < count; ++i) {
    uint64_t h = mix(tag * 1000003 + static_cast<uint64_t>(r) * 7919 + i);
    if (t == DType::i32 || t == DType::i64)
      f[i] = static_cast<float>(static_cast<int>(h % 1001) - 500);
    else
      f[i] = static_cast<float>(static_cast<int64_t>(h % 2000001) - 1000000) / 7777.0f;
  }
  if (t == DType::f64) {
    auto* d = static_cast<double*>(out);
    for (size_t i = 0; i < count; ++i)
      d[i] = static_cast<double>(f[i]) + static_cast<double>(mix(i + tag) % 1000) * 1e-9;
    return;
  }
  convert_from_f32(t, f.data(), out, count);
}

std::vector<char> gen_vec(DType t, int r, uint64_t tag, size_t count) {
  std::vector<char> v(count * dtype_size(t) + 1);
  gen(t, r, tag, count, v.data());
  v.resize(count * dtype_size(t));
  return v;
}

// Expected reduction of elements [first, first + count) of every rank's input.
std::vector<char> expect_reduce(DType t, ReduceOp op, uint64_t tag, size_t total, size_t first,
                                size_t count) {
  int n = G().world_size();
  size_t es = dtype_size(t);
  std::vector<std::vector<char>> in(n);
  std::vector<const void*> ptrs(n);
  for (int p = 0; p < n; ++p) {
    in[p] = gen_vec(t, p, tag, total);
    ptrs[p] = in[p].data() + first * es;
  }
  std::vector<char> out(count * es + 1);
  host::reduce(out.data(), ptrs.data(), n, count, t, op, n);
  out.resize(count * es);
  return out;
}

uint64_t hash_bytes(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  auto* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

// Every rank publishes the hash of its result; all must be equal.
void expect_same_on_all_ranks(const void* p, size_t n, const std::string& what) {
  static uint64_t seq = 0;
  ++seq;
  uint64_t h = hash_bytes(p, n);
  auto& store = G().store();
  std::string prefix = "test_ops/hash/" + std::to_string(seq) + "/";
  store->set(prefix + std::to_string(G().rank()), to_bytes(std::to_string(h)));
  for (int q = 0; q < G().world_size(); ++q) {
    std::string other = to_string(store->get(prefix + std::to_string(q), Millis(60000)));
    EXPECT_EQ(other, std::to_string(h)) << what << ": rank " << q << " holds other bits";
  }
}

// Buffers of a test case: plain (ordinary memory) or in symmetric memory of the group.
struct Bufs {
  SymmetricMemory sym_send, sym_recv;
  std::vector<char> plain_send, plain_recv;
  char* send = nullptr;
  char* recv = nullptr;
  Bufs(bool sym, size_t send_bytes, size_t recv_bytes) {
    if (sym) {
      sym_send = allocate(G(), std::max<size_t>(send_bytes, 8));
      sym_recv = allocate(G(), std::max<size_t>(recv_bytes, 8));
      send = static_cast<char*>(sym_send.ptr(G().rank()));
      recv = static_cast<char*>(sym_recv.ptr(G().rank()));
    } else {
      plain_send.resize(std::max<size_t>(send_bytes, 8));
      plain_recv.resize(std::max<size_t>(recv_bytes, 8));
      send = plain_send.data();
      recv = plain_recv.data();
    }
    std::memset(recv, 0x5a, recv_bytes);
  }
};

std::string name(DType t, ReduceOp op, size_t count, bool sym, bool in_place) {
  return std::string(to_string(t)) + "/" + to_string(op) + "/count " + std::to_string(count) +
         (sym ? "/sym" : "/plain") + (in_place ? "/in-place" : "");
}

// Sizes: 1 element, a prime, a prime above the two-shot chunking, large enough for two-shot.
std::vector<size_t> sizes() {
  if (G().world_size() >= 8) return {1, 13, 1031};
  return {1, 13, 1031, 40009};
}

uint64_t g_tag = 1;

// ---- all_reduce --------------------------------------------------------------------------------
TEST(OpsMp, AllReduceEveryDtypeOpAlgo) {
  const int r = G().rank();
  for (DType t : kDTypes) {
    size_t es = dtype_size(t);
    for (ReduceOp op : kOps) {
      for (Algo algo : kAlgos) {
        for (size_t count : sizes()) {
          for (int mode = 0; mode < 3; ++mode) {  // plain, sym out-of-place, sym in-place
            bool sym = mode > 0, in_place = mode == 2;
            uint64_t tag = ++g_tag;
            Bufs b(sym, count * es, count * es);
            gen(t, r, tag, count, b.send);
            char* recv = in_place ? b.send : b.recv;
            OpOptions o;
            o.algo = algo;
            all_reduce(b.send, recv, count, t, op, G(), o);
            auto want = expect_reduce(t, op, tag, count, 0, count);
            ASSERT_EQ(0, std::memcmp(recv, want.data(), want.size()))
                << name(t, op, count, sym, in_place) << " algo " << to_string(algo);
            if (count == 1031)
              expect_same_on_all_ranks(recv, want.size(), name(t, op, count, sym, in_place));
          }
        }
      }
    }
  }
}

TEST(OpsMp, AllReduceSymmetricHandleForm) {
  const int r = G().rank();
  size_t count = 1001;
  auto buf = allocate(G(), count * 4 + 64);
  uint64_t tag = ++g_tag;
  gen(DType::f32, r, tag, count, buf.ptr(r));
  all_reduce(buf, count, DType::f32, ReduceOp::sum);
  auto want = expect_reduce(DType::f32, ReduceOp::sum, tag, count, 0, count);
  EXPECT_EQ(0, std::memcmp(buf.ptr(r), want.data(), want.size()));
}

// ---- reduce_scatter ----------------------------------------------------------------------------
TEST(OpsMp, ReduceScatterEveryDtypeOp) {
  const int n = G().world_size(), r = G().rank();
  for (DType t : kDTypes) {
    size_t es = dtype_size(t);
    for (ReduceOp op : kOps) {
      for (size_t count : {size_t{1}, size_t{13}, size_t{1031}}) {
        for (int mode = 0; mode < 3; ++mode) {
          bool sym = mode > 0, in_place = mode == 2;
          uint64_t tag = ++g_tag;
          Bufs b(sym, n * count * es, count * es);
          gen(t, r, tag, n * count, b.send);
          char* recv = in_place ? b.send + r * count * es : b.recv;
          reduce_scatter(b.send, recv, count, t, op, G());
          auto want = expect_reduce(t, op, tag, n * count, r * count, count);
          ASSERT_EQ(0, std::memcmp(recv, want.data(), want.size()))
              << name(t, op, count, sym, in_place);
        }
      }
    }
  }
}

// ---- all_gather / all_to_all / broadcast --------------------------------------------------------
TEST(OpsMp, AllGatherEveryDtype) {
  const int n = G().world_size(), r = G().rank();
  for (DType t : kDTypes) {
    size_t es = dtype_size(t);
    for (size_t count : {size_t{1}, size_t{13}, size_t{1031}}) {
      for (int mode = 0; mode < 3; ++mode) {
        bool sym = mode > 0, in_place = mode == 2;
        uint64_t tag = ++g_tag;
        Bufs b(sym, count * es, n * count * es);
        char* send = in_place ? b.recv + r * count * es : b.send;
        gen(t, r, tag, count, send);
        all_gather(send, b.recv, count, t, G());
        for (int p = 0; p < n; ++p) {
          auto want = gen_vec(t, p, tag, count);
          ASSERT_EQ(0, std::memcmp(b.recv + p * count * es, want.data(), want.size()))
              << name(t, ReduceOp::sum, count, sym, in_place) << " block " << p;
        }
      }
    }
  }
}

TEST(OpsMp, AllToAllEveryDtype) {
  const int n = G().world_size(), r = G().rank();
  for (DType t : kDTypes) {
    size_t es = dtype_size(t);
    for (size_t count : {size_t{1}, size_t{13}, size_t{1031}}) {
      for (int mode = 0; mode < 3; ++mode) {
        bool sym = mode > 0, in_place = mode == 2;
        uint64_t tag = ++g_tag;
        Bufs b(sym, n * count * es, n * count * es);
        gen(t, r, tag, n * count, b.send);
        char* recv = in_place ? b.send : b.recv;
        all_to_all(b.send, recv, count, t, G());
        for (int p = 0; p < n; ++p) {
          auto all = gen_vec(t, p, tag, n * count);
          ASSERT_EQ(0, std::memcmp(recv + p * count * es, all.data() + r * count * es, count * es))
              << name(t, ReduceOp::sum, count, sym, in_place) << " from " << p;
        }
      }
    }
  }
}

TEST(OpsMp, BroadcastEveryDtypeAndRoot) {
  const int n = G().world_size(), r = G().rank();
  for (DType t : kDTypes) {
    size_t es = dtype_size(t);
    for (size_t count : {size_t{1}, size_t{13}, size_t{300007}}) {
      if (count > 1000 && t != DType::f32 && t != DType::bf16) continue;
      for (int root = 0; root < n; root += (n > 4 ? 3 : 1)) {
        for (int mode = 0; mode < 3; ++mode) {
          bool sym = mode > 0, in_place = mode == 2;
          uint64_t tag = ++g_tag;
          Bufs b(sym, count * es, count * es);
          gen(t, r, tag, count, b.send);
          char* recv = in_place ? b.send : b.recv;
          broadcast(b.send, recv, count, t, root, G());
          auto want = gen_vec(t, root, tag, count);
          ASSERT_EQ(0, std::memcmp(recv, want.data(), want.size()))
              << name(t, ReduceOp::sum, count, sym, in_place) << " root " << root;
        }
      }
    }
  }
}

// ---- all_to_all_v ------------------------------------------------------------------------------
// p sends c(p, q) elements to q: uneven, with zeros.
int64_t vcount(int p, int q, uint64_t tag) {
  int64_t v = static_cast<int64_t>(mix(tag * 131 + p * 31 + q) % 40);
  return v < 5 ? 0 : v - 5;
}

TEST(OpsMp, AllToAllVMoeAndMpiStyles) {
  const int n = G().world_size(), r = G().rank();
  for (DType t : kDTypes) {
    size_t es = dtype_size(t);
    for (int mode = 0; mode < 4; ++mode) {  // (plain|sym) x (MoE|MPI)
      bool sym = mode & 1, mpi = mode & 2;
      uint64_t tag = ++g_tag;
      std::vector<int64_t> sc(n), rc(n), ro(n, -1);
      int64_t total = 0, incoming = 0;
      for (int q = 0; q < n; ++q) total += sc[q] = vcount(r, q, tag);
      for (int p = 0; p < n; ++p) incoming += vcount(p, r, tag);
      if (mpi)
        for (int p = 0; p < n; ++p) rc[p] = vcount(p, r, tag);
      size_t cap = static_cast<size_t>(incoming) + 3;
      // Symmetric allocations must have the same size everywhere: the largest of any rank.
      int64_t max_send = 1, max_recv = 1;
      for (int p = 0; p < n; ++p) {
        int64_t out = 0, in = 0;
        for (int q = 0; q < n; ++q) {
          out += vcount(p, q, tag);
          in += vcount(q, p, tag);
        }
        max_send = std::max(max_send, out);
        max_recv = std::max(max_recv, in + 3);
      }
      Bufs b(sym, max_send * es, max_recv * es);
      gen(t, r, tag, total, b.send);
      AllToAllVOptions o;
      o.recv_counts_known = mpi;
      all_to_all_v(b.send, sc.data(), b.recv, rc.data(), ro.data(), cap, t, G(), o);
      int64_t off = 0;
      for (int p = 0; p < n; ++p) {
        EXPECT_EQ(rc[p], vcount(p, r, tag));
        EXPECT_EQ(ro[p], off);
        int64_t from = 0;
        for (int q = 0; q < r; ++q) from += vcount(p, q, tag);
        int64_t ptotal = 0;
        for (int q = 0; q < n; ++q) ptotal += vcount(p, q, tag);
        auto all = gen_vec(t, p, tag, ptotal);
        ASSERT_EQ(0, std::memcmp(b.recv + off * es, all.data() + from * es, vcount(p, r, tag) * es))
            << to_string(t) << " from " << p << (mpi ? " MPI" : " MoE")
            << (sym ? " sym" : " plain");
        off += vcount(p, r, tag);
      }
    }
  }
}

// ---- put / get / barrier -----------------------------------------------------------------------
TEST(OpsMp, PutGetWithSignalAndBarrier) {
  const int n = G().world_size(), r = G().rank();
  const size_t bytes = 4096 + 17;
  auto buf = allocate(G(), bytes * n);
  std::memset(buf.ptr(r), 0, bytes * n);
  barrier(G());
  // Each rank puts its block into slot r of its right neighbour, with a signal.
  int right = (r + 1) % n, left = (r + n - 1) % n;
  auto mine = gen_vec(DType::i32, r, 77, bytes / 4 + 1);
  P2POptions po;
  po.signal = true;
  po.channel = 1;
  put(buf, r * bytes, mine.data(), bytes, right, po);
  buf.wait_signal(left, 1);
  auto from_left = gen_vec(DType::i32, left, 77, bytes / 4 + 1);
  EXPECT_EQ(0, std::memcmp(static_cast<char*>(buf.ptr(r)) + left * bytes, from_left.data(), bytes));
  barrier(G());
  // get: read block `right` of the right neighbour (which its right neighbour put there... i.e.
  // what rank `right - 1 == r` put): our own data.
  std::vector<char> got(bytes);
  get(buf, r * bytes, got.data(), bytes, right);
  EXPECT_EQ(0, std::memcmp(got.data(), mine.data(), bytes));
  barrier(G());
}

// ---- bad input ---------------------------------------------------------------------------------
// Each case: an op call with one bad argument, the rank(s) making the mistake, the argument name
// the error must carry. Ranks that made no mistake must get InvalidArgument naming the culprit
// (no hang). Afterwards the group must still work, and no receive buffer may have been touched.
struct BadCase {
  std::string what;
  std::string arg;  // expected in the culprit's message
  bool only_rank1;  // mistake made by rank 1 only (else by every rank)
  ErrorCode code = ErrorCode::InvalidArgument;
  // run(bad, recv): `bad` is true on the ranks that make the mistake.
  std::function<void(bool bad, char* recv)> run;
};

void check_group_still_works() {
  float x = 1.0f, y = 0.0f;
  all_reduce(&x, &y, 1, DType::f32, ReduceOp::sum, G());
  EXPECT_EQ(y, static_cast<float>(G().world_size()));
}

TEST(OpsMp, BadInputEveryOp) {
  const int n = G().world_size(), r = G().rank();
  auto sym = allocate(G(), 4096);
  auto freed = allocate(G(), 4096);
  freed.free();
  std::vector<int> all_ranks(n);
  for (int i = 0; i < n; ++i) all_ranks[i] = i;
  Group other = G().split(all_ranks);
  auto foreign = allocate(other, 4096);
  std::vector<float> send(64 * n, 1.0f);
  char* sp = reinterpret_cast<char*>(send.data());
  char* symp = static_cast<char*>(sym.ptr(r));
  std::vector<int64_t> ones(n, 1), recv_counts(n), offs(n);
  const DType bad_dtype = static_cast<DType>(99);
  const ReduceOp bad_op = static_cast<ReduceOp>(42);
  const Algo bad_algo = static_cast<Algo>(7);

  std::vector<BadCase> cases = {
      {"all_reduce null send", "send", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_reduce(bad ? nullptr : sp, recv, 4, DType::f32, ReduceOp::sum, G());
       }},
      {"all_reduce null recv", "recv", false, ErrorCode::InvalidArgument,
       [&](bool, char*) { all_reduce(sp, nullptr, 4, DType::f32, ReduceOp::sum, G()); }},
      {"all_reduce misaligned send", "send", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_reduce(bad ? sp + 1 : sp, recv, 4, DType::f32, ReduceOp::sum, G());
       }},
      {"all_reduce unknown dtype", "dtype", false, ErrorCode::InvalidArgument,
       [&](bool, char* recv) { all_reduce(sp, recv, 4, bad_dtype, ReduceOp::sum, G()); }},
      {"all_reduce unknown op", "op", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_reduce(sp, recv, 4, DType::f32, bad ? bad_op : ReduceOp::sum, G());
       }},
      {"all_reduce unknown algo", "algo", false, ErrorCode::InvalidArgument,
       [&](bool, char* recv) {
         OpOptions o;
         o.algo = bad_algo;
         all_reduce(sp, recv, 4, DType::f32, ReduceOp::sum, G(), o);
       }},
      {"all_reduce count too large for a symmetric buffer", "send", true,
       ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_reduce(symp, recv, bad ? 2000 : 4, DType::f32, ReduceOp::sum, G());
       }},
      {"all_reduce buffer of another group", "send", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_reduce(bad ? static_cast<char*>(foreign.ptr(r)) : sp, recv, 4, DType::f32,
                    ReduceOp::sum, G());
       }},
      {"all_reduce count differs across ranks", "count", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_reduce(sp, recv, bad ? 5 : 4, DType::f32, ReduceOp::sum, G());
       }},
      {"all_reduce zero timeout", "timeout", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         OpOptions o;
         o.timeout = bad ? Millis(0) : Millis(-1);
         all_reduce(sp, recv, 4, DType::f32, ReduceOp::sum, G(), o);
       }},
      {"all_reduce freed buffer", "buf", false, ErrorCode::InvalidArgument,
       [&](bool, char*) { all_reduce(freed, 4, DType::f32, ReduceOp::sum); }},
      {"all_reduce handle count too large", "count", false, ErrorCode::InvalidArgument,
       [&](bool, char*) { all_reduce(sym, 5000, DType::f32, ReduceOp::sum); }},
      {"all_reduce invalid group", "group", false, ErrorCode::InvalidArgument,
       [&](bool, char* recv) { all_reduce(sp, recv, 4, DType::f32, ReduceOp::sum, Group()); }},
      {"reduce_scatter null recv", "recv", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         reduce_scatter(sp, bad ? nullptr : recv, 4, DType::f32, ReduceOp::sum, G());
       }},
      {"reduce_scatter unknown op", "op", false, ErrorCode::InvalidArgument,
       [&](bool, char* recv) { reduce_scatter(sp, recv, 4, DType::f32, bad_op, G()); }},
      {"reduce_scatter overlapping recv", "recv", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         reduce_scatter(sp, bad ? sp + 4 : recv, 4, DType::f32, ReduceOp::sum, G());
       }},
      {"all_gather misaligned recv", "recv", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) { all_gather(sp, bad ? recv + 2 : recv, 4, DType::f32, G()); }},
      {"all_gather unknown dtype", "dtype", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) { all_gather(sp, recv, 4, bad ? bad_dtype : DType::f32, G()); }},
      {"all_to_all count overflows", "count", false, ErrorCode::InvalidArgument,
       [&](bool, char* recv) { all_to_all(sp, recv, SIZE_MAX / 2, DType::f32, G()); }},
      {"all_to_all null send", "send", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) { all_to_all(bad ? nullptr : sp, recv, 4, DType::f32, G()); }},
      {"broadcast root out of range", "root", false, ErrorCode::InvalidArgument,
       [&](bool, char* recv) { broadcast(sp, recv, 4, DType::f32, n, G()); }},
      {"broadcast negative root on one rank", "root", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) { broadcast(sp, recv, 4, DType::f32, bad ? -1 : 0, G()); }},
      {"all_to_all_v null send_counts", "send_counts", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_to_all_v(sp, bad ? nullptr : ones.data(), recv, recv_counts.data(), offs.data(), 64,
                      DType::f32, G());
       }},
      {"all_to_all_v null recv_counts", "recv_counts", false, ErrorCode::InvalidArgument,
       [&](bool, char* recv) {
         all_to_all_v(sp, ones.data(), recv, nullptr, offs.data(), 64, DType::f32, G());
       }},
      {"all_to_all_v negative count", "send_counts", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         std::vector<int64_t> c = ones;
         if (bad) c[0] = -3;
         all_to_all_v(sp, c.data(), recv, recv_counts.data(), offs.data(), 64, DType::f32, G());
       }},
      {"all_to_all_v capacity too small (MoE)", "recv_capacity", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_to_all_v(sp, ones.data(), recv, recv_counts.data(), offs.data(), bad ? n - 1 : 64,
                      DType::f32, G());
       }},
      {"put peer out of range", "peer", false, ErrorCode::InvalidArgument,
       [&](bool, char*) { put(sym, 0, sp, 16, n); }},
      {"put offset past the end", "dst_offset", false, ErrorCode::InvalidArgument,
       [&](bool, char*) { put(sym, 4090, sp, 16, 0); }},
      {"put channel out of range", "channel", false, ErrorCode::InvalidArgument,
       [&](bool, char*) {
         P2POptions o;
         o.signal = true;
         o.channel = sym.num_channels();
         put(sym, 0, sp, 16, 0, o);
       }},
      {"put null src", "src", false, ErrorCode::InvalidArgument,
       [&](bool, char*) { put(sym, 0, nullptr, 16, 0); }},
      {"put freed buffer", "dst", false, ErrorCode::InvalidArgument,
       [&](bool, char*) { put(freed, 0, sp, 16, 0); }},
      {"get negative peer", "peer", false, ErrorCode::InvalidArgument,
       [&](bool, char* recv) { get(sym, 0, recv, 16, -1); }},
      {"get freed buffer", "src", false, ErrorCode::InvalidArgument,
       [&](bool, char* recv) { get(freed, 0, recv, 16, 0); }},
      {"barrier invalid group", "group", false, ErrorCode::InvalidArgument,
       [&](bool, char*) { barrier(Group()); }},
      {"barrier zero timeout", "timeout", false, ErrorCode::InvalidArgument,
       [&](bool, char*) {
         OpOptions o;
         o.timeout = Millis(0);
         barrier(G(), o);
       }},
  };

  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    bool bad = c.only_rank1 ? r == 1 : true;
    std::vector<char> recv(64 * 4 * n + 64, 0x3c);
    std::vector<char> before = recv;
    bool collective = c.what.rfind("put", 0) != 0 && c.what.rfind("get", 0) != 0 &&
                      c.what.find("barrier") == std::string::npos;
    bool culprit_msg = bad || !collective;
    std::string rank_tag = "rank " + std::to_string(r);
    try {
      c.run(bad, recv.data());
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_EQ(e.code(), c.code) << m;
      if (c.arg == "group") {
        EXPECT_NE(m.find("'group'"), std::string::npos) << m;
      } else if (culprit_msg) {
        EXPECT_NE(m.find("'" + c.arg + "'"), std::string::npos) << m;
        EXPECT_NE(m.find(rank_tag), std::string::npos) << m;
      } else {
        // A rank that did nothing wrong names the culprit (rank 1) and why.
        EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
        EXPECT_NE(m.find(rank_tag), std::string::npos) << m;
      }
    }
    EXPECT_EQ(0, std::memcmp(recv.data(), before.data(), recv.size())) << "recv was touched";
    check_group_still_works();
  }
}

TEST(OpsMp, AllToAllVMpiCountDisagreementNamesBothRanks) {
  const int n = G().world_size(), r = G().rank();
  std::vector<float> send(n, 1.0f), recv(n + 4, -1.0f);
  std::vector<int64_t> sc(n, 1), rc(n, 1), ro(n);
  if (r == 0) rc[1] = 2;  // rank 0 expects 2 elements from rank 1, which sends 1
  AllToAllVOptions o;
  o.recv_counts_known = true;
  try {
    all_to_all_v(send.data(), sc.data(), recv.data(), rc.data(), ro.data(), n + 4, DType::f32, G(),
                 o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << m;
    if (r == 0) {
      EXPECT_NE(m.find("'recv_counts'"), std::string::npos) << m;
      EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
    } else if (r == 1) {
      EXPECT_NE(m.find("'send_counts'"), std::string::npos) << m;
      EXPECT_NE(m.find("rank 0"), std::string::npos) << m;
    } else {
      EXPECT_NE(m.find("ranks 1 and 0"), std::string::npos) << m;
    }
  }
  for (float v : recv) EXPECT_EQ(v, -1.0f);
  check_group_still_works();
}

}  // namespace
}  // namespace symmem

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  try {
    static symmem::Group group = symmem::Group::from_env();
    symmem::g_group = &group;
  } catch (const symmem::Error& e) {
    std::fprintf(stderr, "test_ops_mp: %s\n", e.what());
    return 1;
  }
  return RUN_ALL_TESTS();
}
