"""Engine bookkeeping on the cpu backend with the tiny synthetic model: finish rules (max_tokens, stop ids, eos /
ignore_eos, context full), cancel, refusals, slot limits, thread-safe add/cancel, stats, backend faults.
Oracle: a plain loop over ReferenceModel.step + argmax."""

import threading

import numpy as np
import pytest

from tensorfold.engine import ContextLengthError, SamplingParams, token_sha


def greedy_oracle(ref, prompt, n, valid):
    st = ref.new_state()
    for t in prompt:
        logits = ref.step(st, t)
    out = []
    for _ in range(n):
        t = int(np.argmax(logits[:valid]))
        out.append(t)
        logits = ref.step(st, t)
    return out


def drain(engine, limit=10_000):
    outs = {}
    for _ in range(limit):
        if not engine.has_unfinished():
            return outs
        for o in engine.step():
            outs.setdefault(o.request_id, []).append(o)
    raise AssertionError("engine did not finish")


def test_greedy_max_tokens_and_slot_release(make_engine, ref, valid_vocab):
    eng = make_engine(tokenizer=False)
    prompt = [5, 17, 99, 3, 200, 41, 7, 8, 9, 10, 11]  # 11 tokens, chunk 8 -> two chunks
    got = eng.generate(prompt, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    assert got == greedy_oracle(ref, prompt, 12, valid_vocab)
    assert eng.backend.slots_in_use == 0 and not eng.has_unfinished()


def test_stop_token_and_eos(make_engine, ref, valid_vocab):
    prompt = [1, 2, 3]
    want = greedy_oracle(ref, prompt, 20, valid_vocab)
    eng = make_engine(tokenizer=False)
    stop = want[5]
    first = want.index(stop)
    rid = eng.add_request(prompt, SamplingParams(temperature=0, max_tokens=20, stop_token_ids=[stop],
                                                 ignore_eos=True))  # stop_token_ids hold even with ignore_eos
    outs = drain(eng)[rid]
    ids = [t for o in outs for t in o.new_token_ids]
    assert ids == want[: first + 1]  # the stop id is included in the ids
    assert outs[-1].finished and outs[-1].finish_reason == "stop" and outs[-1].stop_reason == stop
    assert outs[-1].completion_tokens == first + 1 and outs[-1].prompt_tokens == 3
    # the model's eos ids stop a request unless ignore_eos
    eos = want[3]
    eng2 = make_engine(tokenizer=False, eos=(eos,))
    assert eng2.generate(prompt, SamplingParams(temperature=0, max_tokens=20)) == want[: want.index(eos) + 1]
    assert eng2.generate(prompt, SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)) == want


def test_stop_string_and_text_with_greedy(make_engine, ref, valid_vocab, tiny_tok):
    prompt = tiny_tok.encode("once upon a time")
    want = greedy_oracle(ref, prompt, 30, valid_vocab)
    text = tiny_tok.decode(want, skip_special=True)
    eng = make_engine(eos=())
    rid = eng.add_request(prompt, SamplingParams(temperature=0, max_tokens=30))
    outs = drain(eng)[rid]
    assert "".join(o.text for o in outs) == text and outs[-1].finish_reason == "length"
    stop = text.strip()[2:4]
    assert len(stop) == 2
    rid = eng.add_request(prompt, SamplingParams(temperature=0, max_tokens=30, stop=[stop, "\x00never"]))
    outs = drain(eng)[rid]
    assert "".join(o.text for o in outs) == text[: text.find(stop)]
    assert outs[-1].finish_reason == "stop" and outs[-1].stop_reason == stop


def test_context_refusal_and_context_full(make_engine):
    eng = make_engine(context=16)
    with pytest.raises(ContextLengthError, match="maximum context length is 16") as e:
        eng.add_request(list(range(10)), SamplingParams(max_tokens=7))
    assert (e.value.context, e.value.prompt_tokens, e.value.requested) == (16, 10, 17)
    assert isinstance(e.value, ValueError)
    with pytest.raises(ContextLengthError):
        eng.add_request(list(range(16)), SamplingParams())
    assert not eng.has_unfinished() and eng.stats()["waiting"] == 0  # nothing was queued
    # exactly fitting, and max_tokens=None runs until the context is full
    assert len(eng.generate(list(range(10)), SamplingParams(max_tokens=6, ignore_eos=True))) == 6
    rid = eng.add_request(list(range(10)), SamplingParams(ignore_eos=True))
    last = drain(eng)[rid][-1]
    assert last.finish_reason == "length" and last.completion_tokens == 6


