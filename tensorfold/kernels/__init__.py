"""numba.cuda kernels (issue 3).

Every kernel module here exposes ``COMPILE_SPECS = [(py_function, "numba signature"), ...]`` covering all the
signatures it is launched with, and ``HOT = {"function_name", ...}`` naming kernels on the decode hot path (the
compile tier, ``tests/kernels/test_compile.py``, fails when one of those spills registers). Device helpers
(warp reductions, bf16 / e4m3 conversions, 16-byte loads) live in ``_device.py`` (tensor-core mma and bf16x2 packing in ``_mma.py``); their simulator versions are
chosen at import time.

Modules (owner): _device, affine, embedding, norms, activations, sample, launch (part A);
delta_rule, delta_chunk_tc / delta_intra_tc (the chunked inter / intra passes on tensor cores), conv,
attention, attention_prompt (prompt rows on tensor cores), kv8, compact (part B); gemm (tensor-core prompt GEMM);
qgemv (the bandwidth-oriented tensor-core decode GEMV).
"""

KERNEL_MODULES = (
    "_device",
    "_mma",
    "affine",
    "qgemv",
    "gemm",
    "embedding",
    "norms",
    "activations",
    "sample",
    "delta_rule",
    "delta_chunk_tc",
    "delta_intra_tc",
    "conv",
    "attention",
    "attention_prompt",
    "kv8",
    "compact",
)
