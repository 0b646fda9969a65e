"""`GET /metrics` of `inhabit serve`, scraped with prometheus_client's own parser.

A real tiny MoE model served on loopback: after one whole and one streamed chat completion of 5
tokens each and one request refused with 429, the counters and histograms must say exactly that.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families


def scrape(url: str) -> dict[str, float]:
    r = httpx.get(url + "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


@pytest.fixture(scope="module")
def server(moe_folder):
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.inference.server import BackgroundServer, create_app

    engine = EmbeddedEngine.from_path(moe_folder, EngineConfig(seed=0, max_queue=2))
    app = create_app(engine, engine.tokenizer, model_name="m", api_key="k")
    with BackgroundServer(app) as srv:
        yield srv
    asyncio.run(engine.close())


def test_serve_metrics_count_requests_tokens_and_latencies(server):
    before = scrape(server.url)
    assert before["inhabit:num_requests_running"] == 0 and before["inhabit:num_requests_waiting"] == 0
    assert before["inhabit:generation_tokens_total"] == 0
    headers = {"Authorization": "Bearer k"}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "temperature": 0}
    url = server.url + "/v1/chat/completions"
    whole = httpx.post(url, json=body, headers=headers, timeout=60).json()
    with httpx.stream("POST", url, json=body | {"stream": True}, headers=headers, timeout=60) as r:
        assert r.status_code == 200 and "[DONE]" in r.read().decode()
    assert httpx.post(url, json=body | {"n": 3}, headers=headers).status_code == 429  # max_queue=2
    m = scrape(server.url)
    prompt = whole["usage"]["prompt_tokens"]
    assert m["inhabit:prompt_tokens_total"] == 2 * prompt
    assert m["inhabit:generation_tokens_total"] == 10
    assert m["inhabit:request_success_total{finished_reason=length}"] == 2
    for name in (
        "time_to_first_token_seconds",
        "time_per_output_token_seconds",
        "e2e_request_latency_seconds",
    ):
        assert m[f"inhabit:{name}_count"] == 2 and m[f"inhabit:{name}_sum"] > 0
    assert m["inhabit:requests_rejected_total{reason=overloaded}"] == 1
    assert 0 <= m["inhabit:kv_cache_usage_perc"] <= 1 and m["inhabit:policy_version"] == 0
    # An MoE model recording routes keeps no prefix cache: every prompt token is looked up, none served.
    assert m["inhabit:prefix_cache_queries_total"] == 2 * prompt
    assert m["inhabit:prefix_cache_hits_total"] == 0 and m["inhabit:num_preemptions_total"] == 0
