// The backend-independent op suite (NOTE [backend suites] in tests/common/suite_target.hpp):
// multi-process tests of every op (run by ctest through symmem-run with 2, 3, 4 and 8 ranks on
// the host backend, and by scripts/gpu-check.sh on the GPU backends). Every rank can generate
// every rank's input, so each rank computes the exact expected result itself: reductions in rank
// order 0..n-1 (the documented fixed order) with the host's reference kernel, compared bit for
// bit. Hashes of the results are also exchanged through the store to check that all ranks hold
// identical bits. Every dtype of the table runs where the backend's op table serves it.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "host/reduce.hpp"
#include "suite_target.hpp"
#include "symmem/symmem.hpp"
#include "test_util.hpp"

namespace symmem {
namespace {

Group* g_group = nullptr;
const Group& G() {
  return *g_group;
}

using suite::download;
using suite::Mem;
using suite::NotServed;
using suite::opts;
using suite::upload;

const std::vector<DType> kDTypes = suite::all_dtypes();
const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max};
const Algo kAlgos[] = {Algo::automatic, Algo::one_shot, Algo::two_shot};

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Rank r's input element i (tag separates calls): floats with full mantissas (so the order of a
// sum shows in the bits), integers in [-500, 500]; dtypes that are only moved get raw bytes
// (any bit pattern: the ops must move them untouched).
void gen(DType t, int r, uint64_t tag, size_t count, void* out) {
  const DTypeInfo& info = dtype_info(t);
  if (!info.reducible) {
    auto* b = static_cast<unsigned char*>(out);
    for (size_t i = 0; i < count * info.size; ++i)
      b[i] = static_cast<unsigned char>(mix(tag * 1000003 + static_cast<uint64_t>(r) * 7919 + i));
    return;
  }
  std::vector<float> f(count);
  for (size_t i = 0; i < count; ++i) {
    uint64_t h = mix(tag * 1000003 + static_cast<uint64_t>(r) * 7919 + i);
    if (!info.is_float)
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

// Buffers of a test case: plain (ordinary memory of the target) or in symmetric memory of the
// group. recv starts as 0x5a bytes.
struct Bufs {
  SymmetricMemory sym_send, sym_recv;
  Mem plain_send, plain_recv;
  char* send = nullptr;
  char* recv = nullptr;
  Bufs(bool sym, size_t send_bytes, size_t recv_bytes) {
    if (sym) {
      sym_send = suite::alloc_sym(G(), std::max<size_t>(send_bytes, 8));
      sym_recv = suite::alloc_sym(G(), std::max<size_t>(recv_bytes, 8));
      send = static_cast<char*>(sym_send.ptr(G().rank()));
      recv = static_cast<char*>(sym_recv.ptr(G().rank()));
    } else {
      plain_send = Mem(std::max<size_t>(send_bytes, 8));
      plain_recv = Mem(std::max<size_t>(recv_bytes, 8));
      send = plain_send.get();
      recv = plain_recv.get();
    }
    suite::fill(recv, 0x5a, recv_bytes);
  }
};

// Rank r's input of `count` elements, written to `dst` in the target's memory.
void gen_into(char* dst, DType t, int r, uint64_t tag, size_t count) {
  auto v = gen_vec(t, r, tag, count);
  upload(dst, v.data(), v.size());
}

std::string name(DType t, ReduceOp op, size_t count, bool sym, bool in_place) {
  return std::string(to_string(t)) + "/" + to_string(op) + "/count " + std::to_string(count) +
         (sym ? "/sym" : "/plain") + (in_place ? "/in-place" : "");
}

// Sizes: 1 element, a prime, a prime above the two-shot chunking, large enough for two-shot.
std::vector<size_t> sizes() {
  if (G().world_size() >= 8) return {1, 13, 1031};
  return {1, 13, 1031, 40009};
}

// Whether a dtype is only moved (no reduction takes it): such dtypes run the data-movement ops
// at fewer sizes, since their bytes take the same paths as the reducible dtypes of their size.
bool moved_only(DType t) {
  return !dtype_info(t).reducible;
}

uint64_t g_tag = 1;

// ---- all_reduce --------------------------------------------------------------------------------
TEST(OpsMp, AllReduceEveryDtypeOpAlgo) {
  const int r = G().rank();
  NotServed table(G());
  for (DType t : kDTypes) {
    if (!table.check(OpKind::all_reduce, t)) continue;
    size_t es = dtype_size(t);
    for (ReduceOp op : kOps) {
      for (Algo algo : kAlgos) {
        for (size_t count : sizes()) {
          for (int mode = 0; mode < 3; ++mode) {  // plain, sym out-of-place, sym in-place
            bool sym = mode > 0, in_place = mode == 2;
            uint64_t tag = ++g_tag;
            Bufs b(sym, count * es, count * es);
            gen_into(b.send, t, r, tag, count);
            char* recv = in_place ? b.send : b.recv;
            auto o = opts();
            o.algo = algo;
            all_reduce(b.send, recv, count, t, op, G(), o);
            auto want = expect_reduce(t, op, tag, count, 0, count);
            auto got = suite::read(recv, want.size());
            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size()))
                << name(t, op, count, sym, in_place) << " algo " << to_string(algo);
            if (count == 1031)
              expect_same_on_all_ranks(got.data(), got.size(), name(t, op, count, sym, in_place));
          }
        }
      }
    }
  }
  if (table.served() == 0) GTEST_SKIP() << "all_reduce not served: " << table.list();
}

TEST(OpsMp, AllReduceSymmetricHandleForm) {
  if (!suite::serves(OpKind::all_reduce, DType::f32)) GTEST_SKIP() << "all_reduce f32 not served";
  const int r = G().rank();
  size_t count = 1001;
  auto buf = suite::alloc_sym(G(), count * 4 + 64);
  uint64_t tag = ++g_tag;
  gen_into(static_cast<char*>(buf.ptr(r)), DType::f32, r, tag, count);
  all_reduce(buf, count, DType::f32, ReduceOp::sum);
  auto want = expect_reduce(DType::f32, ReduceOp::sum, tag, count, 0, count);
  EXPECT_EQ(0, std::memcmp(suite::read(buf.ptr(r), want.size()).data(), want.data(), want.size()));
}

// ---- reduce_scatter ----------------------------------------------------------------------------
TEST(OpsMp, ReduceScatterEveryDtypeOp) {
  const int n = G().world_size(), r = G().rank();
  NotServed table(G());
  for (DType t : kDTypes) {
    if (!table.check(OpKind::reduce_scatter, t)) continue;
    size_t es = dtype_size(t);
    for (ReduceOp op : kOps) {
      for (size_t count : {size_t{1}, size_t{13}, size_t{1031}}) {
        for (int mode = 0; mode < 3; ++mode) {
          bool sym = mode > 0, in_place = mode == 2;
          uint64_t tag = ++g_tag;
          Bufs b(sym, n * count * es, count * es);
          gen_into(b.send, t, r, tag, n * count);
          char* recv = in_place ? b.send + r * count * es : b.recv;
          reduce_scatter(b.send, recv, count, t, op, G(), opts());
          auto want = expect_reduce(t, op, tag, n * count, r * count, count);
          ASSERT_EQ(0, std::memcmp(suite::read(recv, want.size()).data(), want.data(), want.size()))
              << name(t, op, count, sym, in_place);
        }
      }
    }
  }
  if (table.served() == 0) GTEST_SKIP() << "reduce_scatter not served: " << table.list();
}

// ---- all_gather / all_to_all / broadcast --------------------------------------------------------
TEST(OpsMp, AllGatherEveryDtype) {
  const int n = G().world_size(), r = G().rank();
  NotServed table(G());
  for (DType t : kDTypes) {
    if (!table.check(OpKind::all_gather, t)) continue;
    size_t es = dtype_size(t);
    for (size_t count : {size_t{1}, size_t{13}, size_t{1031}}) {
      if (moved_only(t) && count == 13) continue;
      for (int mode = 0; mode < 3; ++mode) {
        bool sym = mode > 0, in_place = mode == 2;
        uint64_t tag = ++g_tag;
        Bufs b(sym, count * es, n * count * es);
        char* send = in_place ? b.recv + r * count * es : b.send;
        gen_into(send, t, r, tag, count);
        all_gather(send, b.recv, count, t, G(), opts());
        auto got = suite::read(b.recv, n * count * es);
        for (int p = 0; p < n; ++p) {
          auto want = gen_vec(t, p, tag, count);
          ASSERT_EQ(0, std::memcmp(got.data() + p * count * es, want.data(), want.size()))
              << name(t, ReduceOp::sum, count, sym, in_place) << " block " << p;
        }
      }
    }
  }
  if (table.served() == 0) GTEST_SKIP() << "all_gather not served: " << table.list();
}

TEST(OpsMp, AllToAllEveryDtype) {
  const int n = G().world_size(), r = G().rank();
  NotServed table(G());
  for (DType t : kDTypes) {
    if (!table.check(OpKind::all_to_all, t)) continue;
    size_t es = dtype_size(t);
    for (size_t count : {size_t{1}, size_t{13}, size_t{1031}}) {
      if (moved_only(t) && count == 13) continue;
      for (int mode = 0; mode < 3; ++mode) {
        bool sym = mode > 0, in_place = mode == 2;
        uint64_t tag = ++g_tag;
        Bufs b(sym, n * count * es, n * count * es);
        gen_into(b.send, t, r, tag, n * count);
        char* recv = in_place ? b.send : b.recv;
        all_to_all(b.send, recv, count, t, G(), opts());
        auto got = suite::read(recv, n * count * es);
        for (int p = 0; p < n; ++p) {
          auto all = gen_vec(t, p, tag, n * count);
          ASSERT_EQ(
              0, std::memcmp(got.data() + p * count * es, all.data() + r * count * es, count * es))
              << name(t, ReduceOp::sum, count, sym, in_place) << " from " << p;
        }
      }
    }
  }
  if (table.served() == 0) GTEST_SKIP() << "all_to_all not served: " << table.list();
}

TEST(OpsMp, BroadcastEveryDtypeAndRoot) {
  const int n = G().world_size(), r = G().rank();
  NotServed table(G());
  for (DType t : kDTypes) {
    if (!table.check(OpKind::broadcast, t)) continue;
    size_t es = dtype_size(t);
    for (size_t count : {size_t{1}, size_t{13}, size_t{300007}}) {
      if (count > 1000 && t != DType::f32 && t != DType::bf16) continue;
      if (moved_only(t) && count == 13) continue;
      for (int root = 0; root < n; root += (n > 4 ? 3 : 1)) {
        for (int mode = 0; mode < 3; ++mode) {
          bool sym = mode > 0, in_place = mode == 2;
          uint64_t tag = ++g_tag;
          Bufs b(sym, count * es, count * es);
          gen_into(b.send, t, r, tag, count);
          char* recv = in_place ? b.send : b.recv;
          broadcast(b.send, recv, count, t, root, G(), opts());
          auto want = gen_vec(t, root, tag, count);
          ASSERT_EQ(0, std::memcmp(suite::read(recv, want.size()).data(), want.data(), want.size()))
              << name(t, ReduceOp::sum, count, sym, in_place) << " root " << root;
        }
      }
    }
  }
  if (table.served() == 0) GTEST_SKIP() << "broadcast not served: " << table.list();
}

// ---- all_to_all_v ------------------------------------------------------------------------------
// p sends c(p, q) elements to q: uneven, with zeros.
int64_t vcount(int p, int q, uint64_t tag) {
  int64_t v = static_cast<int64_t>(mix(tag * 131 + p * 31 + q) % 40);
  return v < 5 ? 0 : v - 5;
}

TEST(OpsMp, AllToAllVMoeAndMpiStyles) {
  const int n = G().world_size(), r = G().rank();
  NotServed table(G());
  for (DType t : kDTypes) {
    if (!table.check(OpKind::all_to_all_v, t)) continue;
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
      gen_into(b.send, t, r, tag, total);
      // Counts and offsets live in the op's memory (the GPU's for GPU backends).
      Mem d_sc = suite::mem_of(sc), d_rc = suite::mem_of(rc), d_ro = suite::mem_of(ro);
      auto* sc_p = reinterpret_cast<int64_t*>(d_sc.get());
      auto* rc_p = reinterpret_cast<int64_t*>(d_rc.get());
      auto* ro_p = reinterpret_cast<int64_t*>(d_ro.get());
      auto o = opts<AllToAllVOptions>();
      o.recv_counts_known = mpi;
      all_to_all_v(b.send, sc_p, b.recv, rc_p, ro_p, cap, t, G(), o);
      rc = suite::read_as(rc_p, n);
      ro = suite::read_as(ro_p, n);
      auto got = suite::read(b.recv, static_cast<size_t>(incoming) * es);
      int64_t off = 0;
      for (int p = 0; p < n; ++p) {
        EXPECT_EQ(rc[p], vcount(p, r, tag));
        EXPECT_EQ(ro[p], off);
        int64_t from = 0;
        for (int q = 0; q < r; ++q) from += vcount(p, q, tag);
        int64_t ptotal = 0;
        for (int q = 0; q < n; ++q) ptotal += vcount(p, q, tag);
        auto all = gen_vec(t, p, tag, ptotal);
        ASSERT_EQ(
            0, std::memcmp(got.data() + off * es, all.data() + from * es, vcount(p, r, tag) * es))
            << to_string(t) << " from " << p << (mpi ? " MPI" : " MoE")
            << (sym ? " sym" : " plain");
        off += vcount(p, r, tag);
      }
    }
  }
  if (table.served() == 0) GTEST_SKIP() << "all_to_all_v not served: " << table.list();
}

