"""load_checkpoint on tiny random checkpoints: four naming schemes, HF and MLX layouts, shards, mixed widths, and
every bad-checkpoint error. The oracle is the arrays written by the test (norm +1 applied here by hand)."""

import json

import numpy as np
import pytest

from tensorfold.model import bf16, quant
from tensorfold.model.checkpoint import load_checkpoint
from tensorfold.model.errors import CheckpointError
from tensorfold.model.weights import AffineWeight, DenseWeight

from model_io_fixtures import hf_tensors, is_shifted_norm, rename, tiny_config, to_mlx_layout, write_checkpoint


def _f32(a):
    return bf16.to_f32(a) if a.dtype == np.uint16 else a.astype(np.float32)


def _check_against(ck, src: dict, fmt: str):
    """src: internal-name (+.weight) tensors in the layout that was written (HF or MLX convention)."""
    for k, v in src.items():
        name = k[: -len(".weight")] if k.endswith(".weight") else k
        if name == "lm_head" and ck.config.tie_word_embeddings:
            assert "lm_head" not in ck.tensors
            continue
        got = ck.tensors[name]
        if isinstance(got, DenseWeight):
            assert got.data.dtype == np.uint16 and np.array_equal(got.data, v), name
            assert not got.data.flags.writeable and not got.data.flags.owndata  # memory-mapped view
        elif k.endswith("conv1d.weight"):
            C, K = got.shape
            want = _f32(v)[:, 0, :] if fmt == "hf" else _f32(v)[:, :, 0]
            assert got.dtype == np.float32 and np.array_equal(got, want), name
        else:
            want = _f32(v)
            if fmt == "hf" and is_shifted_norm(k):
                want = want + np.float32(1.0)
            assert got.dtype == np.float32 and np.array_equal(got, want), name


@pytest.mark.parametrize("naming", ["hf-composite", "hf-text", "mlx", "bare"])
@pytest.mark.parametrize("layout", ["hf", "mlx"])
def test_naming_schemes_and_layouts(tmp_path, naming, layout):
    cfg = tiny_config()
    t = hf_tensors(cfg, seed=hash((naming, layout)) % 1000)
    src = t if layout == "hf" else to_mlx_layout(t)
    extra = {"model.visual.blocks.0.attn.qkv.weight": np.ones((4, 4), np.float32),
             "mtp.layers.0.mlp.up_proj.weight": np.ones((2, 2), np.float32)}
    write_checkpoint(tmp_path, cfg, rename(src, naming), extra=extra)
    ck = load_checkpoint(tmp_path)
    assert ck.format == layout and ck.naming == naming and ck.dtype == "bf16"
    _check_against(ck, src, layout)
    assert not any("visual" in k or "mtp" in k for k in ck.tensors)
    # A_log stays what the header says (F32 here), norm shift applied exactly once
    a_log = t["layers.0.linear_attn.A_log"]
    assert np.array_equal(ck.tensors["layers.0.linear_attn.A_log"], a_log)
    lin_norm = ck.tensors["layers.0.linear_attn.norm"]
    assert np.array_equal(lin_norm, _f32(src["layers.0.linear_attn.norm.weight"]))  # never shifted
    w = bf16.to_f32(t["layers.1.self_attn.q_norm.weight"])
    got = ck.tensors["layers.1.self_attn.q_norm"]
    if layout == "hf":
        assert np.array_equal(got, w + 1)
    else:
        assert np.array_equal(got, bf16.to_f32(bf16.from_f32(w + 1)))  # baked in bf16 by the converter
    assert np.abs(got - (w + 1)).max() < 0.01  # either way the multiplier is 1+w, not 2+w or w


def test_sharded_with_index_and_bf16_a_log(tmp_path):
    cfg = tiny_config()
    t = hf_tensors(cfg, seed=3)
    t["layers.0.linear_attn.A_log"] = bf16.from_f32(t["layers.0.linear_attn.A_log"])  # Qwen3.6 style
    write_checkpoint(tmp_path, cfg, rename(t, "hf-composite"), shards=3)
    ck = load_checkpoint(tmp_path)
    assert len(ck.files) == 3
    _check_against(ck, t, "hf")
    assert ck.tensors["layers.0.linear_attn.A_log"].dtype == np.float32


