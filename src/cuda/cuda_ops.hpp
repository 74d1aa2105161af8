#pragma once

// Entry point of the peer-pointer GPU collectives (src/cuda/kernels/, src/cuda/cuda_ops.cu). The
// cuda backend's run() calls it after the core's validation; the nccl and nvshmem plugins call it
// for ops whose peers are all directly reachable. Runs on args.stream; throws symmem::Error. An
// error that an earlier op detected on the device is raised by the synchronising calls and the
// error query, never by an asynchronous op (NOTE [device-detected errors] in cuda_ops.cu). An op
// it refuses before its kernel was launched is signalled to the peers on the device (NOTE
// [refused ops] in kernels/refuse.cu).

#include <string_view>

#include "symmem/backend.hpp"
#include "symmem/error.hpp"

void cuda_run_op(const symmem::OpArgs& args);

// Backend::extension(kRefuseOpExtension) of the plugins whose GPU collectives are
// cuda_run_op's: the core refused `args` (this rank's arguments, with `code`), so the refuse
// kernel takes the op's place where the peers' kernels will meet it (NOTE [refused ops]).
void cuda_refuse_op(const symmem::OpArgs& args, symmem::ErrorCode code) noexcept;
// The same for a backend that runs only some ops on these kernels: `route(args)`, asked once the
// group's workspace is known to exist (args.workspace(n) then allocates nothing), says whether
// the peers run this op on them.
void cuda_refuse_op_routed(const symmem::OpArgs& args, symmem::ErrorCode code,
                           bool (*route)(const symmem::OpArgs& args)) noexcept;

// Raises (and clears) a device-detected op error of this plugin's earlier GPU ops of the group
// with abort slot `abort_slot` (-1: the groups without one; NOTE [device-detected errors]);
// returns when there is none. For the calls that synchronise.
void cuda_raise_op_error(std::string_view op, int rank, int32_t abort_slot);

// The plugin's Backend::extension(kRaiseAsyncErrorExtension) (Group::check_async_error): raises
// a device-side timeout or abort record and a device-detected op error of this plugin's earlier
// GPU ops, without waiting.
void cuda_raise_async_errors(const symmem::Group& group, const char* op);

// This machine's signature for the GPU collectives' tuning entries (NOTE [tuning file]):
// "gpu=<name>;sms=<SMs>;gpus=<visible GPUs>;ranks_per_gpu=<k>;p2p=<pairs>", the GPU model and
// count, how many of `group`'s local ranks share a GPU, and which GPU pairs have peer access
// (NVLink/PCIe performance rank). The plugin's Backend::extension(kTuningSignatureExtension).
int cuda_tuning_signature(const symmem::Group& group, int device, char* buf, size_t len);
