"""MoE dispatch and combine as torch custom ops (symmem::moe_dispatch, symmem::moe_combine), with
fake kernels so that torch.compile traces a MoE layer (docs/moe.md).

    recv_x, counts, handle = symmem.torch.moe_dispatch(x, topk_idx, num_experts, group=g)
    y = experts(recv_x, counts)                       # rows grouped by local expert
    out = symmem.torch.moe_combine(y, handle, topk_weights)

The layout travels as tensors (topk_idx, row_source, expert_counts) in the MoeHandle, so the ops
take and return only tensors and constants; combine rebuilds the layout from them (on CPU memory
without communication; for CUDA tensors with one small collective that sizes the exchange
buffers). low_latency mode (max_tokens > 0) has static shapes: recv_x is
[local experts, world_size * max_tokens, hidden]; normal mode's row count is data-dependent.

CUDA tensors run on the GPU path of the group's GPU backend (docs/moe.md, "On the GPU"), on torch's
current stream; topk_idx may be on the GPU or the CPU. The layout is built on the host: dispatch
reads topk_idx (a stream synchronisation) and combine reads row_source and expert_counts.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

import symmem as _symmem

from . import _group, _lib, _name, _world


class MoeHandle(NamedTuple):
    """What combine needs of a dispatch: the layout as tensors, and its constants."""

    topk_idx: torch.Tensor
    row_source: torch.Tensor
    expert_counts: torch.Tensor
    num_experts: int
    group: str
    max_tokens: int


def _mode(max_tokens: int) -> str:
    return "low_latency" if max_tokens > 0 else "normal"


def _local(num_experts: int, group: str) -> int:
    world = _world(group)
    if world is None or num_experts % world:
        raise _symmem.InvalidArgument(
            f"moe: argument 'num_experts' = {num_experts} is not a multiple of the world size "
            f"{world}")
    return num_experts // world


torch.library.define(
    "symmem::moe_dispatch",
    "(Tensor x, Tensor topk_idx, int num_experts, str group='', int max_tokens=0, "
    "Tensor? x_scales=None) -> (Tensor, Tensor, Tensor, Tensor)", lib=_lib)
torch.library.define(
    "symmem::moe_combine",
    "(Tensor y, Tensor topk_idx, Tensor row_source, Tensor expert_counts, Tensor topk_weights, "
    "int num_experts, str group='', int max_tokens=0) -> Tensor", lib=_lib)


@torch.library.impl("symmem::moe_dispatch", "CompositeExplicitAutograd", lib=_lib)
def _dispatch(x, topk_idx, num_experts, group="", max_tokens=0, x_scales=None):
    g = _group(group)
    layout = _symmem.moe_layout(topk_idx, num_experts, mode=_mode(max_tokens),
                                max_tokens=max_tokens, group=g, device=str(x.device))
    hidden = x.shape[-1]
    recv_x = x.new_empty(layout.recv_shape(hidden))
    rows = layout.recv_rows
    recv_scales = (x.new_empty((rows, hidden // 128), dtype=torch.float32)
                   if x_scales is not None else x.new_empty((0,), dtype=torch.float32))
    _symmem.moe_dispatch(x, layout, recv_x, x_scales=x_scales,
                         recv_scales=recv_scales if x_scales is not None else None)
    counts = torch.tensor(layout.expert_counts, dtype=torch.int64, device=x.device)
    raw = layout.row_source_bytes()  # torch.frombuffer refuses an empty buffer
    source = (torch.frombuffer(bytearray(raw), dtype=torch.int64) if raw else
              torch.empty(0, dtype=torch.int64)).reshape(rows, 3).to(x.device)
    return recv_x, counts, source, recv_scales


@torch.library.register_fake("symmem::moe_dispatch", lib=_lib)
def _dispatch_fake(x, topk_idx, num_experts, group="", max_tokens=0, x_scales=None):
    local = _local(num_experts, group)
    hidden = x.shape[-1]
    if max_tokens > 0:
        slab = _world(group) * max_tokens
        recv_x = x.new_empty((local, slab, hidden))
        rows = local * slab
    else:
        rows = torch.library.get_ctx().new_dynamic_size()
        recv_x = x.new_empty((rows, hidden))
    counts = x.new_empty((local,), dtype=torch.int64)
    source = x.new_empty((rows, 3), dtype=torch.int64)
    scales = (x.new_empty((rows, hidden // 128), dtype=torch.float32) if x_scales is not None
              else x.new_empty((0,), dtype=torch.float32))
    return recv_x, counts, source, scales


@torch.library.impl("symmem::moe_combine", "CompositeExplicitAutograd", lib=_lib)
def _combine(y, topk_idx, row_source, expert_counts, topk_weights, num_experts, group="",
             max_tokens=0):
    g = _group(group)
    layout = _symmem.moe_layout_restore(topk_idx, num_experts, row_source.contiguous().cpu(),
                                        expert_counts.contiguous().cpu(), mode=_mode(max_tokens),
                                        max_tokens=max_tokens, group=g, device=str(y.device))
    out = y.new_empty((topk_idx.shape[0], y.shape[-1]))
    _symmem.moe_combine(y.contiguous(), layout, topk_weights.contiguous(), out)
    return out


@torch.library.register_fake("symmem::moe_combine", lib=_lib)
def _combine_fake(y, topk_idx, row_source, expert_counts, topk_weights, num_experts, group="",
                  max_tokens=0):
    return y.new_empty((topk_idx.shape[0], y.shape[-1]))


def moe_dispatch(x: torch.Tensor, topk_idx: torch.Tensor, num_experts: int, group=None,
                 max_tokens: int = 0, x_scales: Optional[torch.Tensor] = None):
    """Sends the tokens x [T, H] to the ranks of their top-k experts (symmem.moe_dispatch).
    Returns (recv_x, expert_counts, handle), plus recv_scales for fp8 x (x_scales given).
    max_tokens > 0 selects low_latency mode (static shapes, recv_x [L, W * max_tokens, H])."""
    name = _name(group)
    recv_x, counts, source, scales = torch.ops.symmem.moe_dispatch(
        x, topk_idx, num_experts, name, max_tokens, x_scales)
    handle = MoeHandle(topk_idx, source, counts, num_experts, name, max_tokens)
    if x_scales is not None:
        return recv_x, counts, handle, scales
    return recv_x, counts, handle


def moe_combine(y: torch.Tensor, handle: MoeHandle, topk_weights: torch.Tensor) -> torch.Tensor:
    """The experts' outputs y (recv_x's layout) back to their tokens, summed with the router's
    weights in f32, slot by slot: out [T, H] (symmem.moe_combine)."""
    return torch.ops.symmem.moe_combine(y, handle.topk_idx, handle.row_source,
                                        handle.expert_counts, topk_weights, handle.num_experts,
                                        handle.group, handle.max_tokens)
