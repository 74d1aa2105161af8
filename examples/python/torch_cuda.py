"""symmem with PyTorch on GPUs (cuda backend): torch tensors over symmetric memory, the ops on
torch's current stream, and a torch.compile'd function calling the symmem custom op.

    symmem-run -n 2 python examples/python/torch_cuda.py
    torchrun --nproc-per-node 2 examples/python/torch_cuda.py --torch-distributed

With --torch-distributed the symmem group is built from torch.distributed's process group and
its store (no second store server).
"""

import sys

import torch

import symmem
import symmem.torch as st

if "--torch-distributed" in sys.argv:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    g = st.group_from_process_group()
else:
    g = symmem.Group.from_env()
n, r = g.world_size, g.rank
torch.cuda.set_device(g.local_rank % torch.cuda.device_count())  # shared GPU: SYMMEM_ALLOW_SHARED_GPU=1
torch.zeros(1, device="cuda")  # torch's CUDA context, current on this thread

# 1. A bf16 tensor in symmetric GPU memory; all-reduce in place on the current stream.
x = torch.from_dlpack(symmem.empty((4096,), dtype="bfloat16", device="cuda", group=g))
x.fill_(r + 1)
symmem.all_reduce(x, op="sum")
torch.cuda.synchronize()
assert torch.equal(x, torch.full_like(x, n * (n + 1) / 2))

# 2. The custom op inside torch.compile (no graph break; fake kernels give shapes to the tracer).
name = st.register_group(g)
buf = st.empty((1 << 20,), dtype=torch.float32, device="cuda", group=g)


@torch.compile(fullgraph=True)
def layer(h, w):
    buf.copy_((h @ w).view(-1))  # write this rank's partial result into symmetric memory
    torch.ops.symmem.all_reduce(buf, "sum", "auto", name)
    return torch.relu(buf)


h = torch.randn(1024, 64, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
w = torch.randn(64, 1024, device="cuda", generator=torch.Generator("cuda").manual_seed(r))
out = layer(h, w).view(-1)
want = torch.relu(sum(h @ torch.randn(64, 1024, device="cuda",
                                     generator=torch.Generator("cuda").manual_seed(k))
                      for k in range(n)).view(-1))
torch.cuda.synchronize()
torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-3)

# 3. A side stream: pass it explicitly (or make it current).
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    buf.fill_(1.0)
    symmem.all_reduce(buf, stream=s)
s.synchronize()
assert torch.equal(buf, torch.full_like(buf, float(n)))

if r == 0:
    print(f"torch example: {n} ranks OK on {symmem.resolve_backend(g, 'cuda')[0]}")
