"""The `tensorfold` command line: a click group whose subcommands are imported only when used.

Each subcommand lives in the module that owns the work; this file only names them, so that
`tensorfold --help` stays fast and a GPU-free machine never imports numba for `info` or `serve --help`.
"""

from __future__ import annotations

import importlib

import click

# name -> "module:attribute" of a click.Command
COMMANDS = {
    "info": "tensorfold.model.info:info_cmd",
    "quantize": "tensorfold.model.quant:quantize_cmd",
    "synth": "tensorfold.model.synth:synth_cmd",
    "generate": "tensorfold.engine.cli:generate_cmd",
    "perplexity": "tensorfold.engine.perplexity:perplexity_cmd",
    "serve": "tensorfold.server.cli:serve_cmd",
    "pull": "tensorfold.model.hub:pull_cmd",
    "bench": "tensorfold.bench:bench_cmd",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup)
@click.version_option(package_name="tensorfold")
def main():
    """Serve and run Qwen3.5-family models (MLX affine or bf16 checkpoints) on NVIDIA GPUs."""


if __name__ == "__main__":
    main()
