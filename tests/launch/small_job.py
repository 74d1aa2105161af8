"""The small job every real launcher runs in CI (tests/launch/real_launcher.sh): a group from the
launcher's environment, an all-reduce on symmetric memory and one on a plain array, checked."""

import numpy as np

import symmem

g = symmem.Group.from_env()
n, r = g.world_size, g.rank
b = symmem.empty((4096,), dtype="float32", group=g)
np.from_dlpack(b)[:] = r + 1
symmem.all_reduce(b)
assert (np.from_dlpack(b) == n * (n + 1) / 2).all(), np.from_dlpack(b)[:4]
x = np.arange(1000, dtype=np.int64) * (r + 1)
symmem.all_reduce(x, op="max")
assert (x == np.arange(1000) * n).all()
symmem.barrier()
print(f"small_job: rank {r} of {n}: OK", flush=True)
