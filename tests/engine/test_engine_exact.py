"""Exactness of the engine on the cpu backend with the real ReferenceModel on a tiny synthetic checkpoint.

Oracles: a plain loop over `ReferenceModel.step` + argmax (no engine code), the same stream run alone, and a
one-shot prompt forward. Inputs are random ids from fixed-seed generators (reproducible; the seeds are in the
test names).
"""

import numpy as np
import pytest

from tensorfold.engine import Engine, SamplingParams
from tensorfold.engine.cpu_backend import CpuBackend


def rand_prompt(rng, n, vocab):
    return [int(t) for t in rng.integers(0, vocab, n)]


def step_loop_greedy(ref, prompt, n, valid):
    st = ref.new_state()
    for t in prompt:
        logits = ref.step(st, t)
    out = []
    for _ in range(n):
        t = int(np.argmax(logits[:valid]))
        out.append(t)
        logits = ref.step(st, t)
    return out


@pytest.mark.parametrize("seed,plen,chunk", [(0, 5, 512), (1, 23, 7), (2, 1, 4)])
def test_greedy_equals_step_loop(tiny_dir, ref, valid_vocab, seed, plen, chunk):
    rng = np.random.default_rng(seed)
    prompt = rand_prompt(rng, plen, valid_vocab)
    eng = Engine.from_model(tiny_dir, backend="cpu", parallel=2, prompt_chunk=chunk)
    assert eng.backend.name == "cpu" and eng.valid_vocab == valid_vocab
    got = eng.generate(prompt, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    assert got == step_loop_greedy(ref, prompt, 12, valid_vocab)


def run_all(eng, jobs, rounds_before=None):
    """jobs: {name: (prompt, params, submit_round)}; returns {name: token ids}."""
    rids, toks, r = {}, {}, 0
    pending = dict(jobs)
    while pending or eng.has_unfinished():
        for name, (prompt, params, at) in list(pending.items()):
            if at <= r:
                rids[eng.add_request(prompt, params)] = name
                del pending[name]
        for o in eng.step():
            toks.setdefault(rids[o.request_id], []).extend(o.new_token_ids)
        r += 1
        assert r < 5000
    return toks


def test_stream_identical_alone_and_beside_others(tiny_dir, valid_vocab):
    rng = np.random.default_rng(11)
    samp = lambda seed, n: SamplingParams(temperature=0.8, top_p=0.95, seed=seed, max_tokens=n, ignore_eos=True)  # noqa
    jobs = {
        "a": (rand_prompt(rng, 9, valid_vocab), samp(1, 10), 2),
        "long": (rand_prompt(rng, 150, valid_vocab), samp(2, 6), 0),
        "c": (rand_prompt(rng, 3, valid_vocab), samp(3, 14), 0),
        "d": (rand_prompt(rng, 40, valid_vocab), SamplingParams(temperature=0.8, max_tokens=5, ignore_eos=True), 1),
        "e": (rand_prompt(rng, 17, valid_vocab), samp(5, 8), 3),
    }
    together = run_all(Engine.from_model(tiny_dir, backend="cpu", parallel=3, prompt_chunk=32), jobs)
    alone_eng = Engine.from_model(tiny_dir, backend="cpu", parallel=1, prompt_chunk=32)
    for name, (prompt, params, _) in jobs.items():
        alone = alone_eng.generate(prompt, params)
        assert together[name] == alone, name
        assert len(alone) == params.max_tokens
    # sampling is really on: other seeds change the streams (the tiny tied model likes to repeat a token, so
    # ask several seeds on several prompts)
    outs = {(name, tuple(alone_eng.generate(p, params.with_(seed=s)))) for name in ("a", "e", "c")
            for p, params, _ in [jobs[name]] for s in range(3)}
    assert len({o for o in outs}) > 3


def test_chunked_prompt_matches_one_shot(ref, valid_vocab):
    rng = np.random.default_rng(5)
    prompt = rand_prompt(rng, 45, valid_vocab)
    V = ref.config.vocab_size
    one, chunked = CpuBackend(ref, 1, 256), CpuBackend(ref, 1, 256)
    s1, s2 = one.new_slot(), chunked.new_slot()
    l1 = one.prefill(s1, prompt, 0)
    for a in range(0, len(prompt), 7):
        l2 = chunked.prefill(s2, prompt[a:a + 7], a, want_logits=a + 7 >= len(prompt))
    assert l1.shape == l2.shape == (V,)
    rel = lambda x, y: float(np.max(np.abs(x - y)) / np.max(np.abs(y)))  # noqa: E731
    assert rel(l2, l1) < 1e-4
    # and the decode that follows
    t = int(np.argmax(l1[:valid_vocab]))
    assert int(np.argmax(l2[:valid_vocab])) == t
    for _ in range(4):
        d1, d2 = one.decode([s1], [t])[0], chunked.decode([s2], [t])[0]
        assert rel(d2, d1) < 1e-4
        t = int(np.argmax(d1[:valid_vocab]))
        assert int(np.argmax(d2[:valid_vocab])) == t
    with pytest.raises(ValueError, match="starts at"):
        chunked.prefill(s2, [1], 3)


def test_text_and_stop_string_with_real_tokenizer(tiny_dir, valid_vocab):
    eng = Engine.from_model(tiny_dir, backend="cpu", parallel=1)
    tok = eng.tokenizer
    prompt = tok.encode("hello world")
    params = SamplingParams(temperature=0.7, seed=4, max_tokens=40, ignore_eos=True)
    rid = eng.add_request(prompt, params)
    ids, text = [], ""
    while eng.has_unfinished():
        for o in eng.step():
            ids += o.new_token_ids
            text += o.text
    assert text == tok.decode(ids, skip_special=True)
    assert rid and len(ids) == 40
    plain = text
    # a stop string taken from the middle of that text cuts it there (the same stream: same seed, same prompt)
    stop = plain[len(plain) // 2: len(plain) // 2 + 3]
    if len(stop) < 3:
        pytest.skip("the tiny model produced too little text")
    eng.add_request(prompt, params.with_(stop=[stop]))
    text2, last = "", None
    while eng.has_unfinished():
        for o in eng.step():
            text2 += o.text
            last = o
    assert text2 == plain[: plain.find(stop)]
    assert last.finish_reason == "stop" and last.stop_reason == stop


def test_backend_choice_and_refusals(tiny_dir):
    # the CUDA simulator is on in tests (conftest), so "auto" must fall back to the cpu backend
    eng = Engine.from_model(tiny_dir, backend="auto", parallel=2, context=64)
    assert eng.backend.name == "cpu" and eng.context == 64 and eng.parallel == 2
    assert "backend cpu" in eng.summary() and "weights mlx affine 4-bit g64" in eng.summary()
    with pytest.raises(RuntimeError, match="cuda"):
        Engine.from_model(tiny_dir, backend="cuda")
    with pytest.raises(ValueError, match="kv_cache"):
        Engine.from_model(tiny_dir, backend="cpu", kv_cache="int3")
    with pytest.raises((FileNotFoundError, ValueError), match="no such directory"):
        Engine.from_model(str(tiny_dir) + "-missing", backend="cpu")


def test_sampled_tokens_equal_plain_loop_with_reference_sampler(tiny_dir, ref, valid_vocab):
    """Sampling on: token k of a request is sample(logits, ..., seed, position = prompt_len + k)."""
    from tensorfold.reference.sampling import sample
    from tensorfold.sampling import derive_seed

    rng = np.random.default_rng(21)
    prompt = rand_prompt(rng, 13, valid_vocab)
    eng = Engine.from_model(tiny_dir, backend="cpu", parallel=2, prompt_chunk=5)
    for params, seed in [(SamplingParams(temperature=1.3, top_k=50, top_p=0.9, seed=77, max_tokens=10,
                                         ignore_eos=True), 77),
                         (SamplingParams(temperature=1.0, min_p=0.05, max_tokens=10, ignore_eos=True),
                          derive_seed(prompt))]:
        st = ref.new_state()
        logits = ref.prompt(st, prompt)[-1]
        want = []
        for k in range(10):
            t = sample(logits, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
                       min_p=params.min_p, seed=seed, position=len(prompt) + k, valid_vocab=valid_vocab)
            want.append(int(t))
            logits = ref.step(st, t)
        assert eng.generate(prompt, params) == want


@pytest.mark.parametrize("kv", ["fp8", "bf16"])
def test_kv_cache_formats_follow_their_reference_twin(tiny_dir, valid_vocab, kv):
    """The cpu backend's cache format is the ReferenceModel's: greedy equals a step loop on a model with that cache,
    and the fp8 cache really changes the logits (vs the exact cache)."""
    from tensorfold.model.checkpoint import load_checkpoint
    from tensorfold.reference.model import ReferenceModel

    ck = load_checkpoint(tiny_dir)
    twin, exact = ReferenceModel(ck, ck.config, kv_cache=kv), ReferenceModel(ck, ck.config)
    prompt = rand_prompt(np.random.default_rng(8), 30, valid_vocab)
    eng = Engine.from_model(tiny_dir, backend="cpu", parallel=1, kv_cache=kv, prompt_chunk=16)
    assert f"kv cache {kv}" in eng.summary()
    got = eng.generate(prompt, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    assert got == step_loop_greedy(twin, prompt, 8, valid_vocab)
    s1, s2 = twin.new_state(), exact.new_state()
    d = np.max(np.abs(twin.prompt(s1, prompt)[-1] - exact.prompt(s2, prompt)[-1]))
    assert d > 0
