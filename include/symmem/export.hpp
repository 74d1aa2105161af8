#pragma once

// SYMMEM_API marks what libsymmem exports; everything else is hidden.
#if defined(_WIN32)
#define SYMMEM_API
#else
#define SYMMEM_API __attribute__((visibility("default")))
#endif
