"""symmem: symmetric memory across processes and GPUs.

Every rank of a group allocates the same buffer; after a rendezvous each rank can load and store
into every peer's buffer directly, with a signal pad per rank for synchronisation. On top come
collectives (all_reduce, reduce_scatter, all_gather, all_to_all, all_to_all_v, broadcast),
one-sided put/get and barrier.

    import numpy as np, symmem
    g = symmem.Group.from_env()                  # symmem-run, torchrun, mpirun or srun
    b = symmem.empty((1024,), dtype="float32", group=g)
    np.from_dlpack(b)[:] = g.rank + 1            # zero copy: the same memory
    symmem.all_reduce(b, op="sum")               # in place

Arrays: symmem.empty() returns a SymmetricArray, which numpy/torch/CuPy/JAX import without a copy
through DLPack (``numpy.from_dlpack(b)``, ``torch.from_dlpack(b)``); ``b.peer(p)`` shows peer p's
buffer the same way, ``b.signal_pad(p)`` its signal pad. The ops accept any DLPack-capable array:
memory inside a symmetric allocation is used in place, anything else is copied through the
group's symmetric workspace.

Groups: an op uses its ``group`` argument, else the group of its first symmetric argument, else
the default group (the first Group.from_env(), or set_default_group()).

Streams (GPU arrays): ``stream`` is an int (cudaStream_t), an object with ``__cuda_stream__`` or
``cuda_stream`` (torch.cuda.Stream, ...), or None: torch's current stream when torch is imported,
else the legacy default stream. Timeouts are seconds or datetime.timedelta (None:
SYMMEM_TIMEOUT_MS). Blocking calls release the GIL.

Errors: every failure raises a subclass of symmem.Error (``.code`` is a symmem.ErrorCode):
InvalidArgument (also ValueError), Unsupported (also NotImplementedError), Timeout (also
TimeoutError), PeerFailure (also ConnectionError), BackendUnavailable, SystemFailure (also
OSError), CudaError, InternalError.

PyTorch: ``import symmem.torch`` registers the ops as torch.library custom ops (``torch.ops.symmem``)
that torch.compile traces, and ``symmem.torch.group_from_process_group()``.
"""

from . import _C
from ._C import (
    BackendUnavailable,
    CudaError,
    Device,
    DeviceHandle,
    Error,
    ErrorCode,
    FileStore,
    Group,
    HashStore,
    InternalError,
    InvalidArgument,
    PeerFailure,
    PythonStore,
    Store,
    SymmetricArray,
    SymmetricMemory,
    SystemFailure,
    TcpStore,
    TcpStoreServer,
    Timeout,
    Unsupported,
    __version__,
    all_gather,
    all_reduce,
    all_to_all,
    all_to_all_v,
    allocate,
    available_backends,
    barrier,
    broadcast,
    default_group,
    empty,
    get,
    put,
    reduce_scatter,
    resolve_backend,
    select_backend,
    set_default_group,
    settings,
)

__all__ = [
    "BackendUnavailable",
    "CudaError",
    "Device",
    "DeviceHandle",
    "Error",
    "ErrorCode",
    "FileStore",
    "Group",
    "HashStore",
    "InternalError",
    "InvalidArgument",
    "PeerFailure",
    "PythonStore",
    "Store",
    "SymmetricArray",
    "SymmetricMemory",
    "SystemFailure",
    "TcpStore",
    "TcpStoreServer",
    "Timeout",
    "Unsupported",
    "__version__",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "all_to_all_v",
    "allocate",
    "available_backends",
    "barrier",
    "broadcast",
    "default_group",
    "empty",
    "get",
    "put",
    "reduce_scatter",
    "resolve_backend",
    "select_backend",
    "set_default_group",
    "settings",
    "zeros",
]


def zeros(shape, dtype="float32", device="cpu", group=None, backend=None):
    """Like empty(), filled with zeros on this rank (then a barrier, so peers see zeros too).

    CPU arrays are zeroed with numpy; GPU arrays need torch (or use empty() and zero it
    yourself).
    """
    a = empty(shape, dtype=dtype, device=device, group=group, backend=backend)
    if a.nbytes:
        raw = a.handle.array((a.nbytes,), "uint8")  # any dtype, bfloat16 included
        if a.device == "cpu":
            import numpy as np

            np.from_dlpack(raw)[:] = 0
        else:
            import torch

            torch.from_dlpack(raw).zero_()
            torch.cuda.synchronize(torch.device(a.device))
    a.barrier()
    return a
