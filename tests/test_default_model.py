"""The embedded default model (tensorfold/assets/default) is a trained model that writes code, and perplexity works.

Oracles and tolerances:
* transformers' ``Qwen3_5ForCausalLM`` in float32 on CPU, loaded with weights dequantized *here* from the MLX
  4-bit file (own numpy unpacking, independent of tensorfold.model.quant / checkpoint): the reference
  perplexity and the engine (cpu backend) perplexity must be within 1% of its perplexity on the same tokens.
* Unigram baselines on the held-out text (tests/data/heldout.txt = the whole file ``importlib/abc.py`` of the
  training machine's stdlib, a file of the held-out split, never trained on):
  (a) add-one smoothed token frequencies of the *training* files (tests/data/default_unigram_train_counts.json,
  written by benchmarks/train_default_model.py) and (b) the maximum-likelihood unigram of the held-out text itself
  (an optimistic baseline: it has seen the test tokens). The model must beat (a) by >= 5x and (b) by >= 1.5x.
* Greedy generation from a code prompt through the CLI must be plausible code: the text re-tokenizes to itself,
  reuses an identifier of the prompt, and >= 60% of its non-blank lines are kept when lines are added one by one\n  while the program still compiles (``compile``, an open block / docstring at the end closed by light trimming).

The tests skip while the asset is still the random synth placeholder (config key ``tensorfold_synth``).
``TENSORFOLD_TEST_DEFAULT_MODEL=DIR`` points them at another checkpoint directory (used before the asset lands).
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest

import tensorfold

DATA = Path(__file__).parent / "data"
HELDOUT = DATA / "heldout.txt"
ASSET = Path(tensorfold.__file__).parent / "assets" / "default"
MODEL = Path(os.environ.get("TENSORFOLD_TEST_DEFAULT_MODEL", ASSET))


def _is_trained(d: Path) -> bool:
    try:
        cfg = json.loads((d / "config.json").read_text())
    except OSError:
        return False
    return "tensorfold_synth" not in cfg


pytestmark = pytest.mark.skipif(not _is_trained(MODEL), reason="the trained default model has not landed yet")


# ------------------------------------------------------------------------------------------------ helpers


def _tokenizer():
    from tensorfold.tokenizer import Tokenizer

    return Tokenizer.from_dir(MODEL)


def _bf16_to_f32(u16: np.ndarray) -> np.ndarray:
    return (u16.astype(np.uint32) << 16).view(np.float32)


def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Minimal reader (own code): U32 / BF16 / F32 / F16 tensors as numpy (bf16 -> float32)."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    body = memoryview(raw)[8 + n :]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        dt = {"U32": np.uint32, "BF16": np.uint16, "F32": np.float32, "F16": np.float16}[meta["dtype"]]
        arr = np.frombuffer(body[a:b], dtype=dt).reshape(meta["shape"])
        out[name] = _bf16_to_f32(arr) if meta["dtype"] == "BF16" else arr
    return out


def _dequant(packed: np.ndarray, scales: np.ndarray, biases: np.ndarray, bits: int, group: int) -> np.ndarray:
    """MLX affine: code j of a row sits at bits [j*bits, (j+1)*bits) of the row's little-endian uint32 stream."""
    assert 32 % bits == 0
    per = 32 // bits
    shifts = (np.arange(per, dtype=np.uint32) * bits)[None, None, :]
    codes = ((packed[:, :, None] >> shifts) & np.uint32((1 << bits) - 1)).reshape(packed.shape[0], -1)
    q = codes.astype(np.float32).reshape(codes.shape[0], -1, group)
    return (scales[:, :, None].astype(np.float32) * q + biases[:, :, None].astype(np.float32)).reshape(
        codes.shape[0], -1
    )


_ZERO_CENTRED = ("input_layernorm.weight", "post_attention_layernorm.weight", "q_norm.weight", "k_norm.weight")


