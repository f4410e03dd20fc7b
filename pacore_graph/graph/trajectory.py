"""One trajectory task, from its admission to its record: :class:`TrajectoryLife`.

The ``trajectory`` node makes one per Send task and awaits :meth:`TrajectoryLife.live`. Its stages
(:class:`Stage`), each entered by one method that asserts the stage it leaves:

- **queued** (made): it sees its round's references and messages, and holds its share of the round's admission
  (async runs; see concurrency/limiter.py). It has built nothing else: at 1024 in flight, as many again may wait
  here for a slot. :meth:`live` counts it as started at the round's barrier.
- where an earlier result holds a record of its very request (escalation, graph/reuse.py), it goes
  straight to **recorded** (:meth:`_reuse`: that record in its place, marked reused; nothing is sent).
- **sent** (:meth:`_send`): it has taken a slot of the limiter, and its :class:`Exploration` calls the explorer
  with the operator's retries and timeout (each attempt holds the slot; a retry gives it back during its
  backoff and takes it again).
- **received** (:meth:`_received`): the response is in; it gives its admission back at once, so a round
  waiting for admission fans out before this one is digested.
- then one of: **recorded** (:meth:`_record`: compacted record, barrier, listeners), **cut** by a budget or
  early stop (:meth:`_cut`), **failed** for good (:meth:`_fail`: recorded and left out, or the round failed:
  see graph/barrier.py), or **cancelled** (closing the run cancels it; an agent's interrupt goes to the
  caller as is).

Whichever way it ends, :meth:`_end` gives back what it still holds (the slot, when no attempt holds it: cut or
failed before one; its admission, when it never received) and leaves the run's set of trajectories in flight;
nothing after it awaits, so ``RunState.close`` has nothing left to stop.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp

from pacore_graph.coordination.control import TrajectoryCut
from pacore_graph.coordination.references import References
from pacore_graph.errors import RoundFailedError
from pacore_graph.explorers.episode import EpisodeContext
from pacore_graph.graph.exploration import Exploration, failure_data, with_failed_tokens
from pacore_graph.graph.reuse import reused_record, round_plan
from pacore_graph.graph.run_state import RunState
from pacore_graph.graph.state import TrajectoryTask
from pacore_graph.records import RoundRecord, Trajectory, TrajectoryData

if TYPE_CHECKING:
    from pacore_graph.graph.rounds import Rounds


class Stage(enum.Enum):
    QUEUED = "queued"
    SENT = "sent"
    RECEIVED = "received"
    RECORDED = "recorded"
    CUT = "cut"
    FAILED = "failed"
    CANCELLED = "cancelled"


class TrajectoryLife:
    """One trajectory of ``run``, the task ``task`` of a graph whose shared parts are ``rounds``."""

    __slots__ = (
        "rounds",
        "run",
        "round",
        "index",
        "seen",
        "messages",
        "control",
        "final",
        "stage",
        "admitted",
        "slot",
        "exploration",
        "model",
        "config",
        "request",
        "reused",
        "_task",
    )

    def __init__(self, rounds: Rounds, run: RunState, task: TrajectoryTask):
        self.rounds = rounds
        self.run = run
        round_index = task["round_index"]
        self.index = index = task["index"]
        self.model = rounds.slot_model(round_index, index)  # a panel's model for this slot, else None
        self.config = config = rounds.slot_config(self.model)  # its window, reply cap and attempts
        self.round = current = run.round(round_index, rounds.schedule[round_index])
        verifier = round_index == rounds.final_round and config.final_selector == "verifier"
        template = config.verifier_template if verifier else config.template
        self.seen = current.references(index, run.rounds.get(round_index - 1), config)
        self.messages = current.messages(self.seen.texts, run.messages, config, template)
        plan = round_plan(rounds.requests, run, current, template)  # escalation: graph/reuse.py
        self.request, self.reused = plan.requests[index], plan.reused.get(index)
        self.control = run.control(config).round(round_index, current.k, task.get("spent", 0))
        self.final = round_index == rounds.final_round and not verifier  # a verifier's reply is not the answer
        self.stage = Stage.QUEUED
        self.admitted = current.ticket is not None  # this run admitted the round (async runs, not a resume)
        self.slot = rounds.limiter.slot()
        self.exploration: Exploration | None = None  # made as it is sent
        self._task: asyncio.Task[Any] | None = None

    async def live(self, runnable_config: RunnableConfig) -> dict[str, Any]:
        """The task's whole life; its output is the state update (its record)."""
        self._task = self.run.trajectory_started()  # a run closed already cancels it here
        barrier = self.round.barrier
        barrier.start()
        if self.reused is not None:
            try:
                return self._reuse(self.reused)
            finally:
                self._end()
        try:
            outcome = await self._send(runnable_config)
        except (asyncio.CancelledError, GraphBubbleUp):
            self._move(Stage.CANCELLED, Stage.QUEUED, Stage.SENT)
            barrier.leave()
            raise
        except TrajectoryCut as cut:
            return self._cut(cut)
        except Exception as exc:
            return await self._fail(exc)
        finally:
            self._end()
        return self._record(outcome)

    def _move(self, to: Stage, *sources: Stage) -> None:
        assert self.stage in sources, f"trajectory {self.index}: {self.stage.value} -> {to.value}"
        self.stage = to

    async def _send(self, runnable_config: RunnableConfig) -> Trajectory:
        await self.slot.take()  # first: a trajectory still queued for its slot has built nothing of its own
        run, current, index = self.run, self.round, self.index
        child = run.child_config(runnable_config, current.index, index, self.final)
        episode = EpisodeContext(
            current.index, index, self.final, child, run.payload, run.on_record, run.unobserved, self.model
        )
        rounds = self.rounds
        exploration = Exploration(rounds.explorer, self.messages, episode, self.config, uncapped=rounds.uncapped)
        self.exploration = exploration
        self._move(Stage.SENT, Stage.QUEUED)
        work = exploration.explore(slot=self.slot)
        outcome = await (self.control.guard(index, work) if self.control.watching else work)
        self._received()
        return outcome

    def _received(self) -> None:
        """The response is in: the admission goes back now, not after the digest (a waiting round goes first)."""
        self._move(Stage.RECEIVED, Stage.SENT)
        self._give_back_admission()

    def _give_back_admission(self) -> None:
        if self.admitted:
            self.admitted = False
            assert self.round.ticket is not None
            self.round.ticket.give_back_one()

    def _end(self) -> None:
        self.slot.drop()  # held only when no attempt ran (cut or failed first): an attempt gives it back as it ends
        self._give_back_admission()
        if self._task is not None:
            self.run.trajectory_ended(self._task)

    def _record(self, outcome: Trajectory) -> dict[str, Any]:
        self._move(Stage.RECORDED, Stage.RECEIVED)
        assert self.exploration is not None  # made as it was sent
        record = seen_references(self.exploration.record(outcome), self.seen)
        if self.request is not None:
            record["request"] = self.request
        self.control.finished(record)
        self.round.barrier.finish(record, self.rounds.passes(record))
        run = self.run
        if run.trace is not None:
            outcome.extra.setdefault("round_index", self.round.index)
            outcome.extra.setdefault("index", self.index)
            run.trace.append(outcome)
        run.emit(
            {
                "event": "trajectory_finished",
                "round": self.round.index,
                "index": self.index,
                "completion_tokens": record["completion_tokens"],
                "truncated": record["truncated"],
            }
        )
        return {"trajectories": [record]}

    def _reuse(self, earlier: TrajectoryData) -> dict[str, Any]:
        """An earlier result's record of this very request takes the place of sending it (escalation)."""
        self._move(Stage.RECORDED, Stage.QUEUED)
        record = seen_references(reused_record(earlier, self.round.index, self.index, self.request), self.seen)
        self.control.finished(record)
        self.round.barrier.finish(record, self.rounds.passes(record))
        self.run.emit(
            {
                "event": "trajectory_finished",
                "round": self.round.index,
                "index": self.index,
                "completion_tokens": record.get("completion_tokens", 0),
                "truncated": record.get("truncated", False),
                "reused": True,
            }
        )
        return {"trajectories": [record]}

    def _cut(self, cut: TrajectoryCut) -> dict[str, Any]:
        self._move(Stage.CUT, Stage.SENT)  # the round's guard cuts a sent trajectory (coordination/control.py)
        assert self.exploration is not None  # made as it was sent
        round_index = self.round.index
        record = seen_references(TrajectoryData(round_index=round_index, index=self.index, cut=cut.reason), self.seen)
        if self.model is not None:
            record["model"] = self.model
        record = with_failed_tokens(record, self.exploration.failed_tokens)
        record["attempts"] = self.exploration.attempts
        self.round.barrier.finish(record, False)
        self.run.emit({"event": "trajectory_cut", "round": round_index, "index": self.index, "reason": cut.reason})
        return {"trajectories": [record]}

    async def _fail(self, exc: Exception) -> dict[str, Any]:
        sent = self.stage is Stage.SENT
        self._move(Stage.FAILED, Stage.QUEUED, Stage.SENT)
        current = self.round
        if sent:
            assert self.exploration is not None  # made as it was sent
            failure = self.exploration.failure(exc)  # with what its attempts spent
        else:
            failure = failure_data(exc, current.index, self.index, model=self.model)
        record = seen_references(failure, self.seen)
        self.control.finished(record)
        self.run.emit(
            {"event": "trajectory_failed", "round": current.index, "index": self.index, "error": record["error"]}
        )
        if self.rounds.reference_mode:  # the reference pipeline carries on whatever failed
            current.barrier.finish(record, False)
        elif await current.barrier.fail(record):
            failed = round_record(current.index, current.k, current.barrier.records.values())
            raise RoundFailedError(failed, self.run.finished_before(current.index)) from exc
        return {"trajectories": [record]}


def seen_references(record: TrajectoryData, seen: References) -> TrajectoryData:
    """Records which earlier trajectories a trajectory saw, when an option chose them (subset, dedup)."""
    if seen.indices is not None:
        record["reference_indices"] = seen.indices
    if seen.counts is not None:
        record["reference_counts"] = seen.counts
    return record


def round_record(round_index: int, k: int, records: Iterable[TrajectoryData]) -> RoundRecord:
    trajectories = sorted(records, key=lambda record: record["index"])
    return RoundRecord.model_validate({"round_index": round_index, "k": k, "trajectories": trajectories})
