"""Error types of the model I/O layer.

``CheckpointError`` is raised for anything wrong with weight files (safetensors structure, missing or mis-shaped
tensors, quantization widths); ``ConfigError`` for anything wrong with config.json. Both derive from ValueError and
their messages name the file / tensor / field and the offending value.
"""

from __future__ import annotations

__all__ = ["CheckpointError", "ConfigError"]


class CheckpointError(ValueError):
    """A checkpoint file or tensor is missing, malformed or inconsistent with the config."""


class ConfigError(ValueError):
    """A config field is missing, has an invalid value, or describes something unsupported."""
