"""Simulator tier for the tensor-core prompt attention (``attention_prompt``): fresh random q, caches and gates
against a float64 softmax attention computed here (tolerance 2e-5 absolute and relative: q and p carry about 2^-17
of their value after the hi + lo bf16 splits), with two prompt segments in different slots sharing a 16-row tile,
a padding row, and NaN in every cache position no row may see (so that a stale key or value would show). A
segment's rows give the same bits launched alone as beside the other segment. The kernel's twin in value is
``reference.attention.attention_rows`` (checked against it too)."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from tensorfold.kernels import attention_prompt as ap
from tensorfold.model import bf16
from tensorfold.reference import attention as ref_att

nH, nKV, HD = 4, 2, 16
SLOTS, CTX = 3, 80
NAN16 = np.uint16(0x7FC0)


def _case(rng):
    # segment A: slot 2, positions 40..60 (21 rows, keys 0..pos); segment B: slot 0, positions 0..11 (12 rows);
    # then one padding row. Rows 16..31 hold both slots.
    segs = [(2, 40, 21), (0, 0, 12)]
    rows_slot, rows_nk = [], []
    kc = np.full((SLOTS, CTX, nKV, HD), NAN16, np.uint16)
    vc = np.full((SLOTS, CTX, nKV, HD), NAN16, np.uint16)
    for s, p0, n in segs:
        kc[s, :p0 + n] = bf16.from_f32(rng.standard_normal((p0 + n, nKV, HD)))
        vc[s, :p0 + n] = bf16.from_f32(rng.standard_normal((p0 + n, nKV, HD)))
        rows_slot += [s] * n
        rows_nk += list(range(p0 + 1, p0 + n + 1))
    rows_slot.append(-1)
    rows_nk.append(5)
    R = len(rows_slot)
    q = (rng.standard_normal((R, nH, HD)) * 0.7).astype(np.float32)
    qg = rng.standard_normal((R, nH, 2 * HD)).astype(np.float32)
    return q, kc, vc, np.array(rows_slot, np.int32), np.array(rows_nk, np.int32), qg


def _oracle(q, kc, vc, rs, nk, qg, scale, gate):
    R = q.shape[0]
    out = np.zeros((R, nH, HD))
    G = nH // nKV
    for r in range(R):
        if rs[r] < 0:
            continue
        for h in range(nH):
            K = bf16.to_f32(kc[rs[r], :nk[r], h // G]).astype(np.float64)
            V = bf16.to_f32(vc[rs[r], :nk[r], h // G]).astype(np.float64)
            s = K @ q[r, h].astype(np.float64) * scale
            p = np.exp(s - s.max())
            o = p @ V / p.sum()
            if gate:
                o = o / (1.0 + np.exp(-qg[r, h, HD:].astype(np.float64)))
            out[r, h] = o
    return out


def _run(q, kc, vc, rs, nk, qg, scale, gate):
    out = cuda.to_device(np.full(q.shape, 7.0, np.float32))
    ap.launch(cuda.to_device(q), cuda.to_device(kc), cuda.to_device(vc), cuda.to_device(rs), cuda.to_device(nk),
              cuda.to_device(qg), scale, gate, out)
    return out.copy_to_host()


@pytest.mark.parametrize("gate", [1, 0])
def test_prompt_attention_vs_float64_and_alone(gate):
    rng = np.random.default_rng(31 + gate)
    q, kc, vc, rs, nk, qg = _case(rng)
    scale = HD ** -0.5
    o = _run(q, kc, vc, rs, nk, qg, scale, gate)
    live = rs >= 0
    assert not np.isnan(o[live]).any()
    np.testing.assert_allclose(o[live], _oracle(q, kc, vc, rs, nk, qg, scale, gate)[live], rtol=2e-5, atol=2e-5)
    assert (o[~live] == 7.0).all()  # the padding row is not written
    if gate:  # the module's twin in value (the split-K reference: same keys, fp32 softmax)
        z = np.zeros(0, np.float32)
        tw = ref_att.attention_rows(q, kc, vc, z, z, rs, nk, np.zeros_like(nk), np.zeros_like(nk), scale,
                                    gate=qg[:, :, HD:])
        np.testing.assert_allclose(o[live], np.asarray(tw)[live], rtol=2e-5, atol=2e-5)
    # segment B (rows 21..32) alone: its tiles now start at its first row; the same bits
    ob = _run(q[21:33], kc, vc, rs[21:33], nk[21:33], qg[21:33], scale, gate)
    assert np.array_equal(ob.view(np.uint32), o[21:33].view(np.uint32))


def test_switch(monkeypatch):
    monkeypatch.setenv("TENSORFOLD_ATTN_PROMPT", "1")
    assert ap.on()
    monkeypatch.setenv("TENSORFOLD_ATTN_PROMPT", "2")
    with pytest.raises(ValueError, match="TENSORFOLD_ATTN_PROMPT"):
        ap.on()
    assert not ap.ok(np.zeros((1, 1, 1, 16), np.uint8), 4, 2, 16)  # e4m3 caches take the split-K kernels
    assert not ap.ok(np.zeros((1, 1, 1, 24), np.uint16), 4, 2, 24)  # hd not a multiple of 16
