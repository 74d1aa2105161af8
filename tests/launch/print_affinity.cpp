// Prints this process's CPU affinity (sched_getaffinity) as "cpus <list>", e.g. "cpus 0-3,8";
// run as a rank by test_run's binding tests.
#include <sched.h>

#include <cstdio>
#include <string>

int main() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    std::perror("sched_getaffinity");
    return 1;
  }
  std::string s;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) s += (s.empty() ? "" : ",") + std::to_string(c);
  }
  std::printf("cpus %s\n", s.c_str());
  return 0;
}
