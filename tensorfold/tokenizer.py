"""Text <-> token ids for a checkpoint directory: tokenizer.json, chat template, stop ids, streaming detokenizer.

Owns:
* `Tokenizer.from_dir(path)`: `tokenizer.json` through the `tokenizers` library; the chat template from
  `chat_template.jinja` or `tokenizer_config.json["chat_template"]`; stop ids from `generation_config.json`
  (`eos_token_id`, list or int), else `config.json` (`eos_token_id`, top level or `text_config`), else the
  tokenizer_config's `eos_token`.
* `apply_chat_template`: renders the template with jinja2 the way transformers does (sandboxed environment,
  `trim_blocks` and `lstrip_blocks` on, `loopcontrols`, a `tojson` filter that does not escape HTML or non-ASCII,
  `raise_exception` and `strftime_now` globals; special-token strings, `tools`, `add_generation_prompt` and any
  extra kwargs such as `enable_thinking` are template variables).
* `IncrementalDecoder`: token-by-token text for streaming that never splits a multi-byte UTF-8 character.
* `builtin_template(name)`: the chat templates shipped in `tensorfold/assets/templates/`.
"""

from __future__ import annotations

import codecs
import copy
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Sequence

__all__ = [
    "Tokenizer",
    "IncrementalDecoder",
    "TokenizerError",
    "ChatTemplateError",
    "builtin_template",
    "TEMPLATE_DIR",
]

TEMPLATE_DIR = Path(__file__).resolve().parent / "assets" / "templates"


class TokenizerError(ValueError):
    """A tokenizer file is missing or malformed, or an id/text argument is invalid."""


class ChatTemplateError(ValueError):
    """The chat template is missing, fails to compile, or rejects the messages (its raise_exception message)."""


def builtin_template(name: str) -> str:
    """Text of a shipped chat template, e.g. `builtin_template("qwen3_5_think")`."""
    path = TEMPLATE_DIR / (name if name.endswith(".jinja") else name + ".jinja")
    if not path.is_file():
        known = sorted(p.stem for p in TEMPLATE_DIR.glob("*.jinja"))
        raise ChatTemplateError(f"no built-in chat template {name!r}; known: {known}")
    return path.read_text(encoding="utf-8")


