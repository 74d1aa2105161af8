// Worker of test_host_peer_death. Every rank runs barriers (mode "barrier"), a signal ring
// (mode "signal"), allocations (mode "alloc") or liveness polls (mode "poll") on the host backend;
// the victim (argv[1]) SIGKILLs itself in round 50: in the middle of a barrier (after signalling
// only some peers), before signalling its successor, or instead of joining an allocation's
// rendezvous. Each survivor prints
//   RESULT rank=R code=<ErrorCode> ms=<time spent in the failing call> what=<message>
// and exits 1; a survivor that sees no error prints "NO-ERROR rank=R" and exits 0.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "host/host_backend.hpp"
#include "symmem/error.hpp"
#include "symmem/group.hpp"
#include "symmem/memory.hpp"

int main(int argc, char** argv) {
  int victim = argc > 1 ? std::atoi(argv[1]) : 1;
  std::string mode = argc > 2 ? argv[2] : "barrier";
  int rank = -1;
  auto t0 = std::chrono::steady_clock::now();
  try {
    auto g = symmem::Group::from_env();
    rank = g.rank();
    const int n = g.world_size();
    auto buf = symmem::allocate(g, 4096);
    buf.barrier();
    for (int round = 0; round < 200; ++round) {
      if (rank == victim && round == 50) {
        if (mode == "barrier") {
          for (int p = 0; p < n / 2; ++p) {
            if (p != rank) buf.put_signal(p);
          }
        }
        raise(SIGKILL);
      }
      t0 = std::chrono::steady_clock::now();
      if (mode == "barrier") {
        buf.barrier();
      } else if (mode == "poll") {
        // What the host collectives do in their own waits: poll the peers' liveness.
        for (int i = 0; i < 20; ++i) {
          symmem::host_check_peers_alive(buf, "poll", 0);
          usleep(1000);
        }
      } else if (mode == "alloc") {
        auto b = symmem::allocate(g, 4096 + static_cast<size_t>(round));
        b.barrier();
      } else {
        buf.put_signal((rank + 1) % n);
        buf.wait_signal((rank + n - 1) % n);
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
    std::fflush(stdout);
    return 1;
  }
}
