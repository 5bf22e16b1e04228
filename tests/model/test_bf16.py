"""bf16 conversion vs torch's bfloat16 (independent oracle)."""

import numpy as np
import torch

from tensorfold.model import bf16


def _torch_bits(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def test_from_f32_matches_torch_rne():
    rng = np.random.default_rng(1234)
    # random bit patterns cover every exponent incl. subnormals, inf and NaN
    bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    finite = np.isfinite(x)
    ours = bf16.from_f32(x)
    ref = _torch_bits(x)
    assert np.array_equal(ours[finite], ref[finite])
    assert np.all(np.isnan(bf16.to_f32(ours[np.isnan(x)])))
    # ties: exact halfway values must round to even
    kept = rng.integers(0, 2**16, size=5000, dtype=np.uint32)
    halfway = ((kept << 16) | 0x8000).astype(np.uint32).view(np.float32)
    ok = np.isfinite(halfway)
    assert np.array_equal(bf16.from_f32(halfway)[ok], _torch_bits(halfway)[ok])


def test_nan_stays_nan_and_inf_kept():
    # NaN payloads whose top mantissa bits are all ones would overflow into inf with naive rounding
    nans = np.array([0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001, 0x7FC00000], dtype=np.uint32).view(np.float32)
    assert np.all(np.isnan(bf16.to_f32(bf16.from_f32(nans))))
    inf = np.array([np.inf, -np.inf, 3.4e38], dtype=np.float32)
    back = bf16.to_f32(bf16.from_f32(inf))
    assert back[0] == np.inf and back[1] == -np.inf and back[2] == np.inf  # 3.4e38 rounds up past bf16 max


def test_to_f32_exact_and_shape():
    rng = np.random.default_rng(7)
    u = rng.integers(0, 2**16, size=(37, 5), dtype=np.uint16)
    ours = bf16.to_f32(u)
    ref = torch.from_numpy(u.view(np.int16)).view(torch.bfloat16).float().numpy()
    assert ours.shape == (37, 5) and ours.dtype == np.float32
    same = np.isnan(ours) == np.isnan(ref)
    assert same.all()
    fin = ~np.isnan(ref)
    assert np.array_equal(ours[fin], ref[fin])
    # round trip of bf16-representable values is the identity
    assert np.array_equal(bf16.from_f32(ours)[fin], u[fin])
