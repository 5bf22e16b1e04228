"""The cpu backend: `ReferenceModel` (numpy) with one `State` per slot; sampling on the host.

Slow but exact: it is the backend on machines without a GPU and the oracle the cuda backend is compared with.
Each slot's forward runs on its own State (no batching across slots), so a stream never depends on the others.
`from_checkpoint` builds the ReferenceModel with the engine's kv_cache ("bf16": cached K/V rows rounded to bf16;
"fp8": e4m3 with a row scale), the twins of the device caches; compute stays float32.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tensorfold.engine.backend import Backend

__all__ = ["CpuBackend"]


class CpuBackend(Backend):
    name = "cpu"

    def __init__(self, model, max_slots: int, context: int, vocab_size: int | None = None, kv_cache: str = "bf16"):
        """model: a `tensorfold.reference.model.ReferenceModel` (or anything with new_state / prompt / step)."""
        if max_slots < 1:
            raise ValueError(f"max_slots must be >= 1, got {max_slots}")
        self.model = model
        self.max_slots = int(max_slots)
        self.context = int(context)
        self.kv_cache = kv_cache
        if vocab_size is None:
            vocab_size = int(model.config.vocab_size)
        self.vocab_size = int(vocab_size)
        self._states: dict[int, object] = {}

    @classmethod
    def from_checkpoint(cls, checkpoint, engine_config) -> "CpuBackend":
        """A ReferenceModel whose K/V cache rounds rows like the device cache (bf16, or e4m3 + row scale)."""
        from tensorfold.reference.model import ReferenceModel

        model = ReferenceModel(checkpoint, checkpoint.config, kv_cache=engine_config.kv_cache)
        return cls(model, engine_config.parallel, engine_config.context, kv_cache=engine_config.kv_cache)

    # -- slots --------------------------------------------------------------------------------------------------
    def new_slot(self) -> int:
        for s in range(self.max_slots):
            if s not in self._states:
                self._states[s] = self.model.new_state()
                return s
        raise RuntimeError(f"cpu backend: all {self.max_slots} slots are in use")

    def free(self, slot: int) -> None:
        if self._states.pop(slot, None) is None:
            raise KeyError(f"cpu backend: slot {slot} is not in use")

    def _state(self, slot: int):
        try:
            return self._states[slot]
        except KeyError:
            raise KeyError(f"cpu backend: slot {slot} is not in use") from None

    @property
    def slots_in_use(self) -> int:
        return len(self._states)

    # -- forwards -----------------------------------------------------------------------------------------------
    def prefill(self, slot: int, ids: Sequence[int], start_pos: int, want_logits: bool = True):
        rows = self.prefill_rows(slot, ids, start_pos)
        return rows[-1] if want_logits else None

    def prefill_rows(self, slot: int, ids: Sequence[int], start_pos: int) -> np.ndarray:
        state = self._state(slot)
        ids = [int(t) for t in ids]
        if not ids:
            raise ValueError("prefill: empty chunk")
        if state.pos != start_pos:
            raise ValueError(f"prefill: slot {slot} holds {state.pos} tokens, chunk starts at {start_pos}")
        if start_pos + len(ids) > self.context:
            raise ValueError(f"prefill: {start_pos + len(ids)} tokens exceed the context of {self.context}")
        return np.asarray(self.model.prompt(state, ids), dtype=np.float32)

    def decode(self, slots: Sequence[int], ids: Sequence[int]) -> np.ndarray:
        if len(slots) != len(ids):
            raise ValueError(f"decode: {len(slots)} slots but {len(ids)} ids")
        out = np.empty((len(slots), self.vocab_size), dtype=np.float32)
        for i, (slot, t) in enumerate(zip(slots, ids)):
            state = self._state(slot)
            if state.pos >= self.context:
                raise ValueError(f"decode: slot {slot} is full ({state.pos} of {self.context} tokens)")
            out[i] = self.model.step(state, int(t))
        return out

    def describe(self) -> dict:
        kv = getattr(self.model, "kv_cache", None) or np.dtype(getattr(self.model, "dtype", np.float32)).name
        return {"backend": self.name, "kv_cache": kv}
