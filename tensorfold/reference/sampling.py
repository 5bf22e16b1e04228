"""Counter-based RNG and token sampling: the numpy twin of ``tensorfold.kernels.sample`` (and the cpu backend's
sampler).

Owns
- ``hash64(seed, position)``: splitmix64-style mix of (seed, absolute position) in exact 64-bit integer math;
  ``uniform(seed, position) -> float`` in [0, 1) = top 53 bits of that hash times 2^-53. No global RNG state, so a
  token drawn at a position never depends on other rows or on earlier draws.
- ``float_key(x)``: the order-preserving uint32 key of a float32 (larger float -> larger key; NaN -> 0).
- ``sample(logits, temperature, top_k=0, top_p=1.0, min_p=0.0, seed=0, position=0, valid_vocab=None) -> int``
  (also ``sample(logits, params, seed, position, valid_vocab)`` with a ``SamplingParams``).

The rule (shared with the kernel, which must produce the same token):
1. Only ids < valid_vocab take part (padded vocab rows are masked); NaN logits never win.
2. temperature <= 0, or every logit -inf: greedy argmax, ties -> lowest id.
3. Otherwise, with m the max logit, weights ``w = exp((l - m) / T)`` in float64.
   top_k (0 < k < valid): keep logits whose key >= the k-th largest key (ties at the edge kept).
   top_p (< 1): among those, keep keys >= t, t the largest key with (mass of kept keys >= t) >= top_p * (their mass).
   min_p (> 0): keep w >= min_p (i.e. p >= min_p * p_max).
   Draw: Z = sum of kept w; the token is the first id (in id order) whose running sum of kept w exceeds
   ``uniform(seed, position) * Z`` (float64).
The kernel sums in a different order (float64), so the two can differ only when the draw lands within ~1e-13
relative of a bucket edge.
"""

from __future__ import annotations

import numpy as np

__all__ = ["hash64", "uniform", "float_key", "sample", "MASK64"]

MASK64 = (1 << 64) - 1
_GOLD = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


def hash64(seed: int, position: int) -> int:
    z = ((int(seed) & MASK64) ^ ((int(position) * _GOLD) & MASK64)) & MASK64
    z = (z + _GOLD) & MASK64
    z = ((z ^ (z >> 30)) * _M1) & MASK64
    z = ((z ^ (z >> 27)) * _M2) & MASK64
    z = z ^ (z >> 31)
    return z


def uniform(seed: int, position: int) -> float:
    """Uniform in [0, 1) from (seed, position): (hash >> 11) * 2^-53."""
    return float(hash64(seed, position) >> 11) * (1.0 / 9007199254740992.0)


def float_key(x) -> np.ndarray:
    """Order-preserving uint32 keys of float32 values; NaN -> 0 (below every number)."""
    a = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    b = a.view(np.uint32)
    k = np.where(b >> np.uint32(31), ~b, b | np.uint32(0x80000000)).astype(np.uint32)
    return np.where(np.isnan(a), np.uint32(0), k)


def sample(logits, temperature, top_k=0, top_p=1.0, min_p=0.0, seed=0, position=0, valid_vocab=None) -> int:
    if hasattr(temperature, "temperature"):  # sample(logits, params, seed, position, valid_vocab)
        params = temperature
        seed, position, valid_vocab = top_k, top_p, min_p
        temperature, top_k, top_p, min_p = params.temperature, params.top_k, params.top_p, params.min_p
        seed = 0 if seed is None else seed
        position = 0 if position is None else position
        valid_vocab = None if isinstance(valid_vocab, float) else valid_vocab
    logits = np.asarray(logits, dtype=np.float32).reshape(-1)
    V = logits.shape[0] if valid_vocab is None else min(int(valid_vocab), logits.shape[0])
    lg = logits[:V]
    valid = ~np.isnan(lg)
    lv = np.where(valid, lg, np.float32(-np.inf))
    greedy = int(np.argmax(lv)) if V > 0 else 0
    m = lv[greedy] if V > 0 else -np.inf
    if not (float(temperature) > 0.0) or not np.isfinite(m):
        return greedy
    T = np.float64(np.float32(temperature))
    w = np.exp((lv.astype(np.float64) - np.float64(m)) / T)
    w[~valid] = 0.0
    key = float_key(lg)
    kept = valid.copy()
    nvalid = int(valid.sum())
    k = int(top_k)
    if 0 < k < V and k <= nvalid:
        tk = np.sort(key[valid])[::-1][k - 1]
        kept &= key >= tk
    tp_ = float(np.float32(top_p))
    if tp_ < 1.0:
        Zk = w[kept].sum()
        target = np.float64(np.float32(top_p)) * Zk
        ks = key[kept]
        uk, inv = np.unique(ks, return_inverse=True)  # ascending
        mass = np.zeros(uk.shape[0], np.float64)
        np.add.at(mass, inv, w[kept])
        cum = np.cumsum(mass[::-1])
        hit = np.nonzero(cum >= target)[0]
        j = hit[0] if hit.size else uk.shape[0] - 1
        tpk = uk[::-1][j]
        kept &= key >= tpk
    mp = float(np.float32(min_p))
    if mp > 0.0:
        kept &= w >= np.float64(np.float32(min_p))
    wk = np.where(kept, w, 0.0)
    Z = wk.sum()
    t = uniform(seed, position) * Z
    c = np.cumsum(wk)
    hit = np.nonzero(c > t)[0]
    if hit.size:
        return int(hit[0])
    idx = np.nonzero(kept)[0]
    return int(idx[-1]) if idx.size else greedy
