"""Run-ahead decode (``Backend.run_ahead``, which the engine sets; ``TENSORFOLD_RUN_AHEAD=0`` turns it off): the
host side of a decode step leaves the GPU idle.

Where the time goes at one stream: ``CudaBackend.decode_sample`` writes the step's metadata, launches the graph
and waits for the ids; then the engine appends the token, checks its stop rules and builds the next call, while the
GPU has nothing queued. That host time is on the critical path of every step (pre-11, 2B: the replay alone 1.687 ms
a step, ``decode_sample`` 1.830, a pipelined loop 1.746; ``decode_host_2026-11-30_8fc4cd4.md``).

With run-ahead, ``decode_sample`` enqueues the *next* step of the same streams before it waits for this one: its
input ids are this step's ids, copied on the device (``DecodeGraphs.launch_step(chain=True)``), its positions one
further, its sampling rows this call's with ``position + 1``. The next call, when it asks for exactly that step
(same slots in the same order, the ids this call returned, those positions and rows: :meth:`Ahead.matches`), only
waits for it, after enqueueing the one after. The device work is the same as the synchronous step's, so the ids are
the same bit for bit.

A step run ahead has already moved its streams' caches on by one position, so it can only be consumed, never undone:

- a later call may serve a subset of its streams (a stream finished) and add others (a stream joined): the
  streams it served take its ids, the others get a real step (``CudaBackend._served``);
- a stream it served that a call leaves out keeps its id for a later call (nothing new runs ahead meanwhile);
- ``free`` drops a stream's pending id; every other use of the runner first waits for the step
  (``CudaBackend._settle``) and refuses a stream it served (prefill or logits of that stream would see it moved on);
- a call whose inputs differ from what was run ahead for a stream raises (its state has moved on: a silent wrong
  token is worse than an error). The engine never does this: it continues a stream with the id it was given.

Only a caller that promises this runs ahead: ``Backend.run_ahead`` (False by default; the engine sets it), so direct
users of the backend (``decode`` after ``decode_sample``, tests, benchmarks) keep the synchronous behaviour.

Logits (engine logprobs): nothing runs ahead of a call with ``keep_logits`` set. A stream served from a step run
ahead was run ahead while no stream of that call asked for logprobs (a request's logprobs setting does not change),
so its logits row is only a placeholder in the kept rows, except where the step is the runner's last forward (its
rows are then copied).
"""

from __future__ import annotations

import os
from dataclasses import replace

__all__ = ["on", "Ahead", "next_rows"]


def on() -> bool:
    """``TENSORFOLD_RUN_AHEAD`` unset or not "0" (read at each decode call). Measured on the H200 (session 37, synth
    4-bit g64, decode tok/s, two rounds, on against off): 2B 781.6 / 786.0 against 773.7 / 751.0 at one stream,
    4,969.4 / 4,997.4 against 4,789.7 / 4,730.7 at eight; 9B 385.5 / 387.6 against 384.8 / 382.3, 2,122.8 / 2,120.8
    against 2,083.0 / 2,099.1."""
    return os.environ.get("TENSORFOLD_RUN_AHEAD", "1").strip() != "0"


def next_rows(rows) -> list:
    """The sampling rows of the step after ``rows``' step: the same knobs and seed, one position further."""
    return [replace(r, position=r.position + 1) for r in rows]


class Ahead:
    """One decode step enqueued ahead of the call that will consume it: the streams (slots, in launch order), the
    inputs it was given (``ids``: the ids of the call that launched it; ``lens``: the positions it writes;
    ``rows``), its ``DecodeGraphs.launch_step`` ticket and, once waited for, its ids (``tok``)."""

    __slots__ = ("ticket", "slots", "ids", "lens", "rows", "tok")

    def __init__(self, ticket, slots, ids, lens, rows, tok=None):
        self.ticket, self.slots, self.ids, self.lens, self.rows, self.tok = ticket, tuple(slots), ids, lens, rows, tok

    def matches(self, slots, ids, lens, rows) -> bool:
        """Whether a call asks for exactly this step (then it is consumed whole, with nothing to check per row)."""
        return (tuple(slots) == self.slots and list(lens) == self.lens and [int(t) for t in ids] == self.ids
                and list(rows) == self.rows)

    def index(self) -> dict:
        return {s: k for k, s in enumerate(self.slots)}

    def without(self, keep) -> "Ahead | None":
        """This step's entries for the streams ``keep`` (launch order) only; None if none is left. Waited for."""
        ks = [k for k, s in enumerate(self.slots) if s in keep]
        if not ks:
            return None
        pick = lambda xs: [xs[k] for k in ks]  # noqa: E731
        return Ahead(None, pick(self.slots), pick(self.ids), pick(self.lens), pick(self.rows), pick(self.tok))
