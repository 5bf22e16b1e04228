"""`tensorfold serve` as a subprocess: the startup line, API keys from the flag, the environment and a key file
(refused when others can read it; SIGHUP rotation), SIGTERM during a live stream exits 0."""

from __future__ import annotations

import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time

import openai
import pytest
import requests

from conftest import REPO



def serve_argv() -> list[str]:
    """`tensorfold serve` (the package's click entry point, in this interpreter)."""
    return [sys.executable, "-m", "tensorfold.cli", "serve"]


class Proc:
    def __init__(self, *args, env=None, wait_ready=True):
        e = dict(os.environ)
        e.pop("TENSORFOLD_API_KEY", None)
        e.setdefault("OPENBLAS_NUM_THREADS", "1")   # tiny model: threaded BLAS only burns CPU
        e.update(env or {})
        argv = serve_argv() + ["--port", "0", "--backend", "cpu", "--context", "256", "--parallel", "2", *args]
        self.p = subprocess.Popen(argv, cwd=REPO, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
        self.lines: list[str] = []
        self._q: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.url = None
        if wait_ready:
            self.url = self.wait_line("listening on").split("listening on ")[1].split()[0]
            self.ready = self.wait_line("ready:")

    def _pump(self):
        for ln in self.p.stdout:
            self.lines.append(ln)
            self._q.put(ln)
        self._q.put(None)

    def wait_line(self, needle, timeout=120):
        t = time.monotonic()
        while time.monotonic() - t < timeout:
            try:
                ln = self._q.get(timeout=0.5)
            except queue.Empty:
                continue
            if ln is None:
                raise AssertionError(f"server exited ({self.p.wait()}) before {needle!r}:\n{''.join(self.lines)}")
            if needle in ln:
                return ln
        raise AssertionError(f"no {needle!r} in server output:\n{''.join(self.lines)}")

    def output(self, timeout=30) -> str:
        """All output, after the process has closed its stdout."""
        t = time.monotonic()
        while time.monotonic() - t < timeout:
            try:
                if self._q.get(timeout=0.5) is None:
                    break
            except queue.Empty:
                pass
        return "".join(self.lines)

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(10)


def status(url, path="/v1/models", key=None, header="Authorization"):
    h = {}
    if key is not None:
        h[header] = f"Bearer {key}" if header == "Authorization" else key
    return requests.get(url + path, headers=h, timeout=30)


def test_keys_flag_env_file_sighup_and_sigterm(tmp_path):
    flag_key, env_key, file_key, file_key2 = (secrets.token_urlsafe(16) for _ in range(4))
    kf = tmp_path / "keys"
    kf.write_text(f"# comment\n{file_key}\n\n")
    kf.chmod(0o600)
    srv = Proc("--api-key", flag_key, "--api-key-file", str(kf), env={"TENSORFOLD_API_KEY": env_key})
    try:
        # startup line
        for part in ("model ", "weights", "kv cache ", "context 256", "streams 2", "loaded in", "api keys on"):
            assert part in srv.ready, (part, srv.ready)
        url = srv.url
        assert status(url, "/health").status_code == 200          # never asks for a key
        assert status(url, "/metrics").status_code == 200
        r = status(url)
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
        assert r.json()["error"]["type"] == "authentication_error"
        assert status(url, key="wrong-" + flag_key).status_code == 401
        assert status(url, "/nope", key=flag_key).status_code == 404
        r = requests.post(url + "/tokenize", json={"prompt": "hi"})
        assert r.status_code == 401
        for k in (flag_key, env_key, file_key):
            assert status(url, key=k).status_code == 200
            assert status(url, key=k, header="x-api-key").status_code == 200
        c = openai.OpenAI(base_url=url + "/v1", api_key=env_key, max_retries=0)
        assert c.completions.create(model=c.models.list().data[0].id, prompt="a b", max_tokens=2).usage
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url + "/v1", api_key="bad", max_retries=0).models.list()

        # rotate the key file, SIGHUP
        kf.write_text(f"{file_key2}\n")
        srv.p.send_signal(signal.SIGHUP)
        t = time.monotonic()
        while status(url, key=file_key2).status_code != 200:
            assert time.monotonic() - t < 20, "SIGHUP did not load the new key"
            time.sleep(0.05)
        assert status(url, key=file_key).status_code == 401
        assert status(url, key=flag_key).status_code == 200
        # a key file that became readable by others is not reloaded: the previous keys stay
        kf.chmod(0o644)
        kf.write_text("intruder\n")
        srv.p.send_signal(signal.SIGHUP)
        srv.wait_line("not reloaded")
        assert status(url, key="intruder").status_code == 401
        assert status(url, key=file_key2).status_code == 200

        # SIGTERM during a live stream: exit 0, the stream ends
        r = requests.post(url + "/v1/completions", headers={"x-api-key": flag_key}, stream=True,
                          json={"prompt": "a b c", "max_tokens": 200, "stream": True, "ignore_eos": True})
        lines = r.iter_lines()
        assert next(ln for ln in lines if ln).startswith(b"data: {")
        srv.p.send_signal(signal.SIGTERM)
        assert srv.p.wait(60) == 0, "".join(srv.lines)
        rest = [ln for ln in lines if ln]
        assert len(rest) < 200
        # the stream ends cleanly: an error event saying why, then [DONE]
        assert rest[-1] == b"data: [DONE]"
        assert b"shutting down" in rest[-2] and b"unavailable_error" in rest[-2]
        assert any("stopped" in ln for ln in srv.lines)
        with pytest.raises(requests.ConnectionError):
            requests.get(url + "/health", timeout=5)
    finally:
        srv.close()


def test_key_file_readable_by_others_is_refused(tmp_path):
    kf = tmp_path / "keys"
    kf.write_text("k1\n")
    kf.chmod(0o640)
    srv = Proc("--api-key-file", str(kf), wait_ready=False)
    try:
        rc = srv.p.wait(60)
        out = srv.output()
        assert rc != 0
        assert "chmod 600" in out and "group or other" in out
    finally:
        srv.close()


def test_sigterm_idle_exits_zero():
    srv = Proc()
    try:
        assert requests.get(srv.url + "/health").status_code == 200
        srv.p.send_signal(signal.SIGTERM)
        assert srv.p.wait(60) == 0
    finally:
        srv.close()


def test_missing_model_exits_nonzero_with_reason(tmp_path):
    srv = Proc(str(tmp_path / "no-such-model"), wait_ready=False)
    try:
        rc = srv.p.wait(60)
        out = srv.output()
        assert rc == 1, out
        assert "model failed to load" in out and "no-such-model" in out
    finally:
        srv.close()
