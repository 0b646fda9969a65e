"""`Fleet` dispatch: least outstanding work, avoidance of a member that just failed, waiting."""

from __future__ import annotations

import asyncio

import pytest

from inhabit.placement.fleet import Fleet, NoLiveActor


def fleet(n: int, live: bool = True, wait_s: float = 5.0) -> Fleet:
    async def activate(m):  # never called in these tests: members are set live by hand
        raise AssertionError

    f = Fleet("thing", [object() for _ in range(n)], activate, lambda i: object(), wait_s=wait_s)
    for m in f.members:
        m.live = live
    return f


def test_least_outstanding_work_spreads_and_follows_releases():
    async def go():
        f = fleet(3)
        got = [await f.acquire() for _ in range(6)]
        assert [m.outstanding for m in f.members] == [2, 2, 2]
        assert sorted(m.index for m in got) == [0, 0, 1, 1, 2, 2]
        for m in got:
            if m.index == 1:
                f.release(m)
        assert (await f.acquire()).index == 1  # the idle one gets the next rollout

    asyncio.run(go())


def test_dead_members_are_skipped_and_avoid_is_a_preference():
    async def go():
        f = fleet(2)
        f.members[0].live = False
        assert {(await f.acquire()).index for _ in range(3)} == {1}
        f.members[0].live = True
        assert (await f.acquire(avoid={0})).index == 1  # avoided although it is busier
        f.members[1].live = False
        assert (await f.acquire(avoid={0})).index == 0  # the only live one, avoided or not

    asyncio.run(go())


def test_acquire_waits_for_a_member_and_times_out_with_a_clear_error():
    async def go():
        f = fleet(1, live=False, wait_s=0.2)
        with pytest.raises(NoLiveActor, match="no live thing"):
            await f.acquire()
        f.wait_s = 5.0
        waiter = asyncio.create_task(f.acquire())
        await asyncio.sleep(0.05)
        assert not waiter.done()
        async with f._changed:
            f.members[0].live = True
            f._changed.notify_all()
        assert (await asyncio.wait_for(waiter, 2)).index == 0

    asyncio.run(go())


def test_pick_matches_a_scan_of_every_member_over_random_operations():
    """The heap (O(log n) per pick) picks what a scan of every member would, through acquires,
    releases, deaths, revivals and avoid sets."""
    import random

    def scan(f: Fleet, avoid: set[int]):
        live = [m for m in f.members if m.live]
        fresh = [m for m in live if m.index not in avoid] or live
        return min(fresh, key=lambda m: (m.outstanding, m.served, m.index)) if fresh else None

    async def go():
        rng = random.Random(5)
        f = fleet(12)
        held = []
        for _ in range(3000):
            op = rng.random()
            avoid = set(rng.sample(range(12), rng.randint(0, 3)))
            if op < 0.5 and f.any_live():
                want = scan(f, avoid)
                got = await f.acquire(avoid)
                assert got is want
                held.append(got)
            elif op < 0.85 and held:
                f.release(held.pop(rng.randrange(len(held))))
            elif op < 0.93:
                f.members[rng.randrange(12)].live = False
            else:
                f.members[rng.randrange(12)].live = True
            assert f.pick(avoid) is scan(f, avoid)
        assert len(f._heap) <= 4 * 12 + 64 + 2  # stale entries are dropped as they pile up

    asyncio.run(go())
