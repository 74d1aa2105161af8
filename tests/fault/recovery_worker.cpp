// One rank of a recovery trial (tests/fault/recovery_driver.py), run under
// symmem-run --keep-going (mode shrink) or --restart-failed 1 (mode grow). It loops over
// verified all-reduces and all_to_all_v on the host backend (or, with "cuda", all-reduces of
// device memory on the cuda backend) until a killed peer makes an op
// fail, then recovers as docs/reliability.md ("Recovering from a failed rank") shows:
//   failed = g.failed_ranks(); g = g.shrink(failed); verify on the smaller group;
//   grow: g = g.grow(failed.size()); verify on the whole group again.
// A process that symmem-run started again (Group::restarted()) calls Group::rejoin() and
// verifies with the survivors. Lines (CLOCK_MONOTONIC ns):
//   READY rank=<r> pid=<pid>
//   FAULT-RESULT rank=<r> code=<ErrorCode> mono_ns=<t> what=<message>
//   FREED rank=<r> mono_ns=<t>                                          (old memory freed)
//   SHRUNK rank=<r> new_rank=<n> world=<w> failed=<list> mono_ns=<t>   (shrink() returned)
//   ALLOCATED rank=<r> world=<w> mono_ns=<t>    (first allocation on the shrunk group; r: old rank)
//   FIRST-OP rank=<r> world=<w> mono_ns=<t>     (its first verified round done)
//   RECOVERED rank=<r> world=<w> mono_ns=<t>                            (verified on it)
//   GROWN rank=<r> new_rank=<n> world=<w> mono_ns=<t>                   (verified after grow)
//   REJOINED rank=<launcher rank> new_rank=<n> world=<w> mono_ns=<t>   (the replacement)
// Exit codes: 0 after recovering, 3 on an error the recovery could not handle (printed as
// RECOVERY-ERROR, with stage= and, for an exception that is not a symmem::Error, its type), 4
// when the loop ran out without a fault, 2 on a usage error. A process that dies anyway says how
// first, on stderr: RECOVERY-TERMINATE (std::terminate: an exception escaped a noexcept path or
// a destructor; the exception's text when there is one) or RECOVERY-SIGNAL (SIGABRT, SIGSEGV,
// SIGBUS, SIGFPE), each with the stage and a backtrace.
#include <execinfo.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <typeinfo>
#include <vector>

#include <symmem/symmem.hpp>

#if defined(SYMMEM_RECOVERY_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace {

// Where the verified ops run: "cpu" (host backend) or "cuda" (device memory, cuda backend;
// built with SYMMEM_RECOVERY_CUDA). NOTE [device abort]: after a dead peer, the survivors'
// kernels return early and the group is aborted with PeerFailure; the worker checks
// Group::aborted() after each synchronous copy and lets the next op raise the error.
bool g_cuda = false;

long long mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

std::string one_line(std::string s) {
  for (auto& c : s) {
    if (c == '\n') c = ' ';
  }
  return s;
}

std::string list(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s.empty() ? "-" : s;
}

// Where the process is (for the last words of a process that dies; read by a signal handler).
const char* volatile g_stage = "setup";
volatile int g_rank = -1;

void write_str(const char* s) {
  if (s != nullptr) (void)!write(2, s, std::strlen(s));
}

// Async-signal-safe enough for a test's last words: write(2) and backtrace_symbols_fd.
void on_fatal_signal(int sig) {
  char num[16];
  int v = g_rank < 0 ? 0 : g_rank, n = 0;
  char rev[16];
  do {
    rev[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0 && n < 15);
  int k = 0;
  if (g_rank < 0) num[k++] = '-';
  while (n > 0 && k < 15) num[k++] = rev[--n];
  num[k] = '\0';
  write_str("RECOVERY-SIGNAL rank=");
  write_str(num);
  write_str(" signal=");
  write_str(sig == SIGABRT   ? "SIGABRT"
            : sig == SIGSEGV ? "SIGSEGV"
            : sig == SIGBUS  ? "SIGBUS"
                             : "SIGFPE");
  write_str(" stage=");
  write_str(g_stage);
  write_str("\n");
  void* frames[48];
  backtrace_symbols_fd(frames, backtrace(frames, 48), 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

void on_terminate() {
  std::string what = "no active exception";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = std::string(typeid(x).name()) + ": " + x.what();
    } catch (...) {
      what = "a non-std exception";
    }
  }
  std::fprintf(stderr, "RECOVERY-TERMINATE rank=%d stage=%s: %s\n", g_rank, g_stage,
               one_line(what).c_str());
  std::fflush(stderr);
  std::abort();  // SIGABRT: on_fatal_signal adds the backtrace
}

void install_last_words() {
  std::set_terminate(on_terminate);
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE}) signal(sig, on_fatal_signal);
  void* warm[1];
  (void)backtrace(warm, 1);  // loads libgcc now, not inside the handler
}

