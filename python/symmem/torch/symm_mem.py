"""torch.distributed._symmetric_memory's surface on symmem.

A program written for PyTorch's symmetric memory runs on symmem by changing its import line:

    import symmem.torch.symm_mem as symm_mem        # was: torch.distributed._symmetric_memory
    t = symm_mem.empty(4096, device="cpu")           # CPU tensors too (host backend)
    hdl = symm_mem.rendezvous(t, dist.group.WORLD)   # or its group_name
    peer = hdl.get_buffer((hdl.rank + 1) % hdl.world_size, (4096,), torch.float32)
    hdl.barrier(channel=0)
    torch.ops.symm_mem.one_shot_all_reduce(t, "sum", dist.group.WORLD.group_name)

Importing this module registers symmem's kernels for the ``torch.ops.symm_mem`` ops that it
provides (docs/torch.md lists them against torch's names): on the CPU, where torch has none, and
on CUDA (where torch sees a GPU) for tensors in symmem memory only: other tensors, those of torch's
own symmetric memory among them, still reach torch's kernels. Where torch lacks an op it is defined with torch's schema.

Groups are torch process groups, their ``group_name``, or symmem Groups. Allocation differs from
torch's in one way: ``empty()`` is collective over the default group (every rank of the job calls
it, in the same order), because symmem maps peer memory at allocation. A tensor allocated over the
whole job can then be rendezvoused with any subgroup; ops over a subgroup read such tensors
through the subgroup's workspace (a copy), tensors allocated over the subgroup itself in place.
Errors are symmem's (symmem.InvalidArgument is also a ValueError, symmem.Timeout a TimeoutError).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

import symmem as _symmem
from symmem import torch as _st

__all__ = [
    "empty", "enable_symm_mem_for_group", "get", "get_backend", "get_mem_pool",
    "get_mempool_allocator", "get_signal_pad_size", "get_symm_mem_workspace",
    "is_nvshmem_available", "is_symm_mem_enabled_for_group", "is_symm_mem_tensor", "put_signal",
    "rendezvous", "set_backend", "set_signal_pad_size", "wait_signal",
]


def _invalid(fn: str, arg: str, what: str, rank: Optional[int] = None) -> _symmem.InvalidArgument:
    where = f" (rank {rank})" if rank is not None else ""
    return _symmem.InvalidArgument(f"symm_mem.{fn}: argument '{arg}' {what}{where}")


# ---- groups ------------------------------------------------------------------------------------
# The torch global ranks of each symmem group's members: subgroup handles map their ranks onto an
# allocation's group through them.
_torch_ranks: dict = {}
_by_torch_name: dict[str, _symmem.Group] = {}


def _dist():
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def _from_process_group(pg) -> _symmem.Group:
    dist = _dist()
    g = _st.group_from_process_group(pg)
    if g not in _torch_ranks:
        _torch_ranks[g] = tuple(dist.get_process_group_ranks(pg))
        _by_torch_name[pg.group_name] = g
    return g


def _default_group() -> _symmem.Group:
    g = _symmem.default_group()
    if g is not None:
        return g
    dist = _dist()
    if dist is not None:
        return _from_process_group(dist.group.WORLD)
    return _symmem.Group.from_env()  # symmem-run, torchrun without init_process_group, mpirun


def _group(group, fn: str) -> _symmem.Group:
    """A symmem Group for torch's `group` argument: a ProcessGroup, a group name, a Group."""
    if group is None:
        return _default_group()
    if isinstance(group, _symmem.Group):
        return group
    if isinstance(group, str):
        if group in _by_torch_name:
            return _by_torch_name[group]
        if group in _st._groups:
            return _st._groups[group]
        dist = _dist()
        if dist is None:
            raise _invalid(fn, "group", f"= '{group}' names no symmem group and "
                           "torch.distributed is not initialised")
        try:
            pg = dist.distributed_c10d._resolve_process_group(group)
        except (ValueError, RuntimeError, KeyError) as e:
            raise _invalid(fn, "group", f"= '{group}' is not a process group name ({e})") from None
        return _from_process_group(pg)
    dist = _dist()
    if dist is not None and isinstance(group, dist.ProcessGroup):
        return _from_process_group(group)
    raise _invalid(fn, "group", f"is a {type(group).__name__}; pass a ProcessGroup, its "
                   "group_name or a symmem.Group")


def _ranks(g: _symmem.Group) -> tuple:
    return _torch_ranks.get(g) or tuple(g.global_ranks)


# ---- memory ------------------------------------------------------------------------------------
def _extent(t: torch.Tensor) -> int:
    if t.is_contiguous():  # the common case, without a loop over the dimensions
        return t.numel() * t.element_size()
    if t.numel() == 0:
        return 0
    return (sum((s - 1) * st for s, st in zip(t.shape, t.stride())) + 1) * t.element_size()


def _memory(t: torch.Tensor):
    """(SymmetricMemory of the whole allocation, byte offset of t in it), or None."""
    return _symmem.find_memory(t.data_ptr(), _extent(t)) if isinstance(t, torch.Tensor) else None


def _placement(t: torch.Tensor, g: Optional[_symmem.Group] = None) -> int:
    """-1: t is not in symmem memory; 1: it is, over g (any group when g is None); 0: over
    another group. What every op asks of its tensors, without building _memory's handle."""
    return _symmem.memory_placement(t.data_ptr(), _extent(t), g)


