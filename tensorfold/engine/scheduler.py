"""Continuous batching policy: which sequences run in a round, and which prompt chunks they prefill.

Pure host policy over `Sequence`s; it never touches a backend (the engine allocates slots and runs the plan).

A round (`Scheduler.schedule()`):
1. admit waiting sequences, first come first served, while fewer than `parallel` are running;
2. decode: every running sequence whose prompt is complete gets one step;
3. prefill: running sequences still in their prompt, in admission order, each get their next chunk of at most
   `prompt_chunk` tokens, until the round's prompt-token budget (`prompt_chunk`) is spent; the first one always
   runs, so every round makes progress. A long prompt therefore takes several rounds, interleaved with the
   decode steps of the others.

Chunk boundaries depend only on the sequence itself (multiples of `prompt_chunk` from its own start), never on
its neighbours, so a stream's arithmetic is the same alone or beside others.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tensorfold.engine.sequence import Sequence, SeqStatus

__all__ = ["Scheduler", "RoundPlan", "PrefillChunk"]


@dataclass
class PrefillChunk:
    seq: Sequence
    start: int  # absolute position of the chunk's first token
    end: int  # exclusive

    @property
    def last(self) -> bool:
        """The chunk completes the prompt (its last logits give the first completion token)."""
        return self.end == self.seq.prompt_len


@dataclass
class RoundPlan:
    admitted: list[Sequence] = field(default_factory=list)
    decode: list[Sequence] = field(default_factory=list)
    prefill: list[PrefillChunk] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.admitted or self.decode or self.prefill)


class Scheduler:
    def __init__(self, parallel: int, prompt_chunk: int):
        if parallel < 1 or prompt_chunk < 1:
            raise ValueError(f"parallel and prompt_chunk must be >= 1, got {parallel}, {prompt_chunk}")
        self.parallel = parallel
        self.prompt_chunk = prompt_chunk
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # admission order

    def add(self, seq: Sequence) -> None:
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)

    def remove(self, seq: Sequence) -> bool:
        """Take a sequence out of the queues (finished or aborted). True if it was there."""
        if seq in self.running:
            self.running.remove(seq)
            return True
        try:
            self.waiting.remove(seq)
            return True
        except ValueError:
            return False

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> RoundPlan:
        plan = RoundPlan()
        while self.waiting and len(self.running) < self.parallel:
            seq = self.waiting.popleft()
            seq.status = SeqStatus.PREFILL
            self.running.append(seq)
            plan.admitted.append(seq)
        budget = self.prompt_chunk
        for seq in self.running:
            if seq.status is SeqStatus.DECODE:
                plan.decode.append(seq)
            elif seq.status is SeqStatus.PREFILL and (budget > 0 or not plan.prefill):
                start = seq.num_prefilled
                end = min(start + self.prompt_chunk, seq.prompt_len)
                plan.prefill.append(PrefillChunk(seq, start, end))
                budget -= end - start
        assert len(self.running) <= self.parallel
        return plan
