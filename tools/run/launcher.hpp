#pragma once

// symmem-run's process management: starts N ranks, relays their output line by line with a
// "[rank] " prefix, forwards SIGINT/SIGTERM, stops everyone when a rank fails or the job times
// out, and summarises how each rank ended.

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace symmem::run {

struct LaunchConfig {
  int nranks = 1;
  std::vector<std::string> argv;  // program and its arguments
  double timeout_s = 0;           // 0: none
  double fail_grace_s = 0;        // after a failure, wait this long before stopping the others
  double kill_grace_s = 3;        // SIGTERM -> SIGKILL
  double skip_grace_s = 60;  // after a rank exits 77, wait this long for the others (ranks that
                             // import torch on a loaded machine skip seconds apart)
  std::map<std::string, std::string> env;  // added to every rank's environment
  // CPUs each rank is bound to (sched_setaffinity before execve); an empty list, or a rank
  // beyond the vector's end, keeps the launcher's own mask (NOTE [rank binding], binding.hpp).
  std::vector<std::vector<int>> rank_cpus;
  // Called at every rank failure with the rank and a line naming it ("rank 2 killed by signal 9
  // (Killed)"), before anything else happens to the ranks (stopping them, a restart).
  std::function<void(int, const std::string&)> on_failure;
  // --keep-going: a failed rank does not stop the others (NOTE [keep going], launcher.cpp).
  bool keep_going = false;
  // --restart-failed N: start a failed rank again, N times in all over the job (implies
  // keep_going); the new process gets SYMMEM_RESTART_COUNT=k, its k-th start after a failure.
  int restarts = 0;
  // Per rank variables (RANK, ...) are added by the launcher itself.
};

inline constexpr int kExitSkip = 77;
inline constexpr int kExitTimeout = 124;
inline constexpr int kExitCannotExec = 127;

// Runs the job; returns symmem-run's exit status: 0 when every rank exited 0 (under keep_going:
// when no rank exited with a non-zero code and one exited 0; ranks killed by a signal are
// tolerated), 77 when every rank exited 77, 124 after --timeout, 128+N after symmem-run was
// stopped by signal N, else 1.
int run_job(const LaunchConfig& config);

}  // namespace symmem::run
