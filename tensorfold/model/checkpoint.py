"""load_checkpoint: a model directory -> validated, memory-mapped weights under internal names.

Owns the checkpoint contract (docs/contracts.md, "Checkpoint"; spec qwen35.md §2 and §4):
  * files: ``model.safetensors``, or shards listed in ``model.safetensors.index.json`` (every listed shard must
    exist), or else every ``*.safetensors`` in the directory;
  * names: HF composite (``model.language_model.``, top-level ``lm_head``), HF text-only (``model.``), MLX
    (``language_model.model.``, ``language_model.lm_head``) and bare (``layers.``) prefixes all map to internal
    names; vision tower and MTP tensors are dropped;
  * format: HF stores ``conv1d.weight`` as [C, 1, K] and zero-centred norms (w, applied as 1+w); MLX stores
    [C, K, 1] and norms already baked to 1+w. The loader detects the format from the conv layout and returns
    multipliers: input/post-attention/final/q/k norms get +1 for HF files, never ``linear_attn.norm``;
  * quantization: a linear is quantized iff ``<prefix>.scales`` exists; bits and group follow from the shapes and
    are cross-checked against the config's ``quantization`` block;
  * geometry: every expected tensor must be present with the shape the config implies.
Big matrices stay memory-mapped (read-only views, no copies); vectors are returned as float32.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import bf16
from .config import ModelConfig, load_config, to_internal_name
from .errors import CheckpointError
from .quant import BITS, GROUP_SIZES
from .safetensors_io import SafetensorsFile
from .weights import AffineWeight, DenseWeight

__all__ = ["Checkpoint", "load_checkpoint", "expected_linears", "expected_vectors", "CheckpointError"]

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
_SHIFTED_NORMS = ("input_layernorm", "post_attention_layernorm", "self_attn.q_norm", "self_attn.k_norm")


@dataclass
class Checkpoint:
    """Weights of one model directory, keyed by internal name (see contracts.md)."""

    config: ModelConfig
    path: Path
    format: str                                   # "hf" | "mlx"
    tensors: dict = field(default_factory=dict)   # internal name -> DenseWeight | AffineWeight | np.ndarray f32
    files: tuple = ()                             # the safetensors files read
    naming: str = ""                              # "hf-composite" | "hf-text" | "mlx" | "bare"
    dtype: str = ""                               # storage dtype of unquantized matrices / scales: bf16|f16|f32
    unused: tuple = ()                            # tensor names present in the files but not used
    stored_dtypes: dict = field(default_factory=dict)  # internal name -> safetensors dtype of its main tensor

    @property
    def nbytes(self) -> int:
        return sum(f.stat().st_size for f in self.files)

    def quant_summary(self) -> dict:
        """(bits, group) or None (unquantized) -> list of internal module names, over every linear/embedding."""
        out: dict = {}
        for name, w in self.tensors.items():
            if isinstance(w, AffineWeight):
                out.setdefault((w.bits, w.group_size), []).append(name)
            elif isinstance(w, DenseWeight):
                out.setdefault(None, []).append(name)
        return out


def expected_linears(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    """Internal name -> [out, in] of every matrix the config implies (embedding and head included)."""
    H, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    nH, nKV, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    m = {"embed_tokens": (V, H)}
    if not cfg.tie_word_embeddings:
        m["lm_head"] = (V, H)
    for i, t in enumerate(cfg.layer_types):
        p = f"layers.{i}."
        m[p + "mlp.gate_proj"] = (I, H)
        m[p + "mlp.up_proj"] = (I, H)
        m[p + "mlp.down_proj"] = (H, I)
        if t == "full_attention":
            m[p + "self_attn.q_proj"] = (2 * nH * hd, H)
            m[p + "self_attn.k_proj"] = (nKV * hd, H)
            m[p + "self_attn.v_proj"] = (nKV * hd, H)
            m[p + "self_attn.o_proj"] = (H, nH * hd)
        else:
            m[p + "linear_attn.in_proj_qkv"] = (cfg.conv_dim, H)
            m[p + "linear_attn.in_proj_z"] = (cfg.value_dim, H)
            m[p + "linear_attn.in_proj_b"] = (cfg.linear_num_value_heads, H)
            m[p + "linear_attn.in_proj_a"] = (cfg.linear_num_value_heads, H)
            m[p + "linear_attn.out_proj"] = (H, cfg.value_dim)
    return m


def expected_vectors(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Internal name -> returned shape of every non-matrix tensor (conv1d as [conv_dim, K])."""
    H, hd = cfg.hidden_size, cfg.head_dim
    m = {"norm": (H,)}
    for i, t in enumerate(cfg.layer_types):
        p = f"layers.{i}."
        m[p + "input_layernorm"] = (H,)
        m[p + "post_attention_layernorm"] = (H,)
        if t == "full_attention":
            m[p + "self_attn.q_norm"] = (hd,)
            m[p + "self_attn.k_norm"] = (hd,)
        else:
            m[p + "linear_attn.conv1d"] = (cfg.conv_dim, cfg.linear_conv_kernel_dim)
            m[p + "linear_attn.dt_bias"] = (cfg.linear_num_value_heads,)
            m[p + "linear_attn.A_log"] = (cfg.linear_num_value_heads,)
            m[p + "linear_attn.norm"] = (cfg.linear_value_head_dim,)
    return m


