"""The `tensorfold info MODEL` command: what a checkpoint is, read from its config and safetensors headers.

Prints the geometry (layers split into linear / full attention, hidden size, attention and GDN heads,
intermediate size, vocabulary, tying), the storage format (hf / mlx) and dtype, the quantization widths
summarised per (bits, group), and the weight files with their total size. MODEL is a local directory or a
Hugging Face id (resolved by ``tensorfold.model.hub.resolve_model``). Loading maps the files; nothing is read
beyond the headers and the small vectors.
"""

from __future__ import annotations

import click

from .errors import CheckpointError, ConfigError

__all__ = ["info_cmd", "describe", "summarise_widths"]


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000.0
    return f"{n} B"  # unreachable


def summarise_widths(summary: dict, dense_dtype: str, list_up_to: int = 3) -> str:
    """'4-bit g64: 186 modules; 8-bit g64: embed_tokens' from Checkpoint.quant_summary()."""
    parts = []
    for key, names in sorted(summary.items(), key=lambda kv: (-len(kv[1]), str(kv[0]))):
        label = f"{key[0]}-bit g{key[1]}" if key is not None else (dense_dtype or "unquantized")
        what = ", ".join(names) if len(names) <= list_up_to else f"{len(names)} modules"
        parts.append(f"{label}: {what}")
    return "; ".join(parts)


def describe(ck) -> list[tuple[str, str]]:
    """(label, text) lines describing a loaded Checkpoint."""
    c = ck.config
    nl, nf = len(c.linear_attention_layers), len(c.full_attention_layers)
    q = ck.quant_summary()
    quantized = any(k is not None for k in q)
    rows = [
        ("model", str(ck.path)),
        ("format", f"{ck.format} ({ck.naming} names), {'MLX affine quantized, ' if quantized else ''}"
                   f"{ck.dtype or '?'} {'scales' if quantized else 'weights'}"),
        ("layers", f"{c.num_hidden_layers} ({nl} linear attention + {nf} full attention)"),
        ("hidden", f"{c.hidden_size}"),
        ("attention", f"{c.num_attention_heads} heads / {c.num_key_value_heads} kv heads x {c.head_dim}, "
                      f"rotary {c.rotary_dim} dims, theta {c.rope_theta:g}"),
        ("GDN", f"{c.linear_num_key_heads} key heads x {c.linear_key_head_dim}, {c.linear_num_value_heads} value "
                f"heads x {c.linear_value_head_dim}, conv {c.linear_conv_kernel_dim}"),
        ("mlp", f"intermediate {c.intermediate_size}"),
        ("vocab", f"{c.vocab_size}, embeddings {'tied' if c.tie_word_embeddings else 'untied'}"),
        ("quantization", summarise_widths(q, ck.dtype)),
        ("files", f"{len(ck.files)} safetensors, {_fmt_bytes(ck.nbytes)}"),
        ("stop ids", ", ".join(map(str, c.eos_token_ids)) or "(none)"),
    ]
    return rows


@click.command("info")
@click.argument("model")
@click.option("--offline", is_flag=True, help="Never download; use a local directory or the local Hub cache.")
def info_cmd(model, offline):
    """Describe MODEL (a local checkpoint directory or a Hugging Face id): geometry, format, quantization, files."""
    from .checkpoint import load_checkpoint
    from .hub import resolve_model
    try:
        path = resolve_model(model, download=not offline)
        ck = load_checkpoint(path)
    except (CheckpointError, ConfigError) as e:
        raise click.ClickException(str(e)) from None
    rows = describe(ck)
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        click.echo(f"{k + ':':<{width + 1}} {v}")