def test_bad_requests(make_engine):
    eng = make_engine()
    for bad, exc in [([], ValueError), ([1, 10**6], ValueError), ([1, -1], ValueError), ([1, 2.0], TypeError),
                     ("hello", TypeError)]:
        with pytest.raises(exc):
            eng.add_request(bad, SamplingParams())
    with pytest.raises(TypeError, match="SamplingParams"):
        eng.add_request([1], {"temperature": 0})
    eng.add_request([1], SamplingParams(max_tokens=1), request_id="x")
    with pytest.raises(ValueError, match="already in use"):
        eng.add_request([1], SamplingParams(max_tokens=1), request_id="x")
    assert eng.stats()["waiting"] == 1
    drain(eng)


def test_cancel_waiting_and_running(make_engine):
    eng = make_engine(parallel=1)
    p = SamplingParams(temperature=0, max_tokens=50, ignore_eos=True)
    a = eng.add_request([1, 2, 3], p)
    b = eng.add_request([4, 5, 6], p)
    eng.step()
    eng.step()
    assert eng.stats()["running"] == 1 and eng.stats()["waiting"] == 1
    assert eng.cancel(a) and eng.cancel(b)
    outs = eng.step()
    by = {o.request_id: o for o in outs}
    assert by[a].finished and by[a].finish_reason == "abort" and by[b].finish_reason == "abort"
    assert by[a].completion_tokens == 2 and by[b].completion_tokens == 0
    assert not eng.has_unfinished() and eng.backend.slots_in_use == 0
    assert not eng.cancel(a)  # no longer live
    assert eng.stats()["requests_aborted"] == 2


def test_parallel_limit_and_stats(make_engine):
    eng = make_engine(parallel=3, prompt_chunk=4)
    rng = np.random.default_rng(0)
    rids = [eng.add_request(list(rng.integers(0, 300, int(rng.integers(1, 20)))),
                            SamplingParams(temperature=0.7, max_tokens=int(rng.integers(1, 8)), ignore_eos=True))
            for _ in range(10)]
    seen = {}
    while eng.has_unfinished():
        for o in eng.step():
            seen.setdefault(o.request_id, []).append(o)
        st = eng.stats()
        assert st["running"] <= 3 and eng.backend.slots_in_use <= 3
    assert set(seen) == set(rids) and all(v[-1].finish_reason == "length" for v in seen.values())
    st = eng.stats()
    assert st["generation_tokens_total"] == sum(v[-1].completion_tokens for v in seen.values())
    assert st["prompt_tokens_total"] == sum(v[-1].prompt_tokens for v in seen.values())
    assert st["requests_finished"] == 10 and st["running"] == 0 and st["kv_cache_usage"] == 0.0


def test_add_and_cancel_from_other_threads(make_engine):
    eng = make_engine(parallel=2)
    p = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    want = eng.generate([7, 8, 9], p)
    done, results = threading.Event(), {}

    def engine_thread():
        while not done.is_set() or eng.has_unfinished():
            for o in eng.step():
                results.setdefault(o.request_id, []).append(o)

    th = threading.Thread(target=engine_thread)
    th.start()
    rids = []

    def client(i):
        rids.append(eng.add_request([7, 8, 9], p, request_id=f"c{i}"))
        if i % 3 == 0:
            eng.cancel(f"c{i}")

    clients = [threading.Thread(target=client, args=(i,)) for i in range(24)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    done.set()
    th.join(timeout=60)
    assert not th.is_alive()
    assert sorted(results) == sorted(rids)
    for rid, outs in results.items():
        ids = [t for o in outs for t in o.new_token_ids]
        if outs[-1].finish_reason == "abort":
            assert ids == want[: len(ids)]
        else:
            assert ids == want and outs[-1].finish_reason == "length"


def test_token_sha():
    import hashlib

    assert token_sha([1, 22, 333]) == hashlib.sha256(b"1,22,333").hexdigest()[:16]
    assert token_sha([]) == hashlib.sha256(b"").hexdigest()[:16]


def test_backend_fault_aborts_running_and_engine_recovers(make_engine):
    eng = make_engine(parallel=2, tokenizer=False)
    p = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    want = eng.generate([3, 4, 5], p)
    real = eng.backend.decode_sample
    calls = {"n": 0}

    def flaky(slots, ids, rows):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("device lost")
        return real(slots, ids, rows)

    eng.backend.decode_sample = flaky
    a = eng.add_request([3, 4, 5], p)
    b = eng.add_request([6, 7], p)
    c = eng.add_request([3, 4, 5], p)  # waits: parallel=2
    with pytest.raises(RuntimeError, match="device lost"):
        for _ in range(10):
            eng.step()
    assert eng.backend.slots_in_use == 0 and not eng.cancel(a) and not eng.cancel(b)
    assert eng.stats()["running"] == 0 and eng.has_unfinished()  # c is still queued
    outs = drain(eng)
    assert [t for o in outs[c] for t in o.new_token_ids] == want
    assert eng.generate([3, 4, 5], p) == want and not eng.has_unfinished()
