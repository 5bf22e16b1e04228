"""The reference on an MLX affine-quantized model equals transformers holding the dequantized weights.

Every 2-D linear / embedding weight of a tiny perturbed HF model is quantized with ``tensorfold.model.quant.quantize``
(MLX's rule, bf16 scales and biases) and wrapped in ``AffineWeight``; the reference dequantizes through
``AffineWeight.to_f32`` (model.quant.dequantize), the HF model is loaded with weights dequantized by
``reference.ops.affine_dequant`` (an independent bit-stream unpack). Logits: max |diff| / max |ref| < 1e-4 (float32).
"""

import numpy as np
import pytest
from ref_hf_helpers import Spec, hf_logits, make_hf_model, model_config, rel_err, to_internal, torch

from tensorfold.reference import ReferenceModel, ops

quant = pytest.importorskip("tensorfold.model.quant")
weights = pytest.importorskip("tensorfold.model.weights")

TOL = 1e-4

Q_TIED = Spec("q_tied", hidden=64, layers="lllf", nH=4, nKV=2, hd=32, Hk=2, Hv=4, Dk=16, Dv=16, inter=128, tied=True)
Q_UNTIED = Spec("q_untied", hidden=64, layers="lfl", nH=2, nKV=1, hd=64, Hk=1, Hv=3, Dk=32, Dv=32, inter=96,
                tied=False, partial=0.5)


def _uniform(name):
    return (4, 32)


def _mixed(name):
    """A mixed recipe: head 8-bit g64, MLP 3-bit g32, attention 6-bit g64, GDN 5-bit g32, embedding 4-bit g64."""
    if name == "lm_head":
        return (8, 64)
    if name == "embed_tokens":
        return (4, 64)
    if ".mlp." in name:
        return (3, 32)
    if ".self_attn." in name:
        return (6, 64)
    return (5, 32)


@pytest.mark.parametrize("spec,recipe", [(Q_TIED, _uniform), (Q_UNTIED, _mixed)], ids=["tied-4bit", "untied-mixed"])
def test_quantized_reference_matches_hf_on_dequantized_weights(spec, recipe):
    seed = 77 if spec.tied else 78
    model = make_hf_model(spec, seed)
    tensors = to_internal(model, spec)
    quantized: dict = {}
    dequantized: dict = {}
    for name, w in tensors.items():
        if w.ndim != 2 or name.endswith("conv1d"):
            quantized[name] = w  # norms, A_log, dt_bias, conv stay float
            continue
        bits, group = recipe(name)
        packed, scales, biases = quant.quantize(w, bits, group)
        quantized[name] = weights.AffineWeight(packed, scales, biases, bits, group)
        dequantized[name] = ops.affine_dequant(packed, scales, biases, bits, group)
        assert 0 < np.abs(dequantized[name] - w).max() < 2.0 ** (1 - bits) * np.abs(w).max() * 2  # really quantized
    with torch.no_grad():
        sd = model.state_dict()
        for name, w in dequantized.items():
            key = "lm_head.weight" if name == "lm_head" else f"model.{name}.weight"
            sd[key].copy_(torch.from_numpy(w))
    if spec.tied:
        assert "lm_head" not in quantized
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, spec.vocab, 24)
    ref = hf_logits(model, ids)
    rm = ReferenceModel(quantized, model_config(spec))
    state = rm.new_state()
    got = np.concatenate([rm.prompt(state, ids[:21]), np.stack([rm.step(state, t) for t in ids[21:]])])
    assert rel_err(got, ref) < TOL
    # the quantized model is a different model: its logits are visibly not the float model's
    float_model = ReferenceModel(tensors, model_config(spec))
    assert rel_err(float_model.prompt(float_model.new_state(), ids), ref) > 1e-3
