// Built only while no src/cuda/cuda_ops*.cu exists (see CMakeLists.txt): the plugin still
// loads, and ops say clearly that the GPU collectives are not part of this build.
#include "core/check.hpp"
#include "cuda/cuda_ops.hpp"

void cuda_run_op(const symmem::OpArgs& args) {
  const int rank = args.group != nullptr ? args.group->rank() : -1;
  symmem::throw_error(symmem::ErrorCode::Unsupported, symmem::to_string(args.kind), rank,
                      "the cuda backend of this build has no GPU collectives (src/cuda/"
                      "cuda_ops*.cu missing); use the host backend for CPU buffers");
}
