"""symmem from Python on the host backend (CPU shared memory), with numpy.

    symmem-run -n 4 python examples/python/numpy_cpu.py

Every rank allocates the same symmetric arrays; numpy sees them without a copy (DLPack), each
rank reads its peers' buffers directly, and the collectives run in place.
"""

import numpy as np

import symmem

g = symmem.Group.from_env()  # symmem-run, torchrun, mpirun or srun
n, r = g.world_size, g.rank

# 1. All-reduce in place on symmetric memory (zero copy).
b = symmem.empty((1 << 16,), dtype="float32", group=g)
x = np.from_dlpack(b)  # the same memory as b
x[:] = r + 1
symmem.all_reduce(b, op="sum")
assert (x == n * (n + 1) / 2).all()

# 2. Direct loads from every peer's buffer.
x[:] = r
b.barrier()  # everyone has written
peers = [int(np.from_dlpack(b.peer(p))[0]) for p in range(n)]
assert peers == list(range(n)), peers
b.barrier()  # nobody overwrites while others read

# 3. One-sided put with a signal to the right neighbour.
right, left = (r + 1) % n, (r - 1) % n
inbox = symmem.zeros((8,), dtype="int64", group=g)
symmem.put(inbox, np.full(8, r, dtype=np.int64), right, signal=True, channel=1)
inbox.wait_signal(left, channel=1, timeout=30)
assert (np.from_dlpack(inbox) == left).all()

# 4. Ordinary numpy arrays work too (copied through the group's symmetric workspace).
send = np.arange(4 * n, dtype=np.float64) + 100 * r
recv = np.empty(4, dtype=np.float64)
symmem.reduce_scatter(send, recv, op="max")
gathered = np.empty(4 * n, dtype=np.float64)
symmem.all_gather(recv, gathered)
assert (gathered == np.arange(4 * n) + 100 * (n - 1)).all()

# 5. Errors are Python exceptions with the rank in the message.
try:
    symmem.all_reduce(b, op="product")
except symmem.InvalidArgument as e:
    if r == 0:
        print("as expected:", e)

symmem.barrier()
if r == 0:
    print(f"numpy example: {n} ranks OK")
