"""The cpu backend: `ReferenceModel` (numpy) with one `State` per slot; sampling on the host.

Slow but exact: it is the backend on machines without a GPU and the oracle the cuda backend is compared with.
Each slot's forward runs on its own State (no batching across slots), so a stream never depends on the others.
The reference keeps K/V in float32: kv_cache="bf16" runs with that exact cache (the startup line says so);
"fp8" is passed to the ReferenceModel and refused with a ValueError if it has no fp8 cache.
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
        from tensorfold.reference.model import ReferenceModel

        kw = {}
        if engine_config.kv_cache != "bf16":
            kw["kv_cache"] = engine_config.kv_cache
        try:
            model = ReferenceModel(checkpoint, checkpoint.config, **kw)
        except TypeError:
            if kw:
                raise ValueError(
                    f"kv_cache={engine_config.kv_cache!r} is not supported by the cpu backend's reference model"
                ) from None
            raise
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
        state = self._state(slot)
        ids = [int(t) for t in ids]
        if not ids:
            raise ValueError("prefill: empty chunk")
        if state.pos != start_pos:
            raise ValueError(f"prefill: slot {slot} holds {state.pos} tokens, chunk starts at {start_pos}")
        if start_pos + len(ids) > self.context:
            raise ValueError(f"prefill: {start_pos + len(ids)} tokens exceed the context of {self.context}")
        logits = self.model.prompt(state, ids)
        if not want_logits:
            return None
        return np.asarray(logits, dtype=np.float32)[-1]

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
        # the reference keeps its K/V cache in its compute dtype unless it was built with an fp8 cache
        kv = self.kv_cache
        if kv == "bf16":
            kv = np.dtype(getattr(self.model, "dtype", np.float32)).name + " (reference)"
        return {"backend": self.name, "kv_cache": kv}
