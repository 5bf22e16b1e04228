"""ModelConfig: the text-model geometry of a Qwen3.5-family checkpoint, read from config.json and validated.

Owns: parsing ``config.json`` (flat, or nested under ``text_config``; rope fields in the ``rope_parameters`` dict or
flat; ``layer_types`` or ``full_attention_interval``), the MLX ``quantization`` block and its per-module overrides,
the stop ids (generation_config.json first), and the mapping of HF / MLX module paths to internal names
(``to_internal_name``), which the checkpoint loader shares. Every problem raises ``ConfigError`` naming the field
and the value. See docs/contracts.md ("Config") and the spec qwen35.md §1 and §4.3.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .errors import ConfigError

__all__ = ["ModelConfig", "QuantConfig", "load_config", "to_internal_name", "ConfigError", "LAYER_TYPES"]

LAYER_TYPES = ("linear_attention", "full_attention")
_MODEL_TYPES = ("qwen3_5", "qwen3_5_text")
_QUANT_BITS = (2, 3, 4, 5, 6, 8)
_QUANT_GROUPS = (32, 64, 128)
_QUANT_KEYS = ("bits", "group_size", "mode")
_DROPPED_ROOTS = ("visual", "vision_tower", "vision_model", "mtp", "multi_modal_projector")


# ---------------------------------------------------------------------------------------------------------------
# names

def to_internal_name(path: str) -> str | None:
    """Map a module path or tensor name in HF composite / HF text-only / MLX / bare naming to the internal name.

    ``model.language_model.layers.3.mlp.down_proj`` / ``language_model.model.layers.3.mlp.down_proj`` /
    ``model.layers.3.mlp.down_proj`` / ``layers.3.mlp.down_proj`` -> ``layers.3.mlp.down_proj``;
    ``lm_head`` / ``language_model.lm_head`` -> ``lm_head``. Returns None for parts that are not the text model
    (vision tower, MTP head). Suffixes such as ``.weight`` are kept.
    """
    for prefix in ("model.language_model.", "language_model.model.", "language_model.", "model."):
        if path.startswith(prefix):
            rest = path[len(prefix):]
            break
    else:
        rest = path
    root = rest.split(".", 1)[0]
    if root in _DROPPED_ROOTS:
        return None
    return rest


# ---------------------------------------------------------------------------------------------------------------
# quantization

@dataclass(frozen=True)
class QuantConfig:
    """MLX affine quantization defaults plus per-module overrides (internal name -> (bits, group) or None)."""

    bits: int
    group_size: int
    mode: str = "affine"
    overrides: Mapping[str, tuple[int, int] | None] = field(default_factory=dict)

    def for_module(self, internal_name: str) -> tuple[int, int] | None:
        """(bits, group) the config declares for this module; None when the config says it is not quantized."""
        if internal_name in self.overrides:
            return self.overrides[internal_name]
        return (self.bits, self.group_size)

    def __hash__(self):
        return hash((self.bits, self.group_size, self.mode, tuple(sorted(self.overrides.items()))))


def _check_quant_pair(bits, group, mode, where):
    if mode != "affine":
        raise ConfigError(f"{where}.mode={mode!r}: only MLX 'affine' quantization is supported")
    if not isinstance(bits, int) or isinstance(bits, bool) or bits not in _QUANT_BITS:
        raise ConfigError(f"{where}.bits={bits!r}: supported bit widths are {_QUANT_BITS}")
    if not isinstance(group, int) or isinstance(group, bool) or group not in _QUANT_GROUPS:
        raise ConfigError(f"{where}.group_size={group!r}: supported group sizes are {_QUANT_GROUPS}")


def _parse_quant(block: Any, field_name: str) -> QuantConfig:
    if not isinstance(block, dict):
        raise ConfigError(f"{field_name}={block!r}: expected an object with bits / group_size")
    if "quant_method" in block:
        raise ConfigError(f"{field_name}.quant_method={block['quant_method']!r}: this is not an MLX affine checkpoint "
                          f"(only MLX affine quantization and bf16/f16/f32 weights are supported)")
    mode = block.get("mode", "affine")
    bits = block.get("bits")
    group = block.get("group_size", 64)
    if bits is None:
        raise ConfigError(f"{field_name}.bits is missing")
    _check_quant_pair(bits, group, mode, field_name)
    overrides: dict[str, tuple[int, int] | None] = {}
    for key, val in block.items():
        if key in _QUANT_KEYS:
            continue
        where = f"{field_name}[{key!r}]"
        name = to_internal_name(key)
        if name is None:  # vision / MTP modules: not ours
            continue
        if name.endswith(".weight"):
            name = name[: -len(".weight")]
        if val is False:
            overrides[name] = None
        elif val is True:
            overrides[name] = (bits, group)
        elif isinstance(val, dict):
            ob, og, om = val.get("bits", bits), val.get("group_size", group), val.get("mode", mode)
            _check_quant_pair(ob, og, om, where)
            overrides[name] = (ob, og)
        else:
            raise ConfigError(f"{where}={val!r}: expected an object of bits/group_size/mode, or false")
    return QuantConfig(bits=bits, group_size=group, mode=mode, overrides=overrides)


# ---------------------------------------------------------------------------------------------------------------
# the config

@dataclass(frozen=True)
class ModelConfig:
    hidden_size: int
    num_hidden_layers: int
    layer_types: tuple[str, ...]
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    partial_rotary_factor: float
    vocab_size: int
    tie_word_embeddings: bool
    output_gate_type: str
    max_position_embeddings: int
    quantization: QuantConfig | None
    eos_token_ids: tuple[int, ...]

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim

    @property
    def full_attention_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == "full_attention")

    @property
    def linear_attention_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == "linear_attention")


def _pos_int(text: dict, key: str, default=None, required=True) -> int:
    if key not in text or text[key] is None:
        if default is not None or not required:
            return default
        raise ConfigError(f"config field {key!r} is missing")
    v = text[key]
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise ConfigError(f"config field {key}={v!r}: must be a positive integer")
    return v


def _pos_float(v, key) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise ConfigError(f"config field {key}={v!r}: must be a positive number")
    return float(v)


def _eos_list(v, where) -> tuple[int, ...]:
    if v is None:
        return ()
    vals = v if isinstance(v, list) else [v]
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in vals):
        raise ConfigError(f"{where}={v!r}: expected a token id or a list of token ids")
    return tuple(dict.fromkeys(vals))


def _read_json(path: Path, what: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} not found") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read {what} ({e})") from None
    if not isinstance(d, dict):
        raise ConfigError(f"{path}: {what} is a JSON {type(d).__name__}, expected an object")
    return d


def load_config(source) -> ModelConfig:
    """Build a validated ModelConfig from a model directory, a config.json path, or an already-parsed dict."""
    gen: dict | None = None
    if isinstance(source, Mapping):
        raw = dict(source)
        where = "config"
    else:
        p = Path(source)
        cfg_path = p / "config.json" if p.is_dir() else p
        raw = _read_json(cfg_path, "config.json")
        where = str(cfg_path)
        gpath = cfg_path.parent / "generation_config.json"
        if gpath.is_file():
            gen = _read_json(gpath, "generation_config.json")
    try:
        return _parse(raw, gen)
    except ConfigError as e:
        if where == "config":
            raise
        raise ConfigError(f"{where}: {e}") from None


def _parse(raw: dict, gen: dict | None) -> ModelConfig:
    nested = "text_config" in raw
    text = raw["text_config"] if nested else raw
    if not isinstance(text, dict):
        raise ConfigError(f"config field text_config={text!r}: expected an object")
    for where, d in (("model_type", raw), ("text_config.model_type", text if nested else {})):
        mt = d.get("model_type")
        if mt is not None and mt not in _MODEL_TYPES:
            raise ConfigError(f"config field {where}={mt!r}: not a dense Qwen3.5 text model "
                              f"(expected one of {_MODEL_TYPES})")

    H = _pos_int(text, "hidden_size")
    L = _pos_int(text, "num_hidden_layers")
    nH = _pos_int(text, "num_attention_heads")
    nKV = _pos_int(text, "num_key_value_heads")
    # head_dim is read, never derived when present (Qwen3.5-4B: 2560/16 = 160 but head_dim is 256). Only a config
    # that omits it entirely falls back to hidden_size / num_attention_heads, the usual transformers default.
    if text.get("head_dim") is None:
        if H % nH:
            raise ConfigError(f"config field 'head_dim' is missing and hidden_size={H} is not divisible by "
                              f"num_attention_heads={nH}")
        hd = H // nH
    else:
        hd = _pos_int(text, "head_dim")
    Hk = _pos_int(text, "linear_num_key_heads")
    Hv = _pos_int(text, "linear_num_value_heads")
    Dk = _pos_int(text, "linear_key_head_dim")
    Dv = _pos_int(text, "linear_value_head_dim")
    K = _pos_int(text, "linear_conv_kernel_dim", default=4)
    inter = _pos_int(text, "intermediate_size")
    V = _pos_int(text, "vocab_size")
    max_pos = _pos_int(text, "max_position_embeddings", default=262144)
    eps = _pos_float(text.get("rms_norm_eps", 1e-6), "rms_norm_eps")

    if nH % nKV:
        raise ConfigError(f"config field num_attention_heads={nH} is not a multiple of num_key_value_heads={nKV}")
    if Hv % Hk:
        raise ConfigError(f"config field linear_num_value_heads={Hv} is not a multiple of linear_num_key_heads={Hk}")

    # rope: transformers >= 5 nests it in rope_parameters; re-exports flatten it; old files say "type"
    rp = text.get("rope_parameters")
    if rp is None:
        rp = text.get("rope_scaling")
    if rp is not None and not isinstance(rp, dict):
        raise ConfigError(f"config field rope_parameters={rp!r}: expected an object")
    rp = dict(rp or {})
    if "rope_type" not in rp and "type" in rp:
        rp["rope_type"] = rp["type"]
    rope_type = rp.get("rope_type", text.get("rope_type", text.get("type", "default")))
    if rope_type not in ("default", "mrope", None):
        raise ConfigError(f"config field rope_type={rope_type!r}: only default (M-)RoPE is supported")
    # 1e7 is the value of every Qwen3.5/3.6/3.8 size; a missing theta must not fall back to 1e4/1e5
    theta = _pos_float(rp.get("rope_theta", text.get("rope_theta", 1e7)), "rope_theta")
    prf = rp.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))
    prf = _pos_float(prf, "partial_rotary_factor")
    rot = int(hd * prf)
    if prf > 1 or rot <= 0 or rot % 2 or rot > hd:
        raise ConfigError(f"config field partial_rotary_factor={prf!r}: rotary_dim = int(head_dim {hd} * {prf}) = "
                          f"{rot} must be even, positive and <= head_dim")

    lt = text.get("layer_types")
    if lt is not None:
        if not isinstance(lt, list) or len(lt) != L:
            raise ConfigError(f"config field layer_types has {len(lt) if isinstance(lt, list) else lt!r} entries, "
                              f"num_hidden_layers={L}")
        for i, t in enumerate(lt):
            if t not in LAYER_TYPES:
                raise ConfigError(f"config field layer_types[{i}]={t!r}: expected one of {LAYER_TYPES}")
        layer_types = tuple(lt)
    else:
        interval = _pos_int(text, "full_attention_interval", default=4)
        layer_types = tuple("full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(L))

    ogt = text.get("output_gate_type", raw.get("output_gate_type"))
    if ogt in (None, "swish", "silu"):
        ogt = "silu"
    elif ogt != "sigmoid":
        raise ConfigError(f"config field output_gate_type={ogt!r}: expected 'swish'/'silu' or 'sigmoid'")

    # tying is a property of the whole model: the top-level flag wins in composite configs
    tie = raw.get("tie_word_embeddings", text.get("tie_word_embeddings", False)) if nested \
        else text.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise ConfigError(f"config field tie_word_embeddings={tie!r}: expected true or false")

    qblock, qname = None, None
    for name in ("quantization", "quantization_config"):
        for d in (raw, text) if nested else (raw,):
            if d.get(name) is not None:
                qblock, qname = d[name], name
                break
        if qblock is not None:
            break
    quant = _parse_quant(qblock, qname) if qblock is not None else None

    if gen is not None and gen.get("eos_token_id") is not None:
        eos = _eos_list(gen["eos_token_id"], "generation_config.json eos_token_id")
    elif isinstance(raw.get("generation_config"), dict) and raw["generation_config"].get("eos_token_id") is not None:
        eos = _eos_list(raw["generation_config"]["eos_token_id"], "config field generation_config.eos_token_id")
    else:
        v = text.get("eos_token_id", raw.get("eos_token_id"))
        eos = _eos_list(v, "config field eos_token_id")

    return ModelConfig(
        hidden_size=H, num_hidden_layers=L, layer_types=layer_types, num_attention_heads=nH,
        num_key_value_heads=nKV, head_dim=hd, linear_num_key_heads=Hk, linear_num_value_heads=Hv,
        linear_key_head_dim=Dk, linear_value_head_dim=Dv, linear_conv_kernel_dim=K, intermediate_size=inter,
        rms_norm_eps=eps, rope_theta=theta, partial_rotary_factor=prf, vocab_size=V, tie_word_embeddings=tie,
        output_gate_type=ogt, max_position_embeddings=max_pos, quantization=quant, eos_token_ids=eos,
    )
