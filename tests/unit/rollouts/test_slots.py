"""`Slots`: the rollout runner's admission, where a group takes its G slots at once."""

from __future__ import annotations

import asyncio

import pytest

from inhabit.rollouts import Slots


def test_a_group_waits_for_all_its_slots_and_comes_before_later_singles():
    async def main() -> list[str]:
        slots = Slots(4)
        order: list[str] = []
        await slots.acquire(3)  # three episodes running
        group = asyncio.create_task(slots.acquire(4))
        await asyncio.sleep(0)
        single = asyncio.create_task(slots.acquire(1))  # one slot is free, but the group is first
        group.add_done_callback(lambda _: order.append("group"))
        single.add_done_callback(lambda _: order.append("single"))
        await asyncio.sleep(0.01)
        assert order == [] and slots.free == 1
        slots.release(3)  # the three episodes end: the group starts, the single still waits
        await asyncio.sleep(0.01)
        assert order == ["group"] and slots.free == 0
        slots.release(4)
        await asyncio.sleep(0.01)
        assert order == ["group", "single"] and slots.free == 3
        return order

    asyncio.run(main())


def test_a_cancelled_waiter_neither_keeps_slots_nor_blocks_the_queue():
    async def main() -> None:
        slots = Slots(2)
        await slots.acquire(2)
        big = asyncio.create_task(slots.acquire(2))
        await asyncio.sleep(0)
        small = asyncio.create_task(slots.acquire(1))
        await asyncio.sleep(0)
        slots.release(1)  # one free: not enough for `big`, which blocks `small` behind it
        await asyncio.sleep(0.01)
        assert not small.done()
        big.cancel()
        await asyncio.sleep(0.01)
        assert small.done() and slots.free == 0
        slots.release(2)
        assert slots.free == 2

    asyncio.run(main())


def test_a_release_between_cancel_and_wake_up_is_only_a_cancellation():
    """cancel() marks the waiter's future at once, but its handler runs a loop turn later; a
    release in between lets _grant drop that future first. It used to raise ValueError."""

    async def main() -> None:
        slots = Slots(2)
        await slots.acquire(2)
        waiter = asyncio.create_task(slots.acquire(1))
        await asyncio.sleep(0)
        waiter.cancel()
        slots.release(2)
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert slots.free == 2 and not slots._waiters

    asyncio.run(main())


def test_more_than_the_capacity_is_an_error():
    with pytest.raises(ValueError, match="cannot take 5 of 4"):
        asyncio.run(Slots(4).acquire(5))
