"""Train tensorfold's embedded default model: a small Qwen3.5-architecture code model on the Python stdlib.

The model is a real Qwen3.5 hybrid (Gated DeltaNet : gated full attention = 3 : 1, Hv > Hk, partial rotary 0.25,
tied embeddings) at ~25M parameters, trained for a few minutes with transformers' ``Qwen3_5ForCausalLM`` on the
``*.py`` files of the Python standard library of the machine it runs on. A byte-level BPE tokenizer is trained
first on the same training files.

Data split (by a hash of each file's path relative to the stdlib root, so it does not depend on file order or on
which other files exist): ``sha256(relpath) % 100 in {0, 1}`` -> held-out (2%, evaluated only at the end),
``== 2`` -> validation (1%, periodic evals and best-checkpoint choice), the rest -> training. Files that are not
UTF-8 are skipped (counted in the report). Training documents are the files themselves separated by
``<|endoftext|>`` plus a share of chat-formatted continuation samples (a user turn holding some lines of a training
file, an assistant turn holding the lines that follow), so that the model also answers inside the chat template.

Training: random 512-token windows of the concatenated training stream, AdamW, bf16 autocast, linear warm-up then
cosine decay over a *wall-clock* budget (the learning rate is a function of elapsed time / budget, so the run ends
on time whatever the throughput). The gated delta rule runs through a chunked torch implementation defined here
(triangular solve in place of transformers' 63-step substitution loop in older versions); it is checked against
the installed transformers' own torch implementation before it is patched in, and left out if they disagree.

Outputs in ``--out``: ``hf/`` (``save_pretrained`` text-only bf16 checkpoint + tokenizer files), ``heldout.json``
(held-out file texts), ``unigram_train_counts.json`` (token counts of the training stream), ``report.json`` and
``report.md`` (settings, corpus size and file-list hashes, loss curve, wall time, held-out loss).

    python benchmarks/train_default_model.py --smoke --out /tmp/smoke       # CPU, tiny model, 20 steps
    python benchmarks/train_default_model.py --out $OUT/run --train-seconds 225   # on the GPU
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import random
import sys
import sysconfig
import time
from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
# Qwen's pre-tokenizer split pattern (single digits), applied before the byte-level mapping.
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
SYSTEM_PROMPT = "You are a Python coding assistant. Continue the code."


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------------------------------- corpus


def split_of(relpath: str) -> str:
    h = int(hashlib.sha256(relpath.encode()).hexdigest()[:8], 16) % 100
    return "heldout" if h in (0, 1) else "valid" if h == 2 else "train"


def collect_corpus(root: str, max_files: int | None = None, extra_roots: tuple[str, ...] = ()) -> dict:
    """*.py files of the stdlib (site-/dist-packages excluded) and of each extra root. Keys: the path relative to
    the stdlib root, or ``<extra root's name>/<relative path>`` for extra roots (the split hashes these keys)."""
    paths: dict[str, Path] = {}
    for r in (root, *extra_roots):
        rp = Path(r)
        prefix = "" if r == root else rp.name + "/"
        for p in rp.rglob("*.py"):
            rel = p.relative_to(rp)
            if r == root and any(x in rel.parts for x in ("site-packages", "dist-packages")):
                continue
            if p.is_file():
                paths.setdefault(prefix + rel.as_posix(), p)
    rels = sorted(paths)
    if max_files:
        # a deterministic thin slice (every k-th file), so smoke runs still see all three splits sometimes
        k = max(1, len(rels) // max_files)
        rels = rels[::k][:max_files]
    out = {"train": {}, "valid": {}, "heldout": {}}
    skipped = []
    for rel in rels:
        try:
            text = paths[rel].read_bytes().decode("utf-8")
        except (UnicodeDecodeError, OSError):
            skipped.append(rel)
            continue
        if not text.strip():
            continue
        out[split_of(rel)][rel] = text
    if max_files and not out["heldout"]:  # smoke: make sure every split is non-empty
        rel = next(iter(out["train"]))
        out["heldout"][rel] = out["train"].pop(rel)
    if max_files and not out["valid"]:
        rel = next(iter(out["train"]))
        out["valid"][rel] = out["train"].pop(rel)
    info = {"stdlib_root": root, "extra_roots": list(extra_roots), "python": platform.python_version(),
            "skipped_non_utf8": len(skipped)}
    for name, files in out.items():
        listing = "\n".join(files)
        info[name] = {
            "files": len(files),
            "bytes": sum(len(t.encode()) for t in files.values()),
            "file_list_sha256": hashlib.sha256(listing.encode()).hexdigest(),
        }
    return {"files": out, "info": info}


def chat_samples(files: dict[str, str], per_file: int, rng: random.Random) -> list[str]:
    """User turn = 1-8 lines of a training file (preferably starting at a def/class), assistant = the next lines."""
    samples = []
    for text in files.values():
        lines = text.splitlines()
        if len(lines) < 12:
            continue
        starts = [i for i, ln in enumerate(lines[:-10]) if ln.lstrip().startswith(("def ", "class ", "async def "))]
        for _ in range(per_file):
            s = rng.choice(starts) if starts and rng.random() < 0.8 else rng.randrange(0, len(lines) - 10)
            k = rng.randint(1, 8)
            m = rng.randint(4, 30)
            user = "\n".join(lines[s : s + k]).strip("\n")
            asst = "\n".join(lines[s + k : s + k + m]).rstrip()
            if not user.strip() or not asst.strip():
                continue
            sys_turn = f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n" if rng.random() < 0.25 else ""
            samples.append(
                f"{sys_turn}<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n{asst}<|im_end|>\n"
            )
    return samples


# -------------------------------------------------------------------------------------------------- tokenizer


def train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIALS),
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    tok.add_special_tokens(SPECIALS)  # appended after the BPE vocabulary, like Qwen's
    return tok


