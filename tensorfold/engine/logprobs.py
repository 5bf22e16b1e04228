"""Log-probabilities of drawn tokens (host side): what a request with `SamplingParams.logprobs` gets back.

A token's entry is (token id, its log-probability, the k most likely tokens with theirs), from the logits row the
token was drawn from: log-softmax over the valid vocabulary (ids below `valid_vocab`; the padding ids of the
embedding never count), in float64, of the raw logits, before temperature and the top-k / top-p / min-p filters
(as vLLM reports them by default). Alternatives are ordered by log-probability, ties by id. A log-probability
below -9999 (a token the model gives almost no mass) is reported as -9999.0, which JSON can carry.
"""

from __future__ import annotations

import numpy as np

__all__ = ["token_entry", "FLOOR"]

FLOOR = -9999.0


def token_entry(logits_row, token: int, k: int, valid_vocab: int) -> tuple[int, float, list[tuple[int, float]]]:
    """(token, logprob, [(id, logprob)] * k) for one drawn token; see the module docstring."""
    x = np.asarray(logits_row, dtype=np.float64)[: int(valid_vocab)]
    m = float(x.max())
    lse = m + float(np.log(np.exp(x - m).sum()))
    token = int(token)
    lp = float(x[token] - lse) if 0 <= token < x.size else FLOOR
    top: list[tuple[int, float]] = []
    if k > 0:
        k = min(int(k), x.size)
        cand = np.argpartition(-x, k - 1)[:k] if k < x.size else np.arange(x.size)
        # the k-th value may be tied with ids outside the partition: take every id at or above it, then order
        cut = x[cand].min()
        cand = np.flatnonzero(x >= cut)
        order = sorted(cand.tolist(), key=lambda i: (-x[i], i))[:k]
        top = [(int(i), max(FLOOR, float(x[i] - lse))) for i in order]
    return token, max(FLOOR, lp), top