def is_symm_mem_tensor(tensor: torch.Tensor) -> bool:
    """True if `tensor` lies in symmem symmetric memory of this process (no communication)."""
    return isinstance(tensor, torch.Tensor) and _placement(tensor) > 0


_signal_pad_size: Optional[int] = None


def set_signal_pad_size(size: int) -> None:
    """Bytes of the signal pad of allocations made from now on (SYMMEM_SIGNAL_PAD_BYTES)."""
    global _signal_pad_size
    if size < 64 or size % 4:
        raise _invalid("set_signal_pad_size", "size", f"= {size} must be a multiple of 4, >= 64")
    _signal_pad_size = int(size)


def get_signal_pad_size() -> int:
    if _signal_pad_size is not None:
        return _signal_pad_size
    for s in _symmem.settings():
        if s["name"] == "SYMMEM_SIGNAL_PAD_BYTES":
            import os

            return int(os.environ.get(s["name"]) or s["default"])
    raise _symmem.InternalError("SYMMEM_SIGNAL_PAD_BYTES is not among symmem.settings()")


def _device_name(device) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda:{device.index if device.index is not None else torch.cuda.current_device()}"
    if device.type != "cpu":
        raise _invalid("empty", "device", f"= {device}: symmem has cpu and cuda memory")
    return "cpu"


def _allocate(group: _symmem.Group, size: Sequence[int], dtype: torch.dtype,
              device) -> torch.Tensor:
    name = _device_name(device)
    nbytes = math.prod(size) * dtype.itemsize
    mem = _symmem.allocate(group, max(nbytes, 1), name, signal_pad_bytes=_signal_pad_size or 0)
    _st.register_group(group)
    return torch.from_dlpack(mem.array(tuple(size), _st._dtype_name(dtype)))


def empty(*size, dtype: Optional[torch.dtype] = None, device=None) -> torch.Tensor:
    """Like torch.empty(): a tensor over new symmetric memory, collective over the default group
    (the group of torch.distributed's WORLD once it is initialised)."""
    if len(size) == 1 and isinstance(size[0], Sequence):
        size = tuple(size[0])
    size = tuple(int(s) for s in size)
    if any(s < 0 for s in size):
        raise _invalid("empty", "size", f"= {size} has a negative dimension")
    return _allocate(_default_group(), size, dtype or torch.get_default_dtype(),
                     device if device is not None else torch.get_default_device())


# ---- the handle --------------------------------------------------------------------------------
def _timeout(timeout_ms: int):
    return None if not timeout_ms else timeout_ms / 1000.0


