"""One request inside the engine (`Sequence`) and what a scheduling round reports about it (`StepOutput`).

A sequence moves WAITING -> PREFILL (it holds a backend slot; its prompt goes in chunk by chunk) -> DECODE (one
token a round) -> FINISHED. Positions are absolute: the prompt occupies 0..L-1, the k-th completion token
(0-based) sits at L+k, and that position is also the counter its sampling draw is keyed by.
"""

from __future__ import annotations

import enum
import hashlib
import time
from dataclasses import dataclass, field

from tensorfold.sampling import SamplingParams

__all__ = ["SeqStatus", "Sequence", "StepOutput", "token_sha"]


def token_sha(ids) -> str:
    """Short hash of a token id list (contracts.md): sha256 of the comma-joined decimal ids, first 16 hex digits."""
    return hashlib.sha256(",".join(str(int(t)) for t in ids).encode()).hexdigest()[:16]


class SeqStatus(enum.Enum):
    WAITING = "waiting"
    PREFILL = "prefill"
    DECODE = "decode"
    FINISHED = "finished"


@dataclass
class StepOutput:
    """What one round produced for one request.

    new_token_ids: tokens sampled this round (a stop token that finished the request is included).
    text: the new text that is safe to show (stop strings cut, partial ones and split characters held back);
          "" when the engine has no tokenizer.
    """

    request_id: str
    new_token_ids: list[int]
    finished: bool
    finish_reason: str | None  # "stop" | "length" | "abort" | None
    prompt_tokens: int
    completion_tokens: int
    text: str = ""
    stop_reason: int | str | None = None  # the stop token id or stop string that finished it
    # with SamplingParams.logprobs: one (token, logprob, [(id, logprob)] * k) a new token (engine.logprobs)
    logprobs: list | None = None
    # with SamplingParams.prompt_logprobs: in the round its prompt completes, one entry a prompt token (None first)
    prompt_logprobs: list | None = None


@dataclass
class Sequence:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    seed: int
    stop_ids: frozenset[int]
    max_completion: int  # min(params.max_tokens, context - prompt)
    detok: object | None = None  # engine.detokenizer.Detokenizer
    status: SeqStatus = SeqStatus.WAITING
    output_ids: list[int] = field(default_factory=list)
    slot: int | None = None
    num_prefilled: int = 0
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    arrival_time: float = field(default_factory=time.monotonic)
    first_token_time: float | None = None
    finish_time: float | None = None
    logprobs: list = field(default_factory=list)  # one entry an output token when params.logprobs is set
    prompt_logprobs: list = field(default_factory=list)  # one a prompt token (None first) with prompt_logprobs
    plp_prev: object = None  # the last logits row of the previous scored chunk (it predicts this chunk's first)
    plp_ready: bool = False  # the prompt's entries are complete and not yet reported

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def next_position(self) -> int:
        """Absolute position of the next token to be sampled."""
        return self.num_tokens

    @property
    def finished(self) -> bool:
        return self.status is SeqStatus.FINISHED
