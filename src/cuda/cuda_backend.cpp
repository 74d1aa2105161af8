// The cuda backend plugin (libsymmem_cuda.so): CUDA VMM memory shared between the processes of
// one host (cuda_memory.cpp), device-side sync (device_sync.cu) and the peer-pointer
// collectives (cuda_run_op). Loaded by libsymmem's registry; see include/symmem/backend.hpp.

#include <cuda_runtime_api.h>

#include <string>

#include "cuda/cuda_memory.hpp"
#include "cuda/cuda_moe.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/driver.hpp"
#include "cuda/gpu_rules.hpp"
#include "cuda/peer_tables.hpp"
#include "cuda/timeout_record.hpp"
#include "symmem/backend.hpp"
#include "symmem/error.hpp"

namespace symmem::cuda {
namespace {

class CudaBackend final : public Backend {
 public:
  // Every op on GPU memory: the ops that move data for every dtype, the reductions for the
  // dtypes its kernels reduce (NOTE [GPU dtypes] in gpu_rules.hpp).
  CudaBackend() : Backend(gpu_rules(OpSet::all())) {}
  const char* name() const override { return "cuda"; }

  bool can_serve(const Group& group, Device device, std::string* why) const override {
    auto fail = [&](const std::string& reason) {
      if (why != nullptr) *why = "cuda: " + reason;
      return false;
    };
    if (!device.is_cuda()) {
      return fail("serves GPU buffers only; " + to_string(device) +
                  " buffers are served by the host backend");
    }
    std::string reason;
    if (!driver_available(&reason)) return fail(reason);
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || device.index < 0 || device.index >= count) {
      return fail(to_string(device) + " does not exist here (" + std::to_string(count) +
                  " GPU(s) visible)");
    }
    if (!group.single_host()) {
      return fail(
          "every rank must be on one host (this group spans several hosts); use "
          "nvshmem or nccl across hosts");
    }
    return true;
  }

  std::shared_ptr<BackendMemory> allocate(const Group& group, const RendezvousInfo& info) override {
    return CudaMemory::create(group, info);
  }

  // Entry points for the core and tools (Backend::extension): the async error query, refused
  // ops (NOTE [refused ops]), the tuning signature, and the MoE dispatch/combine kernels
  // (src/core/moe_device.hpp).
  void* extension(const std::string& name) override {
    if (name == kRaiseAsyncErrorExtension) return reinterpret_cast<void*>(&cuda_raise_async_errors);
    if (name == kRefuseOpExtension) return reinterpret_cast<void*>(&cuda_refuse_op);
    if (name == kTuningSignatureExtension) return reinterpret_cast<void*>(&cuda_tuning_signature);
    if (name == detail::kMoeDeviceExtension)
      return const_cast<detail::MoeDeviceApi*>(moe_device_api());
    return nullptr;
  }

  void run(const OpArgs& args) override {
    const int rank = args.group != nullptr ? args.group->rank() : -1;
    const AbortSlot abort = args.group != nullptr ? abort_slot(*args.group) : AbortSlot{};
    raise_device_timeout(to_string(args.kind), rank, abort.slot);  // NOTE [timeout record]
    cuda_run_op(args);
    // A barrier on the null stream is synchronous, like SymmetricMemory::barrier there: after
    // its own work it raises its device-side timeout (a peer that never came) and what the
    // device found in earlier ops (NOTE [device-detected errors]; docs/design.md,
    // "Stream-ordered errors"). Other ops stay asynchronous.
    if (args.kind == OpKind::barrier && args.stream == nullptr) {
      DeviceGuard guard(args.device.index);
      synchronize_and_raise("barrier", rank, nullptr, args.timeout,
                            "barrier (GPU, group " + args.group->name() + ")", abort.slot);
    }
  }
};

}  // namespace
}  // namespace symmem::cuda

extern "C" __attribute__((visibility("default"))) int symmem_plugin_abi_version() {
  return symmem::kPluginAbiVersion;
}

// Throws BackendUnavailable (with the loader's or cuInit's message) where there is no usable
// driver; the registry reports it as the reason the cuda backend is unavailable.
extern "C" __attribute__((visibility("default"))) symmem::Backend* symmem_plugin_create() {
  (void)symmem::cuda::driver();
  return new symmem::cuda::CudaBackend();
}