// ---- put / get / barrier -----------------------------------------------------------------------
TEST(OpsMp, PutGetWithSignalAndBarrier) {
  if (!suite::serves(OpKind::put, DType::u8) || !suite::serves(OpKind::get, DType::u8))
    GTEST_SKIP() << "put/get not served by " << suite::target().backend;
  const int n = G().world_size(), r = G().rank();
  const size_t bytes = 4096 + 17;
  auto buf = suite::alloc_sym(G(), bytes * n);
  suite::fill(buf.ptr(r), 0, bytes * n);
  barrier(G(), opts());
  // Each rank puts its block into slot r of its right neighbour, with a signal.
  int right = (r + 1) % n, left = (r + n - 1) % n;
  auto mine = gen_vec(DType::i32, r, 77, bytes / 4 + 1);
  Mem src = suite::mem_of(mine);
  auto po = opts<P2POptions>();
  po.signal = true;
  po.channel = 1;
  put(buf, r * bytes, src.get(), bytes, right, po);
  buf.wait_signal(left, 1);
  auto from_left = gen_vec(DType::i32, left, 77, bytes / 4 + 1);
  auto landed = suite::read(static_cast<char*>(buf.ptr(r)) + left * bytes, bytes);
  EXPECT_EQ(0, std::memcmp(landed.data(), from_left.data(), bytes));
  barrier(G(), opts());
  // get: read block r of the right neighbour, which this rank put there: our own data.
  Mem got(bytes);
  get(buf, r * bytes, got.get(), bytes, right, opts<P2POptions>());
  EXPECT_EQ(0, std::memcmp(suite::read(got.get(), bytes).data(), mine.data(), bytes));
  barrier(G(), opts());
}

