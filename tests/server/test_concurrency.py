"""16 clients at once: every reply's token_sha equals the same request served alone (greedy, seeded and
unseeded sampling), and the request log keeps every line whole."""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor

import openai

from test_openai_client import rand_text


def _req(rng: random.Random, i: int) -> dict:
    kw = {"prompt": rand_text(rng, rng.randint(2, 12)), "max_tokens": rng.randint(3, 8),
          "extra_body": {"ignore_eos": True}}
    mode = i % 3
    if mode == 0:
        kw["temperature"] = 0
    elif mode == 1:
        kw["temperature"] = round(rng.uniform(0.5, 1.5), 3)
        kw["seed"] = rng.randrange(1 << 62)
        kw["top_p"] = 0.9
    else:
        kw["temperature"] = 1.0        # no seed: derived from the prompt
        kw["extra_body"]["top_k"] = 20
    return kw


def test_sixteen_clients_match_serial(served):
    rng = random.Random()
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="x", max_retries=0, timeout=300)
    model = client.models.list().data[0].id
    reqs = [_req(rng, i) for i in range(16)]

    def run(kw, stream=False):
        if stream:
            chunks = list(client.completions.create(model=model, stream=True,
                                                    stream_options={"include_usage": True}, **kw))
            fin = [c for c in chunks if c.choices and c.choices[0].finish_reason][0]
            return (fin.model_extra["engine"]["token_sha"], "".join(c.choices[0].text for c in chunks if c.choices),
                    chunks[-1].usage.completion_tokens)
        r = client.completions.create(model=model, **kw)
        return r.model_extra["engine"]["token_sha"], r.choices[0].text, r.usage.completion_tokens

    alone = [run(kw) for kw in reqs]
    with ThreadPoolExecutor(16) as ex:
        together = list(ex.map(lambda a: run(a[1], stream=a[0] % 2 == 1), enumerate(reqs)))
    for i, (a, b) in enumerate(zip(alone, together)):
        assert a == b, f"request {i} ({reqs[i]}) differs when served with 15 others"
        assert a[2] == reqs[i]["max_tokens"]
    # the request log holds one whole JSON line per request, none torn
    lines = open(served.log_path, encoding="utf-8").read().splitlines()
    recs = [json.loads(ln) for ln in lines]
    shas = {r.get("token_sha") for r in recs if r.get("path") == "/v1/completions"}
    assert {a[0] for a in alone} <= shas
    assert all(r["status"] for r in recs)
