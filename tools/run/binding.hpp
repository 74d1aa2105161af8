#pragma once

// symmem-run's CPU binding (--bind-to core|numa|none, as mpirun spells it).
//
// NOTE [rank binding]
// A rank that is not bound can be moved by the scheduler at any time, and on a busy or small
// machine two ranks of one job end up on the same CPU: then a rank that waits for its peer holds
// the CPU its peer needs, and a 4 KiB all-reduce costs tens of microseconds instead of three.
// symmem-run therefore binds every rank, within the CPUs it was itself allowed
// (sched_getaffinity: a cgroup cpuset, taskset, a Slurm allocation), as mpirun does:
//   core  rank r gets one physical core of its own (all its hardware threads); the cores are
//         taken in (NUMA node, core) order and spread evenly, so consecutive ranks stay on one
//         node. With fewer cores than ranks but enough hardware threads, one hardware thread
//         each; with fewer than that, an error (--bind-to none runs them unbound).
//   numa  rank r gets every allowed CPU of NUMA node r * nodes / ranks (ranks share nodes when
//         they outnumber them).
//   none  no binding: the mask symmem-run was started with.
//   auto  (the default) numa when the machine has several NUMA nodes with allowed CPUs and
//         every rank can have a node to itself (its threads and its memory stay local, and one
//         core would idle the rest of the node); else core when there are at least as many
//         allowed cores as ranks; else none, with a note saying so (printed once on stderr).
// plan_binding() is the pure decision, unit-tested on made-up topologies; read_topology()
// reads the real one from /sys and sched_getaffinity.

#include <string>
#include <vector>

namespace symmem::run {

enum class BindMode { automatic, core, numa, none };

// "core", "numa", "none" (and "auto"); false for anything else.
bool parse_bind_mode(const std::string& s, BindMode* out);
const char* to_string(BindMode m);

// One CPU the launcher may use.
struct Cpu {
  int id = 0;    // the kernel's CPU number
  int core = 0;  // physical core: CPUs with equal `core` are hardware threads of one core
  int node = 0;  // NUMA node
};

// The CPUs in symmem-run's own affinity mask, in increasing id order.
struct Topology {
  std::vector<Cpu> cpus;
};

struct BindPlan {
  BindMode mode = BindMode::none;      // what was done (auto resolved)
  std::vector<std::vector<int>> cpus;  // per local rank, sorted CPU ids; empty: unbound
  std::string note;                    // for stderr when non-empty (auto fell back to none)
  std::string error;                   // non-empty: the request cannot be met (usage error)
};

BindPlan plan_binding(const Topology& topo, int nranks, BindMode mode);

// The current process's allowed CPUs with their core and NUMA node from
// /sys/devices/system/cpu and /sys/devices/system/node; a CPU whose topology cannot be read is
// its own core on node 0. Empty when sched_getaffinity fails.
Topology read_topology();

// "0-3,8,10-11".
std::string cpu_list_string(const std::vector<int>& cpus);
// Parses the kernel's cpulist format ("0-3,8"); false on a syntax error.
bool parse_cpu_list(const std::string& s, std::vector<int>* out);

}  // namespace symmem::run
