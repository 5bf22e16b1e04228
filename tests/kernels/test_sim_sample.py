"""Simulator tier: the sampling kernel gives the same token as its numpy twin (tensorfold.reference.sampling) on
fresh random logits, for greedy (with ties and padded vocab) and for temperature / top-k / top-p / min-p draws;
plus properties of the twin itself (uniform in [0,1), rows independent, filters respected)."""

import numpy as np
import pytest

from tensorfold.kernels import sample as K
from tensorfold.reference import sampling as S

rng = np.random.default_rng()


def _run(logits, temps, top_k, top_p, min_p, seeds, positions, valid, **kw):
    n = logits.shape[0]
    out = np.full(n, -7, np.int32)
    K.launch_sample(logits, out, np.asarray(temps, np.float32), np.asarray(top_k, np.int32),
                    np.asarray(top_p, np.float32), np.asarray(min_p, np.float32), np.asarray(seeds, np.int64),
                    np.asarray(positions, np.int64), valid, max_blocks=2, **kw)
    return out


def test_greedy_ties_and_padding():
    V, valid = 300, 290
    lg = rng.standard_normal((4, V)).astype(np.float32)
    lg[3, :] = -np.inf  # every valid logit -inf: lowest id, never a padded one
    lg[0, 295] = 100.0  # padded id must be masked
    lg[1, 17] = lg[1, 5] = 50.0  # tie -> lowest id
    lg[2, :] = np.nan
    lg[2, 200] = 3.0
    out = _run(lg, [0, 0, 0, 0.8], [0] * 4, [1] * 4, [0] * 4, [1, 2, 3, 4], [0, 0, 0, 0], valid)
    for r in range(4):
        assert out[r] == S.sample(lg[r], 0.0, valid_vocab=valid)
    assert out[1] == 5 and out[2] == 200 and out[0] < valid and out[3] == 0


@pytest.mark.parametrize("case", [
    dict(t=1.0, k=0, p=1.0, mp=0.0),
    dict(t=0.7, k=20, p=1.0, mp=0.0),
    dict(t=1.3, k=0, p=0.9, mp=0.0),
    dict(t=0.8, k=50, p=0.8, mp=0.05),
    dict(t=1.0, k=0, p=1.0, mp=0.1),
])
def test_sampled_matches_twin(case):
    n, V, valid = 6, 257, 250
    lg = (rng.standard_normal((n, V)) * 2).astype(np.float32)
    seeds = rng.integers(0, 2**63 - 1, n, dtype=np.int64)
    pos = rng.integers(0, 100000, n, dtype=np.int64)
    out = _run(lg, [case["t"]] * n, [case["k"]] * n, [case["p"]] * n, [case["mp"]] * n, seeds, pos, valid)
    ref = [S.sample(lg[r], case["t"], case["k"], case["p"], case["mp"], int(seeds[r]), int(pos[r]), valid)
           for r in range(n)]
    assert out.tolist() == ref


def test_twin_properties():
    us = np.array([S.uniform(7, p) for p in range(2000)])
    assert (us >= 0).all() and (us < 1).all() and abs(us.mean() - 0.5) < 0.03
    lg = rng.standard_normal(100).astype(np.float32)
    top = set(np.argsort(-lg)[:5].tolist())
    for p in range(50):
        assert S.sample(lg, 1.0, top_k=5, seed=3, position=p) in top
    # top_p tiny keeps only the argmax
    assert S.sample(lg, 1.0, top_p=1e-6, seed=1, position=2) == int(np.argmax(lg))
    # same (seed, position) -> same token, independent of any other draw
    a = S.sample(lg, 0.9, seed=11, position=42)
    S.sample(lg, 0.9, seed=12, position=42)
    assert S.sample(lg, 0.9, seed=11, position=42) == a


@pytest.mark.parametrize("G", [1, 5, 64])
def test_greedy_split_rows(G):
    """Greedy over G slices per row (uneven, and empty slices when G is large) equals the twin: ties across slice
    edges go to the lowest id, padded ids never win, a NaN / -inf row gives id 0."""
    V, valid = 203, 197
    lg = rng.standard_normal((5, V)).astype(np.float32)
    lg[0, 198] = 100.0  # padded
    lg[1, [3, 100, 196]] = 40.0  # tie across slices
    lg[2, :] = np.nan
    lg[3, :] = -np.inf
    lg[4, 150:] = 9.0
    n = lg.shape[0]
    out = np.full(n, -7, np.int32)
    K.launch_sample(lg, out, np.zeros(n, np.float32), np.zeros(n, np.int32), np.ones(n, np.float32),
                    np.zeros(n, np.float32), np.arange(n, dtype=np.int64), np.zeros(n, np.int64), valid,
                    max_blocks=2, blocks_per_row=G)
    assert out.tolist() == [S.sample(lg[r], 0.0, valid_vocab=valid) for r in range(n)]
    assert out[1] == 3 and out[2] == 0 and out[3] == 0 and out[4] == 150
    # greedy_only (the caller knows every row is greedy): only the greedy pass runs, same ids
    out2 = np.full(n, -7, np.int32)
    K.launch_sample(lg, out2, np.zeros(n, np.float32), np.zeros(n, np.int32), np.ones(n, np.float32),
                    np.zeros(n, np.float32), np.arange(n, dtype=np.int64), np.zeros(n, np.int64), valid,
                    max_blocks=2, blocks_per_row=G, greedy_only=True)
    assert out2.tolist() == out.tolist()


