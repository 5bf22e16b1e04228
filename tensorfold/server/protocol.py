"""OpenAI-compatible request validation and response shapes for `tensorfold serve`.

Everything a client sends is checked here, before any engine work or stream starts: each problem becomes an
`ApiError` that the app turns into `{"error": {"message", "type", "param", "code"}}` with the right status.
The text side of generation also lives here, independent of the engine: an incremental detokenizer that holds
back incomplete UTF-8, stop-string matching that never returns the matched text, and the `<think>` splitter
that moves reasoning into `reasoning_content`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
import uuid
from typing import Any

from tensorfold.sampling import MAX_LOGPROBS

# ----------------------------------------------------------------------------------------------------------
# errors

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    500: "server_error",
    501: "not_supported_error",
    503: "unavailable_error",
}


class ApiError(Exception):
    """A request failure with an HTTP status and an OpenAI error body."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | int | None = None,
                 type: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or _TYPE_BY_STATUS.get(status, "invalid_request_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code if self.code is not None else self.status}}


def bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


# ----------------------------------------------------------------------------------------------------------
# body parsing

def parse_json_body(raw: bytes) -> dict:
    """Bytes -> a JSON object; invalid UTF-8, malformed JSON or a non-object is a 400."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise bad(f"request body is not valid UTF-8 (byte {e.start})") from None
    if not text.strip():
        raise bad("request body is empty; expected a JSON object")
    try:
        # NaN / Infinity literals parse to floats here so the field validators can name the parameter.
        body = json.loads(text, parse_constant=lambda c: float(c.replace("Infinity", "inf")))
    except json.JSONDecodeError as e:
        raise bad(f"malformed JSON body: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise bad("malformed JSON body: nested too deeply") from None
    if not isinstance(body, dict):
        raise bad(f"request body must be a JSON object, not {_json_type(body)}")
    return body


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def get_number(body: dict, name: str, default, lo=None, hi=None, integer=False, lo_open=False):
    """A numeric field: bool, NaN/inf, strings and (for `integer`) fractions are 400s naming the field."""
    v = body.get(name, None)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise bad(f"'{name}' must be {'an integer' if integer else 'a number'}, not {_json_type(v)}", name)
    if isinstance(v, float) and not math.isfinite(v):
        raise bad(f"'{name}' must be a finite number, not {v}", name)
    if integer:
        if isinstance(v, float):
            if not v.is_integer():
                raise bad(f"'{name}' must be an integer, not {v}", name)
            v = int(v)
    if lo is not None and (v < lo or (lo_open and v == lo)):
        raise bad(f"'{name}' must be {'>' if lo_open else '>='} {lo}, got {v}", name)
    if hi is not None and v > hi:
        raise bad(f"'{name}' must be <= {hi}, got {v}", name)
    return v


def get_bool(body: dict, name: str, default: bool) -> bool:
    v = body.get(name, None)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise bad(f"'{name}' must be a boolean, not {_json_type(v)}", name)
    return v


# ----------------------------------------------------------------------------------------------------------
# generation requests

@dataclasses.dataclass
class ServeDefaults:
    """Server-wide settings that requests are checked against and fall back to."""
    model_names: tuple[str, ...]
    context: int
    vocab_size: int
    max_tokens: int | None = None       # --max-tokens: cap and default for a request's completion length
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0


@dataclasses.dataclass
class GenRequest:
    kind: str                          # "chat" | "completion"
    id: str
    created: int
    model: str
    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    seed: int                          # as the sampler uses it (reported in the engine block)
    seed_given: bool
    stop: list[str]
    stop_token_ids: list[int]
    stream: bool
    include_usage: bool
    ignore_eos: bool
    draft: bool
    prompt_opens_think: bool = False   # the rendered chat prompt ends inside <think>
    logprobs: int | None = None        # alternatives a token's logprobs entry lists; None: no logprobs
    echo: str | None = None            # completions with echo: the prompt's text, returned before the completion
    prompt_logprobs: int | None = None  # echo with logprobs: the prompt tokens' entries too


MAX_STOPS = 16
MAX_STOP_LEN = 1024


def check_model(body: dict, defaults: ServeDefaults) -> str:
    m = body.get("model", None)
    if m is None:
        return defaults.model_names[0]
    if not isinstance(m, str):
        raise bad(f"'model' must be a string, not {_json_type(m)}", "model")
    if m not in defaults.model_names:
        raise ApiError(400, f"The model `{m}` does not exist. Served: {', '.join(defaults.model_names)}",
                       param="model", code="model_not_found")
    return m


def check_messages(body: dict) -> list[dict]:
    msgs = body.get("messages", None)
    if msgs is None:
        raise bad("'messages' is required", "messages")
    if not isinstance(msgs, list):
        raise bad(f"'messages' must be an array, not {_json_type(msgs)}", "messages")
    if not msgs:
        raise bad("'messages' must not be empty", "messages")
    out = []
    for i, m in enumerate(msgs):
        p = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(f"'{p}' must be an object, not {_json_type(m)}", p)
        role = m.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise bad(f"'{p}.role' must be one of system, developer, user, assistant, tool; got {role!r}",
                      f"{p}.role")
        content = m.get("content", None)
        if isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise bad(f"'{p}.content[{j}]' must be a text part {{\"type\": \"text\", \"text\": ...}}; "
                              "other content types are not supported", f"{p}.content")
                parts.append(part["text"])
            content = "".join(parts)
        elif content is None:
            if role != "assistant":
                raise bad(f"'{p}.content' is required", f"{p}.content")
            content = ""
        elif not isinstance(content, str):
            raise bad(f"'{p}.content' must be a string or an array of text parts, not {_json_type(content)}",
                      f"{p}.content")
        msg = {"role": "system" if role == "developer" else role, "content": content}
        rc = m.get("reasoning_content", None)
        if isinstance(rc, str):
            msg["reasoning_content"] = rc
        out.append(msg)
    return out


def check_template_kwargs(body: dict) -> dict:
    k = body.get("chat_template_kwargs", None)
    if k is None:
        return {}
    if not isinstance(k, dict):
        raise bad(f"'chat_template_kwargs' must be an object, not {_json_type(k)}", "chat_template_kwargs")
    return k


def check_prompt(body: dict, vocab_size: int) -> str | list[int]:
    """The completions prompt: a string, a token id list, or a one-element list of either."""
    p = body.get("prompt", None)
    if p is None:
        raise bad("'prompt' is required", "prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]
    if isinstance(p, str):
        return p
    if isinstance(p, list):
        if not p:
            raise bad("'prompt' must not be empty", "prompt")
        for i, t in enumerate(p):
            if isinstance(t, bool) or not isinstance(t, int):
                if isinstance(t, str):
                    raise bad("batched prompts (a list of several strings) are not supported; send one", "prompt")
                raise bad(f"'prompt[{i}]' must be a token id (integer), not {_json_type(t)}", "prompt")
            if not 0 <= t < vocab_size:
                raise bad(f"'prompt[{i}]' = {t} is not a token id (vocabulary size {vocab_size})", "prompt")
        return list(p)
    raise bad(f"'prompt' must be a string or an array of token ids, not {_json_type(p)}", "prompt")


def check_unsupported(body: dict, kind: str) -> None:
    n = get_number(body, "n", 1, integer=True)
    if n != 1:
        raise bad(f"'n' must be 1 (only one choice per request is supported), got {n}", "n")
    best_of = get_number(body, "best_of", 1, integer=True)
    if best_of != 1:
        raise bad(f"'best_of' must be 1, got {best_of}", "best_of")
    for name in ("presence_penalty", "frequency_penalty"):
        v = get_number(body, name, 0.0, lo=-2.0, hi=2.0)
        if v != 0:
            raise bad(f"'{name}' is not supported by this server (only 0)", name, code="not_supported")
    rp = get_number(body, "repetition_penalty", 1.0, lo=0.0, lo_open=True)
    if rp != 1.0:
        raise bad("'repetition_penalty' is not supported by this server (only 1)", "repetition_penalty",
                  code="not_supported")
    if body.get("suffix"):
        raise bad("'suffix' is not supported by this server", "suffix", code="not_supported")
    echo = body.get("echo", None)
    if echo is not None and not isinstance(echo, bool):
        raise bad(f"'echo' must be a boolean, not {_json_type(echo)}", "echo")
    if echo and kind == "chat":
        raise bad("'echo' is a completions field", "echo")
    if body.get("tools"):
        raise bad("'tools' is not supported by this server", "tools", code="not_supported")
    rf = body.get("response_format", None)
    if rf is not None and not (isinstance(rf, dict) and rf.get("type") == "text"):
        raise bad("'response_format' other than {\"type\": \"text\"} is not supported", "response_format",
                  code="not_supported")
    if body.get("logit_bias"):
        raise bad("'logit_bias' is not supported by this server", "logit_bias", code="not_supported")


def check_logprobs(body: dict, kind: str) -> int | None:
    """How many alternatives a token's logprobs entry lists, or None for no logprobs. Chat: ``logprobs`` (bool) and
    ``top_logprobs`` (0-20, only with ``logprobs: true``); completions: ``logprobs`` (0-20, OpenAI's own limit is 5,
    vLLM's 20)."""
    if kind == "chat":
        lp = body.get("logprobs", None)
        if lp is not None and not isinstance(lp, bool):
            raise bad(f"'logprobs' must be a boolean, not {_json_type(lp)}", "logprobs")
        tl = get_number(body, "top_logprobs", None, lo=0, hi=MAX_LOGPROBS, integer=True)
        if tl is not None and not lp:
            raise bad("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        return (tl or 0) if lp else None
    if body.get("top_logprobs", None) is not None:
        raise bad("'top_logprobs' is a chat field; completions take 'logprobs': <number of alternatives>",
                  "top_logprobs")
    return get_number(body, "logprobs", None, lo=0, hi=MAX_LOGPROBS, integer=True)


def check_stop(body: dict) -> list[str]:
    s = body.get("stop", None)
    if s is None:
        return []
    if isinstance(s, str):
        s = [s]
    if not isinstance(s, list):
        raise bad(f"'stop' must be a string or an array of strings, not {_json_type(s)}", "stop")
    if len(s) > MAX_STOPS:
        raise bad(f"'stop' may hold at most {MAX_STOPS} strings, got {len(s)}", "stop")
    out = []
    for i, x in enumerate(s):
        if not isinstance(x, str):
            raise bad(f"'stop[{i}]' must be a string, not {_json_type(x)}", "stop")
        if not x:
            raise bad(f"'stop[{i}]' must not be empty", "stop")
        if len(x) > MAX_STOP_LEN:
            raise bad(f"'stop[{i}]' is longer than {MAX_STOP_LEN} characters", "stop")
        out.append(x)
    return out


def check_stop_token_ids(body: dict, vocab_size: int) -> list[int]:
    """vLLM's `stop_token_ids`: extra ids that finish the request (kept in the token count, not in the text)."""
    v = body.get("stop_token_ids", None)
    if v is None:
        return []
    if not isinstance(v, list):
        raise bad(f"'stop_token_ids' must be an array of token ids, not {_json_type(v)}", "stop_token_ids")
    for i, t in enumerate(v):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size:
            raise bad(f"'stop_token_ids[{i}]' = {t!r} is not a token id (vocabulary size {vocab_size})",
                      "stop_token_ids")
    return list(v)


def derive_seed(prompt_ids: list[int]) -> int:
    """The seed of a request without one: the engine's hash of its prompt (`tensorfold.sampling.derive_seed`),
    so that a rerun repeats and equals `tensorfold generate` on the same prompt."""
    try:
        from tensorfold.sampling import derive_seed as _derive
    except ImportError:  # pragma: no cover - the sampling module is part of the package
        h = hashlib.sha256(",".join(map(str, prompt_ids)).encode()).digest()
        return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)
    return _derive(prompt_ids)


def sampling_fields(body: dict, defaults: ServeDefaults) -> dict:
    """temperature/top_p/top_k/min_p/seed/stop/stream/... validated (prompt-independent)."""
    out = {
        "temperature": float(get_number(body, "temperature", defaults.temperature, lo=0.0, hi=2.0)),
        "top_p": float(get_number(body, "top_p", defaults.top_p, lo=0.0, hi=1.0, lo_open=True)),
        "top_k": int(get_number(body, "top_k", defaults.top_k, lo=-1, integer=True)),
        "min_p": float(get_number(body, "min_p", defaults.min_p, lo=0.0, hi=1.0)),
        "seed": get_number(body, "seed", None, lo=-(1 << 63), hi=(1 << 64) - 1, integer=True),
        "stop": check_stop(body),
        "stop_token_ids": check_stop_token_ids(body, defaults.vocab_size),
        "stream": get_bool(body, "stream", False),
        "ignore_eos": get_bool(body, "ignore_eos", False),
        "draft": get_bool(body, "draft", True),
    }
    if out["top_k"] == -1:
        out["top_k"] = 0
    so = body.get("stream_options", None)
    include_usage = False
    if so is not None:
        if not isinstance(so, dict):
            raise bad(f"'stream_options' must be an object, not {_json_type(so)}", "stream_options")
        if not out["stream"]:
            raise bad("'stream_options' is only allowed when 'stream' is true", "stream_options")
        include_usage = get_bool(so, "include_usage", False)
    out["include_usage"] = include_usage
    mt = get_number(body, "max_completion_tokens", None, lo=0, integer=True)  # 0: checked in finish_request
    mt2 = get_number(body, "max_tokens", None, lo=0, integer=True)
    if mt is None:
        mt = mt2
    if mt is not None and mt > 1 << 40:
        raise bad(f"'max_tokens' is too large: {mt}", "max_tokens")
    out["max_tokens"] = mt
    return out


def context_error(context: int, prompt_len: int, max_tokens: int, where: str) -> ApiError:
    # vLLM's wording (anchors.md §4a), OpenAI's code.
    return ApiError(
        400,
        f"This model's maximum context length is {context} tokens. However, you requested "
        f"{prompt_len + max_tokens} tokens ({prompt_len} in the {where}, {max_tokens} in the completion). "
        f"Please reduce the length of the {where} or completion.",
        param="messages" if where == "messages" else "prompt", code="context_length_exceeded")


def finish_request(kind: str, model: str, prompt_ids: list[int], f: dict, defaults: ServeDefaults,
                   prompt_opens_think: bool = False) -> GenRequest:
    """Combine the validated fields with the tokenized prompt; decides max_tokens and the context check."""
    where = "messages" if kind == "chat" else "prompt"
    p = len(prompt_ids)
    if p == 0:
        raise bad(f"the {where} tokenized to zero tokens", where)
    mt = f["max_tokens"]
    if mt is None:
        mt = defaults.context - p
        if defaults.max_tokens is not None:
            mt = min(mt, defaults.max_tokens)
        if mt < 1:
            raise context_error(defaults.context, p, 1, where)
    else:
        if mt == 0 and f.get("prompt_logprobs") is None:
            raise bad("'max_tokens' must be >= 1 (0 only to score a prompt: completions with 'echo' and 'logprobs')",
                      "max_tokens")
        if defaults.max_tokens is not None and mt > defaults.max_tokens:
            raise bad(f"'max_tokens' = {mt} is over this server's limit of {defaults.max_tokens}", "max_tokens")
        if p + mt > defaults.context:
            raise context_error(defaults.context, p, mt, where)
    seed = f["seed"]
    seed_given = seed is not None
    # the seed the sampler uses: the given one reduced to [0, 2**63) (as SamplingParams.resolve_seed), or derived
    seed = seed % (1 << 63) if seed_given else derive_seed(prompt_ids)
    rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex
    return GenRequest(kind=kind, id=rid, created=int(time.time()), model=model, prompt_ids=list(prompt_ids),
                      max_tokens=int(mt), temperature=f["temperature"], top_p=f["top_p"], top_k=f["top_k"],
                      min_p=f["min_p"], seed=seed, seed_given=seed_given, stop=f["stop"],
                      stop_token_ids=f["stop_token_ids"], stream=f["stream"],
                      include_usage=f["include_usage"], ignore_eos=f["ignore_eos"], draft=f["draft"],
                      prompt_opens_think=prompt_opens_think, logprobs=f.get("logprobs"),
                      prompt_logprobs=f.get("prompt_logprobs"))


def make_sampling_params(req: GenRequest):
    """A `tensorfold.sampling.SamplingParams` from a request, passing only the fields that class has."""
    from tensorfold.sampling import SamplingParams

    want = {"temperature": req.temperature, "top_p": req.top_p, "top_k": req.top_k, "min_p": req.min_p,
            "seed": req.seed if req.seed_given else None, "max_tokens": req.max_tokens,
            "ignore_eos": req.ignore_eos, "draft": req.draft, "stop": tuple(req.stop),
            "stop_token_ids": tuple(req.stop_token_ids), "logprobs": req.logprobs,
            "prompt_logprobs": req.prompt_logprobs}
    if dataclasses.is_dataclass(SamplingParams):
        names = {f.name for f in dataclasses.fields(SamplingParams)}
    else:
        import inspect
        names = set(inspect.signature(SamplingParams).parameters)
    for k in ("logprobs", "prompt_logprobs"):
        if want[k] is not None and k not in names:
            raise bad(f"'{k}' is not supported by this engine", "logprobs", code="not_supported")
    return SamplingParams(**{k: v for k, v in want.items() if k in names})


# ----------------------------------------------------------------------------------------------------------
# logprobs: the engine's entries (token id, logprob, [(id, logprob)] * k) in OpenAI's two shapes

def _token_piece(tok, tid: int) -> tuple[str, list[int]]:
    """A token's text and its bytes (the tokenizer's own bytes where it has them: a token may hold part of a
    character, whose text is then U+FFFD)."""
    tb = getattr(tok, "token_bytes", None)
    if tb is not None:
        try:
            b = bytes(tb(int(tid)))
            return b.decode("utf-8", errors="replace"), list(b)
        except Exception:  # noqa: BLE001 -- an id the tokenizer does not know: its decoded text
            pass
    t = tok.decode([int(tid)])
    return t, list(t.encode("utf-8"))


def chat_logprobs(entries, tok) -> dict:
    """``{"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}], "refusal": None}``."""
    content = []
    for tid, lp, top in entries:
        t, b = _token_piece(tok, tid)
        alts = []
        for aid, alp in top:
            at, ab = _token_piece(tok, aid)
            alts.append({"token": at, "logprob": alp, "bytes": ab})
        content.append({"token": t, "logprob": lp, "bytes": b, "top_logprobs": alts})
    return {"content": content, "refusal": None}


def completion_logprobs(entries, tok, offset: int = 0) -> dict:
    """``{"tokens", "token_logprobs", "top_logprobs", "text_offset"}`` (legacy completions); ``offset``: where the
    first token's text starts in the returned text (a stream's earlier chunks). An entry whose logprob is None (an
    echoed prompt's first token) gets null log-probabilities, as OpenAI's echo does."""
    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for tid, lp, top in entries:
        t, _ = _token_piece(tok, tid)
        out["tokens"].append(t)
        out["token_logprobs"].append(lp)
        out["top_logprobs"].append(None if top is None else {_token_piece(tok, aid)[0]: alp for aid, alp in top})
        out["text_offset"].append(offset)
        offset += len(t)
    return out


def echo_entries(prompt_ids, prompt_logprobs) -> list:
    """The engine's prompt entries (None first) as completion entries: the first token with null values."""
    return [(prompt_ids[0], None, None)] + list(prompt_logprobs[1:])


# ----------------------------------------------------------------------------------------------------------
# text: incremental detokenization, stop strings, <think> split

class TextStream:
    """Token ids in, text deltas out; holds back a tail that decodes to an incomplete character.

    A batch-friendly face on the engine's `OffsetDecoder` (one decoding rule for the whole project), dropping the
    ids in `skip_ids` (the stop ids, whose text is never shown)."""

    def __init__(self, decode, skip_ids=()):
        from tensorfold.engine.detokenizer import OffsetDecoder

        self._dec = OffsetDecoder(decode)
        self._skip = set(skip_ids)

    @property
    def ids(self) -> list[int]:
        return self._dec.ids

    def add(self, ids) -> str:
        return "".join(self._dec.add(i) for i in ids if i not in self._skip)

    def flush(self) -> str:
        return self._dec.flush()


class StopMatcher:
    """Feeds text through, holding back any tail that could start a stop string; the match is not returned."""

    def __init__(self, stops: list[str]):
        self.stops = list(stops)
        self._hold = max((len(s) for s in self.stops), default=1) - 1
        self._buf = ""
        self.matched: str | None = None

    def feed(self, text: str) -> str:
        if self.matched is not None:
            return ""
        if not self.stops:
            return text
        self._buf += text
        best = None
        for s in self.stops:
            i = self._buf.find(s)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, s)
        if best is not None:
            self.matched = best[1]
            out = self._buf[:best[0]]
            self._buf = ""
            return out
        # keep only the longest tail that is a prefix of some stop string
        keep = 0
        for k in range(min(self._hold, len(self._buf)), 0, -1):
            tail = self._buf[-k:]
            if any(s.startswith(tail) for s in self.stops):
                keep = k
                break
        out = self._buf[:len(self._buf) - keep]
        self._buf = self._buf[len(self._buf) - keep:]
        return out

    def flush(self) -> str:
        out, self._buf = self._buf, ""
        return "" if self.matched is not None else out


THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


class ReasoningSplitter:
    """Splits a chat reply into (reasoning_content, content) at `<think>...</think>`, incrementally.

    Starts inside the reasoning when the rendered prompt already opened `<think>`; otherwise the reply enters
    it only when its very first characters are `<think>` (nothing is held back once they cannot be). Text after
    `</think>` is content (leading newlines dropped).
    """

    def __init__(self, starts_in_reasoning: bool):
        self.state = "reasoning" if starts_in_reasoning else "start"
        self._buf = ""
        self._strip_lead = starts_in_reasoning
        self.saw_reasoning = starts_in_reasoning

    def feed(self, text: str) -> tuple[str, str]:
        self._buf += text
        r = c = ""
        while True:
            if self.state == "start":
                b = self._buf
                if b.startswith(THINK_OPEN):
                    self._buf = b[len(THINK_OPEN):]
                    self.state = "reasoning"
                    self._strip_lead = True
                    self.saw_reasoning = True
                    continue
                if THINK_OPEN.startswith(b):
                    return r, c           # could still become <think>
                self.state = "content"
                continue
            if self.state == "reasoning":
                if self._strip_lead:
                    self._buf = self._buf.lstrip("\n")
                    if not self._buf:
                        return r, c
                    self._strip_lead = False
                i = self._buf.find(THINK_CLOSE)
                if i >= 0:
                    r += self._buf[:i]
                    self._buf = self._buf[i + len(THINK_CLOSE):]
                    self.state = "after"
                    continue
                keep = 0
                for k in range(min(len(THINK_CLOSE) - 1, len(self._buf)), 0, -1):
                    if THINK_CLOSE.startswith(self._buf[-k:]):
                        keep = k
                        break
                r += self._buf[:len(self._buf) - keep]
                self._buf = self._buf[len(self._buf) - keep:]
                return r, c
            if self.state == "after":
                self._buf = self._buf.lstrip("\n")
                if not self._buf:
                    return r, c
                self.state = "content"
                continue
            c += self._buf
            self._buf = ""
            return r, c

    def flush(self) -> tuple[str, str]:
        b, self._buf = self._buf, ""
        if self.state == "reasoning":
            return b, ""
        if self.state == "after":
            return "", b.lstrip("\n")
        return "", b


# ----------------------------------------------------------------------------------------------------------
# response shapes

def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def chat_response(req: GenRequest, content: str, reasoning: str | None, finish_reason: str, use: dict,
                  engine_block: dict, logprobs: dict | None = None) -> dict:
    msg = {"role": "assistant", "content": content}
    if reasoning is not None:
        msg["reasoning_content"] = reasoning
    return {"id": req.id, "object": "chat.completion", "created": req.created, "model": req.model,
            "choices": [{"index": 0, "message": msg, "logprobs": logprobs, "finish_reason": finish_reason}],
            "usage": use, "engine": engine_block}


def completion_response(req: GenRequest, text: str, finish_reason: str, use: dict, engine_block: dict,
                        logprobs: dict | None = None) -> dict:
    return {"id": req.id, "object": "text_completion", "created": req.created, "model": req.model,
            "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}],
            "usage": use, "engine": engine_block}


def chat_chunk(req: GenRequest, delta: dict, finish_reason: str | None = None) -> dict:
    return {"id": req.id, "object": "chat.completion.chunk", "created": req.created, "model": req.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}


def completion_chunk(req: GenRequest, text: str, finish_reason: str | None = None) -> dict:
    return {"id": req.id, "object": "text_completion", "created": req.created, "model": req.model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}]}


