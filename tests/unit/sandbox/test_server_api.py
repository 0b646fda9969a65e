"""The env server over real loopback HTTP: auth, every kind of bad request, reaping, shutdown.

A real uvicorn server (127.0.0.1, any free port, in a thread) wraps the real process backend.
Raw httpx requests probe the wire; `RemoteSandboxProvider` checks the typed errors clients see.
After every bad request a healthy request must still work.
"""

from __future__ import annotations

import asyncio
import io
import os
import sys
import tarfile
from pathlib import Path

import httpx
import pytest

from conftest import make_provider, small_limits
from inhabit.errors import PathOutsideWorkspace, SandboxError, SandboxLimitExceeded, SandboxNotFound
from inhabit.sandbox.base import SandboxProvider
from inhabit.sandbox.pool import SandboxPool
from inhabit.sandbox.remote import EnvServerUnauthorized, RemoteSandboxProvider
from inhabit.sandbox.server import BackgroundServer, EnvServerConfig

# A process that leaves the exec's process group (setsid) and reports its pid only once it has,
# so the per-exec group kill cannot race it: only the sandbox's close can stop it.
ESCAPE_AND_REPORT_PID = (
    "setsid sh -c 'echo $$ > $TMPDIR/escaped.pid; exec sleep 60' > /dev/null 2>&1 < /dev/null & "
    "for i in $(seq 500); do [ -s $TMPDIR/escaped.pid ] && break; sleep 0.01; done; cat $TMPDIR/escaped.pid"
)
TOKEN = "api-test-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class Served:
    """A background server plus a handle on the provider it made (to check cleanup)."""

    def __init__(self, kind: str = "process", **config) -> None:
        self.kind = kind
        self.providers: list[SandboxProvider] = []
        cfg = EnvServerConfig(token=TOKEN, backend=kind, **config)
        self.server = BackgroundServer(self._make, token=TOKEN, config=cfg)
        self.url = self.server.url

    def _make(self) -> SandboxProvider:
        prov = make_provider(self.kind)
        self.providers.append(prov)
        return prov


@pytest.fixture(params=["process", "bwrap"])
def kind(request) -> str:
    if request.param != "process":
        pytest.importorskip("inhabit.sandbox.bwrap")
        make_provider(request.param)  # skips where bwrap does not work
    return request.param


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("root")
    (root / "proj").mkdir()
    (root / "proj" / "main.py").write_text("print('hi from root')\n")
    return root


@pytest.fixture(scope="module")
def served(root):
    s = Served(root=root, max_upload_mb=0.25, max_extracted_mb=1, max_file_mb=0.25)
    with s.server:
        yield s


@pytest.fixture
async def client(served):
    prov = RemoteSandboxProvider(served.url, TOKEN, limits=small_limits())
    yield prov
    await prov.close()


@pytest.fixture
async def raw(served):
    async with httpx.AsyncClient(base_url=served.url + "/v1", timeout=30) as c:
        yield c


async def assert_healthy(raw: httpx.AsyncClient, sb) -> None:
    assert (await raw.get("/health", headers=AUTH)).json()["status"] == "ok"
    assert (await sb.exec("echo still-ok")).stdout == "still-ok\n"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie is dead for our purposes
    except OSError:
        return False