// ---- bad input ---------------------------------------------------------------------------------
// Each case: an op call with one bad argument, the rank(s) making the mistake, the argument name
// the error must carry. Ranks that made no mistake must get InvalidArgument naming the culprit
// (no hang). Afterwards the group must still work, and no receive buffer may have been touched.
// Every rank then calls suite::settle(), the next synchronising call: on a GPU backend the peers
// of a rank that refused its arguments at the call, and every rank of an op whose error the
// device finds (all_to_all_v's counts), raise there (docs/design.md, "Stream-ordered errors");
// a rank that caught its error at the call gets no second one.
struct BadCase {
  std::string what;  // starts with the op's name
  std::string arg;   // expected in the culprit's message
  bool only_rank1;   // mistake made by rank 1 only (else by every rank)
  ErrorCode code = ErrorCode::InvalidArgument;
  // run(bad, recv): `bad` is true on the ranks that make the mistake.
  std::function<void(bool bad, char* recv)> run;
  // The backend finds it while the op runs (counts in device memory): no rank refuses at the
  // call, every rank raises at the next synchronising call.
  bool device_found = false;
};

void check_group_still_works() {
  std::vector<float> x = {1.0f}, y = {0.0f};
  Mem dx = suite::mem_of(x), dy = suite::mem_of(y);
  all_reduce(dx.get(), dy.get(), 1, DType::f32, ReduceOp::sum, G(), opts());
  EXPECT_EQ(suite::read_as(reinterpret_cast<float*>(dy.get()), 1)[0],
            static_cast<float>(G().world_size()));
}

