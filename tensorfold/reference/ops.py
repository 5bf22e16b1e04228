"""Numpy twins of every model operation: the oracle the GPU kernels are tested against.

Owns: one plain function per operation of the Qwen3.5 text forward (qwen35.md §3), written for clarity, not
speed. It mirrors the math of transformers' ``modeling_qwen3_5.py`` (the float32 path) and the chunked gated
delta rule of qwen35.md §3.5; it never imports numba.

Numbers
-------
* The compute dtype follows the *first* (activation) argument: float64 in -> float64 math and output; anything
  else (float32, float16, bf16-as-float) -> float32 math and output. Parameters (norm multipliers, weights, A_log,
  ...) are cast to that dtype.
* No bf16 rounding anywhere (HF rounds activations to bf16 at many points when run in bf16, qwen35.md §6.7; these
  functions are the pure-fp32 versions, which is also what HF computes when the model is loaded in float32).
* RoPE follows HF: ``inv_freq`` and the angle ``position * inv_freq`` are float32 values in float32 mode (float64
  in float64 mode), cos/sin are taken of that angle.

Who normalises what in the delta rule
-------------------------------------
``delta_rule_step`` / ``delta_rule_recurrent`` / ``delta_rule_chunked`` / ``delta_rule_tree`` take **prepared**
queries and keys: ``q̂ = l2norm(q) * Dk**-0.5`` and ``k̂ = l2norm(k)`` (use :func:`gdn_prepare_qk`), with the
Hk key heads *not* repeated (value head h uses key head ``h // (Hv // Hk)``). ``g`` is the log-decay (<= 0) and
``beta`` the write strength, both from :func:`gdn_gates`. The recurrent state layout is HF/FLA's ``[Hv, Dk, Dv]``.

Shapes use: L rows (tokens), H hidden, C conv channels (= conv_dim), K conv width, Hk/Hv key/value heads,
Dk/Dv their head dims, nH/nKV attention query/kv heads, hd attention head dim, T cached keys.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "compute_dtype",
    "sigmoid",
    "silu",
    "softplus",
    "rms_norm",
    "add_rms_norm",
    "gated_rms_norm",
    "silu_mul",
    "sigmoid_gate",
    "rope_inv_freq",
    "rope",
    "qk_norm_rope",
    "split_q_gate",
    "l2norm",
    "gdn_prepare_qk",
    "gdn_gates",
    "causal_conv_step",
    "causal_conv",
    "causal_conv_tree",
    "delta_rule_step",
    "delta_rule_recurrent",
    "delta_rule_chunked",
    "delta_rule_tree",
    "attention",
    "affine_unpack",
    "affine_dequant",
    "weight_f32",
    "linear",
    "embed",
    "mlp",
]


# ---------------------------------------------------------------------------------------------------------------
# dtype helpers and activations


def compute_dtype(x) -> type:
    """float64 if ``x`` is float64, else float32: the dtype every op computes in."""
    return np.float64 if np.asarray(x).dtype == np.float64 else np.float32


def _as(x, dt) -> np.ndarray:
    return np.asarray(x).astype(dt, copy=False)


def _bf16_bits_to_f32(u16: np.ndarray) -> np.ndarray:
    """bf16 raw bits (uint16) -> float32 (exact: bf16 is the top half of a float32)."""
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _param(p, dt) -> np.ndarray:
    """A parameter array to dtype ``dt``; uint16 arrays are bf16 raw bits."""
    p = np.asarray(p)
    if p.dtype == np.uint16:
        p = _bf16_bits_to_f32(p)
    return p.astype(dt, copy=False)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function, overflow-free (uses exp(-|x|) only). Shape and dtype kept."""
    x = np.asarray(x)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype, copy=False)


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x)."""
    return x * sigmoid(x)


def softplus(x: np.ndarray, threshold: float = 20.0) -> np.ndarray:
    """torch.nn.functional.softplus (beta 1): ``x`` where ``x > threshold``, else ``log1p(exp(x))``."""
    x = np.asarray(x)
    return np.where(x > threshold, x, np.log1p(np.exp(np.minimum(x, threshold)))).astype(x.dtype, copy=False)


# ---------------------------------------------------------------------------------------------------------------
# norms and gates


def rms_norm(x: np.ndarray, mult: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm over the last axis, multiplier form: ``x / sqrt(mean(x²) + eps) * mult``.

    x [..., n], mult [n] (for HF zero-centred norms the loader already turned w into 1 + w) -> [..., n].
    """
    dt = compute_dtype(x)
    x = _as(x, dt)
    var = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(var + dt(eps)) * _param(mult, dt)


