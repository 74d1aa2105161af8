"""A torch MemPool over symmem symmetric memory (issue #23 item 2), under symmem-run -n 2 on the
GPU: tensors made inside torch.cuda.use_mem_pool(symmem.torch.mempool(...)) are symmetric,
rendezvous() and the ops take them and views at an offset into them, in place. Skipped without
torch, without a GPU, or with another number of ranks."""

import os

import pytest

if "SYMMEM_WORLD_SIZE" not in os.environ and "WORLD_SIZE" not in os.environ:
    pytest.skip("not launched by symmem-run (no SYMMEM_WORLD_SIZE)", allow_module_level=True)
torch = pytest.importorskip("torch", reason="torch is not installed")

import symmem  # noqa: E402
from gpu_group import gpu_group  # noqa: E402
import symmem.torch  # noqa: E402
import symmem.torch.symm_mem as symm_mem  # noqa: E402


@pytest.fixture(scope="module")
def g():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    if not hasattr(torch.cuda, "use_mem_pool"):
        pytest.skip(f"torch {torch.__version__} has no torch.cuda.use_mem_pool")
    return gpu_group(torch, world_size=2)


def test_tensors_in_the_pool_are_symmetric(g):
    n, r = g.world_size, g.rank
    dev = torch.device("cuda", torch.cuda.current_device())
    pool = symmem.torch.mempool(g, dev)
    assert symmem.torch.mempool(g, dev) is pool  # one pool per device and group
    with torch.cuda.use_mem_pool(pool):
        t = torch.empty(4096, dtype=torch.float32, device=dev)  # the same order on every rank
        u = torch.empty((64, 33), dtype=torch.bfloat16, device=dev)
    assert symmem._C._mempool_segments() >= 1, symmem.torch.mempool_last_error()
    plain = torch.empty(16, device=dev)
    assert symm_mem.is_symm_mem_tensor(t) and symm_mem.is_symm_mem_tensor(u)
    assert not symm_mem.is_symm_mem_tensor(plain)

    name = symmem.torch.register_group(g)
    hdl = symm_mem.rendezvous(t, g)
    assert hdl.rank == r and hdl.world_size == n
    t.fill_(r + 1)
    torch.cuda.synchronize()
    hdl.barrier(channel=0)
    peer = hdl.get_buffer((r + 1) % n, (4096,), torch.float32, hdl.offset // 4)
    assert torch.equal(peer, torch.full_like(t, (r + 1) % n + 1))
    hdl.barrier(channel=0)

    out = torch.ops.symm_mem.one_shot_all_reduce(t, "sum", name)
    torch.cuda.synchronize()
    assert torch.equal(out, torch.full_like(t, float(n * (n + 1) // 2)))

    # A view at an offset into pool memory, reduced in place; the rest is untouched.
    t.fill_(r + 1)
    v = t[1000:1512]
    torch.ops.symm_mem.two_shot_all_reduce_(v, "sum", name)
    torch.cuda.synchronize()
    assert torch.equal(v, torch.full_like(v, float(n * (n + 1) // 2)))
    assert torch.equal(t[:1000], torch.full_like(t[:1000], r + 1.0))
    assert torch.equal(t[1512:], torch.full_like(t[1512:], r + 1.0))

    # symmem's own ops on a 2-D bf16 tensor of the pool, in place.
    u.fill_(float(r + 2))
    symmem.all_reduce(u, op="max")
    torch.cuda.synchronize()
    assert torch.equal(u, torch.full_like(u, float(n + 1)))

    # A second group on the same device is refused, naming both.
    other = g.split(list(range(n)))
    with pytest.raises(symmem.InvalidArgument, match="one group per device"):
        symmem.torch.mempool(other, dev)
    g.store_barrier()
    del t, u, v, out, peer, hdl


def test_pool_errors_name_the_device(g):
    with pytest.raises(symmem.InvalidArgument, match="'cpu' is not a CUDA device"):
        symmem.torch.mempool(g, "cpu")
    bad = torch.cuda.device_count()
    with pytest.raises(symmem.InvalidArgument, match=f"cuda:{bad}' does not exist"):
        symmem.torch.mempool(g, bad)
