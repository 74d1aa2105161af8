#include "nvshmem/nvshmem_backend.hpp"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstring>

#include "core/check.hpp"
#include "core/log.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/gpu_rules.hpp"
#include "nvshmem/nvshmem_memory.hpp"
#include "nvshmem/nvshmem_runtime.hpp"

namespace symmem::nvshm {

namespace {
std::atomic<NvshmemBackend*> g_live{nullptr};  // the plugin's instance, for raise_async_errors
}  // namespace

NvshmemBackend::~NvshmemBackend() {
  NvshmemBackend* self = this;
  g_live.compare_exchange_strong(self, nullptr, std::memory_order_acq_rel);
  if (a2av_record_ != nullptr) (void)cudaFreeHost(a2av_record_);
}

bool NvshmemBackend::can_serve(const Group& group, Device device, std::string* why) const {
  if (!cuda::cuda_device_visible("nvshmem", device, why)) return false;
  return Runtime::instance().can_allocate(group, why);
}

namespace {
// The ops this plugin has a path for (a case in its run); any other op is Unsupported here.
constexpr OpSet kOps =
    OpSet::of({OpKind::all_reduce, OpKind::reduce_scatter, OpKind::all_gather, OpKind::all_to_all,
               OpKind::all_to_all_v, OpKind::broadcast, OpKind::put, OpKind::get, OpKind::barrier});
}  // namespace

// These ops on GPU memory: the ones that move data for every dtype (their paths move bytes:
// putmem, fcollectmem, the cuda kernels), the reductions for the cuda kernels' dtypes (NOTE [GPU
// dtypes] in cuda/gpu_rules.hpp). NVSHMEM's own team reductions, used when a peer is not
// directly reachable, have no fp8 and say so when asked (they have f32, f64, f16, bf16, i32 and
// i64).
NvshmemBackend::NvshmemBackend() : Backend(cuda::gpu_rules(kOps)) {
  g_live.store(this, std::memory_order_release);
}

std::shared_ptr<BackendMemory> NvshmemBackend::allocate(const Group& group,
                                                        const RendezvousInfo& info) {
  const char* op = "allocate";
  std::string why;
  if (!can_serve(group, info.device, &why)) {
    throw_error(ErrorCode::Unsupported, op, group.rank(), "nvshmem backend: " + why);
  }
  Runtime::instance().ensure(group, info.device.index, op);
  return std::make_shared<NvshmemMemory>(group, info);
}

namespace {
// NOTE [refused ops]: only for the ops run() sends to the peer-pointer kernels.
void refuse_op_entry(const OpArgs& args, ErrorCode code) noexcept {
  cuda_refuse_op_routed(args, code, &NvshmemBackend::runs_on_cuda_kernels);
}
}  // namespace

// The peer-pointer kernels and device syncs it runs record like the cuda backend's (its own
// copy of them), and take a refused op's place where they run; the error query raises their
// records and its NVSHMEM all_to_all_v record.
void* NvshmemBackend::extension(const std::string& name) {
  if (name == kRaiseAsyncErrorExtension) return reinterpret_cast<void*>(&raise_async_errors);
  if (name == kRefuseOpExtension) return reinterpret_cast<void*>(&refuse_op_entry);
  return nullptr;
}

void NvshmemBackend::raise_async_errors(const Group& group, const char* op) {
  cuda_raise_async_errors(group, op);
  if (NvshmemBackend* b = g_live.load(std::memory_order_acquire))
    b->raise_a2av_error(op, group.valid() ? group.rank() : -1);
}

long long* NvshmemBackend::a2av_record() {
  if (a2av_record_ == nullptr) {
    void* p = nullptr;
    SYMMEM_CUDART_CHECK(
        "all_to_all_v", -1,
        cudaHostAlloc(&p, 8 * sizeof(long long), cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(p, 0, 8 * sizeof(long long));
    a2av_record_ = static_cast<long long*>(p);
  }
  return a2av_record_;
}

}  // namespace symmem::nvshm

extern "C" __attribute__((visibility("default"))) int symmem_plugin_abi_version() {
  return symmem::kPluginAbiVersion;
}

extern "C" __attribute__((visibility("default"))) symmem::Backend* symmem_plugin_create() {
  return new symmem::nvshm::NvshmemBackend();
}