def write_tokenizer_files(tok, out: Path, eos_ids: list[int], eot: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    added = {
        str(tok.token_to_id(s)): {
            "content": s, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
            "special": True,
        }
        for s in SPECIALS
    }
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "errors": "replace",
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE + "\n")
    gen = {
        "bos_token_id": eot,
        "pad_token_id": eot,
        "eos_token_id": eos_ids,
        "do_sample": True,
        "temperature": 0.7,
        "top_k": 20,
        "top_p": 0.95,
    }
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")


# ------------------------------------------------------------------------------------------ gated delta rule


def make_chunk_gdr():
    import torch
    import torch.nn.functional as F

    def chunk_gated_delta_rule(
        query, key, value, g, beta, chunk_size=64, initial_state=None, output_final_state=False,
        use_qk_l2norm_in_kernel=False, **kwargs,
    ):
        """Chunked gated delta rule (same math and signature as transformers' torch fallback); [B, T, H, D] in."""
        if kwargs.get("cu_seqlens") is not None:
            raise ValueError("packed sequences are not supported")
        dtype0 = query.dtype
        B, T, Hk, Dk = key.shape
        Hv, Dv = value.shape[-2:]
        if Hk != Hv:
            query = query.repeat_interleave(Hv // Hk, dim=2)
            key = key.repeat_interleave(Hv // Hk, dim=2)
        q, k, v, b, gg = (x.transpose(1, 2).float().contiguous() for x in (query, key, value, beta, g))
        if use_qk_l2norm_in_kernel:
            q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6)
            k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        q = q * Dk**-0.5
        C = chunk_size
        pad = (C - T % C) % C
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        b, gg = (F.pad(x, (0, pad)) for x in (b, gg))
        N = (T + pad) // C
        q, k, v = (x.reshape(B, Hv, N, C, -1) for x in (q, k, v))
        b = b.reshape(B, Hv, N, C)
        cg = gg.reshape(B, Hv, N, C).cumsum(-1)  # cumulative log decay inside each chunk
        mask = torch.ones(C, C, dtype=torch.bool, device=q.device).triu(1)
        dec = (cg.unsqueeze(-1) - cg.unsqueeze(-2)).masked_fill(mask, float("-inf")).exp()  # [.., i, j] j<=i
        kb = k * b.unsqueeze(-1)
        # UT system I + strictly_lower(beta K K^T * decay): solve_triangular reads only the strictly-lower part
        # (unitriangular=True takes the diagonal as 1; upper=False ignores the upper triangle)
        Lsys = (kb @ k.transpose(-1, -2)) * dec
        u = torch.linalg.solve_triangular(Lsys, v * b.unsqueeze(-1), upper=False, unitriangular=True)
        w = torch.linalg.solve_triangular(Lsys, kb * cg.exp().unsqueeze(-1), upper=False, unitriangular=True)
        attn = (q @ k.transpose(-1, -2)) * dec
        qd = q * cg.exp().unsqueeze(-1)
        kd = k * (cg[..., -1:] - cg).exp().unsqueeze(-1)
        cdec = cg[..., -1].exp()[..., None, None]
        S = (
            torch.zeros(B, Hv, Dk, Dv, device=q.device, dtype=torch.float32)
            if initial_state is None
            else initial_state.float()
        )
        outs = []
        for i in range(N):
            vn = u[:, :, i] - w[:, :, i] @ S
            outs.append(qd[:, :, i] @ S + attn[:, :, i] @ vn)
            S = S * cdec[:, :, i] + kd[:, :, i].transpose(-1, -2) @ vn
        o = torch.stack(outs, 2).reshape(B, Hv, N * C, Dv)[:, :, :T]
        return o.transpose(1, 2).contiguous().to(dtype0), (S if output_final_state else None)

    return chunk_gated_delta_rule


def unwrap_torch_impl(fn):
    """transformers >= 5.2x wraps its torch fallback; find the innermost function whose module is transformers."""
    seen = 0
    while hasattr(fn, "__wrapped__") and seen < 5:
        fn = fn.__wrapped__
        seen += 1
    return fn


def check_and_patch_gdr(device: str) -> dict:
    """Compare our chunked GDR with the installed transformers' torch implementation; patch it in if they agree."""
    import torch
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq

    ours = make_chunk_gdr()
    ref = unwrap_torch_impl(mq.torch_chunk_gated_delta_rule)
    info = {"transformers_impl": f"{getattr(ref, '__module__', '?')}.{getattr(ref, '__name__', '?')}"}
    # which implementation would transformers itself use? (fla when importable, else torch)
    try:
        import importlib.util

        info["fla_importable"] = importlib.util.find_spec("fla") is not None
    except Exception:  # noqa: BLE001
        info["fla_importable"] = False
    wrapped = mq.torch_chunk_gated_delta_rule
    cells = [c.cell_contents for c in (getattr(wrapped, "__closure__", None) or []) if callable(c.cell_contents)]
    info["transformers_dispatch_targets"] = sorted({f"{getattr(c, '__module__', '?')}" for c in cells})
    gen = torch.Generator(device="cpu").manual_seed(0)
    B, T, Hk, Hv, D = 2, 150, 4, 4, 32  # equal heads: older transformers expand k/q heads in the layer
    mk = lambda *s: torch.randn(*s, generator=gen).to(device)  # noqa: E731
    q, k, v = mk(B, T, Hk, D), mk(B, T, Hk, D), mk(B, T, Hv, D)
    beta = torch.sigmoid(mk(B, T, Hv))
    g = -torch.nn.functional.softplus(mk(B, T, Hv))
    s0 = mk(B, Hv, D, D) * 0.1
    with torch.no_grad():
        o1, s1 = ours(q, k, v, g, beta, initial_state=s0, output_final_state=True, use_qk_l2norm_in_kernel=True)
        o2, s2 = ref(q, k, v, g=g, beta=beta, initial_state=s0, output_final_state=True, use_qk_l2norm_in_kernel=True)
    err = max((o1 - o2).abs().max().item(), (s1 - s2).abs().max().item())
    scale = max(o2.abs().max().item(), s2.abs().max().item())
    info["max_abs_diff_vs_transformers"] = err
    info["ref_max_abs"] = scale
    ok = err <= 1e-4 * max(1.0, scale)
    info["patched"] = ok
    if ok:
        calls = {"n": 0}

        def counted(*a, **kw):
            calls["n"] += 1
            return ours(*a, **kw)

        mq.torch_chunk_gated_delta_rule = counted
        info["_calls"] = calls
    return info


# ----------------------------------------------------------------------------------------------------- model


def build_config(a, vocab_size: int, eot: int):
    from transformers import Qwen3_5TextConfig

    n = a.layers
    layer_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(n)]
    cfg = Qwen3_5TextConfig(
        vocab_size=vocab_size,
        hidden_size=a.hidden,
        intermediate_size=a.intermediate,
        num_hidden_layers=n,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        head_dim=a.head_dim,
        linear_num_key_heads=a.lin_k_heads,
        linear_num_value_heads=a.lin_v_heads,
        linear_key_head_dim=a.lin_head_dim,
        linear_value_head_dim=a.lin_head_dim,
        linear_conv_kernel_dim=4,
        layer_types=layer_types,
        full_attention_interval=4,
        hidden_act="silu",
        rms_norm_eps=1e-6,
        max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
        partial_rotary_factor=0.25,
        tie_word_embeddings=True,
        attention_bias=False,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        initializer_range=0.02,
    )
    cfg.architectures = ["Qwen3_5ForCausalLM"]
    return cfg


