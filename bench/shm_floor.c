/* The floor of a small shared-memory all-reduce of two processes on this machine: what any
 * implementation that moves the data through memory shared between two cores must pay, measured
 * without a library around it. For docs/performance.md ("Host small messages").
 *
 *   cc -O3 -march=native -o /tmp/shm_floor bench/shm_floor.c && /tmp/shm_floor [BYTES] [ITERS]
 *
 * Two processes, each bound to its own CPU (0 and 1), share one mapping. Every step has the
 * shape of symmem's inline all-reduce (NOTE [inline all-reduce] in src/core/pad_sync.hpp): copy
 * the input into this rank's slot (slots alternate by step parity), raise a counter on the
 * peer's side, wait for the peer's counter, then sum both slots into a private output. Printed,
 * mean ns per step over ITERS after 1000 warm-up steps, for four variants:
 *   barrier      counters only (no data)
 *   copy         + the local copy into the slot
 *   one-way      + rank 0 alone reads the peer's slot (rank 1 reads its own)
 *   two-way      + both ranks read the peer's slot: the whole all-reduce
 * "two-way" is the floor the library is measured against. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { kBarrier, kCopy, kOneWay, kTwoWay };
static const char* const kNames[] = {"barrier", "copy", "one-way", "two-way"};

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static void bind_to(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  if (sched_setaffinity(0, sizeof s, &s) != 0) perror("shm_floor: sched_setaffinity");
}

/* One variant: both processes run `iters` steps; rank 0 returns the mean ns per step. */
static double run(int variant, char* shared, size_t bytes, long iters) {
  const size_t slot = (bytes + 4095) / 4096 * 4096;
  _Atomic unsigned* flag[2] = {(_Atomic unsigned*)shared, (_Atomic unsigned*)(shared + 64)};
  char* base[2] = {shared + 4096, shared + 4096 + 2 * slot};
  atomic_store(flag[0], 0);
  atomic_store(flag[1], 0);
  const pid_t pid = fork();
  if (pid < 0) {
    perror("shm_floor: fork");
    exit(1);
  }
  const int r = pid == 0;
  bind_to(r);
  const size_t n = bytes / sizeof(float);
  float* in = aligned_alloc(64, slot);
  float* out = aligned_alloc(64, slot);
  for (size_t i = 0; i < n; ++i) in[i] = (float)(i % 7);
  double t0 = 0;
  for (long it = -1000; it < iters; ++it) {
    if (it == 0) t0 = now_ns();
    float* mine = (float*)(base[r] + (it & 1) * slot);
    const float* peer = (const float*)(base[1 - r] + (it & 1) * slot);
    if (variant >= kCopy) memcpy(mine, in, bytes);
    atomic_fetch_add_explicit(flag[1 - r], 1, memory_order_release);
    while (atomic_load_explicit(flag[r], memory_order_acquire) == 0) __builtin_ia32_pause();
    atomic_fetch_sub_explicit(flag[r], 1, memory_order_relaxed);
    const float* other = variant == kTwoWay || (variant == kOneWay && r == 0) ? peer : mine;
    if (variant >= kOneWay)
      for (size_t i = 0; i < n; ++i) out[i] = (r == 0 ? mine[i] + other[i] : other[i] + mine[i]);
    __asm__ volatile("" ::: "memory");
  }
  const double per_step = (now_ns() - t0) / (double)iters;
  if (out[n / 2] < 0) puts("");  // keep the sums
  free(in);
  free(out);
  if (r == 1) _exit(0);
  waitpid(pid, NULL, 0);
  return per_step;
}

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? (size_t)strtoull(argv[1], NULL, 0) : 4096;
  const long iters = argc > 2 ? atol(argv[2]) : 200000;
  if (bytes < sizeof(float) || iters < 1) {
    fprintf(stderr, "usage: shm_floor [BYTES >= 4] [ITERS >= 1]\n");
    return 2;
  }
  const size_t slot = (bytes + 4095) / 4096 * 4096;
  char* shared =
      mmap(NULL, 4096 + 4 * slot, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    perror("shm_floor: mmap");
    return 1;
  }
  printf("# shm_floor: %zu bytes, 2 processes on CPUs 0 and 1, mean of %ld steps\n", bytes, iters);
  for (int v = kBarrier; v <= kTwoWay; ++v)
    printf("%-8s %8.0f ns\n", kNames[v], run(v, shared, bytes, iters));
  return 0;
}
