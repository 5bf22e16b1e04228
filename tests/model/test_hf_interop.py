"""Checkpoints written by transformers' own save_pretrained (Qwen3_5ForCausalLM and the composite
Qwen3_5ForConditionalGeneration with a vision tower) load with the right config and tensors.
Oracle: the torch modules' parameters and config attributes; the norm +1 and conv squeeze are applied here."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tensorfold.model.checkpoint import load_checkpoint  # noqa: E402
from tensorfold.model.weights import DenseWeight  # noqa: E402

TEXT = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=2,
            num_key_value_heads=1, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4)
ONE_PLUS = ("input_layernorm.weight", "post_attention_layernorm.weight", "q_norm.weight", "k_norm.weight")


def _randomise(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model.to(torch.bfloat16)


def _compare(ck, state: dict, prefix: str):
    seen = 0
    for k, v in state.items():
        if not k.startswith(prefix):
            continue
        name = k[len(prefix):]
        ref = v.float().numpy()
        key = name[: -len(".weight")] if name.endswith(".weight") else name
        got = ck.tensors[key]
        if isinstance(got, DenseWeight):
            assert np.array_equal(got.to_f32(), ref), name
        else:
            if name.endswith("conv1d.weight"):
                ref = ref[:, 0, :]
            elif name == "norm.weight" or name.endswith(ONE_PLUS):
                ref = ref + np.float32(1.0)
            assert np.array_equal(got, ref), name
        seen += 1
    return seen


def _check_config(c, hf_text, tied):
    assert c.hidden_size == hf_text.hidden_size and c.num_hidden_layers == hf_text.num_hidden_layers
    assert c.layer_types == tuple(hf_text.layer_types) and c.head_dim == hf_text.head_dim
    assert c.rope_theta == hf_text.rope_parameters["rope_theta"]
    assert c.partial_rotary_factor == hf_text.rope_parameters["partial_rotary_factor"]
    assert c.tie_word_embeddings is tied


def test_causal_lm_save_pretrained(tmp_path):
    cfg = transformers.Qwen3_5TextConfig(tie_word_embeddings=False, **TEXT)
    m = _randomise(transformers.Qwen3_5ForCausalLM(cfg), 1)
    m.save_pretrained(tmp_path)
    ck = load_checkpoint(tmp_path)
    assert ck.format == "hf" and ck.naming == "hf-text"
    _check_config(ck.config, cfg, tied=False)
    sd = m.state_dict()
    n = _compare(ck, sd, "model.")
    assert np.array_equal(ck.tensors["lm_head"].to_f32(), sd["lm_head.weight"].float().numpy())
    assert n + 1 == len(ck.tensors)


def test_composite_with_vision_save_pretrained(tmp_path):
    vc = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
              num_position_embeddings=16)
    # the composite's top-level tie flag is the one that counts (text_config keeps tie_word_embeddings=False)
    cfg = transformers.Qwen3_5Config(text_config=TEXT, vision_config=vc, tie_word_embeddings=True)
    m = _randomise(transformers.Qwen3_5ForConditionalGeneration(cfg), 2)
    m.save_pretrained(tmp_path)
    ck = load_checkpoint(tmp_path)
    assert ck.format == "hf" and ck.naming == "hf-composite"
    _check_config(ck.config, cfg.text_config, tied=True)
    n = _compare(ck, m.state_dict(), "model.language_model.")
    assert n == len(ck.tensors) and "lm_head" not in ck.tensors
    assert not any(k.startswith("visual") for k in ck.tensors)