def _read_json(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as exc:
        raise TokenizerError(f"{path}: invalid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise TokenizerError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _token_text(value: Any) -> str | None:
    """tokenizer_config special-token entries are strings or AddedToken dicts."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _eos_list(value: Any, where: str) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise TokenizerError(f"{where}: eos_token_id must be an int or a list of ints, got {value!r}")
    if isinstance(value, int):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    raise TokenizerError(f"{where}: eos_token_id must be an int or a non-empty list of ints, got {value!r}")


def _compile_template(source: str):
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise ChatTemplateError(f"chat template does not compile: line {exc.lineno}: {exc.message}") from exc


def _prepare_messages(messages: Sequence[dict]) -> list[dict]:
    """Copy messages; alias `reasoning`/`thinking` to `reasoning_content`; parse JSON-string tool arguments."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ChatTemplateError(f"messages must be a list of dicts, got {type(messages).__name__}")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ChatTemplateError(f"messages[{i}] must be a dict, got {type(message).__name__}")
        if "role" not in message:
            raise ChatTemplateError(f"messages[{i}] has no 'role'")
        m = copy.deepcopy(message)
        if m.get("reasoning_content") is None:
            for alias in ("reasoning", "thinking"):
                if isinstance(m.get(alias), str):
                    m["reasoning_content"] = m[alias]
                    break
        calls = m.get("tool_calls")
        if isinstance(calls, list):
            for j, call in enumerate(calls):
                fn = call.get("function", call) if isinstance(call, dict) else None
                if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                    text = fn["arguments"]
                    try:
                        fn["arguments"] = json.loads(text) if text.strip() else {}
                    except json.JSONDecodeError as exc:
                        raise ChatTemplateError(
                            f"messages[{i}].tool_calls[{j}].function.arguments is not valid JSON: {exc}") from exc
        out.append(m)
    return out


class Tokenizer:
    """A `tokenizers.Tokenizer` plus chat template, stop ids and special-token bookkeeping."""

    def __init__(self, backend, chat_template: str | None = None, stop_ids: Iterable[int] = (),
                 special_tokens_map: dict[str, str] | None = None, name: str = "tokenizer"):
        self._tok = backend
        self.name = name
        self.chat_template = chat_template
        self._compiled = None
        self.special_tokens_map = dict(special_tokens_map or {})
        self.vocab_size: int = backend.get_vocab_size(with_added_tokens=True)
        added = backend.get_added_tokens_decoder()  # id -> AddedToken
        self._added: dict[int, tuple[str, bool]] = {i: (t.content, bool(t.special)) for i, t in added.items()}
        #: ids removed by decode(skip_special=True) (added tokens flagged special)
        self.special_ids: frozenset[int] = frozenset(i for i, (_, sp) in self._added.items() if sp)
        #: every added token (special or not), e.g. <think>
        self.added_ids: frozenset[int] = frozenset(self._added)
        stops = []
        for i in stop_ids:
            if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < self.vocab_size:
                raise TokenizerError(f"{name}: stop id {i!r} is not a token id (vocab size {self.vocab_size})")
            if i not in stops:
                stops.append(i)
        self.stop_ids: tuple[int, ...] = tuple(stops)
        self._byte_level = self._decoder_type() == "ByteLevel"
        self._token_bytes: list[bytes] | None = None

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_dir(cls, path: str | os.PathLike) -> "Tokenizer":
        from tokenizers import Tokenizer as _HFTokenizer

        root = Path(path)
        if not root.is_dir():
            raise TokenizerError(f"{root}: not a directory")
        tj = root / "tokenizer.json"
        if not tj.is_file():
            raise TokenizerError(f"{root}: no tokenizer.json")
        try:
            backend = _HFTokenizer.from_file(str(tj))
        except Exception as exc:  # tokenizers raises a generic Exception
            raise TokenizerError(f"{tj}: cannot be loaded by tokenizers: {exc}") from exc

        tcfg = _read_json(root / "tokenizer_config.json") if (root / "tokenizer_config.json").is_file() else {}
        template = None
        if (root / "chat_template.jinja").is_file():
            template = (root / "chat_template.jinja").read_text(encoding="utf-8")
        elif "chat_template" in tcfg:
            raw = tcfg["chat_template"]
            if isinstance(raw, list):  # named templates: [{"name": ..., "template": ...}]
                named = {t.get("name"): t.get("template") for t in raw if isinstance(t, dict)}
                raw = named.get("default")
            if raw is not None and not isinstance(raw, str):
                raise TokenizerError(f"{root / 'tokenizer_config.json'}: chat_template must be a string")
            template = raw

        specials = {}
        for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
            text = _token_text(tcfg.get(key))
            if text is not None:
                specials[key] = text

        stops = None
        gen = root / "generation_config.json"
        if gen.is_file():
            stops = _eos_list(_read_json(gen).get("eos_token_id"), str(gen))
        if stops is None and (root / "config.json").is_file():
            cfg = _read_json(root / "config.json")
            value = cfg.get("eos_token_id")
            if value is None and isinstance(cfg.get("text_config"), dict):
                value = cfg["text_config"].get("eos_token_id")
            stops = _eos_list(value, str(root / "config.json"))
        if stops is None and "eos_token" in specials:
            eos = backend.token_to_id(specials["eos_token"])
            stops = [eos] if eos is not None else None
        return cls(backend, chat_template=template, stop_ids=stops or (), special_tokens_map=specials,
                   name=str(root))

    # ------------------------------------------------------------------ ids
    def encode(self, text: str, add_special: bool = False) -> list[int]:
        """Token ids of `text` (special-token strings in the text become their ids; no BOS for Qwen)."""
        if not isinstance(text, str):
            raise TokenizerError(f"encode expects a str, got {type(text).__name__}")
        return self._tok.encode(text, add_special_tokens=add_special).ids

    def _check_ids(self, ids: Sequence[int]) -> list[int]:
        out = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int):
                try:
                    import numpy as np
                    if isinstance(i, np.integer):
                        i = int(i)
                    else:
                        raise TypeError
                except (ImportError, TypeError):
                    raise TokenizerError(f"token ids must be ints, got {i!r}") from None
            if not 0 <= i < self.vocab_size:
                raise TokenizerError(f"token id {i} is outside the tokenizer's vocabulary (size {self.vocab_size})")
            out.append(i)
        return out

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        """Text of `ids`; invalid UTF-8 byte runs become U+FFFD. `skip_special` drops ids in `special_ids`."""
        return self._tok.decode(self._check_ids(ids), skip_special_tokens=skip_special)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tok.id_to_token(token_id)

    def token_bytes(self, token_id: int) -> bytes:
        """The raw UTF-8 bytes a token stands for (byte-level tokenizers; added tokens: their text)."""
        if self._token_bytes is None:
            self._token_bytes = self._build_token_bytes()
        (token_id,) = self._check_ids([token_id])
        return self._token_bytes[token_id]

    def _decoder_type(self) -> str | None:
        decoder = self._tok.decoder
        return None if decoder is None else type(decoder).__name__

    def _build_token_bytes(self) -> list[bytes]:
        from tensorfold.model.tokenizer_build import byte_to_unicode

        if not self._byte_level:
            raise TokenizerError(f"{self.name}: token_bytes needs a byte-level tokenizer")
        inverse = {ch: b for b, ch in enumerate(byte_to_unicode())}
        table: list[bytes] = []
        for i in range(self.vocab_size):
            if i in self._added:
                table.append(self._added[i][0].encode("utf-8"))
                continue
            piece = self._tok.id_to_token(i)
            if piece is None:
                table.append(b"")
                continue
            try:
                table.append(bytes(inverse[ch] for ch in piece))
            except KeyError:
                raise TokenizerError(f"{self.name}: token {i} {piece!r} is not in the byte-level alphabet") from None
        return table

    # ------------------------------------------------------------------ chat
    def apply_chat_template(self, messages: Sequence[dict], add_generation_prompt: bool = True,
                            tools: list[dict] | None = None, **kwargs: Any) -> str:
        """Render `messages` (OpenAI-style dicts) to the prompt string; kwargs become template variables
        (e.g. `enable_thinking=False`)."""
        import jinja2

        if self.chat_template is None:
            raise ChatTemplateError(f"{self.name}: no chat template (chat_template.jinja or "
                                    f"tokenizer_config.json['chat_template'])")
        if self._compiled is None:
            self._compiled = _compile_template(self.chat_template)
        variables = dict(self.special_tokens_map)
        variables.update(kwargs)
        try:
            return self._compiled.render(messages=_prepare_messages(messages), tools=tools,
                                         add_generation_prompt=add_generation_prompt, **variables)
        except jinja2.exceptions.TemplateError as exc:
            raise ChatTemplateError(f"chat template rejected the messages: {exc}") from exc


class IncrementalDecoder:
    """Streaming detokenizer: `push(id)` returns the newly completed text, holding back the bytes of a UTF-8
    character until all of them have arrived; `flush()` returns what is left (incomplete bytes as U+FFFD).

    The concatenation of all pushes and the flush equals `tokenizer.decode(ids, skip_special)`.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False):
        self.tokenizer = tokenizer
        self.skip_special = skip_special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._ids: list[int] = []      # fallback path (non byte-level tokenizers)
        self._emitted = 0

    def push(self, token_id: int) -> str:
        tok = self.tokenizer
        if tok._byte_level:
            data = tok.token_bytes(token_id)
            if self.skip_special and token_id in tok.special_ids:
                return ""
            return self._utf8.decode(data)
        # generic fallback: decode the whole sequence, emit the new tail unless it ends mid-character
        self._ids.append(token_id)
        text = tok.decode(self._ids, skip_special=self.skip_special)
        if text.endswith("\ufffd"):
            return ""
        new, self._emitted = text[self._emitted:], len(text)
        return new

    def extend(self, ids: Iterable[int]) -> str:
        return "".join(self.push(i) for i in ids)

    def flush(self) -> str:
        if self.tokenizer._byte_level:
            return self._utf8.decode(b"", final=True)
        text = self.tokenizer.decode(self._ids, skip_special=self.skip_special)
        new, self._emitted = text[self._emitted:], len(text)
        return new
