// Barrier speed of the host backend: ROUNDS (argv[1], default 10000) barriers on one allocation,
// with a data check every 100 rounds. Rank 0 prints the time per barrier; nothing is asserted
// about speed (it depends on the machine), only that every barrier synchronised.
//   symmem-run -n 8 -- mp_host_barrier_bench 10000

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "symmem/error.hpp"
#include "symmem/group.hpp"
#include "symmem/memory.hpp"

int main(int argc, char** argv) {
  long rounds = argc > 1 ? std::atol(argv[1]) : 10000;
  try {
    auto g = symmem::Group::from_env();
    const int n = g.world_size(), r = g.rank();
    auto buf = symmem::allocate(g, 4096);
    buf.barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < rounds; ++i) {
      if (i % 100 == 0) {
        for (int p = 0; p < n; ++p) static_cast<long*>(buf.ptr(p))[r] = i;
      }
      buf.barrier();
      if (i % 100 == 0) {
        for (int p = 0; p < n; ++p) {
          long got = static_cast<long*>(buf.ptr(r))[p];
          if (got != i) {
            std::fprintf(stderr, "rank %d round %ld: rank %d's value is %ld\n", r, i, p, got);
            return 2;
          }
        }
        buf.barrier();
      }
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    buf.barrier();
    if (r == 0) {
      std::printf("host barrier: %d ranks, %u cpus, %ld rounds in %.3f s = %.2f us per barrier\n",
                  n, std::thread::hardware_concurrency(), rounds, s,
                  s / static_cast<double>(rounds) * 1e6);
    }
    return 0;
  } catch (const symmem::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
