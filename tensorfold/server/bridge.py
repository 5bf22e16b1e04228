"""The engine thread and its bridge to the asyncio event loop.

One thread owns the `Engine`: it builds it (so the HTTP server can answer `/health` with 503 while weights load),
then loops `engine.step()` while there is work and sleeps on a condition when idle. Handlers never call the
engine themselves: `submit` queues an `add_request` for the thread and awaits its result (so a context-length
refusal arrives before any stream opens), `cancel` queues an `engine.cancel`. Each `StepOutput` is pushed to the
request's own mailbox (a deque plus a waiter future) with `loop.call_soon_threadsafe`, one wake-up per round.
A fault inside `step()` is delivered to every live request as an `EngineFault` item and the thread carries on
with the next request; if the thread itself fails, live and later requests get a 500 and /health a 503.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
import traceback
from typing import Any, Callable

log = logging.getLogger("tensorfold.server")


class EngineFault(Exception):
    """The engine raised while serving this request."""


class Handle:
    """The handler's side of one request: its mailbox of StepOutput / EngineFault items and its timings.

    `push` runs on the event loop (scheduled by the engine thread); `next_item` waits with a plain future (no
    asyncio.wait_for, whose 3.11 version can swallow a cancellation) and wakes at least every `poll` seconds so
    the caller can check its client."""

    def __init__(self, request_id: str, loop: asyncio.AbstractEventLoop):
        self.request_id = request_id
        self.rid: Any = None
        self.items: collections.deque = collections.deque()
        self._waiter: asyncio.Future | None = None
        self.loop = loop
        self.t_arrival = time.perf_counter()
        self.finished = False
        self.cancelled = False

    def push(self, item) -> None:
        self.items.append(item)
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def next_item(self, poll: float):
        """The next item, or None when `poll` seconds passed without one."""
        if self.items:
            return self.items.popleft()
        fut = self.loop.create_future()
        self._waiter = fut
        timer = self.loop.call_later(poll, _wake, fut)
        try:
            await fut
        finally:
            timer.cancel()
            self._waiter = None
        return self.items.popleft() if self.items else None


def _push_all(batch) -> None:
    for h, item in batch:
        h.push(item)


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class EngineBridge:
    def __init__(self, engine_factory: Callable[[], Any], max_active: int):
        self._factory = engine_factory
        self.max_active = max_active
        self.engine = None
        self.load_error: str | None = None
        self.load_seconds: float | None = None
        self.ready = threading.Event()
        self._cv = threading.Condition()
        self._adds: list = []
        self._cancels: list[str] = []
        self._stopping = False
        self._live: dict[str, Handle] = {}      # request_id -> handle (touched on the loop thread only)
        self._rids: dict[str, Any] = {}         # request_id -> engine rid (engine thread only)
        self._by_rid: dict[Any, Handle] = {}    # engine rid -> handle (engine thread only)
        self._thread: threading.Thread | None = None
        self.aborted = 0
        self.faults = 0
        self.dead: str | None = None            # set when the engine thread itself failed
        self.steps = 0

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tensorfold-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def active(self) -> int:
        return len(self._live)

    def live_handles(self) -> list[Handle]:
        return list(self._live.values())

    # ---------------------------------------------------------------- loop-side API
    async def submit(self, request_id: str, prompt_ids: list[int], params) -> Handle:
        """Queue add_request on the engine thread and wait until it accepted (or raised)."""
        if self.dead is not None:
            raise EngineFault(f"engine thread died: {self.dead}")
        loop = asyncio.get_running_loop()
        h = Handle(request_id, loop)
        fut = loop.create_future()
        self._live[request_id] = h
        with self._cv:
            self._adds.append((h, fut, prompt_ids, params))
            self._cv.notify_all()
        try:
            await fut
        except BaseException:
            self._live.pop(request_id, None)
            if not fut.done() or fut.cancelled():
                self.cancel(h)
            raise
        return h

    def cancel(self, h: Handle) -> None:
        if h.finished or h.cancelled:
            return
        h.cancelled = True
        with self._cv:
            self._cancels.append(h.request_id)
            self._cv.notify_all()

    def release(self, h: Handle) -> None:
        """The handler is done with the request (finished or cancelled)."""
        self._live.pop(h.request_id, None)

    def cancel_all(self) -> None:
        for h in list(self._live.values()):
            self.cancel(h)

    def stats(self) -> dict:
        eng = self.engine
        s = {}
        if eng is not None and hasattr(eng, "stats"):
            try:
                s = dict(eng.stats())
            except Exception:  # stats are best effort; never fail /metrics or /health for them
                s = {}
        return s

    # ---------------------------------------------------------------- engine thread
    def _deliver(self, h: Handle, item) -> None:
        h.loop.call_soon_threadsafe(h.push, item)

    @staticmethod
    def _resolve(fut: asyncio.Future, exc: BaseException | None) -> None:
        if fut.done():
            return
        if exc is None:
            fut.set_result(None)
        else:
            fut.set_exception(exc)

    def _run(self) -> None:
        t0 = time.perf_counter()
        try:
            self.engine = self._factory()
        except BaseException as e:  # noqa: BLE001 - reported through /health and the CLI
            self.load_error = f"{type(e).__name__}: {e}"
            log.error("model load failed:\n%s", traceback.format_exc())
            self.ready.set()
            return
        self.load_seconds = time.perf_counter() - t0
        self.ready.set()
        try:
            self._loop(self.engine)
            self._close_engine()
        except BaseException as e:  # noqa: BLE001 - a bug here must not leave requests waiting forever
            self.dead = f"{type(e).__name__}: {e}"
            log.critical("engine thread died:\n%s", traceback.format_exc())
            fault = EngineFault(f"engine thread died: {self.dead}")
            for h in list(self._by_rid.values()):
                self._deliver(h, fault)
            with self._cv:
                adds, self._adds = self._adds, []
            for h, fut, _ids, _params in adds:
                h.loop.call_soon_threadsafe(self._resolve, fut, fault)

    def _close_engine(self) -> None:
        """Release the backend (its CUDA graphs and streams) on the engine thread, the one that used them."""
        try:
            self.engine.close()
        except Exception:  # noqa: BLE001 - shutting down anyway; reported, never raised
            log.warning("engine close failed:\n%s", traceback.format_exc())

    def _loop(self, eng) -> None:
        stop_cancelled = False
        while True:
            with self._cv:
                while not (self._adds or self._cancels or self._stopping or eng.has_unfinished()):
                    self._cv.wait()
                adds, self._adds = self._adds, []
                cancels, self._cancels = self._cancels, []
                stopping = self._stopping
            for h, fut, ids, params in adds:
                if h.cancelled:
                    h.loop.call_soon_threadsafe(self._resolve, fut, asyncio.CancelledError())
                    continue
                try:
                    rid = eng.add_request(ids, params, h.request_id)
                except BaseException as e:  # noqa: BLE001 - handed to the handler (context errors etc.)
                    h.loop.call_soon_threadsafe(self._resolve, fut, e)
                    continue
                h.rid = rid
                self._rids[h.request_id] = rid
                self._by_rid[rid] = h
                h.loop.call_soon_threadsafe(self._resolve, fut, None)
            for request_id in cancels:
                rid = self._rids.get(request_id)
                if rid is not None:
                    try:
                        eng.cancel(rid)
                    except Exception:  # noqa: BLE001 - already finished
                        log.debug("cancel %s failed", request_id, exc_info=True)
            if stopping and not stop_cancelled:
                stop_cancelled = True
                for rid in list(self._by_rid):
                    try:
                        eng.cancel(rid)
                    except Exception:  # noqa: BLE001
                        pass
            if eng.has_unfinished():
                try:
                    outs = eng.step()
                    self.steps += 1
                except Exception as e:  # noqa: BLE001 - a real engine fault: fail the live requests
                    self.faults += 1
                    log.error("engine step failed:\n%s", traceback.format_exc())
                    fault = EngineFault(f"{type(e).__name__}: {e}")
                    for rid, h in list(self._by_rid.items()):
                        try:
                            eng.cancel(rid)
                        except Exception:  # noqa: BLE001
                            pass
                        self._deliver(h, fault)
                    self._by_rid.clear()
                    self._rids.clear()
                    # a broken engine may keep reporting work; drain what it still holds
                    try:
                        if eng.has_unfinished():
                            eng.step()
                    except Exception:  # noqa: BLE001
                        time.sleep(0.05)  # never spin hot on an engine that keeps failing
                    continue
                batch = []
                for o in outs:
                    h = self._by_rid.get(o.request_id)
                    if h is None:
                        continue
                    if o.finished:
                        del self._by_rid[o.request_id]
                        self._rids.pop(h.request_id, None)
                        if o.finish_reason == "abort":
                            self.aborted += 1
                    batch.append((h, o))
                if batch:   # one wake-up of the event loop per round, not one per stream
                    batch[0][0].loop.call_soon_threadsafe(_push_all, batch)
            elif stopping:
                return
