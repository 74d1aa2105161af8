// Worker of test_waits, started by symmem-run. argv[1] picks the scenario:
//   absent W   every rank claims a world of W (> the ranks started): group creation waits for the
//              ranks that never start, until SYMMEM_TIMEOUT_MS.
//   dup        rank 3 of 4 starts as a second rank 2, so rank 3 never arrives and rank 2 is
//              claimed twice.
//   barrier    after a first barrier, rank 1 enters the second one 3 s after the others.
//   absent_op  after a first barrier, ranks 0 and 2 run a 4-float all_reduce with a 1.5 s
//              timeout that rank 1 never joins (it waits 3 s and leaves).
//   exit       the store is hosted by rank 0 (SYMMEM_STORE removed); rank 1 keeps its group 3 s
//              longer, so rank 0 waits at exit for it to check out.
// Each rank prints "RESULT rank=R code=<ErrorCode or OK> ms=<since start> what=<message>" and
// exits 0, so that symmem-run lets every rank finish.

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "symmem/error.hpp"
#include "symmem/group.hpp"
#include "symmem/memory.hpp"
#include "symmem/ops.hpp"

namespace {

const auto t0 = std::chrono::steady_clock::now();

long long ms_since_start() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               t0)
      .count();
}

void result(int rank, const char* code, const std::string& what) {
  std::printf("RESULT rank=%d code=%s ms=%lld what=%s\n", rank, code, ms_since_start(),
              what.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const char* env_rank = std::getenv("SYMMEM_RANK");
  int rank = env_rank != nullptr ? std::atoi(env_rank) : -1;
  if (mode == "absent" && argc > 2) {
    setenv("SYMMEM_WORLD_SIZE", argv[2], 1);
    setenv("WORLD_SIZE", argv[2], 1);
    unsetenv("SYMMEM_LOCAL_WORLD_SIZE");
    unsetenv("LOCAL_WORLD_SIZE");
  } else if (mode == "dup" && rank == 3) {
    setenv("SYMMEM_RANK", "2", 1);
    setenv("SYMMEM_LOCAL_RANK", "2", 1);
    rank = 2;
  } else if (mode == "exit") {
    unsetenv("SYMMEM_STORE");
  }
  std::printf("PID rank=%d pid=%d\n", rank, static_cast<int>(getpid()));
  std::fflush(stdout);
  try {
    symmem::Group g = symmem::Group::from_env();
    if (mode == "barrier") {
      symmem::barrier(g);  // sets up the group's CPU workspace on every rank
      if (g.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(3));
      symmem::barrier(g);
    } else if (mode == "absent_op") {
      symmem::barrier(g);
      if (g.rank() == 1) {
        std::this_thread::sleep_for(std::chrono::seconds(3));
      } else {
        float x[4] = {1, 2, 3, 4}, y[4];
        symmem::OpOptions o;
        o.timeout = symmem::Millis(1500);
        symmem::all_reduce(x, y, 4, symmem::DType::f32, symmem::ReduceOp::sum, g, o);
      }
    } else if (mode == "exit") {
      if (g.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(3));
    }
    // The group ends here (rank 0: after waiting for the others to check out).
  } catch (const symmem::Error& e) {
    result(rank, symmem::to_string(e.code()), e.what());
    return 0;
  }
  result(rank, "OK", "");
  return 0;
}
