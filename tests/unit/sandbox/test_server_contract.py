"""The Sandbox contract (test_contract.py) run through the env server: RemoteSandbox over loopback.

Every test of the local contract is collected again here with `provider` redefined as a
`RemoteSandboxProvider` talking to a real env server (uvicorn on 127.0.0.1, in a thread) that
wraps a real local backend, so the remote client must behave exactly like a local sandbox.
"""

from __future__ import annotations

import pytest
from test_contract import *  # noqa: F403  (re-collect every contract test against the remote provider)

from conftest import make_provider, small_limits
from inhabit.sandbox.remote import RemoteSandboxProvider
from inhabit.sandbox.server import BackgroundServer, EnvServerConfig

TOKEN = "contract-test-token"
SERVED_BACKENDS = ["process", "bwrap"]


@pytest.fixture(scope="module", params=SERVED_BACKENDS)
def env_server(request):
    kind = request.param
    if kind != "process":
        pytest.importorskip("inhabit.sandbox.bwrap")
        make_provider(kind)  # skips when bwrap does not work on this host
    config = EnvServerConfig(token=TOKEN, backend=kind)
    with BackgroundServer(lambda: make_provider(kind), token=TOKEN, config=config) as server:
        yield server


@pytest.fixture
async def provider(env_server):
    prov = RemoteSandboxProvider(env_server.url, TOKEN, limits=small_limits())
    yield prov
    await prov.close()