class _SymmetricMemory:
    """What rendezvous() returns: the allocation seen by the ranks of one group.

    `rank`, `world_size` and every peer argument are ranks of that group. buffer_ptrs are the
    bases of the peers' allocations, `offset` is the rendezvoused tensor's byte offset in them."""

    def __init__(self, mem: _symmem.SymmetricMemory, offset: int, group: _symmem.Group,
                 peers: list[int]):
        self._mem, self._offset, self._group, self._peers = mem, offset, group, peers
        self._ptr_tables: dict[str, torch.Tensor] = {}

    # -- identity
    @property
    def rank(self) -> int:
        return self._group.rank

    @property
    def world_size(self) -> int:
        return self._group.world_size

    @property
    def handle(self) -> _symmem.SymmetricMemory:
        """symmem's handle of the whole allocation (its ranks are the allocation group's)."""
        return self._mem

    @property
    def group(self) -> _symmem.Group:
        return self._group

    @property
    def device(self) -> torch.device:
        d = self._mem.device
        return torch.device("cpu") if d.type == "cpu" else torch.device("cuda", d.index)

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def buffer_size(self) -> int:
        return self._mem.size

    @property
    def signal_pad_size(self) -> int:
        return self._mem.signal_pad_bytes

    @property
    def multicast_ptr(self) -> int:
        return 0  # no multicast object (NVLink SHARP): see docs/torch.md

    # -- pointers
    @property
    def buffer_ptrs(self) -> list[int]:
        return [self._mem.ptr(p) for p in self._peers]

    @property
    def signal_pad_ptrs(self) -> list[int]:
        return [self._mem.signal_pad_ptr(p) for p in self._peers]

    def _table(self, name: str, ptrs: list[int]) -> int:
        # An int64 array of the pointers on the memory's device, kept with the handle.
        if name not in self._ptr_tables:
            self._ptr_tables[name] = torch.tensor(ptrs, dtype=torch.int64, device=self.device)
        return self._ptr_tables[name].data_ptr()

    @property
    def buffer_ptrs_dev(self) -> int:
        return self._table("buffers", self.buffer_ptrs)

    @property
    def signal_pad_ptrs_dev(self) -> int:
        return self._table("pads", self.signal_pad_ptrs)

    def _peer(self, rank: int, fn: str, arg: str = "rank") -> int:
        if not 0 <= rank < self.world_size:
            raise _invalid(fn, arg, f"= {rank} is out of range [0, {self.world_size})", self.rank)
        return self._peers[rank]

    # -- tensors over peers' memory
    def get_buffer(self, rank: int, sizes: Sequence[int], dtype: torch.dtype,
                   storage_offset: int = 0) -> torch.Tensor:
        """Rank `rank`'s buffer as a tensor of `sizes` and `dtype`, from element `storage_offset`
        of the allocation (loads and stores reach that rank's memory)."""
        peer = self._peer(rank, "get_buffer")
        sizes = (sizes,) if isinstance(sizes, int) else tuple(sizes)
        item = dtype.itemsize
        start, nbytes = storage_offset * item, math.prod(sizes) * item
        if storage_offset < 0 or start + nbytes > self.buffer_size:
            raise _invalid("get_buffer", "sizes",
                           f"= {list(sizes)} of {dtype} at storage_offset {storage_offset} need "
                           f"{start + nbytes} bytes; the buffer has {self.buffer_size}", self.rank)
        a = self._mem.array(sizes, _st._dtype_name(dtype), start)
        return torch.from_dlpack(a if peer == self._mem.rank else a.peer(peer))

    def get_remote_tensor(self, peer: int, sizes: Sequence[int], dtype: torch.dtype):
        """Peer's memory at this handle's offset as a tensor of `sizes` and `dtype`."""
        item = dtype.itemsize
        if self._offset % item:
            raise _invalid("get_remote_tensor", "dtype", f"{dtype} does not divide the handle's "
                           f"offset {self._offset}", self.rank)
        return self.get_buffer(peer, sizes, dtype, self._offset // item)

    def get_signal_pad(self, rank: int, sizes: Sequence[int] = (), dtype: Optional[torch.dtype] = None,
                       storage_offset: int = 0) -> torch.Tensor:
        """Rank `rank`'s signal pad: all of it as uint32 by default, else `sizes` elements of
        `dtype` from element `storage_offset` (empty `sizes`: the rest of the pad)."""
        peer = self._peer(rank, "get_signal_pad")
        dtype = dtype or torch.uint32
        sizes = (sizes,) if isinstance(sizes, int) else tuple(sizes)
        if not sizes:
            item = dtype.itemsize
            sizes = (self.signal_pad_size // item - storage_offset,)
        return torch.from_dlpack(
            self._mem.signal_pad(peer, list(sizes), _st._dtype_name(dtype), storage_offset))

    # -- synchronisation (the pad slots are the allocation's)
    def barrier(self, channel: int = 0, timeout_ms: int = 0) -> None:
        if len(self._peers) == self._mem.world_size:
            self._mem.barrier(channel, _timeout(timeout_ms))
            return
        for r in range(self.world_size):  # a subgroup: signal every member, then wait for them
            if r != self.rank:
                self._mem.put_signal(self._peers[r], channel, _timeout(timeout_ms))
        for r in range(self.world_size):
            if r != self.rank:
                self._mem.wait_signal(self._peers[r], channel, _timeout(timeout_ms))

    def put_signal(self, dst_rank: int, channel: int = 0, timeout_ms: int = 0) -> None:
        self._mem.put_signal(self._peer(dst_rank, "put_signal", "dst_rank"), channel,
                             _timeout(timeout_ms))

    def wait_signal(self, src_rank: int, channel: int = 0, timeout_ms: int = 0) -> None:
        self._mem.wait_signal(self._peer(src_rank, "wait_signal", "src_rank"), channel,
                              _timeout(timeout_ms))

    # -- NVSHMEM's signals (symmem extras)
    def signal_op(self, peer: int, slot: int, value: int, op: str = "set") -> None:
        self._mem.signal_op(self._peer(peer, "signal_op", "peer"), slot, value, op)

    def wait_until(self, slot: int, cmp: str, value: int, timeout_ms: int = 0) -> int:
        return self._mem.wait_until(slot, cmp, value, _timeout(timeout_ms))

    def __repr__(self) -> str:
        return (f"symm_mem._SymmetricMemory(rank={self.rank}/{self.world_size}, "
                f"buffer_size={self.buffer_size}, offset={self._offset}, "
                f"backend={self._mem.backend})")


_handles: dict = {}


def rendezvous(tensor: torch.Tensor, group=None) -> _SymmetricMemory:
    """The handle of `tensor`'s symmetric memory over `group` (a ProcessGroup, its group_name or a
    symmem.Group; None: the group the memory was allocated over). Collective over the group the
    first time (a store barrier); later calls return the same handle."""
    found = _memory(tensor)
    if found is None:
        raise _invalid("rendezvous", "tensor", "is not in symmetric memory: allocate it with "
                       "symm_mem.empty() (or a view of such a tensor)")
    mem, offset = found
    g = mem.group if group is None else _group(group, "rendezvous")
    key = (mem.alloc_id, g.name, offset)
    hdl = _handles.get(key)
    if hdl is not None and hdl._mem.valid and hdl._group == g:
        return hdl
    if g == mem.group:
        peers = list(range(g.world_size))
    else:
        mine = _ranks(mem.group)
        theirs = _ranks(g)
        missing = [r for r in theirs if r not in mine]
        if missing:
            raise _invalid("rendezvous", "group", f"has ranks {missing} that the tensor's memory "
                           f"was not allocated over (its group's ranks: {list(mine)})", g.rank)
        peers = [mine.index(r) for r in theirs]
    g.store_barrier()
    hdl = _handles[key] = _SymmetricMemory(mem, offset, g, peers)
    return hdl


def enable_symm_mem_for_group(group_name: str) -> None:
    """Deprecated in torch; here it only checks that the group resolves."""
    _group(group_name, "enable_symm_mem_for_group")


def is_symm_mem_enabled_for_group(group_name: str) -> bool:
    return True  # symmem needs no enabling: every group can allocate


_workspaces: dict = {}


def get_symm_mem_workspace(group_name: str, min_size: int) -> _SymmetricMemory:
    """A uint8 symmetric buffer of at least `min_size` bytes over the group, reused across calls
    (re-allocated, collectively, when a call asks for more)."""
    g = _group(group_name, "get_symm_mem_workspace")
    t = _workspaces.get(g)
    if t is None or t.numel() < min_size:
        device = t.device if t is not None else ("cuda" if torch.cuda.is_available() else "cpu")
        t = _workspaces[g] = _allocate(g, (max(min_size, 1),), torch.uint8, device)
    return rendezvous(t, g)


# ---- backends and pools ------------------------------------------------------------------------
def set_backend(name: str) -> None:
    """torch's names ("CUDA", "NVSHMEM", "NCCL") and symmem's ("host", "auto") alike; before the
    first allocation."""
    _symmem.select_backend(name.lower())


def get_backend(device) -> Optional[str]:
    """The backend that serves `device` for the default group, in torch's spelling ("CUDA",
    "NVSHMEM", "NCCL"; "HOST" for CPU memory); None before there is a group."""
    g = _symmem.default_group()
    if g is None:
        return None
    return _symmem.resolve_backend(g, _device_name(device))[0].upper()


def is_nvshmem_available() -> bool:
    return "nvshmem" in _symmem.available_backends()


def get_mempool_allocator(device):
    """The allocator of get_mem_pool(device): torch's CUDA allocator object whose segments are
    symmem symmetric memory over the default group (symmem.torch.mempool, docs/torch.md)."""
    dev = _st._cuda_device(device, "symm_mem.get_mempool_allocator")  # before any collective
    return _st.mempool_allocator(_default_group(), dev)


def get_mem_pool(device):
    """A torch.cuda.MemPool of symmetric memory over the default group on `device` (one per
    device): tensors made inside ``torch.cuda.use_mem_pool(pool)`` can be rendezvoused. Every
    rank must allocate inside the pool alike (symmem.torch.mempool)."""
    dev = _st._cuda_device(device, "symm_mem.get_mem_pool")  # before any collective
    return _st.mempool(_default_group(), dev)


# ---- one-sided module functions ----------------------------------------------------------------
def _at_offset(hdl: _SymmetricMemory, dtype: torch.dtype, fn: str) -> _symmem.SymmetricArray:
    item = dtype.itemsize
    if hdl.offset % item:
        raise _invalid(fn, "hdl", f"has offset {hdl.offset}, not a multiple of {dtype}'s size")
    return hdl._mem.array(((hdl.buffer_size - hdl.offset) // item,), _st._dtype_name(dtype),
                          hdl.offset)


def put_signal(src: torch.Tensor, hdl: _SymmetricMemory, peer: int) -> None:
    """Copies `src` into peer's memory at the handle's offset, then raises slot (0, this rank) of
    peer's signal pad (the peer waits with wait_signal(hdl, this rank))."""
    _symmem.put(_at_offset(hdl, src.dtype, "put_signal"), src.contiguous(),
                hdl._peer(peer, "put_signal", "peer"), signal=True)


def wait_signal(hdl: _SymmetricMemory, peer: int) -> None:
    """Waits for put_signal() of `peer` (slot (0, peer) of this rank's pad) and resets it."""
    hdl.wait_signal(peer, 0)


def get(dst: torch.Tensor, hdl: _SymmetricMemory, peer: int, offset: int = 0) -> None:
    """Copies dst.numel() elements from peer's memory (at the handle's offset plus `offset`
    elements) into `dst`."""
    if not dst.is_contiguous():
        raise _invalid("get", "dst", "must be contiguous")
    _symmem.get(_at_offset(hdl, dst.dtype, "get"), dst, hdl._peer(peer, "get", "peer"),
                offset=offset)


# ---- torch.ops.symm_mem ------------------------------------------------------------------------
# An op's tensors: one in symmetric memory of the op's group is used in place; one in memory of
# another group (a subgroup op on a tensor allocated over the job) or not contiguous goes through a
# temporary, which the symmem op copies through the group's workspace.
def _src(t: torch.Tensor, g: _symmem.Group) -> torch.Tensor:
    if not t.is_contiguous():
        return t.contiguous()
    return t.clone() if _placement(t, g) == 0 else t


class _Dst:
    """A tensor the op writes: itself, or a temporary copied back by done()."""

    def __init__(self, t: torch.Tensor, g: _symmem.Group):
        self.t = t
        direct = t.is_contiguous() and _placement(t, g) != 0
        self.w = t if direct else torch.empty(t.shape, dtype=t.dtype, device=t.device)

    def done(self) -> torch.Tensor:
        if self.w is not self.t:
            self.t.copy_(self.w)
        return self.t


class _Refusing:
    """NOTE [refused ops] (src/cuda/kernels/refuse.cu): this module's own checks of an op's
    arguments run before the op, so one that fails on some ranks only would leave the others
    waiting in the op until their timeout. An InvalidArgument raised inside the block first
    refuses `op` (the first collective the function calls) on the group, so the other ranks fail
    it naming this rank; then it goes on to the caller. `count` and `dtype` (a torch dtype): the
    op's count argument and dtype as the peers pass them, where known (a GPU refusal needs them
    to know whether the peers' op fits the group's workspace)."""

    def __init__(self, op: str, g: _symmem.Group, device, count=None, dtype=None):
        self.op, self.g, self.device = op, g, device
        self.count, self.dtype = count, dtype  # converted only when an error needs them

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if kind is not None and issubclass(kind, _symmem.InvalidArgument):
            dtype = str(self.dtype).replace("torch.", "") if self.dtype is not None else None
            _symmem.refuse(self.op, group=self.g, device=str(torch.device(self.device)),
                           message=str(err), count=self.count, dtype=dtype)
        return False


def _same_numel(fn: str, a: torch.Tensor, an: str, b: torch.Tensor, bn: str, rank: int) -> None:
    if a.numel() != b.numel():
        raise _invalid(fn, bn, f"has {b.numel()} elements but '{an}' has {a.numel()}", rank)


def _all_reduce_out(fn, algo, input, reduce_op, group_name, out):
    g = _group(group_name, fn)
    if input.numel() != out.numel():  # the refusal is set up only when there is one to make
        with _Refusing("all_reduce", g, input.device, input.numel(), input.dtype):
            _same_numel(fn, input, "input", out, "out", g.rank)
    # `out` may be new (one_shot_all_reduce) and still symmetric memory of another group, when
    # torch allocates from a symmem MemPool: _Dst looks.
    dst = _Dst(out, g)
    _symmem.all_reduce(_src(input, g), op=reduce_op, algo=algo, out=dst.w, group=g)
    return dst.done()


def one_shot_all_reduce_out(input, reduce_op, group_name, out):
    return _all_reduce_out("one_shot_all_reduce_out", "one_shot", input, reduce_op, group_name,
                           out)


def one_shot_all_reduce(input, reduce_op, group_name):
    return _all_reduce_out("one_shot_all_reduce", "one_shot", input, reduce_op, group_name,
                           torch.empty_like(input, memory_format=torch.contiguous_format))


def _copy_in(fn, symm_buffer, local_input, group_name):
    if symm_buffer.dtype != local_input.dtype or symm_buffer.numel() < local_input.numel():
        g = _group(group_name, fn)
        with _Refusing("all_reduce", g, local_input.device, local_input.numel(),
                       local_input.dtype):
            raise _invalid(fn, "symm_buffer", f"({symm_buffer.numel()} x {symm_buffer.dtype}) "
                           f"cannot hold 'local_input' ({local_input.numel()} x "
                           f"{local_input.dtype})", g.rank)
    buf = symm_buffer.reshape(-1)[:local_input.numel()].view(local_input.shape)
    buf.copy_(local_input)
    return buf


def one_shot_all_reduce_copy_out(symm_buffer, local_input, reduce_op, group_name, out):
    buf = _copy_in("one_shot_all_reduce_copy_out", symm_buffer, local_input, group_name)
    return _all_reduce_out("one_shot_all_reduce_copy_out", "one_shot", buf, reduce_op, group_name,
                           out)


def one_shot_all_reduce_copy(symm_buffer, local_input, reduce_op, group_name):
    buf = _copy_in("one_shot_all_reduce_copy", symm_buffer, local_input, group_name)
    return _all_reduce_out("one_shot_all_reduce_copy", "one_shot", buf, reduce_op, group_name,
                           torch.empty_like(local_input, memory_format=torch.contiguous_format))


def two_shot_all_reduce_(input, reduce_op, group_name):
    return _all_reduce_out("two_shot_all_reduce_", "two_shot", input, reduce_op, group_name, input)


def two_shot_all_reduce_out(input, reduce_op, group_name, output):
    return _all_reduce_out("two_shot_all_reduce_out", "two_shot", input, reduce_op, group_name,
                           output)


def reduce_scatter_out(input, group_name, split_last_dim, output):
    """Sums `input` over the group; rank r gets block r: of the flattened input, or of its last
    dimension (split_last_dim)."""
    fn = "reduce_scatter_out"
    g = _group(group_name, fn)
    w = g.world_size
    rs_count = input.numel() // w if input.numel() % w == 0 else None
    with _Refusing("reduce_scatter", g, input.device, rs_count, input.dtype):
        if split_last_dim:
            last = input.shape[-1] if input.dim() else 1
            if last % w:
                raise _invalid(fn, "input", f"has a last dimension of {last}, not divisible by "
                               f"the world size {w}", g.rank)
            send = input.reshape(-1, w, last // w).transpose(0, 1).contiguous()
        else:
            if input.numel() % w:
                raise _invalid(fn, "input", f"has {input.numel()} elements, not divisible by the "
                               f"world size {w}", g.rank)
            send = _src(input, g)
        if output.numel() * w != input.numel():
            raise _invalid(fn, "output", f"has {output.numel()} elements; it takes "
                           f"{input.numel() // w} (input's {input.numel()} / world size {w})",
                           g.rank)
    dst = _Dst(output, g)
    _symmem.reduce_scatter(send, dst.w, op="sum", group=g)
    return dst.done()


def all_to_all_vdev(input, out, in_splits, out_splits_offsets, group_name):
    """in_splits[p] rows (dim 0) of `input`, packed in peer order, go to peer p; out gets them in
    rank order, out_splits_offsets[0] their counts and [1] their offsets (rows)."""
    fn = "all_to_all_vdev"
    g = _group(group_name, fn)
    w = g.world_size
    with _Refusing("all_to_all_v", g, input.device):
        row = _row_elems(fn, input, out, g.rank)
        if in_splits.numel() != w or tuple(out_splits_offsets.shape) != (2, w):
            raise _invalid(fn, "out_splits_offsets" if in_splits.numel() == w else "in_splits",
                           f"must have shape (2, {w}) and ({w},) respectively; got "
                           f"{tuple(out_splits_offsets.shape)} and {tuple(in_splits.shape)}",
                           g.rank)
    # Few small ops: on a GPU each is a kernel launch, several microseconds of host time. The
    # received counts and offsets go straight into out_splits_offsets where it can take them.
    counts = in_splits.reshape(-1) * row if row > 1 else in_splits.reshape(-1)
    so = out_splits_offsets
    direct = so.dtype == torch.int64 and so.is_contiguous() and _placement(so, g) != 0
    if direct:
        recv_counts, recv_offsets = so[0], so[1]
    else:
        recv_counts = torch.empty(w, dtype=torch.int64, device=input.device)
        recv_offsets = torch.empty(w, dtype=torch.int64, device=input.device)
    dst = _Dst(out, g)
    _symmem.all_to_all_v(_src(input, g), _src(counts, g), dst.w, recv_counts, recv_offsets,
                         group=g)
    dst.done()
    if direct:
        if row > 1:
            so.floor_divide_(row)
    else:
        so[0].copy_(recv_counts // row)
        so[1].copy_(recv_offsets // row)


def _row_elems(fn, input, out, rank):
    """Elements per row (dim 0) of input, which out must share."""
    row = math.prod(input.shape[1:]) if input.dim() > 1 and input.shape[0] else 1
    out_row = math.prod(out.shape[1:])
    if out.dim() > 1 and out.shape[0] and out_row != row:
        raise _invalid(fn, "out", f"has rows of {out_row} elements but 'input' has rows of {row}",
                       rank)
    return row


def _rows_of(fn, input, out, rank):
    """_row_elems, and out must have input's dtype."""
    if input.dtype != out.dtype:
        raise _invalid(fn, "out", f"has dtype {out.dtype} but 'input' has {input.dtype}", rank)
    return _row_elems(fn, input, out, rank)


def _int64_shape(fn, arg, t, shape, rank):
    if t.dtype != torch.int64 or tuple(t.shape) != tuple(shape):
        raise _invalid(fn, arg, f"must be int64 of shape {tuple(shape)}; got {t.dtype} of shape "
                       f"{tuple(t.shape)}", rank)


def _exchange_splits(send, g):
    """send[d * k: (d + 1) * k] go to rank d; returns what every rank sent here, in rank order."""
    recv = torch.empty_like(send)
    _symmem.all_to_all(_src(send.contiguous(), g), recv, group=g)
    return recv


def all_to_all_vdev_2d(input, out, in_splits, out_splits_offsets, group_name, major_align=None):
    """MoE dispatch as torch's op: in_splits[d * ne + e] rows of `input` (packed in that order)
    go to local expert e of rank d; `out` holds them expert-major (expert e of this rank: the
    rows from rank 0, 1, ...), each expert's block starting at a multiple of major_align (an empty
    block still takes major_align rows, as torch's does). out_splits_offsets[0][e * w + s] and
    [1][e * w + s] are the rows from rank s for expert e and where they start."""
    fn = "all_to_all_vdev_2d"
    g = _group(group_name, fn)
    w, r = g.world_size, g.rank
    with _Refusing("all_to_all", g, input.device):  # the splits' exchange comes first
        row = _rows_of(fn, input, out, r)
        if in_splits.numel() == 0 or in_splits.numel() % w:
            raise _invalid(fn, "in_splits", f"has {in_splits.numel()} entries, not a positive "
                           f"multiple of the world size {w} (ranks x experts per rank)", r)
        ne = in_splits.numel() // w
        _int64_shape(fn, "in_splits", in_splits.reshape(-1), (w * ne,), r)
        _int64_shape(fn, "out_splits_offsets", out_splits_offsets, (2, w * ne), r)
        align = 1 if major_align is None else int(major_align)
        if align <= 0:
            raise _invalid(fn, "major_align", f"= {align}; it must be positive", r)
        splits = in_splits.reshape(-1).to("cpu")
        if bool((splits < 0).any()):
            raise _invalid(fn, "in_splits", f"has a negative split: {splits.tolist()}", r)
        need = int(splits.sum())
        rows_in = input.shape[0] if input.dim() else 1
        if rows_in < need:
            raise _invalid(fn, "input", f"has {rows_in} rows; in_splits sends {need}", r)
    got = _exchange_splits(splits, g).view(w, ne)  # got[s][e]: rows from s for expert e
    # Expert-major output offsets, torch's rule: block e starts where block e - 1's aligned
    # length ends; within a block, the ranks' rows follow in rank order.
    offsets = torch.empty(ne, w, dtype=torch.int64)
    start = 0
    for e in range(ne):
        pos = start
        for s in range(w):
            offsets[e, s] = pos
            pos += int(got[s, e])
        total = pos - start
        start += max((total + align - 1) // align * align, align)
    # The data: rank-major all_to_all_v into a staging tensor, then each piece to its place.
    flat_in = input.reshape(-1)[:need * row]
    counts = splits.view(w, ne).sum(1) * row
    stage = torch.empty(int(got.sum()) * row, dtype=input.dtype, device=input.device)
    recv_counts = torch.empty(w, dtype=torch.int64, device=input.device)
    recv_offsets = torch.empty(w, dtype=torch.int64, device=input.device)
    _symmem.all_to_all_v(_src(flat_in.contiguous(), g),
                         _src(counts.to(input.device), g), stage, recv_counts, recv_offsets,
                         group=g)
    # Checked after the exchanges, so that a rank whose `out` is too small does not leave the
    # others waiting in them.
    cap = out.shape[0] if out.dim() else 1
    end = max((int(offsets[e, s]) + int(got[s, e]) for e in range(ne) for s in range(w)),
              default=0)
    if cap < end:
        raise _invalid(fn, "out", f"has {cap} rows; the layout needs {end}", r)
    dst = _Dst(out, g)
    flat_out = dst.w.reshape(-1)
    src_at = recv_offsets.to("cpu").tolist()
    for s in range(w):
        pos = src_at[s]
        for e in range(ne):
            n = int(got[s, e]) * row
            o = int(offsets[e, s]) * row
            flat_out[o:o + n].copy_(stage[pos:pos + n])
            pos += n
    dst.done()
    out_splits_offsets[0].copy_(got.t().reshape(-1))
    out_splits_offsets[1].copy_(offsets.reshape(-1))


def all_to_all_vdev_2d_offset(input, out, in_splits_offsets, out_splits_offsets, group_name):
    """MoE combine as torch's op, the way back of all_to_all_vdev_2d: in_splits_offsets[0][e * w
    + d] rows of `input` starting at row in_splits_offsets[1][e * w + d] (padding between blocks
    is allowed and not sent) go back from local expert e to rank d; `out` holds them rank-major
    (from rank 0's experts 0, 1, ..., then rank 1's), packed. out_splits_offsets[0][s * ne + e] and
    [1][s * ne + e] are the rows from expert e of rank s and where they start."""
    fn = "all_to_all_vdev_2d_offset"
    g = _group(group_name, fn)
    w, r = g.world_size, g.rank
    with _Refusing("all_to_all", g, input.device):  # the splits' exchange comes first
        row = _rows_of(fn, input, out, r)
        if in_splits_offsets.dim() != 2 or in_splits_offsets.shape[0] != 2 or \
                in_splits_offsets.shape[1] == 0 or in_splits_offsets.shape[1] % w:
            raise _invalid(fn, "in_splits_offsets", f"must have shape (2, experts per rank x {w}); "
                           f"got {tuple(in_splits_offsets.shape)}", r)
        ne = in_splits_offsets.shape[1] // w
        _int64_shape(fn, "in_splits_offsets", in_splits_offsets, (2, ne * w), r)
        _int64_shape(fn, "out_splits_offsets", out_splits_offsets, (2, w * ne), r)
        so = in_splits_offsets.to("cpu")
        splits, starts = so[0].view(ne, w), so[1].view(ne, w)  # [e][d]
        if bool((splits < 0).any()) or bool((starts < 0).any()):
            raise _invalid(fn, "in_splits_offsets",
                           f"has a negative split or offset: {so.tolist()}", r)
        rows_in = input.shape[0] if input.dim() else 1
        ends = starts + splits
        if splits.numel() and int(ends.max()) > rows_in:
            raise _invalid(fn, "input", f"has {rows_in} rows; in_splits_offsets reaches row "
                           f"{int(ends.max())}", r)
    got = _exchange_splits(splits.t().contiguous().reshape(-1), g).view(w, ne)  # [s][e]
    # Pack what goes to each rank (its experts' rows in expert order), then one all_to_all_v
    # lands it rank-major and packed, which is the output layout (a too small `out` fails there,
    # on every rank: its capacity is the op's recv_capacity).
    flat_in = input.reshape(-1)
    pieces = [flat_in[int(starts[e, d]) * row:int(ends[e, d]) * row]
              for d in range(w) for e in range(ne)]
    send = torch.cat(pieces) if pieces else flat_in[:0]
    counts = splits.sum(0) * row  # per destination rank
    recv_counts = torch.empty(w, dtype=torch.int64, device=input.device)
    recv_offsets = torch.empty(w, dtype=torch.int64, device=input.device)
    dst = _Dst(out, g)
    flat_out = dst.w.reshape(-1)
    _symmem.all_to_all_v(_src(send.contiguous(), g), _src(counts.to(input.device), g),
                         flat_out, recv_counts, recv_offsets, group=g)
    dst.done()
    sizes = got.reshape(-1)
    out_splits_offsets[0].copy_(sizes)
    out_splits_offsets[1].copy_(torch.cumsum(sizes, 0) - sizes)


def _require_symmetric(tensor, fn):
    if not isinstance(tensor, torch.Tensor) or _placement(tensor) < 0:
        raise _invalid(fn, "tensor", "is not in symmetric memory (symm_mem.empty())")


def nvshmem_put(tensor, peer):
    """Copies `tensor` into the same place of peer's memory."""
    _require_symmetric(tensor, "nvshmem_put")
    _symmem.put(tensor, tensor, peer)


def nvshmem_get(tensor, peer):
    """Copies the same place of peer's memory into `tensor`."""
    _require_symmetric(tensor, "nvshmem_get")
    _symmem.get(tensor, tensor, peer)


def nvshmem_broadcast(input, root, group_name):
    g = _group(group_name, "nvshmem_broadcast")
    dst = _Dst(input, g)
    if dst.w is not input:
        dst.w.copy_(input)
    _symmem.broadcast(dst.w, root, group=g)
    return dst.done()


def nvshmem_all_to_all(input, out, group_name):
    g = _group(group_name, "nvshmem_all_to_all")
    dst = _Dst(out, g)
    _symmem.all_to_all(_src(input, g), dst.w, group=g)
    return dst.done()


def get_remote_tensors(x, group_name):
    """x as each rank of the group sees it in its own memory (rank order)."""
    hdl = rendezvous(x, group_name)
    item = x.element_size()
    return [x if p == hdl.rank else
            hdl.get_buffer(p, x.shape, x.dtype, hdl.offset // item).as_strided(x.shape, x.stride())
            for p in range(hdl.world_size)]


# name -> (kernel, torch's schema, for a torch that lacks the op)
_OPS = {
    "one_shot_all_reduce": (one_shot_all_reduce,
                            "(Tensor input, str reduce_op, str group_name) -> Tensor"),
    "one_shot_all_reduce_out": (one_shot_all_reduce_out,
                                "(Tensor input, str reduce_op, str group_name, Tensor(a!) out) "
                                "-> Tensor(a!)"),
    "one_shot_all_reduce_copy": (one_shot_all_reduce_copy,
                                 "(Tensor symm_buffer, Tensor local_input, str reduce_op, "
                                 "str group_name) -> Tensor"),
    "one_shot_all_reduce_copy_out": (one_shot_all_reduce_copy_out,
                                     "(Tensor symm_buffer, Tensor local_input, str reduce_op, "
                                     "str group_name, Tensor(a!) out) -> Tensor(a!)"),
    "two_shot_all_reduce_": (two_shot_all_reduce_,
                             "(Tensor(a!) input, str reduce_op, str group_name) -> Tensor(a!)"),
    "two_shot_all_reduce_out": (two_shot_all_reduce_out,
                                "(Tensor(a!) input, str reduce_op, str group_name, "
                                "Tensor(b!) output) -> Tensor(b!)"),
    "reduce_scatter_out": (reduce_scatter_out,
                           "(Tensor(a!) input, str group_name, bool split_last_dim, "
                           "Tensor(b!) output) -> Tensor(b!)"),
    "all_to_all_vdev": (all_to_all_vdev,
                        "(Tensor input, Tensor(a!) out, Tensor in_splits, "
                        "Tensor(a!) out_splits_offsets, str group_name) -> ()"),
    "all_to_all_vdev_2d": (all_to_all_vdev_2d,
                           "(Tensor input, Tensor(a!) out, Tensor in_splits, "
                           "Tensor(a!) out_splits_offsets, str group_name, "
                           "int? major_align=None) -> ()"),
    "all_to_all_vdev_2d_offset": (all_to_all_vdev_2d_offset,
                                  "(Tensor input, Tensor(a!) out, Tensor in_splits_offsets, "
                                  "Tensor(a!) out_splits_offsets, str group_name) -> ()"),
    "nvshmem_put": (nvshmem_put, "(Tensor(a!) tensor, int peer) -> ()"),
    "nvshmem_get": (nvshmem_get, "(Tensor(a!) tensor, int peer) -> ()"),
    "nccl_put": (nvshmem_put, "(Tensor(a!) tensor, int peer) -> ()"),
    "nccl_get": (nvshmem_get, "(Tensor(a!) tensor, int peer) -> ()"),
    "nvshmem_broadcast": (nvshmem_broadcast,
                          "(Tensor(a!) input, int root, str group_name) -> Tensor(a!)"),
    "nvshmem_all_to_all": (nvshmem_all_to_all,
                           "(Tensor input, Tensor(a!) out, str group_name) -> Tensor(a!)"),
    "get_remote_tensors": (get_remote_tensors, "(Tensor x, str group_name) -> Tensor[]"),
}

_lib = torch.library.Library("symm_mem", "FRAGMENT")


def _has(qualname: str, key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key)


def _register_cpu() -> None:
    known = set(torch._C._dispatch_get_all_op_names())
    for name, (kernel, schema) in _OPS.items():
        if f"symm_mem::{name}" not in known:
            _lib.define(name + schema)
        if not _has(f"symm_mem::{name}", "CPU"):
            _lib.impl(name, kernel, "CPU")


def _register_cuda() -> None:
    """symmem's kernels for CUDA tensors in symmem memory, torch's (below the autograd key) for
    every other tensor. Registered at AutogradCUDA, which these ops have no kernel of their own
    for, so torch's CUDA kernels stay registered and reachable."""
    for name, (kernel, _) in _OPS.items():
        op = getattr(torch.ops.symm_mem, name).default
        has_cuda = _has(f"symm_mem::{name}", "CUDA")

        def route(*args, _kernel=kernel, _op=op, _has_cuda=has_cuda):
            if not _has_cuda or any(_placement(a) > 0 for a in args
                                    if isinstance(a, torch.Tensor)):
                return _kernel(*args)
            with torch._C._AutoDispatchBelowAutograd():
                return _op(*args)

        _lib.impl(name, route, "AutogradCUDA")


_register_cpu()
if torch.cuda.is_available():
    _register_cuda()
