"""`tensorfold quantize` against mlx-lm's own converter (load_model + quantize_model + save_model + save_config) on
a random checkpoint written by transformers: every tensor bit for bit, and the same quantization block; our loader
reads mlx-lm's output as the MLX format. Skipped when mlx-lm (and mlx) are not importable."""

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
mlx_utils = pytest.importorskip("mlx_lm.utils", reason="mlx-lm not importable (pip install mlx-lm 'mlx[cpu]')")

from click.testing import CliRunner  # noqa: E402

from tensorfold.cli import main  # noqa: E402
from tensorfold.model import bf16  # noqa: E402
from tensorfold.model.checkpoint import load_checkpoint  # noqa: E402
from tensorfold.model.config import load_config  # noqa: E402
from tensorfold.model.safetensors_io import SafetensorsFile  # noqa: E402

TEXT = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=2,
            num_key_value_heads=1, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4)
VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
              num_position_embeddings=16)


@pytest.fixture(scope="module")
def hf_src(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    cfg = transformers.Qwen3_5Config(text_config=TEXT, vision_config=VISION, tie_word_embeddings=False)
    m = transformers.Qwen3_5ForConditionalGeneration(cfg)
    g = torch.Generator().manual_seed(123)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    m = m.to(torch.bfloat16)
    for layer in m.model.language_model.layers:  # Qwen3.5 stores these two in float32
        if hasattr(layer, "linear_attn"):
            layer.linear_attn.A_log.data = layer.linear_attn.A_log.data.float()
            layer.linear_attn.norm.weight.data = layer.linear_attn.norm.weight.data.float()
    m.save_pretrained(d)
    return d


def _mlx_lm_convert(src: Path, dst: Path, bits, group, predicate=None):
    """mlx_lm.convert's steps without its tokenizer load: load, cast to bf16 (as convert does when the config names
    bfloat16 under torch_dtype / text_config.dtype, as Qwen's do), quantize, save."""
    import mlx.core as mx
    from mlx.utils import tree_map_with_path

    model, config = mlx_utils.load_model(src)
    keep = getattr(model, "cast_predicate", lambda _: True)
    model.update(tree_map_with_path(
        lambda k, v: v.astype(mx.bfloat16) if keep(k) and mx.issubdtype(v.dtype, mx.floating) else v,
        model.parameters()))
    model, config = mlx_utils.quantize_model(model, config, group_size=group, bits=bits, quant_predicate=predicate)
    dst.mkdir()
    mlx_utils.save_model(dst, model)
    mlx_utils.save_config(config, dst / "config.json")
    return json.loads((dst / "config.json").read_text())


def _all_tensors(d: Path) -> dict:
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        sf = SafetensorsFile(f)
        for k in sf.keys():
            out[k] = (sf.dtype(k), sf.get(k))
    return out


def _assert_same_files(ours: Path, theirs: Path):
    a, b = _all_tensors(ours), _all_tensors(theirs)
    assert set(a) == set(b), (sorted(set(a) ^ set(b)))[:10]
    for k in sorted(a):
        (da, xa), (db, xb) = a[k], b[k]
        assert da == db, (k, da, db)
        assert xa.shape == xb.shape and np.array_equal(xa, xb), k


def test_uniform_4bit_matches_mlx_lm(hf_src, tmp_path):
    theirs = _mlx_lm_convert(hf_src, tmp_path / "mlx_lm", 4, 64)
    res = CliRunner().invoke(main, ["quantize", str(hf_src), str(tmp_path / "ours"), "--bits", "4",
                                    "--group-size", "64"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    ours = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert ours["quantization"] == theirs["quantization"]
    assert ours["quantization_config"] == theirs["quantization_config"]
    _assert_same_files(tmp_path / "ours", tmp_path / "mlx_lm")
    ck = load_checkpoint(tmp_path / "mlx_lm")
    src = load_checkpoint(hf_src)
    assert ck.format == "mlx" and src.format == "hf"
    assert ck.stored_dtypes["layers.0.linear_attn.A_log"] == "F32"
    # mlx-lm baked 1+w into bf16: our HF multiplier rounded once is exactly what it stored
    for name in ("norm", "layers.3.self_attn.q_norm", "layers.0.input_layernorm", "layers.0.linear_attn.norm"):
        assert np.array_equal(ck.tensors[name], bf16.to_f32(bf16.from_f32(src.tensors[name]))), name


def test_mixed_widths_match_mlx_lm(hf_src, tmp_path):
    def predicate(path, module):
        if path.endswith("lm_head"):
            return {"bits": 8, "group_size": 64}
        if path.endswith("mlp.down_proj"):
            return {"bits": 6, "group_size": 32}
        if path.endswith("self_attn.o_proj"):
            return False
        return True

    theirs = _mlx_lm_convert(hf_src, tmp_path / "mlx_lm", 3, 32, predicate)
    res = CliRunner().invoke(main, ["quantize", str(hf_src), str(tmp_path / "ours"), "--bits", "3",
                                    "--group-size", "32", "--mixed",
                                    "lm_head=8:64,*.mlp.down_proj=6:32,*.self_attn.o_proj=bf16"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    _assert_same_files(tmp_path / "ours", tmp_path / "mlx_lm")
    # the same overrides once parsed (mlx-lm writes the predicate's dict verbatim and leaves unquantized modules
    # out; we add "mode" and mark modules kept in bf16 with false)
    ours = load_config(tmp_path / "ours").quantization
    ref = load_config(tmp_path / "mlx_lm").quantization
    assert (ours.bits, ours.group_size) == (ref.bits, ref.group_size) == (3, 32)
    assert {k: v for k, v in ours.overrides.items() if v is not None} == dict(ref.overrides)
    assert len(ref.overrides) == 5 and ours.overrides["layers.3.self_attn.o_proj"] is None
    assert theirs["quantization"]["language_model.lm_head"] == {"bits": 8, "group_size": 64}
    ck = load_checkpoint(tmp_path / "mlx_lm")
    assert (ck.tensors["lm_head"].bits, ck.tensors["lm_head"].group_size) == (8, 64)
    assert (ck.tensors["layers.2.mlp.down_proj"].bits, ck.tensors["layers.2.mlp.down_proj"].group_size) == (6, 32)
