"""`tensorfold serve` with the toy engine of conftest.py, for subprocess tests while the embedded default model
is not yet in the tree. Same command line as `tensorfold serve`."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import conftest  # noqa: E402

import tensorfold.server.cli as cli  # noqa: E402


def factory(model, backend, parallel, context, kv_cache):
    return lambda: conftest.build_engine(parallel=parallel, context=context)


cli.engine_factory = factory

if __name__ == "__main__":
    cli.serve_cmd(sys.argv[1:], prog_name="tensorfold serve")
