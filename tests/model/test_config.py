"""load_config: nesting, rope layouts, layer types, quantization overrides, eos sources, validation errors.

Expected values are written out by hand from the dicts built here (the oracle is the JSON itself)."""

import copy
import json

import pytest

from tensorfold.model.config import ConfigError, load_config, to_internal_name


def _text(**kw):
    t = {
        "model_type": "qwen3_5_text", "hidden_size": 64, "num_hidden_layers": 8, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
        "linear_key_head_dim": 16, "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4,
        "intermediate_size": 96, "rms_norm_eps": 1e-6, "vocab_size": 300, "max_position_embeddings": 4096,
        "full_attention_interval": 4, "eos_token_id": 7,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                            "mrope_section": [1, 1, 2], "mrope_interleaved": True},
    }
    t.update(kw)
    return t


def _nested(**kw):
    return {"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"],
            "tie_word_embeddings": True, "text_config": _text(**kw)}


def test_nested_and_flat_agree():
    a = load_config(_nested())
    flat = _text(tie_word_embeddings=True)
    flat["model_type"] = "qwen3_5"
    b = load_config(flat)
    assert a == b
    assert a.hidden_size == 64 and a.head_dim == 32 and a.num_key_value_heads == 2
    assert a.layer_types == ("linear_attention",) * 3 + ("full_attention",) + ("linear_attention",) * 3 + \
        ("full_attention",)
    assert a.full_attention_layers == (3, 7) and a.linear_attention_layers == (0, 1, 2, 4, 5, 6)
    assert a.rotary_dim == 8 and a.rope_theta == 1e7 and a.partial_rotary_factor == 0.25
    assert a.key_dim == 32 and a.value_dim == 32 and a.conv_dim == 96
    assert a.tie_word_embeddings is True and a.output_gate_type == "silu" and a.quantization is None
    assert a.eos_token_ids == (7,)
    hash(a)


def test_rope_flat_fields_and_type_key():
    t = _text()
    del t["rope_parameters"]
    t.update(rope_theta=5e6, partial_rotary_factor=0.5, rope_type="default")
    c = load_config(t)
    assert c.rope_theta == 5e6 and c.rotary_dim == 16
    t2 = _text(rope_parameters={"type": "mrope", "rope_theta": 2e6, "partial_rotary_factor": 0.25})
    assert load_config(t2).rope_theta == 2e6
    t3 = _text(rope_parameters={"type": "yarn", "rope_theta": 2e6})
    with pytest.raises(ConfigError, match="rope_type='yarn'"):
        load_config(t3)


def test_layer_types_win_over_interval():
    lt = ["full_attention", "linear_attention"] * 4
    c = load_config(_text(layer_types=lt, full_attention_interval=4))
    assert c.layer_types == tuple(lt) and c.full_attention_layers == (0, 2, 4, 6)
    c2 = load_config(_text(full_attention_interval=2))
    assert c2.full_attention_layers == (1, 3, 5, 7)


def test_head_dim_read_not_derived_and_fallback():
    c = load_config(_text(hidden_size=80, head_dim=32))  # 80/4 = 20 would be wrong
    assert c.head_dim == 32
    t = _text()
    del t["head_dim"]
    assert load_config(t).head_dim == 16


def test_output_gate_type():
    assert load_config(_text(output_gate_type="swish")).output_gate_type == "silu"
    assert load_config(_text(output_gate_type="sigmoid")).output_gate_type == "sigmoid"
    with pytest.raises(ConfigError, match="output_gate_type='tanh'"):
        load_config(_text(output_gate_type="tanh"))


def test_quantization_block_and_overrides():
    q = {"group_size": 32, "bits": 4, "mode": "affine",
         "language_model.model.embed_tokens": {"group_size": 64, "bits": 8, "mode": "affine"},
         "language_model.lm_head": {"group_size": 64, "bits": 8},
         "language_model.model.layers.6.mlp.down_proj": {"bits": 6},
         "model.language_model.layers.2.linear_attn.out_proj": False,
         "model.layers.1.self_attn.o_proj": {"bits": 5, "group_size": 128},
         "layers.0.mlp.up_proj": {"bits": 2},
         "vision_tower.blocks.0.attn.qkv": {"bits": 8}}
    cfg = _nested()
    cfg["quantization"] = q
    cfg["quantization_config"] = copy.deepcopy(q)
    c = load_config(cfg)
    qc = c.quantization
    assert (qc.bits, qc.group_size, qc.mode) == (4, 32, "affine")
    assert qc.for_module("embed_tokens") == (8, 64)
    assert qc.for_module("lm_head") == (8, 64)
    assert qc.for_module("layers.6.mlp.down_proj") == (6, 32)
    assert qc.for_module("layers.2.linear_attn.out_proj") is None
    assert qc.for_module("layers.1.self_attn.o_proj") == (5, 128)
    assert qc.for_module("layers.0.mlp.up_proj") == (2, 32)
    assert qc.for_module("layers.5.mlp.gate_proj") == (4, 32)
    assert not any("vision" in k or "blocks" in k for k in qc.overrides)
    hash(c)
    # only quantization_config (an MLX copy without quant_method) is accepted too
    cfg2 = _nested()
    cfg2["quantization_config"] = {"bits": 8, "group_size": 128}
    assert load_config(cfg2).quantization.for_module("lm_head") == (8, 128)