def _vector_key(internal: str) -> str:
    # dt_bias and A_log are parameters, not modules: no ".weight" suffix
    return internal if internal.endswith(("dt_bias", "A_log")) else internal + ".weight"


def _naming_scheme(names) -> str:
    c = Counter()
    for n in names:
        if n.startswith("model.language_model."):
            c["hf-composite"] += 1
        elif n.startswith("language_model."):
            c["mlx"] += 1
        elif n.startswith("model."):
            c["hf-text"] += 1
        elif n.startswith("layers.") or n.startswith("embed_tokens"):
            c["bare"] += 1
    return c.most_common(1)[0][0] if c else "bare"


def _list_files(d: Path) -> tuple[list[Path], dict | None]:
    """The safetensors files to read and, for sharded checkpoints, the index's tensor -> shard map."""
    idx = d / INDEX_FILE
    if idx.is_file():
        try:
            data = json.loads(idx.read_text(encoding="utf-8"))
            wm = data["weight_map"]
            if not isinstance(wm, dict):
                raise TypeError("weight_map is not an object")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{idx}: cannot read the shard index ({e})") from None
        files = []
        for shard in dict.fromkeys(wm.values()):
            p = d / shard
            if not p.is_file():
                raise CheckpointError(f"{idx}: shard {shard!r} is listed in the index but {p} does not exist")
            files.append(p)
        return files, wm
    if (d / SINGLE_FILE).is_file():
        return [d / SINGLE_FILE], None
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{d}: no {SINGLE_FILE}, no {INDEX_FILE} and no *.safetensors files")
    return files, None


def _to_f32(a: np.ndarray, dt: str) -> np.ndarray:
    if dt == "BF16":
        return bf16.to_f32(np.asarray(a))
    if dt in ("F16", "F32", "F64"):
        return np.array(a, dtype=np.float32)
    raise ValueError(dt)


