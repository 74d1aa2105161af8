"""MoE dispatch and combine (symmem.moe_layout / moe_dispatch / moe_combine) on the host backend,
under symmem-run, against a single-process reference that every rank computes for itself from
the same seeded inputs. Results must be bitwise equal to the reference (symmem/moe.hpp gives the
row order and the order of combine's sums)."""

import os

import numpy as np
import pytest

if "SYMMEM_WORLD_SIZE" not in os.environ:
    pytest.skip("not launched by symmem-run (no SYMMEM_WORLD_SIZE)", allow_module_level=True)

import symmem  # noqa: E402


@pytest.fixture(scope="module")
def g():
    return symmem.Group.from_env()


# ---- inputs, the same on every rank ---------------------------------------------------------------
def routing(kind, w, tokens, k, experts, seed):
    """topk_idx of every rank: [w] arrays of [tokens[r], k]."""
    out = []
    for r in range(w):
        rng = np.random.default_rng(seed * 1000 + r)
        t = tokens[r]
        if kind == "random":
            idx = np.stack([rng.permutation(experts)[:k] for _ in range(t)]) if t else \
                np.zeros((0, k), np.int64)
        elif kind == "zipf":  # skewed: a few experts get most tokens
            p = 1.0 / np.arange(1, experts + 1) ** 1.2
            idx = np.stack([rng.choice(experts, size=k, replace=False, p=p / p.sum())
                            for _ in range(t)]) if t else np.zeros((0, k), np.int64)
        elif kind == "dropped":  # random, with about a third of the slots dropped
            idx = np.stack([rng.permutation(experts)[:k] for _ in range(t)]) if t else \
                np.zeros((0, k), np.int64)
            idx[rng.random(idx.shape) < 0.35] = -1
        elif kind == "one_rank":  # all top-k experts of a token on one rank
            local = experts // w
            dst = rng.integers(0, w, size=t)
            idx = np.stack([d * local + rng.permutation(local)[:k] for d in dst]) if t else \
                np.zeros((0, k), np.int64)
        else:
            raise ValueError(kind)
        out.append(idx.astype(np.int64))
    return out


def tokens_of(r, t, h):
    """Rank r's tokens: small integers, exact in every dtype."""
    return ((np.arange(t * h).reshape(t, h) * 7 + r * 13) % 61 - 30).astype(np.float32)


def expected_rows(idx_all, me, local):
    """(rank, token, slot) of each row this rank receives, in symmem/moe.hpp's order."""
    rows = []
    for e in range(local):
        for s, idx in enumerate(idx_all):
            for t in range(idx.shape[0]):
                for j in range(idx.shape[1]):
                    if idx[t, j] == me * local + e:
                        rows.append((s, t, j))
    return rows


def expert_fn(x, expert):
    return x * np.float32(expert % 5 + 1) - np.float32(expert)  # exact on small integers


def expected_combine(idx, x, w):
    out = np.zeros_like(x)
    for t in range(idx.shape[0]):
        acc = np.zeros(x.shape[1], np.float32)
        for j in range(idx.shape[1]):
            if idx[t, j] >= 0:
                acc = acc + np.float32(w[t, j]) * expert_fn(x[t], idx[t, j])
        out[t] = acc
    return out


def weights_of(r, t, k):
    rng = np.random.default_rng(777 + r)
    return rng.random((t, k), dtype=np.float32)


