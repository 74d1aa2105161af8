// A program outside the project, built against the installed symmem.
#include <cstdio>

#include <symmem/symmem.hpp>

int main() {
  try {
    symmem::parse_dtype("nope");
  } catch (const symmem::Error& e) {
    if (e.code() != symmem::ErrorCode::InvalidArgument) return 1;
  }
  std::printf("consumer: symmem %s, f32 is %zu bytes\n", SYMMEM_VERSION_STRING,
              symmem::dtype_size(symmem::DType::f32));
  return 0;
}
