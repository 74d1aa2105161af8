#pragma once

// Services of the host backend for the host collectives (host_ops*.cpp).

#include "symmem/export.hpp"
#include "symmem/memory.hpp"

namespace symmem {

// Throws PeerFailure ("<op>: rank R: peer rank P (pid N) has exited while rank R waited on
// channel C of ...") when the process of any other rank of `buf`'s group has exited. Only for
// host-backend allocations (a no-op for others). Costs one poll() per peer: call it from long
// waits every ~50 ms, so that a killed rank is reported long before the deadline.
SYMMEM_API void host_check_peers_alive(const SymmetricMemory& buf, const char* op, int channel);

}  // namespace symmem