// Runs the cases: the call (its own error), then settle() on every rank (what the device found),
// then the checks. Cases whose refusal by rank 1 alone the target backend cannot tell the peers
// (suite::refusal_reaches_peers) are listed, not run: the peers would wait until their deadline.
void run_bad_cases(const std::vector<BadCase>& cases, size_t recv_bytes) {
  const int r = G().rank();
  Mem recv(recv_bytes);
  const std::vector<char> before(recv_bytes, 0x3c);
  std::string not_signalled;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    bool bad = c.only_rank1 ? r == 1 : true;
    bool collective = c.what.rfind("put", 0) != 0 && c.what.rfind("get", 0) != 0 &&
                      c.what.find("barrier") == std::string::npos;
    const OpInfo* row = find_op(c.what.substr(0, c.what.find(' ')));
    if (c.only_rank1 && !c.device_found && row != nullptr &&
        !suite::refusal_reaches_peers(row->kind)) {
      not_signalled += (not_signalled.empty() ? "" : "; ") + c.what;
      continue;
    }
    upload(recv.get(), before.data(), recv_bytes);
    bool culprit_msg = bad || !collective;
    std::string rank_tag = "rank " + std::to_string(r);
    std::optional<Error> got;
    try {
      c.run(bad, recv.get());
    } catch (const Error& e) {
      got = e;
    }
    try {
      suite::settle(G());
    } catch (const Error& e) {
      if (got) {
        ADD_FAILURE() << "settle() raised a second error after the call's own (" << got->what()
                      << "): " << e.what();
      } else {
        got = e;
      }
    }
    if (!got) {
      ADD_FAILURE() << "no error";
    } else {
      std::string m = got->what();
      EXPECT_EQ(got->code(), c.code) << m;
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
    EXPECT_EQ(0, std::memcmp(suite::read(recv.get(), recv_bytes).data(), before.data(), recv_bytes))
        << "recv was touched";
    check_group_still_works();
  }
  if (r == 0 && !not_signalled.empty()) {
    std::printf("[ NOT RUN ] the %s backend cannot tell the peers of a refusal of: %s\n",
                suite::target().backend.c_str(), not_signalled.c_str());
  }
}

