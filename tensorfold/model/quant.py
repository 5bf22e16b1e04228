"""MLX affine quantization in numpy: pack / unpack / quantize / dequantize, and the `tensorfold quantize` command.

Format (see docs qwen35.md §4): a weight ``W [out, in]`` quantized with ``bits`` b and ``group_size`` g is stored as
``packed uint32 [out, in*b/32]`` + ``scales, biases [out, in/g]``; element ``j`` of a row is code
``q = bits [j*b, (j+1)*b)`` of the row read as one little-endian, LSB-first bit stream (so 3/5/6-bit codes cross
byte and word boundaries), and ``w = scale * q + bias``.

The quantizer follows MLX's CPU kernel (ml-explore/mlx ``mlx/backend/cpu/quantized.cpp``, ``quantize<T, U>``), read
for this module. In our words, per group and all in float32:
  1. ``w_min``, ``w_max`` of the group (elements widened to float32);
  2. ``scale = max((w_max - w_min) / (2^b - 1), 1e-7)``;
  3. the "edge" is ``w_min`` when ``|w_min| > |w_max|`` (scale kept positive), otherwise ``w_max`` with the scale negated;
  4. ``q0 = rint(edge / scale)`` (round half to even); if ``q0 != 0`` then ``scale = edge / q0`` and ``bias = edge``,
     else ``bias = 0`` (scale unchanged);
  5. codes ``rint((w - bias) / scale)`` clipped to ``[0, 2^b - 1]`` -- computed with the *float32* scale and bias;
  6. only then are scale and bias rounded to the output dtype (bf16 here).
So 0.0 (code ``-q0``) is representable exactly in that float32 arithmetic (to within the final rounding of the
scale once stored), and about half of the scales are negative. Note the error bound this implies: ``|w - ŵ| <= |s|/2``
for every element whose ideal code lies in range, but step 4 can shrink ``|s|`` so that the far end of a group (the
side opposite the edge) lands up to one step past the last code; it is clipped, with an error below ``|s|``.
``mx.quantize`` (mlx 0.32.4 CPU wheel) and this module agree bit for bit on codes, scales and biases
(tests/model/test_quant.py).

The command ``quantize_cmd`` (``tensorfold quantize``) turns an unquantized checkpoint into an MLX affine one; see
``quantize_checkpoint``.
"""

from __future__ import annotations

import math
from fnmatch import fnmatchcase

import click
import numpy as np

from . import bf16

__all__ = ["BITS", "GROUP_SIZES", "pack", "unpack", "quantize", "dequantize", "check_bits_group", "quantize_cmd"]

BITS = (2, 3, 4, 5, 6, 8)
GROUP_SIZES = (32, 64, 128)
_ROW_CHUNK = 256  # rows processed at a time, bounds the temporaries for big tensors


def check_bits_group(bits, group_size=None, what="quantization"):
    if bits not in BITS:
        raise ValueError(f"{what}: bits={bits!r} is not supported (choose from {BITS})")
    if group_size is not None and group_size not in GROUP_SIZES:
        raise ValueError(f"{what}: group_size={group_size!r} is not supported (choose from {GROUP_SIZES})")


