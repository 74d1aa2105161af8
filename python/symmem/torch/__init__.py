"""PyTorch integration for symmem.

Importing this module registers the symmem ops as ``torch.library`` custom ops, so that
``torch.compile`` traces them (no graph breaks) and they run eagerly on tensors:

    torch.ops.symmem.all_reduce(x, "sum", "auto", "")      # in place; "" = default group
    symmem.torch.all_reduce(x, op="sum", group=g)           # the same, returns x

The ops, their schemas and their fake kernels' shape checks come from the op table
(``symmem.op_table()``), so a new op of the library appears here without code of its own.

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

import ast
import datetime
import inspect
from typing import Optional, Sequence

import torch

import symmem as _symmem

# The ops' helpers join __all__ as they are made from the op table (below).
__all__ = ["barrier", "empty", "group_from_process_group", "register_group"]

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
    group._symmem_torch_name = key  # read by _name() while torch.compile traces
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


# Under torch.compile the group is resolved to its name while tracing, so the custom op receives
# a constant string. A Group is an extension object whose properties dynamo cannot call; what it
# can read on every torch version is a plain instance attribute, which register_group() leaves on
# the object (any symmem.torch call with the group, eager, does that: symmem.torch.empty(...,
# group=g) before the compiled code, say). A group first met while tracing is registered through
# assume_constant_result, which needs a torch whose dynamo takes an object as a constant argument
# (2.15 does; 2.11 does not, and raises: call register_group(g) before compiling there).
@torch.compiler.assume_constant_result
def _register_while_tracing(group) -> str:
    return register_group(group)


def _name(group) -> str:
    if group is None:
        return ""
    if isinstance(group, str):
        return group
    cached = getattr(group, "_symmem_torch_name", None)
    if cached is not None:
        return cached
    return _register_while_tracing(group)


# ---- custom ops and helpers, from the op table -------------------------------------------------
# Each row of symmem.op_table() with a schema becomes the custom op symmem::<name> (its schema
# is the row's, its eager kernel calls symmem.<name>, its fake kernel checks the row's shape
# rules) and the helper symmem.torch.<name>(...), which returns the tensors the op writes.


def _parse_schema(schema: str) -> list[tuple[str, str, object]]:
    """[(name, type, default or inspect.Parameter.empty)] of "Tensor(a!) x, str op='sum'"."""
    args = []
    for part in schema.split(","):
        decl, eq, default = part.strip().partition("=")
        typ, name = decl.rsplit(" ", 1)
        args.append((name, typ, ast.literal_eval(default) if eq else inspect.Parameter.empty))
    return args


def _world(group_name: str) -> Optional[int]:
    g = _group(group_name) if group_name else _symmem.default_group()
    return g.world_size if g is not None else None


def _check_shapes(row: dict, values: dict) -> None:
    """The row's send/recv block rules on the op's first two tensors (at trace time too)."""
    tensors = [(k, v) for k, v in values.items() if isinstance(v, torch.Tensor)]
    if len(tensors) < 2 or "group" not in values:
        return
    world = _world(values["group"])
    blocks = {"one": 1, "root": 1, "world": world}
    if world is None or row["send"] not in blocks or row["recv"] not in blocks:
        return
    (sn, send), (rn, recv) = tensors[:2]
    sb, rb = blocks[row["send"]], blocks[row["recv"]]
    if send.numel() % sb != 0 or recv.numel() % rb != 0 or send.numel() // sb != recv.numel() // rb:
        raise _symmem.InvalidArgument(
            f"{row['name']}: argument '{rn if rb > 1 else sn}' does not fit: '{sn}' has "
            f"{send.numel()} elements and '{rn}' has {recv.numel()}; the op takes {sb} x count "
            f"and {rb} x count elements (world_size {world})")


def _register(row: dict) -> None:
    name, schema = row["name"], row["schema"]
    args = _parse_schema(schema)
    names = [a[0] for a in args]
    mutated = [a[0] for a in args if "!" in a[1]]
    qualname = f"symmem::{name}"
    eager = getattr(_symmem, name)

    torch.library.define(qualname, f"({schema}) -> ()", lib=_lib)

    def kernel(*values):
        kw = dict(zip(names, values))
        if "group" in kw:
            kw["group"] = _group(kw["group"])
        eager(**kw)

    def fake(*values):
        _check_shapes(row, dict(zip(names, values)))

    torch.library.impl(qualname, "CompositeExplicitAutograd", lib=_lib)(kernel)
    torch.library.register_fake(qualname, lib=_lib)(fake)

    op = getattr(torch.ops.symmem, name)
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                default=None if n == "group" else d) for n, _, d in args]
    signature = inspect.Signature(params)

    def helper(*a, **kw):
        bound = signature.bind(*a, **kw)
        bound.apply_defaults()
        values = dict(bound.arguments)
        if "group" in values:
            values["group"] = _name(values["group"])
        op(*values.values())
        out = tuple(values[m] for m in mutated)
        return out[0] if len(out) == 1 else out

    helper.__name__ = helper.__qualname__ = name
    helper.__signature__ = signature
    helper.__doc__ = (f"torch.ops.symmem.{name} ({schema}); returns the tensors it writes.\n\n"
                      + (eager.__doc__ or ""))
    globals()[name] = helper
    __all__.append(name)


_lib = torch.library.Library("symmem", "FRAGMENT")
for _row in _symmem.op_table():
    if _row["schema"]:
        _register(_row)
__all__.sort()


def _register_barrier() -> None:
    """symmem::barrier(group, device): a custom op with no tensor, registered as effectful (an
    ordered side effect), so graph passes neither drop it nor move it across other effectful ops;
    torch.compile traces it without a graph break."""
    qualname = "symmem::barrier"
    torch.library.define(qualname, "(str group, str? device=None) -> ()", lib=_lib)

    @torch.library.impl(qualname, "CompositeExplicitAutograd", lib=_lib)
    def kernel(group, device=None):
        _symmem.barrier(group=_group(group), device=device)

    @torch.library.register_fake(qualname, lib=_lib)
    def fake(group, device=None):
        return None

    op = torch.ops.symmem.barrier.default
    effectful = getattr(torch.library, "_register_effectful_op", None)
    if effectful is not None and hasattr(torch.library, "EffectType"):
        effectful(op, torch.library.EffectType.ORDERED, lib=_lib)
    else:  # older torch: at least keep graph passes from dropping it
        torch.fx.node.has_side_effect(op)


_register_barrier()


def barrier(group=None, device=None) -> None:
    """torch.ops.symmem.barrier over the group (a Group, its name or None: the default group);
    `device` "cpu" or "cuda[:i]" (None: the device of the group's most recent allocation, else
    the CPU). Traces under torch.compile(fullgraph=True) as an ordered side effect."""
    if isinstance(device, torch.device):
        device = str(device)
    torch.ops.symmem.barrier(_name(group), device)


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.") if isinstance(dtype, torch.dtype) else dtype


def empty(shape: int | Sequence[int], dtype=torch.float32, device=None,
          group: Optional[_symmem.Group] = None) -> torch.Tensor:
    """A torch tensor over new symmetric memory (collective over the group); `device` defaults to
    torch's default device, as for torch.empty."""
    if device is None:
        device = torch.get_default_device()
    if isinstance(device, torch.device):
        device = str(device)
    a = _symmem.empty(shape, dtype=_dtype_name(dtype), device=device, group=group)
    # The caller's own Group object where there is one: compiled code that passes it finds its
    # name there (a.group is an equal but new object).
    register_group(group if isinstance(group, _symmem.Group) else a.group)
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


