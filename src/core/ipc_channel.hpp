#pragma once

// IpcChannel: one Unix-domain socket per process, for passing file descriptors (SCM_RIGHTS)
// between ranks on one host.
//
// Where the socket lives:
//   - by default in the abstract namespace ("@symmem-<uid>-<128 random bits>"): nothing on the
//     filesystem, and the kernel drops the name when the process exits, even on SIGKILL;
//   - with SYMMEM_SOCKET_DIR set, in a private directory "<SYMMEM_SOCKET_DIR>/symmem-<random>"
//     created with mode 0700 (socket "ipc.sock" inside); socket and directory are removed by the
//     destructor and at exit (also after an error that unwinds or calls exit()).
// Both ends check credentials with SO_PEERCRED: the listener drops a connection from a process
// of another user (logged), and a sender refuses to hand fds to a listener of another user.
//
// Protocol: one connection per transfer; the sender writes a header, the tag and the payload, the
// fds ride along with the first bytes. Nothing waits for the receiver to accept: a transfer
// queues in the kernel until the receiver's recv_fds() picks it up.
//
// Errors: a peer whose socket is gone (connect refused / no such socket) is PeerFailure naming
// the peer; every call has a deadline (Timeout naming the tag and the peer).

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
  // The private directory holding the socket ("" in the abstract namespace).
  const std::string& directory() const;

  // Sends `fds` with a small payload (`tag` identifies the transfer, e.g.
  // "<group>/<alloc>/<src>-><dst>") to the process listening at `peer_address`. Returns once the
  // transfer is queued at the peer, or throws at the deadline.
  void send_fds(const std::string& peer_address, int peer_rank, const std::string& tag,
                const std::vector<int>& fds, const Bytes& payload, Millis timeout);
  // Receives the transfer with this `tag` (others that arrive first are kept for later calls).
  // The caller owns the returned fds. With `peer_pid` > 0 (a pid valid in this process's pid
  // namespace), a peer that exits while we wait is a PeerFailure well before the deadline.
  // `sender_pid` receives the sender's pid as SO_PEERCRED saw it (0 if not visible).
  std::vector<int> recv_fds(const std::string& tag, int peer_rank, Bytes* payload, Millis timeout,
                            int peer_pid = 0, int* sender_pid = nullptr);

  // The process-wide channel (created on first use; a forked child gets its own).
  static IpcChannel& instance(int rank);

  // Liveness of a process in this pid namespace (pidfd where the kernel has it, else kill(0)).
  // A zombie counts as dead. pid <= 0 or our own pid: true.
  static bool process_alive(int pid);
  // Identity of this process's pid namespace ("dev:ino" of /proc/self/ns/pid), so that ranks can
  // tell whether each other's pids mean anything here.
  static std::string pid_namespace();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace symmem