TEST(OpsMp, BadInputEveryOp) {
  const int n = G().world_size(), r = G().rank();
  auto sym = suite::alloc_sym(G(), 4096);
  auto freed = suite::alloc_sym(G(), 4096);
  freed.free();
  std::vector<int> all_ranks(n);
  for (int i = 0; i < n; ++i) all_ranks[i] = i;
  Group other = G().split(all_ranks);
  auto foreign = suite::alloc_sym(other, 4096);
  Mem send = suite::mem_of(std::vector<float>(64 * n, 1.0f));
  char* sp = send.get();
  char* symp = static_cast<char*>(sym.ptr(r));
  std::vector<int64_t> ones_h(n, 1);
  Mem ones_m = suite::mem_of(ones_h), recv_counts_m = suite::mem_of(std::vector<int64_t>(n));
  Mem offs_m = suite::mem_of(std::vector<int64_t>(n));
  auto* ones = reinterpret_cast<int64_t*>(ones_m.get());
  auto* recv_counts = reinterpret_cast<int64_t*>(recv_counts_m.get());
  auto* offs = reinterpret_cast<int64_t*>(offs_m.get());
  std::vector<int64_t> neg_h = ones_h;
  neg_h[0] = -3;
  Mem neg_m = suite::mem_of(neg_h);
  auto* neg = reinterpret_cast<int64_t*>(neg_m.get());
  const DType bad_dtype = static_cast<DType>(99);
  const ReduceOp bad_op = static_cast<ReduceOp>(42);
  const Algo bad_algo = static_cast<Algo>(7);
  const auto o = opts();
  const auto vo = opts<AllToAllVOptions>();
  const auto po = opts<P2POptions>();

  std::vector<BadCase> cases = {
      {"all_reduce null send", "send", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_reduce(bad ? nullptr : sp, recv, 4, DType::f32, ReduceOp::sum, G(), o);
       }},
      {"all_reduce null recv", "recv", false, ErrorCode::InvalidArgument,
       [&](bool, char*) { all_reduce(sp, nullptr, 4, DType::f32, ReduceOp::sum, G(), o); }},
      {"all_reduce misaligned send", "send", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_reduce(bad ? sp + 1 : sp, recv, 4, DType::f32, ReduceOp::sum, G(), o);
       }},
      {"all_reduce unknown dtype", "dtype", false, ErrorCode::InvalidArgument,
       [&](bool, char* recv) { all_reduce(sp, recv, 4, bad_dtype, ReduceOp::sum, G(), o); }},
      {"all_reduce unknown op", "op", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_reduce(sp, recv, 4, DType::f32, bad ? bad_op : ReduceOp::sum, G(), o);
       }},
      {"all_reduce unknown algo", "algo", false, ErrorCode::InvalidArgument,
       [&](bool, char* recv) {
         auto a = o;
         a.algo = bad_algo;
         all_reduce(sp, recv, 4, DType::f32, ReduceOp::sum, G(), a);
       }},
      {"all_reduce count too large for a symmetric buffer", "send", true,
       ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_reduce(symp, recv, bad ? 2000 : 4, DType::f32, ReduceOp::sum, G(), o);
       }},
      {"all_reduce buffer of another group", "send", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_reduce(bad ? static_cast<char*>(foreign.ptr(r)) : sp, recv, 4, DType::f32,
                    ReduceOp::sum, G(), o);
       }},
      {"all_reduce zero timeout", "timeout", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         auto a = o;
         a.timeout = bad ? Millis(0) : Millis(-1);
         all_reduce(sp, recv, 4, DType::f32, ReduceOp::sum, G(), a);
       }},
      {"all_reduce freed buffer", "buf", false, ErrorCode::InvalidArgument,
       [&](bool, char*) { all_reduce(freed, 4, DType::f32, ReduceOp::sum, o); }},
      {"all_reduce handle count too large", "count", false, ErrorCode::InvalidArgument,
       [&](bool, char*) { all_reduce(sym, 5000, DType::f32, ReduceOp::sum, o); }},
      {"all_reduce handle count too large on one rank", "count", true, ErrorCode::InvalidArgument,
       [&](bool bad, char*) { all_reduce(sym, bad ? 5000 : 4, DType::f32, ReduceOp::sum, o); }},
      {"all_reduce invalid group", "group", false, ErrorCode::InvalidArgument,
       [&](bool, char* recv) { all_reduce(sp, recv, 4, DType::f32, ReduceOp::sum, Group(), o); }},
      {"reduce_scatter null recv", "recv", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         reduce_scatter(sp, bad ? nullptr : recv, 4, DType::f32, ReduceOp::sum, G(), o);
       }},
      {"reduce_scatter unknown op", "op", false, ErrorCode::InvalidArgument,
       [&](bool, char* recv) { reduce_scatter(sp, recv, 4, DType::f32, bad_op, G(), o); }},
      {"reduce_scatter overlapping recv", "recv", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         reduce_scatter(sp, bad ? sp + 4 : recv, 4, DType::f32, ReduceOp::sum, G(), o);
       }},
      {"all_gather misaligned recv", "recv", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) { all_gather(sp, bad ? recv + 2 : recv, 4, DType::f32, G(), o); }},
      {"all_gather unknown dtype", "dtype", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_gather(sp, recv, 4, bad ? bad_dtype : DType::f32, G(), o);
       }},
      {"all_to_all count overflows", "count", false, ErrorCode::InvalidArgument,
       [&](bool, char* recv) { all_to_all(sp, recv, SIZE_MAX / 2, DType::f32, G(), o); }},
      {"all_to_all null send", "send", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) { all_to_all(bad ? nullptr : sp, recv, 4, DType::f32, G(), o); }},
      {"broadcast root out of range", "root", false, ErrorCode::InvalidArgument,
       [&](bool, char* recv) { broadcast(sp, recv, 4, DType::f32, n, G(), o); }},
      {"broadcast negative root on one rank", "root", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) { broadcast(sp, recv, 4, DType::f32, bad ? -1 : 0, G(), o); }},
      {"all_to_all_v null send_counts", "send_counts", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_to_all_v(sp, bad ? nullptr : ones, recv, recv_counts, offs, 64, DType::f32, G(), vo);
       }},
      {"all_to_all_v null recv_counts", "recv_counts", false, ErrorCode::InvalidArgument,
       [&](bool, char* recv) {
         all_to_all_v(sp, ones, recv, nullptr, offs, 64, DType::f32, G(), vo);
       }},
      {"all_to_all_v negative count", "send_counts", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_to_all_v(sp, bad ? neg : ones, recv, recv_counts, offs, 64, DType::f32, G(), vo);
       },
       suite::target().gpu()},
      {"all_to_all_v capacity too small (MoE)", "recv_capacity", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_to_all_v(sp, ones, recv, recv_counts, offs, bad ? n - 1 : 64, DType::f32, G(), vo);
       },
       suite::target().gpu()},
      {"put peer out of range", "peer", false, ErrorCode::InvalidArgument,
       [&](bool, char*) { put(sym, 0, sp, 16, n, po); }},
      {"put offset past the end", "dst_offset", false, ErrorCode::InvalidArgument,
       [&](bool, char*) { put(sym, 4090, sp, 16, 0, po); }},
      {"put channel out of range", "channel", false, ErrorCode::InvalidArgument,
       [&](bool, char*) {
         auto p = po;
         p.signal = true;
         p.channel = sym.num_channels();
         put(sym, 0, sp, 16, 0, p);
       }},
      {"put null src", "src", false, ErrorCode::InvalidArgument,
       [&](bool, char*) { put(sym, 0, nullptr, 16, 0, po); }},
      {"put freed buffer", "dst", false, ErrorCode::InvalidArgument,
       [&](bool, char*) { put(freed, 0, sp, 16, 0, po); }},
      {"get negative peer", "peer", false, ErrorCode::InvalidArgument,
       [&](bool, char* recv) { get(sym, 0, recv, 16, -1, po); }},
      {"get freed buffer", "src", false, ErrorCode::InvalidArgument,
       [&](bool, char* recv) { get(freed, 0, recv, 16, 0, po); }},
      {"barrier invalid group", "group", false, ErrorCode::InvalidArgument,
       [&](bool, char*) { barrier(Group(), o); }},
      {"barrier zero timeout", "timeout", false, ErrorCode::InvalidArgument,
       [&](bool, char*) {
         auto a = o;
         a.timeout = Millis(0);
         barrier(G(), a);
       }},
  };

  run_bad_cases(cases, 64 * 4 * n + 64);
}

