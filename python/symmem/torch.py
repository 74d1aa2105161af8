"""PyTorch integration for symmem.

Importing this module registers the symmem ops as ``torch.library`` custom ops, so that
``torch.compile`` traces them (no graph breaks) and they run eagerly on tensors:

    torch.ops.symmem.all_reduce(x, "sum", "auto", "")      # in place; "" = default group
    symmem.torch.all_reduce(x, op="sum", group=g)           # the same, returns x

Each op takes the name of a symmem.Group (``group.name``; "" means: the group of the tensor's
symmetric memory, else the default group). Groups made by ``Group.from_env()``,
``group_from_process_group()`` or passed to these helpers are registered under their name.
CUDA tensors run on torch's current stream.

``group_from_process_group(pg)`` builds a symmem.Group from a torch.distributed process group:
ranks and world size come from the process group, and the rendezvous goes through the default
c10d store of torch.distributed (wrapped in a PrefixStore per process group and exposed to
symmem through a symmem.PythonStore). So under torchrun it needs no extra port: symmem does not
start a second store server at MASTER_ADDR:MASTER_PORT (that port is torch's TCPStore).
Every member of ``pg`` must call it, in the same order for different groups.

``empty(shape, dtype, device, group)`` returns a torch tensor over new symmetric memory.
"""

from __future__ import annotations

import datetime
from typing import Optional, Sequence

import torch

import symmem as _symmem

__all__ = [
    "all_gather",
    "all_reduce",
    "all_to_all",
    "all_to_all_v",
    "barrier",
    "broadcast",
    "empty",
    "get",
    "group_from_process_group",
    "put",
    "reduce_scatter",
    "register_group",
]

# ---- groups by name ---------------------------------------------------------------------------
_groups: dict[str, _symmem.Group] = {}


def register_group(group: _symmem.Group) -> str:
    """Makes `group` reachable from the custom ops; returns the name the ops take for it.

    The name is group.name, made unique in this process when two distinct groups share one
    (two top-level groups are both "g0", say)."""
    key = group.name
    n = 0
    while key in _groups and _groups[key] != group:
        n += 1
        key = f"{group.name}~{n}"
    _groups[key] = group
    return key


def _group(name: str) -> Optional[_symmem.Group]:
    if not name:
        return None
    try:
        return _groups[name]
    except KeyError:
        raise _symmem.InvalidArgument(
            f"symmem.torch: argument 'group' = '{name}' is not a registered group "
            f"(register_group(g) or pass the Group object to the symmem.torch helpers)") from None


def _name(group) -> str:
    if group is None:
        return ""
    if isinstance(group, str):
        return group
    return register_group(group)


# ---- custom ops -------------------------------------------------------------------------------
@torch.library.custom_op("symmem::all_reduce", mutates_args=("x",))
def _all_reduce(x: torch.Tensor, op: str, algo: str, group: str) -> None:
    _symmem.all_reduce(x, op=op, algo=algo, group=_group(group))


@_all_reduce.register_fake
def _(x, op, algo, group):
    return None


@torch.library.custom_op("symmem::reduce_scatter", mutates_args=("recv",))
def _reduce_scatter(send: torch.Tensor, recv: torch.Tensor, op: str, group: str) -> None:
    _symmem.reduce_scatter(send, recv, op=op, group=_group(group))


@_reduce_scatter.register_fake
def _(send, recv, op, group):
    return None


@torch.library.custom_op("symmem::all_gather", mutates_args=("recv",))
def _all_gather(send: torch.Tensor, recv: torch.Tensor, group: str) -> None:
    _symmem.all_gather(send, recv, group=_group(group))


@_all_gather.register_fake
def _(send, recv, group):
    return None


@torch.library.custom_op("symmem::all_to_all", mutates_args=("recv",))
def _all_to_all(send: torch.Tensor, recv: torch.Tensor, group: str) -> None:
    _symmem.all_to_all(send, recv, group=_group(group))


@_all_to_all.register_fake
def _(send, recv, group):
    return None


@torch.library.custom_op("symmem::all_to_all_v",
                         mutates_args=("recv", "recv_counts", "recv_offsets"))
def _all_to_all_v(send: torch.Tensor, send_counts: torch.Tensor, recv: torch.Tensor,
                  recv_counts: torch.Tensor, recv_offsets: torch.Tensor, recv_counts_known: bool,
                  group: str) -> None:
    _symmem.all_to_all_v(send, send_counts, recv, recv_counts, recv_offsets,
                         recv_counts_known=recv_counts_known, group=_group(group))


@_all_to_all_v.register_fake
def _(send, send_counts, recv, recv_counts, recv_offsets, recv_counts_known, group):
    return None


@torch.library.custom_op("symmem::broadcast", mutates_args=("x",))
def _broadcast(x: torch.Tensor, root: int, group: str) -> None:
    _symmem.broadcast(x, root=root, group=_group(group))


@_broadcast.register_fake
def _(x, root, group):
    return None


# put writes a peer's copy of dst; declaring dst mutated keeps the call ordered and alive in
# compiled graphs.
@torch.library.custom_op("symmem::put", mutates_args=("dst",))
def _put(dst: torch.Tensor, src: torch.Tensor, peer: int, offset: int, signal: bool,
         channel: int) -> None:
    _symmem.put(dst, src, peer, offset=offset, signal=signal, channel=channel)


@_put.register_fake
def _(dst, src, peer, offset, signal, channel):
    return None


