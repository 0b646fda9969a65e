"""A remote sandbox of a task with an [environment]: the env server builds the environment in its
own store from the lock the client sends (never its files), mounts it, and the task checks there
as it does locally; or, for a server without a registry, from a wheelhouse the client uploads
(kept content-addressed, wheel files only, capped)."""

from __future__ import annotations

import hashlib
import io
import tarfile

import httpx

from env_fixtures import write_sdist
from inhabit.envs.lock import env_id, own_python
from inhabit.envs.store import EnvStore
from inhabit.envs.task_env import task_environment
from inhabit.grading.check import check_task
from inhabit.sandbox.remote import RemoteSandboxProvider
from inhabit.sandbox.server import BackgroundServer, EnvServerConfig, make_provider_factory
from inhabit.tasks.task import load_task

TOKEN = "env-test-token"


async def test_the_env_server_builds_the_environment_from_the_lock(dep_task, tmp_path):
    task = load_task(dep_task())
    server_store = EnvStore(tmp_path / "server-store")  # the server's machine: nothing built there
    config = EnvServerConfig(token=TOKEN, backend="process", env_store=server_store.root)
    with BackgroundServer(make_provider_factory("process"), token=TOKEN, config=config) as srv:
        client = RemoteSandboxProvider(srv.url, TOKEN)
        try:
            report = await check_task(task.root, client)
            assert report.valid, report.problem_lines()
            assert server_store.get(task.environment.id) is not None  # built there, from the lock
            local = EnvStore().get(task.environment.id)  # the client's own copy: only its lock travels
            async with await client.create(task.workspace_dir, env=local) as sb:
                res = await sb.exec("python -c 'import tinydep, sys; print(sys.prefix)'")
                assert res.stdout.strip() == str(server_store.path(task.environment.id)), res
        finally:
            await client.close()


async def test_an_uploaded_wheelhouse_builds_the_environment_on_a_server_without_one(
    dep_task, wheelhouse, tmp_path, monkeypatch
):
    task = load_task(dep_task())
    local = await task_environment(task)  # the client's own build, from its wheelhouse
    monkeypatch.delenv("INHABIT_WHEELHOUSE")  # the server (this process) has none of its own
    server_store = EnvStore(tmp_path / "server-store")
    kept = tmp_path / "server-wheelhouses"
    config = EnvServerConfig(token=TOKEN, backend="process", env_store=server_store.root, wheelhouses=kept)
    with BackgroundServer(make_provider_factory("process"), token=TOKEN, config=config) as srv:
        client = RemoteSandboxProvider(srv.url, TOKEN, wheelhouse=wheelhouse)
        try:
            async with await client.create(task.workspace_dir, env=local.path) as sb:
                res = await sb.exec("python -c 'import tinydep; print(tinydep.double(21))'")
                assert res.stdout.strip() == "42", res
            assert server_store.get(task.environment.id) is not None
            [stored] = [p for p in kept.iterdir() if not p.name.startswith(".")]
            assert [p.name for p in stored.iterdir()] == ["tinydep-1.0-py3-none-any.whl"]
            assert await client.upload_wheelhouse(wheelhouse) == f"sha256:{stored.name}"  # stored once
        finally:
            await client.close()


def _tar(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            else:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if kind == "file" else None)
    return buf.getvalue()


def test_a_wheelhouse_upload_keeps_only_wheel_files_within_the_cap(wheelhouse, tmp_path):
    wheel = (wheelhouse / "tinydep-1.0-py3-none-any.whl").read_bytes()
    kept = tmp_path / "kept"
    config = EnvServerConfig(token=TOKEN, backend="process", wheelhouses=kept, max_wheelhouse_mb=0.05)
    with BackgroundServer(make_provider_factory("process"), token=TOKEN, config=config) as srv:
        auth = {"Authorization": f"Bearer {TOKEN}"}

        def post(body):
            r = httpx.post(f"{srv.url}/v1/wheelhouses", content=body, headers=auth, timeout=30)
            return r.status_code, r.json()

        code, out = post(_tar([("wheels/tinydep-1.0-py3-none-any.whl", wheel, "file")]))
        assert code == 201 and out["wheels"] == ["tinydep-1.0-py3-none-any.whl"]  # no folder kept
        assert (kept / out["id"].split(":")[1] / "tinydep-1.0-py3-none-any.whl").read_bytes() == wheel
        for members, why in [
            ([("../../x-1.0-py3-none-any.whl/../setup.py", b"x", "file")], "not a wheel file"),
            ([("x-1.0-py3-none-any.whl", b"", "symlink")], "not a wheel file"),
            ([("x-1.0-py3-none-any.whl", b"not a zip", "file")], "not a zip archive"),
            ([], "holds no .whl file"),
        ]:
            code, out = post(_tar(members))
            assert code == 400 and why in out["detail"], out
        assert post(b"\0" * 60_000)[0] == 413  # past the cap while it streams in
        assert [p.name for p in kept.iterdir()] == [p.name for p in kept.iterdir() if len(p.name) == 64]
        body = {"id": "sha256:" + "0" * 64, "python": "3.11", "lock": "", "wheelhouse": "sha256:" + "1" * 64}
        r = httpx.post(f"{srv.url}/v1/environments", json=body, headers=auth, timeout=30)
        assert r.status_code == 404 and "POST the wheels to /wheelhouses first" in r.json()["detail"]


def test_the_env_server_builds_a_clients_lock_from_wheels_only(tmp_path, env_cache, monkeypatch):
    # A client's lock pinning a package that exists only as an sdist must not run that sdist's
    # build code on the server's host unless the operator allowed it (--allow-build).
    mark = tmp_path / "build-ran"
    sdist = write_sdist(tmp_path / "sdists", mark)
    monkeypatch.setenv("INHABIT_WHEELHOUSE", str(sdist.parent))
    lock = f"sdonly==1.0 \\\n    --hash=sha256:{hashlib.sha256(sdist.read_bytes()).hexdigest()}\n"
    body = {"id": env_id(own_python(), lock.encode()), "python": own_python(), "lock": lock}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for allow_build, status in ((False, 400), (True, 200)):
        config = EnvServerConfig(
            token=TOKEN, backend="process", env_store=tmp_path / "store", allow_build=allow_build
        )
        with BackgroundServer(make_provider_factory("process"), token=TOKEN, config=config) as srv:
            r = httpx.post(f"{srv.url}/v1/environments", json=body, headers=auth, timeout=120)
        assert r.status_code == status, r.text
        assert mark.exists() == allow_build
        if not allow_build:
            assert r.json()["detail"].startswith("sdonly (required by requirements.lock) has no wheel")
