"""An engine whose StepOutputs carry token ids only (the contract's minimum, no `text`): the server decodes and
applies stop strings itself, and the replies equal those of the normal server (engine-side text)."""

from __future__ import annotations

import dataclasses
import random

import requests

from conftest import ServerThread, build_engine
from test_openai_client import rand_text


class IdsOnly:
    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def step(self):
        return [dataclasses.replace(o, text=None) for o in self._inner.step()]


def test_ids_only_engine_gives_the_same_replies(served):
    st = ServerThread(lambda: IdsOnly(build_engine(parallel=2, context=256))).wait_loaded()
    try:
        rng = random.Random()
        stops_checked = 0
        for _ in range(6):
            if stops_checked >= 2:
                break
            prompt = rand_text(rng, rng.randint(2, 8))
            body = {"prompt": prompt, "max_tokens": 10, "temperature": 0, "ignore_eos": True}
            a = requests.post(served.url + "/v1/completions", json=body).json()
            b = requests.post(st.url + "/v1/completions", json=body).json()
            assert a["choices"][0]["text"] == b["choices"][0]["text"]
            assert a["engine"]["token_sha"] == b["engine"]["token_sha"]
            full = a["choices"][0]["text"]
            cands = [i for i in range(1, len(full) - 1) if full[i:i + 2].strip() and "\ufffd" not in full[i:i + 2]]
            if not cands:
                continue
            stop = full[rng.choice(cands):][:2]
            body["stop"] = [stop]
            for stream in (False, True):
                body["stream"] = stream
                ra = requests.post(served.url + "/v1/completions", json=body)
                rb = requests.post(st.url + "/v1/completions", json=body)
                if stream:
                    ta = "".join(_texts(ra))
                    tb = "".join(_texts(rb))
                else:
                    ta, tb = ra.json()["choices"][0]["text"], rb.json()["choices"][0]["text"]
                    assert rb.json()["choices"][0]["finish_reason"] == "stop"
                assert ta == tb == full[:full.find(stop)]
            stops_checked += 1
        assert stops_checked >= 1, "no greedy reply was long enough to pick a stop string from"
    finally:
        st.stop()


def _texts(r):
    import json

    for ln in r.iter_lines():
        if ln.startswith(b"data: {"):
            for ch in json.loads(ln[6:]).get("choices", []):
                yield ch["text"]
