"""A refused configuration raises from Python instead of crashing (issue #24): two ranks that
both use cuda:0 without SYMMEM_ALLOW_SHARED_GPU get InvalidArgument from symmem.empty on every
rank, naming the setting. Run under symmem-run -n 2; skipped without torch or a GPU."""

import os

import pytest

if "SYMMEM_WORLD_SIZE" not in os.environ and "WORLD_SIZE" not in os.environ:
    pytest.skip("not launched by symmem-run (no SYMMEM_WORLD_SIZE)", allow_module_level=True)
torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)

import symmem  # noqa: E402


def test_two_ranks_on_one_gpu_are_refused_with_a_clear_error():
    if os.environ.get("SYMMEM_ALLOW_SHARED_GPU", "0") not in ("0", ""):
        pytest.skip("SYMMEM_ALLOW_SHARED_GPU is set: the configuration is allowed")
    g = symmem.Group.from_env()
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    with pytest.raises(symmem.InvalidArgument) as e:
        symmem.empty((64,), dtype="float32", device="cuda", group=g)
    assert "SYMMEM_ALLOW_SHARED_GPU" in str(e.value), str(e.value)
    # The process still works: a CPU all-reduce over the same group.
    x = symmem.empty((4,), dtype="float32", group=g)
    import numpy as np
    np.from_dlpack(x)[:] = 1
    symmem.all_reduce(x)
    assert (np.from_dlpack(x) == g.world_size).all()