# ---- a torch MemPool over symmetric memory -----------------------------------------------------
# NOTE [torch MemPool] in python/src/mempool.cpp: the allocator's C functions live in symmem._C.
_mempools: dict = {}  # device index -> (group, MemPool, allocator)


def _resolve_group(group, fn: str) -> _symmem.Group:
    """A symmem Group for a ProcessGroup, a group name, a symmem.Group, or None (the default
    group: symmem's, else torch.distributed's WORLD, else Group.from_env())."""
    if isinstance(group, _symmem.Group):
        return group
    import torch.distributed as dist

    if group is None:
        g = _symmem.default_group()
        if g is not None:
            return g
        if dist.is_available() and dist.is_initialized():
            return group_from_process_group()
        return _symmem.Group.from_env()
    if isinstance(group, str):
        if group in _groups:
            return _groups[group]
        if dist.is_available() and dist.is_initialized():
            try:
                return group_from_process_group(
                    dist.distributed_c10d._resolve_process_group(group))
            except (ValueError, RuntimeError, KeyError) as e:
                raise _symmem.InvalidArgument(
                    f"{fn}: argument 'group' = '{group}' names no group ({e})") from None
        raise _symmem.InvalidArgument(f"{fn}: argument 'group' = '{group}' names no symmem group "
                                      "and torch.distributed is not initialised")
    if dist.is_available() and isinstance(group, dist.ProcessGroup):
        return group_from_process_group(group)
    raise _symmem.InvalidArgument(f"{fn}: argument 'group' is a {type(group).__name__}; pass a "
                                  "symmem.Group, a ProcessGroup or a group name")