def check_dims(cfg) -> None:
    """All linear input dims must be multiples of 64 (quantization groups)."""
    ins = {
        "hidden": cfg.hidden_size,
        "intermediate": cfg.intermediate_size,
        "o_proj in": cfg.num_attention_heads * cfg.head_dim,
        "out_proj in": cfg.linear_num_value_heads * cfg.linear_value_head_dim,
    }
    bad = {k: v for k, v in ins.items() if v % 64}
    if bad:
        raise SystemExit(f"linear input dims not multiples of 64: {bad}")


# ----------------------------------------------------------------------------------------------------- train


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out_default")
    p.add_argument("--smoke", action="store_true", help="tiny model, few files, 20 steps (CPU check)")
    p.add_argument("--stdlib", default=sysconfig.get_paths()["stdlib"])
    p.add_argument("--max-files", type=int, default=None)
    p.add_argument("--extra-root", action="append", default=[],
                   help="another directory of *.py files for the corpus (repeatable), e.g. a site-packages package")
    p.add_argument("--no-keep-best", action="store_true",
                   help="end with the last weights instead of the lowest-validation-loss ones")
    p.add_argument("--vocab", type=int, default=16384)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--intermediate", type=int, default=1024)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--lin-k-heads", type=int, default=4)
    p.add_argument("--lin-v-heads", type=int, default=8)
    p.add_argument("--lin-head-dim", type=int, default=64)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr-frac", type=float, default=0.05)
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--train-seconds", type=float, default=225.0)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--eval-every-s", type=float, default=30.0)
    p.add_argument("--chat-per-file", type=int, default=4)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--no-patch-gdr", action="store_true")
    a = p.parse_args(argv)
    if a.smoke:
        a.max_files = a.max_files or 120
        a.vocab, a.hidden, a.layers, a.intermediate = 1024, 128, 4, 256
        a.heads, a.kv_heads, a.head_dim = 2, 1, 64
        a.lin_k_heads, a.lin_v_heads, a.lin_head_dim = 1, 2, 64
        a.seq, a.batch, a.max_steps, a.warmup_steps = 128, 4, 20, 5
        a.log_every, a.eval_every_s, a.train_seconds = 5, 0.0, 600.0
        a.chat_per_file = 1

    t_start = time.time()
    out = Path(a.out)
    (out / "hf").mkdir(parents=True, exist_ok=True)
    import numpy as np
    import torch

    random.seed(a.seed)
    torch.manual_seed(a.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    import tokenizers
    import transformers

    env = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "device": torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu",
        "cpu_count": os.cpu_count(),
    }
    log(f"env {env}")

    # ---- corpus
    t = time.time()
    corpus = collect_corpus(a.stdlib, a.max_files, tuple(a.extra_root))
    files, cinfo = corpus["files"], corpus["info"]
    log(f"corpus {json.dumps(cinfo)} ({time.time() - t:.1f}s)")
    rng = random.Random(a.seed)
    train_docs = list(files["train"].values())
    chats = chat_samples(files["train"], a.chat_per_file, rng)
    rng.shuffle(chats)
    t_corpus = time.time() - t

    # ---- tokenizer
    t = time.time()
    tok = train_tokenizer(train_docs, a.vocab)
    V = tok.get_vocab_size()
    eot, im_start, im_end = (tok.token_to_id(s) for s in SPECIALS[:3])
    write_tokenizer_files(tok, out / "hf", [im_end, eot], eot)
    t_tok = time.time() - t
    log(f"tokenizer: vocab {V}, eot {eot}, im_end {im_end} ({t_tok:.1f}s)")

    # ---- encode
    t = time.time()

    def encode_docs(texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(e.ids + [eot], dtype=np.int32) for e in tok.encode_batch(texts, add_special_tokens=False)]

    file_docs = encode_docs(train_docs)
    chat_docs = encode_docs(chats)
    # interleave the chat samples between the files deterministically (a few after every file)
    parts, per, ci = [], max(1, len(chat_docs) // max(1, len(file_docs))), 0
    for d in file_docs:
        parts.append(d)
        parts.extend(chat_docs[ci : ci + per])
        ci += per
    parts.extend(chat_docs[ci:])
    train_ids = np.concatenate(parts)
    file_ids = np.concatenate(file_docs)
    valid_ids = np.concatenate(encode_docs(list(files["valid"].values())))
    held_ids = np.concatenate(encode_docs(list(files["heldout"].values())))
    counts = np.bincount(file_ids, minlength=V)
    t_enc = time.time() - t
    bytes_train = cinfo["train"]["bytes"]
    log(
        f"tokens: train {len(train_ids)} (files only {len(file_ids)}, {bytes_train / len(file_ids):.2f} bytes/token),"
        f" valid {len(valid_ids)}, heldout {len(held_ids)} ({t_enc:.1f}s)"
    )
    (out / "unigram_train_counts.json").write_text(json.dumps(counts.tolist()))
    (out / "heldout.json").write_text(json.dumps(files["heldout"]))

    # ---- model
    cfg = build_config(a, V, eot)
    check_dims(cfg)
    gdr_info = {"patched": False}
    if not a.no_patch_gdr:
        try:
            gdr_info = check_and_patch_gdr(device)
        except Exception as exc:  # noqa: BLE001 - an API difference in another transformers version: run unpatched
            gdr_info = {"patched": False, "error": repr(exc)}
    if device == "cuda":  # after the GDR check (which compares in plain fp32)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    log(f"gated delta rule: { {k: v for k, v in gdr_info.items() if not k.startswith('_')} }")
    from transformers import Qwen3_5ForCausalLM

    model = Qwen3_5ForCausalLM(cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    n_emb = model.model.embed_tokens.weight.numel()
    log(f"model: {n_params / 1e6:.2f}M params ({n_emb / 1e6:.2f}M embedding, tied)")
    decay, no_decay = [], []
    for n_, p_ in model.named_parameters():
        (decay if p_.ndim >= 2 and "conv1d" not in n_ else no_decay).append(p_)
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=(device == "cuda"),
    )
    amp = torch.autocast(device_type=device, dtype=torch.bfloat16)
    train_t = torch.from_numpy(train_ids.astype(np.int64)).to(device)
    S = a.seq

    def loss_on(ids_2d):
        with amp:
            h = model.model(input_ids=ids_2d[:, :-1], use_cache=False).last_hidden_state
            logits = model.lm_head(h)
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, V), ids_2d[:, 1:].reshape(-1))

    def windows(ids: np.ndarray, n_max: int | None):
        """Non-overlapping (S+1)-token windows (stride S) covering the stream; the first n_max of them."""
        n = (len(ids) - 1) // S
        if n_max is not None:
            n = min(n, n_max)
        return torch.stack([torch.from_numpy(ids[i * S : i * S + S + 1].astype(np.int64)) for i in range(n)])

    valid_w = windows(valid_ids, 64 if not a.smoke else 4).to(device)
    held_w = windows(held_ids, None).to(device)

    @torch.no_grad()
    def eval_loss(w, bs=64):
        model.eval()
        tot, n = 0.0, 0
        for i in range(0, len(w), bs):
            x = w[i : i + bs]
            tot += loss_on(x).item() * x[:, 1:].numel()
            n += x[:, 1:].numel()
        model.train()
        return tot / n

    def lr_at(step: int, frac: float) -> float:
        if step < a.warmup_steps:
            return a.lr * (step + 1) / a.warmup_steps
        f = min(1.0, frac)
        return a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * f)))

    curve, vcurve = [], []
    best = {"valid_loss": float("inf"), "step": -1, "state": None}
    step, tokens, acc, acc_n = 0, 0, 0.0, 0
    gen = torch.Generator(device=device).manual_seed(a.seed)
    t_train0 = time.time()
    t_last_eval = t_train0
    t_prev_log, step_prev_log = t_train0, 0
    model.train()
    while True:
        el = time.time() - t_train0
        frac = el / a.train_seconds
        if (a.max_steps is not None and step >= a.max_steps) or (a.max_steps is None and frac >= 1.0):
            break
        lr = lr_at(step, frac if a.max_steps is None else step / a.max_steps)
        for grp in opt.param_groups:
            grp["lr"] = lr
        offs = torch.randint(0, len(train_t) - S - 1, (a.batch,), device=device, generator=gen)
        x = train_t[offs[:, None] + torch.arange(S + 1, device=device)[None, :]]
        opt.zero_grad(set_to_none=True)
        try:
            loss = loss_on(x)
            loss.backward()
        except torch.OutOfMemoryError:
            if step > 0 or a.batch <= 8:
                raise
            a.batch //= 2
            log(f"out of memory at the first step: batch -> {a.batch}")
            opt.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            continue
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += a.batch * S
        acc += loss.detach()
        acc_n += 1
        if step == 1 and "_calls" in gdr_info:
            gdr_info["patch_effective"] = gdr_info["_calls"]["n"] > 0
            log(f"patched GDR called {gdr_info['_calls']['n']} times in step 1")
        if step % a.log_every == 0:
            now = time.time()
            avg = (acc / acc_n).item()
            sps = (step - step_prev_log) / (now - t_prev_log)
            rec = {
                "step": step, "elapsed_s": round(now - t_train0, 2), "tokens": tokens, "loss": round(avg, 4),
                "lr": lr, "grad_norm": round(float(gnorm), 3), "steps_per_s": round(sps, 3),
                "tokens_per_s": round(sps * a.batch * S),
            }
            curve.append(rec)
            log(json.dumps(rec))
            acc, acc_n = 0.0, 0
            t_prev_log, step_prev_log = now, step
            if now - t_last_eval >= a.eval_every_s:
                vl = eval_loss(valid_w)
                vcurve.append({"step": step, "elapsed_s": round(now - t_train0, 2), "valid_loss": round(vl, 4)})
                log(f"valid loss {vl:.4f} at step {step}")
                if vl < best["valid_loss"]:
                    state = None
                    if not a.no_keep_best:
                        state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
                    best.update(valid_loss=vl, step=step, state=state)
                t_last_eval = time.time()
                t_prev_log = t_last_eval  # do not count eval time in throughput
    t_train = time.time() - t_train0
    final_valid = eval_loss(valid_w)
    vcurve.append({"step": step, "elapsed_s": round(t_train, 2), "valid_loss": round(final_valid, 4)})
    log(f"trained {step} steps, {tokens} tokens in {t_train:.1f}s; final valid loss {final_valid:.4f}")
    epochs = tokens / len(train_ids)
    if epochs > 4:
        log(f"WARNING: {epochs:.1f} epochs over the training stream: expect overfitting (add --extra-root)")
    kept = {"step": step, "valid_loss": final_valid}
    if best["state"] is not None and best["valid_loss"] < final_valid:
        model.load_state_dict(best["state"])
        kept = {"step": best["step"], "valid_loss": best["valid_loss"]}
        log(f"restored the lowest-validation-loss weights of step {best['step']} (valid {best['valid_loss']:.4f})")
    best["state"] = None

    # ---- held-out (evaluated once, at the end) in fp32-weights+autocast and after the bf16 cast
    t = time.time()
    held_loss = eval_loss(held_w)
    model.to(torch.bfloat16)
    model.save_pretrained(str(out / "hf"), safe_serialization=True)
    # save_pretrained writes its own generation_config.json; rewrite ours (two eos ids) afterwards
    write_tokenizer_files(tok, out / "hf", [im_end, eot], eot)
    held_loss_bf16 = eval_loss(held_w)
    p_uni = (counts + 1) / (counts.sum() + V)  # add-one smoothed unigram from the training files
    held_targets = held_w[:, 1:].reshape(-1).cpu().numpy()
    uni_loss = float(-np.log(p_uni[held_targets]).mean())
    log(
        f"held-out: loss {held_loss:.4f} (ppl {math.exp(held_loss):.2f}), after bf16 cast {held_loss_bf16:.4f};"
        f" unigram baseline loss {uni_loss:.4f} (ppl {math.exp(uni_loss):.1f}) over {len(held_targets)} tokens"
    )

    # ---- samples (greedy, HF generate) as a sanity check
    samples = []
    model.eval()
    prompts = [
        ("raw", "def fibonacci(n):\n"),
        ("raw", "import os\n\n\ndef list_python_files(directory):\n"),
        ("raw", "class Stack:\n    def __init__(self):\n"),
        ("chat", "<|im_start|>user\ndef read_json(path):<|im_end|>\n<|im_start|>assistant\n"),
    ]
    for kind, pr in prompts:
        try:
            ids = torch.tensor([tok.encode(pr, add_special_tokens=False).ids], device=device)
            with torch.no_grad():
                o = model.generate(
                    ids, max_new_tokens=64 if not a.smoke else 8, do_sample=False, eos_token_id=[im_end, eot],
                    pad_token_id=eot,
                )
            txt = tok.decode(o[0, ids.shape[1] :].tolist(), skip_special_tokens=False)
        except Exception as exc:  # noqa: BLE001 - a sanity sample must not cost the saved model
            txt = f"<generate failed: {exc!r}>"
        samples.append({"kind": kind, "prompt": pr, "completion": txt})
        log(f"sample [{kind}] {pr!r} -> {txt!r}")
    t_eval = time.time() - t

    report = {
        "settings": {k: v for k, v in vars(a).items()},
        "env": env,
        "corpus": cinfo,
        "chat_samples": len(chats),
        "tokens": {
            "train_stream": int(len(train_ids)), "train_files_only": int(len(file_ids)),
            "valid": int(len(valid_ids)), "heldout": int(len(held_ids)),
            "bytes_per_token_train_files": bytes_train / len(file_ids),
        },
        "tokenizer": {"vocab_size": V, "specials": {s: tok.token_to_id(s) for s in SPECIALS}},
        "model": {
            "params": n_params, "embedding_params": n_emb, "config": json.loads(cfg.to_json_string()),
        },
        "gated_delta_rule": {k: v for k, v in gdr_info.items() if not k.startswith("_")},
        "train": {
            "steps": step, "tokens": tokens, "epochs_over_train_stream": tokens / len(train_ids),
            "wall_s": t_train, "loss_curve": curve, "valid_curve": vcurve, "kept_weights": kept,
        },
        "heldout": {
            "tokens_scored": int(len(held_targets)), "loss": held_loss, "ppl": math.exp(held_loss),
            "loss_bf16_weights": held_loss_bf16, "ppl_bf16_weights": math.exp(held_loss_bf16),
            "unigram_loss": uni_loss, "unigram_ppl": math.exp(uni_loss),
            "unigram_note": "add-one smoothed token frequencies of the training files (no chat samples)",
        },
        "samples": samples,
        "timings_s": {
            "corpus": t_corpus, "tokenizer": t_tok, "encode": t_enc, "train": t_train, "eval_save": t_eval,
            "total": time.time() - t_start,
        },
    }
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    log(f"done in {time.time() - t_start:.1f}s; report at {out / 'report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
