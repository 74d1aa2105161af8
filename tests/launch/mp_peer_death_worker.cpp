// Worker of test_peer_death: every rank all-gathers over the store in a loop; the victim rank
// (argv[1]) SIGKILLs itself before round 3, so the others wait on its key. With argv[2] ==
// "barrier" the rounds are Group::store_barrier() calls instead. Each survivor prints
//   RESULT rank=R code=<ErrorCode> ms=<time in the failing call> what=<message>
// and exits 1; a survivor that sees no error prints "NO-ERROR rank=R" and exits 0.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/exchange.hpp"
#include "symmem/error.hpp"
#include "symmem/group.hpp"

int main(int argc, char** argv) {
  int victim = argc > 1 ? std::atoi(argv[1]) : 1;
  bool barrier = argc > 2 && std::string(argv[2]) == "barrier";
  int rank = -1;
  auto t0 = std::chrono::steady_clock::now();
  try {
    symmem::Group g = symmem::Group::from_env();
    rank = g.rank();
    std::printf("READY rank=%d pid=%d\n", rank, static_cast<int>(getpid()));
    std::fflush(stdout);
    symmem::StoreExchange x(g.store(), g.name() + "/pd", rank, g.world_size(), g.timeout());
    for (int round = 0; round < 6; ++round) {
      if (rank == victim && round == 3) raise(SIGKILL);
      t0 = std::chrono::steady_clock::now();
      if (barrier) {
        g.store_barrier();
        continue;
      }
      auto all = x.all_gather<int>(rank * 100 + round);
      for (int r = 0; r < g.world_size(); ++r) {
        if (all[r] != r * 100 + round) {
          std::printf("WRONG rank=%d round=%d from=%d\n", rank, round, r);
          return 2;
        }
      }
    }
    std::printf("NO-ERROR rank=%d\n", rank);
    return 0;
  } catch (const symmem::Error& e) {
    auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    std::printf("RESULT rank=%d code=%s ms=%lld what=%s\n", rank, symmem::to_string(e.code()),
                static_cast<long long>(ms), e.what());
    return 1;
  }
}
