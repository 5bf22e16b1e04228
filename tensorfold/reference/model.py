"""ReferenceModel: the Qwen3.5 text forward in numpy, in every mode the engine uses.

Owns: the decoder of qwen35.md §3.2 built from :mod:`tensorfold.reference.ops`, over a per-stream
:class:`~tensorfold.reference.state.State`, in four modes:

* ``prompt(state, ids)``  — chunked delta rule (C = 64), conv and attention over the whole chunk; works on an empty
  or a non-empty state (a continued prompt chunk). Advances the state.
* ``step(state, id)`` / ``window(state, ids)`` — token recurrence; a window is k steps, bit-identical to them.
* ``tree(state, ids, parents)`` — each row sees exactly its ancestors (attention: committed cache + ancestors'
  keys and its own; conv: the ancestor chain's raw qkv rows continuing the committed tail; recurrence: continues
  its parent's state). By default each row is a step on its parent's state (bit-identical to stepping the branch);
  ``batched=True`` runs the rows together with ancestor masks (the form a tree kernel takes). Does not advance;
  ``commit(state, result, path)`` advances along one branch.

Mirrors transformers' ``Qwen3_5ForCausalLM`` run in float32 (the parity tests in tests/reference prove it).

Numbers: activations, residual stream and states are pure float32 (float64 with ``dtype=np.float64``); weights are
dequantized/converted lazily once and cached in that dtype. Deviations from HF run in bf16 (qwen35.md §6.7): HF
rounds the embedding, every norm / linear / conv output, residual adds, β, the GDN output and the normalised value
inside the gated norm to bf16 and casts RoPE cos/sin to bf16; none of those roundings happen here.

Tensor names are the internal names of contracts.md ("Checkpoint"): norm multipliers already include the +1 of
HF's zero-centred norms, ``linear_attn.conv1d`` is ``[conv_dim, K]``.
"""

from __future__ import annotations

import numpy as np

from tensorfold.reference import ops
from tensorfold.reference.state import State, TreeResult

__all__ = ["ReferenceModel", "State", "TreeResult"]

