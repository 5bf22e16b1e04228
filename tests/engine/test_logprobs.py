"""Log-probabilities of drawn tokens (`SamplingParams.logprobs`, `engine.logprobs`) on the cpu backend.

Oracle: the ReferenceModel's own step loop over the prompt and the engine's output (no engine code), with the
log-softmax taken here in float64 over the valid vocabulary (tolerance TOL below). Checked: every drawn token has
an entry; its log-probability and the top-k alternatives (values; ids where no near tie makes them uncertain)
match the oracle's row; greedy draws are the
first alternative; a sampled stream (temperature, top-p) reports the raw model distribution, not the filtered
one; requests without logprobs get none, also beside requests with them, and their tokens do not change.
"""

import numpy as np
import pytest

from tensorfold.engine import SamplingParams
from tensorfold.engine.logprobs import FLOOR, token_entry

# The engine prefills prompts in prompt mode and the oracle steps them: float32 rounding differs. Measured on this
# tiny model over 40 random prompts and chunkings: at most 3.6e-4 in a log-probability. A row taken from the wrong
# position is off by units.
TOL = 2e-3


def _oracle_rows(ref, prompt, out):
    """Logits rows the tokens of ``out`` were drawn from: step loop over prompt + out[:-1]."""
    st = ref.new_state()
    for t in prompt:
        lg = ref.step(st, t)
    rows = [np.asarray(lg, np.float64)]
    for t in out[:-1]:
        rows.append(np.asarray(ref.step(st, t), np.float64))
    return rows


def _log_softmax(x, valid):
    x = x[:valid]
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


def _run(eng, reqs):
    """reqs: {name: (prompt, params)} submitted together; -> {name: (ids, entries or None)}."""
    names = {eng.add_request(p, sp): n for n, (p, sp) in reqs.items()}
    ids = {n: [] for n in reqs}
    lps = {n: None for n in reqs}
    while eng.has_unfinished():
        for o in eng.step():
            n = names[o.request_id]
            ids[n].extend(o.new_token_ids)
            if o.logprobs is not None:
                assert len(o.logprobs) == len(o.new_token_ids)
                lps[n] = (lps[n] or []) + list(o.logprobs)
    return {n: (ids[n], lps[n]) for n in reqs}


@pytest.mark.parametrize("k", [0, 3])
def test_logprobs_match_the_step_loop(make_engine, ref, valid_vocab, k):
    rng = np.random.default_rng()
    prompts = [[int(t) for t in rng.integers(0, valid_vocab, n)] for n in (5, 13)]
    eng = make_engine(parallel=3, prompt_chunk=4)
    greedy = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logprobs=k)
    hot = SamplingParams(temperature=1.3, top_p=0.8, seed=int(rng.integers(1 << 30)), max_tokens=6, ignore_eos=True,
                         logprobs=k)
    plain = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    res = _run(eng, {"greedy": (prompts[0], greedy), "hot": (prompts[1], hot), "plain": (prompts[0], plain)})
    assert res["plain"][1] is None
    assert res["plain"][0] == res["greedy"][0]  # asking for logprobs does not change the tokens
    for name in ("greedy", "hot"):
        out, ent = res[name]
        prompt = prompts[0] if name == "greedy" else prompts[1]
        assert ent is not None and len(ent) == len(out) == 6
        for row, tok, (t, lp, top) in zip(_oracle_rows(ref, prompt, out), out, ent):
            ls = _log_softmax(row, valid_vocab)
            assert t == tok
            assert abs(lp - max(FLOOR, ls[tok])) <= TOL, (name, lp, ls[tok])
            assert len(top) == k
            order = sorted(range(valid_vocab), key=lambda i: (-ls[i], i))[: k + 1]
            if k and min(-np.diff(ls[order])) > 2 * TOL:  # no near tie within the top k + 1: the ids are certain
                assert [i for i, _ in top] == order[:k]
            assert np.allclose([v for _, v in top], ls[order[:k]], atol=TOL)
            assert all(a[1] >= b[1] for a, b in zip(top, top[1:]))
            if name == "greedy" and k:
                assert top[0][0] == tok
    # the sampled stream reports the model's distribution: it sums to one over the valid vocabulary
    row = _oracle_rows(ref, prompts[1], res["hot"][0])[0]
    assert abs(np.exp(_log_softmax(row, valid_vocab)).sum() - 1) < 1e-9


