"""Rounds are admitted before they are fanned out, so LangGraph does not build tasks that would only queue.

The limiter's admission alone (order, the limit, tickets given back once, cancellation), then real runs over
real LangGraph: a runner whose limit is smaller than the problems' rounds keeps at most ``limit + K - 1``
trajectory tasks alive at once, finishes every problem, and gives back what a cancelled run had been
admitted. Every wait here is on state (a future done, an event set), never on time.
"""

from __future__ import annotations

import asyncio

import pytest

from pacore_graph import PaCoReConfig
from pacore_graph.concurrency.limiter import Admission
from pacore_graph.extend import Trajectory
from pacore_graph.graph.run_state import RunState
from pacore_graph.graph.runner import PaCoReRunner


async def settle() -> None:
    """Let every callback already scheduled run (futures resolved by give_back wake their waiters)."""
    for _ in range(3):
        await asyncio.sleep(0)


async def test_rounds_are_admitted_in_order_while_fewer_than_the_limit_are_unfinished():
    admission = Admission(limit=4)
    first = await admission.enter(3)
    second = await admission.enter(3)  # 3 < 4 unfinished: admitted, 2 past the limit may queue for a slot
    assert admission.pending == 6
    third = asyncio.ensure_future(admission.enter(1))
    fourth = asyncio.ensure_future(admission.enter(2))
    await settle()
    assert not third.done() and not fourth.done()
    first.give_back_one()
    first.give_back_one()  # 4 unfinished: still none below the limit
    await settle()
    assert not third.done()
    first.give_back_one()  # 3: the third is admitted (4), the fourth waits its turn
    await settle()
    assert third.done() and not fourth.done() and admission.pending == 4
    second.give_back_rest()
    (await third).give_back_one()
    await settle()
    assert fourth.done() and admission.pending == 2


async def test_a_ticket_gives_back_each_share_once():
    admission = Admission(limit=8)
    ticket = await admission.enter(3)
    ticket.give_back_one()
    ticket.give_back_rest()
    ticket.give_back_rest()  # a run closed twice, a trajectory ending after its run closed: nothing more
    ticket.give_back_one()
    assert admission.pending == 0 and ticket.held == 0


async def test_a_round_cancelled_while_waiting_or_just_admitted_takes_nothing():
    admission = Admission(limit=1)
    held = await admission.enter(1)
    waiting = asyncio.ensure_future(admission.enter(5))
    await settle()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    admitted_then_cancelled = asyncio.ensure_future(admission.enter(2))
    await settle()
    held.give_back_one()  # admits it (pending 2) ...
    admitted_then_cancelled.cancel()  # ... but it is cancelled before it runs: its 2 come back
    with pytest.raises(asyncio.CancelledError):
        await admitted_then_cancelled
    assert admission.pending == 0


class CountingExplorer:
    """Counts its calls; each takes ``seconds``, or waits for ``gate`` when one is given."""

    def __init__(self, seconds: float = 0.01, gate: asyncio.Event | None = None):
        self.seconds = seconds
        self.gate = gate
        self.calls = 0
        self.called = asyncio.Event()

    async def explore(self, messages, episode) -> Trajectory:
        self.calls += 1
        self.called.set()
        if self.gate is not None:
            await self.gate.wait()
        else:
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

    def counting_ended(self, task):
        counter["alive"] -= 1
        return ended(self, task)

    monkeypatch.setattr(RunState, "trajectory_started", counting_started)
    monkeypatch.setattr(RunState, "trajectory_ended", counting_ended)
    results = await asyncio.gather(*(runner.arun(f"problem {n}") for n in range(6)))
    assert all(result.answer == "answer 1-0" for result in results)
    assert explorer.calls == 6 * 5
    assert counter["most"] <= 3 + 4 - 1  # without admission, all 6 x 4 first-round tasks at once
    assert counter["alive"] == 0


async def test_a_cancelled_run_gives_back_its_admission():
    gate = asyncio.Event()  # never set: the first run's trajectories hang until cancelled
    explorer = CountingExplorer(gate=gate)
    runner = PaCoReRunner(explorer, PaCoReConfig(rounds=[4], max_concurrency=4))
    first = asyncio.ensure_future(runner.arun("held"))
    await asyncio.wait_for(explorer.called.wait(), timeout=30)  # the first round is admitted and running
    queued = asyncio.ensure_future(runner.arun("waits for admission"))
    for task in (first, queued):
        task.cancel()
    for task in (first, queued):
        with pytest.raises(asyncio.CancelledError):
            await task
    quick = PaCoReRunner(CountingExplorer(), PaCoReConfig(rounds=[4], max_concurrency=4), limiter=runner.limiter)
    result = await asyncio.wait_for(quick.arun("after"), timeout=30)  # would wait forever on a leak
    assert result.answer == "answer 1-0"


async def test_a_graph_run_with_langgraphs_own_max_concurrency_still_finishes():
    runner = PaCoReRunner(CountingExplorer(), PaCoReConfig(rounds=[8], max_concurrency=64))
    result = await asyncio.wait_for(runner.arun("problem", {"max_concurrency": 2}), timeout=30)
    assert result.answer == "answer 1-0"


async def test_each_admitted_round_tells_the_explorer_how_many_requests_are_coming():
    class Expecting(CountingExplorer):
        def __init__(self):
            super().__init__()
            self.expected: list[int] = []

        async def expect(self, requests: int) -> None:
            self.expected.append(requests)

    explorer = Expecting()
    runner = PaCoReRunner(explorer, PaCoReConfig(rounds=[4, 2], max_concurrency=6))
    await asyncio.gather(runner.arun("one"), runner.arun("two"))
    # both first rounds are admitted at once (4, then 8 capped at the limit 6), then rounds of 2 and finals
    assert explorer.expected[:2] == [4, 6] and len(explorer.expected) == 6
