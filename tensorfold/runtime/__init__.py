"""The model on the GPU (issue 4): weights arena, caches, forwards over static buffers, decode graphs, the cuda
backend. ``create_backend(checkpoint, engine_config)`` is the engine's hook (imported lazily, GPU only)."""


def create_backend(checkpoint, engine_config, **kw):
    from tensorfold.runtime.backend import create_backend as _cb

    return _cb(checkpoint, engine_config, **kw)
