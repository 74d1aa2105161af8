#pragma once

// Backend registry internals shared by the core (memory.cpp, ops.cpp) and registry.cpp.

#include <memory>
#include <string>
#include <vector>

#include "symmem/backend.hpp"

namespace symmem::detail {

// The backend named `name`, loading its plugin on first use; nullptr (and `why`) when it cannot
// be loaded. Never throws for an unavailable backend.
std::shared_ptr<Backend> try_get_backend(const std::string& name, std::string* why);

// Backend names a user may select (the SYMMEM_BACKEND values other than "auto").
const std::vector<std::string>& known_backend_names();
// The backends loaded so far (loads none).
std::vector<std::shared_ptr<Backend>> loaded_backends();

// The backend "auto" picks for `device` buffers of `group` (NOTE [auto selection] in
// registry.cpp), with the reason in `why`. Never throws; the name may be of a backend that does
// not load (then allocating says why).
std::string auto_backend(const Group& group, Device device, std::string* why);

// NOTE [CPU buffers of a GPU backend]
// A backend chosen for the process (SYMMEM_BACKEND, select_backend()) or for one allocation
// (AllocOptions::backend) serves the device types it declares (Backend::serves). CPU buffers
// given to a backend that does not serve them -- a GPU program's host-side barrier or
// reductions -- go where auto sends them. GPU buffers are never rerouted: a backend that cannot
// serve them says why when asked to.
//
// The backend for `device` buffers of `group` when `chosen` was chosen for them: `chosen`, or
// auto's choice under the rule above; `why` (if given) is set only when it is rerouted, to say
// so. A `chosen` that does not load is returned as is (using it says why). Never throws.
std::string backend_for(const Group& group, Device device, const std::string& chosen,
                        std::string* why = nullptr);

// backend_for(group, device, resolve_backend(group, device)): the backend that serves `device`
// buffers of `group` under the process's selection. Throws as resolve_backend does.
std::string backend_for(const Group& group, Device device);

}  // namespace symmem::detail
