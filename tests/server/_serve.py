"""`tensorfold serve` for the subprocess tests: the real command line, after conftest's set-up (the sampler
stand-in while tensorfold.reference.sampling is missing; the toy engine while the embedded default model is).
With both present this is exactly `tensorfold serve`."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import conftest  # noqa: E402

import tensorfold.server.cli as cli  # noqa: E402

conftest._ensure_sampler()

if not conftest.uses_default_model():
    def factory(model, backend, parallel, context, kv_cache):
        return lambda: conftest.build_engine(parallel=parallel, context=context)

    cli.engine_factory = factory

if __name__ == "__main__":
    cli.serve_cmd(sys.argv[1:], prog_name="tensorfold serve")