def _transformers_model():
    """transformers Qwen3_5ForCausalLM (float32, CPU) holding the asset's dequantized weights."""
    torch = pytest.importorskip("torch")
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    cfg_d = json.loads((MODEL / "config.json").read_text())
    cfg_d = cfg_d.get("text_config", cfg_d)
    q = cfg_d.get("quantization") or json.loads((MODEL / "config.json").read_text()).get("quantization")
    skip = {"quantization", "quantization_config", "architectures", "transformers_version", "dtype", "model_type"}
    cfg = Qwen3_5TextConfig(**{k: v for k, v in cfg_d.items() if k not in skip})
    tensors = {}
    for f in sorted(MODEL.glob("*.safetensors")):
        tensors.update(_read_safetensors(f))
    state = {}
    for k, v in tensors.items():
        if k.endswith((".scales", ".biases")):
            continue
        name = re.sub(r"^(language_model\.model\.|model\.language_model\.|model\.)", "", k)
        name = "lm_head.weight" if k.endswith("lm_head.weight") else "model." + name
        base = k[: -len("weight")]
        if v.dtype == np.uint32:
            bits = q["bits"]
            group = q["group_size"]
            v = _dequant(v, tensors[base + "scales"], tensors[base + "biases"], bits, group)
        v = np.asarray(v, dtype=np.float32)
        if name.endswith("conv1d.weight") and v.shape[-1] == 1:  # MLX [C, K, 1] -> HF [C, 1, K]
            v = v.transpose(0, 2, 1)
        elif name.endswith(_ZERO_CENTRED) or name == "model.norm.weight":
            v = v - 1.0  # MLX stores the multiplier 1 + w
        state[name] = torch.from_numpy(np.ascontiguousarray(v))
    try:  # every parameter is overwritten below: skip the random init
        from transformers.initialization import no_init_weights
    except ImportError:  # pragma: no cover - other transformers versions
        import contextlib

        no_init_weights = contextlib.nullcontext
    with no_init_weights():
        model = Qwen3_5ForCausalLM(cfg).float().eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert set(missing) <= {"lm_head.weight"}, missing
    model.tie_weights()
    return model


def _hf_nll(model, ids: list[int]) -> np.ndarray:
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids[:-1]])).logits[0].double()
    return torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]), reduction="none").numpy()