_LINEAR = ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj", "conv1d", "dt_bias", "A_log", "norm")
_FULL = ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")
_COMMON = ("input_layernorm", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


_KV_CACHES = (None, "f32", "float32", "bf16", "fp8")


class ReferenceModel:
    """The numpy oracle. ``tensors``: internal name -> Weight or array (or a Checkpoint, whose ``.tensors`` is
    used); ``config``: a ``tensorfold.model.config.ModelConfig`` (any object with its fields works).

    ``kv_cache``: None / "f32" keeps K/V exactly (model dtype); "bf16" rounds every cached K/V row to bf16 (RNE);
    "fp8" stores them as e4m3 with one fp32 scale per (row, kv head) (``tensorfold.reference.kv8``). Rows are
    rounded when written, before attention reads them (the current token reads its own rounded key too), as a
    device cache written on RoPE and read by the attention kernel would behave.
    """

    def __init__(self, tensors, config, dtype=np.float32, kv_cache=None):
        if kv_cache not in _KV_CACHES:
            raise ValueError(f"ReferenceModel: kv_cache={kv_cache!r} is not one of {_KV_CACHES}")
        self.kv_cache = kv_cache
        if hasattr(tensors, "tensors") and not isinstance(tensors, dict):
            tensors = tensors.tensors  # a Checkpoint
        self.config = config
        self.dtype = np.dtype(dtype).type
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"ReferenceModel: dtype must be float32 or float64, got {dtype!r}")
        self._tensors = dict(tensors)
        self._cache: dict[str, np.ndarray] = {}
        self._check_names()
        c = config
        self.key_dim = c.linear_num_key_heads * c.linear_key_head_dim
        self.value_dim = c.linear_num_value_heads * c.linear_value_head_dim
        self.rotary_dim = int(c.head_dim * c.partial_rotary_factor)
        self.head_name = "lm_head" if "lm_head" in self._tensors else "embed_tokens"
        if not c.tie_word_embeddings and "lm_head" not in self._tensors:
            raise KeyError("ReferenceModel: untied config but no 'lm_head' tensor")

    @classmethod
    def from_checkpoint(cls, ckpt, dtype=np.float32, kv_cache=None) -> "ReferenceModel":
        """From a ``Checkpoint`` (``tensorfold.model.checkpoint``) or a path to load with ``load_checkpoint``."""
        if not hasattr(ckpt, "tensors"):
            from tensorfold.model.checkpoint import load_checkpoint

            ckpt = load_checkpoint(ckpt)
        return cls(ckpt.tensors, ckpt.config, dtype=dtype, kv_cache=kv_cache)

    # ----------------------------------------------------------------------------------------------- weights

    def _check_names(self) -> None:
        need = ["embed_tokens", "norm"]
        for i, lt in enumerate(self.config.layer_types):
            sub = _LINEAR if lt == "linear_attention" else _FULL
            mixer = "linear_attn" if lt == "linear_attention" else "self_attn"
            need += [f"layers.{i}.{n}" for n in _COMMON] + [f"layers.{i}.{mixer}.{n}" for n in sub]
        missing = [n for n in need if n not in self._tensors]
        if missing:
            raise KeyError(f"ReferenceModel: missing tensors {missing[:8]}{' ...' if len(missing) > 8 else ''}")

    def w(self, name: str) -> np.ndarray:
        """Tensor ``name`` as a dense array in the model dtype (dequantized / converted once, then cached)."""
        arr = self._cache.get(name)
        if arr is None:
            arr = ops.weight_f32(self._tensors[name]).astype(self.dtype, copy=False)
            self._cache[name] = arr
        return arr

    def _kv_round(self, x: np.ndarray) -> np.ndarray:
        """A K or V block [n, nKV, hd] as the cache stores it (see ``kv_cache``)."""
        if self.kv_cache == "bf16":
            from tensorfold.model import bf16

            return bf16.to_f32(bf16.from_f32(x.astype(np.float32))).astype(self.dtype)
        if self.kv_cache == "fp8":
            from tensorfold.reference import kv8

            codes, scale = kv8.quantize_rows(x.astype(np.float32))  # one scale per (row, kv head)
            return kv8.dequantize_rows(codes, scale).astype(self.dtype)
        return x

    # ----------------------------------------------------------------------------------------------- state

    def new_state(self) -> State:
        """The empty state of a fresh sequence."""
        return State.empty(self.config, self.dtype)

    # ----------------------------------------------------------------------------------------------- modes

    def prompt(self, state: State, ids, chunk: int = 64) -> np.ndarray:
        """Consume ``ids`` (chunked delta rule, ``chunk`` rows a chunk), advance ``state``; returns logits [L, V]."""
        return self.logits_for(self.forward_hidden(state, ids, mode="prompt", chunk=chunk))

    def step(self, state: State, token_id: int) -> np.ndarray:
        """Consume one token (recurrent delta rule), advance ``state``; returns logits [V]."""
        return self.logits_for(self._forward(state, np.array([int(token_id)]), "window", None, None))[0]

    def window(self, state: State, ids) -> np.ndarray:
        """Consume k tokens one row at a time, advance ``state`` by k; returns logits [k, V].

        Each row runs exactly the ``step`` computation, so window logits equal repeated steps bit for bit.
        """
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        out = np.zeros((ids.size, self.config.vocab_size), self.dtype)
        for r, t in enumerate(ids):
            out[r] = self.step(state, t)
        return out

    def tree(self, state: State, ids, parents, batched: bool = False) -> TreeResult:
        """Forward a token tree on top of ``state`` without advancing it.

        ids [n], parents [n] with ``parents[i] == -1`` (row continues the committed state) or ``parents[i] < i``.
        Row i sits at position ``state.pos + depth(i)`` and sees exactly its ancestors and itself.
        Default: each row is one ``step`` on a copy of its parent's state, so a row's logits equal stepping its
        branch bit for bit. ``batched=True``: all rows in one forward (ancestor mask in attention, per-row conv
        windows and recurrences: ``ops.causal_conv_tree`` / ``ops.delta_rule_tree``), equal within rounding.
        """
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        parents = np.asarray(parents, dtype=np.int64).reshape(-1)
        if parents.shape != ids.shape:
            raise ValueError(f"tree: {len(ids)} ids but {len(parents)} parents")
        for i, p in enumerate(parents):
            if not -1 <= p < i:
                raise ValueError(f"tree: parents[{i}] = {p} must be -1 or < {i}")
        if not batched:
            return self._tree_by_rows(state, ids, parents)
        extra: dict = {}
        hidden = self._forward(state, ids, "tree", parents, extra)
        return TreeResult(logits=self.logits_for(hidden), hidden=hidden, parents=parents,
                          positions=extra["positions"], base_pos=state.pos, conv_tails=extra["conv_tails"],
                          rec_states=extra["rec_states"], k_rows=extra["k_rows"], v_rows=extra["v_rows"])

    def _tree_by_rows(self, state: State, ids: np.ndarray, parents: np.ndarray) -> TreeResult:
        n, c = ids.size, self.config
        row_states: list[State] = []
        hidden = np.zeros((n, c.hidden_size), self.dtype)
        logits = np.zeros((n, c.vocab_size), self.dtype)
        for i in range(n):
            s = (state if parents[i] < 0 else row_states[parents[i]]).copy()
            hidden[i] = self._forward(s, ids[i:i + 1], "window", None, None)[0]
            logits[i] = self.logits_for(hidden[i:i + 1])[0]
            row_states.append(s)
        L = c.num_hidden_layers
        conv_tails, rec_states, k_rows, v_rows = [None] * L, [None] * L, [None] * L, [None] * L
        for layer in range(L):
            if n == 0:
                continue
            if state.conv[layer] is not None:  # linear attention: the state after each row
                conv_tails[layer] = np.stack([rs.conv[layer] for rs in row_states])  # [n, K-1, C]
                rec_states[layer] = np.stack([rs.rec[layer] for rs in row_states])  # [n, Hv, Dk, Dv]
            if state.k[layer] is not None:  # full attention: each row's own key / value (its last cache row)
                k_rows[layer] = np.stack([rs.k[layer][-1] for rs in row_states])  # [n, nKV, hd]
                v_rows[layer] = np.stack([rs.v[layer][-1] for rs in row_states])
        positions = np.array([rs.pos - 1 for rs in row_states], dtype=np.int64)
        return TreeResult(logits=logits, hidden=hidden, parents=parents, positions=positions, base_pos=state.pos,
                          conv_tails=conv_tails, rec_states=rec_states, k_rows=k_rows, v_rows=v_rows)

    def commit(self, state: State, result: TreeResult, path) -> None:
        """Advance ``state`` along tree rows ``path`` (a chain from a root: parents[path[0]] == -1,
        parents[path[j]] == path[j-1]). ``state`` must be the one the tree was run on (same pos)."""
        path = [int(p) for p in path]
        if state.pos != result.base_pos:
            raise ValueError(f"commit: state.pos {state.pos} != tree base_pos {result.base_pos}")
        if not path:
            return
        prev = -1
        for r in path:
            if not 0 <= r < len(result.parents) or result.parents[r] != prev:
                raise ValueError(f"commit: path {path} is not a chain from a root of the tree")
            prev = r
        last = path[-1]
        for i in range(len(state.conv)):
            if result.conv_tails[i] is not None:
                state.conv[i] = result.conv_tails[i][last].copy()
                state.rec[i] = result.rec_states[i][last].copy()
            if result.k_rows[i] is not None:
                state.k[i] = np.concatenate([state.k[i], result.k_rows[i][path]], axis=0)
                state.v[i] = np.concatenate([state.v[i], result.v_rows[i][path]], axis=0)
        state.pos += len(path)

    # ----------------------------------------------------------------------------------------------- pieces

    def embed(self, ids) -> np.ndarray:
        """ids [L] -> embeddings [L, H] in the model dtype."""
        return self.w("embed_tokens")[np.asarray(ids, dtype=np.int64)]

    def logits_for(self, hidden: np.ndarray) -> np.ndarray:
        """Final-normed hidden [..., H] -> logits [..., V] (lm_head, or embed_tokens when tied)."""
        return ops.linear(hidden, self.w(self.head_name))

    def forward_hidden(self, state: State, ids, mode: str = "prompt", chunk: int = 64) -> np.ndarray:
        """Consume ``ids`` and advance ``state``; returns the final-normed hidden [L, H] (feed ``logits_for``).
        mode "prompt" uses the chunked delta rule, "window" runs the rows one ``step`` at a time."""
        if mode not in ("prompt", "window"):
            raise ValueError(f"forward_hidden: mode must be 'prompt' or 'window', got {mode!r}")
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            return np.zeros((0, self.config.hidden_size), self.dtype)
        if mode == "window":  # one row at a time, exactly as step
            return np.concatenate([self._forward(state, ids[r:r + 1], mode, None, None) for r in range(ids.size)])
        return self._forward(state, ids, mode, None, None, chunk)

    # ----------------------------------------------------------------------------------------------- forward

    def _forward(self, state: State, ids: np.ndarray, mode: str, parents, extra, chunk: int = 64) -> np.ndarray:
        c = self.config
        n = ids.shape[0]
        if mode == "tree":
            depth = np.zeros(n, np.int64)
            anc = np.zeros((n, n), dtype=bool)  # anc[i, j]: row j is row i or one of its ancestors
            for i in range(n):
                p = parents[i]
                if p >= 0:
                    depth[i] = depth[p] + 1
                    anc[i] = anc[p]
                anc[i, i] = True
            positions = state.pos + depth
            extra.update(positions=positions, conv_tails=[None] * c.num_hidden_layers,
                         rec_states=[None] * c.num_hidden_layers, k_rows=[None] * c.num_hidden_layers,
                         v_rows=[None] * c.num_hidden_layers)
        else:
            positions = state.pos + np.arange(n)
            anc = np.tril(np.ones((n, n), dtype=bool))
        eps = c.rms_norm_eps
        h = self.embed(ids)  # [n, H]
        for i, lt in enumerate(c.layer_types):
            pre = f"layers.{i}."
            x = ops.rms_norm(h, self.w(pre + "input_layernorm"), eps)
            if lt == "linear_attention":
                mix = self._gdn(i, x, state, mode, parents, extra, chunk)
            else:
                mix = self._attn(i, x, state, mode, positions, anc, extra)
            h = h + mix
            x = ops.rms_norm(h, self.w(pre + "post_attention_layernorm"), eps)
            h = h + ops.mlp(x, self.w(pre + "mlp.gate_proj"), self.w(pre + "mlp.up_proj"),
                            self.w(pre + "mlp.down_proj"))
        if mode != "tree":
            state.pos += n
        return ops.rms_norm(h, self.w("norm"), eps)

    def _gdn(self, i: int, x: np.ndarray, state: State, mode: str, parents, extra, chunk: int) -> np.ndarray:
        """Gated DeltaNet block (qwen35.md §3.4): x [n, H] -> [n, H]."""
        c = self.config
        pre = f"layers.{i}.linear_attn."
        n = x.shape[0]
        Hk, Hv = c.linear_num_key_heads, c.linear_num_value_heads
        Dk, Dv = c.linear_key_head_dim, c.linear_value_head_dim
        qkv = ops.linear(x, self.w(pre + "in_proj_qkv"))  # [n, conv_dim] raw, pre-conv
        z = ops.linear(x, self.w(pre + "in_proj_z")).reshape(n, Hv, Dv)
        b = ops.linear(x, self.w(pre + "in_proj_b"))  # [n, Hv]
        a = ops.linear(x, self.w(pre + "in_proj_a"))  # [n, Hv]
        if mode == "tree":
            y, tails = ops.causal_conv_tree(qkv, self.w(pre + "conv1d"), state.conv[i], parents)
        else:
            y, new_tail = ops.causal_conv(qkv, self.w(pre + "conv1d"), state.conv[i])
        q = y[:, : self.key_dim].reshape(n, Hk, Dk)
        k = y[:, self.key_dim: 2 * self.key_dim].reshape(n, Hk, Dk)
        v = y[:, 2 * self.key_dim:].reshape(n, Hv, Dv)
        qh, kh = ops.gdn_prepare_qk(q, k)
        g, beta = ops.gdn_gates(a, b, self.w(pre + "A_log"), self.w(pre + "dt_bias"))  # [n, Hv] each
        if mode == "prompt":
            o, S = ops.delta_rule_chunked(state.rec[i], qh, kh, v, g, beta, chunk=chunk)
        elif mode == "window":
            o, S = ops.delta_rule_recurrent(state.rec[i], qh, kh, v, g, beta)
        else:
            o, states = ops.delta_rule_tree(state.rec[i], qh, kh, v, g, beta, parents)
        act = getattr(c, "output_gate_type", "silu") or "silu"
        o = ops.gated_rms_norm(o, z, self.w(pre + "norm"), c.rms_norm_eps, act=act)  # [n, Hv, Dv]
        if mode == "tree":
            extra["conv_tails"][i] = tails
            extra["rec_states"][i] = states
        else:
            state.conv[i] = new_tail
            state.rec[i] = S
        return ops.linear(o.reshape(n, Hv * Dv), self.w(pre + "out_proj"))

    def _attn(self, i: int, x: np.ndarray, state: State, mode: str, positions, anc, extra) -> np.ndarray:
        """Gated full attention block (qwen35.md §3.3): x [n, H] -> [n, H]."""
        c = self.config
        pre = f"layers.{i}.self_attn."
        n = x.shape[0]
        nH, nKV, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        q, gate = ops.split_q_gate(ops.linear(x, self.w(pre + "q_proj")), nH, hd)  # [n, nH, hd], [n, nH*hd]
        k = ops.linear(x, self.w(pre + "k_proj")).reshape(n, nKV, hd)
        v = ops.linear(x, self.w(pre + "v_proj")).reshape(n, nKV, hd)
        q = ops.qk_norm_rope(q, self.w(pre + "q_norm"), c.rms_norm_eps, positions, self.rotary_dim, c.rope_theta)
        k = ops.qk_norm_rope(k, self.w(pre + "k_norm"), c.rms_norm_eps, positions, self.rotary_dim, c.rope_theta)
        k, v = self._kv_round(k), self._kv_round(v)  # as the cache stores them (identity unless kv_cache is set)
        t0 = state.k[i].shape[0]
        k_all = np.concatenate([state.k[i], k], axis=0)  # [t0 + n, nKV, hd]
        v_all = np.concatenate([state.v[i], v], axis=0)
        k_pos = np.concatenate([np.arange(t0), positions])
        mask = np.concatenate([np.ones((n, t0), dtype=bool), anc], axis=1)  # [n, t0 + n]
        o = ops.attention(q, k_all, v_all, positions, hd ** -0.5, k_positions=k_pos, mask=mask)  # [n, nH, hd]
        o = ops.sigmoid_gate(o.reshape(n, nH * hd), gate)
        if mode == "tree":
            extra["k_rows"][i] = k
            extra["v_rows"][i] = v
        else:
            state.k[i] = k_all
            state.v[i] = v_all
        return ops.linear(o, self.w(pre + "o_proj"))