@pytest.mark.parametrize("block,match", [
    ({"quant_method": "fp8", "fmt": "e4m3"}, "quant_method='fp8'"),
    ({"bits": 7, "group_size": 64}, r"quantization\.bits=7"),
    ({"bits": 4, "group_size": 48}, r"quantization\.group_size=48"),
    ({"bits": 4, "group_size": 64, "mode": "mxfp4"}, r"mode='mxfp4'"),
    ({"bits": 4, "group_size": 64, "language_model.lm_head": {"bits": 9}}, r"language_model\.lm_head.*bits=9"),
    ({"bits": 4, "group_size": 64, "language_model.lm_head": 3}, r"language_model\.lm_head.*=3"),
])
def test_quantization_errors(block, match):
    cfg = _nested()
    key = "quantization_config" if "quant_method" in block else "quantization"
    cfg[key] = block
    with pytest.raises(ConfigError, match=match):
        load_config(cfg)


@pytest.mark.parametrize("changes,match", [
    ({"hidden_size": 0}, "hidden_size=0"),
    ({"num_hidden_layers": -2}, "num_hidden_layers=-2"),
    ({"intermediate_size": 9.5}, "intermediate_size=9.5"),
    ({"num_key_value_heads": 3}, "num_attention_heads=4 is not a multiple of num_key_value_heads=3"),
    ({"linear_num_value_heads": 3}, "linear_num_value_heads=3 is not a multiple of linear_num_key_heads=2"),
    ({"layer_types": ["linear_attention"] * 7 + ["sliding"]}, r"layer_types\[7\]='sliding'"),
    ({"layer_types": ["linear_attention"] * 3}, "layer_types has 3 entries"),
    ({"rope_parameters": {"rope_theta": 1e7, "partial_rotary_factor": 0.1}}, "rotary_dim"),
    ({"rope_parameters": {"rope_theta": 1e7, "partial_rotary_factor": 2.0}}, "rotary_dim"),
    ({"rope_parameters": {"rope_theta": -1.0}}, "rope_theta=-1.0"),
    ({"vocab_size": None}, "'vocab_size' is missing"),
    ({"model_type": "qwen3_5_moe"}, "model_type='qwen3_5_moe'"),
    ({"full_attention_interval": 0}, "full_attention_interval=0"),
])
def test_validation_errors_name_field_and_value(changes, match):
    with pytest.raises(ConfigError, match=match):
        load_config(_nested(**changes))


def test_eos_sources_and_file_errors(tmp_path):
    cfg = _nested()
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load_config(tmp_path).eos_token_ids == (7,)
    cfg["generation_config"] = {"eos_token_id": [11, 12]}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load_config(tmp_path / "config.json").eos_token_ids == (11, 12)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [248046, 248044]}))
    assert load_config(tmp_path).eos_token_ids == (248046, 248044)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 9}))
    assert load_config(tmp_path).eos_token_ids == (9,)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="config.json"):
        load_config(tmp_path)
    bad = _nested(hidden_size=-1)
    (tmp_path / "config.json").write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match=r"config\.json.*hidden_size=-1"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nothing")


def test_internal_names():
    assert to_internal_name("model.language_model.layers.3.mlp.down_proj.weight") == "layers.3.mlp.down_proj.weight"
    assert to_internal_name("language_model.model.embed_tokens.scales") == "embed_tokens.scales"
    assert to_internal_name("language_model.lm_head.biases") == "lm_head.biases"
    assert to_internal_name("model.norm.weight") == "norm.weight"
    assert to_internal_name("lm_head.weight") == "lm_head.weight"
    assert to_internal_name("layers.0.linear_attn.A_log") == "layers.0.linear_attn.A_log"
    for dropped in ("model.visual.blocks.0.norm1.weight", "vision_tower.patch_embed.proj.weight",
                    "mtp.layers.0.mlp.up_proj.weight", "language_model.vision_tower.x", "model.mtp.fc.weight"):
        assert to_internal_name(dropped) is None, dropped