@torch.library.custom_op("symmem::get", mutates_args=("dst",))
def _get(src: torch.Tensor, dst: torch.Tensor, peer: int, offset: int, signal: bool,
         channel: int) -> None:
    _symmem.get(src, dst, peer, offset=offset, signal=signal, channel=channel)


@_get.register_fake
def _(src, dst, peer, offset, signal, channel):
    return None


# ---- helpers ----------------------------------------------------------------------------------
def all_reduce(x: torch.Tensor, op: str = "sum", algo: str = "auto", group=None) -> torch.Tensor:
    """In-place all-reduce of x (any tensor; symmetric memory is used without a copy)."""
    torch.ops.symmem.all_reduce(x, op, algo, _name(group))
    return x


def reduce_scatter(send: torch.Tensor, recv: torch.Tensor, op: str = "sum",
                   group=None) -> torch.Tensor:
    torch.ops.symmem.reduce_scatter(send, recv, op, _name(group))
    return recv


def all_gather(send: torch.Tensor, recv: torch.Tensor, group=None) -> torch.Tensor:
    torch.ops.symmem.all_gather(send, recv, _name(group))
    return recv


def all_to_all(send: torch.Tensor, recv: torch.Tensor, group=None) -> torch.Tensor:
    torch.ops.symmem.all_to_all(send, recv, _name(group))
    return recv


def all_to_all_v(send, send_counts, recv, recv_counts, recv_offsets, recv_counts_known=False,
                 group=None):
    torch.ops.symmem.all_to_all_v(send, send_counts, recv, recv_counts, recv_offsets,
                                  recv_counts_known, _name(group))
    return recv, recv_counts, recv_offsets


def broadcast(x: torch.Tensor, root: int = 0, group=None) -> torch.Tensor:
    torch.ops.symmem.broadcast(x, root, _name(group))
    return x


def put(dst: torch.Tensor, src: torch.Tensor, peer: int, offset: int = 0, signal: bool = False,
        channel: int = 0) -> None:
    torch.ops.symmem.put(dst, src, peer, offset, signal, channel)


def get(src: torch.Tensor, dst: torch.Tensor, peer: int, offset: int = 0, signal: bool = False,
        channel: int = 0) -> torch.Tensor:
    torch.ops.symmem.get(src, dst, peer, offset, signal, channel)
    return dst


def barrier(group=None, device=None) -> None:
    """Eager barrier over the group (not a custom op: it has no tensor to order it by)."""
    _symmem.barrier(group=group if not isinstance(group, str) else _group(group), device=device)


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.") if isinstance(dtype, torch.dtype) else dtype


def empty(shape: int | Sequence[int], dtype=torch.float32, device="cuda",
          group: Optional[_symmem.Group] = None) -> torch.Tensor:
    """A torch tensor over new symmetric memory (collective over the group)."""
    if isinstance(device, torch.device):
        device = str(device)
    a = _symmem.empty(shape, dtype=_dtype_name(dtype), device=device, group=group)
    register_group(a.group)
    return torch.from_dlpack(a)


# ---- torch.distributed --------------------------------------------------------------------------
class C10dStoreAdapter:
    """The symmem.PythonStore protocol over a torch.distributed (c10d) store."""

    def __init__(self, store):
        self.store = store

    @staticmethod
    def _td(timeout: float):
        return datetime.timedelta(seconds=timeout)

    def set(self, key, value):
        self.store.set(key, value)

    def get(self, key, timeout):
        self.wait([key], timeout)
        return self.store.get(key)

    def wait(self, keys, timeout):
        if timeout < 0:
            self.store.wait(keys)
        else:
            self.store.wait(keys, self._td(timeout))

    def add(self, key, delta):
        return self.store.add(key, delta)

    def compare_set(self, key, expected, desired):
        return self.store.compare_set(key, expected, desired)

    def multi_get(self, keys, timeout):
        self.wait(keys, timeout)
        return self.store.multi_get(keys)

    def multi_set(self, keys, values):
        self.store.multi_set(keys, values)

    def remove(self, key):
        return self.store.delete_key(key)

    def check(self, keys):
        return self.store.check(keys)

    def num_keys(self):
        return self.store.num_keys()


_pg_groups: dict = {}
_pg_wraps: dict = {}


def group_from_process_group(pg=None, store=None) -> _symmem.Group:
    """A symmem.Group with the ranks of a torch.distributed process group (default: WORLD).

    Rendezvous goes through `store` (a c10d store; default: torch.distributed's default store),
    under a prefix unique to the process group. Collective over the members of `pg`. The group
    is cached per process group and becomes the default group if there is none.
    """
    import torch.distributed as dist

    if not dist.is_initialized():
        raise _symmem.InvalidArgument(
            "group_from_process_group: torch.distributed is not initialised "
            "(call torch.distributed.init_process_group first)")
    if pg is None:
        pg = dist.group.WORLD
    if pg in _pg_groups:
        return _pg_groups[pg]
    if store is None:
        store = dist.distributed_c10d._get_default_store()
    ranks = dist.get_process_group_ranks(pg)
    # Same on every member: members wrap the same process groups in the same order.
    key = tuple(ranks)
    n = _pg_wraps.get(key, 0)
    _pg_wraps[key] = n + 1
    prefix = "symmem/pg/" + ",".join(map(str, ranks)) + f"#{n}/"
    pstore = _symmem.PythonStore(C10dStoreAdapter(dist.PrefixStore(prefix, store)))
    group = _symmem.Group.create(pstore, dist.get_rank(pg), dist.get_world_size(pg))
    _pg_groups[pg] = group
    register_group(group)
    if _symmem.default_group() is None:
        _symmem.set_default_group(group)
    return group
