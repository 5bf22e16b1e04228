"""Unit tests of the server's pure parts against independent oracles, on fresh random inputs: stop-string
matching, the <think> splitter, incremental detokenization, key checks, the request log under concurrent
writers (threads and processes), and the Prometheus text."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import threading

import pytest

from tensorfold.server import protocol as P
from tensorfold.server.auth import KeyFileError, KeyStore, read_key_file
from tensorfold.server.metrics import Metrics
from tensorfold.server.reqlog import RequestLog

ALPHA = "ab<>/thinkx\n é"


def rand_pieces(rng, text):
    out, i = [], 0
    while i < len(text):
        k = rng.randint(0, 4)
        out.append(text[i:i + k])
        i += k
    return out


def stop_oracle(text, stops):
    """Streaming semantics (as vLLM and the engine's detokenizer): the request stops as soon as a stop string
    is complete; when several complete at the same character, the leftmost wins."""
    for e in range(1, len(text) + 1):
        starts = [e - len(s) for s in stops if text[:e].endswith(s)]
        if starts:
            return text[:min(starts)], True
    return text, False


def test_stop_matcher_random():
    rng = random.Random()
    for _ in range(400):
        text = "".join(rng.choice("abcab ") for _ in range(rng.randint(0, 30)))
        stops = ["".join(rng.choice("abc") for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
        # character by character: exactly the oracle
        m = P.StopMatcher(stops)
        got = "".join(m.feed(ch) for ch in text) + m.flush()
        want, hit = stop_oracle(text, stops)
        assert got == want and (m.matched is not None) == hit, (text, stops)
        # random chunks: a prefix of the text, no stop inside it, and a stop right after it when matched
        m = P.StopMatcher(stops)
        got = "".join(m.feed(p) for p in rand_pieces(rng, text)) + m.flush()
        assert text.startswith(got) and not any(s in got for s in stops)
        if m.matched is not None:
            assert text[len(got):].startswith(m.matched)
        else:
            assert got == text


def split_oracle(text, opens):
    if not opens:
        if not text.startswith("<think>"):
            return None, text
        text = text[len("<think>"):]
    i = text.find("</think>")
    if i < 0:
        return text.lstrip("\n"), ""
    return text[:i].lstrip("\n"), text[i + len("</think>"):].lstrip("\n")


def test_reasoning_splitter_random():
    rng = random.Random()
    for _ in range(600):
        opens = rng.random() < 0.5
        parts = [rng.choice(["<think>", "</think>", "\n", "ab", "x", " ", "é", "<", "</", "think>"])
                 for _ in range(rng.randint(0, 8))]
        text = "".join(parts)
        sp = P.ReasoningSplitter(opens)
        rs, cs = [], []
        for piece in rand_pieces(rng, text):
            r, c = sp.feed(piece)
            rs.append(r)
            cs.append(c)
        r, c = sp.flush()
        rs.append(r)
        cs.append(c)
        want_r, want_c = split_oracle(text, opens)
        assert "".join(cs) == want_c, (text, opens)
        if want_r is None:
            assert not sp.saw_reasoning and "".join(rs) == ""
        else:
            assert sp.saw_reasoning and "".join(rs) == want_r, (text, opens)


def test_text_stream_never_splits_a_character():
    rng = random.Random()
    text = "".join(rng.choice(["a", "é", "中", "🙂", " "]) for _ in range(50))
    data = text.encode()
    ids = list(data)

    def decode(xs):
        return bytes(xs).decode("utf-8", errors="replace")

    ts = P.TextStream(decode)
    out = []
    i = 0
    while i < len(ids):
        k = rng.randint(1, 3)
        d = ts.add(ids[i:i + k])
        assert "\ufffd" not in d
        out.append(d)
        i += k
    out.append(ts.flush())
    assert "".join(out) == text


def test_parse_json_body_errors():
    with pytest.raises(P.ApiError) as e:
        P.parse_json_body(b"\xff{}")
    assert e.value.status == 400 and "UTF-8" in e.value.message
    with pytest.raises(P.ApiError):
        P.parse_json_body(b"[" * 100000)
    assert P.parse_json_body(b'{"a": NaN}')["a"] != 0


def test_keystore(tmp_path):
    ks = KeyStore(["alpha", "beta"])
    assert ks.enabled and ks.check("alpha") and ks.check("beta")
    assert not ks.check("alph") and not ks.check("") and not ks.check(None) and not ks.check("alphaX")
    assert KeyStore().check(None)
    f = tmp_path / "k"
    f.write_text("one\n# c\n two \n")
    f.chmod(0o644)
    with pytest.raises(KeyFileError):
        read_key_file(str(f))
    f.chmod(0o600)
    assert read_key_file(str(f)) == ["one", "two"]
    f.write_text("\n")
    with pytest.raises(KeyFileError):
        read_key_file(str(f))
    with pytest.raises(KeyFileError):
        read_key_file(str(tmp_path / "missing"))


def _writer(path, tag, n, size):
    log = RequestLog(path)
    for i in range(n):
        log.write({"tag": tag, "i": i, "pad": tag[0] * size})
    log.close()


def test_request_log_lines_stay_whole(tmp_path):
    path = str(tmp_path / "req.jsonl")
    rng = random.Random()
    size = rng.randint(20000, 60000)  # well over the pipe-atomic size, several pages per line
    log = RequestLog(path)
    threads = [threading.Thread(target=lambda t=t: [log.write({"tag": f"t{t}", "i": i, "pad": "x" * size})
                                                    for i in range(50)]) for t in range(8)]
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, f"p{k}", 50, size)) for k in range(3)]
    for p in procs:
        p.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    log.close()
    lines = open(path, encoding="utf-8").read().split("\n")
    assert lines[-1] == ""
    recs = [json.loads(ln) for ln in lines[:-1]]
    assert len(recs) == 8 * 50 + 3 * 50
    seen = {(r["tag"], r["i"]) for r in recs}
    assert len(seen) == len(recs)
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"


def test_metrics_text_is_well_formed():
    m = Metrics('m"odel')
    rng = random.Random()
    for _ in range(20):
        m.finished("stop", rng.randint(1, 100), rng.randint(1, 50), rng.random(), 1 + rng.random())
    txt = m.render(1, 2, 0.25)
    for ln in txt.splitlines():
        if ln.startswith("#"):
            continue
        name, value = ln.rsplit(" ", 1)
        float(value)
    assert 'vllm:request_success_total{model_name="m\\"odel",finished_reason="stop"} 20' in txt
    assert 'vllm:time_to_first_token_seconds_bucket{model_name="m\\"odel",le="+Inf"} 20' in txt
    assert "vllm:num_requests_waiting{" in txt and "tensorfold_num_requests_waiting{" in txt


def test_chunk_writer_equals_the_generic_chunks():
    rng = random.Random()
    for kind in ("chat", "completion"):
        req = P.GenRequest(kind=kind, id="x-" + str(rng.random()), created=rng.randrange(1 << 31), model='m"\\ü',
                           prompt_ids=[1], max_tokens=1, temperature=0, top_p=1, top_k=0, min_p=0, seed=0,
                           seed_given=False, stop=[], stop_token_ids=[], stream=True, include_usage=False,
                           ignore_eos=False, draft=True)
        cw = P.ChunkWriter(req)
        for _ in range(50):
            text = "".join(rng.choice(['"', "\\", "\n", "a", "é", "🙂", "\x00", "</", "\u2028"])
                           for _ in range(rng.randint(0, 6)))
            frame = cw.content(text)
            assert frame.startswith(b"data: ") and frame.endswith(b"\n\n")
            want = P.chat_chunk(req, {"content": text}) if kind == "chat" else P.completion_chunk(req, text)
            assert json.loads(frame[6:]) == want
            if kind == "chat":
                assert json.loads(cw.reasoning(text)[6:]) == P.chat_chunk(req, {"reasoning_content": text})
