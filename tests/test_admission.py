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


async def test_a_digest_waits_until_the_trajectories_admitted_have_sent_their_requests():
    admission = Admission(limit=16)  # up to 16 // 8 = 2 digests wait
    await admission.enter(3)
    first, second, third = (asyncio.ensure_future(admission.send_first()) for _ in range(3))
    await asyncio.sleep(0)
    assert third.done() and not first.done() and not second.done()  # the third digests now: 2 wait already
    admission.sent(2)
    await asyncio.sleep(0)
    assert not first.done()
    admission.sent()  # all 3 are out: the digests go on
    await asyncio.sleep(0)
    assert first.done() and second.done()
    await admission.send_first()  # nothing left to send: at once


async def test_digests_go_ahead_when_no_request_goes_out_for_a_while(monkeypatch):
    monkeypatch.setattr(Admission, "STALL", 0.5)
    admission = Admission(limit=16)
    await admission.enter(4)
    waiting = asyncio.ensure_future(admission.send_first())
    for _ in range(3):  # a request goes out every 0.2 s: it waits on, past the 0.5 s
        await asyncio.sleep(0.2)
        admission.sent()
    assert not waiting.done()
    admission.sent()
    await asyncio.sleep(0)
    assert waiting.done()
    await admission.enter(4)  # these never go out (LangGraph's max_concurrency may wait for this very digest)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(admission.send_first(), timeout=5)
    assert loop.time() - started >= 0.5


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

    def counting_ended(self, task, round_index, stage):
        counter["alive"] -= 1
        return ended(self, task, round_index, stage)

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


class StaggeredExplorer:
    """First-round trajectory ``i`` answers after ``0.05 + i / 100`` s; logs when each one was sent."""

    def __init__(self):
        self.log: list[tuple[str, str, int, int]] = []

    async def explore(self, messages, episode) -> Trajectory:
        problem = messages[-1].content if episode.round_index == 0 else "synthesis"
        self.log.append(("sent", problem, episode.round_index, episode.index))
        await asyncio.sleep(0.05 + episode.index / 100 if episode.round_index == 0 else 0.01)
        return Trajectory(content=f"answer {episode.index}", completion_tokens=3)


async def test_the_next_rounds_requests_go_out_before_finished_trajectories_are_digested(monkeypatch):
    monkeypatch.setattr(Admission, "STALL", 5.0)  # a slow machine must not let the digests go ahead,
    monkeypatch.setattr(Admission, "DIGEST_WAIT_SHARE", 1)  # nor a GC pause firing 9 timers at once pass the cap
    explorer = StaggeredExplorer()
    log = explorer.log

    def on_event(event):
        if event["event"] == "trajectory_finished" and event["round"] == 0:
            log.append(("digested", "", 0, event["index"]))

    runner = PaCoReRunner(explorer, PaCoReConfig(rounds=[32], max_concurrency=64))
    results = await asyncio.gather(*(runner.arun(f"problem {n}", on_event=on_event) for n in range(3)))
    assert all(result.answer == "answer 0" for result in results)
    third = next(position for position, entry in enumerate(log) if entry[1] == "problem 2")
    first_digest = next(position for position, entry in enumerate(log) if entry[0] == "digested")
    # Problem 2 waits for admission (64 of 64 taken). The first answer in gives its admission back, and
    # problem 2's requests go out as slots free, before that answer is digested (without sending first, it
    # would be digested first and only then give its admission back).
    assert third < first_digest


async def test_a_graph_run_with_langgraphs_own_max_concurrency_still_finishes():
    runner = PaCoReRunner(StaggeredExplorer(), PaCoReConfig(rounds=[8], max_concurrency=64))
    result = await asyncio.wait_for(runner.arun("problem", {"max_concurrency": 2}), timeout=30)
    assert result.answer == "answer 0"


async def test_each_admitted_round_tells_the_explorer_how_many_requests_are_coming():
    class Expecting(CountingExplorer):
        def __init__(self):
            super().__init__(seconds=0.01)
            self.expected: list[int] = []

        async def expect(self, requests: int) -> None:
            self.expected.append(requests)

    explorer = Expecting()
    runner = PaCoReRunner(explorer, PaCoReConfig(rounds=[4, 2], max_concurrency=6))
    await asyncio.gather(runner.arun("one"), runner.arun("two"))
    # both first rounds are admitted at once (4, then 8 capped at the limit 6), then rounds of 2 and finals
    assert explorer.expected[:2] == [4, 6] and len(explorer.expected) == 6
