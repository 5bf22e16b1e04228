"""Per-stream decoding state of the reference model, and the result of a tree forward.

Owns: ``State`` (what one sequence carries between forwards: conv tails and recurrent states of the linear-attention
layers, the K/V cache of the full-attention layers, the number of tokens consumed) with ``snapshot`` / ``restore``,
and ``TreeResult`` (what ``ReferenceModel.commit`` needs to advance a state along one branch of a tree).
Layout mirrors contracts.md "Reference"; the recurrent state uses HF/FLA's ``[Hv, Dk, Dv]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["State", "TreeResult"]


class _snapshot_or_restore:
    """``State.restore(snap)`` on the class returns a new State; ``state.restore(snap)`` restores in place."""

    def __get__(self, obj, cls):
        if obj is None:
            return lambda snap: snap.copy()
        return obj._restore_into


@dataclass
class State:
    """One stream's state. Lists are indexed by layer; entries of the other layer type are None.

    conv[i]  [K-1, conv_dim]   raw (pre-conv, pre-SiLU) qkv rows of the last K-1 tokens, oldest first (linear layers)
    rec[i]   [Hv, Dk, Dv]      gated-delta-rule state (linear layers)
    k[i], v[i] [T, nKV, hd]    post-norm, post-RoPE keys and values of the T = pos tokens seen (full layers)
    pos      tokens consumed so far (= the position of the next token)
    """

    conv: list
    rec: list
    k: list
    v: list
    pos: int = 0
    dtype: type = field(default=np.float32)

    @classmethod
    def empty(cls, config, dtype=np.float32) -> "State":
        """The zero state at sequence start for ``config`` (a ModelConfig)."""
        conv, rec, k, v = [], [], [], []
        conv_dim = 2 * config.linear_num_key_heads * config.linear_key_head_dim + \
            config.linear_num_value_heads * config.linear_value_head_dim
        for lt in config.layer_types:
            if lt == "linear_attention":
                conv.append(np.zeros((config.linear_conv_kernel_dim - 1, conv_dim), dtype))
                rec.append(np.zeros((config.linear_num_value_heads, config.linear_key_head_dim,
                                     config.linear_value_head_dim), dtype))
                k.append(None)
                v.append(None)
            else:
                conv.append(None)
                rec.append(None)
                kv_shape = (0, config.num_key_value_heads, config.head_dim)
                k.append(np.zeros(kv_shape, dtype))
                v.append(np.zeros(kv_shape, dtype))
        return cls(conv, rec, k, v, 0, dtype)

    def copy(self) -> "State":
        """A deep copy (arrays copied)."""
        cp = lambda xs: [None if x is None else x.copy() for x in xs]  # noqa: E731
        return State(cp(self.conv), cp(self.rec), cp(self.k), cp(self.v), int(self.pos), self.dtype)

    def snapshot(self) -> "State":
        """An independent copy that later forwards on ``self`` do not change."""
        return self.copy()

    def _restore_into(self, snap: "State") -> "State":
        fresh = snap.copy()
        self.conv, self.rec, self.k, self.v, self.pos, self.dtype = (fresh.conv, fresh.rec, fresh.k, fresh.v,
                                                                     fresh.pos, fresh.dtype)
        return self

    restore = _snapshot_or_restore()

    def __eq__(self, other) -> bool:  # exact equality of every array (used by tests)
        if not isinstance(other, State) or self.pos != other.pos:
            return False
        for a_list, b_list in ((self.conv, other.conv), (self.rec, other.rec), (self.k, other.k),
                               (self.v, other.v)):
            if len(a_list) != len(b_list):
                return False
            for a, b in zip(a_list, b_list):
                if (a is None) != (b is None) or (a is not None and not np.array_equal(a, b)):
                    return False
        return True


@dataclass
class TreeResult:
    """Result of ``ReferenceModel.tree``: logits per row plus, per row, what advancing along it requires.

    logits [n, V]; hidden [n, H] (final-normed); parents [n]; positions [n] (absolute); base_pos (state.pos at the
    forward); conv_tails[i] [n, K-1, C] and rec_states[i] [n, Hv, Dk, Dv] = the state *after* each row (linear
    layers); k_rows[i], v_rows[i] [n, nKV, hd] = each row's key and value (full layers). Other entries None.
    """

    logits: np.ndarray
    hidden: np.ndarray
    parents: np.ndarray
    positions: np.ndarray
    base_pos: int
    conv_tails: list
    rec_states: list
    k_rows: list
    v_rows: list