def add_rms_norm(x: np.ndarray, residual: np.ndarray | None, mult: np.ndarray, eps: float):
    """Residual add then RMSNorm: ``new_residual = residual + x``; returns ``(rms_norm(new_residual), new_residual)``.

    x, residual [..., n] (residual None means "no residual yet": new_residual = x); mult [n].
    """
    dt = compute_dtype(x)
    new_residual = _as(x, dt) if residual is None else _as(residual, dt) + _as(x, dt)
    return rms_norm(new_residual, mult, eps), new_residual


def gated_rms_norm(o: np.ndarray, z: np.ndarray, w: np.ndarray, eps: float, act: str = "silu") -> np.ndarray:
    """The GDN output norm (HF ``Qwen3_5RMSNormGated``), norm before gate, per head over the last axis:
    ``o / sqrt(mean(o²) + eps) * w * act(z)``; act is "silu" (= "swish") or "sigmoid".

    o [..., Dv], z [..., Dv], w [Dv] (plain weight, not zero-centred) -> [..., Dv].
    """
    dt = compute_dtype(o)
    z = _as(z, dt)
    if act in ("silu", "swish"):
        gate = silu(z)
    elif act == "sigmoid":
        gate = sigmoid(z)
    else:
        raise ValueError(f"gated_rms_norm: unknown act {act!r}")
    return rms_norm(o, w, eps) * gate


