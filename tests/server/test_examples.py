"""The examples run against the real test server: examples/openai_client.py and examples/curl.sh."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import REPO


def test_openai_client_example(served):
    out = subprocess.run([sys.executable, str(REPO / "examples" / "openai_client.py"), "--url", served.url,
                          "--max-tokens", "6"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "chat: " in out.stdout and "token_sha" in out.stdout and "[usage: " in out.stdout


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_example(served):
    out = subprocess.run(["bash", str(REPO / "examples" / "curl.sh"), served.url], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert '"status": "ok"' in out.stdout and "data: [DONE]" in out.stdout
    assert '"param": "n"' in out.stdout and "vllm:generation_tokens_total" in out.stdout
