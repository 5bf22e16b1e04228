"""The interface between the engine's host policy and whatever runs the model (`Backend`), plus host sampling.

A backend owns per-stream state in numbered slots (at most `max_slots` at once) and offers:

* `new_slot() -> int`, `free(slot)`: a fresh, empty stream state / release it;
* `prefill(slot, ids, start_pos, want_logits=True) -> logits [V] | None`: feed prompt tokens at absolute
  positions start_pos.. (called repeatedly for a chunked prompt; start_pos must equal the tokens the slot holds);
  returns the last row's logits when asked;
* `decode(slots, ids) -> logits [n, V]`: one token per slot, each at its slot's next position;
* `sample(logits [n, V], rows) -> list[int]`: the host sampler (`tensorfold.reference.sampling.sample`);
* `prefill_sample(slot, ids, start_pos, row) -> int` and `decode_sample(slots, ids, rows) -> list[int]`: what the
  engine calls: forward and sample together. The defaults sample on the host from the logits; a GPU backend
  overrides them to sample on the device (the same counter-based draw) and copy back only the ids.

* `prefill_many(chunks) -> list[int | None]`: several streams' prompt chunks in one call (the engine's prefill
  of a round): each chunk is a `PrefillJob` (slot, ids, start_pos, row); a job with a `row` returns its sampled
  token (it completes a prompt), one without returns None. The default runs the jobs one by one; a GPU backend
  runs them as one forward. A stream's result never depends on the other jobs beside it.

Log-probabilities: while the engine sets `keep_logits` (only around a call that samples for a request that asked
for logprobs), a backend keeps the logits row of every token it draws, in the order it returns them (decode: one a
slot; prefill_many: one a job with a row, in job order), and `take_logits()` hands them over. The defaults below
do this; a backend that overrides the sampling calls must too, or set `supports_logprobs = False`.

`SampleRow` carries one row's sampling inputs: the request's knobs, its seed, the absolute position of the token
being sampled (the draw's counter), and `valid_vocab` (ids at or above it, embedding padding, are never drawn).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["Backend", "SampleRow", "PrefillJob", "host_sample"]


@dataclass(frozen=True)
class SampleRow:
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    seed: int
    position: int
    valid_vocab: int


@dataclass(frozen=True)
class PrefillJob:
    """One stream's prompt chunk in `Backend.prefill_many`: tokens `ids` at absolute positions start_pos.. of
    `slot`; `row` (a SampleRow) when the chunk ends the prompt and its last row's token is to be drawn."""

    slot: int
    ids: Sequence[int]
    start_pos: int
    row: SampleRow | None = None


def host_sample(logits_row: np.ndarray, row: SampleRow) -> int:
    """One token from one logits row with the reference sampler (the twin of the device sampler)."""
    from tensorfold.reference.sampling import sample

    return int(
        sample(
            logits_row,
            temperature=row.temperature,
            top_k=row.top_k,
            top_p=row.top_p,
            min_p=row.min_p,
            seed=row.seed,
            position=row.position,
            valid_vocab=row.valid_vocab,
        )
    )


class Backend(abc.ABC):
    """See the module docstring. Subclasses set `name`, `vocab_size` (logits width) and `max_slots`."""

    name: str = "?"
    vocab_size: int
    max_slots: int

    @abc.abstractmethod
    def new_slot(self) -> int: ...

    @abc.abstractmethod
    def free(self, slot: int) -> None: ...

    @abc.abstractmethod
    def prefill(self, slot: int, ids: Sequence[int], start_pos: int, want_logits: bool = True):
        """Feed prompt tokens; returns the last row's logits [V] (float32) when want_logits, else None."""

    @abc.abstractmethod
    def decode(self, slots: Sequence[int], ids: Sequence[int]) -> np.ndarray:
        """One token per slot; returns logits [n, V]."""

    def sample(self, logits: np.ndarray, rows: Sequence[SampleRow]) -> list[int]:
        logits = np.asarray(logits)
        if logits.ndim != 2 or logits.shape[0] != len(rows):
            raise ValueError(f"sample: logits shape {logits.shape} does not match {len(rows)} rows")
        return [host_sample(logits[i], r) for i, r in enumerate(rows)]

    supports_logprobs: bool = True
    keep_logits: bool = False  # set by the engine around calls whose drawn tokens need their logits
    # set by the engine: it continues a stream only through decode_sample with the id it was given, and frees what
    # it drops, so a backend may enqueue a stream's next step before the engine asks for it (CudaBackend)
    run_ahead: bool = False

    @property
    def supports_prompt_logprobs(self) -> bool:
        return type(self).prefill_rows is not Backend.prefill_rows

    def prefill_rows(self, slot: int, ids: Sequence[int], start_pos: int) -> np.ndarray:
        """Feed prompt tokens like `prefill` and return every row's logits [n, V] (float32): row j predicts the
        token after position start_pos + j (prompt logprobs). Backends that can override it."""
        raise NotImplementedError(f"{self.name} backend: prompt logprobs are not supported")

    def _keep(self, logits) -> None:
        """While `keep_logits`: note these rows (a [n, V] array or a list of [V] rows) as drawn-from, in order."""
        if self.keep_logits:
            kept = self.__dict__.setdefault("_kept_rows", [])
            kept.extend(np.asarray(r, dtype=np.float32) for r in logits)

    def take_logits(self) -> list:
        """The logits rows kept since the last call (see the module docstring), and forget them."""
        return self.__dict__.pop("_kept_rows", [])

    def prefill_sample(self, slot: int, ids: Sequence[int], start_pos: int, row: SampleRow) -> int:
        logits = self.prefill(slot, ids, start_pos, want_logits=True)
        self._keep([logits])
        return self.sample(np.asarray(logits)[None, :], [row])[0]

    def decode_sample(self, slots: Sequence[int], ids: Sequence[int], rows: Sequence[SampleRow]) -> list[int]:
        if not slots:
            return []
        logits = self.decode(slots, ids)
        self._keep(logits)
        return self.sample(logits, rows)

    def prefill_many(self, jobs: Sequence[PrefillJob]) -> list[int | None]:
        """Each job's chunk in turn: its sampled token where it has a row, else None (see the module docstring)."""
        out: list[int | None] = []
        for j in jobs:
            if j.row is not None:
                out.append(self.prefill_sample(j.slot, j.ids, j.start_pos, j.row))
            else:
                self.prefill(j.slot, j.ids, j.start_pos, want_logits=False)
                out.append(None)
        return out

    def warm(self, *, valid_vocab: int, prompt_chunk: int) -> None:
        """Called once by the engine before serving with its sampling bound and prompt chunk: a backend may
        prepare what the first requests would otherwise wait for (the default has nothing to prepare)."""

    def close(self) -> None:
        """Release resources (device memory); the default has nothing to release."""

    def describe(self) -> dict:
        """Facts for the startup line (weight format, cache format, ...)."""
        return {"backend": self.name}
