"""bfloat16 <-> float32 conversion in numpy.

This module owns the package's bf16 representation: a bf16 array is an ``np.uint16`` array holding the raw bits
(the upper half of the IEEE float32 encoding). ``to_f32`` widens exactly; ``from_f32`` rounds to nearest, ties to
even, and keeps every NaN a (quiet) NaN instead of letting the rounding carry turn it into infinity.
"""

from __future__ import annotations

import numpy as np

__all__ = ["to_f32", "from_f32"]


def to_f32(u16) -> np.ndarray:
    """Widen bf16 bits (uint16) to float32; exact."""
    a = np.asarray(u16)
    if a.dtype != np.uint16:
        raise TypeError(f"bf16.to_f32 expects np.uint16 bf16 bits, got dtype {a.dtype}")
    return (a.astype(np.uint32) << np.uint32(16)).view(np.float32)


def from_f32(f32) -> np.ndarray:
    """Round float32 (or anything castable to it) to bf16 bits: nearest, ties to even; NaN -> quiet NaN."""
    a = np.ascontiguousarray(np.asarray(f32, dtype=np.float32))
    bits = a.view(np.uint32)
    # Adding 0x7FFF plus the lowest kept bit rounds to nearest with ties going to the even kept value.
    lsb = (bits >> np.uint32(16)) & np.uint32(1)
    rounded = ((bits + np.uint32(0x7FFF) + lsb) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(a)
    if nan.any():
        # keep sign and the top mantissa bits, force the quiet bit so the result is still NaN
        rounded = np.where(nan, ((bits >> np.uint32(16)).astype(np.uint16) | np.uint16(0x0040)), rounded)
    return rounded.astype(np.uint16, copy=False).reshape(a.shape)