def test_token_entry_ties_floor_and_padding():
    rng = np.random.default_rng()
    x = rng.standard_normal(50).astype(np.float32)
    x[[7, 11, 30]] = x.max() + 1.0  # a three-way tie at the top: ordered by id
    x[45:] = 1e4  # padding ids beyond the valid vocabulary never count
    t, lp, top = token_entry(x, 11, 4, 45)
    assert t == 11 and [i for i, _ in top[:3]] == [7, 11, 30]
    ls = _log_softmax(x.astype(np.float64), 45)
    assert abs(lp - ls[11]) < 1e-12 and np.allclose([v for _, v in top], np.sort(ls)[::-1][:4])
    y = np.zeros(10)
    y[0] = 1e5
    _, lp2, top2 = token_entry(y, 3, 2, 10)
    assert lp2 == FLOOR and top2[0] == (0, 0.0) and top2[1][1] == FLOOR


def test_logprobs_bounds():
    with pytest.raises(ValueError, match="logprobs"):
        SamplingParams(logprobs=21)
    with pytest.raises(ValueError, match="logprobs"):
        SamplingParams(logprobs=-1)
    with pytest.raises(TypeError, match="logprobs"):
        SamplingParams(logprobs=1.5)
    assert SamplingParams(logprobs=20).logprobs == 20


@pytest.mark.parametrize("chunk", [4, 64])
def test_prompt_logprobs_match_the_step_loop(make_engine, ref, valid_vocab, chunk):
    """``prompt_logprobs``: None for the first prompt token, then each token's entry from the row before it --
    across prompt chunks (chunk 4: the previous chunk's last row predicts a chunk's first token). max_tokens 0
    scores only ("length", no token); a request without it beside them keeps its tokens."""
    rng = np.random.default_rng()
    prompt = [int(t) for t in rng.integers(0, valid_vocab, 11)]
    other = [int(t) for t in rng.integers(0, valid_vocab, 7)]
    eng = make_engine(parallel=3, prompt_chunk=chunk)
    score = SamplingParams(temperature=0, max_tokens=0, prompt_logprobs=2)
    both = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True, prompt_logprobs=0, logprobs=1)
    plain = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    names = {eng.add_request(prompt, score): "score", eng.add_request(prompt, both): "both",
             eng.add_request(other, plain): "plain"}
    got = {n: {"ids": [], "plp": None, "finish": None, "outs": 0} for n in names.values()}
    while eng.has_unfinished():
        for o in eng.step():
            g = got[names[o.request_id]]
            g["ids"] += o.new_token_ids
            g["outs"] += 1
            if o.prompt_logprobs is not None:
                assert g["plp"] is None  # reported once
                g["plp"] = o.prompt_logprobs
            if o.finished:
                g["finish"] = o.finish_reason
    assert got["score"]["ids"] == [] and got["score"]["finish"] == "length"
    assert got["plain"]["plp"] is None
    alone = make_engine(parallel=1).generate(other, plain)
    assert got["plain"]["ids"] == alone
    rows = _oracle_rows(ref, prompt[:1], prompt[1:] + [0])  # rows after prompt[:1], prompt[:2], ...
    for name, k in (("score", 2), ("both", 0)):
        plp = got[name]["plp"]
        assert plp is not None and len(plp) == len(prompt) and plp[0] is None
        for i in range(1, len(prompt)):
            t, lp, top = plp[i]
            ls = _log_softmax(rows[i - 1], valid_vocab)
            assert t == prompt[i] and abs(lp - ls[prompt[i]]) <= TOL, (name, i)
            order = sorted(range(valid_vocab), key=lambda j: (-ls[j], j))[: k + 1]
            if k and min(-np.diff(ls[order])) > 2 * TOL:
                assert [a for a, _ in top] == order[:k]
    # the scored request that also generates: same tokens as greedy from the prompt, with their logprobs
    assert got["both"]["ids"] == make_engine(parallel=1).generate(prompt, plain)
