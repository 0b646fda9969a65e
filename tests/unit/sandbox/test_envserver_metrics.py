"""`GET /metrics` of `inhabit sandbox env-server`, scraped with prometheus_client's own parser.

A real server over the process backend on loopback: after two sandboxes (one client lease), one
exec and a 429 past `max_sandboxes`, the scrape must show exactly those figures.
"""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families
from test_server_api import AUTH, TOKEN, Served

from inhabit.sandbox.remote import RemoteSandboxProvider


def scrape(url: str, headers: dict) -> dict[str, float]:
    """Every sample of a scrape, by name plus labels (`name{k=v}`)."""
    r = httpx.get(url + "/metrics", headers=headers)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


async def test_env_server_metrics(workspace):
    s = Served(max_sandboxes=2)
    with s.server:
        assert httpx.get(s.url + "/metrics").status_code == 401  # behind the token, as every route
        before = scrape(s.url, AUTH)
        assert before["inhabit_env:sandboxes_live"] == 0 and before["inhabit_env:leases_live"] == 0
        prov = RemoteSandboxProvider(s.url, TOKEN)
        a = await prov.create(workspace)
        await prov.create(workspace)
        assert (await a.exec("echo hi")).exit_code == 0
        try:
            await prov.create(workspace)
        except Exception:  # SandboxLimitExceeded: the 429 counted below
            pass
        m = scrape(s.url, AUTH)
        assert m["inhabit_env:sandboxes_live"] == 2 and m["inhabit_env:leases_live"] == 1
        assert m["inhabit_env:exec_latency_seconds_count"] == 1
        assert m["inhabit_env:requests_rejected_total{reason=too_many_sandboxes}"] == 1
        assert m["inhabit_env:http_responses_total{status=429}"] == 1
        assert m["inhabit_env:requests_rejected_total{reason=unauthorized}"] == 1
        await prov.close()
        assert scrape(s.url, AUTH)["inhabit_env:sandboxes_live"] == 0
