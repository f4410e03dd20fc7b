"""Cutting a round short: cancel its running trajectories when the budget runs out or its answers agree.

Each trajectory runs its model call (retries included) as a child task that the round may cancel. A
cancelled task closes its HTTP request (so vLLM aborts the generation) and the trajectory ends with
:class:`TrajectoryCut`: it is recorded with ``cut`` set to the reason, neither failed nor a reference.
Trajectories that had not started yet (waiting for a concurrency slot, say) are cut the same way.

All trajectories of a run share one event loop (see :mod:`pacore_graph.graph.barrier`), so no lock is needed.
What a round knows is what finished in this process: after a resume, trajectories that had finished
before the restart count in the collector, not in the early-stop rule.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

from pacore_graph.config import Budget, EarlyStop
from pacore_graph.coordination.answers import AnswerExtractor, answer_key, resolve_extractor
from pacore_graph.records import TrajectoryData, usable

T = TypeVar("T")
CutReason = Literal["early_stop", "budget_tokens", "deadline"]


class TrajectoryCut(Exception):
    """The trajectory's round stopped before it finished (``reason``); it is recorded as cut."""

    def __init__(self, reason: CutReason):
        super().__init__(reason)
        self.reason: CutReason = reason


class RunControl:
    """The coordination state of one run: its deadline, its extractor and the control of each round."""

    def __init__(
        self,
        budget: Budget,
        early_stop: EarlyStop,
        extractor: str | None,
        started: float,
        emit: Callable[[dict[str, Any]], None],
    ):
        self.budget = budget
        self.early_stop = early_stop
        self.extractor: AnswerExtractor | None = resolve_extractor(extractor) if extractor else None
        self.deadline = started + budget.seconds if budget.seconds is not None else None
        self.emit = emit
        self._rounds: dict[int, RoundControl] = {}

    def round(self, round_index: int, k: int, spent_before: int) -> RoundControl:
        control = self._rounds.get(round_index)
        if control is None:
            control = self._rounds[round_index] = RoundControl(self, round_index, k, spent_before)
        return control

    def seconds_left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def exhausted(self, spent: int) -> CutReason | None:
        """Why no further round may start, if a budget has run out."""
        if self.budget.tokens is not None and spent >= self.budget.tokens:
            return "budget_tokens"
        left = self.seconds_left()
        if left is not None and left <= 0:
            return "deadline"
        return None


class RoundControl:
    """The trajectories of one round that run in this process, and whether the round has stopped."""

    def __init__(self, run: RunControl, round_index: int, k: int, spent_before: int):
        self.run = run
        self.round_index = round_index
        self.k = k
        self.spent_before = spent_before
        self.tokens = 0
        self.done = 0
        self.votes: Counter[str] = Counter()
        self.reason: CutReason | None = None
        self._tasks: dict[int, asyncio.Task[Any]] = {}
        self.watching = run.budget.active or run.early_stop.cancels  # else guard() is not needed

    async def guard(self, index: int, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` (the trajectory's model call with its retries) so that the round can cancel it."""
        if not self.watching:
            return await work
        left = self.run.seconds_left()
        if self.reason is None and left is not None and left <= 0:
            self.stop("deadline")
        if self.reason is not None:
            work.close()
            raise TrajectoryCut(self.reason)
        task = asyncio.ensure_future(work)
        self._tasks[index] = task
        timer = asyncio.get_running_loop().call_later(left, self.stop, "deadline") if left is not None else None
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self.reason is not None and task.cancelled() and (current is None or not current.cancelling()):
                raise TrajectoryCut(self.reason) from None
            raise
        finally:
            self._tasks.pop(index, None)
            if timer is not None:
                timer.cancel()

    def finished(self, record: TrajectoryData) -> None:
        """A trajectory ended (with a conclusion or a failure): add its extracted answer to the record,
        count its tokens and answer, and stop the round when a budget ran out or the answers agree."""
        self.done += 1
        self.tokens += record.get("completion_tokens", 0)
        if self.run.extractor is not None and usable(record):
            record["answer"] = self.run.extractor(record.get("conclusion", ""))
            key = answer_key(record["answer"])
            if key is not None:
                self.votes[key] += 1
        budget = self.run.budget.tokens
        if budget is not None and self.spent_before + self.tokens >= budget:
            self.stop("budget_tokens")
        elif self._agreed():
            self.stop("early_stop")

    def _agreed(self) -> bool:
        rule = self.run.early_stop
        if not rule.cancels or not self.votes:
            return False
        ranked = self.votes.most_common(2)
        leader = ranked[0][1]
        runner_up = ranked[1][1] if len(ranked) > 1 else 0
        running = self.k - self.done
        if running <= 0:
            return False
        if rule.agree is not None and leader >= rule.agree:
            return True
        if rule.lead is not None and leader - runner_up >= rule.lead:
            return True
        return rule.unbeatable and leader > runner_up + running

    def stop(self, reason: CutReason) -> None:
        """Cut every trajectory of the round still running, and any that has yet to start."""
        if self.reason is not None:
            return
        self.reason = reason
        running = [task for task in self._tasks.values() if not task.done()]
        if running or self.done < self.k:
            self.run.emit({"event": "round_cut", "round": self.round_index, "reason": reason, "running": len(running)})
        for task in running:
            task.cancel()