@pytest.mark.parametrize("cap,G", [(8, 3), (24, 5), (None, 2)])
def test_sampled_paths_match_twin(cap, G):
    """Every path of the multi-block sampler against the twin: a small candidate cap forces the threshold draw
    (top-k off: sure bins + sorted edge bin for top-p, or no threshold) and the single-block fallback (top-k on and
    too many candidates); rounded logits give key ties at the top-k / top-p edges; -inf and NaN logits; min-p > 1
    keeps nothing (argmax)."""
    r = np.random.default_rng(int(rng.integers(1 << 30)))
    n, V, valid = 8, 211, 205
    lg = (r.standard_normal((n, V)) * 2.5).astype(np.float32)
    lg[1::2] = np.round(lg[1::2], 1)
    lg[0, :9] = -np.inf
    lg[2, 5:12] = np.nan
    t = np.array([1.0, 0.7, 1.3, 0.9, 1.0, 2.0, 0.8, 1.0], np.float32)
    k = np.array([0, 0, 0, 0, 7, 30, 0, 3], np.int32)
    p = np.array([0.9, 0.5, 1.0, 0.95, 0.8, 1.0, 0.3, 1.0], np.float32)
    mp = np.array([0.0, 0.0, 0.05, 0.0, 0.02, 0.0, 0.0, 2.0], np.float32)
    seeds = r.integers(0, 2**63 - 1, n, dtype=np.int64)
    pos = r.integers(0, 100000, n, dtype=np.int64)
    out = _run(lg, t, k, p, mp, seeds, pos, valid, cand_cap=cap, blocks_per_row=G)
    ref = [S.sample(lg[i], t[i], k[i], p[i], mp[i], int(seeds[i]), int(pos[i]), valid) for i in range(n)]
    assert out.tolist() == ref
    modes = K.sample_workspace(n, G)[5].copy_to_host()[:, 0].tolist()
    if cap == 8:
        assert 2 in modes and 3 in modes


def test_infinite_max_is_greedy():
    """A +inf logit makes the row greedy even at temperature > 0 (the twin's rule: no finite max)."""
    lg = rng.standard_normal((2, 100)).astype(np.float32)
    lg[0, [70, 30]] = np.inf
    lg[1, 99] = np.inf  # padded: masked, so row 1 is sampled normally
    out = _run(lg, [1.0, 1.0], [0, 5], [0.9, 1.0], [0, 0], [5, 6], [7, 8], 99)
    assert out.tolist() == [S.sample(lg[r], 1.0, [0, 5][r], [0.9, 1.0][r], 0.0, [5, 6][r], [7, 8][r], 99)
                            for r in range(2)]
    assert out[0] == 30


def test_topk_larger_than_minp_candidates():
    """Top-k with k above the candidates min-p leaves (no top-p): all candidates pass top-k. Row 0 first fills the
    select block's shared memory with 150 high logits, so a kernel that reads the k-th key past its candidates picks
    up row 0's leftovers (the bug this guards against) instead of passing its single candidate."""
    V = 300
    lg = (rng.standard_normal((2, V)) * 0.3).astype(np.float32)
    lg[0, :150] = 50.0
    lg[1, 77] = 10.0
    t, k, p, mp = [1.0, 1.0], [100, 3], [1.0, 1.0], [0.0, 0.5]
    seeds, pos = [3, 4], [5, 6]
    out = np.full(2, -7, np.int32)
    K.launch_sample(lg, out, np.asarray(t, np.float32), np.asarray(k, np.int32), np.asarray(p, np.float32),
                    np.asarray(mp, np.float32), np.asarray(seeds, np.int64), np.asarray(pos, np.int64), V,
                    max_blocks=1)
    ref = [S.sample(lg[r], t[r], k[r], p[r], mp[r], seeds[r], pos[r], V) for r in range(2)]
    assert out.tolist() == ref and out[1] == 77


def test_keep_ids_copies_stream_rows_only():
    """``keep_ids_k`` (in-graph chaining of decode steps): ``ids[r] = tok[r]`` exactly where ``row_slot[r] >= 0``;
    padding rows keep what they held; more rows than the block has threads; a too-short target is refused."""
    rng = np.random.default_rng()
    n = 70
    tok = rng.integers(0, 1 << 20, n).astype(np.int32)
    slot = rng.integers(-1, 5, n).astype(np.int32)
    slot[:2] = (-1, 3)
    before = rng.integers(0, 1 << 20, n + 3).astype(np.int32)
    ids = before.copy()
    K.launch_keep_ids(tok, slot, ids)
    want = before.copy()
    want[:n] = np.where(slot >= 0, tok, before[:n])
    assert np.array_equal(ids, want)
    with pytest.raises(ValueError, match="at least"):
        K.launch_keep_ids(tok, slot, ids[:5])
