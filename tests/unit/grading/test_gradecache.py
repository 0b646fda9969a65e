"""The grade cache on a real task and real sandboxes: the same final files are graded once, and no
cheat shares a key with an honest fix (each cheat is graded afresh and earns 0 with its flag)."""

from __future__ import annotations

import asyncio
import py_compile
import sys

import pytest

from inhabit.grading.gradecache import GradeCache, workspace_digest
from inhabit.grading.grader import GradingConfig
from inhabit.sandbox import SandboxConfig, SandboxLimits, create_provider
from inhabit.tasks.build import CALC_BUGGY, CALC_FIXED


@pytest.fixture
async def isolated():
    """A bwrap provider: the cache keeps gradings of isolated sandboxes only."""
    limits = SandboxLimits(memory_mb=2048, default_timeout_s=60.0, output_bytes=256 * 1024)
    provider = create_provider(SandboxConfig(backend="bwrap", limits=limits))
    yield provider
    await provider.close()


async def _cached_grade(cache, task, provider, files=None, config=None):
    async with await provider.create(task.workspace_dir) as sandbox:
        for path, content in (files or {}).items():
            await sandbox.write_file(path, content)
        return await cache.grade(task, sandbox, provider, config=config)


async def test_the_same_fix_is_graded_once_and_other_files_afresh(calc_task, isolated):
    cache = GradeCache()
    first, cached = await _cached_grade(cache, calc_task, isolated, {"calc.py": CALC_FIXED})
    assert first.reward == 1.0 and not cached
    again, cached = await _cached_grade(cache, calc_task, isolated, {"calc.py": CALC_FIXED})
    assert cached and again.reward == 1.0 and again.outcomes == first.outcomes
    # one byte more is other files: graded afresh
    other, cached = await _cached_grade(cache, calc_task, isolated, {"calc.py": CALC_FIXED + "\n"})
    assert not cached and other.reward == 1.0
    unfixed, cached = await _cached_grade(cache, calc_task, isolated)
    assert not cached and unfixed.reward == 0.0
    # other grading settings are another key
    _, cached = await _cached_grade(
        cache, calc_task, isolated, {"calc.py": CALC_FIXED}, config=GradingConfig(canaries=False)
    )
    assert not cached
    assert cache.stats() == {"hits": 1, "misses": 4, "uncached": 0}


async def test_rollouts_ending_together_share_one_grading(calc_task, isolated):
    cache = GradeCache()
    results = await asyncio.gather(
        *(_cached_grade(cache, calc_task, isolated, {"calc.py": CALC_FIXED}) for _ in range(3))
    )
    assert [r.reward for r, _ in results] == [1.0] * 3
    assert sorted(cached for _, cached in results) == [False, True, True]
    assert cache.stats()["misses"] == 1


async def test_a_cheat_beside_a_cached_fix_is_graded_afresh(calc_task, isolated):
    cache = GradeCache()
    honest, _ = await _cached_grade(cache, calc_task, isolated, {"calc.py": CALC_FIXED})
    assert honest.reward == 1.0
    # the test file rewritten to pass: other files, so grading runs and restores the test
    cheat, cached = await _cached_grade(
        cache, calc_task, isolated, {"tests/test_calc.py": "def test_add():\n    pass\n"}
    )
    assert not cached and cheat.reward == 0.0 and cheat.flags


async def test_bytecode_counts_by_its_header_and_planted_bytecode_is_graded_afresh(
    make_task, isolated, tmp_path
):
    """A timestamp .pyc differs between two runs of the same code (its mtime field) and grading
    drops it: the same key. An unchecked-hash .pyc (grading flags it) is another key."""
    helpers = "def check_add(f):\n    assert f(2, 3) == 5\n"
    test = "from helpers import check_add\nfrom calc import add\n\ndef test_add():\n    check_add(add)\n"
    task = make_task(
        workspace={"calc.py": CALC_BUGGY, "tests/helpers.py": helpers, "tests/test_calc.py": test},
        fail_to_pass=["tests/test_calc.py::test_add"],
    )
    tag = sys.implementation.cache_tag
    pyc_path = f"tests/__pycache__/helpers.{tag}.pyc"

    def compiled(source: str, mode: py_compile.PycInvalidationMode, name: str) -> bytes:
        src = tmp_path / f"{name}.py"
        src.write_text(source)
        py_compile.compile(str(src), str(tmp_path / f"{name}.pyc"), invalidation_mode=mode)
        return (tmp_path / f"{name}.pyc").read_bytes()

    stamp_a = compiled(helpers, py_compile.PycInvalidationMode.TIMESTAMP, "a")
    stamp_b = bytearray(stamp_a)
    stamp_b[8:12] = (int.from_bytes(stamp_a[8:12], "little") + 7).to_bytes(4, "little")  # another mtime
    forged = compiled("def check_add(f):\n    pass\n", py_compile.PycInvalidationMode.UNCHECKED_HASH, "f")

    digests = []
    for pyc in (stamp_a, bytes(stamp_b), forged):
        async with await isolated.create(task.workspace_dir) as sandbox:
            await sandbox.write_file(pyc_path, pyc)
            digests.append(await workspace_digest(sandbox))
    assert digests[0] == digests[1] != digests[2]

    cache = GradeCache()
    fixed = {"calc.py": CALC_FIXED, pyc_path: stamp_a}
    honest, _ = await _cached_grade(cache, task, isolated, fixed)
    assert honest.reward == 1.0
    planted, cached = await _cached_grade(cache, task, isolated, {pyc_path: forged})
    assert not cached and planted.reward == 0.0 and "bytecode_planted" in planted.flags


