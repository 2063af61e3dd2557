"""gpu_sizer.controller.kopf_fixes: kopf's index pre-population wakes each waiter once."""

from __future__ import annotations

import asyncio
from unittest import mock

from kopf._cogs.aiokits import aiotoggles

from gpu_sizer.controller.kopf_fixes import quiet_toggle_sets


async def _prepopulate(objects: int) -> tuple[int, list[bool]]:
    """kopf's start-up in miniature: one toggle per listed object; each object's worker drops
    its toggle, then waits until all are dropped. Returns the evaluations of the set's state
    and whether each waiter was still waiting when the last toggle went."""
    calls = 0
    real = aiotoggles.ToggleSet.is_on

    def counted(self: aiotoggles.ToggleSet) -> bool:
        nonlocal calls
        calls += 1
        return real(self)

    with mock.patch.object(aiotoggles.ToggleSet, "is_on", counted):
        indexed = aiotoggles.ToggleSet(all)
        toggles = [await indexed.make_toggle(name=str(i)) for i in range(objects)]
        done: list[bool] = []

        async def worker(toggle: aiotoggles.Toggle) -> None:
            await indexed.drop_toggle(toggle)
            await indexed.wait_for(True)
            done.append(len(indexed) == 0)

        tasks = []
        for toggle in toggles:  # events arrive one by one, the earlier ones' waiters run between
            tasks.append(asyncio.create_task(worker(toggle)))
            for _ in range(3):
                await asyncio.sleep(0)
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    return calls, done


async def test_waiters_wake_when_the_set_changes_state_only() -> None:
    with mock.patch.multiple(
        aiotoggles.ToggleSet,
        make_toggle=aiotoggles.ToggleSet.make_toggle,
        drop_toggle=aiotoggles.ToggleSet.drop_toggle,
        drop_toggles=aiotoggles.ToggleSet.drop_toggles,
    ):
        before, _ = await _prepopulate(400)
        assert quiet_toggle_sets()
        after, done = await _prepopulate(400)
    assert done == [True] * 400  # every waiter ran, and only once every toggle was gone
    assert before > 400 * 400 // 4  # kopf 1.45 as released: quadratic
    assert after < 400 * 10


async def test_a_toggle_of_the_set_still_wakes_its_own_waiters() -> None:
    with mock.patch.multiple(
        aiotoggles.ToggleSet,
        make_toggle=aiotoggles.ToggleSet.make_toggle,
        drop_toggle=aiotoggles.ToggleSet.drop_toggle,
        drop_toggles=aiotoggles.ToggleSet.drop_toggles,
    ):
        assert quiet_toggle_sets()
        paused = aiotoggles.ToggleSet(any)
        mine = await paused.make_toggle(name="peering")
        other = await paused.make_toggle(name="other")
        waiting = asyncio.create_task(mine.wait_for(True))
        whole = asyncio.create_task(paused.wait_for(True))
        await paused.drop_toggle(other)
        await asyncio.sleep(0)
        assert not waiting.done() and not whole.done()
        await mine.turn_to(True)
        await asyncio.wait_for(asyncio.gather(waiting, whole), 10)
        await paused.drop_toggles([mine])
        assert paused.is_off()
