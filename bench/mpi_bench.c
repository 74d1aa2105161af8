/* Open MPI counterpart of symmem-bench, for bench/mpi_compare.sh.
 *   mpirun -n 2 mpi_bench [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [--op OP]
 *   mpi_bench --memcpy [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS]   (one process, no MPI)
 * Sizes are bytes per rank with the same shapes as symmem-bench (f32 elements):
 *   all_reduce: MPI_Allreduce of size/4 floats (sum)
 *   reduce_scatter: MPI_Reduce_scatter_block, send = size (n blocks), recv = size/n
 *   all_gather: MPI_Allgather, recv = size (n blocks of size/n)
 *   all_to_all: MPI_Alltoall, send = recv = size (n blocks)
 *   broadcast: MPI_Bcast of size bytes from rank 0
 * Prints one line per size: "<op> <bytes> <time_us> <algbw_GBps> <median_us>" (time: slowest
 * rank, mean over ITERS; median: of that rank's iterations, each timed alone, as symmem-bench's
 * med(us) column is). --memcpy prints "memcpy <bytes> <time_us> <GBps>" (bytes copied / time). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static size_t parse_size(const char* s) {
  char* end = NULL;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k')
    v *= 1024;
  else if (*end == 'M' || *end == 'm')
    v *= 1024 * 1024;
  else if (*end == 'G' || *end == 'g')
    v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}

static const char* kOps[] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all",
                             "broadcast"};

int main(int argc, char** argv) {
  size_t minb = 4, maxb = 16 << 20;
  double factor = 4;
  int iters = 20, warmup = 5, memcpy_mode = 0;
  const char* op = "all_reduce";
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "-b") && i + 1 < argc)
      minb = parse_size(argv[++i]);
    else if (!strcmp(argv[i], "-e") && i + 1 < argc)
      maxb = parse_size(argv[++i]);
    else if (!strcmp(argv[i], "-f") && i + 1 < argc)
      factor = atof(argv[++i]);
    else if (!strcmp(argv[i], "-n") && i + 1 < argc)
      iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-w") && i + 1 < argc)
      warmup = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--op") && i + 1 < argc)
      op = argv[++i];
    else if (!strcmp(argv[i], "--memcpy"))
      memcpy_mode = 1;
    else {
      fprintf(stderr, "mpi_bench: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (factor <= 1 || iters < 1) return 2;

  if (memcpy_mode) {
    char* a = aligned_alloc(4096, maxb);
    char* b = aligned_alloc(4096, maxb);
    memset(a, 1, maxb);
    memset(b, 2, maxb);
    for (double s = minb; s <= maxb * 1.0000001; s *= factor) {
      size_t n = (size_t)s;
      for (int i = 0; i < warmup; ++i) memcpy(b, a, n);
      double t0 = now_us();
      for (int i = 0; i < iters; ++i) memcpy(i & 1 ? a : b, i & 1 ? b : a, n);
      double t = (now_us() - t0) / iters;
      printf("memcpy %zu %.3f %.4f\n", n, t, n / (t * 1e3));
    }
    free(a);
    free(b);
    return 0;
  }

  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int known = 0;
  for (size_t k = 0; k < sizeof(kOps) / sizeof(kOps[0]); ++k) known |= !strcmp(op, kOps[k]);
  if (!known) {
    if (rank == 0) fprintf(stderr, "mpi_bench: unknown --op %s\n", op);
    MPI_Finalize();
    return 2;
  }
  float* send = aligned_alloc(4096, maxb + 4096);
  float* recv = aligned_alloc(4096, maxb + 4096);
  for (size_t i = 0; i < maxb / 4; ++i) send[i] = (float)(i % 9) - 4.0f;
  memset(recv, 0, maxb);
  double* durations = malloc(sizeof(double) * (size_t)(iters > 0 ? iters : 1));
  for (double s = minb; s <= maxb * 1.0000001; s *= factor) {
    size_t elems = (size_t)s / 4, blk = elems / n;
    int is_blocked = strcmp(op, "all_reduce") && strcmp(op, "broadcast");
    if ((is_blocked ? blk : elems) == 0) continue;
    size_t bytes = is_blocked ? blk * n * 4 : elems * 4;
    double t_prev = 0;
    for (int it = -warmup; it < iters; ++it) {
      static double t0;
      if (it == 0) {
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = now_us();
        t_prev = t0;
      }
      if (!strcmp(op, "all_reduce"))
        MPI_Allreduce(send, recv, (int)elems, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (!strcmp(op, "reduce_scatter"))
        MPI_Reduce_scatter_block(send, recv, (int)blk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (!strcmp(op, "all_gather"))
        MPI_Allgather(send, (int)blk, MPI_FLOAT, recv, (int)blk, MPI_FLOAT, MPI_COMM_WORLD);
      else if (!strcmp(op, "all_to_all"))
        MPI_Alltoall(send, (int)blk, MPI_FLOAT, recv, (int)blk, MPI_FLOAT, MPI_COMM_WORLD);
      else
        MPI_Bcast(rank == 0 ? send : recv, (int)elems, MPI_FLOAT, 0, MPI_COMM_WORLD);
      if (it >= 0) {
        const double t_now = now_us();
        durations[it] = t_now - t_prev;
        t_prev = t_now;
      }
      if (it == iters - 1) {
        struct {
          double t;
          int rank;
        } mine = {(t_prev - t0) / iters, rank}, slowest;
        MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
        qsort(durations, (size_t)iters, sizeof(double), cmp_double);
        double med = durations[iters / 2];
        MPI_Bcast(&med, 1, MPI_DOUBLE, slowest.rank, MPI_COMM_WORLD);
        if (rank == 0)
          printf("%s %zu %.3f %.4f %.3f\n", op, bytes, slowest.t, bytes / (slowest.t * 1e3), med);
      }
    }
  }
  fflush(stdout);
  free(durations);
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
