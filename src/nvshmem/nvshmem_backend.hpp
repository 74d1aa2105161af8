#pragma once

// The nvshmem backend (plugin libsymmem_nvshmem.so, relocatable device code, device-linked
// against libnvshmem_device.a). See NOTE [nvshmem world], NOTE [nvshmem allocation layout],
// NOTE [nvshmem collective launch] and the head of nvshmem_ops.cu.

#include <memory>
#include <string>

#include "symmem/backend.hpp"

namespace symmem::nvshm {

class NvshmemBackend final : public Backend {
 public:
  NvshmemBackend();
  ~NvshmemBackend() override;
  const char* name() const override { return "nvshmem"; }
  bool can_serve(const Group& group, Device device, std::string* why) const override;
  std::shared_ptr<BackendMemory> allocate(const Group& group, const RendezvousInfo& info) override;
  void run(const OpArgs& args) override;
  void* extension(const std::string& name) override;

 private:
  // Host-mapped record of all_to_all_v's device-side argument errors (5 x int64).
  long long* a2av_record();
  // Raises (and clears) what all_to_all_v's kernels recorded; after a synchronisation or from
  // the error query only, never before an op's launch (docs/design.md, "Stream-ordered errors").
  void raise_a2av_error(const char* op, int rank);
  void finish(const OpArgs& a, const char* op, int rank);
  static bool group_all_direct(const OpArgs& a);

 public:
  // The error query's entry (extension "raise_async_error"): the peer-pointer kernels' records
  // and this backend's all_to_all_v record.
  static void raise_async_errors(const Group& group, const char* op);
  // Whether run() takes the cuda backend's peer-pointer kernels (cuda_run_op) for this op: where
  // a refused op can be signalled to the peers (NOTE [refused ops]). May ask for the workspace.
  static bool runs_on_cuda_kernels(const OpArgs& a);

 private:
  void run_broadcast(const OpArgs& a);
  void run_all_to_all(const OpArgs& a);
  void run_all_to_all_v(const OpArgs& a);
  void run_put_get(const OpArgs& a);
  void run_team_collective(const OpArgs& a);

  long long* a2av_record_ = nullptr;
};

}  // namespace symmem::nvshm
