"""Builders of tiny random Qwen3.5 checkpoints (HF text-only tensors first, then any naming / layout / sharding)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tensorfold.model import bf16
from tensorfold.model.safetensors_io import save_file

SHIFTED = ("input_layernorm", "post_attention_layernorm", "q_norm", "k_norm")


def tiny_config(**kw) -> dict:
    text = {
        "model_type": "qwen3_5_text", "hidden_size": 64, "num_hidden_layers": 2,
        "layer_types": ["linear_attention", "full_attention"], "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
        "linear_key_head_dim": 16, "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
        "intermediate_size": 128, "rms_norm_eps": 1e-6, "vocab_size": 96, "max_position_embeddings": 2048,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
        "eos_token_id": 5,
    }
    text.update(kw)
    return {"model_type": "qwen3_5", "tie_word_embeddings": bool(kw.get("tie_word_embeddings", False)),
            "text_config": text}


def hf_tensors(cfg: dict, seed: int) -> dict[str, np.ndarray]:
    """HF-convention tensors under internal names + '.weight' (zero-centred norms, conv [C,1,K], A_log F32)."""
    t = cfg["text_config"]
    rng = np.random.default_rng(seed)
    H, I, V = t["hidden_size"], t["intermediate_size"], t["vocab_size"]
    nH, nKV, hd = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
    Hk, Hv, Dk, Dv, K = (t["linear_num_key_heads"], t["linear_num_value_heads"], t["linear_key_head_dim"],
                         t["linear_value_head_dim"], t["linear_conv_kernel_dim"])
    C = 2 * Hk * Dk + Hv * Dv

    def mat(o, i):
        return bf16.from_f32((rng.standard_normal((o, i)) * 0.1).astype(np.float32))

    def vec(n, scale=0.1):
        return bf16.from_f32((rng.standard_normal(n) * scale).astype(np.float32))

    out = {"embed_tokens.weight": mat(V, H), "norm.weight": vec(H)}
    if not cfg.get("tie_word_embeddings"):
        out["lm_head.weight"] = mat(V, H)
    for i, kind in enumerate(t["layer_types"]):
        p = f"layers.{i}."
        out[p + "input_layernorm.weight"] = vec(H)
        out[p + "post_attention_layernorm.weight"] = vec(H)
        out[p + "mlp.gate_proj.weight"] = mat(I, H)
        out[p + "mlp.up_proj.weight"] = mat(I, H)
        out[p + "mlp.down_proj.weight"] = mat(H, I)
        if kind == "full_attention":
            out[p + "self_attn.q_proj.weight"] = mat(2 * nH * hd, H)
            out[p + "self_attn.k_proj.weight"] = mat(nKV * hd, H)
            out[p + "self_attn.v_proj.weight"] = mat(nKV * hd, H)
            out[p + "self_attn.o_proj.weight"] = mat(H, nH * hd)
            out[p + "self_attn.q_norm.weight"] = vec(hd)
            out[p + "self_attn.k_norm.weight"] = vec(hd)
        else:
            a = p + "linear_attn."
            out[a + "in_proj_qkv.weight"] = mat(C, H)
            out[a + "in_proj_z.weight"] = mat(Hv * Dv, H)
            out[a + "in_proj_b.weight"] = mat(Hv, H)
            out[a + "in_proj_a.weight"] = mat(Hv, H)
            out[a + "out_proj.weight"] = mat(H, Hv * Dv)
            out[a + "conv1d.weight"] = vec((C, 1, K), 0.3)
            out[a + "dt_bias"] = vec(Hv, 1.0)
            out[a + "A_log"] = rng.uniform(-1, 1, Hv).astype(np.float32)
            out[a + "norm.weight"] = (1.0 + rng.standard_normal(Dv) * 0.1).astype(np.float32)
    return out


def is_shifted_norm(name: str) -> bool:
    return name == "norm.weight" or any(name.endswith(s + ".weight") for s in SHIFTED)


def to_mlx_layout(tensors: dict) -> dict:
    """MLX convention: conv [C,K,1], zero-centred norms baked to bf16(1+w), linear_attn.norm cast to bf16."""
    out = {}
    for k, v in tensors.items():
        if k.endswith("conv1d.weight"):
            v = np.ascontiguousarray(np.moveaxis(v, 2, 1))
        elif is_shifted_norm(k):
            v = bf16.from_f32(bf16.to_f32(v) + np.float32(1.0))
        elif k.endswith("linear_attn.norm.weight"):
            v = bf16.from_f32(v)
        out[k] = v
    return out


def rename(tensors: dict, naming: str) -> dict:
    """Internal names -> file names in one of the four schemes."""
    out = {}
    for k, v in tensors.items():
        head = k.startswith("lm_head")
        if naming == "hf-composite":
            n = k if head else "model.language_model." + k
        elif naming == "hf-text":
            n = k if head else "model." + k
        elif naming == "mlx":
            n = "language_model." + k if head else "language_model.model." + k
        elif naming == "bare":
            n = k
        else:
            raise ValueError(naming)
        out[n] = v
    return out


def write_checkpoint(d: Path, cfg: dict, file_tensors: dict, shards: int = 1, extra: dict | None = None) -> Path:
    """Write config.json and the tensors (already renamed) as one file or `shards` files with an index."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    tensors = dict(file_tensors)
    tensors.update(extra or {})
    names = sorted(tensors)
    if shards == 1:
        save_file(d / "model.safetensors", tensors, metadata={"format": "pt"})
        return d
    weight_map = {}
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::shards]}
        save_file(d / fname, part, metadata={"format": "pt"})
        weight_map.update({n: fname for n in part})
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return d
