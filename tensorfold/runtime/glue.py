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
- ``sim_linear`` / ``sim_attention``: host stand-ins for the GEMV and attention kernels in the simulator only
  (their generated kernels take minutes per forward there; they are tested on their own).
- ``zero_slot(rec, conv, slot)``: zero one slot's recurrent state and conv tail in every layer.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from tensorfold.kernels import _pdl
from tensorfold.kernels._device import IS_SIM, pdl_begin

NT = 2 if IS_SIM else 128  # the simulator runs a Python thread per GPU thread: keep its blocks tiny

__all__ = ["launch_argmax", "launch_zero_slot", "launch_gather", "sim_linear", "sim_attention", "core_stream", "capture_graph",
           "KERNELS"]


def gather_rows(x, sel, out):
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    n = sel.shape[0]
    H = x.shape[1]
    i = cuda.blockIdx.x
    while i < n:
        r = sel[i]
        for c in range(cuda.threadIdx.x, H, cuda.blockDim.x):
            out[i, c] = x[r, c]
        i += cuda.gridDim.x


def zero_slot(rec, conv, slot):
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
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
    """The linear's float32 [out, in] matrix (``model.quant.dequantize`` / ``model.bf16.to_f32``), cached on the
    arena entry (simulator only)."""
    wd = ent.get("_sim_wd")
    if wd is None:
        from tensorfold.model import bf16, quant

        if ent["kind"] == "affine":
            wd = quant.dequantize(np.asarray(ent["W"]), np.asarray(ent["S"]), np.asarray(ent["B"]), int(ent["bits"]),
                                  int(ent["group"]))
        else:
            wd = bf16.to_f32(np.asarray(ent["W16"]))
        wd = ent["_sim_wd"] = np.ascontiguousarray(wd, np.float32)
    return wd


def sim_linear(ent, x, y) -> None:
    """Simulator stand-in for ``affine.launch_qgemv`` (whose generated kernels take minutes per forward there): on
    the host, y[r] = W @ x[r] one row at a time, so a row's result never depends on the other rows. The GEMV kernels
    have their own simulator tests (tests/kernels/test_sim_affine.py). ``ent``: an arena linear."""
    assert IS_SIM, "sim_linear is the simulator's stand-in"
    wd = _sim_weight(ent)
    xs, ys = np.asarray(x), np.asarray(y)
    for r in range(xs.shape[0]):
        ys[r] = wd @ xs[r]


def sim_attention(q, k_cache, v_cache, k_scale, v_scale, row_slot, nk, tmask, tbase, scale, qg, out) -> None:
    """Simulator stand-in for ``attention.launch_partials`` + ``launch_merge`` (use_gate=1): the numpy twin
    (``reference.attention.attention_rows``, row by row, gate = qg[:, :, hd:]) written into ``out`` for the rows
    of a stream (slot >= 0; padding rows are left as the kernel leaves them). The kernels have their own simulator
    tests (tests/kernels/test_sim_attention.py); this keeps the runtime's tests of the whole forward fast."""
    from tensorfold.reference.attention import attention_rows

    assert IS_SIM, "sim_attention is the simulator's stand-in"
    hd = np.asarray(q).shape[2]
    rs = np.asarray(row_slot)
    o = attention_rows(np.asarray(q), np.asarray(k_cache), np.asarray(v_cache), np.asarray(k_scale),
                       np.asarray(v_scale), rs, np.asarray(nk), np.asarray(tmask), np.asarray(tbase), scale,
                       gate=np.asarray(qg)[:, :, hd:])
    live = rs >= 0
    np.asarray(out)[live] = o[live]


def core_stream(stream, made=None):
    """The cuda.core stream over numba ``stream`` that graphs are captured on and launched with: ``made`` when given
    (one made earlier), else a new one. Either way the device is made current on the calling thread first, as
    cuda.core's capture needs."""
    from cuda.core import Device

    dev = Device()
    dev.set_current()
    return made if made is not None else dev.create_stream(stream)


def capture_graph(core_stream, launch):
    """Capture ``launch(builder)`` on the cuda.core stream ``core_stream`` into a completed, uploaded graph. The
    launches must not compile, allocate or sync (run them eagerly once first); on an error the capture is ended
    before the error propagates, so the stream is usable again."""
    gb = core_stream.create_graph_builder()
    gb.begin_building()
    try:
        with _pdl.scope():  # PDL-aware kernels overlap their predecessor's tail (kernels._pdl)
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