def _lanes(bits):
    """Word-level layout of one "super-pack": the fewest codes that fill a whole number of uint32 words.

    Returns (codes, words, lanes) with lanes[j] = (word, shift, spill): code j starts at bit ``shift`` of ``word``
    and, when ``spill`` is set, its top bits continue at bit 0 of ``word + 1``.
    """
    span = math.lcm(bits, 32)
    lanes = []
    for j in range(span // bits):
        off = j * bits
        lanes.append((off >> 5, off & 31, (off & 31) + bits > 32))
    return span // bits, span // 32, lanes


def pack(codes, bits) -> np.ndarray:
    """Pack unsigned codes ``[out, in]`` (each < 2**bits) into ``uint32 [out, in*bits/32]``, LSB-first bit stream."""
    check_bits_group(bits, what="pack")
    c = np.asarray(codes)
    if c.ndim != 2:
        raise ValueError(f"pack: codes must be 2-D [out, in], got shape {c.shape}")
    out_f, in_f = c.shape
    per, words, lanes = _lanes(bits)
    if in_f % per:
        raise ValueError(f"pack: in_features={in_f} is not a multiple of {per} ({bits}-bit codes fill whole "
                         f"uint32 words every {per} codes)")
    if c.size and (c.min() < 0 or c.max() >= (1 << bits)):
        raise ValueError(f"pack: codes must lie in [0, {(1 << bits) - 1}] for bits={bits}, "
                         f"got range [{c.min()}, {c.max()}]")
    res = np.zeros((out_f, in_f * bits // 32), dtype=np.uint32)
    for r0 in range(0, out_f, _ROW_CHUNK):
        _pack_into(res[r0:r0 + _ROW_CHUNK], c[r0:r0 + _ROW_CHUNK], bits)
    return res


def _pack_into(out, codes, bits):
    """out uint32 [rows, in*bits/32] (zeroed) |= packed codes [rows, in] (already range-checked)."""
    per, words, lanes = _lanes(bits)
    rows, in_f = codes.shape
    blk = codes.reshape(rows, in_f // per, per).astype(np.uint32, copy=False)
    o = out.reshape(rows, in_f // per, words)
    for j, (w, sh, spill) in enumerate(lanes):
        cj = blk[:, :, j]
        o[:, :, w] |= cj << np.uint32(sh)
        if spill:
            o[:, :, w + 1] |= cj >> np.uint32(32 - sh)


def _check_packed(p, bits, in_features, what):
    if p.dtype != np.uint32:
        raise ValueError(f"{what}: packed must be uint32, got {p.dtype}")
    if p.ndim != 2:
        raise ValueError(f"{what}: packed must be 2-D, got shape {p.shape}")
    if (in_features * bits) % 32 or p.shape[1] != in_features * bits // 32:
        raise ValueError(f"{what}: packed width {p.shape[1]} does not hold {in_features} codes of {bits} bits "
                         f"(expected {in_features * bits / 32:g} words)")


def _unpack_into(out, words_blk, bits, lanes, dtype):
    """out [rows, packs, per] <- codes of words_blk [rows, packs, words], converted to dtype."""
    mask = np.uint32((1 << bits) - 1)
    for j, (w, sh, spill) in enumerate(lanes):
        q = words_blk[:, :, w] >> np.uint32(sh)
        if spill:
            q |= words_blk[:, :, w + 1] << np.uint32(32 - sh)
        if sh + bits < 32 or spill:
            q &= mask
        out[:, :, j] = q if dtype == np.uint32 else q.astype(dtype)


def unpack(packed, bits, in_features) -> np.ndarray:
    """Inverse of ``pack``: ``uint32 [out, in*bits/32]`` -> ``uint32 codes [out, in_features]``."""
    check_bits_group(bits, what="unpack")
    p = np.asarray(packed)
    _check_packed(p, bits, in_features, "unpack")
    per, words, lanes = _lanes(bits)
    out_f = p.shape[0]
    res = np.empty((out_f, in_features // per, per), dtype=np.uint32)
    for r0 in range(0, out_f, _ROW_CHUNK):
        blk = p[r0:r0 + _ROW_CHUNK].reshape(-1, in_features // per, words)
        _unpack_into(res[r0:r0 + _ROW_CHUNK], blk, bits, lanes, np.uint32)
    return res.reshape(out_f, in_features)


def _as_f32(a, what) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype == np.uint16:
        return bf16.to_f32(a)
    if a.dtype in (np.float16, np.float32, np.float64):
        return a.astype(np.float32, copy=False)
    raise ValueError(f"{what}: expected bf16 bits (uint16), float16 or float32, got dtype {a.dtype}")


_SCALE_DTYPES = {"bf16": np.uint16, "f16": np.float16, "f32": np.float32}


def quantize(w, bits=4, group_size=64, scale_dtype="bf16"):
    """Quantize ``w [out, in]`` with MLX's affine rule.

    Returns ``(packed uint32 [out, in*bits/32], scales [out, in/g], biases [out, in/g])``; scales and biases are bf16
    bits (uint16) by default, or float16 / float32 with ``scale_dtype="f16"`` / ``"f32"`` (MLX gives them the input's
    dtype). ``w`` may be float32/float16/float64 or bf16 bits (uint16); the arithmetic is float32 as in MLX.
    """
    check_bits_group(bits, group_size, what="quantize")
    if scale_dtype not in _SCALE_DTYPES:
        raise ValueError(f"quantize: scale_dtype={scale_dtype!r} is not one of {sorted(_SCALE_DTYPES)}")
    cast = bf16.from_f32 if scale_dtype == "bf16" else (lambda a: a.astype(_SCALE_DTYPES[scale_dtype]))
    w = np.asarray(w)
    if w.ndim != 2:
        raise ValueError(f"quantize: weight must be 2-D [out, in], got shape {w.shape}")
    _as_f32(w[:0], "quantize")  # dtype check; rows are widened to float32 a block at a time below
    out_f, in_f = w.shape
    if in_f % group_size:
        raise ValueError(f"quantize: in_features={in_f} is not a multiple of group_size={group_size}")
    n_bins = np.float32((1 << bits) - 1)
    eps = np.float32(1e-7)
    ng = in_f // group_size
    packed = np.zeros((out_f, in_f * bits // 32), dtype=np.uint32)
    scales = np.empty((out_f, ng), dtype=_SCALE_DTYPES[scale_dtype])
    biases = np.empty((out_f, ng), dtype=_SCALE_DTYPES[scale_dtype])
    with np.errstate(invalid="ignore", divide="ignore"):
        for r0 in range(0, out_f, _ROW_CHUNK):
            rows = w[r0:r0 + _ROW_CHUNK]
            g = bf16.to_f32(rows) if rows.dtype == np.uint16 else rows.astype(np.float32, copy=True)
            g = g.reshape(-1, ng, group_size)                      # a private float32 copy, modified in place
            w_max = g.max(axis=-1)
            w_min = g.min(axis=-1)
            use_min = np.abs(w_min) > np.abs(w_max)
            scale = np.maximum((w_max - w_min) / n_bins, eps)
            scale = np.where(use_min, scale, -scale).astype(np.float32)
            edge = np.where(use_min, w_min, w_max).astype(np.float32)
            q0 = np.rint(edge / scale)
            nz = q0 != 0
            scale = np.where(nz, edge / np.where(nz, q0, np.float32(1)), scale).astype(np.float32)
            bias = np.where(nz, edge, np.float32(0)).astype(np.float32)
            g -= bias[..., None]
            g /= scale[..., None]
            np.rint(g, out=g)
            np.clip(g, 0, n_bins, out=g)
            _pack_into(packed[r0:r0 + _ROW_CHUNK], g.reshape(-1, in_f).astype(np.uint32), bits)
            scales[r0:r0 + _ROW_CHUNK] = cast(scale)
            biases[r0:r0 + _ROW_CHUNK] = cast(bias)
    return packed, scales, biases


def dequantize(packed, scales, biases, bits, group_size) -> np.ndarray:
    """``scale * q + bias`` in float32 (two float32 roundings), shape ``[out, in]`` with ``in = cols(scales) * g``."""
    check_bits_group(bits, group_size, what="dequantize")
    s = _as_f32(scales, "dequantize scales")
    b = _as_f32(biases, "dequantize biases")
    p = np.asarray(packed)
    if p.dtype != np.uint32:
        raise ValueError(f"dequantize: packed must be uint32, got {p.dtype}")
    if s.shape != b.shape or s.ndim != 2 or p.ndim != 2 or s.shape[0] != p.shape[0]:
        raise ValueError(f"dequantize: shapes disagree: packed {p.shape}, scales {s.shape}, biases {b.shape}")
    out_f, ng = s.shape
    in_f = ng * group_size
    if p.shape[1] * 32 != in_f * bits:
        raise ValueError(f"dequantize: packed width {p.shape[1]} words does not match {in_f} inputs at {bits} bits "
                         f"(expected {in_f * bits // 32})")
    per, words, lanes = _lanes(bits)
    res = np.empty((out_f, in_f // per, per), dtype=np.float32)
    for r0 in range(0, out_f, _ROW_CHUNK):
        blk = p[r0:r0 + _ROW_CHUNK].reshape(-1, in_f // per, words)
        out = res[r0:r0 + _ROW_CHUNK]
        _unpack_into(out, blk, bits, lanes, np.float32)
        v = out.reshape(out.shape[0], ng, group_size)  # a group is a whole number of super-packs
        v *= s[r0:r0 + _ROW_CHUNK, :, None]
        v += b[r0:r0 + _ROW_CHUNK, :, None]
    res = res.reshape(out_f, in_f)
    return res


# ---------------------------------------------------------------------------------------------------------------
# the `tensorfold quantize` command: an unquantized checkpoint -> an MLX affine checkpoint

_COPY_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "chat_template.json",
               "generation_config.json", "vocab.json", "merges.txt", "special_tokens_map.json", "added_tokens.json")
_MIXED_HELP = """Per-module widths: comma list of PATTERN=BITS[:GROUP] or PATTERN=bf16, matched with fnmatch against
internal names (embed_tokens, lm_head, layers.N.mlp.down_proj, layers.N.self_attn.q_proj,
layers.N.linear_attn.in_proj_qkv, ...). The first matching pattern wins; GROUP defaults to --group-size;
bf16 keeps the module unquantized. Example: --mixed '*.down_proj=6,lm_head=8:64,embed_tokens=8:64'."""


def parse_mixed(spec: str | None, default_group: int) -> list[tuple[str, tuple[int, int] | None]]:
    """Parse a --mixed SPEC into [(pattern, (bits, group) | None)]; ValueError naming the bad entry."""
    rules = []
    for raw in (spec or "").split(","):
        item = raw.strip()
        if not item:
            continue
        pat, sep, val = item.partition("=")
        pat, val = pat.strip(), val.strip()
        if not sep or not pat or not val:
            raise ValueError(f"--mixed entry {item!r}: expected PATTERN=BITS[:GROUP] or PATTERN=bf16")
        if val.lower() in ("bf16", "none", "false"):
            rules.append((pat, None))
            continue
        b, _, g = val.partition(":")
        try:
            bits = int(b)
            group = int(g) if g else default_group
        except ValueError:
            raise ValueError(f"--mixed entry {item!r}: {val!r} is not BITS[:GROUP]") from None
        check_bits_group(bits, group, what=f"--mixed entry {item!r}")
        rules.append((pat, (bits, group)))
    return rules


def _mlx_name(internal: str) -> str:
    return "language_model." + internal if internal.startswith("lm_head") else "language_model.model." + internal


def _first_rule(name: str, rules):
    """(matched, value) of the first --mixed rule whose pattern matches ``name``."""
    for pat, val in rules or ():
        if fnmatchcase(name, pat):
            return True, val
    return False, None


def plan_quantization(ck, bits: int, group_size: int, mixed=None) -> dict[str, tuple[int, int] | None]:
    """Internal module -> (bits, group) or None (kept unquantized) for every matrix of checkpoint ``ck``.

    MLX's rule: a module is quantized unless its input width is not a multiple of the group size.
    """
    from .weights import DenseWeight
    plan = {}
    for name, w in ck.tensors.items():
        if not isinstance(w, DenseWeight):
            continue
        matched, val = _first_rule(name, mixed)
        choice = val if matched else (bits, group_size)
        if choice is not None and w.shape[1] % choice[1]:
            choice = None
        plan[name] = choice
    return plan


def quantize_checkpoint(src, dst, bits=4, group_size=64, mixed: str | None = None, shard_bytes: int = 5 * 10**9,
                        log=None) -> dict:
    """Write an MLX affine checkpoint of the unquantized checkpoint ``src`` into the new directory ``dst``.

    Returns the ``quantization`` block written to config.json. See ``quantize_cmd`` for the layout written.
    """
    import json
    import shutil
    from pathlib import Path

    from .checkpoint import load_checkpoint
    from .errors import CheckpointError
    from .safetensors_io import save_file
    from .weights import AffineWeight

    log = log or (lambda msg: None)
    check_bits_group(bits, group_size, what="quantize")
    rules = parse_mixed(mixed, group_size)
    src, dst = Path(src), Path(dst)
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise CheckpointError(f"{dst}: destination exists and is not an empty directory")
    ck = load_checkpoint(src)
    already = [n for n, w in ck.tensors.items() if isinstance(w, AffineWeight)]
    if already:
        raise CheckpointError(f"{src}: already quantized ({len(already)} modules, e.g. {already[0]!r}); "
                              f"quantize needs a bf16/f16/f32 checkpoint")
    plan = plan_quantization(ck, bits, group_size, rules)
    for pat, _ in rules:
        if not any(fnmatchcase(name, pat) for name in plan):
            examples = "'layers.0.mlp.down_proj', 'embed_tokens'" + ("" if ck.config.tie_word_embeddings
                                                                      else ", 'lm_head'")
            log(f"warning: --mixed pattern {pat!r} matches no module of {src} (names look like {examples})")
    sdt = "f16" if ck.dtype == "f16" else "bf16"

    def to_half(a):  # vectors in the model dtype, as mlx-lm casts them
        return np.asarray(a, dtype=np.float16) if sdt == "f16" else bf16.from_f32(a)
    sbytes = 2

    # output size per tensor, to cut shards before producing any data
    sizes: dict[str, int] = {}
    for name, w in ck.tensors.items():
        if name in plan:
            out_f, in_f = w.shape
            bg = plan[name]
            sizes[name] = w.data.nbytes if bg is None else out_f * in_f * bg[0] // 8 + 2 * out_f * (in_f // bg[1]) * sbytes
        else:
            sizes[name] = w.size * (4 if name.endswith("A_log") else 2)
    order = list(ck.tensors)
    shards: list[list[str]] = [[]]
    acc = 0
    for name in order:
        if shards[-1] and acc + sizes[name] > shard_bytes:
            shards.append([])
            acc = 0
        shards[-1].append(name)
        acc += sizes[name]

    def produce(name):
        w = ck.tensors[name]
        base = _mlx_name(name)
        if name in plan:
            bg = plan[name]
            if bg is None:
                return {base + ".weight": w.data}
            p, s, b = quantize(w.data, bg[0], bg[1], scale_dtype=sdt)
            return {base + ".weight": p, base + ".scales": s, base + ".biases": b}
        if name.endswith("conv1d"):
            return {base + ".weight": to_half(w)[:, :, None]}  # MLX layout [C, K, 1]
        if name.endswith("A_log"):
            # mlx-lm keeps A_log's source dtype (F32 in Qwen3.5, BF16 in Qwen3.6); everything else goes to bf16
            src_dt = ck.stored_dtypes.get(name, "F32")
            return {base: np.asarray(w, dtype=np.float32) if src_dt == "F32" else to_half(w)}
        if name.endswith("dt_bias"):
            return {base: to_half(w)}
        # norms: the loader returned multipliers (1+w for HF sources); MLX stores them baked, in the model dtype
        return {base + ".weight": to_half(w)}

    dst.mkdir(parents=True, exist_ok=True)
    n = len(shards)
    weight_map, total = {}, 0
    for k, names in enumerate(shards):
        fname = "model.safetensors" if n == 1 else f"model-{k + 1:05d}-of-{n:05d}.safetensors"
        part = {}
        for name in names:
            part.update(produce(name))
        save_file(dst / fname, part, metadata={"format": "mlx"})
        total += sum(a.nbytes for a in part.values())
        weight_map.update({t: fname for t in part})
        log(f"wrote {fname} ({len(part)} tensors)")
        del part
    if n > 1:
        (dst / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, indent=2))

    qblock: dict = {"group_size": group_size, "bits": bits, "mode": "affine"}
    for name, bg in plan.items():
        if bg is not None and bg != (bits, group_size):
            qblock[_mlx_name(name)] = {"group_size": bg[1], "bits": bg[0], "mode": "affine"}
        elif bg is None and _first_rule(name, rules) == (True, None):
            qblock[_mlx_name(name)] = False  # explicitly kept unquantized by --mixed
    with open(src / "config.json", encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["quantization"] = qblock
    cfg["quantization_config"] = json.loads(json.dumps(qblock))
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    for fn in _COPY_FILES:
        if (src / fn).is_file():
            shutil.copy2(src / fn, dst / fn)
    return qblock


@click.command("quantize", help=(
    "Quantize the bf16 checkpoint SRC (local directory or Hub id) into an MLX affine checkpoint in DST.\n\n"
    "DST gets MLX tensor names (language_model.model.*, language_model.lm_head), conv1d in MLX layout "
    "[C, K, 1], zero-centred norms baked as bf16(1+w), every linear and the embedding / head quantized "
    "(a module whose input width is not a multiple of the group stays bf16), conv, norms, A_log and dt_bias "
    "kept; config.json gets the MLX `quantization` block and its `quantization_config` copy; tokenizer files, "
    "chat template and generation_config.json are copied. Files over the shard size are split with an index."))
@click.argument("src")
@click.argument("dst", type=click.Path(file_okay=False))
@click.option("--bits", type=click.Choice([str(b) for b in BITS]), default="4", show_default=True,
              help="Default bits per weight.")
@click.option("--group-size", type=click.Choice([str(g) for g in GROUP_SIZES]), default="64",
              show_default=True, help="Default group size (weights sharing one scale and bias).")
@click.option("--mixed", "mixed", default=None, metavar="SPEC", help=_MIXED_HELP)
@click.option("--shard-gb", type=float, default=5.0, show_default=True, help="Largest weight file, in GB.")
def quantize_cmd(src, dst, bits, group_size, mixed, shard_gb):
    from .errors import CheckpointError, ConfigError
    from .hub import resolve_model
    try:
        parse_mixed(mixed, int(group_size))
        path = resolve_model(src)
        q = quantize_checkpoint(path, dst, int(bits), int(group_size), mixed, int(shard_gb * 1e9),
                                log=click.echo)
    except (CheckpointError, ConfigError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    extra = len(q) - 3
    click.echo(f"wrote {dst}: {bits}-bit g{group_size}" + (f", {extra} module overrides" if extra else ""))

