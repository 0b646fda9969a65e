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