def tar_bytes(files: dict[str, bytes], *, gz: bool = True) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tar_link(name: str, target: str, then: dict[str, bytes] | None = None, *, hard: bool = False) -> bytes:
    """A tar holding one link, then optionally files (for example written through the link)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
        info.linkname = target
        tar.addfile(info)
        for fname, data in (then or {}).items():
            finfo = tarfile.TarInfo(fname)
            finfo.size = len(data)
            tar.addfile(finfo, io.BytesIO(data))
    return buf.getvalue()


# ---- auth ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token-xyz"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
    ],
    ids=["none", "wrong", "basic-scheme", "no-scheme"],
)
async def test_wrong_or_missing_token_gets_401_and_changes_nothing(client, raw, workspace, headers):
    sb = await client.create(workspace)
    before = await client.list_sandboxes()
    snap = await sb.snapshot()
    sid = sb.sandbox_id
    attempts = [
        raw.get("/health", headers=headers),
        raw.get("/sandboxes", headers=headers),
        raw.post("/sandboxes", json={"snapshot_id": snap}, headers=headers),
        raw.post("/sandboxes/upload", content=tar_bytes({"x": b"1"}), headers=headers),
        raw.post(f"/sandboxes/{sid}/exec", json={"command": "touch pwned"}, headers=headers),
        raw.put(f"/sandboxes/{sid}/files", params={"path": "calc.py"}, content=b"pwned", headers=headers),
        raw.delete(f"/sandboxes/{sid}/files", params={"path": "pkg"}, headers=headers),
        raw.post(f"/sandboxes/{sid}/restore", json={"snapshot_id": snap}, headers=headers),
        raw.delete(f"/sandboxes/{sid}", headers=headers),
        raw.get("/no-such-route", headers=headers),
    ]
    for resp in await asyncio.gather(*attempts):
        assert resp.status_code == 401, resp.text
        assert resp.json()["code"] == "unauthorized"
        assert resp.headers["www-authenticate"] == "Bearer"
    after = await client.list_sandboxes()
    assert [s.sandbox_id for s in after] == [s.sandbox_id for s in before]
    assert (await sb.read_file("calc.py")).startswith(b"def add")
    assert (await sb.read_file("pkg/data.txt")) == b"hello\n"
    assert not (await sb.exec("test -e pwned")).ok


async def test_client_with_wrong_token_gets_a_typed_error(served):
    prov = RemoteSandboxProvider(served.url, "not-the-token")
    with pytest.raises(EnvServerUnauthorized, match="token"):
        await prov.health()
    await prov.close()


# ---- bad requests: a clear 4xx each, and the server stays healthy ---------------------------


async def test_unknown_sandbox_is_404(client, raw, workspace):
    sb = await client.create(workspace)
    for method, path in [
        ("GET", "/sandboxes/sb_nope"),
        ("POST", "/sandboxes/sb_nope/snapshot"),
        ("GET", "/sandboxes/sb_nope/files?path=calc.py"),
        ("DELETE", "/sandboxes/sb_nope"),
    ]:
        resp = await raw.request(method, path, headers=AUTH)
        assert resp.status_code == 404 and resp.json()["code"] == "sandbox_not_found", resp.text
        assert "sb_nope" in resp.json()["detail"]
    resp = await raw.post("/sandboxes/sb_nope/exec", json={"command": "true"}, headers=AUTH)
    assert resp.status_code == 404
    await assert_healthy(raw, sb)


async def test_a_missing_local_directory_is_named_as_such(client, tmp_path):
    with pytest.raises(SandboxError, match="not a local directory"):
        await client.create(str(tmp_path / "typo"))


async def test_unknown_snapshot_is_404(client, raw, workspace):
    sb = await client.create(workspace)
    for bad in ("snap_0000", "/etc", str(workspace)):
        resp = await raw.post("/sandboxes", json={"snapshot_id": bad}, headers=AUTH)
        assert resp.status_code == 404 and resp.json()["code"] == "snapshot_not_found"
        resp = await raw.post(f"/sandboxes/{sb.sandbox_id}/restore", json={"snapshot_id": bad}, headers=AUTH)
        assert resp.status_code == 404
    with pytest.raises(SandboxNotFound):
        await client.create("snap_0000")
    await assert_healthy(raw, sb)


@pytest.mark.parametrize("bad", ["../outside", "/etc/passwd", "a/../../x", "/home/dev/project/../etc"])
async def test_path_outside_workspace_is_400(client, raw, workspace, bad):
    sb = await client.create(workspace)
    for method in ("GET", "PUT", "DELETE"):
        resp = await raw.request(
            method, f"/sandboxes/{sb.sandbox_id}/files", params={"path": bad}, content=b"x", headers=AUTH
        )
        assert resp.status_code == 400 and resp.json()["code"] == "path_outside_workspace", resp.text
    resp = await raw.get(f"/sandboxes/{sb.sandbox_id}/list", params={"path": bad}, headers=AUTH)
    assert resp.status_code == 400
    resp = await raw.post(
        f"/sandboxes/{sb.sandbox_id}/exec", json={"command": "pwd", "cwd": bad}, headers=AUTH
    )
    assert resp.status_code == 400
    with pytest.raises(PathOutsideWorkspace):
        await sb.write_file(bad, "x")
    await assert_healthy(raw, sb)


async def test_missing_file_is_404_file_not_found(client, raw, workspace):
    sb = await client.create(workspace)
    resp = await raw.get(f"/sandboxes/{sb.sandbox_id}/files", params={"path": "nope.txt"}, headers=AUTH)
    assert resp.status_code == 404 and resp.json()["code"] == "file_not_found"
    assert str(workspace) not in resp.text  # names the workspace path, never the host's
    with pytest.raises(FileNotFoundError):
        await sb.read_file("nope.txt")
    with pytest.raises(IsADirectoryError):  # the same typed error a local sandbox raises
        await sb.read_file("pkg")
    await assert_healthy(raw, sb)


async def test_malformed_json_and_validation_are_422(client, raw, workspace):
    sb = await client.create(workspace)
    exec_url = f"/sandboxes/{sb.sandbox_id}/exec"
    json_headers = {**AUTH, "Content-Type": "application/json"}
    cases = [
        (exec_url, b"{not json"),
        (exec_url, b"[1, 2"),
        (exec_url, b'{"command": ""}'),
        (exec_url, b'{"command": "true", "timeout_s": -1}'),
        (exec_url, b'{"command": "true", "surprise": 1}'),
        (exec_url, b'{"command": 42}'),
        ("/sandboxes", b'{"directory": "proj", "snapshot_id": "snap_1"}'),
        ("/sandboxes", b"{}"),
        ("/sandboxes", b'{"directory": "proj", "limits": {"memory_mb": -5}}'),
        (f"/sandboxes/{sb.sandbox_id}/restore", b"{}"),
    ]
    for url, body in cases:
        resp = await raw.post(url, content=body, headers=json_headers)
        assert resp.status_code == 422, (body, resp.text)
        assert resp.json()["code"] == "validation" and resp.json()["detail"].startswith("invalid request")
    resp = await raw.post(exec_url, json={"command": "cat", "stdin_b64": "%%%"}, headers=AUTH)
    assert resp.status_code == 400 and "base64" in resp.json()["detail"]
    await assert_healthy(raw, sb)


async def test_oversized_bodies_are_413(client, raw, workspace, tmp_path):
    sb = await client.create(workspace)
    big = os.urandom(300 * 1024)  # over the 0.25 MB caps of this server
    resp = await raw.post("/sandboxes/upload", content=big, headers=AUTH)
    assert resp.status_code == 413 and resp.json()["code"] == "payload_too_large"

    async def chunked():  # no Content-Length: the cap must hold while streaming
        for i in range(0, len(big), 16 * 1024):
            yield big[i : i + 16 * 1024]

    resp = await raw.post("/sandboxes/upload", content=chunked(), headers=AUTH)
    assert resp.status_code == 413
    resp = await raw.put(
        f"/sandboxes/{sb.sandbox_id}/files", params={"path": "big"}, content=big, headers=AUTH
    )
    assert resp.status_code == 413
    with pytest.raises(SandboxLimitExceeded):
        await sb.write_file("big", big)
    assert not (await sb.exec("test -e big")).ok
    # A workspace the client packs over the server's cap is refused before sending.
    (tmp_path / "bigws").mkdir()
    (tmp_path / "bigws" / "blob").write_bytes(big)
    with pytest.raises(SandboxLimitExceeded, match="upload cap"):
        await client.create(tmp_path / "bigws")
    await assert_healthy(raw, sb)


async def test_bad_tarballs_are_refused(client, raw, workspace, tmp_path):
    sb = await client.create(workspace)
    count = len(await client.list_sandboxes())
    bomb = tar_bytes({"zeros": bytes(2 * 1024 * 1024)})  # compresses to a few KB, unpacks to 2 MB
    assert len(bomb) < 100_000
    resp = await raw.post("/sandboxes/upload", content=bomb, headers=AUTH)
    assert resp.status_code == 413, resp.text
    through_link = tar_link("evil", str(tmp_path), then={"evil/pwned.txt": b"x"})
    (tmp_path / "host_secret").write_text("secret")
    hardlink_out = tar_link("h", str(tmp_path / "host_secret"), hard=True)
    for body in (b"this is not a tarball", tar_bytes({"../escape.txt": b"x"}), through_link, hardlink_out):
        resp = await raw.post("/sandboxes/upload", content=body, headers=AUTH)
        assert resp.status_code == 400 and resp.json()["code"] == "bad_request", resp.text
    resp = await raw.post(
        "/sandboxes/upload", params={"limits": '{"memory_mb": "lots"}'}, content=b"", headers=AUTH
    )
    assert resp.status_code == 400 and "limits" in resp.json()["detail"]
    assert not (tmp_path / "pwned.txt").exists()
    assert len(await client.list_sandboxes()) == count
    # A symlink may point anywhere (as in a local workspace); it resolves in the sandbox's view.
    resp = await raw.post("/sandboxes/upload", content=tar_link("py", "/usr/bin/python3"), headers=AUTH)
    assert resp.status_code == 201, resp.text
    sid = resp.json()["sandbox_id"]
    resp = await raw.post(f"/sandboxes/{sid}/exec", json={"command": "readlink py"}, headers=AUTH)
    assert resp.json()["stdout"] == "/usr/bin/python3\n"
    assert set(resp.json()) == {  # ExecResult on the wire, less its output_order
        "exit_code", "stdout", "stderr", "duration_s", "timed_out", "stdout_truncated",
        "stderr_truncated", "limit_hit",
    }  # fmt: skip
    await raw.delete(f"/sandboxes/{sid}", headers=AUTH)
    # An absolute member name is tamed, not refused: it lands inside the workspace.
    resp = await raw.post("/sandboxes/upload", content=tar_bytes({"/abs.txt": b"inside"}), headers=AUTH)
    assert resp.status_code == 201
    sid = resp.json()["sandbox_id"]
    resp = await raw.get(f"/sandboxes/{sid}/files", params={"path": "abs.txt"}, headers=AUTH)
    assert resp.content == b"inside"
    await raw.delete(f"/sandboxes/{sid}", headers=AUTH)
    await assert_healthy(raw, sb)


async def test_upload_plain_tar_and_limits(client, raw):
    body = tar_bytes({"hello.txt": b"uploaded\n", "d/x.py": b"print(2)\n"}, gz=False)
    resp = await raw.post(
        "/sandboxes/upload", params={"limits": '{"output_bytes": 2048}'}, content=body, headers=AUTH
    )
    assert resp.status_code == 201, resp.text
    out = resp.json()
    assert out["limits"]["output_bytes"] == 2048
    sid = out["sandbox_id"]
    resp = await raw.post(f"/sandboxes/{sid}/exec", json={"command": ["python3", "d/x.py"]}, headers=AUTH)
    assert resp.json()["stdout"] == "2\n"
    resp = await raw.post(f"/sandboxes/{sid}/exec", json={"command": "cat hello.txt"}, headers=AUTH)
    assert resp.json()["stdout"] == "uploaded\n"
    assert (await raw.delete(f"/sandboxes/{sid}", headers=AUTH)).status_code == 204


async def test_directory_sources_stay_under_the_root(client, raw, root, workspace):
    sb = await client.create("server:proj")
    assert (await sb.exec("python3 main.py")).stdout == "hi from root\n"
    (root / "escape").symlink_to(workspace)
    for bad in ("../", "/etc", "escape"):
        resp = await raw.post("/sandboxes", json={"directory": bad}, headers=AUTH)
        assert resp.status_code == 400 and resp.json()["code"] == "path_outside_workspace", resp.text
    resp = await raw.post("/sandboxes", json={"directory": "missing"}, headers=AUTH)
    assert resp.status_code == 404 and resp.json()["code"] == "directory_not_found"
    await assert_healthy(raw, sb)


async def test_exec_stdin_env_and_timeouts_over_the_wire(client, workspace):
    sb = await client.create(workspace)
    r = await sb.exec(
        ["python3", "-c", "import sys,os; print(sys.stdin.buffer.read().hex(), os.environ['K'])"],
        stdin=b"\x00\xff",
        env={"K": "v"},
    )
    assert r.stdout == "00ff v\n"
    r = await sb.exec("sleep 20", timeout_s=0.5)
    assert r.timed_out
    data = bytes(range(256)) * 3
    await sb.write_file("bin/blob", data)
    assert await sb.read_file("/home/dev/project/bin/blob") == data


async def test_pool_over_the_remote_provider(client, workspace):
    async with SandboxPool(client, workspace, size=2) as pool:
        for _ in range(3):
            async with pool.acquire() as sb:
                assert (await sb.exec("cat pkg/data.txt")).stdout == "hello\n"
                await sb.write_file("pkg/data.txt", "dirty")


# ---- life cycle: limits, reaping, shutdown ----------------------------------------------------


async def test_too_many_sandboxes_is_429(workspace):
    s = Served(max_sandboxes=2)
    with s.server:
        prov = RemoteSandboxProvider(s.url, TOKEN)
        a = await prov.create(workspace)
        await prov.create(workspace)
        with pytest.raises(SandboxLimitExceeded, match="close some"):
            await prov.create(workspace)
        await a.close()
        await prov.create(workspace)  # room again
        await prov.close()


async def test_idle_sandboxes_are_reaped_but_busy_ones_are_not(workspace, kind):
    s = Served(kind, lease_s=0.5, reap_interval_s=0.1)
    with s.server:
        prov = RemoteSandboxProvider(s.url, TOKEN, heartbeat=False)  # a client that went silent
        idle = await prov.create(workspace)
        busy = await prov.create(workspace)
        r = await busy.exec("sleep 1.5; echo survived")  # longer than the TTL, but in use
        assert r.stdout == "survived\n"
        with pytest.raises(SandboxNotFound):
            await idle.exec("true")
        watcher = RemoteSandboxProvider(s.url, TOKEN)  # another client: prov's requests renew its lease
        for _ in range(100):  # bounded: the reaper runs every 0.1 s
            if not await watcher.list_sandboxes():
                break
            await asyncio.sleep(0.05)
        assert await watcher.list_sandboxes() == []
        assert s.providers[0]._sandboxes == {}
        await prov.close()
        await watcher.close()


async def test_shutdown_closes_every_sandbox_and_kills_its_processes(workspace, kind):
    s = Served(kind)
    with s.server:
        prov = RemoteSandboxProvider(s.url, TOKEN)
        sb = await prov.create(workspace)
        await prov.create(workspace)
        await sb.snapshot()
        if kind != "process":  # bwrap: a pid namespace per exec already ends everything in it
            await prov._http.aclose()
            pid = None
        else:
            pid = int((await sb.exec(ESCAPE_AND_REPORT_PID)).stdout)
            assert _alive(pid)
            await prov._http.aclose()  # a client that vanishes without closing anything
    backend = s.providers[0]
    assert backend._sandboxes == {} and not backend.root.exists()
    if pid is None:
        return
    for _ in range(100):
        if not _alive(pid):
            break
        await asyncio.sleep(0.05)
    assert not _alive(pid), "a process of a closed sandbox survived the server's shutdown"


async def test_connection_errors_are_retried_only_for_idempotent_calls(workspace):
    """A proxy on loopback that drops the first connection it gets, then forwards faithfully."""
    s = Served()
    drops = {"left": 0}

    async def pipe(reader, writer):
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    async def handle(reader, writer):
        if drops["left"] > 0:
            drops["left"] -= 1
            writer.transport.abort()
            return
        up_r, up_w = await asyncio.open_connection("127.0.0.1", s.server.port)
        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer), return_exceptions=True)

    proxy = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    with s.server:
        prov = RemoteSandboxProvider(f"http://127.0.0.1:{port}", TOKEN)
        sb = await prov.create(workspace)
        # Fresh connections each time, so the proxy's drop hits the request we aim it at.
        await prov._http.client.aclose()
        prov._http.client = httpx.AsyncClient(
            base_url=prov._http.client.base_url,
            headers=prov._http.client.headers,
            limits=httpx.Limits(max_keepalive_connections=0),
        )
        drops["left"] = 1
        assert await sb.read_file("pkg/data.txt") == b"hello\n"  # retried
        drops["left"] = 1
        with pytest.raises(SandboxError, match="cannot reach"):
            await sb.exec("echo once >> log.txt")  # not retried: it could run twice
        assert not (await sb.exec("test -e log.txt")).ok
        await prov.close()
    proxy.close()
    await proxy.wait_closed()


async def test_a_client_that_exits_without_closing_still_closes_its_sandboxes(served, client, workspace):
    script = (
        "import asyncio, sys\n"
        "from inhabit.sandbox.remote import RemoteSandboxProvider\n"
        "async def main():\n"
        f"    p = RemoteSandboxProvider({served.url!r}, {TOKEN!r})\n"
        "    sb = await p.create(sys.argv[1])\n"
        "    print(sb.sandbox_id, flush=True)\n"
        "asyncio.run(main())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, str(workspace), stdout=asyncio.subprocess.PIPE, env=env
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0
    sid = out.decode().strip()
    assert sid.startswith("sb_")
    assert sid not in {s.sandbox_id for s in await client.list_sandboxes()}


async def test_create_provider_builds_a_remote_provider(served, workspace, monkeypatch):
    from inhabit.sandbox import SandboxConfig, create_provider

    monkeypatch.setenv("INHABIT_ENV_TOKEN", TOKEN)
    prov = create_provider(SandboxConfig(backend="remote", remote_url=served.url))
    assert isinstance(prov, RemoteSandboxProvider)
    async with await prov.create(workspace) as sb:
        assert (await sb.exec("cat pkg/data.txt")).stdout == "hello\n"
    await prov.close()


async def test_exec_http_timeout_follows_the_exec_timeout_not_the_client_default(served, workspace):
    # The client's general timeout (0.5 s) would cut a 1.5 s command; exec's own is timeout_s + margin.
    prov = RemoteSandboxProvider(served.url, TOKEN, timeout_s=0.5)
    try:
        sb = await prov.create(workspace)
        r = await sb.exec("sleep 1.5; echo done", timeout_s=10)
        assert r.ok and r.stdout == "done\n"
    finally:
        await prov.close()


async def test_many_long_requests_do_not_starve_other_calls(served, workspace):
    # 101 slow uploads hold 101 connections of the provider's client for ~5 s (cheaply: the
    # server just waits for their bodies). With httpx's default cap of 100 connections the read
    # below would queue behind them past its 3 s timeout; uncapped, it gets its own connection.
    prov = RemoteSandboxProvider(served.url, TOKEN, timeout_s=3)
    release = asyncio.Event()

    async def slow_body():
        yield b"x"
        await asyncio.wait_for(release.wait(), 10)
        yield b"y"

    hogs = []
    try:
        sb = await prov.create(workspace)
        http = prov._http.client
        hogs = [
            asyncio.create_task(http.post("/sandboxes/upload", content=slow_body(), timeout=20))
            for _ in range(101)
        ]
        await asyncio.sleep(1)
        assert await sb.read_file("pkg/data.txt") == b"hello\n"
    finally:
        release.set()
        for r in await asyncio.gather(*hogs, return_exceptions=True):
            assert isinstance(r, httpx.Response) and r.status_code == 400  # "xy" is no tarball
        await prov.close()
