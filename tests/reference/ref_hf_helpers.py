"""Shared helpers of the reference-model tests: tiny random transformers ``Qwen3_5ForCausalLM`` models with every
parameter perturbed, and the mapping of their torch state_dict to tensorfold's internal names.

The mapping here is written independently of ``tensorfold.model.checkpoint`` (HF text-only names, zero-centred norms
-> multiplier 1 + w, conv [C, 1, K] -> [C, K], tied lm_head dropped), so the parity tests do not trust the loader.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

torch = pytest.importorskip("torch")
hf = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")

# The zero-centred norms (HF applies x̂·(1 + w)); linear_attn.norm is a plain weight.
_ONE_PLUS = ("input_layernorm", "post_attention_layernorm", "q_norm", "k_norm")


@dataclass(frozen=True)
class Spec:
    """A tiny geometry. layer_types as a string: 'l' linear_attention, 'f' full_attention."""

    name: str
    hidden: int
    layers: str
    nH: int
    nKV: int
    hd: int
    Hk: int
    Hv: int
    Dk: int
    Dv: int
    K: int = 4
    inter: int = 64
    vocab: int = 300
    tied: bool = True
    partial: float = 0.25
    theta: float = 1e7
    eps: float = 1e-6

    @property
    def layer_types(self):
        return tuple("linear_attention" if c == "l" else "full_attention" for c in self.layers)


SPECS = [
    # tied; Hv/Hk = 3; nH/nKV = 6; head_dim 32 != 48/6; rotary 8 of 32
    Spec("tied_gqa6_gdn3", hidden=48, layers="lllf", nH=6, nKV=1, hd=32, Hk=2, Hv=6, Dk=16, Dv=8, tied=True),
    # untied; several full layers; head_dim 24 != 64/4; half rotary
    Spec("untied_3full", hidden=64, layers="lflff", nH=4, nKV=2, hd=24, Hk=2, Hv=2, Dk=16, Dv=16, tied=False,
         partial=0.5, inter=96),
    # untied; Hk=1 -> Hv=3; MHA attention first; conv width 3; theta 1e4
    Spec("untied_full_first", hidden=40, layers="fllf", nH=2, nKV=2, hd=16, Hk=1, Hv=3, Dk=8, Dv=12, K=3,
         tied=False, theta=1e4, inter=56),
    # tied; head_dim 64 != 32/2; full rotary; two full layers among six
    Spec("tied_wide_head", hidden=32, layers="lllflf", nH=2, nKV=1, hd=64, Hk=2, Hv=4, Dk=8, Dv=16,
         partial=1.0, inter=48, eps=1e-5),
]


def hf_config(spec: Spec):
    cfg = hf.Qwen3_5TextConfig(
        vocab_size=spec.vocab, hidden_size=spec.hidden, intermediate_size=spec.inter,
        num_hidden_layers=len(spec.layers), layer_types=list(spec.layer_types),
        num_attention_heads=spec.nH, num_key_value_heads=spec.nKV, head_dim=spec.hd,
        linear_num_key_heads=spec.Hk, linear_num_value_heads=spec.Hv, linear_key_head_dim=spec.Dk,
        linear_value_head_dim=spec.Dv, linear_conv_kernel_dim=spec.K, rms_norm_eps=spec.eps,
        tie_word_embeddings=spec.tied, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": spec.theta, "partial_rotary_factor": spec.partial,
                         "mrope_section": [1, 1, 0], "mrope_interleaved": True},
        pad_token_id=None, bos_token_id=None, eos_token_id=None,
    )
    cfg._attn_implementation = "eager"
    return cfg


def make_hf_model(spec: Spec, seed: int):
    """A float32 CPU Qwen3_5ForCausalLM with every parameter perturbed by random noise (norms included)."""
    torch.manual_seed(seed)
    model = hf.Qwen3_5ForCausalLM(hf_config(spec)).float().eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2 and not name.endswith("conv1d.weight"):
                std = 1.0 / np.sqrt(p.shape[-1])  # linears and embeddings: keep activations O(1)
            elif name.endswith("A_log"):
                # HF draws A ~ U(0.01, 16): decays so fast that each token's GDN output is a single dot product
                # k̂·q̂, whose cancellation the gated norm then amplifies (fp32 vs fp64 logits differ by ~5e-5).
                # Re-draw A ~ U(0.05, 1) (slower decays, state carries memory), then perturb like the rest.
                p.copy_(torch.empty(p.shape).uniform_(0.05, 1.0, generator=gen).log())
                std = 0.3
            elif name.endswith("dt_bias"):
                std = 0.5
            else:
                std = 0.2  # norms (HF init leaves them at 0 or 1), conv taps
            p.add_(torch.randn(p.shape, generator=gen) * std)
    if spec.tied:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model


def to_internal(model, spec: Spec) -> dict[str, np.ndarray]:
    """torch state_dict -> internal names (contracts.md), float32 numpy arrays."""
    out: dict[str, np.ndarray] = {}
    for name, t in model.state_dict().items():
        a = t.detach().cpu().numpy().astype(np.float32).copy()
        if name == "lm_head.weight":
            if spec.tied:
                continue
            out["lm_head"] = a
            continue
        assert name.startswith("model."), name
        key = name[len("model."):]
        if key.endswith(".weight"):
            key = key[: -len(".weight")]
        leaf = key.rsplit(".", 1)[-1]
        if leaf in _ONE_PLUS or key == "norm":
            a = 1.0 + a
        elif leaf == "conv1d":
            a = a[:, 0, :]  # [C, 1, K] -> [C, K]
        out[key] = a
    return out


def model_config(spec: Spec):
    """The tensorfold ModelConfig for a spec, built field by field (not through the config.json parser)."""
    from tensorfold.model.config import ModelConfig

    return ModelConfig(
        hidden_size=spec.hidden, num_hidden_layers=len(spec.layers), layer_types=spec.layer_types,
        num_attention_heads=spec.nH, num_key_value_heads=spec.nKV, head_dim=spec.hd,
        linear_num_key_heads=spec.Hk, linear_num_value_heads=spec.Hv, linear_key_head_dim=spec.Dk,
        linear_value_head_dim=spec.Dv, linear_conv_kernel_dim=spec.K, intermediate_size=spec.inter,
        rms_norm_eps=spec.eps, rope_theta=spec.theta, partial_rotary_factor=spec.partial, vocab_size=spec.vocab,
        tie_word_embeddings=spec.tied, output_gate_type="silu", max_position_embeddings=4096, quantization=None,
        eos_token_ids=(),
    )


def hf_logits(model, ids) -> np.ndarray:
    """Full-sequence logits [L, V] of the HF model (no cache)."""
    with torch.no_grad():
        out = model(input_ids=torch.as_tensor(np.asarray(ids, dtype=np.int64))[None], use_cache=False)
    return out.logits[0].numpy()


def rel_err(got, ref) -> float:
    """max |got - ref| / max |ref|."""
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    return float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
