"""SandboxPool over a real backend: warm hand-out, no dirty reuse, bounded creation, cleanup."""

from __future__ import annotations

import asyncio

import pytest

from conftest import make_provider, small_limits
from inhabit.errors import SandboxError, SandboxNotFound
from inhabit.sandbox.pool import SandboxPool
from inhabit.sandbox.process import ProcessSandboxProvider


class CountingProvider(ProcessSandboxProvider):
    """The real process backend, recording how many creations overlap (and slowing them a bit)."""

    def __init__(self, delay_s: float = 0.0, **kw):
        super().__init__(**kw)
        self.delay_s = delay_s
        self.in_flight = 0
        self.max_in_flight = 0
        self.calls = 0

    async def create(self, source, *, limits=None):
        self.calls += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s)
            return await super().create(source, limits=limits)
        finally:
            self.in_flight -= 1


async def wait_until(predicate, timeout_s: float = 10.0) -> None:
    """Poll a condition with a bounded wait (background refill is asynchronous)."""
    for _ in range(int(timeout_s / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in time")


@pytest.fixture
async def prov():
    p = CountingProvider(limits=small_limits())
    yield p
    await p.close()


async def test_warm_sandboxes_are_handed_out_and_refilled(prov, workspace):
    async with SandboxPool(prov, workspace, size=3) as pool:
        await wait_until(lambda: pool.idle_count == 3)
        async with pool.acquire() as sb:
            assert (await sb.exec("cat pkg/data.txt")).stdout == "hello\n"
            assert pool.leased_count == 1
        assert pool.stats.hits == 1 and pool.stats.misses == 0
        await wait_until(lambda: pool.idle_count == 3)
        summary = pool.stats.summary()
        assert summary["created"] >= 4 and summary["create_p50_ms"] > 0
    assert pool.idle_count == 0 and prov._sandboxes == {}


async def test_returned_sandbox_is_closed_never_reused_dirty(prov, workspace):
    async with SandboxPool(prov, workspace, size=1) as pool:
        async with pool.acquire() as first:
            await first.write_file("calc.py", "dirty\n")
        with pytest.raises(SandboxNotFound):
            await first.exec("true")
        for _ in range(3):
            async with pool.acquire() as sb:
                assert sb is not first
                assert (await sb.read_file("calc.py")).startswith(b"def add")
                await sb.write_file("calc.py", "dirty again\n")


async def test_recycle_restores_to_the_source(prov, workspace):
    async with SandboxPool(prov, workspace, size=1, recycle=True) as pool:
        await wait_until(lambda: pool.idle_count == 1)
        async with pool.acquire() as sb:
            await sb.write_file("calc.py", "dirty\n")
            await sb.exec("touch junk && rm pkg/data.txt")
        assert pool.stats.recycled == 1
        async with pool.acquire() as again:
            assert again is sb  # the same sandbox, restored
            assert (await again.read_file("calc.py")).startswith(b"def add")
            assert not (await again.exec("test -e junk")).ok
            assert (await again.exec("cat pkg/data.txt")).stdout == "hello\n"


async def test_pool_from_a_snapshot_id(prov, workspace):
    seed = await prov.create(workspace)
    await seed.write_file("calc.py", "from snapshot\n")
    snap = await seed.snapshot()
    await seed.close()
    async with SandboxPool(prov, snap, size=2) as pool, pool.acquire() as sb:
        assert await sb.read_file("calc.py") == b"from snapshot\n"


async def test_creation_concurrency_is_bounded(workspace):
    prov = CountingProvider(delay_s=0.05, limits=small_limits())
    try:
        async with SandboxPool(prov, workspace, size=6, max_concurrent_creates=2) as pool:

            async def use() -> None:
                async with pool.acquire() as sb:
                    assert (await sb.exec("true")).ok

            await asyncio.gather(*(use() for _ in range(8)))
            await wait_until(lambda: pool.idle_count == 6)
        assert prov.max_in_flight <= 2
        assert pool.stats.hits + pool.stats.misses == 8
    finally:
        await prov.close()
    assert prov._sandboxes == {}


async def test_close_closes_idle_and_leased(prov, workspace):
    pool = await SandboxPool(prov, workspace, size=2).start()
    await wait_until(lambda: pool.idle_count == 2)
    async with pool.acquire() as sb:
        await pool.close()
        with pytest.raises(SandboxNotFound):
            await sb.exec("true")
    assert prov._sandboxes == {}
    with pytest.raises(SandboxError, match="closed"):
        async with pool.acquire():
            pass


async def test_cancelled_borrowers_leak_nothing(workspace):
    prov = CountingProvider(delay_s=0.2, limits=small_limits())
    try:
        async with SandboxPool(prov, workspace, size=0) as pool:

            async def borrow(hold_s: float) -> None:
                async with pool.acquire():
                    await asyncio.sleep(hold_s)

            holding = asyncio.create_task(borrow(60))  # cancelled while holding one
            await wait_until(lambda: pool.leased_count == 1)
            waiting = asyncio.create_task(borrow(0))  # cancelled while its sandbox is being made
            await wait_until(lambda: prov.in_flight == 1)
            waiting.cancel()
            holding.cancel()
            results = await asyncio.gather(waiting, holding, return_exceptions=True)
            assert all(isinstance(r, asyncio.CancelledError) for r in results)
            await wait_until(lambda: prov.in_flight == 0)
            await wait_until(lambda: prov._sandboxes == {})
        assert pool.leased_count == 0
    finally:
        await prov.close()


async def test_a_broken_source_fails_acquire_without_spinning(prov, tmp_path):
    async with SandboxPool(prov, "snap-missing", size=2) as pool:
        with pytest.raises(SandboxError):
            async with pool.acquire():
                pass
        await asyncio.sleep(0.3)
        # Background retries back off: a handful of attempts, not thousands.
        assert 1 <= pool.stats.create_failures < 20


@pytest.mark.parametrize("kind", ["process", "bwrap"])
async def test_pool_on_each_backend_hands_out_clean_sandboxes(workspace, kind):
    if kind != "process":
        pytest.importorskip("inhabit.sandbox.bwrap")
    prov = make_provider(kind)
    try:
        for recycle in (False, True):
            async with SandboxPool(prov, workspace, size=2, recycle=recycle) as pool:
                for _ in range(4):
                    async with pool.acquire() as sb:
                        assert (await sb.exec("cat pkg/data.txt && test ! -e junk")).stdout == "hello\n"
                        await sb.exec("touch junk && rm pkg/data.txt")
                if recycle:
                    assert pool.stats.recycled >= 1
        assert prov._sandboxes == {}
    finally:
        await prov.close()


async def test_cancelling_the_pool_owner_closes_everything(workspace):
    prov = CountingProvider(delay_s=0.05, limits=small_limits())
    started = asyncio.Event()

    async def owner() -> None:
        async with SandboxPool(prov, workspace, size=4, max_concurrent_creates=2) as pool, pool.acquire():
            started.set()
            await asyncio.sleep(60)

    task = asyncio.create_task(owner())
    try:
        await asyncio.wait_for(started.wait(), 10)
        await asyncio.sleep(0.06)  # let the refill be mid-creation
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_until(lambda: prov.in_flight == 0)
        assert prov._sandboxes == {}
    finally:
        await prov.close()


async def test_a_pool_used_without_start_refills_on_first_use(prov, workspace):
    pool = SandboxPool(prov, workspace, size=2)
    try:
        async with pool.acquire() as sb:
            assert (await sb.exec("true")).ok
        await wait_until(lambda: pool.idle_count == 2)
    finally:
        await pool.close()
    assert prov._sandboxes == {}


async def test_closing_the_pool_fails_waiting_borrowers_cleanly(workspace):
    prov = CountingProvider(delay_s=0.3, limits=small_limits())
    try:
        pool = await SandboxPool(prov, workspace, size=0).start()

        async def borrow() -> None:
            async with pool.acquire():
                pass

        waiting = asyncio.create_task(borrow())
        await wait_until(lambda: prov.in_flight == 1)
        await pool.close()
        with pytest.raises(SandboxError, match="closed"):
            await waiting
        await wait_until(lambda: prov.in_flight == 0)
        assert prov._sandboxes == {}
    finally:
        await prov.close()


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
async def test_random_borrowing_and_cancelling_leaks_nothing(workspace, seed):
    import random

    rng = random.Random(seed)
    prov = CountingProvider(delay_s=0.01, limits=small_limits())
    try:
        pool = SandboxPool(prov, workspace, size=3, max_concurrent_creates=2, recycle=seed % 2 == 1)

        async def borrow(hold_s: float) -> None:
            async with pool.acquire() as sb:
                with pytest.raises(FileNotFoundError):  # never handed out dirty
                    await sb.read_file("mark.txt")
                await sb.write_file("mark.txt", "dirty")
                await asyncio.sleep(hold_s)

        tasks = [asyncio.create_task(borrow(rng.uniform(0, 0.05))) for _ in range(40)]
        for _ in range(15):
            await asyncio.sleep(rng.uniform(0, 0.03))
            rng.choice(tasks).cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await pool.close()  # refills may still be in flight
        await wait_until(lambda: prov.in_flight == 0)
        assert prov._sandboxes == {}
        assert pool.stats.hits + pool.stats.misses <= 40
    finally:
        await prov.close()