def load_checkpoint(path) -> Checkpoint:
    """Open a model directory (config.json + safetensors) and return its validated weights; see module doc."""
    d = Path(path)
    if not d.is_dir():
        raise CheckpointError(f"{d}: not a model directory")
    cfg = load_config(d)
    files, index = _list_files(d)

    # name -> (file object, raw name); duplicates after mapping are an error
    opened = [SafetensorsFile(f) for f in files]
    if index is not None:
        by_name = {sf.path.name: sf for sf in opened}
        for raw, shard in index.items():
            if raw not in by_name[shard]:
                raise CheckpointError(f"{d / INDEX_FILE}: lists tensor {raw!r} in {shard!r}, but {by_name[shard].path} "
                                      f"has no such tensor")
    where: dict[str, tuple[SafetensorsFile, str]] = {}
    raw_names = []
    for sf in opened:
        for raw in sf.keys():
            raw_names.append(raw)
            internal = to_internal_name(raw)
            if internal is None:
                continue
            if internal in where:
                other = where[internal]
                raise CheckpointError(f"{sf.path}: tensor {raw!r} maps to {internal!r}, which {other[0].path} "
                                      f"already provides as {other[1]!r}")
            where[internal] = (sf, raw)
    naming = _naming_scheme(raw_names)

    def missing(key):
        return CheckpointError(f"{d}: missing tensor {key!r} (expected by config.json; {naming} naming; "
                               f"searched {', '.join(f.name for f in files)})")

    def bad_shape(key, got, want):
        sf, raw = where[key]
        return CheckpointError(f"{sf.path}: tensor {raw!r} has shape {list(got)}, config implies {list(want)}")

    # -- format from the conv layout
    fmt = None
    for i in cfg.linear_attention_layers:
        key = f"layers.{i}.linear_attn.conv1d.weight"
        if key not in where:
            raise missing(key)
        sf, raw = where[key]
        shp = sf.shape(raw)
        C, K = cfg.conv_dim, cfg.linear_conv_kernel_dim
        if shp == (C, 1, K) and K != 1:
            f = "hf"
        elif shp == (C, K, 1) and K != 1:
            f = "mlx"
        elif shp in ((C, 1, 1), (C, K)):
            f = None
        else:
            raise bad_shape(key, shp, (C, 1, K))
        if f is not None and fmt is not None and f != fmt:
            raise CheckpointError(f"{sf.path}: tensor {raw!r} has the {f} conv layout {list(shp)} but earlier layers "
                                  f"use the {fmt} layout")
        fmt = fmt or f
    if fmt is None:  # no linear-attention layer (or K == 1): fall back on naming / quantization
        fmt = "mlx" if naming == "mlx" or any(k.endswith(".scales") for k in where) else "hf"

    tensors: dict = {}
    stored: dict[str, str] = {}
    used: set[str] = set()
    dtypes = Counter()

    # -- matrices
    qc = cfg.quantization
    for name, (out_f, in_f) in expected_linears(cfg).items():
        wkey = name + ".weight"
        if wkey not in where:
            raise missing(wkey)
        sf, raw = where[wkey]
        shp, dt = sf.shape(raw), sf.dtype(raw)
        used.add(wkey)
        stored[name] = dt
        skey, bkey = name + ".scales", name + ".biases"
        if skey in where:
            if bkey not in where:
                raise missing(bkey)
            used.update((skey, bkey))
            ssf, sraw = where[skey]
            bsf, braw = where[bkey]
            if dt != "U32" or len(shp) != 2:
                raise CheckpointError(f"{sf.path}: tensor {raw!r} is quantized (has scales) but is {dt} "
                                      f"{list(shp)}, expected U32 [out, in*bits/32]")
            if shp[0] != out_f:
                raise bad_shape(wkey, shp, (out_f, f"{in_f}*bits/32"))
            cols = shp[1]
            if (32 * cols) % in_f or (32 * cols) // in_f not in BITS:
                raise CheckpointError(f"{sf.path}: tensor {raw!r}: packed width {cols} words for in={in_f} gives "
                                      f"{32 * cols / in_f:g} bits, which matches no supported bit count {BITS}")
            bits = 32 * cols // in_f
            sshp = ssf.shape(sraw)
            if len(sshp) != 2 or sshp[0] != out_f or sshp[1] == 0 or in_f % sshp[1] \
                    or in_f // sshp[1] not in GROUP_SIZES:
                raise CheckpointError(f"{ssf.path}: tensor {sraw!r} has shape {list(sshp)}: for [{out_f}, {in_f}] "
                                      f"expected [{out_f}, in/group] with group in {GROUP_SIZES}")
            group = in_f // sshp[1]
            if bsf.shape(braw) != sshp:
                raise CheckpointError(f"{bsf.path}: tensor {braw!r} has shape {list(bsf.shape(braw))}, "
                                      f"expected {list(sshp)} like its scales")
            for qsf, qraw in ((ssf, sraw), (bsf, braw)):
                if qsf.dtype(qraw) not in ("BF16", "F16", "F32"):
                    raise CheckpointError(f"{qsf.path}: tensor {qraw!r} has dtype {qsf.dtype(qraw)}, "
                                          f"expected BF16, F16 or F32")
            if qc is not None:
                declared = qc.for_module(name)
                if declared is None:
                    raise CheckpointError(f"{sf.path}: module {name!r} is quantized in the file ({bits}-bit "
                                          f"g{group}) but config.json marks it unquantized (false)")
                if declared != (bits, group):
                    raise CheckpointError(f"{sf.path}: module {name!r}: the file holds {bits}-bit g{group} but "
                                          f"config.json declares {declared[0]}-bit g{declared[1]}")
            tensors[name] = AffineWeight(sf.get(raw), ssf.get(sraw), bsf.get(braw), bits, group)
            dtypes[ssf.dtype(sraw)] += 1
        else:
            if dt not in ("BF16", "F16", "F32"):
                raise CheckpointError(f"{sf.path}: tensor {raw!r} has dtype {dt} without scales; expected BF16, "
                                      f"F16 or F32 (or U32 with .scales/.biases)")
            if shp != (out_f, in_f):
                raise bad_shape(wkey, shp, (out_f, in_f))
            tensors[name] = DenseWeight(sf.get(raw))
            dtypes[dt] += 1

    # -- vectors (norms, conv, gates)
    for name, shape in expected_vectors(cfg).items():
        key = _vector_key(name)
        if key not in where:
            raise missing(key)
        sf, raw = where[key]
        shp, dt = sf.shape(raw), sf.dtype(raw)
        used.add(key)
        stored[name] = dt
        if dt not in ("BF16", "F16", "F32"):
            raise CheckpointError(f"{sf.path}: tensor {raw!r} has dtype {dt}, expected BF16, F16 or F32")
        if name.endswith("conv1d"):
            C, K = shape
            if shp not in ((C, 1, K), (C, K, 1), (C, K)):
                raise bad_shape(key, shp, (C, 1, K) if fmt == "hf" else (C, K, 1))
            vec = _to_f32(sf.get(raw), dt).reshape(C, K)
        else:
            if shp != shape:
                raise bad_shape(key, shp, shape)
            vec = _to_f32(sf.get(raw), dt)
            if fmt == "hf" and (name == "norm" or name.endswith(_SHIFTED_NORMS)):
                vec = vec + np.float32(1.0)
        tensors[name] = vec

    unused = tuple(sorted(where[k][1] for k in where if k not in used
                          and not (cfg.tie_word_embeddings and k.startswith("lm_head."))))
    dtype = {"BF16": "bf16", "F16": "f16", "F32": "f32"}[dtypes.most_common(1)[0][0]] if dtypes else ""
    return Checkpoint(config=cfg, path=d, format=fmt, tensors=tensors, files=tuple(files), naming=naming,
                      dtype=dtype, unused=unused, stored_dtypes=stored)
