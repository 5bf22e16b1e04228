"""The aiohttp application of `tensorfold serve`: routes, error/auth middleware, streaming and shutdown.

`Server(config, engine_factory)` starts the HTTP listener first and builds the engine on the engine thread
(`bridge.EngineBridge`), so `/health` answers 503 while the model loads. Routes follow docs/serving.md:
`/v1/chat/completions`, `/v1/completions`, `/v1/models`, `/health`, `/metrics`, `/tokenize`, `/detokenize`.
Every failure is a JSON `{"error": {...}}` with the right status; nothing a client sends can crash the server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import time
import traceback
from typing import Any, Callable

from aiohttp import web

from . import protocol as P
from .auth import KeyStore
from .bridge import EngineBridge, EngineFault, Handle
from .metrics import Metrics
from .reqlog import RequestLog

log = logging.getLogger("tensorfold.server")

OPEN_PATHS = ("/health", "/metrics", "/version")
KEYED_PREFIXES = ("/v1/", "/tokenize", "/detokenize")


@dataclasses.dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8888
    name: str | None = None              # served model id; default: the engine's model name
    aliases: tuple[str, ...] = ()
    parallel: int = 4
    queue: int = 256                     # requests waiting beyond `parallel` before 503
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    api_keys: tuple[str, ...] = ()
    api_key_file: str | None = None
    request_log: str | None = None
    body_limit: int = 4 * 1024 * 1024
    poll_s: float = 0.25                 # how often a waiting handler checks that its client is still there


class ClientGone(Exception):
    pass


def _token_sha(ids) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


def json_response(obj, status: int = 200, headers=None) -> web.Response:
    return web.Response(body=json.dumps(obj, ensure_ascii=False).encode("utf-8"), status=status,
                        content_type="application/json", headers=headers)


def error_response(e: P.ApiError) -> web.Response:
    headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else None
    return json_response(e.body(), status=e.status, headers=headers)


class Server:
    def __init__(self, config: ServerConfig, engine_factory: Callable[[], Any]):
        self.config = config
        self.keys = KeyStore(config.api_keys, config.api_key_file)   # raises KeyFileError at start
        self.bridge = EngineBridge(engine_factory, max_active=config.parallel + config.queue)
        self.reqlog = RequestLog(config.request_log) if config.request_log else None
        self.metrics: Metrics | None = None
        self.defaults: P.ServeDefaults | None = None
        self.draining = False
        self.runner: web.AppRunner | None = None
        self.port: int | None = None
        self.app = self._build_app()

    # ------------------------------------------------------------------ lifecycle
    def _build_app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.body_limit, middlewares=[self._middleware])
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/v1/models/{model:.+}", self.model_route)
        app.router.add_get("/version", self.version)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics_route)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)
        return app

    async def start(self) -> None:
        self.runner = web.AppRunner(self.app, handler_cancellation=True, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.config.host, self.config.port)
        await site.start()
        self.port = self.runner.addresses[0][1]
        self.bridge.start()

    async def wait_loaded(self) -> bool:
        await asyncio.get_running_loop().run_in_executor(None, self.bridge.ready.wait)
        return self._loaded()

    def _loaded(self) -> bool:
        if not self.bridge.ready.is_set() or self.bridge.load_error is not None:
            return False
        if self.defaults is None:
            eng = self.bridge.engine
            c = self.config
            eng_name = getattr(eng, "model_name", None)
            name = c.name or eng_name or "tensorfold"
            names = tuple(dict.fromkeys(n for n in (name, eng_name, *c.aliases) if n))
            self.defaults = P.ServeDefaults(model_names=names, context=int(eng.context),
                                            vocab_size=_vocab_size(eng), max_tokens=c.max_tokens,
                                            temperature=c.temperature, top_p=c.top_p, top_k=c.top_k,
                                            min_p=c.min_p)
            self.metrics = Metrics(name)
        return True

    async def shutdown(self, grace: float = 10.0) -> None:
        """Stop accepting, cancel what runs (their clients get a clean end), stop the engine thread."""
        self.draining = True
        if self.runner is not None:
            for site in list(self.runner.sites):   # close the listening sockets; open connections get 503s
                await site.stop()
        self.bridge.cancel_all()
        t = time.monotonic()
        while self.bridge.active and time.monotonic() - t < grace:
            await asyncio.sleep(0.02)
        if self.runner is not None:
            await self.runner.cleanup()
        await asyncio.get_running_loop().run_in_executor(None, self.bridge.stop)
        if self.reqlog is not None:
            self.reqlog.close()

    # ------------------------------------------------------------------ middleware
    @web.middleware
    async def _middleware(self, request: web.Request, handler):
        t0 = time.perf_counter()
        request["log"] = {}
        try:
            path = request.path
            if path.startswith(KEYED_PREFIXES) and self.keys.enabled:
                if not self.keys.check(KeyStore.from_headers(request.headers)):
                    raise P.ApiError(401, "missing or invalid API key (send 'Authorization: Bearer KEY' or "
                                          "'x-api-key: KEY')", code="invalid_api_key")
            resp = await handler(request)
        except P.ApiError as e:
            resp = error_response(e)
            request["log"]["error"] = e.message
        except web.HTTPException as e:
            if e.status == 404:
                err = P.ApiError(404, f"Not found: {request.method} {request.path}")
            elif e.status == 405:
                err = P.ApiError(405, f"Method {request.method} is not allowed on {request.path}")
            elif e.status == 413:
                err = P.ApiError(413, f"request body is larger than the limit of {self.config.body_limit} bytes",
                                 code="request_too_large")
            else:
                err = P.ApiError(e.status, e.reason or "HTTP error")
            resp = error_response(err)
            request["log"]["error"] = err.message
        except asyncio.CancelledError:
            request["log"]["error"] = "client disconnected"
            self._write_log(request, 499, t0)
            raise
        except (ClientGone, ConnectionResetError):
            # the client is gone: nothing can be sent; a plain response lets aiohttp close quietly (no traceback)
            request["log"]["error"] = "client disconnected"
            self._write_log(request, 499, t0)
            return web.Response(status=499)
        except Exception as e:  # noqa: BLE001 - a bug in a handler must not take the server down
            log.error("unhandled error on %s:\n%s", request.path, traceback.format_exc())
            err = P.ApiError(500, f"internal server error: {type(e).__name__}")
            resp = error_response(err)
            request["log"]["error"] = err.message
        if resp.status >= 400 and self.metrics is not None:
            self.metrics.error(resp.status)
        self._write_log(request, resp.status, t0)
        return resp

    def _write_log(self, request: web.Request, status: int, t0: float) -> None:
        if self.reqlog is None or request.path in OPEN_PATHS:
            return
        rec = {"method": request.method, "path": request.path, "status": status,
               "remote": request.remote, "duration_ms": round((time.perf_counter() - t0) * 1e3, 3)}
        rec.update(request.get("log", {}))
        try:
            self.reqlog.write(rec)
        except OSError:
            log.error("request log write failed", exc_info=True)

    # ------------------------------------------------------------------ helpers
    def _require_ready(self) -> None:
        if self.draining:
            raise P.ApiError(503, "server is shutting down")
        if not self._loaded():
            if self.bridge.load_error:
                raise P.ApiError(503, f"model failed to load: {self.bridge.load_error}")
            raise P.ApiError(503, "Loading model")

    async def _body(self, request: web.Request) -> dict:
        cl = request.content_length
        limit = self.config.body_limit
        try:
            if cl is not None and cl > limit:
                raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=cl)
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            await _drain(request)
            raise
        return P.parse_json_body(raw)

    @property
    def tokenizer(self):
        return self.bridge.engine.tokenizer

    async def _in_thread(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    def _render_chat(self, messages, kwargs, add_generation_prompt: bool = True) -> tuple[list[int], bool]:
        tok = self.tokenizer
        try:
            out = tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, **kwargs)
        except TypeError as e:
            raise P.bad(f"chat template: {e}", "chat_template_kwargs") from None
        except Exception as e:  # noqa: BLE001 - template errors (jinja raise_exception) are the request's fault
            raise P.bad(f"chat template failed: {e}", "messages") from None
        if isinstance(out, str):
            opens = out.rstrip().endswith(P.THINK_OPEN)
            return list(tok.encode(out)), opens
        ids = list(out)
        tail = tok.decode(ids[-8:]) if ids else ""
        return ids, tail.rstrip().endswith(P.THINK_OPEN)

    def _admit(self) -> None:
        if self.bridge.active >= self.bridge.max_active:
            raise P.ApiError(503, f"server is full ({self.bridge.active} requests running or queued); retry later",
                             code="server_full")

    # ------------------------------------------------------------------ generation routes
    async def chat(self, request: web.Request):
        self._require_ready()
        body = await self._body(request)
        d = self.defaults
        model = P.check_model(body, d)
        messages = P.check_messages(body)
        tkw = P.check_template_kwargs(body)
        P.check_unsupported(body, "chat")
        fields = P.sampling_fields(body, d)
        fields["logprobs"] = P.check_logprobs(body, "chat")
        ids, opens = await self._in_thread(self._render_chat, messages, tkw)
        req = P.finish_request("chat", model, ids, fields, d, prompt_opens_think=opens)
        return await self._generate(request, req)

    async def completions(self, request: web.Request):
        self._require_ready()
        body = await self._body(request)
        d = self.defaults
        model = P.check_model(body, d)
        prompt = P.check_prompt(body, d.vocab_size)
        P.check_unsupported(body, "completion")
        fields = P.sampling_fields(body, d)
        fields["logprobs"] = P.check_logprobs(body, "completion")
        fields["prompt_logprobs"] = fields["logprobs"] if body.get("echo") else None  # echo scores the prompt
        if isinstance(prompt, str):
            ids = list(await self._in_thread(self.tokenizer.encode, prompt))
        else:
            ids = prompt
        req = P.finish_request("completion", model, ids, fields, d)
        if body.get("echo"):  # the prompt as given, or the text of its ids
            req.echo = prompt if isinstance(prompt, str) else await self._in_thread(self.tokenizer.decode, ids)
        return await self._generate(request, req)

    async def _generate(self, request: web.Request, req: P.GenRequest):
        rlog = request["log"]
        rlog.update({"id": req.id, "model": req.model, "stream": req.stream, "prompt_tokens": len(req.prompt_ids),
                     "max_tokens": req.max_tokens, "temperature": req.temperature, "seed": req.seed})
        self._admit()
        if req.logprobs is not None:  # the tokenizer's byte table (~250k entries) is built once, off the event loop
            await self._in_thread(_warm_token_bytes, self.tokenizer)
        try:
            params = P.make_sampling_params(req)
        except (TypeError, ValueError) as e:
            raise P.bad(str(e)) from None
        try:
            h = await self.bridge.submit(req.id, req.prompt_ids, params)   # context errors raise here
        except EngineFault as e:
            raise P.ApiError(500, str(e)) from None
        except (TypeError, ValueError) as e:
            if type(e).__name__ == "ContextLengthError":
                raise P.ApiError(400, str(e), param="messages" if req.kind == "chat" else "prompt",
                                 code="context_length_exceeded") from None
            raise P.bad(str(e)) from None
        try:
            if req.stream:
                return await self._stream(request, req, h)
            return await self._whole(request, req, h)
        finally:
            if not h.finished:
                self.bridge.cancel(h)
            self.bridge.release(h)

    async def _next(self, request: web.Request, h: Handle):
        """The request's next engine item; ClientGone as soon as its connection is closed.

        The transport is checked before every item, not only when idle, and the wait cannot swallow the
        handler's cancellation (see Handle.next_item): a disconnected client never keeps generating."""
        while True:
            tr = request.transport
            if tr is None or tr.is_closing():
                raise ClientGone()
            item = await h.next_item(self.config.poll_s)
            if item is not None:
                return item

    async def _events(self, request: web.Request, req: P.GenRequest, h: Handle):
        """Yields ("text", str) deltas, then ("end", info dict). With logprobs asked, a batch's entries come first as
        ("lp", list), then its ("text", delta), which may then be "" (text held back or none); with prompt logprobs
        (completions echo + logprobs), ("plp", the engine's prompt entries) once, before the first of those.

        The engine's StepOutput.text (its detokenizer applies the stop strings) is used when it has one;
        otherwise the text is decoded and stop strings are matched here."""
        tok = self.tokenizer
        # the stop ids and the special tokens stay out of the text, as the engine's detokenizer does (skip_special)
        stop_ids = set(getattr(tok, "stop_ids", ()) or ()) | set(getattr(tok, "special_ids", ()) or ())
        text = P.TextStream(tok.decode, skip_ids=stop_ids)
        stops = P.StopMatcher(req.stop)
        ids: list[int] = []
        drafted = accepted = 0
        t_first = None
        t_prev = None
        finish = None
        prompt_tokens = len(req.prompt_ids)
        completion_tokens = None
        while finish is None:
            # everything that already arrived is merged into one delta (as vLLM does when a client falls behind)
            batch = [await self._next(request, h)]
            while h.items and len(batch) < 256:
                batch.append(h.items.popleft())
            now = time.perf_counter()
            pending: list[str] = []
            lp_batch: list = []
            timed = False
            for item in batch:
                if finish is not None:
                    break
                if isinstance(item, EngineFault):
                    h.finished = True
                    raise item
                new = list(item.new_token_ids)
                engine_text = getattr(item, "text", None)
                drafted += int(getattr(item, "drafted", 0) or 0)
                accepted += int(getattr(item, "accepted", 0) or 0)
                if getattr(item, "prompt_tokens", None):
                    prompt_tokens = int(item.prompt_tokens)
                plp = getattr(item, "prompt_logprobs", None)
                if plp is not None:
                    yield "plp", plp
                lps = getattr(item, "logprobs", None)
                if lps:
                    lp_batch.extend(lps)
                if new:
                    if t_first is None:
                        t_first = now
                    elif self.metrics is not None and not timed:
                        self.metrics.itl.observe(now - t_prev)
                    timed = True
                    t_prev = now
                    ids.extend(new)
                if engine_text is not None:
                    if engine_text:
                        pending.append(engine_text)
                    if item.finished:
                        h.finished = True
                        finish = item.finish_reason or "stop"
                        completion_tokens = getattr(item, "completion_tokens", None)
                    continue
                # fallback: an engine that gives token ids only
                if new:
                    pending.append(stops.feed(text.add(new)))
                    if stops.matched is not None:
                        finish = "stop"
                        self.bridge.cancel(h)
                        h.finished = True
                if item.finished and finish is None:
                    h.finished = True
                    finish = item.finish_reason or "stop"
                    completion_tokens = getattr(item, "completion_tokens", None)
                    tail = stops.feed(text.flush())
                    if stops.matched is not None:
                        finish = "stop"
                    pending.append(tail + stops.flush())
            delta = "".join(pending)
            if lp_batch:
                yield "lp", lp_batch
            if delta or lp_batch:
                yield "text", delta
        t_end = time.perf_counter()
        ttft = None if t_first is None else t_first - h.t_arrival
        e2e = t_end - h.t_arrival
        eng = self.bridge.engine
        sha = eng.token_sha(ids) if hasattr(eng, "token_sha") else _token_sha(ids)
        n = int(completion_tokens) if completion_tokens is not None else len(ids)
        decode_s = (t_end - t_first) if t_first is not None else 0.0
        block = {"timings": {"ttft_ms": None if ttft is None else round(ttft * 1e3, 3),
                             "decode_ms": round(decode_s * 1e3, 3), "total_ms": round(e2e * 1e3, 3),
                             "prompt_tokens_per_s": (round(prompt_tokens / ttft, 2) if ttft else None),
                             "decode_tokens_per_s": (round((n - 1) / decode_s, 2) if n > 1 and decode_s > 0
                                                     else None)},
                 "drafted": drafted, "accepted": accepted, "token_sha": sha, "seed": req.seed}
        if self.metrics is not None:
            self.metrics.finished(finish, prompt_tokens, n, ttft, e2e, drafted, accepted)
        request["log"].update({"finish_reason": finish, "prompt_tokens": prompt_tokens, "completion_tokens": n,
                               "ttft_ms": block["timings"]["ttft_ms"], "e2e_ms": block["timings"]["total_ms"],
                               "token_sha": sha})
        yield "end", {"finish": finish, "usage": P.usage(prompt_tokens, n), "engine": block}

    async def _whole(self, request: web.Request, req: P.GenRequest, h: Handle) -> web.Response:
        parts: list[str] = []
        entries: list = []
        end = None
        try:
            async for kind, val in self._events(request, req, h):
                if kind == "text":
                    parts.append(val)
                elif kind == "lp":
                    entries.extend(val)
                elif kind == "plp":
                    entries[:0] = P.echo_entries(req.prompt_ids, val)
                else:
                    end = val
        except EngineFault as e:
            raise P.ApiError(500, f"engine fault: {e}") from None
        text = "".join(parts)
        if end["finish"] == "abort":
            raise P.ApiError(503, "request was cancelled (server shutting down)")
        if req.kind == "chat":
            sp = P.ReasoningSplitter(req.prompt_opens_think)
            r, c = sp.feed(text)
            r2, c2 = sp.flush()
            reasoning = (r + r2) if sp.saw_reasoning else None
            lp = P.chat_logprobs(entries, self.tokenizer) if req.logprobs is not None else None
            return json_response(P.chat_response(req, c + c2, reasoning, end["finish"], end["usage"], end["engine"],
                                                 lp))
        lp = P.completion_logprobs(entries, self.tokenizer) if req.logprobs is not None else None
        text = (req.echo or "") + text
        return json_response(P.completion_response(req, text, end["finish"], end["usage"], end["engine"], lp))

    async def _stream(self, request: web.Request, req: P.GenRequest, h: Handle) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream; charset=utf-8",
                                                       "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        await resp.prepare(request)
        chat = req.kind == "chat"
        sp = P.ReasoningSplitter(req.prompt_opens_think) if chat else None
        cw = P.ChunkWriter(req) if req.logprobs is None else _LogprobChunks(req, self.tokenizer)
        try:
            if chat:
                await resp.write(P.sse(P.chat_chunk(req, {"role": "assistant", "content": ""})))
            elif req.echo and req.prompt_logprobs is None:
                await resp.write(P.sse(P.completion_chunk(req, req.echo)))
            async for kind, val in self._events(request, req, h):
                if kind == "lp":
                    cw.entries(val)
                    continue
                if kind == "plp":  # echo with logprobs: the prompt's chunk once its entries are known
                    cw.entries(P.echo_entries(req.prompt_ids, val))
                    await resp.write(cw.content(req.echo or ""))
                    continue
                if kind == "text":
                    if chat:
                        r, c = sp.feed(val)
                        if r:
                            await resp.write(cw.reasoning(r))
                        if c:
                            await resp.write(cw.content(c))
                    elif val:
                        await resp.write(cw.content(val))
                    if req.logprobs is not None:
                        await resp.write(cw.rest())
                    continue
                if chat:
                    r, c = sp.flush()
                    if r:
                        await resp.write(cw.reasoning(r))
                    if c:
                        await resp.write(cw.content(c))
                if val["finish"] == "abort":
                    err = P.ApiError(503, "request was cancelled (server shutting down)")
                    await resp.write(P.sse(err.body()))
                    await resp.write(P.SSE_DONE)
                    return resp
                final = (P.chat_chunk(req, {}, val["finish"]) if chat
                         else P.completion_chunk(req, "", val["finish"]))
                final["engine"] = val["engine"]
                await resp.write(P.sse(final))
                if req.include_usage:
                    await resp.write(P.sse(P.usage_chunk(req, val["usage"])))
            await resp.write(P.SSE_DONE)
        except EngineFault as e:
            request["log"]["error"] = f"engine fault: {e}"
            err = P.ApiError(500, f"engine fault: {e}")
            await resp.write(P.sse(err.body()))
            await resp.write(P.SSE_DONE)
        await resp.write_eof()
        return resp

    # ------------------------------------------------------------------ other routes
    def _model_cards(self) -> list[dict]:
        d = self.defaults
        created = int(time.time())
        return [{"id": n, "object": "model", "created": created, "owned_by": "tensorfold", "root": d.model_names[0],
                 "parent": None, "max_model_len": d.context} for n in d.model_names]

    async def models(self, request: web.Request):
        self._require_ready()
        return json_response({"object": "list", "data": self._model_cards()})

    async def model_route(self, request: web.Request):
        self._require_ready()
        name = request.match_info["model"]
        for card in self._model_cards():
            if card["id"] == name:
                return json_response(card)
        raise P.ApiError(404, f"The model `{name}` does not exist.", param="model", code="model_not_found")

    async def version(self, request: web.Request):
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("tensorfold")
        except PackageNotFoundError:
            v = "unknown"
        return json_response({"version": v})

    async def health(self, request: web.Request):
        if self.draining:
            return json_response({"error": {"code": 503, "message": "Shutting down", "type": "unavailable_error"}},
                                 status=503)
        if not self._loaded():
            msg = f"model failed to load: {self.bridge.load_error}" if self.bridge.load_error else "Loading model"
            return json_response({"error": {"code": 503, "message": msg, "type": "unavailable_error"}}, status=503)
        if self.bridge.dead is not None:
            return json_response({"error": {"code": 503, "message": f"engine thread died: {self.bridge.dead}",
                                            "type": "unavailable_error"}}, status=503)
        running, waiting = self._counts()
        return json_response({"status": "ok", "model": self.defaults.model_names[0], "running": running,
                              "waiting": waiting, "active": self.bridge.active, "context": self.defaults.context,
                              "aborted": self.bridge.aborted, "engine_faults": self.bridge.faults})

    def _counts(self) -> tuple[int, int]:
        s = self.bridge.stats()
        active = self.bridge.active
        running = s.get("running", s.get("num_running"))
        waiting = s.get("waiting", s.get("num_waiting"))
        if running is None:
            running = min(active, self.config.parallel)
        if waiting is None:
            waiting = max(0, active - int(running))
        return int(running), int(waiting)

    async def metrics_route(self, request: web.Request):
        if not self._loaded():
            self._require_ready()
        s = self.bridge.stats()
        running, waiting = self._counts()
        kv = s.get("kv_cache_usage", s.get("kv_cache_usage_perc", 0.0)) or 0.0
        text = self.metrics.render(running, waiting, float(kv))
        return web.Response(text=text, content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Type-Options": "nosniff"})

    async def tokenize(self, request: web.Request):
        self._require_ready()
        body = await self._body(request)
        d = self.defaults
        P.check_model(body, d)
        if "messages" in body:
            messages = P.check_messages(body)
            tkw = P.check_template_kwargs(body)
            agp = P.get_bool(body, "add_generation_prompt", True)
            ids, _ = await self._in_thread(self._render_chat, messages, tkw, agp)
        else:
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                raise P.bad("'prompt' (a string) or 'messages' is required", "prompt")
            ids = list(await self._in_thread(self.tokenizer.encode, prompt))
        return json_response({"tokens": ids, "count": len(ids), "max_model_len": d.context})

    async def detokenize(self, request: web.Request):
        self._require_ready()
        body = await self._body(request)
        d = self.defaults
        P.check_model(body, d)
        toks = body.get("tokens")
        if not isinstance(toks, list):
            raise P.bad("'tokens' must be an array of token ids", "tokens")
        for i, t in enumerate(toks):
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < d.vocab_size:
                raise P.bad(f"'tokens[{i}]' = {t!r} is not a token id (vocabulary size {d.vocab_size})", "tokens")
        text = await self._in_thread(self.tokenizer.decode, toks)
        return json_response({"prompt": text})


def _vocab_size(eng) -> int:
    for obj, attr in ((eng, "valid_vocab"), (eng, "vocab_size"), (getattr(eng, "config", None), "vocab_size"),
                      (eng.tokenizer, "vocab_size")):
        v = getattr(obj, attr, None) if obj is not None else None
        if isinstance(v, int) and v > 0:
            return v
    try:
        return len(eng.tokenizer)
    except TypeError:
        return 1 << 31


async def _drain(request: web.Request, limit: int = 64 * 1024 * 1024, timeout: float = 10.0) -> None:
    """Read and drop the rest of an oversized body (bounded) so the client can read its 413."""
    cl = request.content_length
    if cl is not None and cl > limit:
        return
    seen = 0
    t = time.monotonic()
    try:
        while seen < limit and time.monotonic() - t < timeout:
            chunk = await asyncio.wait_for(request.content.readany(), timeout)
            if not chunk:
                break
            seen += len(chunk)
    except (asyncio.TimeoutError, ConnectionError):
        pass


class _LogprobChunks:
    """The streaming frames of a request with logprobs (``P.ChunkWriter``'s slower twin): a batch's logprob entries
    (``entries``) ride on the first content or reasoning chunk written after them; ``rest`` writes a chunk with
    empty text for entries whose text was held back (a partial character, a possible stop string)."""

    def __init__(self, req: P.GenRequest, tok):
        self.req, self.tok = req, tok
        self.chat = req.kind == "chat"
        self._lp: list = []
        self._offset = 0

    def entries(self, lps) -> None:
        self._lp.extend(lps)

    def _frame(self, key: str, text: str) -> bytes:
        lp = None
        if self._lp:
            if self.chat:
                lp = P.chat_logprobs(self._lp, self.tok)
            else:
                lp = P.completion_logprobs(self._lp, self.tok, self._offset)
                self._offset = lp["text_offset"][-1] + len(lp["tokens"][-1])
            self._lp = []
        obj = P.chat_chunk(self.req, {key: text}) if self.chat else P.completion_chunk(self.req, text)
        obj["choices"][0]["logprobs"] = lp
        return P.sse(obj)

    def content(self, text: str) -> bytes:
        return self._frame("content", text)

    def reasoning(self, text: str) -> bytes:
        return self._frame("reasoning_content", text)

    def rest(self) -> bytes:
        return self._frame("content", "") if self._lp else b""


def _warm_token_bytes(tok) -> None:
    """Build the tokenizer's byte table (``token_bytes``' first call; later calls are a lookup) where it has one;
    errors surface later, per token, where ``protocol._token_piece`` falls back to decoded text."""
    tb = getattr(tok, "token_bytes", None)
    if tb is not None:
        try:
            tb(0)
        except Exception:  # noqa: BLE001
            pass
