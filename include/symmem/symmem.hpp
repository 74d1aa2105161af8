#pragma once

// Umbrella header of the symmem C++ API.
#include "symmem/backend.hpp"
#include "symmem/device_handle.hpp"
#include "symmem/env.hpp"
#include "symmem/error.hpp"
#include "symmem/group.hpp"
#include "symmem/memory.hpp"
#include "symmem/moe.hpp"
#include "symmem/ops.hpp"
#include "symmem/store.hpp"
#include "symmem/types.hpp"
#include "symmem/version.hpp"