def run(g, kind, tokens, k, local, h, mode="normal", max_tokens=0, seed=1, sym=False):
    """sym: x and y in symmetric memory, which dispatch and combine then read from the peers
    directly (NOTE [moe pull dispatch]); the results must be the same bits."""
    w, me = g.world_size, g.rank
    experts = local * w
    idx_all = routing(kind, w, tokens, k, experts, seed)
    idx, t = idx_all[me], tokens[me]
    x = tokens_of(me, t, h)
    if sym:  # one size on every rank: the most tokens any rank has
        xs = np.from_dlpack(symmem.empty((max(max(tokens), 1), h), dtype="float32", group=g))
        xs[:t] = x
        x = xs[:t]
    layout = symmem.moe_layout(idx, experts, mode=mode, max_tokens=max_tokens, group=g)
    rows = expected_rows(idx_all, me, local)
    counts = [sum(1 for (s, tt, j) in rows if idx_all[s][tt, j] == me * local + e)
              for e in range(local)]
    assert layout.expert_counts == counts
    recv = np.full(layout.recv_shape(h), np.nan, np.float32)
    symmem.moe_dispatch(x, layout, recv)
    flat = recv.reshape(-1, h)
    if mode == "normal":
        assert layout.recv_rows == len(rows)
        got_rows = [r for r in layout.row_source]
    else:
        slab = w * max_tokens
        assert recv.shape == (local, slab, h)
        got_rows = [r for r in layout.row_source if r[0] >= 0]
        for e in range(local):
            assert layout.expert_offset(e) == e * slab
            assert np.isnan(flat[e * slab + counts[e]:(e + 1) * slab]).all()  # not written
    assert got_rows == rows
    live = [i for i, r in enumerate(layout.row_source) if r[0] >= 0]
    for i, (s, tt, j) in zip(live, rows):
        assert np.array_equal(flat[i], tokens_of(s, tokens[s], h)[tt]), (i, s, tt, j)
    # The experts, then combine.
    y = np.zeros_like(flat)
    if sym:  # room for the most rows any rank gets
        most = max(len(expected_rows(idx_all, r, local)) for r in range(w))
        if mode != "normal":
            most = local * w * max_tokens
        ys = np.from_dlpack(symmem.empty((max(most, 1), h), dtype="float32", group=g))
        y = ys[:flat.shape[0]]
        y[:] = 0
    for i, (s, tt, j) in zip(live, rows):
        y[i] = expert_fn(flat[i], idx_all[s][tt, j])
    wts = weights_of(me, t, k)
    out = np.full((t, h), np.nan, np.float32)
    symmem.moe_combine(y.reshape(recv.shape), layout, wts, out)
    assert np.array_equal(out, expected_combine(idx, x, wts))  # bitwise


@pytest.mark.parametrize("kind", ["random", "zipf", "dropped", "one_rank"])
def test_dispatch_combine(g, kind):
    w = g.world_size
    run(g, kind, tokens=[9 + 3 * r for r in range(w)], k=min(4, 2 * w), local=4, h=24)


@pytest.mark.parametrize("kind", ["random", "dropped", "one_rank"])
def test_pull_from_symmetric_memory(g, kind):
    w = g.world_size
    run(g, kind, tokens=[9 + 3 * r for r in range(w)], k=min(4, 2 * w), local=4, h=24, sym=True)


def test_pull_with_ranks_without_tokens_and_low_latency(g):
    w = g.world_size
    run(g, "random", tokens=[0 if r % 2 else 11 for r in range(w)], k=2, local=3, h=16, sym=True)
    run(g, "zipf", tokens=[5 + r for r in range(w)], k=2, local=2, h=8, mode="low_latency",
        max_tokens=5 + w, sym=True)


def test_some_ranks_without_tokens(g):
    w = g.world_size
    run(g, "random", tokens=[0 if r % 2 else 11 for r in range(w)], k=2, local=3, h=16)


def test_low_latency_layout(g):
    w = g.world_size
    tokens = [5 + r for r in range(w)]
    run(g, "dropped", tokens=tokens, k=2, local=2, h=8, mode="low_latency", max_tokens=16)


def test_low_latency_max_tokens_checked(g):
    with pytest.raises(ValueError, match="max_tokens"):
        symmem.moe_layout(np.zeros((4, 1), np.int64), g.world_size, mode="low_latency",
                          max_tokens=3, group=g)


def test_low_latency_slab_overflow_is_named(g):
    """A token that lists one expert in several slots sends it several rows: with every token of
    every rank listing expert 0 three times, expert 0 gets 3 * w * 2 rows, more than its slab of
    w * max_tokens = 2 * w. Rank 0, which holds it, refuses the layout naming the expert; the
    others' layouts are fine (what they receive fits)."""
    w = g.world_size
    idx = np.zeros((2, 3), np.int64)  # 2 tokens, expert 0 in all three slots
    if g.rank == 0:
        with pytest.raises(ValueError, match=f"'topk_idx'.*sends {6 * w} rows to local expert 0, "
                           f"more than its low_latency slab of {2 * w}"):
            symmem.moe_layout(idx, w, mode="low_latency", max_tokens=2, group=g)
    else:
        layout = symmem.moe_layout(idx, w, mode="low_latency", max_tokens=2, group=g)
        assert list(layout.expert_counts) == [0]
    symmem.barrier(group=g)