// Ranks that pass different but individually valid arguments: on the host backend the agreement
// refuses the op on every rank, naming the argument and both values (NOTE [collective
// agreement]). GPU ops do not compare them: a disagreement is the caller's error there.
TEST(OpsMp, DisagreementEveryOp) {
  if (suite::target().gpu()) {
    GTEST_SKIP() << "GPU ops do not compare arguments across ranks (NOTE [collective "
                    "agreement]); a disagreement is the caller's error, as in NCCL";
  }
  const int n = G().world_size();
  Mem send = suite::mem_of(std::vector<float>(64 * n, 1.0f));
  char* sp = send.get();
  const auto o = opts();
  std::vector<BadCase> cases = {
      {"all_reduce count differs across ranks", "count", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_reduce(sp, recv, bad ? 5 : 4, DType::f32, ReduceOp::sum, G(), o);
       }},
      {"all_reduce op differs across ranks", "op", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_reduce(sp, recv, 4, DType::f32, bad ? ReduceOp::max : ReduceOp::sum, G(), o);
       }},
      {"reduce_scatter count differs across ranks", "recv_count", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         reduce_scatter(sp, recv, bad ? 3 : 4, DType::f32, ReduceOp::sum, G(), o);
       }},
      {"all_gather dtype differs across ranks", "dtype", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) {
         all_gather(sp, recv, 4, bad ? DType::i32 : DType::f32, G(), o);
       }},
      {"all_to_all count differs across ranks", "count", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) { all_to_all(sp, recv, bad ? 2 : 4, DType::f32, G(), o); }},
      {"broadcast root differs across ranks", "root", true, ErrorCode::InvalidArgument,
       [&](bool bad, char* recv) { broadcast(sp, recv, 4, DType::f32, bad ? 1 : 0, G(), o); }},
  };
  run_bad_cases(cases, 64 * 4 * n + 64);
}

