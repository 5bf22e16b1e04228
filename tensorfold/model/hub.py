"""Model location: a local directory, or a Hugging Face Hub id fetched into the local cache; the `pull` command.

``resolve_model(id_or_path)`` returns a directory holding config.json + safetensors. A path that exists is used as
is; otherwise the argument is treated as a Hub repo id and downloaded with ``huggingface_hub.snapshot_download``
(progress bars on), only the files an engine needs (configs, safetensors, tokenizer, chat template). With
``download=False`` or ``HF_HUB_OFFLINE`` set, only the local cache is consulted. Errors name the id.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import click

from .errors import CheckpointError

__all__ = ["resolve_model", "pull_cmd", "ModelNotFoundError", "ALLOW_PATTERNS"]

ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken", "README.md"]
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")


class ModelNotFoundError(CheckpointError):
    """Neither a local model directory nor a reachable Hub repository."""


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def resolve_model(id_or_path, download: bool = True, revision: str | None = None) -> Path:
    """Local directory for ``id_or_path`` (see module doc); raises ModelNotFoundError naming the id."""
    s = str(id_or_path)
    p = Path(s).expanduser()
    if p.is_dir():
        return p
    if p.exists():
        raise ModelNotFoundError(f"{s}: is a file; expected a model directory (config.json + *.safetensors) "
                                 f"or a Hugging Face repo id")
    if s.startswith((".", "/", "~")) or s.count("/") > 1 or "\\" in s or not _REPO_ID.match(s):
        raise ModelNotFoundError(f"{s}: no such directory (and not a valid Hugging Face repo id)")
    local_only = (not download) or _offline()
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError,
                                            RepositoryNotFoundError, RevisionNotFoundError)
    except ImportError as e:  # pragma: no cover - huggingface_hub is a dependency
        raise ModelNotFoundError(f"{s}: not a local directory and huggingface_hub is unavailable ({e})") from None
    try:
        path = snapshot_download(s, revision=revision, allow_patterns=ALLOW_PATTERNS, local_files_only=local_only)
    except RevisionNotFoundError:
        raise ModelNotFoundError(f"{s}: revision {revision!r} not found on the Hugging Face Hub") from None
    except GatedRepoError:
        raise ModelNotFoundError(f"{s}: the repository is gated; accept its terms on the Hub and log in "
                                 f"(huggingface-cli login or HF_TOKEN)") from None
    except RepositoryNotFoundError:
        raise ModelNotFoundError(f"{s}: no such model on the Hugging Face Hub (or it is private)") from None
    except LocalEntryNotFoundError:
        why = "offline mode (HF_HUB_OFFLINE)" if _offline() else ("downloads disabled" if not download
                                                                  else "the Hub could not be reached")
        raise ModelNotFoundError(f"{s}: not in the local Hugging Face cache and {why}; "
                                 f"run `tensorfold pull {s}` while online") from None
    except (HfHubHTTPError, OSError, ValueError) as e:
        raise ModelNotFoundError(f"{s}: download failed ({e})") from None
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(f"{s}: the snapshot at {path} has no config.json")
    return path


@click.command("pull")
@click.argument("model_id")
@click.option("--revision", default=None, help="Branch, tag or commit of the Hub repository (default: main).")
def pull_cmd(model_id, revision):
    """Download MODEL_ID from the Hugging Face Hub into the local cache and print its directory.

    Only the files the engine uses are fetched: config and generation config, safetensors weights (+ index),
    tokenizer files and the chat template.
    """
    try:
        path = resolve_model(model_id, download=True, revision=revision)
    except CheckpointError as e:
        raise click.ClickException(str(e)) from None
    click.echo(str(path))
