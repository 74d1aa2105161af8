// Ops of the nccl backend. When every rank of the group is in this rank's LSA team, the buffers'
// LSA pointers are in the DeviceHandle tables and the cuda backend's peer-pointer kernels run
// unchanged (cuda_run_op). Otherwise the dense collectives go through NCCL's own collectives
// (which reach other hosts); ops that need load/store access to peers (put/get, all_to_all_v
// with device-side counts) are Unsupported there.

#include "core/log.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/peer_tables.hpp"
#include "cuda/timeout_record.hpp"
#include "nccl/nccl_backend.hpp"
#include "nccl/nccl_memory.hpp"
#include "nccl/nccl_util.hpp"

namespace symmem::nccl {
namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
// Rows with gpu 0 are not reduced by this backend (its rules); it moves them as bytes: no case.
#define SYMMEM_NCCL_TYPE_(id, value, size, dl, kind, gpu, suffix, ...) \
  SYMMEM_DTYPE_IF_##gpu(case DType::id : return nccl##suffix;)
    SYMMEM_DTYPES(SYMMEM_NCCL_TYPE_)
#undef SYMMEM_NCCL_TYPE_
    default:
      break;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::min:
      return ncclMin;
    case ReduceOp::max:
      return ncclMax;
  }
  return ncclSum;
}

}  // namespace

void NcclBackend::run(const OpArgs& args) {
  SYMMEM_INTERNAL_CHECK(args.group != nullptr);
  const Group& group = *args.group;
  auto comm = comm_for(group, args.device.index, to_string(args.kind));
  if (comm->all_lsa) {
    cuda_run_op(args);
  } else {
    run_nccl_fallback(args, *comm);
  }
  // A barrier on the null stream is synchronous, as on the cuda backend: after its own work it
  // raises a device-side timeout and what the device found in earlier ops (docs/design.md,
  // "Stream-ordered errors").
  if (args.kind == OpKind::barrier && args.stream == nullptr) {
    cuda::DeviceGuard guard(args.device.index);
    cuda::synchronize_and_raise("barrier", group.rank(), nullptr, args.timeout,
                                "barrier (GPU, group " + group.name() + ")",
                                cuda::abort_slot(group).slot);
  }
}

void NcclBackend::run_nccl_fallback(const OpArgs& a, Comm& c) {
  const char* op = to_string(a.kind);
  const int rank = c.rank;
  auto stream = static_cast<cudaStream_t>(a.stream);
  const ncclDataType_t type = nccl_type(a.dtype);
  const size_t esize = dtype_size(a.dtype);
  // Data movement goes as bytes, so it takes every dtype (NOTE [GPU dtypes] in
  // cuda/gpu_rules.hpp); reductions use the dtype's NCCL type.
  const size_t bytes = a.count * esize;
  SYMMEM_LOG(TRACE, COLL) << "nccl: " << op << " through NCCL collectives (peers outside the "
                          << "LSA team of " << c.lsa.n_ranks << ")";
  switch (a.kind) {
    case OpKind::all_reduce:
      SYMMEM_NCCL_CHECK(
          op, rank, c.comm,
          ncclAllReduce(a.send, a.recv, a.count, type, nccl_op(a.redop), c.comm, stream));
      return;
    case OpKind::reduce_scatter:
      SYMMEM_NCCL_CHECK(
          op, rank, c.comm,
          ncclReduceScatter(a.send, a.recv, a.count, type, nccl_op(a.redop), c.comm, stream));
      return;
    case OpKind::all_gather:
      SYMMEM_NCCL_CHECK(op, rank, c.comm,
                        ncclAllGather(a.send, a.recv, bytes, ncclUint8, c.comm, stream));
      return;
    case OpKind::broadcast:
      SYMMEM_NCCL_CHECK(op, rank, c.comm,
                        ncclBroadcast(a.send, a.recv, bytes, ncclUint8, a.root, c.comm, stream));
      return;
    case OpKind::all_to_all: {
      SYMMEM_NCCL_CHECK(op, rank, c.comm, ncclGroupStart());
      for (int p = 0; p < c.world; ++p) {
        const char* s = static_cast<const char*>(a.send) + p * bytes;
        char* r = static_cast<char*>(a.recv) + p * bytes;
        SYMMEM_NCCL_CHECK(op, rank, c.comm, ncclSend(s, bytes, ncclUint8, p, c.comm, stream));
        SYMMEM_NCCL_CHECK(op, rank, c.comm, ncclRecv(r, bytes, ncclUint8, p, c.comm, stream));
      }
      SYMMEM_NCCL_CHECK(op, rank, c.comm, ncclGroupEnd());
      return;
    }
    case OpKind::barrier: {
      // A one-element all-reduce on the workspace: every rank's stream waits for every rank.
      SymmetricMemory ws = a.workspace(sizeof(float));
      void* p = ws.ptr(ws.rank());
      SYMMEM_NCCL_CHECK(op, rank, c.comm,
                        ncclAllReduce(p, p, 1, ncclFloat32, ncclSum, c.comm, stream));
      return;
    }
    default:
      throw_error(ErrorCode::Unsupported, op, rank,
                  "nccl backend: " + std::string(op) +
                      " needs load/store access to every peer, but only " +
                      std::to_string(c.lsa.n_ranks) + " of the " + std::to_string(c.world) +
                      " ranks are in this rank's NCCL LSA team; the nvshmem backend serves it "
                      "across hosts");
  }
}

}  // namespace symmem::nccl
