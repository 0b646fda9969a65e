"""A remote sandbox of a task with an [environment]: the env server builds the environment in its
own store from the lock the client sends (never its files), mounts it, and the task checks there
as it does locally."""

from __future__ import annotations

from inhabit.envs.store import EnvStore
from inhabit.sandbox.remote import RemoteSandboxProvider
from inhabit.sandbox.server import BackgroundServer, EnvServerConfig, make_provider_factory
from inhabit.tasks.check import check_task
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
