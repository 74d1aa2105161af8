// One rank of a fault-injection trial (tests/fault/fault_driver.py). It loops over one kind of
// activity until killed peers make it fail, and reports how it failed:
//   READY rank=<r> pid=<pid>
//   FAULT-RESULT rank=<r> code=<ErrorCode> mono_ns=<CLOCK_MONOTONIC ns> what=<message>
// Exit codes: 3 after a symmem::Error, 0 when the loop ran out without one (the driver then
// reports a missed fault), 2 on a usage error.
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <symmem/symmem.hpp>

namespace {

long long mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

void one_round(const std::string& mode, const symmem::Group& g, symmem::SymmetricMemory& buf,
               int round) {
  if (mode == "rendezvous") {
    auto b = symmem::allocate(g, 4096 + 64 * (round % 4));
    b.barrier();
    b.free();
  } else if (mode == "collective") {
    size_t count = buf.size() / sizeof(float);
    auto* mine = static_cast<float*>(buf.ptr(buf.rank()));
    for (size_t i = 0; i < count; ++i) mine[i] = 1.0f;
    symmem::all_reduce(buf, count, symmem::DType::f32, symmem::ReduceOp::sum);
    if (mine[0] != static_cast<float>(g.world_size())) {
      std::fprintf(stderr, "wrong all_reduce result %f\n", mine[0]);
    }
  } else {  // barrier
    buf.barrier(round % 4);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s rendezvous|collective|barrier SECONDS\n", argv[0]);
    return 2;
  }
  std::string mode = argv[1];
  double seconds = std::atof(argv[2]);
  // The launcher's rank, so that a failure inside Group::from_env still names this rank.
  const char* env_rank = std::getenv("RANK");
  int rank = env_rank != nullptr ? std::atoi(env_rank) : -1;
  try {
    auto g = symmem::Group::from_env();
    rank = g.rank();
    auto buf = symmem::allocate(g, 1 << 20);
    std::printf("READY rank=%d pid=%d\n", rank, static_cast<int>(getpid()));
    std::fflush(stdout);
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (int round = 0; std::chrono::steady_clock::now() < end; ++round) {
      one_round(mode, g, buf, round);
    }
  } catch (const symmem::Error& e) {
    long long t = mono_ns();
    std::string what = e.what();
    for (auto& c : what) {
      if (c == '\n') c = ' ';
    }
    std::printf("FAULT-RESULT rank=%d code=%s mono_ns=%lld what=%s\n", rank,
                symmem::to_string(e.code()), t, what.c_str());
    std::fflush(stdout);
    return 3;
  }
  std::printf("FAULT-DONE rank=%d\n", rank);
  return 0;
}