def test_tied_ignores_lm_head(tmp_path):
    cfg = tiny_config(tie_word_embeddings=True)
    t = hf_tensors(cfg, seed=4)
    assert "lm_head.weight" not in t
    stray = {"lm_head.weight": np.zeros((96, 64), np.uint16)}
    write_checkpoint(tmp_path, cfg, rename(t, "hf-text"), extra=stray)
    ck = load_checkpoint(tmp_path)
    assert ck.config.tie_word_embeddings and "lm_head" not in ck.tensors


def _quantized_mlx(cfg, t, widths: dict, default=(4, 64)):
    """Quantize every matrix of t (MLX layout); widths: internal module -> (bits, group) or None (kept bf16)."""
    from tensorfold.model.checkpoint import expected_linears
    from tensorfold.model.config import load_config
    out = dict(to_mlx_layout(t))
    for name in expected_linears(load_config(cfg)):
        bg = widths.get(name, default)
        if bg is None:
            continue
        p, s, b = quant.quantize(t[name + ".weight"], *bg)
        out[name + ".weight"], out[name + ".scales"], out[name + ".biases"] = p, s, b
    return out


def test_mixed_widths_load(tmp_path):
    cfg = tiny_config()
    widths = {"embed_tokens": (8, 64), "lm_head": (6, 32), "layers.0.mlp.down_proj": (3, 128),
              "layers.1.self_attn.o_proj": (5, 32), "layers.0.linear_attn.in_proj_a": None,
              "layers.1.mlp.up_proj": (2, 64)}
    cfg["quantization"] = {"bits": 4, "group_size": 64, "mode": "affine",
                           "language_model.model.embed_tokens": {"bits": 8, "group_size": 64},
                           "language_model.lm_head": {"bits": 6, "group_size": 32},
                           "language_model.model.layers.0.mlp.down_proj": {"bits": 3, "group_size": 128},
                           "language_model.model.layers.1.self_attn.o_proj": {"bits": 5, "group_size": 32},
                           "language_model.model.layers.0.linear_attn.in_proj_a": False,
                           "language_model.model.layers.1.mlp.up_proj": {"bits": 2, "group_size": 64}}
    cfg["quantization_config"] = cfg["quantization"]
    t = hf_tensors(cfg, seed=5)
    files = _quantized_mlx(cfg, t, widths)
    write_checkpoint(tmp_path, cfg, rename(files, "mlx"), shards=2)
    ck = load_checkpoint(tmp_path)
    assert ck.format == "mlx"
    for name, w in ck.tensors.items():
        if not isinstance(w, (AffineWeight, DenseWeight)):
            continue
        bg = widths.get(name, (4, 64))
        if bg is None:
            assert isinstance(w, DenseWeight), name
            continue
        assert isinstance(w, AffineWeight) and (w.bits, w.group_size) == bg, name
        ref = quant.dequantize(files[name + ".weight"], files[name + ".scales"], files[name + ".biases"], *bg)
        assert np.array_equal(w.to_f32(), ref)
        # and it is close to the bf16 original: one step, plus the bf16 rounding of scale (x q <= 2^b-1) and bias
        orig = bf16.to_f32(t[name + ".weight"])
        step = np.abs(bf16.to_f32(files[name + ".scales"])).repeat(bg[1], axis=1)
        bias = np.abs(bf16.to_f32(files[name + ".biases"])).repeat(bg[1], axis=1)
        tol = step * (1 + (2 ** bg[0] - 1) / 256) + bias / 256 + 1e-6
        assert np.all(np.abs(w.to_f32() - orig) <= tol), name
    summary = ck.quant_summary()
    assert summary[(8, 64)] == ["embed_tokens"] and summary[None] == ["layers.0.linear_attn.in_proj_a"]


def test_config_width_mismatch(tmp_path):
    cfg = tiny_config()
    cfg["quantization"] = {"bits": 4, "group_size": 64, "language_model.model.layers.1.mlp.up_proj": {"bits": 8}}
    t = hf_tensors(cfg, seed=6)
    files = _quantized_mlx(cfg, t, {"layers.1.mlp.up_proj": (4, 64)})
    write_checkpoint(tmp_path, cfg, rename(files, "mlx"))
    with pytest.raises(CheckpointError, match=r"'layers\.1\.mlp\.up_proj'.*4-bit g64.*declares 8-bit g64"):
        load_checkpoint(tmp_path)


