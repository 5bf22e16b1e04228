"""Random-weight checkpoints at real Qwen3.5 geometries (benchmarks) and tiny ones (tests); the `synth` command.

Owns `write_synth(geometry, out, ...)`, `plan_synth(...)` (the tensor list without writing) and `synth_cmd`.

Geometries: `0.8b`, `2b`, `4b`, `9b`, `27b` with the sizes of docs qwen35.md §1.3 (vocab 248320, head_dim 256,
Dk = Dv = 128, K = 4, theta 1e7, partial rotary 0.25), `tiny` (H 64, 4 layers = 3 linear + 1 full, 4/2 heads x 32,
GDN 2/4 heads x 16, intermediate 128, vocab 512, tied) and `tiny-untied` (same, untied, 8 layers).

Layouts (qwen35.md §2):
* quantized (default, MLX affine): names `language_model.model.…` / `language_model.lm_head`, conv1d [C, K, 1],
  norms stored as multipliers (near 1), every Linear/Embedding whose input width divides by the group size is
  U32-packed with bf16 scales and biases (mlx-lm's rule), A_log F32, other vectors bf16; `quantization` and
  `quantization_config` blocks in config.json; safetensors metadata {"format": "mlx"}.
* `bf16=True` / `--bf16` (HF text-only): names `model.…` / `lm_head`, conv1d [C, 1, K], zero-centred norms (stored w, applied
  as 1 + w; `linear_attn.norm` is a plain weight), A_log and linear_attn.norm F32, the rest bf16.

Weights are random but shaped so activations stay finite and informative through every layer: input-side
projections have std 1/sqrt(in); output projections (o_proj, out_proj, down_proj) 1/sqrt(in * 2L) (L = the
geometry's native depth, so `layers=` truncation leaves tensors unchanged) and the residual stays O(1); the embedding H^-1/4 and an untied head 4/sqrt(H) (logits of a few units); norm multipliers
1 + N(0, 0.05); conv N(0, 0.5); A_log = log U(1, 16); dt_bias = softplus^-1 of a log-uniform dt in [1e-3, 0.1].
Quantized matrices are generated directly as codes: random words are valid packed codes at any bit width (raw SFC64
output in 1 MB blocks for the real geometries; the tiny ones keep the first, slower generators and their weights);
each group gets a scale of random sign and magnitude std*sqrt(12/(L(L+2))), L = 2^b - 1 (x U(0.8, 1.2)), and the bias
-scale*L/2 (x (1 + N(0, 0.05))), so the dequantized weight is zero-mean with the target std.
Every tensor has its own random stream (seed, tensor name, row block), so a tensor does not depend on which
others are written (`layers=` truncation keeps the surviving tensors identical).

Tensors stream one row block at a time into shards of at most 5 GB (`model-0000k-of-0000N.safetensors` +
`model.safetensors.index.json`; a single `model.safetensors` when it fits), so a 27B model is written without
holding it in memory. `fill="zeros"` writes the same headers over sparse zero data (instant; for shape checks).

Alongside: config.json (nested `text_config` with `rope_parameters`, like the official files), generation_config.json
(eos [248046, 248044], or the tiny tokenizer's im_end/endoftext), tokenizer.json (the converted Qwen3.5 tokenizer,
or the tiny one), tokenizer_config.json with the chat template (thinking off by default up to 2B and for tiny,
on from 4B).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from . import bf16

__all__ = ["GEOMETRIES", "SynthTensor", "plan_synth", "synth_config", "write_synth", "synth_cmd"]

QWEN_VOCAB = 248320

# text fields per geometry (qwen35.md §1.3); all real sizes share head_dim 256, Dk = Dv = 128, K = 4
GEOMETRIES: dict[str, dict] = {
    "0.8b": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=8, num_key_value_heads=2,
                 linear_num_key_heads=16, linear_num_value_heads=16, intermediate_size=3584,
                 tie_word_embeddings=True),
    "2b": dict(hidden_size=2048, num_hidden_layers=24, num_attention_heads=8, num_key_value_heads=2,
               linear_num_key_heads=16, linear_num_value_heads=16, intermediate_size=6144, tie_word_embeddings=True),
    "4b": dict(hidden_size=2560, num_hidden_layers=32, num_attention_heads=16, num_key_value_heads=4,
               linear_num_key_heads=16, linear_num_value_heads=32, intermediate_size=9216, tie_word_embeddings=True),
    "9b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=16, num_key_value_heads=4,
               linear_num_key_heads=16, linear_num_value_heads=32, intermediate_size=12288,
               tie_word_embeddings=False),
    "27b": dict(hidden_size=5120, num_hidden_layers=64, num_attention_heads=24, num_key_value_heads=4,
                linear_num_key_heads=16, linear_num_value_heads=48, intermediate_size=17408,
                tie_word_embeddings=False),
    "tiny": dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                 linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                 intermediate_size=128, vocab_size=512, tie_word_embeddings=True),
    "tiny-untied": dict(hidden_size=64, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                        linear_value_head_dim=16, intermediate_size=128, vocab_size=512,
                        tie_word_embeddings=False),
}
_REAL_DEFAULTS = dict(head_dim=256, linear_key_head_dim=128, linear_value_head_dim=128, vocab_size=QWEN_VOCAB)
_THINKING_DEFAULT_ON = ("4b", "9b", "27b")

SHARD_BYTES = 5_000_000_000
_BLOCK_BYTES = 1 << 20             # generation and write block (rows of one tensor) in bytes: small enough
                                   # that malloc reuses freed blocks (fresh pages cost more than the numbers)
_QUANT_BITS = (2, 3, 4, 5, 6, 8)
_QUANT_GROUPS = (32, 64, 128)
_DTYPE_BYTES = {"U32": 4, "BF16": 2, "F32": 4}
_NP = {"U32": np.uint32, "BF16": np.uint16, "F32": np.float32}


def is_tiny(geometry: str) -> bool:
    return geometry.startswith("tiny")


@dataclass(frozen=True)
class SynthTensor:
    """One tensor to write: file name, safetensors dtype, shape, and a row-block generator."""

    name: str
    dtype: str                      # "U32" | "BF16" | "F32"
    shape: tuple[int, ...]
    make: Callable[[int, int], np.ndarray]   # (row_start, row_stop) -> array of shape [stop-start, *shape[1:]]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * _DTYPE_BYTES[self.dtype]


# ------------------------------------------------------------------------------------------------ config

def _text_fields(geometry: str, layers: int | None) -> dict:
    if geometry not in GEOMETRIES:
        raise ValueError(f"unknown geometry {geometry!r}; choose one of {sorted(GEOMETRIES)}")
    g = dict(GEOMETRIES[geometry])
    if not is_tiny(geometry):
        g = {**_REAL_DEFAULTS, **g}
    if layers is not None:
        if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
            raise ValueError(f"layers must be a positive integer, got {layers!r}")
        g["num_hidden_layers"] = layers
    return g


def _tiny_special_ids() -> dict[str, int]:
    from .tokenizer_build import build_tiny_tokenizer, tiny_special_ids
    return tiny_special_ids(build_tiny_tokenizer())


def synth_config(geometry: str, bits: int | None = 4, group_size: int = 64, layers: int | None = None,
                 seed: int = 0, special_ids: dict[str, int] | None = None) -> dict:
    """config.json contents (nested text_config like the official files); `bits=None` means bf16 (HF layout)."""
    g = _text_fields(geometry, layers)
    L = g["num_hidden_layers"]
    if special_ids is None:
        special_ids = _tiny_special_ids() if is_tiny(geometry) else {"<|endoftext|>": 248044, "<|im_end|>": 248046}
    eot = special_ids["<|endoftext|>"]
    text = {
        "model_type": "qwen3_5_text",
        "hidden_size": g["hidden_size"],
        "num_hidden_layers": L,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(L)],
        "full_attention_interval": 4,
        "num_attention_heads": g["num_attention_heads"],
        "num_key_value_heads": g["num_key_value_heads"],
        "head_dim": g["head_dim"],
        "attn_output_gate": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "linear_num_key_heads": g["linear_num_key_heads"],
        "linear_num_value_heads": g["linear_num_value_heads"],
        "linear_key_head_dim": g["linear_key_head_dim"],
        "linear_value_head_dim": g["linear_value_head_dim"],
        "linear_conv_kernel_dim": 4,
        "intermediate_size": g["intermediate_size"],
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                            "mrope_section": [11, 11, 10], "mrope_interleaved": True},
        "partial_rotary_factor": 0.25,
        "max_position_embeddings": 262144,
        "vocab_size": g["vocab_size"],
        "tie_word_embeddings": g["tie_word_embeddings"],
        "mamba_ssm_dtype": "float32",
        "initializer_range": 0.02,
        "dtype": "bfloat16",
        "bos_token_id": eot,
        "eos_token_id": eot,
        "pad_token_id": None,
    }
    cfg = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": text,
        "tie_word_embeddings": g["tie_word_embeddings"],
        "tensorfold_synth": {"geometry": geometry, "seed": seed, "layers": L,
                             "format": "bf16" if bits is None else f"{bits}bit-g{group_size}",
                             "note": "random weights; not a trained model"},
    }
    if not is_tiny(geometry):
        cfg.update(image_token_id=248056, video_token_id=248057, vision_start_token_id=248053,
                   vision_end_token_id=248054)
    if bits is not None:
        q = {"group_size": group_size, "bits": bits, "mode": "affine"}
        cfg["quantization"] = dict(q)
        cfg["quantization_config"] = dict(q)
    return cfg


# ------------------------------------------------------------------------------------------------ random data

def _rng(seed: int, name: str, role: str, block: int) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode()), zlib.crc32(role.encode()), block])


def _rows_per_block(shape, itemsize) -> int:
    row = max(1, math.prod(shape[1:]) * itemsize)
    return max(1, _BLOCK_BYTES // row)


def _blocked(seed, name, role, shape, itemsize, fn):
    """Wrap fn(rng, n_rows) so that every fixed row block has its own stream; returns make(start, stop)."""
    per = _rows_per_block(shape, itemsize)

    def make(start, stop):
        parts = []
        b0 = start // per
        b1 = (stop - 1) // per
        for b in range(b0, b1 + 1):
            lo, hi = b * per, min((b + 1) * per, shape[0])
            full = fn(_rng(seed, name, role, b), hi - lo)
            parts.append(full[max(start, lo) - lo:min(stop, hi) - lo])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    return make


def _dense_bf16(seed, name, shape, std):
    """bf16 weights, uniform with the given std (fast: no normal sampling for multi-GB tensors)."""
    def fn(rng, n):
        u = rng.random((n, *shape[1:]), dtype=np.float32)
        return bf16.from_f32((u - np.float32(0.5)) * np.float32(std * math.sqrt(12.0)))
    return _blocked(seed, name, "w", shape, 2, fn)


def _vector(seed, name, shape, dtype, fn):
    def make(start, stop):
        full = np.asarray(fn(_rng(seed, name, "v", 0), shape), dtype=np.float32)
        full = bf16.from_f32(full) if dtype == "BF16" else full.astype(np.float32)
        return full[start:stop]
    return make


def _codes(seed, name, shape):
    """Packed codes: raw 64-bit words of an SFC64 stream per row block (the bulk of a quantized checkpoint; raw
    words are several times faster than ``Generator.integers`` and any bits are valid codes)."""
    per = _rows_per_block(shape, 4)
    row_words = math.prod(shape[1:])

    def make(start, stop):
        parts = []
        for b in range(start // per, (stop - 1) // per + 1):
            lo, hi = b * per, min((b + 1) * per, shape[0])
            bg = np.random.SFC64([seed, zlib.crc32(name.encode()), zlib.crc32(b"codes"), b])
            n = (hi - lo) * row_words
            full = bg.random_raw(-(-n // 2)).view(np.uint32)[:n].reshape((hi - lo, *shape[1:]))
            parts.append(full[max(start, lo) - lo:min(stop, hi) - lo])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
    return make


def _codes_v1(seed, name, shape):
    """The first generator (tiny geometries keep it, so the tests' tiny models keep their weights)."""
    def fn(rng, n):
        return rng.integers(0, 1 << 32, size=(n, *shape[1:]), dtype=np.uint32)
    return _blocked(seed, name, "codes", shape, 4, fn)


def _scales_biases_v1(seed, module, shape, std, bits):
    """The first scale / bias generator (kept for the tiny geometries, see ``_codes_v1``)."""
    levels = (1 << bits) - 1
    mag = std * math.sqrt(12.0 / (levels * (levels + 2)))

    def scales_f32(rng, n):
        s = rng.uniform(0.8 * mag, 1.2 * mag, size=(n, *shape[1:])).astype(np.float32)
        sign = rng.integers(0, 2, size=s.shape, dtype=np.int8)
        return np.where(sign == 1, -s, s)

    def scales(rng, n):
        return bf16.from_f32(scales_f32(rng, n))

    def biases(rng, n):
        s = bf16.to_f32(bf16.from_f32(scales_f32(rng, n)))
        jitter = 1.0 + 0.05 * rng.standard_normal(s.shape, dtype=np.float32)
        return bf16.from_f32(-s * np.float32(levels / 2.0) * jitter)

    per = _rows_per_block(shape, 2)

    def blocked(fn):
        def make(start, stop):
            parts = []
            for b in range(start // per, (stop - 1) // per + 1):
                lo, hi = b * per, min((b + 1) * per, shape[0])
                full = fn(_rng(seed, module, "scales", b), hi - lo)
                parts.append(full[max(start, lo) - lo:min(stop, hi) - lo])
            return parts[0] if len(parts) == 1 else np.concatenate(parts)
        return make

    return blocked(scales), blocked(biases)


def _scales_biases(seed, module, shape, std, bits):
    """make functions for scales and biases [out, in/g] (bf16 bits) from one float32 draw per row block: sign
    and magnitude U(0.8, 1.2) * mag from one uniform, the bias jitter from a normal. A block is computed once for
    both tensors (biases are written before scales: the block waits in a cache until the other side took it)."""
    levels = (1 << bits) - 1
    mag = std * math.sqrt(12.0 / (levels * (levels + 2)))   # variance of uniform codes 0..levels: s^2 L(L+2)/12
    per = _rows_per_block(shape, 2)
    cache: dict = {}

    def block(b, idx):
        ent = cache.get(b)
        if ent is None:
            lo, hi = b * per, min((b + 1) * per, shape[0])
            rng = _rng(seed, module, "scales", b)
            u = rng.random((hi - lo, *shape[1:]), dtype=np.float32)
            m = np.float32(0.8 * mag) + np.float32(0.4 * mag) * (np.float32(2.0) * u % np.float32(1.0))
            sc = bf16.from_f32(np.where(u < np.float32(0.5), -m, m))
            jitter = np.float32(1.0) + np.float32(0.05) * rng.standard_normal(sc.shape, dtype=np.float32)
            bi = bf16.from_f32(-bf16.to_f32(sc) * np.float32(levels / 2.0) * jitter)
            ent = cache[b] = [sc, bi, set()]
        ent[2].add(idx)
        if len(ent[2]) == 2:
            del cache[b]
        return ent[idx]

    def maker(idx):
        def make(start, stop):
            parts = []
            for b in range(start // per, (stop - 1) // per + 1):
                lo = b * per
                full = block(b, idx)
                parts.append(full[max(start, lo) - lo:min(stop, lo + full.shape[0]) - lo])
            return parts[0] if len(parts) == 1 else np.concatenate(parts)
        return make

    return maker(0), maker(1)


# ------------------------------------------------------------------------------------------------ plan

def plan_synth(geometry: str, bits: int | None = 4, group_size: int = 64, seed: int = 0,
               layers: int | None = None) -> list[SynthTensor]:
    """Every tensor `write_synth` writes (file names, dtypes, shapes, generators), in name order."""
    if bits is not None:
        if bits not in _QUANT_BITS:
            raise ValueError(f"bits={bits!r}: supported MLX affine widths are {_QUANT_BITS}")
        if group_size not in _QUANT_GROUPS:
            raise ValueError(f"group_size={group_size!r}: supported MLX group sizes are {_QUANT_GROUPS}")
    g = _text_fields(geometry, layers)
    H, L, I, V = g["hidden_size"], g["num_hidden_layers"], g["intermediate_size"], g["vocab_size"]
    nH, nKV, hd = g["num_attention_heads"], g["num_key_value_heads"], g["head_dim"]
    Hk, Hv, Dk, Dv = g["linear_num_key_heads"], g["linear_num_value_heads"], g["linear_key_head_dim"], \
        g["linear_value_head_dim"]
    K = 4
    key_dim, value_dim = Hk * Dk, Hv * Dv
    conv_dim = 2 * key_dim + value_dim
    mlx = bits is not None
    tiny = is_tiny(geometry)  # tiny: the first (slower) generators, so the tests' tiny weights never change
    root = "language_model.model." if mlx else "model."
    head = "language_model.lm_head" if mlx else "lm_head"
    out: list[SynthTensor] = []
    out_scale = 1.0 / math.sqrt(2 * GEOMETRIES[geometry]["num_hidden_layers"])  # native depth: truncation-stable

    def linear(module, n_out, n_in, std):
        shape = (n_out, n_in)
        if mlx and n_in % group_size == 0:
            words = n_in * bits // 32
            sb, codes = (_scales_biases_v1, _codes_v1) if tiny else (_scales_biases, _codes)
            s_make, b_make = sb(seed, module, (n_out, n_in // group_size), std, bits)
            out.append(SynthTensor(module + ".weight", "U32", (n_out, words), codes(seed, module, (n_out, words))))
            out.append(SynthTensor(module + ".scales", "BF16", (n_out, n_in // group_size), s_make))
            out.append(SynthTensor(module + ".biases", "BF16", (n_out, n_in // group_size), b_make))
        else:
            out.append(SynthTensor(module + ".weight", "BF16", shape, _dense_bf16(seed, module, shape, std)))

    def vector(name, shape, dtype, fn):
        out.append(SynthTensor(name, dtype, tuple(shape), _vector(seed, name, tuple(shape), dtype, fn)))

    def norm(name, n):  # RMSNorm1p: multiplier 1+w for MLX files, w for HF files
        offset = 1.0 if mlx else 0.0
        vector(name, (n,), "BF16", lambda r, s: offset + 0.05 * r.standard_normal(s))

    def a_log(r, s):
        return np.log(r.uniform(1.0, 16.0, s))

    def dt_bias(r, s):
        dt = np.exp(r.uniform(math.log(1e-3), math.log(0.1), s))
        return dt + np.log(-np.expm1(-dt))           # inverse softplus

    linear(root + "embed_tokens", V, H, H ** -0.25)
    if not g["tie_word_embeddings"]:
        linear(head, V, H, 4.0 / math.sqrt(H))
    norm(root + "norm.weight", H)
    for i in range(L):
        p = f"{root}layers.{i}."
        norm(p + "input_layernorm.weight", H)
        norm(p + "post_attention_layernorm.weight", H)
        linear(p + "mlp.gate_proj", I, H, 1 / math.sqrt(H))
        linear(p + "mlp.up_proj", I, H, 1 / math.sqrt(H))
        linear(p + "mlp.down_proj", H, I, out_scale / math.sqrt(I))
        if (i + 1) % 4 == 0:
            a = p + "self_attn."
            linear(a + "q_proj", 2 * nH * hd, H, 1 / math.sqrt(H))
            linear(a + "k_proj", nKV * hd, H, 1 / math.sqrt(H))
            linear(a + "v_proj", nKV * hd, H, 1 / math.sqrt(H))
            linear(a + "o_proj", H, nH * hd, out_scale / math.sqrt(nH * hd))
            norm(a + "q_norm.weight", hd)
            norm(a + "k_norm.weight", hd)
        else:
            a = p + "linear_attn."
            linear(a + "in_proj_qkv", conv_dim, H, 1 / math.sqrt(H))
            linear(a + "in_proj_z", value_dim, H, 1 / math.sqrt(H))
            linear(a + "in_proj_b", Hv, H, 1 / math.sqrt(H))
            linear(a + "in_proj_a", Hv, H, 1 / math.sqrt(H))
            linear(a + "out_proj", H, value_dim, out_scale / math.sqrt(value_dim))
            conv_shape = (conv_dim, K, 1) if mlx else (conv_dim, 1, K)
            vector(a + "conv1d.weight", conv_shape, "BF16", lambda r, s: 0.5 * r.standard_normal(s))
            vector(a + "dt_bias", (Hv,), "BF16", dt_bias)
            vector(a + "A_log", (Hv,), "F32", a_log)
            vector(a + "norm.weight", (Dv,), "BF16" if mlx else "F32",
                   lambda r, s: 1.0 + 0.05 * r.standard_normal(s))
    out.sort(key=lambda t: t.name)
    return out


# ------------------------------------------------------------------------------------------------ writing

def _shards(tensors: list[SynthTensor], limit: int) -> list[list[SynthTensor]]:
    shards: list[list[SynthTensor]] = [[]]
    size = 0
    for t in tensors:
        if shards[-1] and size + t.nbytes > limit:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += t.nbytes
    return shards


def _write_safetensors(path: Path, tensors: list[SynthTensor], metadata: dict[str, str], fill: str) -> None:
    header: dict = {"__metadata__": metadata}
    offset = 0
    for t in tensors:
        header[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-(8 + len(raw)) % 8)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb", buffering=0) as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        if fill == "zeros":
            f.truncate(8 + len(raw) + offset)      # sparse: reads as zeros, costs no disk
        else:
            # generation (numpy, mostly without the GIL) overlaps the writes of a writer thread; blocks go out in
            # order, whole, without an extra copy; at most two wait (64 MB of memory)
            from concurrent.futures import ThreadPoolExecutor

            pending = []
            with ThreadPoolExecutor(1) as pool:
                for t in tensors:
                    per = _rows_per_block(t.shape, _DTYPE_BYTES[t.dtype])
                    for start in range(0, t.shape[0], per):
                        stop = min(start + per, t.shape[0])
                        block = np.ascontiguousarray(t.make(start, stop), dtype=_NP[t.dtype])
                        expect = (stop - start, *t.shape[1:])
                        if block.shape != expect:  # pragma: no cover - generator bug guard
                            raise AssertionError(f"{t.name}: generated {block.shape}, expected {expect}")
                        block = block.astype(block.dtype.newbyteorder("<"), copy=False)
                        pending.append(pool.submit(_write_all, f, block))
                        while len(pending) > 2:
                            pending.pop(0).result()
                for p in pending:
                    p.result()
    os.replace(tmp, path)


def _write_all(f, block: np.ndarray) -> None:
    mv = memoryview(block.reshape(-1)).cast("B")
    while mv:
        n = f.write(mv)
        mv = mv[n:]


def _write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_synth(geometry: str, out, bits: int | None = 4, group_size: int = 64, seed: int = 0,
                layers: int | None = None, bf16: bool = False, fill: str = "random",
                shard_bytes: int = SHARD_BYTES, overwrite: bool = False) -> Path:
    """Write a random checkpoint directory; returns its path. `bf16=True` (or bits=None) gives the HF bf16
    layout. Refuses a directory that already holds a model unless `overwrite`."""
    if fill not in ("random", "zeros"):
        raise ValueError(f"fill={fill!r}: expected 'random' or 'zeros'")
    if bf16:
        bits = None
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        old = list(out.glob("*.safetensors")) + list(out.glob("*.safetensors.index.json")) \
            + [out / "config.json"] * (out / "config.json").exists()
        if old and not overwrite:
            raise ValueError(f"{out}: already holds a model ({old[0].name}); pass overwrite=True / --force")
        for p in dict.fromkeys(old):
            p.unlink()
    out.mkdir(parents=True, exist_ok=True)

    tensors = plan_synth(geometry, bits=bits, group_size=group_size, seed=seed, layers=layers)

    # tokenizer first: the tiny config's special ids come from it
    from .tokenizer_build import build_tiny_tokenizer, qwen35_tokenizer_path, tiny_special_ids
    from ..tokenizer import builtin_template
    if is_tiny(geometry):
        tok = build_tiny_tokenizer()
        _write_json(out / "tokenizer.json", tok)
        ids = tiny_special_ids(tok)
    else:
        shutil.copyfile(qwen35_tokenizer_path(), out / "tokenizer.json")
        ids = {"<|endoftext|>": 248044, "<|im_end|>": 248046}
    think = geometry in _THINKING_DEFAULT_ON
    _write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "Qwen2Tokenizer",
        "add_bos_token": False,
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "errors": "replace",
        "model_max_length": 262144,
        "split_special_tokens": False,
        "chat_template": builtin_template("qwen3_5_think" if think else "qwen3_5_nothink"),
    })
    _write_json(out / "generation_config.json", {
        "bos_token_id": ids["<|endoftext|>"],
        "do_sample": True,
        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "pad_token_id": ids["<|endoftext|>"],
        "temperature": 1.0 if think else 0.7,
        "top_k": 20,
        "top_p": 0.95 if think else 0.8,
    })
    _write_json(out / "config.json", synth_config(geometry, bits=bits, group_size=group_size, layers=layers,
                                                  seed=seed, special_ids=ids))

    metadata = {"format": "mlx" if bits is not None else "pt"}
    shards = _shards(tensors, shard_bytes)
    if len(shards) == 1:
        _write_safetensors(out / "model.safetensors", shards[0], metadata, fill)
    else:
        n = len(shards)
        weight_map = {}
        for k, shard in enumerate(shards, 1):
            fname = f"model-{k:05d}-of-{n:05d}.safetensors"
            _write_safetensors(out / fname, shard, metadata, fill)
            weight_map.update({t.name: fname for t in shard})
        _write_json(out / "model.safetensors.index.json",
                    {"metadata": {"total_size": sum(t.nbytes for t in tensors)}, "weight_map": weight_map})
    return out


# ------------------------------------------------------------------------------------------------ CLI

def _click_command():
    import click

    @click.command("synth")
    @click.argument("geometry", type=click.Choice(sorted(GEOMETRIES), case_sensitive=False))
    @click.argument("out", type=click.Path(file_okay=False))
    @click.option("--bits", type=click.Choice([str(b) for b in _QUANT_BITS]), default="4", show_default=True,
                  help="MLX affine bit width")
    @click.option("--group-size", type=click.Choice([str(g) for g in _QUANT_GROUPS]), default="64",
                  show_default=True, help="MLX affine group size")
    @click.option("--bf16", "use_bf16", is_flag=True, help="write an HF-layout bf16 checkpoint instead")
    @click.option("--seed", type=int, default=0, show_default=True)
    @click.option("--layers", type=click.IntRange(min=1), default=None, help="override the layer count")
    @click.option("--zeros", is_flag=True, help="headers only over sparse zero data (instant; for shape checks)")
    @click.option("--force", is_flag=True, help="replace a model already in OUT")
    def synth_cmd(geometry, out, bits, group_size, use_bf16, seed, layers, zeros, force):
        """Write a random-weight checkpoint of GEOMETRY (0.8b 2b 4b 9b 27b tiny tiny-untied) to OUT."""
        try:
            path = write_synth(geometry.lower(), out, bits=None if use_bf16 else int(bits),
                               group_size=int(group_size), seed=seed, layers=layers,
                               fill="zeros" if zeros else "random", overwrite=force)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
        total = sum(p.stat().st_size for p in path.glob("*.safetensors"))
        size = f"{total / 1e9:.2f} GB" if total >= 1e9 else f"{total / 1e6:.2f} MB"
        click.echo(f"wrote {geometry} ({'bf16' if use_bf16 else f'{bits}-bit g{group_size}'}) to {path}: "
                   f"{size} of weights")

    return synth_cmd


synth_cmd = _click_command()
