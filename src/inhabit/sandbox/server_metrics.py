"""`GET /metrics` of `inhabit sandbox env-server`: Prometheus text format (behind the bearer token, like
every route of this server: give Prometheus the token as `authorization.credentials`).

    inhabit_env:sandboxes_live                      gauge, sandboxes open now
    inhabit_env:leases_live                         gauge, clients whose lease keeps a sandbox
    inhabit_env:exec_latency_seconds                histogram of POST .../exec (whole request)
    inhabit_env:http_responses_total{status}        counter, by status code (429s: over max_sandboxes)
    inhabit_env:requests_rejected_total{reason}     counter: 429 too_many_sandboxes, 401, 413

The gauges are read from the registry when scraped; the rest is observed by a plain ASGI
middleware around the routes (it sees each response's status and how long its request took).
What it does not protect against: nothing; it only counts.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_REJECTIONS = {429: "too_many_sandboxes", 401: "unauthorized", 413: "payload_too_large"}


class EnvMetrics:
    """The metrics of one env server; `registry_of()` gives its sandbox registry once started."""

    def __init__(self, registry_of: Any) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_Live(registry_of))
        r = self.registry
        self.exec_latency = Histogram(
            "inhabit_env:exec_latency_seconds", "Exec requests, end to end.", buckets=_BUCKETS, registry=r
        )
        self.responses = Counter("inhabit_env:http_responses", "Responses by status.", ["status"], registry=r)
        self.rejected = Counter("inhabit_env:requests_rejected", "Requests refused.", ["reason"], registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def middleware(self, app: Any) -> Any:
        """A plain ASGI app around `app` that observes every HTTP response."""
        metrics = self

        async def observed(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            t0 = time.monotonic()
            status = 500  # if the app fails before it answers

            async def watched(message: dict[str, Any]) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                await send(message)

            try:
                await app(scope, receive, watched)
            finally:
                metrics.responses.labels(str(status)).inc()
                if status in _REJECTIONS:
                    metrics.rejected.labels(_REJECTIONS[status]).inc()
                if scope["method"] == "POST" and scope["path"].rstrip("/").endswith("/exec"):
                    metrics.exec_latency.observe(time.monotonic() - t0)

        return observed


class _Live:
    def __init__(self, registry_of: Any) -> None:
        self.registry_of = registry_of

    def collect(self) -> Any:
        reg = self.registry_of()
        entries = list(reg.entries.values()) if reg is not None else []
        leases = {e.client for e in entries if e.client}
        yield GaugeMetricFamily("inhabit_env:sandboxes_live", "Sandboxes open now.", value=len(entries))
        yield GaugeMetricFamily(
            "inhabit_env:leases_live", "Clients whose lease keeps at least one sandbox.", value=len(leases)
        )
