#pragma once

// IpcChannel: one Unix-domain socket per process, for passing file descriptors (SCM_RIGHTS)
// between ranks on one host. The socket lives in a private per-user directory (mode 0700, name
// not guessable) under SYMMEM_SOCKET_DIR / XDG_RUNTIME_DIR / /tmp; peers are checked with
// SO_PEERCRED and a process of another user is refused. Socket and directory are removed on
// close, also after an error. A peer that vanishes is a PeerFailure naming it.

#include <memory>
#include <string>
#include <vector>

#include "symmem/export.hpp"
#include "symmem/store.hpp"

namespace symmem {

class SYMMEM_API IpcChannel {
 public:
  // Creates this process's listening socket. `rank` only labels errors and logs.
  explicit IpcChannel(int rank);
  ~IpcChannel();
  IpcChannel(const IpcChannel&) = delete;
  IpcChannel& operator=(const IpcChannel&) = delete;

  // Address peers connect to (a path, or "@name" for the abstract namespace).
  const std::string& address() const;

  // Sends `fds` with a small payload (`tag` identifies the transfer, e.g. "<group>/<alloc>/<src>")
  // to the process listening at `peer_address`. Blocks until delivered or the deadline.
  void send_fds(const std::string& peer_address, int peer_rank, const std::string& tag,
                const std::vector<int>& fds, const Bytes& payload, Millis timeout);
  // Receives the transfer with this `tag` (others that arrive first are kept for later calls).
  // The caller owns the returned fds.
  std::vector<int> recv_fds(const std::string& tag, int peer_rank, Bytes* payload, Millis timeout);

  // The process-wide channel (created on first use).
  static IpcChannel& instance(int rank);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace symmem