async def test_a_workspace_with_a_symlink_is_graded_without_the_cache(calc_task, isolated):
    cache = GradeCache()
    for _ in range(2):
        async with await isolated.create(calc_task.workspace_dir) as sandbox:
            await sandbox.write_file("calc.py", CALC_FIXED)
            link = await sandbox.exec("ln -s calc.py alias.py")
            assert link.exit_code == 0, link.stderr
            assert await workspace_digest(sandbox) is None
            result, cached = await cache.grade(calc_task, sandbox, isolated)
            assert result.reward == 1.0 and not cached
    assert cache.stats() == {"hits": 0, "misses": 0, "uncached": 2}


async def test_no_command_outlives_its_exec_so_the_digested_files_are_the_graded_ones(calc_task, isolated):
    """The key's files must be the ones grading snapshots: a detached child that would rewrite the
    workspace after the digest dies with its exec in an isolated sandbox."""
    async with await isolated.create(calc_task.workspace_dir) as sandbox:
        assert sandbox.info.isolated
        started = await sandbox.exec("setsid sh -c 'sleep 0.5; echo late > late.txt' >/dev/null 2>&1 &")
        assert started.exit_code == 0
        before = await workspace_digest(sandbox)
        await asyncio.sleep(1.5)
        assert "late.txt" not in {e.path for e in await sandbox.list_files(".")}
        assert await workspace_digest(sandbox) == before


async def test_a_sandbox_without_isolation_is_graded_without_the_cache(calc_task):
    """The process backend lets a setsid child live on past its exec (its docstring): its files
    could change between the digest and grading's snapshot, so it gives no digest."""
    provider = create_provider(SandboxConfig(backend="process"))
    cache = GradeCache()
    try:
        for _ in range(2):
            result, cached = await _cached_grade(cache, calc_task, provider, {"calc.py": CALC_FIXED})
            assert result.reward == 1.0 and not cached
    finally:
        await provider.close()
    assert cache.stats() == {"hits": 0, "misses": 0, "uncached": 2}


async def test_an_env_servers_sandbox_is_graded_without_the_cache(calc_task):
    """Isolated, but every file read would be a request to the server: no digest."""
    from inhabit.sandbox.remote import RemoteSandboxProvider
    from inhabit.sandbox.server import BackgroundServer, EnvServerConfig

    token = "gradecache-test-token-1"
    config = EnvServerConfig(token=token, backend="bwrap")
    with BackgroundServer(
        lambda: create_provider(SandboxConfig(backend="bwrap")), token=token, config=config
    ) as srv:
        provider = RemoteSandboxProvider(srv.url, token)
        try:
            async with await provider.create(calc_task.workspace_dir) as sandbox:
                assert sandbox.info.isolated
                assert await workspace_digest(sandbox) is None
        finally:
            await provider.close()


async def test_the_digest_sees_what_a_listing_does_not(calc_task, isolated):
    """Raw names (a path the file API would strip), permission bits: other digests; a fifo or a hard
    link, which a digest could miss: no digest at all."""

    async def digest_after(command: str | None) -> str | None:
        async with await isolated.create(calc_task.workspace_dir) as sandbox:
            if command:
                ran = await sandbox.exec(command)
                assert ran.exit_code == 0, ran.stderr
            return await workspace_digest(sandbox)

    plain = await digest_after("mkdir -p d && echo x > d/f")
    assert plain is not None and plain == await digest_after("mkdir -p d && echo x > d/f")
    assert await digest_after("mkdir -p ' d' && echo x > ' d/f'") != plain
    assert await digest_after("mkdir -p d && echo x > d/f && chmod +x d/f") != plain
    assert await digest_after("mkfifo pipe") is None
    assert await digest_after("echo x > a && ln a b") is None