def test_fp8_tokens_with_scales(g):
    w, me, h = g.world_size, g.rank, 256
    t, k, local = 6, 2, 2
    idx_all = routing("random", w, [t] * w, k, local * w, 5)
    layout = symmem.moe_layout(idx_all[me], local * w, group=g)
    x = symmem.empty((t, h), dtype="float8_e4m3fn", group=g)
    raw = np.from_dlpack(x.handle.array((t * h,), "uint8")).reshape(t, h)

    def raw_of(r):
        return ((np.arange(t * h).reshape(t, h) + 31 * r) % 251).astype(np.uint8)

    raw[:] = raw_of(me)
    scales = (np.arange(t * 2, dtype=np.float32).reshape(t, 2) + 0.5 + me)
    # Symmetric allocations have one size on every rank: room for the most rows any rank gets.
    cap = max(len(expected_rows(idx_all, r, local)) for r in range(w))
    whole = symmem.empty((cap, h), dtype="float8_e4m3fn", group=g)
    rx = whole.handle.array((layout.recv_rows, h), "float8_e4m3fn")
    rs = np.zeros((layout.recv_rows, h // 128), np.float32)
    symmem.moe_dispatch(x, layout, rx, x_scales=scales, recv_scales=rs)
    got = np.from_dlpack(rx.handle.array((layout.recv_rows * h,), "uint8")).reshape(-1, h)
    for i, (s, tt, j) in enumerate(layout.row_source):
        assert np.array_equal(got[i], raw_of(s)[tt])
        assert np.array_equal(rs[i], np.arange(tt * 2, tt * 2 + 2, dtype=np.float32) + 0.5 + s)
    with pytest.raises(ValueError, match="x_scales"):
        symmem.moe_dispatch(x, layout, rx)  # fp8 without its scales
    symmem.barrier(group=g)


def test_fp8_hidden_not_multiple_of_128(g):
    me, h, t = g.rank, 100, 2
    layout = symmem.moe_layout(np.zeros((t, 1), np.int64), g.world_size, group=g)
    x = symmem.empty((t, h), dtype="float8_e4m3fn", group=g)
    rx = symmem.empty((t * g.world_size, h), dtype="float8_e4m3fn", group=g)
    with pytest.raises(ValueError, match="'hidden' = 100 is not a multiple of 128"):
        symmem.moe_dispatch(x, layout, rx.handle.array((layout.recv_rows, h), "float8_e4m3fn"),
                            x_scales=np.zeros((t, 0), np.float32),
                            recv_scales=np.zeros((layout.recv_rows, 0), np.float32))
    del me
    symmem.barrier(group=g)


def test_bytes_move_in_any_dtype(g):
    # int16 / uint8 tokens move bitwise (no arithmetic on dispatch).
    w, me, h, t = g.world_size, g.rank, 12, 7
    idx_all = routing("random", w, [t] * w, 2, 2 * w, 9)
    layout = symmem.moe_layout(idx_all[me].astype(np.int32), 2 * w, group=g)
    for dt in (np.int16, np.uint8):
        x = ((np.arange(t * h).reshape(t, h) + 17 * me) % 200).astype(dt)
        rx = np.zeros(layout.recv_shape(h), dt)
        symmem.moe_dispatch(x, layout, rx)
        for i, (s, tt, j) in enumerate(layout.row_source):
            want = ((np.arange(t * h).reshape(t, h) + 17 * s) % 200).astype(dt)[tt]
            assert np.array_equal(rx[i], want)


def test_bad_input(g):
    w = g.world_size
    with pytest.raises(ValueError, match="'num_experts'"):
        symmem.moe_layout(np.zeros((2, 1), np.int64), w + 1 if w > 1 else 0, group=g)
    with pytest.raises(ValueError, match=r"'topk_idx' \[1, 0\] = 99"):
        symmem.moe_layout(np.array([[0], [99]], np.int64), w, group=g)
    with pytest.raises(ValueError, match="'topk_idx' has dtype float32"):
        symmem.moe_layout(np.zeros((2, 1), np.float32), w, group=g)
    layout = symmem.moe_layout(np.zeros((3, 1), np.int64), w, group=g)
    with pytest.raises(ValueError, match="'recv_x'"):
        symmem.moe_dispatch(np.zeros((3, 4), np.float32), layout,
                            np.zeros((layout.recv_rows + 1, 4), np.float32))
    with pytest.raises(ValueError, match="'dtype' = int32"):
        symmem.moe_combine(np.zeros(layout.recv_shape(4), np.int32), layout,
                           np.zeros((3, 1), np.float32), np.zeros((3, 4), np.int32))
    symmem.barrier(group=g)


def test_bf16_combine(g):
    torch = pytest.importorskip("torch", reason="bfloat16 arrays need torch here")
    w, me, h, t, k = g.world_size, g.rank, 16, 5, 2
    idx_all = routing("random", w, [t] * w, k, 2 * w, 3)
    layout = symmem.moe_layout(idx_all[me], 2 * w, group=g)
    x = torch.from_numpy(tokens_of(me, t, h)).to(torch.bfloat16)
    rx = torch.zeros(layout.recv_shape(h), dtype=torch.bfloat16)
    symmem.moe_dispatch(x, layout, rx)
    y = torch.stack([torch.from_numpy(expert_fn(rx[i].float().numpy(),
                                                idx_all[s][tt, j])).to(torch.bfloat16)
                     for i, (s, tt, j) in enumerate(layout.row_source)]) if layout.recv_rows \
        else torch.zeros((0, h), dtype=torch.bfloat16)
    wts = torch.from_numpy(weights_of(me, t, k))
    out = torch.zeros((t, h), dtype=torch.bfloat16)
    symmem.moe_combine(y, layout, wts, out)
    want = torch.zeros((t, h), dtype=torch.float32)
    for tt in range(t):
        acc = torch.zeros(h, dtype=torch.float32)
        for j in range(k):
            e = int(idx_all[me][tt, j])
            yr = torch.from_numpy(expert_fn(x[tt].float().numpy(), e)).to(torch.bfloat16)
            acc = acc + wts[tt, j] * yr.float()
        want[tt] = acc
    assert torch.equal(out, want.to(torch.bfloat16))


def test_torch_ops_with_a_rank_without_tokens(g):
    """symmem.torch.moe_dispatch / moe_combine (the torch custom ops) against the same
    reference, rank 0 with no tokens; the handle's row_source is the layout's."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    import symmem.torch as st

    w, me = g.world_size, g.rank
    local, k, h = 3, min(3, 2 * w), 16
    tokens = [0] + [5 + r for r in range(1, w)]
    idx_all = routing("dropped", w, tokens, k, local * w, seed=5)
    idx, t = idx_all[me], tokens[me]
    x = tokens_of(me, t, h)
    recv_x, counts, handle = st.moe_dispatch(torch.from_numpy(x), torch.from_numpy(idx),
                                             local * w)
    rows = expected_rows(idx_all, me, local)
    assert handle.row_source.shape == (len(rows), 3)
    assert [tuple(r) for r in handle.row_source.tolist()] == rows
    assert counts.tolist() == [sum(1 for (s, tt, j) in rows if idx_all[s][tt, j] == me * local + e)
                               for e in range(local)]
    y = torch.zeros_like(recv_x)
    for i, (s, tt, j) in enumerate(rows):
        assert np.array_equal(recv_x[i].numpy(), tokens_of(s, tokens[s], h)[tt])
        y[i] = torch.from_numpy(expert_fn(recv_x[i].numpy(), idx_all[s][tt, j]))
    wts = weights_of(me, t, k)
    out = st.moe_combine(y, handle, torch.from_numpy(wts))
    assert out.shape == (t, h)
    assert np.array_equal(out.numpy(), expected_combine(idx, x, wts))  # bitwise
