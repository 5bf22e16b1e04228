"""logprobs over HTTP (`/v1/completions` `logprobs: k`, `/v1/chat/completions` `logprobs` + `top_logprobs`), whole
and streamed, on the shared server (embedded default model, cpu backend).

Oracle: the default model's ReferenceModel run here over the prompt ids (from /tokenize, one prompt forward), then
stepped with greedy argmax (no engine or server code), its rows turned into log-softmax in float64 over the valid
vocabulary; the token strings come from the tokenizer's own bytes of the oracle's ids. Tolerance TOL on
log-probabilities: the engine prefills the prompt in prompt mode (chunks), the oracle steps it, and float32 rounds
differently (at most 2.5e-3 over 40 random prompts on this model; a row from the wrong position is off by units).
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import requests

WORDS = "the quick brown fox jumps over lazy dog river capital numbers answer small keys values".split()
CMPL, CHAT = "/v1/completions", "/v1/chat/completions"
TOL = 1e-2


@pytest.fixture(scope="module")
def oracle():
    from tensorfold.engine.engine import default_model_path
    from tensorfold.model.checkpoint import load_checkpoint
    from tensorfold.reference.model import ReferenceModel
    from tensorfold.tokenizer import Tokenizer

    d = default_model_path()
    ck = load_checkpoint(d)
    ref = ReferenceModel(ck, ck.config, kv_cache="bf16")  # the cpu backend's cache (Engine.from_model's default)
    tok = Tokenizer.from_dir(d)
    return ref, tok, min(tok.vocab_size, ref.config.vocab_size)


def _greedy(oracle, ids, n):
    """(ids, log-softmax rows) of n greedy steps after the prompt ``ids``."""
    ref, _, valid = oracle
    st = ref.new_state()
    lg = ref.prompt(st, list(ids))[-1]
    out, rows = [], []
    for _ in range(n):
        x = np.asarray(lg, np.float64)[:valid]
        ls = x - (x.max() + np.log(np.exp(x - x.max()).sum()))
        t = int(np.argmax(ls))
        out.append(t)
        rows.append(ls)
        lg = ref.step(st, t)
    return out, rows


def _agreeing(pieces, ids, rows, tok) -> int:
    """How many leading tokens the server and the oracle's greedy stream share. They may part only at a near tie
    (the oracle's top two within 2 TOL: prompt-mode and step-mode float32 differ); asserted, and nothing after a
    parting is comparable."""
    for i, (p, t, row) in enumerate(zip(pieces, ids, rows)):
        if p != _piece(tok, t):
            top2 = np.sort(row)[-2:]
            assert top2[1] - top2[0] <= 2 * TOL, (i, p, _piece(tok, t))
            return i
    return min(len(pieces), len(ids))


def _piece(tok, t):
    return bytes(tok.token_bytes(t)).decode("utf-8", errors="replace")


def _prompt(served, **kw):
    return requests.post(served.url + "/tokenize", json=kw).json()["tokens"]


def _sse(r):
    out = []
    for ln in r.iter_lines():
        if ln.startswith(b"data: ") and ln != b"data: [DONE]":
            out.append(json.loads(ln[6:]))
    return out


def test_completion_logprobs_match_the_reference(served, oracle):
    rng = random.Random()
    text = " ".join(rng.choice(WORDS) for _ in range(6))
    k, n = 3, 5
    body = {"prompt": text, "max_tokens": n, "temperature": 0, "ignore_eos": True, "logprobs": k}
    r = requests.post(served.url + CMPL, json=body)
    assert r.status_code == 200, r.text
    ch = r.json()["choices"][0]
    lp = ch["logprobs"]
    ids, rows = _greedy(oracle, _prompt(served, prompt=text), n)
    _, tok, _ = oracle
    m = _agreeing(lp["tokens"], ids, rows, tok)
    assert np.allclose(lp["token_logprobs"][:m], [row[t] for row, t in zip(rows[:m], ids[:m])], atol=TOL)
    for row, top, t in zip(rows[:m], lp["top_logprobs"], ids):
        best = np.argsort(-row, kind="stable")[:k]
        assert len(top) <= k and list(top)[0] == _piece(tok, t)  # greedy: the drawn token is the first
        assert np.allclose(sorted(top.values(), reverse=True), row[best][: len(top)], atol=TOL)
    assert lp["text_offset"] == list(np.cumsum([0] + [len(p) for p in lp["tokens"]])[:-1])
    if m == n and not set(ids) & set(tok.special_ids):  # the text skips special tokens; their entries stay
        assert ch["text"] == "".join(lp["tokens"])

    # streamed: the same entries, split over chunks, offsets running on
    chunks = _sse(requests.post(served.url + CMPL, json={**body, "stream": True}, stream=True))
    got = [c["choices"][0]["logprobs"] for c in chunks if c.get("choices") and c["choices"][0]["logprobs"]]
    cat = {key: sum((g[key] for g in got), []) for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset")}
    assert cat == lp


def test_chat_logprobs_whole_and_streamed(served, oracle):
    rng = random.Random()
    msgs = [{"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(5))}]
    kw = {"chat_template_kwargs": {"enable_thinking": False}}
    body = {"messages": msgs, "max_tokens": 4, "temperature": 0, "ignore_eos": True, "logprobs": True,
            "top_logprobs": 2, **kw}
    r = requests.post(served.url + CHAT, json=body)
    assert r.status_code == 200, r.text
    whole = r.json()
    content = whole["choices"][0]["logprobs"]["content"]
    ids, rows = _greedy(oracle, _prompt(served, messages=msgs, **kw), 4)
    _, tok, _ = oracle
    assert len(content) == whole["usage"]["completion_tokens"] == 4
    m = _agreeing([e["token"] for e in content], ids, rows, tok)
    for e, t, row in zip(content[:m], ids, rows):
        assert e["token"] == _piece(tok, t) and bytes(e["bytes"]) == bytes(tok.token_bytes(t))
        assert abs(e["logprob"] - row[t]) <= TOL
        assert len(e["top_logprobs"]) == 2 and e["top_logprobs"][0]["token"] == e["token"]
        assert np.allclose([a["logprob"] for a in e["top_logprobs"]], np.sort(row)[::-1][:2], atol=TOL)
    chunks = _sse(requests.post(served.url + CHAT, json={**body, "stream": True}, stream=True))
    streamed = sum((c["choices"][0]["logprobs"]["content"] for c in chunks
                    if c.get("choices") and c["choices"][0].get("logprobs")), [])
    assert streamed == content
    # without logprobs the field stays null, and the tokens are the same
    plain = requests.post(served.url + CHAT, json={k: v for k, v in body.items()
                                                   if k not in ("logprobs", "top_logprobs")}).json()
    assert plain["choices"][0]["logprobs"] is None
    assert plain["engine"]["token_sha"] == whole["engine"]["token_sha"]


@pytest.mark.parametrize("path,fields,param", [
    (CHAT, {"top_logprobs": 2}, "top_logprobs"),
    (CHAT, {"logprobs": "yes"}, "logprobs"),
    (CMPL, {"logprobs": 21}, "logprobs"),
    (CMPL, {"logprobs": True}, "logprobs"),
    (CMPL, {"top_logprobs": 2}, "top_logprobs"),
])
def test_logprobs_bad_fields(served, path, fields, param):
    base = {"messages": [{"role": "user", "content": "hi"}]} if path == CHAT else {"prompt": "hi"}
    r = requests.post(served.url + path, json={**base, "max_tokens": 2, **fields})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_completion_echo_whole_and_streamed(served):
    """``echo``: the prompt's text comes first (a string prompt as sent; token ids as their text), then the same
    completion as without echo; max_tokens 0 without echo + logprobs is refused."""
    rng = random.Random()
    text = " ".join(rng.choice(WORDS) for _ in range(5))
    body = {"prompt": text, "max_tokens": 4, "temperature": 0, "ignore_eos": True}
    plain = requests.post(served.url + CMPL, json=body).json()["choices"][0]["text"]
    r = requests.post(served.url + CMPL, json={**body, "echo": True}).json()
    assert r["choices"][0]["text"] == text + plain
    ids = _prompt(served, prompt=text)
    r2 = requests.post(served.url + CMPL, json={**body, "prompt": ids, "echo": True}).json()
    det = requests.post(served.url + "/detokenize", json={"tokens": ids}).json()["prompt"]
    assert r2["choices"][0]["text"] == det + plain
    chunks = _sse(requests.post(served.url + CMPL, json={**body, "echo": True, "stream": True}, stream=True))
    assert "".join(c["choices"][0]["text"] for c in chunks if c.get("choices")) == text + plain
    bad = requests.post(served.url + CMPL, json={**body, "max_tokens": 0})  # 0 only to score a prompt
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "max_tokens"
    bad = requests.post(served.url + CHAT, json={"messages": [{"role": "user", "content": "x"}], "echo": True})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "echo"


def _prompt_oracle(oracle, ids):
    """log-softmax rows after ids[:1], ids[:2], ... (step loop): row i - 1 scores token i."""
    ref, _, valid = oracle
    st = ref.new_state()
    rows = []
    for t in ids[:-1]:
        x = np.asarray(ref.step(st, t), np.float64)[:valid]
        rows.append(x - (x.max() + np.log(np.exp(x - x.max()).sum())))
    return rows


@pytest.mark.parametrize("max_tokens", [0, 1])
def test_echo_logprobs_score_the_prompt(served, oracle, max_tokens):
    """Scoring (lm-eval's loglikelihood, vLLM's echo + logprobs): the prompt's tokens come back with their
    log-probabilities (the first null), then max_tokens generated ones; whole and streamed agree. Oracle: the step
    loop over the prompt ids; TOL (prompt mode against step mode, float32)."""
    rng = random.Random()
    text = " ".join(rng.choice(WORDS) for _ in range(7))
    body = {"prompt": text, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "echo": True,
            "logprobs": 1}
    r = requests.post(served.url + CMPL, json=body)
    assert r.status_code == 200, r.text
    ch = r.json()["choices"][0]
    lp = ch["logprobs"]
    ids = _prompt(served, prompt=text)
    _, tok, _ = oracle
    n = len(ids)
    assert len(lp["tokens"]) == n + max_tokens and lp["tokens"][:n] == [_piece(tok, t) for t in ids]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    rows = _prompt_oracle(oracle, ids)
    for i in range(1, n):
        want = rows[i - 1][ids[i]]
        assert abs(lp["token_logprobs"][i] - want) <= TOL, i
        assert len(lp["top_logprobs"][i]) == 1
    assert ch["text"].startswith(text) and r.json()["usage"]["completion_tokens"] == max_tokens
    assert lp["text_offset"] == list(np.cumsum([0] + [len(p) for p in lp["tokens"]])[:-1])
    chunks = _sse(requests.post(served.url + CMPL, json={**body, "stream": True}, stream=True))
    got = [c["choices"][0]["logprobs"] for c in chunks if c.get("choices") and c["choices"][0]["logprobs"]]
    cat = {key: sum((g[key] for g in got), []) for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset")}
    assert cat == lp
    assert "".join(c["choices"][0]["text"] for c in chunks if c.get("choices")) == ch["text"]
