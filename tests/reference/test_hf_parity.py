"""ReferenceModel vs transformers' Qwen3_5ForCausalLM (float32, CPU, eager attention, torch delta-rule fallback).

Four tiny random geometries (ref_hf_helpers.SPECS) cover tied and untied heads, Hv/Hk = 3, nH/nKV = 6,
head_dim != hidden/heads, several full-attention layers, conv width 3 and 4, partial and full rotary. Every HF
parameter is perturbed after init (norms, A_log, dt_bias and conv included). The oracle is HF's full-sequence
forward without cache; our prompt (chunked delta rule, 70 tokens = one full chunk of 64 + 6) and token-by-token
steps are compared with it. Tolerance: max |diff| / max |ref| < 1e-4 in float32 (observed ~5e-6).
"""

import numpy as np
import pytest
from ref_hf_helpers import SPECS, hf_logits, make_hf_model, model_config, rel_err, to_internal, torch

from tensorfold.reference import ReferenceModel

TOL = 1e-4


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_prompt_and_decode_match_hf(spec):
    seed = 1000 + SPECS.index(spec)
    model = make_hf_model(spec, seed)
    rng = np.random.default_rng(seed)
    n_prompt, n_decode = 70, 6
    ids = rng.integers(0, spec.vocab, n_prompt + n_decode)
    ref = hf_logits(model, ids)  # [L, V]
    assert np.isfinite(ref).all() and np.abs(ref).max() > 0.5  # a live model, not all-zero logits

    rm = ReferenceModel(to_internal(model, spec), model_config(spec))
    state = rm.new_state()
    got_prompt = rm.prompt(state, ids[:n_prompt])
    assert got_prompt.shape == (n_prompt, spec.vocab) and got_prompt.dtype == np.float32
    assert rel_err(got_prompt, ref[:n_prompt]) < TOL
    got_steps = np.stack([rm.step(state, t) for t in ids[n_prompt:]])
    assert rel_err(got_steps, ref[n_prompt:]) < TOL
    assert state.pos == n_prompt + n_decode


def test_decode_matches_hf_cached_decode():
    """Steps vs HF's own cached decoding (its recurrent delta-rule kernel and conv update path)."""
    spec = SPECS[0]
    model = make_hf_model(spec, 7)
    rng = np.random.default_rng(7)
    prompt = rng.integers(0, spec.vocab, 9)
    rm = ReferenceModel(to_internal(model, spec), model_config(spec))
    state = rm.new_state()
    rm.prompt(state, prompt)
    with torch.no_grad():
        out = model(input_ids=torch.as_tensor(prompt)[None], use_cache=True)
        cache = out.cache if hasattr(out, "cache") else out.past_key_values
        for t in rng.integers(0, spec.vocab, 5):
            out = model(input_ids=torch.tensor([[int(t)]]), cache=cache, use_cache=True)
            cache = out.cache if hasattr(out, "cache") else out.past_key_values
            assert rel_err(rm.step(state, t), out.logits[0, -1].numpy()) < TOL


@pytest.mark.parametrize("save_dtype", ["float32", "bfloat16"])
def test_saved_checkpoint_through_loader(tmp_path, save_dtype):
    """HF save_pretrained -> tensorfold.model.checkpoint.load_checkpoint -> ReferenceModel.from_checkpoint.

    For bfloat16 files the oracle is the HF float32 model holding the same bf16-rounded weights.
    """
    checkpoint = pytest.importorskip("tensorfold.model.checkpoint")
    spec = SPECS[1]  # untied, several full layers
    model = make_hf_model(spec, 11)
    if save_dtype == "bfloat16":
        # save bf16 files; the oracle is a float32 model holding the rounded weights (loaded into a fresh model:
        # a float32 -> bf16 -> float32 round trip of the model itself would also round RoPE's inv_freq buffer)
        rounded = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
        model.to(torch.bfloat16).save_pretrained(tmp_path)
        model = make_hf_model(spec, 11)
        model.load_state_dict({k: v.float() for k, v in rounded.items()})
    else:
        model.save_pretrained(tmp_path)
    ckpt = checkpoint.load_checkpoint(tmp_path)
    rm = ReferenceModel.from_checkpoint(ckpt)
    ids = np.random.default_rng(11).integers(0, spec.vocab, 20)
    assert rel_err(rm.prompt(rm.new_state(), ids), hf_logits(model, ids)) < TOL
    rm2 = ReferenceModel.from_checkpoint(tmp_path)  # a path works too
    assert rel_err(rm2.prompt(rm2.new_state(), ids[:5]), hf_logits(model, ids[:5])) < TOL
