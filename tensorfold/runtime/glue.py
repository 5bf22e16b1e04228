"""Small kernels the device forward needs that ``tensorfold.kernels`` does not provide.

The embedding, the norms and SwiGLU that used to live here are now the kernel package's (``kernels.embedding``,
``kernels.norms``, ``kernels.activations``); what stays has no equivalent there. Each row kernel computes a row
without looking at other rows and with a fixed reduction order, so a row's result never depends on how many rows
share the launch.

Kernels (rows grid-stride over blockIdx.x, any grid):
- ``launch_argmax(logits, valid, out)``: out[r] = argmax over the first ``valid`` columns, lowest index on ties
  (the runner's ``argmax=True`` without a sampler): ``kernels.sample``'s one-launch greedy pass (128 blocks per
  row, 16-byte loads, packed 64-bit atomic max), so greedy ids are the sampler's greedy ids.
- ``gather_rows(x, sel, out)``: out[i] = x[sel[i]] (the rows whose logits a forward returns).
- ``gemv_simple_*`` / ``dense_gemv_simple``: one thread per output, the simulator's stand-in for the affine
  GEMV (K-A's generated kernels take minutes per forward there); never used on a GPU.
- ``zero_slot(rec, conv, slot)``: zero one slot's recurrent state and conv tail in every layer.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from tensorfold.kernels._device import IS_SIM, bf16_to_f32

NT = 2 if IS_SIM else 128  # the simulator runs a Python thread per GPU thread: keep its blocks tiny

__all__ = ["launch_argmax", "launch_zero_slot", "launch_gather", "launch_gemv_simple", "KERNELS"]


def gather_rows(x, sel, out):
    n = sel.shape[0]
    H = x.shape[1]
    i = cuda.blockIdx.x
    while i < n:
        r = sel[i]
        for c in range(cuda.threadIdx.x, H, cuda.blockDim.x):
            out[i, c] = x[r, c]
        i += cuda.gridDim.x


def _make_gemv(bf16_scales):
    def gemv_simple(W, S, B, x, y, bits, group):
        R = x.shape[0]
        out = y.shape[1]
        inp = x.shape[1]
        mask = np.uint32((1 << bits) - 1)
        i = cuda.grid(1)
        stride = cuda.gridsize(1)
        while i < R * out:
            r = i // out
            o = i - r * out
            acc = float32(0.0)
            for g0 in range(0, inp, group):
                gi = g0 // group
                if bf16_scales:
                    s = bf16_to_f32(S[o, gi])
                    b = bf16_to_f32(B[o, gi])
                else:
                    s = float32(S[o, gi])
                    b = float32(B[o, gi])
                d = float32(0.0)
                sx = float32(0.0)
                for j in range(g0, g0 + group):
                    off = j * bits
                    wi = off >> 5
                    sh = off & 31
                    v = W[o, wi] >> np.uint32(sh)
                    if sh + bits > 32:
                        v = v | (W[o, wi + 1] << np.uint32(32 - sh))
                    d += float32(v & mask) * x[r, j]
                    sx += x[r, j]
                acc += s * d + b * sx
            y[r, o] = acc
            i += stride

    return gemv_simple


gemv_simple_bf16 = _make_gemv(True)
gemv_simple_f32 = _make_gemv(False)


def dense_gemv_simple(W16, x, y):
    R = x.shape[0]
    out = y.shape[1]
    inp = x.shape[1]
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < R * out:
        r = i // out
        o = i - r * out
        acc = float32(0.0)
        for j in range(inp):
            acc += bf16_to_f32(W16[o, j]) * x[r, j]
        y[r, o] = acc
        i += stride


def zero_slot(rec, conv, slot):
    NL = rec.shape[0]
    n1 = rec.shape[2] * rec.shape[3] * rec.shape[4]
    n2 = conv.shape[2] * conv.shape[3]
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < NL * (n1 + n2):
        layer = i // (n1 + n2)
        j = i - layer * (n1 + n2)
        if j < n1:
            a = j // (rec.shape[3] * rec.shape[4])
            rem = j - a * rec.shape[3] * rec.shape[4]
            b = rem // rec.shape[4]
            c = rem - b * rec.shape[4]
            rec[layer, slot, a, b, c] = float32(0.0)
        else:
            j -= n1
            a = j // conv.shape[3]
            c = j - a * conv.shape[3]
            conv[layer, slot, a, c] = float32(0.0)
        i += stride


k_zero_slot = cuda.jit(zero_slot)
k_gather = cuda.jit(gather_rows)
k_gemv_bf16 = cuda.jit(gemv_simple_bf16)
k_gemv_f32 = cuda.jit(gemv_simple_f32)
k_dense_gemv = cuda.jit(dense_gemv_simple)

KERNELS = {"zero_slot": k_zero_slot, "gather_rows": k_gather}


def _rows_grid(R, cap=4096):
    return 1 if IS_SIM else max(1, min(int(R), cap))


def _flat_grid(n, threads):
    return 1 if IS_SIM else max(1, min(4096, -(-n // threads)))


def launch_argmax(logits, valid, out, *, stream=0, blocks=None):
    """``blocks`` caps the row dimension of the grid (rows grid-strided); the simulator uses one."""
    from tensorfold.kernels import sample as _ks

    _ks.launch_argmax(logits, valid, out, stream=stream, max_blocks=1 if IS_SIM else blocks)


def _sim_weight(ent) -> np.ndarray:
    """The linear's float32 [out, in] matrix, unpacked here from the MLX words (bit offset j * bits of each row,
    little-endian across words) and cached on the arena entry (simulator only)."""
    wd = ent.get("_sim_wd")
    if wd is None:
        if ent["kind"] == "affine":
            W = np.asarray(ent["W"]).astype(np.uint64)
            bits, group = int(ent["bits"]), int(ent["group"])
            out, nw = W.shape
            inp = nw * 32 // bits
            words = np.concatenate([W, np.zeros((out, 1), np.uint64)], axis=1)
            off = np.arange(inp) * bits
            lo, sh = off // 32, (off % 32).astype(np.uint64)
            both = words[:, lo] | (words[:, lo + 1] << np.uint64(32))
            q = ((both >> sh) & np.uint64((1 << bits) - 1)).astype(np.float32)
            S, B = np.asarray(ent["S"]), np.asarray(ent["B"])
            if S.dtype == np.uint16:
                S = (S.astype(np.uint32) << np.uint32(16)).view(np.float32)
                B = (B.astype(np.uint32) << np.uint32(16)).view(np.float32)
            wd = q * np.repeat(S.astype(np.float32), group, axis=1) + np.repeat(B.astype(np.float32), group, axis=1)
        else:
            wd = (np.asarray(ent["W16"]).astype(np.uint32) << np.uint32(16)).view(np.float32)
        wd = np.ascontiguousarray(wd, np.float32)
        ent["_sim_wd"] = wd
    return wd


def launch_gemv_simple(ent, x, y, *, stream=0, blocks=None):
    """y = x @ W.T (simulator stand-in for ``affine.launch_qgemv``, whose generated kernels take minutes per forward
    there). In the simulator it runs on the host, one row at a time (a row's result never depends on the other
    rows); on a GPU (only for tests) it is a one-thread-per-output kernel. ``ent``: an arena linear."""
    if IS_SIM:
        wd = _sim_weight(ent)
        xs, ys = np.asarray(x), np.asarray(y)
        for r in range(xs.shape[0]):
            ys[r] = wd @ xs[r]
        return
    n = x.shape[0] * y.shape[1]
    nb = blocks or max(1, min(4096, -(-n // NT)))
    if ent["kind"] == "affine":
        k = k_gemv_bf16 if ent["S"].dtype == np.uint16 else k_gemv_f32
        k[nb, NT, stream](ent["W"], ent["S"], ent["B"], x, y, np.int32(ent["bits"]), np.int32(ent["group"]))
    else:
        k_dense_gemv[nb, NT, stream](ent["W16"], x, y)


def _sim_kv_rows(cache, scale, slot, pos):
    """Cache rows [n, nKV, hd] of ``slot`` at positions ``pos`` as float32 (bf16 bits, e4m3 codes x row scale, f32)."""
    c = np.asarray(cache)[slot, pos]
    if c.dtype == np.uint16:
        return (c.astype(np.uint32) << np.uint32(16)).view(np.float32)
    if c.dtype == np.uint8:
        return _E4M3[c] * np.asarray(scale)[slot, pos][:, :, None]
    return c.astype(np.float32)


def _e4m3_table():
    """float32 value of each e4m3 code (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; 0x7F / 0xFF NaN)."""
    t = np.zeros(256, np.float32)
    for u in range(256):
        e, mnt = (u >> 3) & 15, u & 7
        v = (mnt / 8.0) * 2.0 ** -6 if e == 0 else (1 + mnt / 8.0) * 2.0 ** (e - 7)
        if e == 15 and mnt == 7:
            v = np.nan
        t[u] = -v if u & 128 else v
    return t


_E4M3 = _e4m3_table()


def sim_attention(q, k_cache, v_cache, k_scale, v_scale, row_slot, nk, tmask, tbase, scale, qg, out):
    """Simulator stand-in for ``attention.launch_partials`` + ``launch_merge`` (use_gate=1), on the host: row r of
    slot row_slot[r] (< 0: skipped) attends to positions 0 .. nk[r] - 1 and tbase[r] + b for each set bit b of
    tmask[r]; softmax in float64, then o * sigmoid(gate), the gate being qg[r, h, hd:]. Row by row, so a row's
    result never depends on the others. The real kernels have their own simulator tests
    (tests/kernels/test_sim_attention.py); this keeps the runtime's tests of the whole forward fast."""
    Q = np.asarray(q)
    G = np.asarray(qg)
    o = np.asarray(out)
    R, nH, hd = Q.shape
    nKV = np.asarray(k_cache).shape[2]
    rep = nH // nKV
    for r in range(R):
        slot = int(np.asarray(row_slot)[r])
        if slot < 0:
            continue
        m = int(np.asarray(tmask)[r]) & 0xFFFFFFFF
        pos = np.concatenate([np.arange(int(np.asarray(nk)[r])),
                              int(np.asarray(tbase)[r]) + np.array([b for b in range(32) if m >> b & 1], np.int64)])
        if len(pos) == 0:
            o[r] = 0.0
            continue
        K = _sim_kv_rows(k_cache, k_scale, slot, pos).astype(np.float64)
        V = _sim_kv_rows(v_cache, v_scale, slot, pos).astype(np.float64)
        for h in range(nH):
            sc = K[:, h // rep] @ Q[r, h].astype(np.float64) * float(scale)
            p = np.exp(sc - sc.max())
            v = (p @ V[:, h // rep]) / p.sum()
            g = G[r, h, hd:].astype(np.float64)
            o[r, h] = (v / (1.0 + np.exp(-g))).astype(np.float32)


def capture_graph(core_stream, launch):
    """Capture ``launch(builder)`` on the cuda.core stream ``core_stream`` into a completed, uploaded graph. The
    launches must not compile, allocate or sync (run them eagerly once first); on an error the capture is ended
    before the error propagates, so the stream is usable again."""
    gb = core_stream.create_graph_builder()
    gb.begin_building()
    try:
        launch(gb)
    except BaseException:
        try:
            gb.end_building()
        except Exception:  # noqa: BLE001 -- the launch's own error is the one to report
            pass
        raise
    graph = gb.end_building().complete()
    graph.upload(core_stream)
    return graph


def launch_gather(x, sel, out, *, stream=0, blocks=None):
    k_gather[blocks or _rows_grid(sel.shape[0]), NT, stream](x, sel, out)


def launch_zero_slot(rec, conv, slot, *, stream=0, blocks=None):
    n = rec.shape[0] * (rec.shape[2] * rec.shape[3] * rec.shape[4] + conv.shape[2] * conv.shape[3])
    k_zero_slot[blocks or _flat_grid(n, 256), NT if IS_SIM else 256, stream](rec, conv, np.int32(slot))
