"""benchmarks/bench_serve.py against the real test server at a tiny size: every request completes and the
report has one row per concurrency level with the measured token counts."""

from __future__ import annotations

import importlib.util
import re

from conftest import REPO


def test_bench_serve_small(served, tmp_path):
    spec = importlib.util.spec_from_file_location("bench_serve", REPO / "benchmarks" / "bench_serve.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "report.md"
    rc = mod.main(["--url", served.url, "--input-len", "12", "--output-len", "5", "--concurrency", "1,4",
                   "--num-prompts", "6", "--out", str(out)])
    assert rc == 0
    text = out.read_text()
    rows = [ln for ln in text.splitlines() if re.match(r"\| \d+ \|", ln)]
    assert [r.split("|")[1].strip() for r in rows] == ["1", "4"]
    assert all(r.split("|")[2].strip() == "6/6" for r in rows)
    assert all(r.split("|")[3].strip() == "12/5" for r in rows)
    assert "commit:" in text and "12 tokens in, 5 tokens out" in text
