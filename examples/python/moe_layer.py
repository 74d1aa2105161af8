"""A small expert-parallel MoE layer with symmem's dispatch and combine, checked against a
single-process reference.

    symmem-run -n 4 python examples/python/moe_layer.py          # CPU tensors (host backend)

Each rank holds num_experts / world_size experts (a weight matrix each) and a batch of tokens.
The layer routes every token to its top-k experts, sends it to their ranks once per rank
(symmem.torch.moe_dispatch), runs each local expert on its rows, brings the outputs back and sums
them with the router's weights (symmem.torch.moe_combine). The reference computes the same layer
on one process from every rank's inputs (each rank rebuilds them from the shared seed) and must
match exactly: the experts' matmuls are on integers, exact in float32, and combine sums slot by
slot in a fixed order. Then torch.compile traces the layer (fullgraph, low_latency mode).
"""

import sys

try:
    import torch
except ImportError:
    print("skipped: this example needs torch (pip install torch)")
    sys.exit(77)

import symmem
import symmem.torch as st

g = symmem.Group.from_env()
W, R = g.world_size, g.rank
HIDDEN, TOKENS, TOPK, LOCAL = 32, 24, 2, 2
EXPERTS = LOCAL * W


def inputs(rank):
    """Rank `rank`'s tokens and router logits (integers, so every product is exact)."""
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randint(-3, 4, (TOKENS, HIDDEN), generator=gen).float()
    logits = torch.randn(TOKENS, EXPERTS, generator=gen)
    return x, logits


def make_expert_weight(e):
    gen = torch.Generator().manual_seed(1000 + e)
    return torch.randint(-2, 3, (HIDDEN, HIDDEN), generator=gen).float()


WEIGHTS = [make_expert_weight(e) for e in range(EXPERTS)]  # the reference needs them all


def route(logits):
    weights, idx = torch.topk(torch.softmax(logits, dim=-1), TOPK, dim=-1)
    return idx.to(torch.int64), weights.to(torch.float32)


def layer(x, logits, max_tokens=0):
    idx, weights = route(logits)
    recv_x, counts, handle = st.moe_dispatch(x, idx, EXPERTS, group=g, max_tokens=max_tokens)
    rows = recv_x.reshape(-1, HIDDEN)
    y = torch.zeros_like(rows)
    for e in range(LOCAL):  # the local experts, each on its rows
        start = e * W * max_tokens if max_tokens else int(counts[:e].sum())
        n = int(counts[e]) if not max_tokens else W * max_tokens  # LL: the whole slab
        y[start:start + n] = rows[start:start + n] @ WEIGHTS[R * LOCAL + e]
    return st.moe_combine(y.reshape(recv_x.shape), handle, weights)


def reference(x, logits):
    idx, weights = route(logits)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        acc = torch.zeros(HIDDEN)
        for j in range(TOPK):
            acc = acc + weights[t, j] * (x[t] @ WEIGHTS[int(idx[t, j])])
        out[t] = acc
    return out


x, logits = inputs(R)
want = reference(x, logits)
ok = True
for mode, max_tokens in (("normal", 0), ("low_latency", TOKENS)):
    got = layer(x, logits, max_tokens)
    same = torch.equal(got, want)
    ok &= same
    print(f"rank {R}: moe layer ({mode}) {'matches' if same else 'DIFFERS FROM'} the reference")

# torch.compile traces dispatch and combine through their fake kernels (static shapes in
# low_latency mode); aot_eager runs the traced graph without generating code.
compiled = torch.compile(lambda a, b: layer(a, b, TOKENS), fullgraph=True, backend="aot_eager")
same = torch.equal(compiled(x, logits), want)
ok &= same
print(f"rank {R}: torch.compile(fullgraph=True) layer {'matches' if same else 'DIFFERS'}")
sys.exit(0 if ok else 1)
