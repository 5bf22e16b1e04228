"""Per-request sampling parameters and limits (`SamplingParams`), validated at construction.

The engine, the server and the CLI share this one type. Validation errors are `ValueError`s (or `TypeError`s for a
wrong type, e.g. a bool where a number is expected) whose message names the field and the offending value, so the
server can turn them into 400 responses with `param` set.

Seeds: sampling draws come from a counter-based generator keyed by (seed, absolute position), never a global
stream. A request without a seed gets one derived from its prompt ids (`derive_seed`), so a rerun of the same
prompt repeats. `resolve_seed` maps any Python int to the 63-bit range the samplers use.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from typing import Sequence

__all__ = ["SamplingParams", "derive_seed", "SEED_MASK", "MAX_LOGPROBS"]

SEED_MASK = (1 << 63) - 1  # seeds handed to the samplers lie in [0, 2**63)
MAX_LOGPROBS = 20  # alternatives per token at most (OpenAI's top_logprobs bound)


def derive_seed(prompt_ids: Sequence[int]) -> int:
    """The seed of a request that gave none: a hash of its prompt ids (deterministic across runs/processes)."""
    digest = hashlib.sha256(",".join(str(int(t)) for t in prompt_ids).encode()).digest()
    return int.from_bytes(digest[:8], "little") & SEED_MASK


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{name} must be a number, got {v!r} ({type(v).__name__})")
    v = float(v)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v!r}")
    return v


def _int(name: str, v) -> int:
    if not _is_int(v):
        # accept numpy integers, refuse floats/bools
        try:
            import numpy as np

            if isinstance(v, np.integer):
                return int(v)
        except ImportError:  # pragma: no cover
            pass
        raise TypeError(f"{name} must be an integer, got {v!r} ({type(v).__name__})")
    return int(v)


def _str_tuple(name: str, v) -> tuple[str, ...]:
    if v is None:
        return ()
    if isinstance(v, str):
        v = (v,)
    try:
        items = tuple(v)
    except TypeError:
        raise TypeError(f"{name} must be a string or a list of strings, got {v!r}") from None
    for s in items:
        if not isinstance(s, str):
            raise TypeError(f"{name} must contain only strings, got {s!r}")
        if s == "":
            raise ValueError(f"{name} must not contain an empty string")
    return items


def _int_tuple(name: str, v) -> tuple[int, ...]:
    if v is None:
        return ()
    if _is_int(v):
        v = (v,)
    try:
        items = tuple(v)
    except TypeError:
        raise TypeError(f"{name} must be a list of integers, got {v!r}") from None
    out = []
    for t in items:
        t = _int(name, t)
        if t < 0:
            raise ValueError(f"{name} must contain non-negative token ids, got {t}")
        out.append(t)
    return tuple(out)


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one request, and when to stop it.

    temperature    0 = greedy (argmax); > 0 scales logits.
    top_p          nucleus mass in (0, 1]; 1 = off.
    top_k          keep the k most likely tokens; 0 or -1 = off.
    min_p          drop tokens below min_p * p(max), in [0, 1]; 0 = off.
    seed           int or None (None: derived from the prompt ids, see `derive_seed`).
    max_tokens     completion tokens at most (>= 1), or None: until a stop or the context is full.
    stop_token_ids extra token ids that finish the request (always honoured, even with ignore_eos).
    stop           stop strings (finish_reason "stop"; the matched text is not returned).
    ignore_eos     do not stop at the model's end-of-sequence ids.
    draft          allow speculative drafting (False: decode serially, the reference drafted output must equal);
                   the output is the same either way, only the speed differs.
    logprobs       None: off; k in 0..MAX_LOGPROBS: report each sampled token's log-probability and the k most
                   likely alternatives (of the model's distribution: log-softmax of the raw logits over the valid
                   vocabulary, before temperature and the top-k / top-p / min-p filters, as vLLM reports them).
    prompt_logprobs None: off; k in 0..MAX_LOGPROBS: the same for every prompt token after the first (scoring a
                   text); with it, max_tokens may be 0 (score only, generate nothing).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    max_tokens: int | None = None
    stop_token_ids: tuple[int, ...] = field(default=())
    stop: tuple[str, ...] = field(default=())
    ignore_eos: bool = False
    draft: bool = True
    logprobs: int | None = None
    prompt_logprobs: int | None = None

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen dataclass)
        t = _number("temperature", self.temperature)
        if t < 0:
            raise ValueError(f"temperature must be >= 0, got {t}")
        set_("temperature", t)
        p = _number("top_p", self.top_p)
        if not (0.0 < p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {p}")
        set_("top_p", p)
        k = _int("top_k", self.top_k)
        if k < -1:
            raise ValueError(f"top_k must be -1 or 0 (off) or a positive integer, got {k}")
        set_("top_k", 0 if k == -1 else k)
        m = _number("min_p", self.min_p)
        if not (0.0 <= m <= 1.0):
            raise ValueError(f"min_p must be in [0, 1], got {m}")
        set_("min_p", m)
        if self.seed is not None:
            set_("seed", _int("seed", self.seed))
        for name in ("logprobs", "prompt_logprobs"):
            v = getattr(self, name)
            if v is not None:
                k = _int(name, v)
                if not 0 <= k <= MAX_LOGPROBS:
                    raise ValueError(f"{name} must be in [0, {MAX_LOGPROBS}] (alternatives per token), got {k}")
                set_(name, k)
        if self.max_tokens is not None:
            n = _int("max_tokens", self.max_tokens)
            if n < (0 if self.prompt_logprobs is not None else 1):
                raise ValueError(f"max_tokens must be >= 1 (0 only with prompt_logprobs), got {n}")
            set_("max_tokens", n)
        set_("stop_token_ids", _int_tuple("stop_token_ids", self.stop_token_ids))
        set_("stop", _str_tuple("stop", self.stop))
        if not isinstance(self.ignore_eos, bool):
            raise TypeError(f"ignore_eos must be a bool, got {self.ignore_eos!r}")
        if not isinstance(self.draft, bool):
            raise TypeError(f"draft must be a bool, got {self.draft!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def resolve_seed(self, prompt_ids: Sequence[int]) -> int:
        """The seed the samplers use: the given one reduced to [0, 2**63), or one derived from the prompt."""
        if self.seed is None:
            return derive_seed(prompt_ids)
        return self.seed & SEED_MASK

    def with_(self, **changes) -> "SamplingParams":
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    @staticmethod
    def greedy_params(max_tokens: int | None = None, **kw) -> "SamplingParams":
        return SamplingParams(temperature=0.0, max_tokens=max_tokens, **kw)

