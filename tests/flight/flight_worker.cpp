// One rank of a flight-recorder scenario (tests/flight/flight_driver.py). Runs with
// SYMMEM_TRACE_DIR set:
//   stop N      : all_reduce in a loop; the last rank stops itself (SIGSTOP) right before its
//                 N-th all_reduce, so the others time out there and dump (on cuda: in the
//                 group barrier after their N-th, which waits for the GPU).
//   mismatch N  : N all_reduces agree, then rank 1 passes half the count in the next one (every
//                 rank refuses it: InvalidArgument), then a clean exit (the exit dumps show the
//                 disagreement).
//   ok N        : N all_reduces; then SIGUSR1 to itself, waiting (up to 2 s) for the dump it
//                 asks for ("SIGNAL-DUMP rank=<r>" once DIR/rank<r>.json says "signal"); then a
//                 clean exit (the exit dump replaces it).
// A third argument "cuda" puts the buffer on cuda:0 (SYMMEM_BACKEND=cuda, shared GPU): the ops
// are GPU kernels whose device times the dumps carry; its contents are left as they are. Exit 77
// with "WORKER rank=<r> skip=..." when the cuda backend cannot serve (no GPU).
// Prints "WORKER rank=<r> error=<ErrorCode>" when an op failed; exit 3 then, 0 otherwise.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <symmem/symmem.hpp>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s stop|mismatch|ok|abort N [cuda]\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  const int n = std::atoi(argv[2]);
  const bool gpu = argc > 3 && std::string(argv[3]) == "cuda";
  int rank = -1;
  try {
    auto g = symmem::Group::from_env();
    rank = g.rank();
    constexpr size_t kCount = 1024;
    symmem::SymmetricMemory buf;
    try {
      buf = symmem::allocate(g, kCount * sizeof(float),
                             gpu ? symmem::Device::cuda(0) : symmem::Device::cpu());
    } catch (const symmem::Error& e) {
      if (!gpu || (e.code() != symmem::ErrorCode::BackendUnavailable &&
                   e.code() != symmem::ErrorCode::Unsupported))
        throw;
      std::printf("WORKER rank=%d skip=%s\n", rank, e.what());
      std::fflush(stdout);
      return 77;
    }
    auto* mine = gpu ? nullptr : static_cast<float*>(buf.ptr(rank));
    for (int i = 1;; ++i) {
      if ((mode == "ok" && i > n) || (mode == "mismatch" && i > n + 1)) break;
      if (mode == "abort" && i > n) {
        // Every rank aborts its group (the dump is written then), and a later op fails at
        // entry with Aborted.
        g.abort("flight test abort");
        try {
          symmem::all_reduce(buf, kCount, symmem::DType::f32, symmem::ReduceOp::sum);
        } catch (const symmem::Error& e) {
          std::printf("WORKER rank=%d after-abort=%s\n", rank, symmem::to_string(e.code()));
        }
        break;
      }
      if (mode == "stop" && gpu && i > n) {
        // GPU ops return at launch: wait here (a device sync that times out) instead of
        // queueing kernels that would still run when the process exits.
        symmem::OpOptions on_gpu;
        on_gpu.device = symmem::Device::cuda(0);
        symmem::barrier(g, on_gpu);
        break;
      }
      if (mode == "stop" && i == n && rank == g.world_size() - 1) raise(SIGSTOP);
      size_t count = kCount;
      if (mode == "mismatch" && i == n + 1 && rank == 1) count = kCount / 2;
      for (size_t k = 0; mine != nullptr && k < count; ++k) mine[k] = 1.0f;
      try {
        symmem::all_reduce(buf, count, symmem::DType::f32, symmem::ReduceOp::sum);
      } catch (const symmem::Error& e) {
        if (mode != "mismatch") throw;
        // Every rank refuses the op (the counts are compared before it runs): go on to a clean
        // exit, so that every rank writes its exit dump.
        std::printf("WORKER rank=%d refused=%s\n", rank, symmem::to_string(e.code()));
      }
    }
    if (mode == "ok") {
      const char* dir = std::getenv("SYMMEM_TRACE_DIR");
      const std::string path =
          std::string(dir ? dir : ".") + "/rank" + std::to_string(rank) + ".json";
      raise(SIGUSR1);  // the recorder's handler: its thread writes the dump
      for (int t = 0; t < 200; ++t) {
        std::ifstream f(path);
        std::stringstream text;
        text << f.rdbuf();
        if (text.str().find("\"reason\": \"signal\"") != std::string::npos) {
          std::printf("SIGNAL-DUMP rank=%d\n", rank);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      std::fflush(stdout);
      buf.barrier();  // every rank has seen its signal dump before any exit dump
    }
  } catch (const symmem::Error& e) {
    std::printf("WORKER rank=%d error=%s (%s)\n", rank, symmem::to_string(e.code()), e.what());
    std::fflush(stdout);
    return 3;
  }
  return 0;
}
