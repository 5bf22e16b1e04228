"""SamplingParams and EngineConfig validation: every bad value raises an error that names its field."""

import math

import pytest

from tensorfold.config import EngineConfig
from tensorfold.sampling import SEED_MASK, SamplingParams, derive_seed


@pytest.mark.parametrize(
    "field,value,exc",
    [
        ("temperature", -0.1, ValueError),
        ("temperature", math.nan, ValueError),
        ("temperature", math.inf, ValueError),
        ("temperature", True, TypeError),
        ("temperature", "1", TypeError),
        ("top_p", 0.0, ValueError),
        ("top_p", 1.5, ValueError),
        ("top_k", -2, ValueError),
        ("top_k", 2.0, TypeError),
        ("top_k", False, TypeError),
        ("min_p", -0.01, ValueError),
        ("min_p", 1.01, ValueError),
        ("seed", 1.5, TypeError),
        ("seed", True, TypeError),
        ("max_tokens", 0, ValueError),
        ("max_tokens", 3.0, TypeError),
        ("stop_token_ids", [-1], ValueError),
        ("stop_token_ids", ["a"], TypeError),
        ("stop", [""], ValueError),
        ("stop", [3], TypeError),
        ("ignore_eos", 1, TypeError),
        ("draft", None, TypeError),
    ],
)
def test_bad_values_name_the_field(field, value, exc):
    with pytest.raises(exc, match=field):
        SamplingParams(**{field: value})


def test_normalisation():
    p = SamplingParams(temperature=0, top_k=-1, stop="END", stop_token_ids=7, seed=-1)
    assert p.greedy and p.top_k == 0 and p.stop == ("END",) and p.stop_token_ids == (7,)
    assert isinstance(p.temperature, float)
    assert p.resolve_seed([1, 2]) == SEED_MASK  # -1 reduced into [0, 2**63)
    with pytest.raises(ValueError, match="top_p"):
        p.with_(top_p=2.0)


def test_derived_seed_is_deterministic_and_prompt_dependent():
    a, b = [1, 2, 3], [1, 2, 4]
    assert SamplingParams().resolve_seed(a) == derive_seed(list(a)) == derive_seed(tuple(a))
    assert derive_seed(a) != derive_seed(b)
    assert 0 <= derive_seed(a) <= SEED_MASK
    # explicit seeds win over the prompt
    assert SamplingParams(seed=5).resolve_seed(a) == SamplingParams(seed=5).resolve_seed(b) == 5


@pytest.mark.parametrize(
    "field,value", [("backend", "tpu"), ("kv_cache", "int4"), ("parallel", 0), ("context", 1), ("prompt_chunk", 0),
                    ("parallel", 2.0)]
)
def test_engine_config_validation(field, value):
    with pytest.raises((ValueError, TypeError), match=field):
        EngineConfig(**{field: value})
    EngineConfig()  # defaults are valid
