"""Runtime knobs of an engine (`EngineConfig`): frozen, validated once, shared by the CLI, the server and `Engine`.

These are serving choices, not model facts (those live in `tensorfold.model.config.ModelConfig`):

backend       "auto" (cuda when a GPU and the cuda runtime are present, else cpu), "cpu" or "cuda"
parallel      streams decoded together (slots), >= 1
context       tokens per stream (prompt + completion), >= 2; the engine caps it at the model's
              max_position_embeddings
kv_cache      "bf16" or "fp8" (e4m3 with a row scale) for the full-attention layers' KV cache
prompt_chunk  prompt tokens a stream prefills per scheduling round, >= 1
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EngineConfig", "BACKENDS", "KV_CACHE_FORMATS"]

BACKENDS = ("auto", "cpu", "cuda")
KV_CACHE_FORMATS = ("bf16", "fp8")


def _pos_int(name: str, v, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            import numpy as np

            if isinstance(v, np.integer):
                v = int(v)
            else:
                raise TypeError
        except TypeError:
            raise TypeError(f"{name} must be an integer, got {v!r}") from None
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    return int(v)


@dataclass(frozen=True)
class EngineConfig:
    backend: str = "auto"
    parallel: int = 4
    context: int = 4096
    kv_cache: str = "bf16"
    prompt_chunk: int = 512

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.kv_cache not in KV_CACHE_FORMATS:
            raise ValueError(f"kv_cache must be one of {', '.join(KV_CACHE_FORMATS)}, got {self.kv_cache!r}")
        object.__setattr__(self, "parallel", _pos_int("parallel", self.parallel, 1))
        object.__setattr__(self, "context", _pos_int("context", self.context, 2))
        object.__setattr__(self, "prompt_chunk", _pos_int("prompt_chunk", self.prompt_chunk, 1))
