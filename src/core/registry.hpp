#pragma once

// Backend registry internals shared by memory.cpp and registry.cpp.

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

// The backend "auto" picks for `device` buffers of `group` (NOTE [auto selection] in
// registry.cpp), with the reason in `why`. Never throws; the name may be of a backend that does
// not load (then allocating says why).
std::string auto_backend(const Group& group, Device device, std::string* why);

}  // namespace symmem::detail
