"""Bad input: each a clean 4xx with the right error type and param, and the server still serving afterwards
on the same connection and on a fresh one."""

from __future__ import annotations

import json
import random
import socket

import pytest
import requests

from test_openai_client import rand_text

CHAT = "/v1/chat/completions"
CMPL = "/v1/completions"


@pytest.fixture(scope="module")
def session():
    s = requests.Session()
    yield s
    s.close()


def msgs(rng=None):
    return [{"role": "user", "content": rand_text(rng or random.Random(), 3)}]


def check_ok(served, session):
    for s in (session, requests):
        r = s.post(served.url + CHAT, json={"messages": msgs(), "max_tokens": 2})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] >= 1


def expect(r, status, param=None, code=None, etype="invalid_request_error"):
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["Content-Type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == etype and err["message"]
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    return err


def raw(session, served, path, data: bytes):
    return session.post(served.url + path, data=data, headers={"Content-Type": "application/json"})


FIELD_CASES = [
    ({"temperature": True}, "temperature"),
    ({"temperature": "0.5"}, "temperature"),
    ({"temperature": -0.1}, "temperature"),
    ({"temperature": 7}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_k": 2.5}, "top_k"),
    ({"top_k": -2}, "top_k"),
    ({"top_k": "5"}, "top_k"),
    ({"min_p": 2}, "min_p"),
    ({"seed": "7"}, "seed"),
    ({"seed": 1.25}, "seed"),
    ({"seed": False}, "seed"),
    ({"max_tokens": -1}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 3.5}, "max_tokens"),
    ({"max_completion_tokens": "4"}, "max_completion_tokens"),
    ({"n": 2}, "n"),
    ({"stream": "yes"}, "stream"),
    ({"stop": 5}, "stop"),
    ({"stop": [""]}, "stop"),
    ({"stop": ["a", 3]}, "stop"),
    ({"stop_token_ids": 3}, "stop_token_ids"),
    ({"stop_token_ids": [1, -1]}, "stop_token_ids"),
    ({"stop_token_ids": [10 ** 9]}, "stop_token_ids"),
    ({"logprobs": 2}, "logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 1.5}, "top_logprobs"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"chat_template_kwargs": "thinking"}, "chat_template_kwargs"),
    ({"ignore_eos": 1}, "ignore_eos"),
    ({"model": "no-such-model"}, "model"),
    ({"model": 3}, "model"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]},
     "messages[0].content"),
]


@pytest.mark.parametrize("fields,param", FIELD_CASES, ids=[p + ":" + json.dumps(f)[:30] for f, p in FIELD_CASES])
def test_bad_field(served, session, fields, param):
    body = {"messages": msgs(), "max_tokens": 2, **fields}
    expect(session.post(served.url + CHAT, json=body), 400, param=param)


@pytest.mark.parametrize("literal,param", [("NaN", "temperature"), ("Infinity", "top_p"), ("-Infinity", "min_p")])
def test_nan_and_infinity(served, session, literal, param):
    body = json.dumps({"messages": msgs(), "max_tokens": 2}, allow_nan=True)[:-1] + f', "{param}": {literal}}}'
    err = expect(raw(session, served, CHAT, body.encode()), 400, param=param)
    assert "finite" in err["message"]


def test_malformed_json_and_non_objects(served, session):
    expect(raw(session, served, CHAT, b'{"messages": [{"role": "user", "content": "x"}'), 400)
    expect(raw(session, served, CHAT, b'[1, 2, 3]'), 400)
    expect(raw(session, served, CHAT, b''), 400)
    expect(raw(session, served, CMPL, b'"just a string"'), 400)
    expect(raw(session, served, "/tokenize", b'{"prompt": '), 400)
    check_ok(served, session)


def test_invalid_utf8(served, session):
    body = b'{"messages": [{"role": "user", "content": "caf\xe9 \xff\xfe"}], "max_tokens": 2}'
    err = expect(raw(session, served, CHAT, body), 400)
    assert "UTF-8" in err["message"]
    check_ok(served, session)


def test_body_over_the_cap_is_413(served, session):
    big = json.dumps({"prompt": "a " * (5 * 1024 * 1024), "max_tokens": 2}).encode()
    assert len(big) > 10 * 1024 * 1024
    expect(raw(session, served, CMPL, big), 413)
    check_ok(served, session)


def test_prompt_over_the_context(served, session):
    ctx = served.server.defaults.context
    rng = random.Random()
    ids = [rng.randrange(0, 200) for _ in range(ctx + 5)]
    err = expect(session.post(served.url + CMPL, json={"prompt": ids, "max_tokens": 2}), 400,
                 code="context_length_exceeded")
    assert f"maximum context length is {ctx} tokens" in err["message"]
    # fits alone, but not with max_tokens; streaming is refused before the stream opens (plain JSON 400)
    r = session.post(served.url + CMPL, json={"prompt": ids[:ctx - 4], "max_tokens": 10, "stream": True})
    err = expect(r, 400, code="context_length_exceeded")
    assert f"you requested {ctx - 4 + 10} tokens" in err["message"]
    # a long chat message
    long_msg = [{"role": "user", "content": rand_text(rng, ctx)}]
    expect(session.post(served.url + CHAT, json={"messages": long_msg, "stream": True}), 400,
           code="context_length_exceeded")
    # huge max_tokens
    expect(session.post(served.url + CHAT, json={"messages": msgs(), "max_tokens": 10 ** 9}), 400,
           code="context_length_exceeded")
    expect(session.post(served.url + CHAT, json={"messages": msgs(), "max_tokens": 10 ** 30}), 400,
           param="max_tokens")
    check_ok(served, session)


def test_bad_prompts_and_tokens(served, session):
    vocab = served.server.defaults.vocab_size
    expect(session.post(served.url + CMPL, json={"prompt": [1, vocab + 3], "max_tokens": 2}), 400, param="prompt")
    expect(session.post(served.url + CMPL, json={"prompt": [1, -1], "max_tokens": 2}), 400, param="prompt")
    expect(session.post(served.url + CMPL, json={"prompt": [], "max_tokens": 2}), 400, param="prompt")
    expect(session.post(served.url + CMPL, json={"prompt": ["a", "b"], "max_tokens": 2}), 400, param="prompt")
    expect(session.post(served.url + CMPL, json={"prompt": "", "max_tokens": 2}), 400, param="prompt")
    expect(session.post(served.url + CMPL, json={"max_tokens": 2}), 400, param="prompt")
    expect(session.post(served.url + "/detokenize", json={"tokens": [vocab]}), 400, param="tokens")
    expect(session.post(served.url + "/detokenize", json={"tokens": "abc"}), 400, param="tokens")
    check_ok(served, session)


def test_unknown_route_and_method(served, session):
    err = expect(session.get(served.url + "/v1/nothing-here"), 404, etype="not_found_error")
    assert "/v1/nothing-here" in err["message"]
    expect(session.get(served.url + CHAT), 405)
    check_ok(served, session)


def test_garbage_on_the_socket_does_not_harm(served, session):
    host, port = served.url.rsplit(":", 1)
    with socket.create_connection(("127.0.0.1", int(port)), timeout=10) as s:
        s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http at all\r\n\r\n")
        try:
            s.recv(4096)
        except OSError:
            pass
    # a request that declares a body and then hangs up half way
    with socket.create_connection(("127.0.0.1", int(port)), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"prompt\": \"abc")
    check_ok(served, session)
