// symmem-store: runs a TcpStoreServer until SIGINT or SIGTERM.
//
//   symmem-store --host 10.0.0.1 --port 29500          # token from SYMMEM_STORE_TOKEN, if set
//   symmem-store --port 0                               # loopback, any free port (printed)
//
// Prints "symmem-store: listening on HOST:PORT" on stdout once the server accepts connections.

#include <signal.h>
#include <sys/resource.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "symmem/env.hpp"
#include "symmem/error.hpp"
#include "symmem/store.hpp"

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: symmem-store [--host HOST] [--port PORT] [--token TOKEN]\n"
               "  --host HOST    address to bind (default 127.0.0.1; 0.0.0.0 for all interfaces)\n"
               "  --port PORT    TCP port (default 29500; 0 picks a free one)\n"
               "  --token TOKEN  secret clients must present (default: $SYMMEM_STORE_TOKEN;\n"
               "                 prefer the variable: a command line is visible to other users)\n"
               "Runs until SIGINT or SIGTERM.\n");
}

bool parse_port(const char* s, uint16_t* port) {
  int v = -1;
  auto [p, ec] = std::from_chars(s, s + std::strlen(s), v);
  if (ec != std::errc() || *p != '\0' || v < 0 || v > 65535) return false;
  *port = static_cast<uint16_t>(v);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = "127.0.0.1";
  uint16_t port = 29500;
  std::string token;
  bool token_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "symmem-store: %s needs a value\n", name);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--host") {
      host = value("--host");
    } else if (a == "--port") {
      const char* v = value("--port");
      if (!parse_port(v, &port)) {
        std::fprintf(stderr, "symmem-store: --port '%s' is not a port number (0..65535)\n", v);
        return 2;
      }
    } else if (a == "--token") {
      token = value("--token");
      token_given = true;
    } else if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "symmem-store: unknown argument '%s'\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }

  // Block the stop signals in every thread (the server's thread inherits this mask); the main
  // thread collects them with sigwait and stops the server cleanly.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // Many clients: raise the open-file limit as far as allowed.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }

  try {
    if (!token_given) token = symmem::env::store_token();
    auto server = symmem::TcpStoreServer::start(host, port, token);
    std::printf("symmem-store: listening on %s:%u%s\n", server->host().c_str(), server->port(),
                token.empty() ? " (no token: any local process can connect)" : "");
    std::fflush(stdout);
    int sig = 0;
    while (sigwait(&stop_signals, &sig) != 0) {
    }
    std::printf("symmem-store: %s received, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    std::fflush(stdout);
    server->stop();
  } catch (const symmem::Error& e) {
    std::fprintf(stderr, "symmem-store: %s\n", e.what());
    return 1;
  }
  return 0;
}
