"""`tensorfold quantize` and `tensorfold info` end to end on a tiny random HF checkpoint.

Oracle for the weights: the source tensors written by the test, quantized and dequantized by quant.quantize /
quant.dequantize (themselves checked bit-exactly against MLX and an independent bit reader in test_quant.py)."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from tensorfold.cli import main
from tensorfold.model import bf16, quant
from tensorfold.model.checkpoint import load_checkpoint
from tensorfold.model.safetensors_io import SafetensorsFile
from tensorfold.model.weights import AffineWeight, DenseWeight

from model_io_fixtures import hf_tensors, is_shifted_norm, rename, tiny_config, write_checkpoint


@pytest.fixture
def hf_ckpt(tmp_path):
    cfg = tiny_config()
    t = hf_tensors(cfg, seed=21)
    d = write_checkpoint(tmp_path / "src", cfg, rename(t, "hf-composite"),
                         extra={"model.visual.patch.weight": np.ones((2, 2), np.float32)})
    (d / "tokenizer.json").write_text('{"model": {}}')
    (d / "chat_template.jinja").write_text("{{ messages }}")
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [5, 6]}))
    return d, t


def _run(args):
    res = CliRunner().invoke(main, args, catch_exceptions=False)
    return res


def test_round_trip_reproduces_dequantized_weights(hf_ckpt, tmp_path):
    src, t = hf_ckpt
    dst = tmp_path / "q4"
    res = _run(["quantize", str(src), str(dst), "--bits", "4", "--group-size", "64"])
    assert res.exit_code == 0, res.output
    for fn in ("tokenizer.json", "chat_template.jinja", "generation_config.json"):
        assert (dst / fn).read_bytes() == (src / fn).read_bytes()
    cfg = json.loads((dst / "config.json").read_text())
    assert cfg["quantization"] == {"group_size": 64, "bits": 4, "mode": "affine"}
    assert cfg["quantization_config"] == cfg["quantization"]
    f = SafetensorsFile(dst / "model.safetensors")
    assert f.metadata == {"format": "mlx"}
    names = set(f.keys())
    assert "language_model.lm_head.weight" in names and "language_model.lm_head.scales" in names
    assert "language_model.model.layers.0.linear_attn.in_proj_a.scales" in names  # 64 % 64 == 0: quantized
    assert f.shape("language_model.model.layers.0.linear_attn.conv1d.weight") == (128, 4, 1)
    assert f.dtype("language_model.model.layers.0.linear_attn.A_log") == "F32"
    assert not any("visual" in n for n in names)

    ck = load_checkpoint(dst)
    src_ck = load_checkpoint(src)
    assert ck.format == "mlx" and ck.naming == "mlx" and ck.config.eos_token_ids == (5, 6)
    for name, w in src_ck.tensors.items():
        got = ck.tensors[name]
        if isinstance(w, DenseWeight):
            assert isinstance(got, AffineWeight) and (got.bits, got.group_size) == (4, 64), name
            ref = quant.dequantize(*quant.quantize(t[name + ".weight"], 4, 64), 4, 64)
            assert np.array_equal(got.to_f32(), ref), name
        elif name.endswith(("conv1d", "A_log", "dt_bias")):
            assert np.array_equal(got, w), name
        else:
            # norms: the HF multiplier 1+w rounded once to bf16 (MLX's baking), linear_attn.norm cast to bf16
            assert np.array_equal(got, bf16.to_f32(bf16.from_f32(w))), name
            if is_shifted_norm(name + ".weight"):
                raw = bf16.to_f32(t[name + ".weight"])
                assert np.abs(got - (raw + 1)).max() <= 2.0**-7


def test_mixed_spec_and_shards(hf_ckpt, tmp_path):
    src, t = hf_ckpt
    dst = tmp_path / "mixed"
    spec = "*.down_proj=6,lm_head=8:32,layers.1.self_attn.o_proj=bf16,embed_tokens=3:128"
    res = _run(["quantize", str(src), str(dst), "--bits", "2", "--group-size", "32", "--mixed", spec,
                "--shard-gb", "0.00004"])
    assert res.exit_code == 0, res.output
    assert "warning" not in res.output
    assert (dst / "model.safetensors.index.json").is_file()
    assert len(list(dst.glob("model-*-of-*.safetensors"))) > 1
    ck = load_checkpoint(dst)
    w = ck.tensors
    assert (w["layers.0.mlp.down_proj"].bits, w["layers.0.mlp.down_proj"].group_size) == (6, 32)
    assert (w["lm_head"].bits, w["lm_head"].group_size) == (8, 32)
    assert isinstance(w["layers.1.self_attn.o_proj"], DenseWeight)
    assert np.array_equal(w["layers.1.self_attn.o_proj"].data, t["layers.1.self_attn.o_proj.weight"])
    # embed_tokens: in=64 is not a multiple of 128 -> MLX keeps it unquantized
    assert isinstance(w["embed_tokens"], DenseWeight)
    assert (w["layers.0.mlp.up_proj"].bits, w["layers.0.mlp.up_proj"].group_size) == (2, 32)
    q = json.loads((dst / "config.json").read_text())["quantization"]
    assert q["language_model.model.layers.1.self_attn.o_proj"] is False
    assert q["language_model.lm_head"] == {"group_size": 32, "bits": 8, "mode": "affine"}
    ref = quant.dequantize(*quant.quantize(t["layers.1.mlp.down_proj.weight"], 6, 32), 6, 32)
    assert np.array_equal(w["layers.1.mlp.down_proj"].to_f32(), ref)


@pytest.mark.parametrize("spec,match", [("*.down_proj", "expected PATTERN=BITS"), ("a=7", "bits=7"),
                                        ("a=4:48", "group_size=48"), ("a=x", "not BITS")])
def test_bad_mixed_spec(hf_ckpt, tmp_path, spec, match):
    src, _ = hf_ckpt
    res = _run(["quantize", str(src), str(tmp_path / "o"), "--mixed", spec])
    assert res.exit_code != 0 and match in res.output


def test_refuses_quantized_source_and_nonempty_dst(hf_ckpt, tmp_path):
    src, _ = hf_ckpt
    dst = tmp_path / "q"
    assert _run(["quantize", str(src), str(dst)]).exit_code == 0
    res = _run(["quantize", str(dst), str(tmp_path / "qq")])
    assert res.exit_code != 0 and "already quantized" in res.output
    res = _run(["quantize", str(src), str(dst)])
    assert res.exit_code != 0 and "not an empty directory" in res.output


def test_info_command(hf_ckpt, tmp_path):
    src, _ = hf_ckpt
    res = _run(["info", str(src)])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "2 (1 linear attention + 1 full attention)" in out
    assert "format:" in out and "hf (hf-composite names)" in out
    assert "bf16: 17 modules" in out and "untied" in out and "1 safetensors" in out
    dst = tmp_path / "q"
    _run(["quantize", str(src), str(dst), "--mixed", "lm_head=8"])
    res = _run(["info", str(dst)])
    assert res.exit_code == 0, res.output
    assert "mlx (mlx names)" in res.output
    assert "4-bit g64: 16 modules; 8-bit g64: lm_head" in res.output
    res = _run(["info", str(tmp_path / "nothing-here")])
    assert res.exit_code != 0 and "nothing-here" in res.output


def test_mixed_pattern_matching_nothing_warns(hf_ckpt, tmp_path):
    src, _ = hf_ckpt
    res = _run(["quantize", str(src), str(tmp_path / "o"), "--mixed", "model.layers.*.mlp.down_proj=8"])
    assert res.exit_code == 0
    assert "warning: --mixed pattern 'model.layers.*.mlp.down_proj' matches no module" in res.output