def _cuda_device(device, fn: str) -> torch.device:
    """`device` as a CUDA torch.device with an index, or a clear error naming it."""
    if device is None:
        dev = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
            else torch.device("cuda")
    elif isinstance(device, int):
        dev = torch.device("cuda", device)
    else:
        dev = torch.device(device)
    if dev.type != "cuda":
        raise _symmem.InvalidArgument(f"{fn}: argument 'device' = '{dev}' is not a CUDA device; "
                                      "a torch MemPool holds CUDA memory (CPU tensors: "
                                      "symmem.torch.empty)")
    if not torch.cuda.is_available() or not hasattr(torch._C, "_cuda_customAllocator"):
        raise _symmem.BackendUnavailable(
            f"{fn}: device '{dev}': torch has no usable CUDA here (torch.cuda.is_available() is "
            f"{torch.cuda.is_available()}, torch {torch.__version__}), and a MemPool of "
            "symmetric memory needs a GPU")
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    if dev.index >= torch.cuda.device_count():
        raise _symmem.InvalidArgument(f"{fn}: argument 'device' = '{dev}' does not exist here "
                                      f"({torch.cuda.device_count()} CUDA devices)")
    return dev


def mempool(group=None, device=None) -> "torch.cuda.MemPool":
    """A torch.cuda.MemPool whose memory is symmem symmetric memory over `group` (a symmem.Group,
    a ProcessGroup, its name; None: the default group) on `device` (default: the current CUDA
    device). Tensors made inside ``with torch.cuda.use_mem_pool(pool):`` lie in symmetric memory:
    symm_mem.rendezvous() and every op take them, and views of them, in place.

    Each segment torch's caching allocator asks for is one collective symmem allocation, so every
    rank of the group must allocate inside the pool alike (same sizes, same order), as with
    torch's own symmetric-memory pool. One group per device in a process: the same group gets the
    same pool back. A segment that cannot be allocated makes torch raise its out-of-memory error;
    symmem.torch.mempool_last_error() then says why."""
    dev = _cuda_device(device, "mempool")
    g = _resolve_group(group, "mempool")
    have = _mempools.get(dev.index)
    if have is not None and have[0] == g:
        return have[1]
    _symmem._C._mempool_register(g, dev.index)  # InvalidArgument for a second group
    register_group(g)
    alloc = torch.cuda.memory.CUDAPluggableAllocator(
        _symmem._C.__file__, "symmem_torch_mempool_alloc", "symmem_torch_mempool_free")
    pool = torch.cuda.MemPool(alloc.allocator())
    _mempools[dev.index] = (g, pool, alloc)
    return pool


def mempool_allocator(group=None, device=None):
    """The torch allocator (torch._C._cuda_CUDAAllocator) behind mempool(group, device)."""
    pool = mempool(group, device)
    return pool.allocator


def mempool_last_error() -> str:
    """Why the last segment of a symmem MemPool could not be allocated ('' when none failed)."""
    return _symmem._C._mempool_last_error()


__all__ += ["mempool", "mempool_allocator", "mempool_last_error"]
__all__.sort()


# ---- MoE dispatch and combine (symmem/torch/moe.py) ---------------------------------------------
from .moe import MoeHandle, moe_combine, moe_dispatch  # noqa: E402

__all__ += ["MoeHandle", "moe_combine", "moe_dispatch"]
__all__.sort()
