"""A failed trajectory's decision (recorded and left out, or the round failed) comes from the round's state: how
many of its trajectories run here, how many started, how many run. No clock: each decision below is made the moment
the state allows it, seen by ``asyncio.timeout(0)`` (which cuts anything that waits for the loop's next turn) and by
tasks that are still waiting until the state changes."""

from __future__ import annotations

import asyncio

import pytest

from pacore_graph.graph.barrier import RoundBarrier
from pacore_graph.records import TrajectoryData


def record(index: int) -> TrajectoryData:
    return TrajectoryData(round_index=0, index=index, error="HTTP 500")


async def decided_at_once(barrier: RoundBarrier, index: int) -> bool:
    """The decision, which must not wait for anything."""
    async with asyncio.timeout(0):
        return await barrier.fail(record(index))


async def test_a_resumed_round_decides_at_once_when_its_unfinished_trajectories_are_done():
    """Two of four saved before a restart, two resumed here: the second failure is the last of them, so it records
    the failure at once and leaves the decision to the collector (the saved two's conclusions are unknown here)."""
    barrier = RoundBarrier(4, here=2)
    barrier.start()
    barrier.start()
    barrier.finish(TrajectoryData(round_index=0, index=2, conclusion=""), usable=False)
    assert await decided_at_once(barrier, 3) is False
    assert sorted(barrier.records) == [2, 3]


async def test_a_round_fanned_out_here_fails_once_all_k_have_started_and_none_runs():
    barrier = RoundBarrier(3, here=3)
    barrier.start()
    first = asyncio.ensure_future(barrier.fail(record(0)))  # the others have not started: it waits
    await asyncio.sleep(0)  # one turn of the loop (no timer): the failure is waiting
    assert not first.done()
    barrier.start()
    barrier.start()
    await asyncio.sleep(0)
    assert not first.done()  # two are running
    barrier.finish(TrajectoryData(round_index=0, index=1, conclusion=""), usable=False)
    await asyncio.sleep(0)
    assert not first.done()  # one is still running
    assert await decided_at_once(barrier, 2) is True  # the last one: all three ran here, none usable
    assert await first is True


async def test_a_usable_sibling_makes_every_failure_a_record():
    barrier = RoundBarrier(3, here=3)
    for _ in range(3):
        barrier.start()
    barrier.finish(TrajectoryData(round_index=0, index=0, conclusion="42"), usable=True)
    waiting = asyncio.ensure_future(barrier.fail(record(1)))
    await asyncio.sleep(0)
    assert not waiting.done()
    assert await decided_at_once(barrier, 2) is False
    assert await waiting is False


async def test_without_a_count_the_trajectories_that_started_are_all_there_are():
    """A graph resumed with ``invoke(None, ...)`` without the runner: nobody said how many run here."""
    barrier = RoundBarrier(3, here=None)
    barrier.start()
    assert await decided_at_once(barrier, 0) is False  # not all three ran here: the collector decides


async def test_a_decision_that_must_wait_is_cut_by_the_zero_timeout():
    """The check above can fail: a failure whose siblings still run does not decide at once."""
    barrier = RoundBarrier(2, here=2)
    barrier.start()
    barrier.start()
    with pytest.raises(TimeoutError):
        await decided_at_once(barrier, 0)


async def test_each_trajectory_ends_in_the_stage_its_outcome_names_and_no_stage_is_skipped(monkeypatch):
    """A run of three trajectories, one of which fails for good: the lives end recorded, recorded, failed (and the
    synthesis recorded); a transition from a stage it does not leave is refused."""
    from pacore_graph import PaCoReConfig
    from pacore_graph.extend import RetryPolicy, Trajectory
    from pacore_graph.graph import trajectory as trajectory_module
    from pacore_graph.graph.runner import PaCoReRunner

    lives: list[trajectory_module.TrajectoryLife] = []
    made = trajectory_module.TrajectoryLife.__init__

    def keep(self, *args, **kwargs):
        made(self, *args, **kwargs)
        lives.append(self)

    monkeypatch.setattr(trajectory_module.TrajectoryLife, "__init__", keep)

    class OneFails:
        async def explore(self, messages, episode) -> Trajectory:
            if (episode.round_index, episode.index) == (0, 2):
                raise ConnectionRefusedError("down")
            return Trajectory(content=f"answer {episode.index}", completion_tokens=1)

    config = PaCoReConfig(rounds=[3], retry=RetryPolicy(max_attempts=1))
    result = await PaCoReRunner(OneFails(), config).arun("q")
    assert result.answer == "answer 0"
    stages = sorted((life.round.index, life.index, life.stage.value) for life in lives)
    assert stages == [(0, 0, "recorded"), (0, 1, "recorded"), (0, 2, "failed"), (1, 0, "recorded")]
    with pytest.raises(AssertionError, match="recorded -> received"):
        lives[0]._move(trajectory_module.Stage.RECEIVED, trajectory_module.Stage.SENT)