def _good(tmp_path, **kw):
    cfg = tiny_config()
    t = hf_tensors(cfg, seed=7)
    return cfg, t


def test_missing_tensor(tmp_path):
    cfg, t = _good(tmp_path)
    del t["layers.1.self_attn.k_norm.weight"]
    write_checkpoint(tmp_path, cfg, rename(t, "hf-composite"))
    with pytest.raises(CheckpointError, match=r"missing tensor 'layers\.1\.self_attn\.k_norm\.weight'.*model\.safetensors"):
        load_checkpoint(tmp_path)


def test_untied_without_lm_head(tmp_path):
    cfg, t = _good(tmp_path)
    del t["lm_head.weight"]
    write_checkpoint(tmp_path, cfg, rename(t, "hf-text"))
    with pytest.raises(CheckpointError, match=r"missing tensor 'lm_head\.weight'"):
        load_checkpoint(tmp_path)


def test_wrong_shape(tmp_path):
    cfg, t = _good(tmp_path)
    t["layers.0.mlp.down_proj.weight"] = t["layers.0.mlp.down_proj.weight"][:, :96].copy()
    write_checkpoint(tmp_path, cfg, rename(t, "hf-composite"))
    with pytest.raises(CheckpointError,
                       match=r"model\.safetensors: tensor 'model\.language_model\.layers\.0\.mlp\.down_proj\.weight' "
                             r"has shape \[64, 96\], config implies \[64, 128\]"):
        load_checkpoint(tmp_path)


def test_wrong_vector_shape(tmp_path):
    cfg, t = _good(tmp_path)
    t["layers.0.linear_attn.dt_bias"] = t["layers.0.linear_attn.dt_bias"][:3].copy()
    write_checkpoint(tmp_path, cfg, rename(t, "bare"))
    with pytest.raises(CheckpointError, match=r"'layers\.0\.linear_attn\.dt_bias' has shape \[3\].*\[4\]"):
        load_checkpoint(tmp_path)


def test_truncated_file(tmp_path):
    cfg, t = _good(tmp_path)
    write_checkpoint(tmp_path, cfg, rename(t, "hf-text"))
    f = tmp_path / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[:-100])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor .* out of range"):
        load_checkpoint(tmp_path)


def test_bad_packed_width(tmp_path):
    cfg = tiny_config()
    t = hf_tensors(cfg, seed=8)
    files = _quantized_mlx(cfg, t, {})
    # 7 words for in=64 is 3.5 bits: no such width
    files["layers.0.mlp.gate_proj.weight"] = np.zeros((128, 7), np.uint32)
    write_checkpoint(tmp_path, cfg, rename(files, "mlx"))
    with pytest.raises(CheckpointError, match=r"gate_proj\.weight'.*packed width 7.*3\.5 bits"):
        load_checkpoint(tmp_path)


def test_missing_shard(tmp_path):
    cfg, t = _good(tmp_path)
    write_checkpoint(tmp_path, cfg, rename(t, "hf-composite"), shards=2)
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"shard 'model-00002-of-00002\.safetensors' is listed"):
        load_checkpoint(tmp_path)


def test_mixed_conv_layouts_rejected(tmp_path):
    cfg = tiny_config(num_hidden_layers=3, layer_types=["linear_attention", "linear_attention", "full_attention"])
    t = hf_tensors(cfg, seed=9)
    t["layers.1.linear_attn.conv1d.weight"] = np.ascontiguousarray(np.moveaxis(t["layers.1.linear_attn.conv1d.weight"], 2, 1))
    write_checkpoint(tmp_path, cfg, rename(t, "hf-text"))
    with pytest.raises(CheckpointError, match=r"layers\.1\.linear_attn\.conv1d\.weight'.*mlx conv layout"):
        load_checkpoint(tmp_path)


def test_index_names_a_tensor_its_shard_lacks(tmp_path):
    cfg, t = _good(tmp_path)
    write_checkpoint(tmp_path, cfg, rename(t, "hf-text"), shards=2)
    idx = tmp_path / "model.safetensors.index.json"
    data = json.loads(idx.read_text())
    name = "model.norm.weight"
    other = {v for v in data["weight_map"].values() if v != data["weight_map"][name]}.pop()
    data["weight_map"][name] = other
    idx.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=r"lists tensor 'model\.norm\.weight' in 'model-0000\d-of-00002"):
        load_checkpoint(tmp_path)