def silu_mul(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """SwiGLU inner product: ``silu(gate) * up`` (same shapes)."""
    dt = compute_dtype(gate)
    return silu(_as(gate, dt)) * _as(up, dt)


def sigmoid_gate(o: np.ndarray, gate: np.ndarray) -> np.ndarray:
    """Attention output gate: ``o * sigmoid(gate)`` (same shapes)."""
    dt = compute_dtype(o)
    return _as(o, dt) * sigmoid(_as(gate, dt))


# ---------------------------------------------------------------------------------------------------------------
# full attention pieces


def rope_inv_freq(rotary_dim: int, theta: float, dtype=np.float32) -> np.ndarray:
    """``inv_freq[i] = theta ** (-2i / rotary_dim)``, i < rotary_dim/2, rounded once to ``dtype`` -> [rotary_dim/2]."""
    i = np.arange(0, rotary_dim, 2, dtype=np.float64)
    return (1.0 / (float(theta) ** (i / rotary_dim))).astype(dtype)


def rope(x: np.ndarray, positions, rotary_dim: int, theta: float) -> np.ndarray:
    """Rotate-half RoPE on the first ``rotary_dim`` dims of every head; the rest pass through.

    x [L, heads, hd], positions [L] (one absolute position per row) -> [L, heads, hd].
    For i < R/2 (R = rotary_dim): ``(x_i, x_{i+R/2}) -> (x_i cos - x_{i+R/2} sin, x_{i+R/2} cos + x_i sin)`` with
    angle ``position * inv_freq[i]`` computed in the compute dtype (float32 like HF, or float64).
    """
    dt = compute_dtype(x)
    x = _as(x, dt)
    pos = np.asarray(positions).astype(dt)  # [L]
    half = rotary_dim // 2
    ang = pos[:, None] * rope_inv_freq(rotary_dim, theta, dt)[None, :]  # [L, R/2]
    cos = np.cos(ang)[:, None, :]  # [L, 1, R/2]
    sin = np.sin(ang)[:, None, :]
    x1 = x[..., :half]
    x2 = x[..., half:rotary_dim]
    out = x.copy()
    out[..., :half] = x1 * cos - x2 * sin
    out[..., half:rotary_dim] = x2 * cos + x1 * sin
    return out


def qk_norm_rope(x: np.ndarray, mult: np.ndarray, eps: float, positions, rotary_dim: int, theta: float) -> np.ndarray:
    """Per-head RMSNorm (q_norm / k_norm, multiplier form) then RoPE: x [L, heads, hd] -> [L, heads, hd]."""
    return rope(rms_norm(x, mult, eps), positions, rotary_dim, theta)


def split_q_gate(p: np.ndarray, num_heads: int, head_dim: int):
    """Split the 2x-wide q_proj output into query and gate (interleaved per head, qwen35.md §3.3 step 1).

    p [L, nH*2*hd] -> (q [L, nH, hd], gate [L, nH*hd]).
    """
    L = p.shape[0]
    p = p.reshape(L, num_heads, 2 * head_dim)
    return p[..., :head_dim].copy(), p[..., head_dim:].reshape(L, num_heads * head_dim).copy()


def attention(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, q_positions, scale: float,
              k_positions=None, mask: np.ndarray | None = None) -> np.ndarray:
    """Causal GQA softmax attention (q already normed and roped, keys as cached).

    q [L, nH, hd], k_cache / v_cache [T, nKV, hd], q_positions [L] -> o [L, nH, hd].
    Query head h reads kv head ``h // (nH // nKV)``. Key j is visible to row i iff
    ``k_positions[j] <= q_positions[i]`` (k_positions defaults to 0..T-1) and, when given, ``mask[i, j]``
    (bool [L, T]; the tree mode passes its ancestor mask). Softmax in the compute dtype with max subtraction;
    a row that sees no key returns zeros.
    """
    dt = compute_dtype(q)
    q = _as(q, dt)
    k = _as(k_cache, dt)
    v = _as(v_cache, dt)
    L, nH, hd = q.shape
    T, nKV, _ = k.shape
    rep = nH // nKV
    kpos = np.arange(T) if k_positions is None else np.asarray(k_positions)
    visible = kpos[None, :] <= np.asarray(q_positions)[:, None]  # [L, T]
    if mask is not None:
        visible = visible & np.asarray(mask, dtype=bool)
    kh = np.repeat(k, rep, axis=1)  # [T, nH, hd]
    vh = np.repeat(v, rep, axis=1)
    s = np.einsum("lhd,thd->hlt", q, kh) * dt(scale)  # [nH, L, T]
    s = np.where(visible[None], s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    den = np.sum(p, axis=-1, keepdims=True)
    p = p / np.where(den > 0, den, 1.0)
    return np.einsum("hlt,thd->lhd", p, vh).astype(dt, copy=False)


# ---------------------------------------------------------------------------------------------------------------
# gated delta net pieces


def l2norm(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """``x / sqrt(sum(x²) + eps)`` over the last axis (HF / FLA l2norm: eps on the *sum*)."""
    dt = compute_dtype(x)
    x = _as(x, dt)
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + dt(eps))


def gdn_prepare_qk(q: np.ndarray, k: np.ndarray, eps: float = 1e-6):
    """Post-conv q, k [..., Hk, Dk] -> (q̂ = l2norm(q) * Dk**-0.5, k̂ = l2norm(k)), the delta-rule inputs."""
    dt = compute_dtype(q)
    dk = q.shape[-1]
    return l2norm(q, eps) * dt(dk ** -0.5), l2norm(_as(k, dt), eps)


def gdn_gates(a: np.ndarray, b: np.ndarray, A_log: np.ndarray, dt_bias: np.ndarray):
    """Delta-rule gates from the in_proj_a / in_proj_b outputs.

    a, b [..., Hv]; A_log, dt_bias [Hv] -> (g [..., Hv], beta [..., Hv]) with
    ``beta = sigmoid(b)`` and log-decay ``g = -exp(A_log) * softplus(a + dt_bias)`` (torch softplus threshold 20),
    in float32 (float64 if ``a`` is float64).
    """
    dt = compute_dtype(a)
    a = _as(a, dt)
    g = -np.exp(_param(A_log, dt)) * softplus(a + _param(dt_bias, dt))
    beta = sigmoid(_as(b, dt))
    return g.astype(dt, copy=False), beta


def causal_conv_step(tail: np.ndarray, x: np.ndarray, w: np.ndarray):
    """One token of the depthwise causal conv + SiLU.

    tail [K-1, C] (the previous K-1 raw inputs, oldest first), x [C] (raw qkv of this token), w [C, K]
    (w[:, K-1] multiplies the current token) -> (y [C] = silu(Σ_j w[:, j] * window[j]), new_tail [K-1, C]).
    """
    dt = compute_dtype(x)
    window = np.concatenate([_as(tail, dt), _as(x, dt)[None, :]], axis=0)  # [K, C]
    y = silu(np.sum(_param(w, dt).T * window, axis=0))  # [C]
    return y, window[1:].copy()


def causal_conv(x: np.ndarray, w: np.ndarray, tail: np.ndarray | None = None):
    """Depthwise causal conv + SiLU over L tokens continuing ``tail``.

    x [L, C], w [C, K], tail [K-1, C] or None (zeros: sequence start) -> (y [L, C], new_tail [K-1, C]).
    """
    dt = compute_dtype(x)
    x = _as(x, dt)
    w = _param(w, dt)
    C, K = w.shape
    L = x.shape[0]
    if tail is None:
        tail = np.zeros((K - 1, C), dt)
    full = np.concatenate([_as(tail, dt), x], axis=0)  # [K-1+L, C]
    acc = np.zeros((L, C), dt)
    for j in range(K):
        acc += w[:, j][None, :] * full[j:j + L]
    return silu(acc), full[L:].copy()


def causal_conv_tree(x: np.ndarray, w: np.ndarray, tail: np.ndarray, parents) -> tuple[np.ndarray, np.ndarray]:
    """The conv for tree rows: row i's window is its ancestor chain's raw inputs continuing ``tail``.

    x [n, C], w [C, K], tail [K-1, C] (committed), parents [n] (-1 = continues ``tail``, else < i)
    -> (y [n, C], tails [n, K-1, C]) where tails[i] is the conv tail after row i.
    """
    dt = compute_dtype(x)
    x = _as(x, dt)
    n = x.shape[0]
    y = np.zeros_like(x)
    tails = np.zeros((n,) + tuple(np.shape(tail)), dt)
    for i in range(n):
        p = int(parents[i])
        prev = _as(tail, dt) if p < 0 else tails[p]
        y[i], tails[i] = causal_conv_step(prev, x[i], w)
    return y, tails


def _expand_heads(x: np.ndarray, hv: int) -> np.ndarray:
    """[..., Hk, D] -> [..., Hv, D]: value head h reads key head h // (Hv // Hk)."""
    return np.repeat(x, hv // x.shape[-2], axis=-2)


def delta_rule_step(S: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray):
    """One token of the gated delta rule (qwen35.md §3.4 step 7), prepared q̂, k̂ (see module docstring).

    S [Hv, Dk, Dv], q [Hk, Dk], k [Hk, Dk], v [Hv, Dv], g [Hv] (log-decay), beta [Hv]
    -> (o [Hv, Dv], S' [Hv, Dk, Dv]):
    ``S ← exp(g)·S;  u = Sᵀk̂;  S ← S + k̂ (β(v − u))ᵀ;  o = Sᵀq̂`` (o uses the updated state).
    """
    dt = compute_dtype(v)
    hv = v.shape[0]
    qh = _expand_heads(_as(q, dt), hv)  # [Hv, Dk]
    kh = _expand_heads(_as(k, dt), hv)
    S = _as(S, dt) * np.exp(_as(g, dt))[:, None, None]
    u = np.einsum("hkv,hk->hv", S, kh)  # [Hv, Dv]
    delta = _as(beta, dt)[:, None] * (_as(v, dt) - u)
    S = S + kh[:, :, None] * delta[:, None, :]
    o = np.einsum("hkv,hk->hv", S, qh)
    return o, S


def delta_rule_recurrent(S, Q, K, V, g, beta):
    """Token-by-token recurrence over L rows: Q, K [L, Hk, Dk], V [L, Hv, Dv], g, beta [L, Hv], S [Hv, Dk, Dv]
    -> (O [L, Hv, Dv], S_out)."""
    dt = compute_dtype(V)
    L = V.shape[0]
    O = np.zeros(V.shape, dt)
    S = _as(S, dt)
    for t in range(L):
        O[t], S = delta_rule_step(S, Q[t], K[t], V[t], g[t], beta[t])
    return O, S


def delta_rule_tree(S, Q, K, V, g, beta, parents):
    """Recurrence over tree rows: row i continues its parent's state (``S`` for parents[i] = -1).

    Q, K [n, Hk, Dk], V [n, Hv, Dv], g, beta [n, Hv], S [Hv, Dk, Dv], parents [n]
    -> (O [n, Hv, Dv], states [n, Hv, Dk, Dv]) with states[i] the state after row i.
    """
    dt = compute_dtype(V)
    n = V.shape[0]
    O = np.zeros(V.shape, dt)
    states = np.zeros((n,) + tuple(np.shape(S)), dt)
    for i in range(n):
        p = int(parents[i])
        prev = _as(S, dt) if p < 0 else states[p]
        O[i], states[i] = delta_rule_step(prev, Q[i], K[i], V[i], g[i], beta[i])
    return O, states


def _unit_lower_solve(A: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Solve (I + A) X = rhs by forward substitution, A strictly lower [B, n, n], rhs [B, n, m] -> X [B, n, m]."""
    X = rhs.copy()
    for i in range(1, A.shape[-1]):
        X[:, i] -= np.einsum("bj,bjm->bm", A[:, i, :i], X[:, :i])
    return X


def delta_rule_chunked(S, Q, K, V, g, beta, chunk: int = 64):
    """Chunked (WY) form of the gated delta rule over L rows (qwen35.md §3.5), equal to the recurrence.

    Same arguments and result as :func:`delta_rule_recurrent`. Per chunk of n <= ``chunk`` rows, per value head,
    with c = inclusive cumsum of g, Γ_ij = exp(c_i − c_j) (j <= i, masked before exp), A = strictly-lower
    β_i (k̂_i·k̂_j) Γ_ij, T = (I + A)^-1 (forward substitution):
    ``U = T(β⊙V); W = T(β⊙e^c⊙K̂); V' = U − W S; O = (e^c⊙Q̂) S + ((Q̂K̂ᵀ)⊙Γ) V';
    S_out = e^{c_n} S + (e^{c_n − c}⊙K̂)ᵀ V'``. A short last chunk is handled directly (no padding).
    """
    dt = compute_dtype(V)
    L, hv, _ = V.shape
    Qh = np.transpose(_expand_heads(_as(Q, dt), hv), (1, 0, 2))  # [Hv, L, Dk]
    Kh = np.transpose(_expand_heads(_as(K, dt), hv), (1, 0, 2))  # [Hv, L, Dk]
    Vh = np.transpose(_as(V, dt), (1, 0, 2))  # [Hv, L, Dv]
    gh = np.transpose(_as(g, dt))  # [Hv, L]
    bh = np.transpose(_as(beta, dt))  # [Hv, L]
    S = _as(S, dt).copy()
    O = np.zeros_like(Vh)
    for s0 in range(0, L, chunk):
        sl = slice(s0, min(L, s0 + chunk))
        q, k, v, gg, bb = Qh[:, sl], Kh[:, sl], Vh[:, sl], gh[:, sl], bh[:, sl]
        n = v.shape[1]
        c = np.cumsum(gg, axis=1)  # [Hv, n]
        lower = np.tril(np.ones((n, n), dtype=bool))  # j <= i
        diff = np.where(lower[None], c[:, :, None] - c[:, None, :], 0.0)
        gamma = np.where(lower[None], np.exp(diff), 0.0).astype(dt)  # [Hv, n, n]
        strict = np.tril(np.ones((n, n), dtype=bool), -1)
        A = np.where(strict[None], bb[:, :, None] * np.einsum("hid,hjd->hij", k, k) * gamma, 0.0).astype(dt)
        ec = np.exp(c)[:, :, None]  # [Hv, n, 1]
        rhs = np.concatenate([bb[:, :, None] * v, bb[:, :, None] * ec * k], axis=-1)  # [Hv, n, Dv+Dk]
        X = _unit_lower_solve(A, rhs)
        U, W = X[..., : v.shape[-1]], X[..., v.shape[-1]:]  # [Hv, n, Dv], [Hv, n, Dk]
        Vp = U - np.einsum("hik,hkv->hiv", W, S)
        O[:, sl] = np.einsum("hik,hkv->hiv", ec * q, S) + np.einsum("hij,hjv->hiv",
                                                                     np.einsum("hid,hjd->hij", q, k) * gamma, Vp)
        cn = c[:, -1]  # [Hv]
        S = np.exp(cn)[:, None, None] * S + np.einsum("hik,hiv->hkv", np.exp(cn[:, None] - c)[:, :, None] * k, Vp)
    return np.transpose(O, (1, 0, 2)).copy(), S


# ---------------------------------------------------------------------------------------------------------------
# weights: MLX affine dequant, linear, embedding, MLP


def affine_unpack(packed: np.ndarray, bits: int, in_features: int) -> np.ndarray:
    """MLX bit stream -> codes: packed uint32 [out, in*bits/32] -> uint32 [out, in].

    Each row is a little-endian, LSB-first bit stream; code j occupies bits [j*bits, (j+1)*bits) (qwen35.md §4.1).
    Written independently of ``tensorfold.model.quant`` (via the byte view + unpackbits) so each checks the other.
    """
    packed = np.ascontiguousarray(np.asarray(packed, dtype="<u4"))
    out = packed.shape[0]
    bitstream = np.unpackbits(packed.view(np.uint8).reshape(out, -1), axis=1, bitorder="little")  # [out, words*32]
    bitstream = bitstream[:, : in_features * bits].reshape(out, in_features, bits).astype(np.uint32)
    return (bitstream << np.arange(bits, dtype=np.uint32)[None, None, :]).sum(axis=-1, dtype=np.uint32)


def affine_dequant(packed: np.ndarray, scales: np.ndarray, biases: np.ndarray, bits: int, group: int) -> np.ndarray:
    """MLX affine dequantization in fp32: ``w = scale * q + bias`` per group of ``group`` inputs.

    packed uint32 [out, in*bits/32], scales / biases [out, in/group] (bf16 bits as uint16, or float16/32)
    -> float32 [out, in].
    """
    sc = _param(scales, np.float32)
    bi = _param(biases, np.float32)
    out, ngroups = sc.shape
    n_in = ngroups * group
    q = affine_unpack(packed, bits, n_in).astype(np.float32).reshape(out, ngroups, group)
    return (sc[:, :, None] * q + bi[:, :, None]).reshape(out, n_in)


def weight_f32(weight) -> np.ndarray:
    """A weight as a float array [out, in]: DenseWeight / AffineWeight (anything with ``to_f32()``), or an array
    (uint16 = bf16 bits; float64 stays float64, other floats become float32)."""
    if hasattr(weight, "to_f32"):
        return np.asarray(weight.to_f32())
    w = np.asarray(weight)
    if w.dtype == np.uint16:
        return _bf16_bits_to_f32(w)
    return w if w.dtype == np.float64 else w.astype(np.float32, copy=False)


def linear(x: np.ndarray, weight) -> np.ndarray:
    """``x @ Wᵀ``: x [..., in], weight [out, in] (Weight object or array) -> [..., out], in x's compute dtype."""
    dt = compute_dtype(x)
    return _as(x, dt) @ weight_f32(weight).astype(dt, copy=False).T


def embed(weight, ids, dtype=np.float32) -> np.ndarray:
    """Embedding rows: weight [V, H] (Weight with ``rows(ids)``, or array), ids [L] -> [L, H] in ``dtype``."""
    ids = np.asarray(ids, dtype=np.int64)
    if hasattr(weight, "rows"):
        return np.asarray(weight.rows(ids)).astype(dtype, copy=False)
    return weight_f32(weight)[ids].astype(dtype, copy=False)


def mlp(x: np.ndarray, gate_w, up_w, down_w) -> np.ndarray:
    """SwiGLU MLP: ``down(silu(gate(x)) * up(x))``; x [..., H] -> [..., H] (intermediate [..., I])."""
    return linear(silu_mul(linear(x, gate_w), linear(x, up_w)), down_w)
