"""Rounds are admitted before they are fanned out, so LangGraph does not build tasks that would only queue.

The limiter's admission alone (order, the limit, cancellation), then real runs over real LangGraph: a
runner whose limit is smaller than the problems' rounds keeps at most ``limit + K - 1`` trajectory tasks
alive at once, finishes every problem, and gives back what a cancelled run had been admitted.
"""

from __future__ import annotations

import asyncio

import pytest

from pacore_graph import PaCoReConfig
from pacore_graph.concurrency.limiter import Admission
from pacore_graph.extend import Trajectory
from pacore_graph.graph.run_state import RunState
from pacore_graph.graph.runner import PaCoReRunner


async def test_rounds_are_admitted_in_order_while_fewer_than_the_limit_are_unfinished():
    admission = Admission(limit=4)
    await admission.enter(3)
    await admission.enter(3)  # 3 < 4 unfinished: admitted, 2 past the limit may queue for a slot
    assert admission.pending == 6
    third = asyncio.ensure_future(admission.enter(1))
    fourth = asyncio.ensure_future(admission.enter(2))
    await asyncio.sleep(0)
    assert not third.done() and not fourth.done()
    admission.finished(2)  # 4 unfinished: still none below the limit
    await asyncio.sleep(0)
    assert not third.done()
    admission.finished()  # 3: the third is admitted (4), the fourth waits its turn
    await asyncio.sleep(0)
    assert third.done() and not fourth.done() and admission.pending == 4
    admission.finished(4)
    await asyncio.sleep(0)
    assert fourth.done() and admission.pending == 2


async def test_a_round_cancelled_while_waiting_or_just_admitted_takes_nothing():
    admission = Admission(limit=1)
    await admission.enter(1)
    waiting = asyncio.ensure_future(admission.enter(5))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    admitted_then_cancelled = asyncio.ensure_future(admission.enter(2))
    await asyncio.sleep(0)
    admission.finished()  # admits it (pending 2) ...
    admitted_then_cancelled.cancel()  # ... but it is cancelled before it runs: its 2 come back
    with pytest.raises(asyncio.CancelledError):
        await admitted_then_cancelled
    assert admission.pending == 0


class CountingExplorer:
    """Counts trajectories alive at once (started, not finished); each takes ``seconds``."""

    def __init__(self, seconds: float = 0.05):
        self.seconds = seconds
        self.alive = self.most_alive = self.calls = 0

    async def explore(self, messages, episode) -> Trajectory:
        self.calls += 1
        await asyncio.sleep(self.seconds)
        return Trajectory(content=f"answer {episode.round_index}-{episode.index}", completion_tokens=3)


async def test_a_runner_keeps_at_most_limit_plus_k_minus_one_trajectory_tasks_alive(monkeypatch):
    explorer = CountingExplorer()
    runner = PaCoReRunner(explorer, PaCoReConfig(rounds=[4], max_concurrency=3))
    counter = {"alive": 0, "most": 0}
    started, ended = RunState.trajectory_started, RunState.trajectory_ended

    def counting_started(self):
        counter["alive"] += 1
        counter["most"] = max(counter["most"], counter["alive"])
        return started(self)

    def counting_ended(self, task, round_index):
        counter["alive"] -= 1
        return ended(self, task, round_index)

    monkeypatch.setattr(RunState, "trajectory_started", counting_started)
    monkeypatch.setattr(RunState, "trajectory_ended", counting_ended)
    results = await asyncio.gather(*(runner.arun(f"problem {n}") for n in range(6)))
    assert all(result.answer == "answer 1-0" for result in results)
    assert explorer.calls == 6 * 5
    assert counter["most"] <= 3 + 4 - 1  # without admission, all 6 x 4 first-round tasks at once


async def test_a_cancelled_run_gives_back_its_admission():
    runner = PaCoReRunner(CountingExplorer(seconds=30), PaCoReConfig(rounds=[4], max_concurrency=4))
    first = asyncio.ensure_future(runner.arun("held"))
    queued = asyncio.ensure_future(runner.arun("waits for admission"))
    await asyncio.sleep(0.2)
    for task in (first, queued):
        task.cancel()
    for task in (first, queued):
        with pytest.raises(asyncio.CancelledError):
            await task
    quick = PaCoReRunner(CountingExplorer(seconds=0.01), PaCoReConfig(rounds=[4], max_concurrency=4),
                         limiter=runner.limiter)  # fmt: skip
    result = await asyncio.wait_for(quick.arun("after"), timeout=10)  # would wait forever on a leak
    assert result.answer == "answer 1-0"
