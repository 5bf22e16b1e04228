"""`tensorfold generate` through click's CliRunner: streamed text on stdout, startup line and speeds on stderr."""

import re

import pytest
from click.testing import CliRunner

from tensorfold.cli import main


def _check(result, max_tokens):
    assert result.exit_code == 0, (result.output, result.exception)
    err = result.stderr
    assert re.search(r"backend cpu \| context \d+ \| streams 1 \| loaded in [\d.]+ s", err), err
    m = re.search(r"prompt: (\d+) tokens in [\d.]+ s \(([\d.]+|inf) tok/s\) \| decode: (\d+) tokens in [\d.]+ s "
                  r"\(([\d.]+) tok/s\) \| finish: (\w+)", err)
    assert m, err
    assert int(m.group(1)) > 0
    assert int(m.group(3)) <= max_tokens - 1
    return result.stdout, m


def test_generate_with_a_model_dir(tiny_dir):
    from tensorfold.engine import Engine, SamplingParams

    r = CliRunner().invoke(main, ["generate", str(tiny_dir), "--prompt", "hello there", "--max-tokens", "8",
                                  "--backend", "cpu", "--no-chat", "--ignore-eos"])
    out, m = _check(r, 8)
    assert int(m.group(3)) == 7 and m.group(5) == "length"
    # the text printed is the engine's greedy output for the same prompt
    eng = Engine.from_model(tiny_dir, backend="cpu", parallel=1)
    ids = eng.generate(eng.tokenizer.encode("hello there"), SamplingParams(temperature=0, max_tokens=8,
                                                                            ignore_eos=True))
    want = eng.tokenizer.decode(ids, skip_special=True)
    assert out == want + "\n" and want.strip()


def test_generate_chat_and_sampling(tiny_dir):
    r = CliRunner().invoke(main, ["generate", str(tiny_dir), "-p", "hi", "--chat", "--max-tokens", "6",
                                  "--temperature", "0.8", "--top-k", "20", "--seed", "3", "--backend", "cpu"])
    _check(r, 6)


def test_generate_bad_values(tiny_dir):
    r = CliRunner().invoke(main, ["generate", str(tiny_dir), "-p", "hi", "--top-p", "2", "--backend", "cpu"])
    assert r.exit_code != 0 and "top_p" in r.output
    r = CliRunner().invoke(main, ["generate", str(tiny_dir), "-p", "hi", "--context", "8", "--max-tokens", "8",
                                  "--backend", "cpu", "--no-chat"])
    assert r.exit_code != 0 and "maximum context length is 8" in r.output


def test_generate_default_model():
    from tensorfold.engine import default_model_path

    try:
        default_model_path()
    except FileNotFoundError:
        pytest.skip("the embedded default model has not landed yet")
    r = CliRunner().invoke(main, ["generate", "--prompt", "Hello", "--max-tokens", "8", "--backend", "cpu"])
    out, _ = _check(r, 8)
    assert "tensorfold-default" in r.stderr


def test_generate_load_errors_are_one_line(tiny_dir, tmp_path):
    r = CliRunner().invoke(main, ["generate", str(tmp_path / "nope"), "-p", "hi"])
    assert r.exit_code == 1 and "cannot load" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["generate", str(tiny_dir), "-p", "hi", "--backend", "cuda"])
    assert r.exit_code == 1 and "cuda" in r.output
    r = CliRunner().invoke(main, ["generate", str(tiny_dir), "-p", "hi", "--backend", "cpu", "--kv-cache", "fp8"])
    assert r.exit_code == 0 and "kv cache fp8" in r.stderr
