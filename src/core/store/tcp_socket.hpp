#pragma once

// Socket helpers shared by the TCP store server (tcp_server.cpp) and its client
// (tcp_client.cpp).

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "core/store/store.hpp"

namespace symmem::tcp {

using detail::Clock;

// Bytes a connection reads with one recv().
inline constexpr size_t kRecvChunk = 256u << 10;

inline std::string errno_text(int err) {
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

inline void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Milliseconds left until `deadline`, rounded up, for poll()/epoll_wait() (0 once passed).
inline int ms_until(Clock::time_point deadline) {
  auto now = Clock::now();
  if (deadline <= now) return 0;
  auto ms = std::chrono::duration_cast<Millis>(deadline - now).count() + 1;
  return static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

}  // namespace symmem::tcp
