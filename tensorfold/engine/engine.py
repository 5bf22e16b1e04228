"""`Engine`: requests in, tokens (and text) out, one scheduling round per `step()`.

Host policy only (no numba at import time): the backend is chosen once in `from_model` — the cuda runtime
(`tensorfold.runtime.create_backend`, imported lazily) when a GPU is there and the runtime provides a backend,
else the cpu backend (`ReferenceModel`, numpy). See docs/contracts.md ("Engine") for the API the server uses.

Threads: `add_request` and `cancel` may be called from any thread (the server's event loop); they only touch a
lock-protected inbox. `step()` must be called from one thread at a time (the engine thread); it drains the
inbox at the start of each round. Requests are validated in `add_request` itself, before anything is queued.

Per round (`step()`): cancels are applied (finish_reason "abort", slot freed), waiting requests are admitted into
free slots, every stream past its prompt decodes one token, prompt chunks are prefilled (see scheduler.py), and
finished streams release their slots. Finish rules, checked in this order on each new token: a stop id (the
model's end-of-sequence ids unless `ignore_eos`, plus `stop_token_ids` always) or a stop string -> "stop";
`max_tokens` reached or the context full (prompt + completion == context) -> "length".

Faults: if the backend raises inside a round, every running stream is ended ("abort", slot freed, no output for
it) and the exception propagates; waiting requests stay queued and the next `step()` serves them.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from typing import Sequence as Seq

import numpy as np

from tensorfold.config import EngineConfig
from tensorfold.engine.backend import Backend, PrefillJob, SampleRow
from tensorfold.engine.detokenizer import Detokenizer
from tensorfold.engine.logprobs import token_entry
from tensorfold.engine.scheduler import Scheduler
from tensorfold.engine.sequence import Sequence, SeqStatus, StepOutput, token_sha
from tensorfold.sampling import SamplingParams

__all__ = ["Engine", "ContextLengthError", "StepOutput", "token_sha", "default_model_path"]


class ContextLengthError(ValueError):
    """The prompt plus max_tokens do not fit the context. Carries the numbers (OpenAI-style message)."""

    def __init__(self, context: int, prompt_tokens: int, max_tokens: int | None):
        self.context = context
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.requested = prompt_tokens + (max_tokens or 0)
        if max_tokens is None:
            msg = (
                f"This model's maximum context length is {context} tokens. However, your prompt has "
                f"{prompt_tokens} tokens, which leaves no room for a completion. Please reduce the length of the "
                f"prompt."
            )
        else:
            msg = (
                f"This model's maximum context length is {context} tokens. However, you requested "
                f"{self.requested} tokens ({prompt_tokens} in the messages, {max_tokens} in the completion). "
                f"Please reduce the length of the messages or completion."
            )
        super().__init__(msg)


def default_model_path() -> Path:
    """The embedded default model directory (`tensorfold/assets/default`)."""
    from importlib import resources

    path = Path(str(resources.files("tensorfold") / "assets" / "default"))
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"the embedded default model is missing ({path}/config.json); reinstall tensorfold")
    return path


def resolve_model_path(model) -> Path:
    """None -> the embedded default; an existing directory -> itself; anything else -> the hub resolver."""
    if model is None:
        return default_model_path()
    p = Path(os.fspath(model)).expanduser()
    if p.is_dir():
        return p
    try:
        from tensorfold.model.hub import resolve_model
    except ImportError:
        raise FileNotFoundError(f"model {str(model)!r}: no such directory (and hub lookups are unavailable)") from None
    return Path(resolve_model(str(model)))


def _simulator_on() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def _cuda_backend_factory():
    """`tensorfold.runtime.create_backend` if a real GPU is present and the runtime provides it, else None."""
    if _simulator_on():
        return None
    try:
        from numba import cuda  # lazy: only here

        if not cuda.is_available():
            return None
    except Exception:
        return None
    try:
        import tensorfold.runtime as runtime
    except Exception:
        return None
    return getattr(runtime, "create_backend", None)


def _weight_format(ckpt) -> str:
    q = getattr(ckpt.config, "quantization", None)
    fmt = getattr(ckpt, "format", "?")
    if q is not None:
        return f"{fmt} affine {q.bits}-bit g{q.group_size}"
    return f"{fmt} dense"


class Engine:
    """See the module docstring. Build with `Engine.from_model(...)`, or directly from a backend (tests)."""

    def __init__(
        self,
        backend: Backend,
        tokenizer=None,
        *,
        config: EngineConfig | None = None,
        model_config=None,
        model_name: str = "model",
        eos_token_ids: Seq[int] = (),
        valid_vocab: int | None = None,
        info: dict | None = None,
    ):
        self.backend = backend
        backend.run_ahead = True  # see Backend.run_ahead (CudaBackend: runtime.ahead; TENSORFOLD_RUN_AHEAD=0 stops it)
        self.tokenizer = tokenizer
        self.config = config or EngineConfig(parallel=backend.max_slots)
        self.model_config = model_config
        self.model_name = model_name
        ctx = self.config.context
        if model_config is not None:
            ctx = min(ctx, int(model_config.max_position_embeddings))
        self.context = ctx
        self.parallel = min(self.config.parallel, backend.max_slots)
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        vv = backend.vocab_size
        if tokenizer is not None and getattr(tokenizer, "vocab_size", None):
            vv = min(vv, int(tokenizer.vocab_size))
        if valid_vocab is not None:
            vv = min(vv, int(valid_vocab))
        self.valid_vocab = vv
        self.info = dict(info or {})
        self.info.setdefault("backend", backend.name)
        self.info.setdefault("kv_cache", self.config.kv_cache)
        self.scheduler = Scheduler(self.parallel, self.config.prompt_chunk)
        self._lock = threading.Lock()
        self._inbox: list[Sequence] = []
        self._cancels: set[str] = set()
        self._live: dict[str, Sequence] = {}  # every request not yet finished (inbox, waiting, running)
        self._counters = {"prompt_tokens_total": 0, "generation_tokens_total": 0, "requests_finished": 0,
                          "requests_aborted": 0, "rounds": 0}
        self._held_tokens = 0
        backend.warm(valid_vocab=self.valid_vocab, prompt_chunk=self.config.prompt_chunk)

    # ---------------------------------------------------------------------------------------------- building
    @classmethod
    def from_model(
        cls,
        model=None,
        backend: str = "auto",
        parallel: int = 4,
        context: int = 4096,
        kv_cache: str = "bf16",
        prompt_chunk: int = 512,
    ) -> "Engine":
        """Load a checkpoint directory, a hub id, or (None) the embedded default model, and pick a backend."""
        cfg = EngineConfig(backend=backend, parallel=parallel, context=context, kv_cache=kv_cache,
                           prompt_chunk=prompt_chunk)
        t0 = time.perf_counter()
        path = resolve_model_path(model)
        from tensorfold.model.checkpoint import load_checkpoint
        from tensorfold.tokenizer import Tokenizer

        ckpt = load_checkpoint(path)
        tokenizer = Tokenizer.from_dir(path)
        capped = min(cfg.context, int(ckpt.config.max_position_embeddings))
        if capped != cfg.context:
            cfg = EngineConfig(backend=cfg.backend, parallel=cfg.parallel, context=capped, kv_cache=cfg.kv_cache,
                               prompt_chunk=cfg.prompt_chunk)
        be = cls._make_backend(cfg, ckpt)
        name = "tensorfold-default" if model is None else str(model).rstrip("/")
        if model is not None and Path(name).expanduser().is_dir():
            name = Path(name).name
        eos = set(getattr(tokenizer, "stop_ids", ())) | set(ckpt.config.eos_token_ids)
        info = {"model_path": str(path), "weights": _weight_format(ckpt)}
        info.update(be.describe())
        engine = cls(be, tokenizer, config=cfg, model_config=ckpt.config, model_name=name, eos_token_ids=eos,
                     info=info)
        engine.info["load_seconds"] = time.perf_counter() - t0
        return engine

    @staticmethod
    def _make_backend(cfg: EngineConfig, ckpt) -> Backend:
        if cfg.backend in ("auto", "cuda"):
            factory = _cuda_backend_factory()
            if factory is not None:
                return factory(ckpt, cfg)
            if cfg.backend == "cuda":
                raise RuntimeError(
                    "backend='cuda' was asked for, but no CUDA GPU is available (or the CUDA simulator is on, or "
                    "tensorfold.runtime provides no create_backend)"
                )
        from tensorfold.engine.cpu_backend import CpuBackend

        return CpuBackend.from_checkpoint(ckpt, cfg)

    def summary(self) -> str:
        """One startup line: model, weight format, cache format, backend, context, streams, load time."""
        parts = [f"model {self.model_name}"]
        if "weights" in self.info:
            parts.append(f"weights {self.info['weights']}")
        parts += [f"kv cache {self.info.get('kv_cache', self.config.kv_cache)}", f"backend {self.backend.name}",
                  f"context {self.context}", f"streams {self.parallel}"]
        if "load_seconds" in self.info:
            parts.append(f"loaded in {self.info['load_seconds']:.2f} s")
        return "tensorfold: " + " | ".join(parts)

    # ---------------------------------------------------------------------------------------------- requests
    def _check_prompt(self, prompt_ids) -> list[int]:
        if isinstance(prompt_ids, (str, bytes)):
            raise TypeError("prompt_ids must be a list of token ids, not a string (tokenize it first)")
        try:
            ids = list(prompt_ids)
        except TypeError:
            raise TypeError(f"prompt_ids must be a list of token ids, got {type(prompt_ids).__name__}") from None
        if not ids:
            raise ValueError("the prompt must contain at least one token")
        out = []
        for t in ids:
            if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
                raise TypeError(f"prompt token ids must be integers, got {t!r}")
            t = int(t)
            if not 0 <= t < self.valid_vocab:
                raise ValueError(f"prompt token id {t} is outside the vocabulary [0, {self.valid_vocab})")
            out.append(t)
        return out

    def add_request(self, prompt_ids, params: SamplingParams | None = None, request_id: str | None = None) -> str:
        """Validate and queue a request; returns its id. Raises ContextLengthError / ValueError / TypeError."""
        if params is None:
            params = SamplingParams()
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
        ids = self._check_prompt(prompt_ids)
        L = len(ids)
        if L >= self.context or (params.max_tokens is not None and L + params.max_tokens > self.context):
            raise ContextLengthError(self.context, L, params.max_tokens)
        if params.logprobs is not None and not getattr(self.backend, "supports_logprobs", False):
            raise ValueError(f"logprobs: the {self.backend.name} backend cannot report them")
        if params.prompt_logprobs is not None and not getattr(self.backend, "supports_prompt_logprobs", False):
            raise ValueError(f"prompt_logprobs: the {self.backend.name} backend cannot report them")
        for t in params.stop_token_ids:
            if t >= self.backend.vocab_size:
                raise ValueError(f"stop_token_ids: {t} is outside the vocabulary [0, {self.backend.vocab_size})")
        if request_id is None:
            request_id = uuid.uuid4().hex
        elif not isinstance(request_id, str) or not request_id:
            raise TypeError(f"request_id must be a non-empty string, got {request_id!r}")
        stop_ids = set(params.stop_token_ids)
        if not params.ignore_eos:
            stop_ids |= self.eos_token_ids
        room = self.context - L
        seq = Sequence(
            request_id=request_id,
            prompt_ids=ids,
            params=params,
            seed=params.resolve_seed(ids),
            stop_ids=frozenset(stop_ids),
            max_completion=room if params.max_tokens is None else min(room, params.max_tokens),
        )
        if self.tokenizer is not None:
            seq.detok = Detokenizer(self.tokenizer, stop=params.stop)
        elif params.stop:
            raise ValueError("stop strings need an engine with a tokenizer")
        with self._lock:
            if request_id in self._live:
                raise ValueError(f"request_id {request_id!r} is already in use")
            self._live[request_id] = seq
            self._inbox.append(seq)
        return request_id

    def cancel(self, request_id: str) -> bool:
        """Ask for a request to stop; it finishes with "abort" at the next round. False if it is not live."""
        with self._lock:
            if request_id not in self._live:
                return False
            self._cancels.add(request_id)
            return True

    def has_unfinished(self) -> bool:
        with self._lock:
            return bool(self._live)

    def stats(self) -> dict:
        """Live counters for /health and /metrics."""
        with self._lock:
            running = len(self.scheduler.running)
            waiting = len(self.scheduler.waiting) + len(self._inbox)
            d = dict(self._counters)
            held = self._held_tokens
        d.update(running=running, waiting=waiting, parallel=self.parallel, context=self.context,
                 kv_cache_usage=held / float(self.parallel * self.context))
        return d

    # ---------------------------------------------------------------------------------------------- a round
    def _row(self, seq: Sequence) -> SampleRow:
        p = seq.params
        return SampleRow(p.temperature, p.top_k, p.top_p, p.min_p, seq.seed, seq.next_position, self.valid_vocab)

    def _finish(self, seq: Sequence, reason: str, stop_reason=None) -> None:
        seq.status = SeqStatus.FINISHED
        seq.finish_reason = reason
        seq.stop_reason = stop_reason
        seq.finish_time = time.monotonic()
        if seq.slot is not None:
            self.backend.free(seq.slot)
            seq.slot = None
        self.scheduler.remove(seq)

    def _sample_keeping(self, want: bool, call):
        """``call()`` (a backend sampling call) with the backend keeping its drawn-from logits rows when ``want``
        (some request of the call asked for logprobs); returns (call's result, the rows or None)."""
        if not want:
            return call(), None
        self.backend.keep_logits = True
        try:
            res = call()
            return res, self.backend.take_logits()
        finally:
            self.backend.keep_logits = False

    def _entry(self, seq: Sequence, rows, i: int, tok: int):
        """The logprobs entry of seq's token drawn from ``rows[i]``, or None when seq did not ask for logprobs."""
        k = seq.params.logprobs
        if k is None:
            return None
        if rows is None or i >= len(rows):
            raise RuntimeError(f"backend {self.backend.name} kept {0 if rows is None else len(rows)} logits rows, "
                               f"row {i} needed for logprobs")
        return token_entry(rows[i], tok, k, self.valid_vocab)

    def _append(self, seq: Sequence, tok: int, out: dict, entry=None) -> None:
        """Record a sampled token (and its logprobs entry), stream its text, apply the finish rules."""
        tok = int(tok)
        seq.output_ids.append(tok)
        if entry is not None:
            seq.logprobs.append(entry)
        if seq.first_token_time is None:
            seq.first_token_time = time.monotonic()
        o = out.setdefault(seq.request_id, [seq, [], ""])
        o[1].append(tok)
        det = seq.detok
        if tok in seq.stop_ids:
            if det is not None:
                o[2] += det.flush()
            self._finish(seq, "stop", tok)
            return
        if det is not None:
            o[2] += det.add(tok)
            if det.stopped:
                self._finish(seq, "stop", det.stop_str)
                return
        if len(seq.output_ids) >= seq.max_completion:
            if det is not None:
                o[2] += det.flush()
            self._finish(seq, "length")

    def _run_round(self, out: dict) -> int:
        """Admit, decode, prefill (see the module docstring); returns the prompt tokens consumed."""
        plan = self.scheduler.schedule()
        for seq in plan.admitted:
            seq.slot = self.backend.new_slot()
        prompt_done = 0
        if plan.decode:
            seqs = plan.decode
            toks, kept = self._sample_keeping(
                any(s.params.logprobs is not None for s in seqs),
                lambda: self.backend.decode_sample([s.slot for s in seqs], [s.output_ids[-1] for s in seqs],
                                                   [self._row(s) for s in seqs]))
            for i, (seq, tok) in enumerate(zip(seqs, toks)):
                self._append(seq, tok, out, self._entry(seq, kept, i, tok))
        packed = [ch for ch in plan.prefill if ch.seq.params.prompt_logprobs is None]
        jobs = [PrefillJob(ch.seq.slot, ch.seq.prompt_ids[ch.start:ch.end], ch.start,
                           self._row(ch.seq) if ch.last else None) for ch in packed]
        toks, kept = self._sample_keeping(
            any(ch.last and ch.seq.params.logprobs is not None for ch in packed),
            lambda: self.backend.prefill_many(jobs) if jobs else [])
        if len(toks) != len(jobs):
            raise RuntimeError(f"backend prefill_many returned {len(toks)} results for {len(jobs)} chunks")
        for ch in plan.prefill:
            if ch.seq.params.prompt_logprobs is not None:
                prompt_done += self._score_chunk(ch, out)
        drawn = 0  # kept rows are one a job with a row, in job order
        for ch, tok in zip(packed, toks):
            seq = ch.seq
            seq.num_prefilled = ch.end
            prompt_done += ch.end - ch.start
            if ch.last:
                seq.status = SeqStatus.DECODE
                self._append(seq, tok, out, self._entry(seq, kept, drawn, tok))
                drawn += 1
        return prompt_done

    def _score_chunk(self, ch, out: dict) -> int:
        """A prompt chunk of a request with prompt_logprobs: every row's logits (``backend.prefill_rows``, alone,
        not packed with other streams' chunks), an entry for each of its tokens (row j predicts token j + 1; the
        previous chunk's last row the first; the prompt's first token gets None); on the prompt's last chunk the
        first token is drawn on the host from the last row (the device sampler's twin), or, with max_tokens 0,
        the request ends ("length"). Returns the prompt tokens consumed."""
        seq = ch.seq
        k = seq.params.prompt_logprobs
        ids = seq.prompt_ids[ch.start:ch.end]
        rows = self.backend.prefill_rows(seq.slot, ids, ch.start)
        if len(rows) != len(ids):
            raise RuntimeError(f"backend prefill_rows returned {len(rows)} rows for {len(ids)} tokens")
        for j, t in enumerate(ids):
            prev = seq.plp_prev if j == 0 else rows[j - 1]
            seq.prompt_logprobs.append(None if ch.start + j == 0 else token_entry(prev, t, k, self.valid_vocab))
        seq.plp_prev = rows[-1]
        seq.num_prefilled = ch.end
        if ch.last:
            seq.status = SeqStatus.DECODE
            seq.plp_prev = None
            seq.plp_ready = True
            out.setdefault(seq.request_id, [seq, [], ""])
            if seq.max_completion == 0:
                self._finish(seq, "length")
            else:
                tok = int(self.backend.sample(rows[-1:], [self._row(seq)])[0])
                self._append(seq, tok, out, self._entry(seq, rows[-1:], 0, tok))
        return ch.end - ch.start

    def _fail_running(self, out: dict) -> None:
        """After a backend fault: end every running stream ("abort"), so no half-advanced state is reused. Waiting
        requests stay queued; requests that finished earlier in the failed round are dropped too."""
        with self._lock:
            for seq, _, _ in out.values():
                if seq.finished and self._live.pop(seq.request_id, None) is not None:
                    self._counters["requests_aborted"] += 1
        for seq in list(self.scheduler.running):
            if seq.slot is not None:
                try:
                    self.backend.free(seq.slot)
                except Exception:  # noqa: BLE001 - the backend is already failing
                    pass
                seq.slot = None
            self._finish(seq, "abort")
            with self._lock:
                self._live.pop(seq.request_id, None)
                self._counters["requests_aborted"] += 1
            self._held_tokens = 0

    def step(self) -> list[StepOutput]:
        """Run one scheduling round; returns an output for every request that got tokens or finished."""
        with self._lock:
            inbox, self._inbox = self._inbox, []
            cancels, self._cancels = self._cancels, set()
        for seq in inbox:
            self.scheduler.add(seq)
        out: dict[str, list] = {}  # rid -> [seq, new ids, text]
        for rid in cancels:
            seq = self._live.get(rid)
            if seq is not None and not seq.finished:
                self._finish(seq, "abort")
                out.setdefault(rid, [seq, [], ""])
        try:
            prompt_done = self._run_round(out)
        except BaseException:
            self._fail_running(out)
            raise
        results = []
        generated = 0
        finished_ids = []
        for rid, (seq, new, text) in out.items():
            generated += len(new)
            lps = None
            if seq.params.logprobs is not None:
                lps = seq.logprobs[len(seq.logprobs) - len(new):] if new else []
            plp = None
            if seq.plp_ready:
                plp, seq.plp_ready = seq.prompt_logprobs, False
            results.append(StepOutput(rid, new, seq.finished, seq.finish_reason, seq.prompt_len,
                                      len(seq.output_ids), text, seq.stop_reason, lps, plp))
            if seq.finished:
                finished_ids.append(rid)
        held = sum(s.num_prefilled + len(s.output_ids) for s in self.scheduler.running)
        with self._lock:
            for rid in finished_ids:
                seq = self._live.pop(rid, None)
                self._counters["requests_aborted" if seq.finish_reason == "abort" else "requests_finished"] += 1
            self._counters["prompt_tokens_total"] += prompt_done
            self._counters["generation_tokens_total"] += generated
            self._counters["rounds"] += 1
            self._held_tokens = held
        return results

    # ---------------------------------------------------------------------------------------------- helpers
    def generate(self, prompt_ids, params: SamplingParams | None = None) -> list[int]:
        """Run one request to completion and return its completion token ids (single-caller convenience: other
        requests' outputs produced meanwhile are dropped, so do not mix with a server's engine thread)."""
        rid = self.add_request(prompt_ids, params)
        tokens: list[int] = []
        while True:
            for o in self.step():
                if o.request_id == rid:
                    tokens.extend(o.new_token_ids)
                    if o.finished:
                        return tokens

    @staticmethod
    def token_sha(ids) -> str:
        return token_sha(ids)

    def close(self) -> None:
        self.backend.close()
