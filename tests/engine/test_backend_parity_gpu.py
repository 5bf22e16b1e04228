"""GPU tier: the cuda backend (`tensorfold.runtime.create_backend`) against the cpu backend through the Engine.

Run on the device with `NUMBA_ENABLE_CUDASIM=0 pytest -m gpu tests/engine`. Skipped where there is no GPU or the
runtime provides no backend yet. Oracle: the cpu backend (ReferenceModel, float32) on the same checkpoint.
"""

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        pytest.skip("the CUDA simulator is on")
    from tensorfold.engine import Engine
    from tensorfold.engine.engine import _cuda_backend_factory
    from tensorfold.model.synth import write_synth

    if _cuda_backend_factory() is None:
        pytest.skip("no GPU, or tensorfold.runtime has no create_backend yet")
    d = tmp_path_factory.mktemp("tiny_gpu")
    write_synth("tiny", d)
    return (Engine.from_model(d, backend="cpu", parallel=4, prompt_chunk=64),
            Engine.from_model(d, backend="cuda", parallel=4, prompt_chunk=64))


def test_prefill_and_decode_logits_match_cpu(engines):
    cpu, gpu = engines
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(0, cpu.valid_vocab, 100)]
    sc, sg = cpu.backend.new_slot(), gpu.backend.new_slot()
    try:
        lc = cpu.backend.prefill(sc, prompt, 0)
        lg = np.asarray(gpu.backend.prefill(sg, prompt, 0))
        assert np.max(np.abs(lg - lc)) / np.max(np.abs(lc)) < 2e-2  # bf16 weights/activations on the GPU
        t = int(np.argmax(lc[: cpu.valid_vocab]))
        for _ in range(8):
            dc = cpu.backend.decode([sc], [t])[0]
            dg = np.asarray(gpu.backend.decode([sg], [t]))[0]
            assert np.max(np.abs(dg - dc)) / np.max(np.abs(dc)) < 2e-2
            t = int(np.argmax(dc[: cpu.valid_vocab]))
    finally:
        cpu.backend.free(sc)
        gpu.backend.free(sg)


def test_gpu_stream_identical_alone_and_beside_others(engines):
    _, gpu = engines
    from tensorfold.engine import SamplingParams

    rng = np.random.default_rng(1)
    prompts = [[int(t) for t in rng.integers(0, gpu.valid_vocab, n)] for n in (5, 300, 17, 60)]
    params = [SamplingParams(temperature=0.8, seed=i, max_tokens=12, ignore_eos=True) for i in range(4)]
    alone = [gpu.generate(p, q) for p, q in zip(prompts, params)]
    rids = {gpu.add_request(p, q): i for i, (p, q) in enumerate(zip(prompts, params))}
    got = {i: [] for i in range(4)}
    while gpu.has_unfinished():
        for o in gpu.step():
            got[rids[o.request_id]] += o.new_token_ids
    assert [got[i] for i in range(4)] == alone
