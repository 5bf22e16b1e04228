"""Prometheus metrics for `GET /metrics`, under vLLM's names and again under the `tensorfold_` prefix.

Counters and histograms are updated on the event-loop thread only (no locks needed); gauges are read at
scrape time from the bridge and the engine's `stats()`.
"""

from __future__ import annotations

import math

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
               0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)


class Histogram:
    def __init__(self, buckets):
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, v: float) -> None:
        if not math.isfinite(v):
            return
        self.sum += v
        self.count += 1
        for i, b in enumerate(self.buckets):
            if v <= b:
                self.counts[i] += 1
                break


class Metrics:
    def __init__(self, model_name: str):
        self.model_name = model_name
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.success: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self.errors: dict[int, int] = {}
        self.drafted = 0
        self.accepted = 0
        self.drafts = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.tpot = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.req_prompt = Histogram((1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000,
                                     100000, 200000))
        self.req_gen = Histogram((1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000,
                                  100000, 200000))

    def error(self, status: int) -> None:
        self.errors[status] = self.errors.get(status, 0) + 1

    def finished(self, reason: str, prompt_tokens: int, completion_tokens: int, ttft: float | None,
                 e2e: float, drafted: int = 0, accepted: int = 0) -> None:
        self.success[reason] = self.success.get(reason, 0) + 1
        self.prompt_tokens += prompt_tokens
        self.generation_tokens += completion_tokens
        self.drafted += drafted
        self.accepted += accepted
        if ttft is not None:
            self.ttft.observe(ttft)
            if completion_tokens > 1:
                self.tpot.observe((e2e - ttft) / (completion_tokens - 1))
        self.e2e.observe(e2e)
        self.req_prompt.observe(prompt_tokens)
        self.req_gen.observe(completion_tokens)

    def render(self, running: int, waiting: int, kv_usage: float) -> str:
        lab = '{model_name="%s"}' % self.model_name.replace("\\", "\\\\").replace('"', '\\"')
        lines: list[str] = []

        def both(name: str, typ: str, help_: str, body):
            for full in ("vllm:" + name, "tensorfold_" + name):
                lines.append(f"# HELP {full} {help_}")
                lines.append(f"# TYPE {full} {typ}")
                body(full)

        def scalar(v):
            return lambda full: lines.append(f"{full}{lab} {_num(v)}")

        def hist(h: Histogram):
            def body(full):
                base = lab[:-1]
                cum = 0
                for b, c in zip(h.buckets, h.counts):
                    cum += c
                    lines.append(f'{full}_bucket{base},le="{_num(b)}"}} {cum}')
                lines.append(f'{full}_bucket{base},le="+Inf"}} {h.count}')
                lines.append(f"{full}_sum{lab} {_num(h.sum)}")
                lines.append(f"{full}_count{lab} {h.count}")
            return body

        both("num_requests_running", "gauge", "Requests in model execution batches.", scalar(running))
        both("num_requests_waiting", "gauge", "Requests waiting to be processed.", scalar(waiting))
        both("kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", scalar(kv_usage))
        both("prompt_tokens_total", "counter", "Number of prefill tokens processed.", scalar(self.prompt_tokens))
        both("generation_tokens_total", "counter", "Number of generation tokens processed.",
             scalar(self.generation_tokens))

        def success(full):
            for reason, n in sorted(self.success.items()):
                lines.append(f'{full}{lab[:-1]},finished_reason="{reason}"}} {n}')
        both("request_success_total", "counter", "Count of finished requests by finish reason.", success)
        both("spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.", scalar(self.drafts))
        both("spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.", scalar(self.drafted))
        both("spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.",
             scalar(self.accepted))
        both("time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.",
             hist(self.ttft))
        both("inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.",
             hist(self.itl))
        both("request_time_per_output_token_seconds", "histogram",
             "Histogram of time per output token in seconds.", hist(self.tpot))
        both("e2e_request_latency_seconds", "histogram", "Histogram of e2e request latency in seconds.",
             hist(self.e2e))
        both("request_prompt_tokens", "histogram", "Number of prefill tokens processed.", hist(self.req_prompt))
        both("request_generation_tokens", "histogram", "Number of generation tokens processed.",
             hist(self.req_gen))
        lines.append("# HELP tensorfold_http_errors_total HTTP error responses by status.")
        lines.append("# TYPE tensorfold_http_errors_total counter")
        for status, n in sorted(self.errors.items()):
            lines.append(f'tensorfold_http_errors_total{lab[:-1]},status="{status}"}} {n}')
        return "\n".join(lines) + "\n"


def _num(v) -> str:
    if isinstance(v, bool):
        v = int(v)
    if isinstance(v, int):
        return str(v)
    return repr(float(v))
