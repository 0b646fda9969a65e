"""Env-server input that once passed or crashed: file errors, NUL bytes, absurd limits, leftovers.

A real server over the process backend on loopback. File errors (writing under a path that is a
file, a 300-character name) answer 4xx JSON that names the workspace path, never the host's, on a
connection that stays open; NUL bytes in a command, argv, cwd or env, `=` in an env key and
absurd limits or timeouts are 422; a SIGKILLed server's spool folder goes at the next start.
"""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
from test_server_api import AUTH, TOKEN, Served

from inhabit.sandbox.remote import RemoteSandboxProvider


@pytest.fixture
async def sandbox_url(workspace):
    s = Served()
    with s.server:
        prov = RemoteSandboxProvider(s.url, TOKEN)
        sb = await prov.create(workspace)
        yield s, f"{s.url}/v1/sandboxes/{sb.sandbox_id}"
        await prov.close()


@pytest.mark.parametrize(
    "path,code",
    [
        ("calc.py/x", ("bad_request", "not_a_directory")),
        ("a" * 300, ("bad_request",)),
        ("d/" + "b" * 300 + "/c", ("bad_request",)),
    ],
)
async def test_file_errors_are_4xx_json_without_host_paths_on_a_kept_connection(
    sandbox_url, workspace, path, code
):
    (workspace / "calc.py").write_text("x = 1\n")
    s, url = sandbox_url
    async with httpx.AsyncClient(headers=AUTH, limits=httpx.Limits(max_connections=1)) as client:
        await client.put(url + "/files", params={"path": "calc.py"}, content=b"x = 1\n")
        r = await client.put(url + "/files", params={"path": path}, content=b"data")
        assert 400 <= r.status_code < 500, r.text
        assert r.headers["content-type"].startswith("application/json")
        body = r.json()
        assert body["code"] in code, body
        for host in ("/tmp", "/dev/shm", str(workspace), "inhabit-"):
            assert host not in body["detail"], body
        assert (await client.get(s.url + "/v1/health")).status_code == 200  # same connection


@pytest.mark.parametrize(
    "body",
    [
        {"command": "echo a\x00b"},
        {"command": ["echo", "a\x00b"]},
        {"command": "true", "cwd": ".\x00"},
        {"command": "true", "env": {"A": "x\x00y"}},
        {"command": "true", "env": {"A=B": "x"}},
        {"command": "true", "env": {"": "x"}},
        {"command": "true", "timeout_s": 1e300},
    ],
)
async def test_exec_refuses_nul_bytes_bad_env_keys_and_absurd_timeouts(sandbox_url, body):
    _, url = sandbox_url
    async with httpx.AsyncClient(headers=AUTH) as client:
        r = await client.post(url + "/exec", json=body)
    assert r.status_code == 422 and r.json()["code"] == "validation", r.text


@pytest.mark.parametrize("limits", [{"memory_mb": 1e30}, {"max_timeout_s": 1e300}, {"disk_mb": 10**15}])
async def test_absurd_limits_are_422(sandbox_url, limits):
    s, _ = sandbox_url
    async with httpx.AsyncClient(headers=AUTH) as client:
        r = await client.post(s.url + "/v1/sandboxes", json={"directory": ".", "limits": limits})
    assert r.status_code == 422 and r.json()["code"] == "validation", r.text


def test_a_dead_servers_spool_is_removed_at_the_next_start(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leftover = tmp_path / f"inhabit-env-server-{dead.pid}-abcd1234"
    (leftover / "upload").mkdir(parents=True)
    (leftover / "upload" / "big.tar").write_bytes(b"x" * 1024)
    s = Served(spool_dir=tmp_path)
    with s.server:
        assert httpx.get(s.url + "/v1/health", headers=AUTH).status_code == 200
        assert not leftover.exists()
        assert [p.name.startswith("inhabit-env-server-") for p in tmp_path.iterdir()] == [True]  # its own