TEST(OpsMp, AllToAllVMpiCountDisagreementNamesBothRanks) {
  const int n = G().world_size(), r = G().rank();
  Mem send = suite::mem_of(std::vector<float>(n, 1.0f));
  Mem recv = suite::mem_of(std::vector<float>(n + 4, -1.0f));
  std::vector<int64_t> rc_h(n, 1);
  if (r == 0) rc_h[1] = 2;  // rank 0 expects 2 elements from rank 1, which sends 1
  Mem sc = suite::mem_of(std::vector<int64_t>(n, 1)), rc = suite::mem_of(rc_h);
  Mem ro = suite::mem_of(std::vector<int64_t>(n));
  auto o = opts<AllToAllVOptions>();
  o.recv_counts_known = true;
  try {
    all_to_all_v(send.get(), reinterpret_cast<int64_t*>(sc.get()), recv.get(),
                 reinterpret_cast<int64_t*>(rc.get()), reinterpret_cast<int64_t*>(ro.get()), n + 4,
                 DType::f32, G(), o);
    suite::settle(G());
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
  for (float v : suite::read_as(reinterpret_cast<float*>(recv.get()), n + 4)) EXPECT_EQ(v, -1.0f);
  check_group_still_works();
}

}  // namespace
}  // namespace symmem

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string backend;  // --backend=NAME (NOTE [backend suites])
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--backend=", 0) == 0) {
      backend = a.substr(10);
    } else {
      std::fprintf(stderr, "test_ops_mp: unknown argument %s (takes --backend=NAME)\n", argv[i]);
      return 2;
    }
  }
  static symmem::Group group;
  try {
    group = symmem::Group::from_env();
    symmem::g_group = &group;
    const std::string skip = symmem::suite::init_target(group, backend);
    if (!skip.empty()) {
      std::printf("SKIPPED: %s\n", skip.c_str());
      return symmem::test::kSkipExitCode;
    }
    if (group.rank() == 0) {
      std::printf("op suite on backend %s, %s, %d ranks\n", symmem::suite::target().backend.c_str(),
                  symmem::to_string(symmem::suite::target().device).c_str(), group.world_size());
    }
  } catch (const symmem::Error& e) {
    std::fprintf(stderr, "test_ops_mp: %s\n", e.what());
    return 1;
  }
  int rc = RUN_ALL_TESTS();
  try {
    group.store_barrier();  // no rank tears down memory its peers still map
  } catch (const std::exception& e) {
    std::fprintf(stderr, "final barrier failed: %s\n", e.what());
    rc = rc ? rc : 1;
  }
  return rc;
}