def usage_chunk(req: GenRequest, use: dict, engine_block: dict | None = None) -> dict:
    obj = "chat.completion.chunk" if req.kind == "chat" else "text_completion"
    out = {"id": req.id, "object": obj, "created": req.created, "model": req.model, "choices": [], "usage": use}
    if engine_block is not None:
        out["engine"] = engine_block
    return out


class ChunkWriter:
    """Pre-serialized SSE frames for the per-token content chunks (the hot path of streaming): only the text is
    JSON-encoded per token; everything else about the chunk is fixed for the request."""

    def __init__(self, req: GenRequest):
        head = {"id": req.id, "object": "chat.completion.chunk" if req.kind == "chat" else "text_completion",
                "created": req.created, "model": req.model}
        h = json.dumps(head, ensure_ascii=False, separators=(",", ":"))[:-1]
        if req.kind == "chat":
            self._content = (h + ',"choices":[{"index":0,"delta":{"content":').encode()
            self._reasoning = (h + ',"choices":[{"index":0,"delta":{"reasoning_content":').encode()
            self._tail = b'},"logprobs":null,"finish_reason":null}]}\n\n'
        else:
            self._content = (h + ',"choices":[{"index":0,"text":').encode()
            self._reasoning = self._content
            self._tail = b',"logprobs":null,"finish_reason":null}]}\n\n'

    def content(self, text: str) -> bytes:
        return b"data: " + self._content + json.dumps(text, ensure_ascii=False).encode() + self._tail

    def reasoning(self, text: str) -> bytes:
        return b"data: " + self._reasoning + json.dumps(text, ensure_ascii=False).encode() + self._tail


def sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"
