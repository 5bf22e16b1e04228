"""resolve_model / `tensorfold pull` without network: local directories, a hand-built Hub cache, and errors."""

import json

import pytest
from click.testing import CliRunner

from tensorfold.cli import main
from tensorfold.model.hub import ModelNotFoundError, resolve_model


@pytest.fixture
def fake_cache(tmp_path, monkeypatch):
    """A Hub cache holding one snapshot of 'acme/tiny-model' (layout: models--owner--name/{refs,snapshots})."""
    import huggingface_hub.constants as hc
    cache = tmp_path / "hub"
    repo = cache / "models--acme--tiny-model"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"model_type": "qwen3_5"}))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return snap


def test_local_directory_is_returned(tmp_path):
    assert resolve_model(tmp_path) == tmp_path
    assert resolve_model(str(tmp_path)) == tmp_path


def test_offline_cache_hit_and_miss(fake_cache):
    assert resolve_model("acme/tiny-model").resolve() == fake_cache.resolve()
    with pytest.raises(ModelNotFoundError, match=r"acme/other: not in the local Hugging Face cache.*HF_HUB_OFFLINE"):
        resolve_model("acme/other")
    res = CliRunner().invoke(main, ["pull", "acme/tiny-model"])
    assert res.exit_code == 0 and res.output.strip().endswith("0123456789abcdef0123456789abcdef01234567")
    res = CliRunner().invoke(main, ["pull", "acme/missing"])
    assert res.exit_code != 0 and "acme/missing" in res.output


def test_download_false_means_cache_only(fake_cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(ModelNotFoundError, match=r"acme/nope: .*downloads disabled"):
        resolve_model("acme/nope", download=False)


def test_bad_paths_name_the_argument(tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(ModelNotFoundError, match="file.txt: is a file"):
        resolve_model(f)
    for bad in ("./missing/dir", "/abs/missing", "a/b/c", "bad id!"):
        with pytest.raises(ModelNotFoundError, match="no such directory"):
            resolve_model(bad)