// x[i] after the all-reduce of round `round` over n ranks, where rank r put (r+1)(round+1) + i.
void check_sum(const int32_t* x, size_t count, int n, int round, const char* what) {
  const int32_t ranks_sum = n * (n + 1) / 2;
  for (size_t i = 0; i < count; ++i) {
    const int32_t want = ranks_sum * (round + 1) + static_cast<int32_t>(i) * n;
    if (x[i] != want) {
      throw symmem::Error(symmem::ErrorCode::Internal,
                          std::string(what) + ": wrong value " + std::to_string(x[i]) + " at " +
                              std::to_string(i) + ", want " + std::to_string(want));
    }
  }
}

// One verified all-reduce and one verified all_to_all_v on `g`, with values that depend on the
// round and on every rank, so a stale or partial result shows. Throws on a wrong value.
void verified_round(const symmem::Group& g, symmem::SymmetricMemory& buf, int round) {
  const int me = g.rank(), n = g.world_size();
  const size_t count = 4096;
  auto* x = static_cast<int32_t*>(buf.ptr(me));
  for (size_t i = 0; i < count; ++i) x[i] = static_cast<int32_t>((me + 1) * (round + 1) + i);
  symmem::all_reduce(buf, count, symmem::DType::i32, symmem::ReduceOp::sum);
  check_sum(x, count, n, round, "all_reduce");
  // all_to_all_v: rank s sends (s + d + round) % 5 + 1 elements, all equal to 1000 * s + d,
  // to rank d.
  std::vector<int64_t> send_counts(n), recv_counts(n), recv_offsets(n);
  std::vector<int32_t> send;
  for (int d = 0; d < n; ++d) {
    send_counts[d] = (me + d + round) % 5 + 1;
    for (int64_t k = 0; k < send_counts[d]; ++k) send.push_back(1000 * me + d);
  }
  std::vector<int32_t> recv(static_cast<size_t>(5 * n));
  symmem::all_to_all_v(send.data(), send_counts.data(), recv.data(), recv_counts.data(),
                       recv_offsets.data(), recv.size(), symmem::DType::i32, g);
  size_t at = 0;
  for (int s = 0; s < n; ++s) {
    const int64_t want_count = (s + me + round) % 5 + 1;
    if (recv_counts[s] != want_count) {
      throw symmem::Error(symmem::ErrorCode::Internal,
                          "all_to_all_v: rank " + std::to_string(s) + " sent " +
                              std::to_string(recv_counts[s]) + " elements, want " +
                              std::to_string(want_count));
    }
    for (int64_t k = 0; k < want_count; ++k, ++at) {
      if (recv[at] != 1000 * s + me) {
        throw symmem::Error(symmem::ErrorCode::Internal, "all_to_all_v: wrong value " +
                                                             std::to_string(recv[at]) +
                                                             " from rank " + std::to_string(s));
      }
    }
  }
}

#if defined(SYMMEM_RECOVERY_CUDA)
void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw symmem::Error(symmem::ErrorCode::Cuda, std::string(what) + ": " + cudaGetErrorString(e));
  }
}

// One verified all-reduce of device memory (the GPU acceptance: all-reduce only).
void verified_round_cuda(const symmem::Group& g, symmem::SymmetricMemory& buf, int round) {
  const int me = g.rank(), n = g.world_size();
  const size_t count = 4096;
  std::vector<int32_t> x(count);
  for (size_t i = 0; i < count; ++i) x[i] = static_cast<int32_t>((me + 1) * (round + 1) + i);
  void* d = buf.ptr(me);
  check_cuda(cudaMemcpy(d, x.data(), count * sizeof(int32_t), cudaMemcpyHostToDevice), "upload");
  symmem::all_reduce(buf, count, symmem::DType::i32, symmem::ReduceOp::sum);
  check_cuda(cudaMemcpy(x.data(), d, count * sizeof(int32_t), cudaMemcpyDeviceToHost), "download");
  if (g.aborted()) {  // the kernel was stopped: the next op raises the group's error
    symmem::all_reduce(buf, count, symmem::DType::i32, symmem::ReduceOp::sum);
  }
  check_sum(x.data(), count, n, round, "all_reduce (cuda)");
}
#endif

