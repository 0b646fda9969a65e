"""`GET /metrics` of `inhabit serve`: Prometheus text format, named as vLLM names its own.

Gauges read at scrape time from the engine (requests running and waiting, KV cache usage, the
policy version); counters and histograms fed by the engine's finish hooks as each request ends
(prompt and generation tokens, time to first token, time per output token after the first,
end-to-end latency, requests by finish reason) and by the server (429s). Each app has its own
registry, so several servers in one process (tests) never share or clash.

    inhabit:num_requests_running / inhabit:num_requests_waiting      gauges
    inhabit:kv_cache_usage_perc                                       gauge, 0..1 of engine.kv_cache_gb
    inhabit:prefix_cache_queries_total / inhabit:prefix_cache_hits_total   counters, prompt tokens
                                                                      looked up / served from cache
    inhabit:num_preemptions_total                                     counter
    inhabit:policy_version                                            gauge
    inhabit:prompt_tokens_total / inhabit:generation_tokens_total     counters
    inhabit:request_success_total{finished_reason}                    counter
    inhabit:time_to_first_token_seconds                               histogram
    inhabit:time_per_output_token_seconds                             histogram
    inhabit:e2e_request_latency_seconds                               histogram
    inhabit:requests_rejected_total{reason="overloaded"}              counter (429s)
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160)
_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class ServeMetrics:
    """The metrics of one server over one engine."""

    def __init__(self, engine: Any) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_EngineGauges(engine))
        r = self.registry
        self.prompt_tokens = Counter("inhabit:prompt_tokens", "Prompt tokens processed.", registry=r)
        self.generation_tokens = Counter("inhabit:generation_tokens", "Tokens generated.", registry=r)
        self.finished = Counter(
            "inhabit:request_success", "Requests ended, by finish reason.", ["finished_reason"], registry=r
        )
        self.rejected = Counter("inhabit:requests_rejected", "Requests refused.", ["reason"], registry=r)
        self.ttft = Histogram(
            "inhabit:time_to_first_token_seconds",
            "From admission to the first sampled token.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tpot = Histogram(
            "inhabit:time_per_output_token_seconds",
            "Mean time per output token after the first, per request.",
            buckets=_TOKEN_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "inhabit:e2e_request_latency_seconds",
            "From admission to the last token.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        engine.finish_hooks.append(self.on_finished)

    def on_finished(self, completion: Any, submitted: float, first: float | None, finished: float) -> None:
        n = len(completion.token_ids)
        self.prompt_tokens.inc(len(completion.prompt_token_ids or []))
        self.generation_tokens.inc(n)
        self.finished.labels(completion.finish_reason).inc()
        self.e2e.observe(finished - submitted)
        if first is not None:
            self.ttft.observe(first - submitted)
            if n > 1:
                self.tpot.observe((finished - first) / (n - 1))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _EngineGauges:
    """Gauges read from the engine when scraped (no bookkeeping between scrapes)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def collect(self) -> Any:
        stats = self.engine.stats()
        for name, doc, value in (
            ("inhabit:num_requests_running", "Requests in the decode batch.", stats["running"]),
            (
                "inhabit:num_requests_waiting",
                "Requests admitted and waiting for a batch slot.",
                stats["waiting"],
            ),
            ("inhabit:policy_version", "Policy version of the weights served.", stats["version"]),
            (
                "inhabit:kv_cache_usage_perc",
                "Tokens of running requests in the KV cache over what its budget holds (0..1).",
                stats.get("kv_tokens", 0) / max(stats.get("kv_capacity_tokens", 1), 1),
            ),
        ):
            yield GaugeMetricFamily(name, doc, value=value)
        # Counted by the engine itself (an engine without a prefix cache reports no hits).
        for name, doc, key in (
            ("inhabit:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", "prompt_tokens"),
            (
                "inhabit:prefix_cache_hits",
                "Prompt tokens served from the prefix cache.",
                "cached_prompt_tokens",
            ),
            (
                "inhabit:num_preemptions",
                "Requests sent back to the queue to fit the KV budget.",
                "preemptions",
            ),
        ):
            if key in stats:
                yield CounterMetricFamily(name, doc, value=stats[key])
