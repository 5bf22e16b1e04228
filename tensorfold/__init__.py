"""tensorfold: serve Qwen3.5-family hybrid language models on NVIDIA GPUs from pure Python."""

__version__ = "0.1.0"
