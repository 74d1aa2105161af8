"""The group of the multi-rank GPU tests (under symmem-run): skips unless torch sees a GPU and
there is one per local rank (or SYMMEM_ALLOW_SHARED_GPU=1 lets ranks share one), puts this rank
on its GPU (local rank % GPUs) and makes torch's context current before symmem allocates."""

import os

import pytest

import symmem


def use_rank_gpu(torch, group):
    """Sets this rank's GPU for `group`; returns its index (skips where it cannot)."""
    count = torch.cuda.device_count()
    shared = os.environ.get("SYMMEM_ALLOW_SHARED_GPU", "0") not in ("0", "")
    if count < group.local_world_size and not shared:
        pytest.skip(f"needs {group.local_world_size} CUDA GPUs (or SYMMEM_ALLOW_SHARED_GPU=1)")
    index = group.local_rank % count
    torch.cuda.set_device(index)
    torch.zeros(1, device="cuda")  # torch's context current before symmem allocates
    return index


def gpu_group(torch, world_size=None):
    """symmem.Group.from_env() on this rank's GPU; skips without a GPU or, when `world_size` is
    given, with another number of ranks."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    group = symmem.Group.from_env()
    if world_size is not None and group.world_size != world_size:
        pytest.skip(f"needs {world_size} ranks, has {group.world_size}")
    use_rank_gpu(torch, group)
    return group