symmem::SymmetricMemory make_buffer(const symmem::Group& g) {
#if defined(SYMMEM_RECOVERY_CUDA)
  if (g_cuda) {
    int n = 0;
    check_cuda(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
    return symmem::allocate(g, 4096 * sizeof(int32_t), symmem::Device::cuda(g.local_rank() % n));
  }
#endif
  return symmem::allocate(g, 4096 * sizeof(int32_t));
}

void round_on(const symmem::Group& g, symmem::SymmetricMemory& buf, int round) {
#if defined(SYMMEM_RECOVERY_CUDA)
  if (g_cuda) return verified_round_cuda(g, buf, round);
#endif
  verified_round(g, buf, round);
}

// `rounds` verified rounds on a fresh buffer of `g`; `stamp` (the shrunk group's verification)
// prints ALLOCATED and FIRST-OP, so that the driver can say where recovery time goes.
void verify(const symmem::Group& g, int rounds, bool stamp = false) {
  auto buf = make_buffer(g);
  if (stamp) {
    std::printf("ALLOCATED rank=%d world=%d mono_ns=%lld\n", g_rank, g.world_size(), mono_ns());
    std::fflush(stdout);
  }
  for (int r = 0; r < rounds; ++r) {
    round_on(g, buf, r);
    if (stamp && r == 0) {
      std::printf("FIRST-OP rank=%d world=%d mono_ns=%lld\n", g_rank, g.world_size(), mono_ns());
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s shrink|grow SECONDS [cpu|cuda]\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  const double seconds = std::atof(argv[2]);
  g_cuda = argc > 3 && std::string(argv[3]) == "cuda";
#if !defined(SYMMEM_RECOVERY_CUDA)
  if (g_cuda) {
    std::fprintf(stderr, "%s: built without CUDA (use symmem_recovery_worker_cuda)\n", argv[0]);
    return 2;
  }
#endif
  const char* env_rank = std::getenv("RANK");
  const int launcher_rank = env_rank != nullptr ? std::atoi(env_rank) : -1;
  int rank = launcher_rank;
  g_rank = rank;
  install_last_words();
  try {
    if (symmem::Group::restarted()) {
      g_stage = "rejoin";
      symmem::Group g = symmem::Group::rejoin();
      verify(g, 3);
      std::printf("REJOINED rank=%d new_rank=%d world=%d mono_ns=%lld\n", launcher_rank, g.rank(),
                  g.world_size(), mono_ns());
      std::fflush(stdout);
      return 0;
    }
    symmem::Group g = symmem::Group::from_env();
    rank = g.rank();
    g_rank = rank;
    symmem::SymmetricMemory buf;
    try {
      g_stage = "loop";
      buf = make_buffer(g);
      std::printf("READY rank=%d pid=%d\n", rank, static_cast<int>(getpid()));
      std::fflush(stdout);
      auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
      for (int round = 0; std::chrono::steady_clock::now() < end; ++round) {
        round_on(g, buf, round);
      }
      std::printf("FAULT-DONE rank=%d\n", rank);
      return 4;
    } catch (const symmem::Error& e) {
      if (e.code() != symmem::ErrorCode::PeerFailure && e.code() != symmem::ErrorCode::Timeout)
        throw;
      std::printf("FAULT-RESULT rank=%d code=%s mono_ns=%lld what=%s\n", rank,
                  symmem::to_string(e.code()), mono_ns(), one_line(e.what()).c_str());
      std::fflush(stdout);
    }
    g_stage = "free";
    buf = symmem::SymmetricMemory();  // memory of the old group goes with it
    std::printf("FREED rank=%d mono_ns=%lld\n", rank, mono_ns());  // where time goes, if it does
    std::fflush(stdout);
    g_stage = "shrink";
    const std::vector<int> failed = g.failed_ranks();
    symmem::Group small = g.shrink(failed);
    std::printf("SHRUNK rank=%d new_rank=%d world=%d failed=%s mono_ns=%lld\n", rank, small.rank(),
                small.world_size(), list(failed).c_str(), mono_ns());
    std::fflush(stdout);
    g_stage = "verify on the shrunk group";
    verify(small, 3, true);
    std::printf("RECOVERED rank=%d world=%d mono_ns=%lld\n", rank, small.world_size(), mono_ns());
    std::fflush(stdout);
    if (mode == "grow") {
      g_stage = "grow";
      symmem::Group whole = small.grow(static_cast<int>(failed.size()));
      verify(whole, 3);
      std::printf("GROWN rank=%d new_rank=%d world=%d mono_ns=%lld\n", rank, whole.rank(),
                  whole.world_size(), mono_ns());
      std::fflush(stdout);
    }
    // The groups (the old one too) and their memory go at the end of this scope.
    g_stage = "exit: destroying the groups and their memory";
  } catch (const symmem::Error& e) {
    std::printf("RECOVERY-ERROR rank=%d stage=%s code=%s what=%s\n", rank, g_stage,
                symmem::to_string(e.code()), one_line(e.what()).c_str());
    std::fflush(stdout);
    return 3;
  } catch (const std::exception& e) {  // not the library's error type: a bug worth naming
    std::printf("RECOVERY-ERROR rank=%d stage=%s code=std::exception (%s) what=%s\n", rank, g_stage,
                typeid(e).name(), one_line(e.what()).c_str());
    std::fflush(stdout);
    return 3;
  }
  return 0;
}
