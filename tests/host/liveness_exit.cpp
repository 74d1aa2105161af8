// The liveness watcher at exit (NOTE [liveness watcher] in src/core/abort.hpp), run by
// tests/host/CMakeLists.txt through symmem-run -n 2 and a check of the marker file afterwards.
// Rank 1 leaves at once. Rank 0 watches the group with a slow abort hook (it stands for a
// backend's hook, which uses CUDA), waits until the watcher has noticed rank 1 and runs the
// hook, then calls exit(): exit must wait for the hook to finish (it writes the marker last),
// instead of tearing the process down under it. Without the guard the marker is missing.
//   liveness_exit MARKER

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "core/abort.hpp"
#include "symmem/group.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: liveness_exit MARKER\n");
    return 2;
  }
  const std::string marker = argv[1];
  symmem::Group g = symmem::Group::from_env();
  if (g.world_size() != 2) {
    std::fprintf(stderr, "liveness_exit: needs 2 ranks\n");
    return 2;
  }
  g.store_barrier();
  if (g.rank() == 1) return 0;
  std::shared_ptr<symmem::detail::AbortState> state = symmem::detail::abort_state(g);
  symmem::detail::add_abort_hook(*state, [marker] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::ofstream(marker) << "hook finished\n";
  });
  symmem::detail::watch_peer_liveness(g);
  // The watcher looks every 50 ms; it sets the state before it runs the hooks.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (symmem::detail::aborted_state(state.get()) == nullptr) {
    if (std::chrono::steady_clock::now() > until) {
      std::fprintf(stderr, "liveness_exit: the watcher did not notice rank 1 in 20 s\n");
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::exit(0);  // the hook is still sleeping: exit must wait for it
}
