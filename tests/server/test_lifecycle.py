"""In-process lifecycle: /health while loading and after a failed load, client disconnects cancel generation
(engine stats show the abort), admission 503 when full, an engine fault is a 500 (an error event inside a
started stream) and the next request is served."""

from __future__ import annotations

import json
import random
import socket
import threading
import time

import requests

from conftest import ServerThread, build_engine
from test_openai_client import rand_text


def wait_for(pred, timeout=30.0, what="condition", info=None):
    t = time.monotonic()
    while time.monotonic() - t < timeout:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}" + (f": {info()}" if info else ""))


def test_health_503_while_loading_then_ok():
    gate = threading.Event()

    def slow():
        assert gate.wait(60)
        return build_engine(parallel=2, context=128)

    st = ServerThread(slow)
    try:
        h = requests.get(st.url + "/health")
        assert h.status_code == 503
        assert h.json()["error"]["type"] == "unavailable_error" and h.json()["error"]["message"] == "Loading model"
        r = requests.post(st.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1})
        assert r.status_code == 503 and r.json()["error"]["type"] == "unavailable_error"
        gate.set()
        st.wait_loaded()
        assert requests.get(st.url + "/health").status_code == 200
        r = requests.post(st.url + "/v1/completions", json={"prompt": "x y", "max_tokens": 2})
        assert r.status_code == 200, r.text
    finally:
        gate.set()
        st.stop()


def test_failed_load_reports_503_with_reason():
    def broken():
        raise FileNotFoundError("no such checkpoint: /nowhere")

    st = ServerThread(broken)
    try:
        assert not __import__("asyncio").run_coroutine_threadsafe(st.server.wait_loaded(), st.loop).result(30)
        h = requests.get(st.url + "/health")
        assert h.status_code == 503 and "/nowhere" in h.json()["error"]["message"]
    finally:
        st.stop()


def _aborted(served):
    return served.server.bridge.stats()["requests_aborted"]


def test_stream_disconnect_cancels(served):
    before = _aborted(served)
    body = {"prompt": rand_text(random.Random(), 3), "max_tokens": 200, "stream": True, "ignore_eos": True}
    r = requests.post(served.url + "/v1/completions", json=body, stream=True)
    it = r.iter_lines()
    first = next(ln for ln in it if ln)
    assert first.startswith(b"data: {")
    r.close()  # hang up mid-stream
    wait_for(lambda: _aborted(served) > before, what="engine abort after a stream disconnect")
    wait_for(lambda: served.server.bridge.active == 0, what="the request to be released")
    assert requests.get(served.url + "/health").json()["active"] == 0


def test_non_stream_disconnect_cancels(served):
    """Repeated: a hang-up racing with arriving tokens once lost the cancellation (asyncio.wait_for on 3.11)."""
    port = int(served.url.rsplit(":", 1)[1])
    before = _aborted(served)
    n = 6
    for k in range(n):
        wait_for(lambda: _aborted(served) >= before + k, what=f"abort {k}")
        body = json.dumps({"prompt": rand_text(random.Random(), 3), "max_tokens": 200, "ignore_eos": True}).encode()
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        wait_for(lambda: served.server.bridge.active == 1 and served.server.bridge.stats()["running"] >= 1,
                 what="the request to run")
        s.close()
        wait_for(lambda: served.server.bridge.active == 0, what="the request to be released")
    wait_for(lambda: _aborted(served) >= before + n, what=f"{n} engine aborts after non-stream disconnects",
             info=lambda: (before, served.server.bridge.stats()))
    # the request log says the clients went away
    recs = [json.loads(ln) for ln in open(served.log_path, encoding="utf-8")]
    assert sum(r.get("status") == 499 and not r.get("stream") for r in recs) >= n


def test_admission_full_is_503_and_recovers():
    st = ServerThread(lambda: build_engine(parallel=1, context=256), parallel=1, queue=0).wait_loaded()
    try:
        body = {"prompt": "a b c", "max_tokens": 200, "stream": True, "ignore_eos": True}
        r = requests.post(st.url + "/v1/completions", json=body, stream=True)
        lines = r.iter_lines()  # keep the generator alive: dropping it closes the connection
        assert next(ln for ln in lines if ln).startswith(b"data: ")
        assert st.server.bridge.active == 1
        full = requests.post(st.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2})
        assert full.status_code == 503, full.text
        assert full.json()["error"]["type"] == "unavailable_error"
        r.close()
        wait_for(lambda: st.server.bridge.active == 0, what="release")
        ok = requests.post(st.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2})
        assert ok.status_code == 200, ok.text
    finally:
        st.stop()


class FaultyEngine:
    """A real engine whose step() raises once when armed (a fault the server must contain)."""

    def __init__(self, inner):
        self._inner = inner
        self.armed = False

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def step(self):
        out = self._inner.step()
        if self.armed and any(o.new_token_ids for o in out):
            self.armed = False
            raise RuntimeError("simulated device fault")
        return out


def test_engine_fault_is_500_and_next_request_is_served():
    holder = {}

    def make():
        holder["e"] = FaultyEngine(build_engine(parallel=2, context=128))
        return holder["e"]

    st = ServerThread(make).wait_loaded()
    try:
        holder["e"].armed = True
        r = requests.post(st.url + "/v1/completions", json={"prompt": "a b", "max_tokens": 20, "stream": True,
                                                             "ignore_eos": True}, stream=True)
        assert r.status_code == 200
        events = [ln[6:] for ln in r.iter_lines() if ln.startswith(b"data: ")]
        assert events[-1] == b"[DONE]"
        err = json.loads(events[-2])["error"]
        assert err["type"] == "server_error" and "simulated device fault" in err["message"]
        holder["e"].armed = True
        r = requests.post(st.url + "/v1/completions", json={"prompt": "a b", "max_tokens": 20, "ignore_eos": True})
        assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
        ok = requests.post(st.url + "/v1/completions", json={"prompt": "a b", "max_tokens": 3, "ignore_eos": True})
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 3
        assert requests.get(st.url + "/health").json()["engine_faults"] == 2
    finally:
        st.stop()


class DyingEngine(FaultyEngine):
    """has_unfinished() raises once armed: a failure outside step(), which ends the engine thread."""

    dying = False

    def has_unfinished(self):
        if self.dying:
            raise RuntimeError("simulated scheduler bug")
        return self._inner.has_unfinished()


def test_engine_thread_death_fails_requests_cleanly():
    holder = {}

    def make():
        holder["e"] = DyingEngine(build_engine(parallel=2, context=128))
        return holder["e"]

    st = ServerThread(make).wait_loaded()
    try:
        r = requests.post(st.url + "/v1/completions", json={"prompt": "a b", "max_tokens": 100, "stream": True,
                                                             "ignore_eos": True}, stream=True)
        lines = r.iter_lines()
        assert next(ln for ln in lines if ln).startswith(b"data: {")
        holder["e"].dying = True
        events = [ln[6:] for ln in lines if ln.startswith(b"data: ")]
        assert events[-1] == b"[DONE]"
        assert "simulated scheduler bug" in json.loads(events[-2])["error"]["message"]
        r = requests.post(st.url + "/v1/completions", json={"prompt": "a b", "max_tokens": 2})
        assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
        h = requests.get(st.url + "/health")
        assert h.status_code == 503 and "engine thread died" in h.json()["error"]["message"]
    finally:
        st.stop()