@pytest.fixture(scope="module")
def heldout_ids():
    return _tokenizer().encode(HELDOUT.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def hf_model():
    return _transformers_model()


# ------------------------------------------------------------------------------------------------- tests


def test_asset_is_a_small_real_geometry_4bit_model():
    from tensorfold.model.checkpoint import load_checkpoint

    ck = load_checkpoint(MODEL)
    c = ck.config
    assert c.num_hidden_layers >= 8
    assert c.layer_types == tuple(
        "full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(c.num_hidden_layers)
    )
    assert c.linear_num_value_heads > c.linear_num_key_heads and c.partial_rotary_factor == 0.25
    assert c.tie_word_embeddings and c.hidden_size % 64 == 0
    assert c.quantization is not None and c.quantization.bits == 4
    size = sum(f.stat().st_size for f in MODEL.iterdir() if f.is_file())
    assert size < 20 * 2**20, size
    tok = _tokenizer()
    assert 8000 <= tok.vocab_size <= c.vocab_size
    for s in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"):
        assert tok.token_to_id(s) is not None, s
    assert set(tok.stop_ids) == {tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")}
    rendered = tok.apply_chat_template([{"role": "user", "content": "x = 1"}], add_generation_prompt=True)
    assert rendered == "<|im_start|>user\nx = 1<|im_end|>\n<|im_start|>assistant\n"


def test_reference_perplexity_matches_transformers_and_beats_unigram(heldout_ids, hf_model):
    from tensorfold.engine.perplexity import perplexity
    from tensorfold.reference.model import ReferenceModel

    tok = _tokenizer()
    text = HELDOUT.read_text(encoding="utf-8")
    ids = heldout_ids
    assert 1000 <= len(ids) <= 2500
    ref = ReferenceModel.from_checkpoint(MODEL)
    ppl_ref, n = perplexity(ref, text, tokenizer=tok)
    assert n == len(ids) - 1
    ppl_hf = math.exp(_hf_nll(hf_model, ids).mean())
    assert abs(ppl_ref / ppl_hf - 1) < 0.01, (ppl_ref, ppl_hf)

    counts = np.asarray(json.loads((DATA / "default_unigram_train_counts.json").read_text()), dtype=np.float64)
    p_train = (counts + 1) / (counts.sum() + len(counts))
    targets = np.asarray(ids[1:])
    uni_train = math.exp(-np.log(p_train[targets]).mean())
    own = np.bincount(targets, minlength=len(counts)).astype(np.float64)
    uni_self = math.exp(-np.log(own[targets] / own.sum()).mean())
    print(f"held-out ppl: reference {ppl_ref:.2f}, transformers {ppl_hf:.2f}, unigram(train) {uni_train:.1f}, "
          f"unigram(self) {uni_self:.1f}, tokens {n}")
    assert ppl_ref * 5 < uni_train, (ppl_ref, uni_train)
    assert ppl_ref * 1.5 < uni_self, (ppl_ref, uni_self)


def test_engine_cpu_backend_perplexity_matches_transformers(heldout_ids, hf_model):
    """One token at a time through Engine.from_model(...).backend (prefill + decode), on the first 64 tokens."""
    from tensorfold.engine.perplexity import perplexity

    text = HELDOUT.read_text(encoding="utf-8")
    k = 64
    ppl_engine, n = perplexity(str(MODEL), text, backend="cpu", max_tokens=k)
    assert n == k - 1
    ppl_hf = math.exp(_hf_nll(hf_model, heldout_ids[:k]).mean())
    assert abs(ppl_engine / ppl_hf - 1) < 0.01, (ppl_engine, ppl_hf)


def test_perplexity_cli():
    from click.testing import CliRunner

    from tensorfold.cli import main

    r = CliRunner().invoke(main, ["perplexity", str(MODEL), str(HELDOUT), "--backend", "cpu", "--max-tokens", "24"])
    assert r.exit_code == 0, r.output
    m = re.search(r"perplexity: ([0-9.]+)", r.output)
    assert m and 1.0 < float(m.group(1)) < 1e4
    assert "tokens: 23 scored" in r.output and "backend: cpu" in r.output and "kv cache:" in r.output


def _compiles(lines: list[str]) -> bool:
    """lines compile after light trimming: an open block at the end may be closed with `pass`, an open
    triple-quoted string with its quotes (generation may stop anywhere: --max-tokens)."""
    src = "\n".join(lines)
    last = next((ln for ln in reversed(lines) if ln.strip()), "")
    pad = " " * (len(last) - len(last.lstrip()) + 4)
    for tail in ("", "\n" + pad + "pass", '"""', "'''", '"""\n' + pad + "pass", "'''\n" + pad + "pass"):
        try:
            compile(src + tail + "\n", "<generated>", "exec")
            return True
        except SyntaxError:
            continue
    return False


def _kept_lines(lines: list[str]) -> list[str]:
    """Greedy: keep each line if the kept program plus it still compiles (so one bad line costs one line)."""
    kept: list[str] = []
    for ln in lines:
        if _compiles(kept + [ln]):
            kept.append(ln)
    return kept


def _identifiers(src: str) -> set[str]:
    import keyword

    return {w for w in re.findall(r"[A-Za-z_][A-Za-z_0-9]*", src) if not keyword.iskeyword(w)}


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "raw"])
def test_greedy_generation_is_plausible_code(chat):
    from click.testing import CliRunner

    from tensorfold.cli import main

    header = "def read_lines(path, encoding='utf-8'):\n    \"\"\"Return the lines of the file at path.\"\"\""
    prompt = header if chat else header + "\n"
    args = ["generate", str(MODEL), "--prompt", prompt, "--max-tokens", "64", "--temperature", "0",
            "--backend", "cpu", "--chat" if chat else "--no-chat"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    text = r.stdout
    text = text[:-1] if text.endswith("\n") else text  # the CLI's final newline
    print(repr(text))
    tok = _tokenizer()
    assert len(text.strip()) > 20
    assert tok.decode(tok.encode(text)) == text  # the text tokenizes back to itself
    # reuses an identifier of the prompt (its arguments or its name)
    assert _identifiers(text) & {"path", "encoding", "read_lines"}, text
    # most lines compile: the prompt's def line + the completion, trimmed to a compiling prefix
    code = header + "\n" + text.lstrip("\n") if chat else prompt + text
    lines = code.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    nonblank = [ln for ln in lines if ln.strip()]
    kept = [ln for ln in _kept_lines(lines) if ln.strip()]
    assert len(nonblank) >= 3 and len(kept) >= 0.6 * len(nonblank), (len(kept), len(nonblank), code)
