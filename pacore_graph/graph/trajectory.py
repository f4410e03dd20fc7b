"""One trajectory task, from its admission to its record: :class:`TrajectoryLife`.

The ``trajectory`` node makes one per Send task and awaits :meth:`TrajectoryLife.live`. Its transitions,
each with its bookkeeping in one method:

- **queued** (made): it sees its round's references and messages, counts as started at the round's
  barrier, and holds its share of the round's admission (async runs; see concurrency/limiter.py). It has
  built nothing else: at 1024 in flight, as many again may wait here for a slot.
- **sent** (:meth:`_send`): it holds a slot of the limiter, and its :class:`Exploration` calls the explorer
  with the operator's retries and timeout.
- **received** (:meth:`_received`): the response is in; it gives its admission back at once, so a round
  waiting for admission fans out before this one is digested.
- then one of: **recorded** (:meth:`_record`: compacted record, barrier, listeners), **cut** by a budget or
  early stop (:meth:`_cut`), **failed** for good (:meth:`_fail`: recorded and left out, or the round failed:
  see graph/barrier.py), or **cancelled** (closing the run cancels it; an agent's interrupt goes to the
  caller as is). Whichever way, :meth:`_end` gives back what it still holds (slot, admission) and leaves
  the run's set of trajectories in flight, and nothing after it awaits: ``RunState.close`` has nothing left
  to stop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp

from pacore_graph.coordination.control import TrajectoryCut
from pacore_graph.errors import RoundFailedError
from pacore_graph.explorers.episode import EpisodeContext
from pacore_graph.graph.exploration import Exploration, failure_data, with_failed_tokens
from pacore_graph.graph.run_state import RunState
from pacore_graph.graph.state import TrajectoryTask
from pacore_graph.records import RoundRecord, Trajectory, TrajectoryData

if TYPE_CHECKING:
    from pacore_graph.coordination.references import References
    from pacore_graph.graph.rounds import Rounds


class TrajectoryLife:
    """One trajectory of ``run``, the task ``task`` of a graph whose shared parts are ``rounds``."""

    __slots__ = (
        "rounds",
        "run",
        "round_index",
        "index",
        "k",
        "seen",
        "messages",
        "barrier",
        "control",
        "final",
        "ticket",
        "slot",
        "exploration",
        "_task",
    )

    def __init__(self, rounds: Rounds, run: RunState, task: TrajectoryTask):
        settings = rounds.settings
        self.rounds = rounds
        self.run = run
        self.round_index = round_index = task["round_index"]
        self.index = index = task["index"]
        self.k = k = rounds.schedule[round_index]
        verifier = round_index == rounds.final_round and settings.final_selector == "verifier"
        template = settings.verifier_template if verifier else settings.template
        self.seen: References = run.references(round_index, index, k, settings)
        self.messages, self.barrier = run.round(round_index, k, self.seen.texts, settings, template)
        self.control = run.control(settings).round(round_index, k, task.get("spent", 0))
        self.final = round_index == rounds.final_round and not verifier  # a verifier's reply is not the answer
        self.ticket = run.ticket(round_index)  # None: this run did not admit the round (a sync run, a resume)
        self.slot = rounds.limiter.slot()
        self.exploration: Exploration | None = None
        self._task: asyncio.Task[Any] | None = None

    async def live(self, config: RunnableConfig) -> dict[str, Any]:
        """The task's whole life; its output is the state update (its record)."""
        self._task = self.run.trajectory_started()  # a run closed already cancels it here
        self.barrier.start()
        try:
            outcome = await self._send(config)
        except (asyncio.CancelledError, GraphBubbleUp):
            self.barrier.leave()
            raise
        except TrajectoryCut as cut:
            return self._cut(cut)
        except Exception as exc:
            return await self._fail(exc)
        finally:
            self._end()
        return self._record(outcome)

    async def _send(self, config: RunnableConfig) -> Trajectory:
        await self.slot.take()  # first: a trajectory still queued for its slot has built nothing of its own
        run, round_index, index = self.run, self.round_index, self.index
        child = run.child_config(config, round_index, index, self.final)
        episode = EpisodeContext(round_index, index, self.final, child, run.payload, run.on_record, run.unobserved)
        rounds = self.rounds
        exploration = Exploration(rounds.explorer, self.messages, episode, rounds.settings, uncapped=rounds.uncapped)
        self.exploration = exploration
        work = exploration.explore(slot=self.slot)
        outcome = await (self.control.guard(index, work) if self.control.watching else work)
        self._received()
        return outcome

    def _received(self) -> None:
        """The response is in: the admission goes back now, not after the digest (a waiting round goes first)."""
        self._give_back_admission()

    def _give_back_admission(self) -> None:
        ticket, self.ticket = self.ticket, None
        if ticket is not None:
            ticket.give_back_one()

    def _end(self) -> None:
        self.slot.drop()  # when no attempt ran (cut first); an attempt gives it back as it ends
        self._give_back_admission()
        if self._task is not None:
            self.run.trajectory_ended(self._task)

    def _record(self, outcome: Trajectory) -> dict[str, Any]:
        assert self.exploration is not None  # set by _send, which returned outcome
        record = seen_references(self.exploration.record(outcome), self.seen)
        self.control.finished(record)
        self.barrier.finish(record, self.rounds.passes(record))
        run = self.run
        if run.trace is not None:
            outcome.extra.setdefault("round_index", self.round_index)
            outcome.extra.setdefault("index", self.index)
            run.trace.append(outcome)
        run.emit(
            {
                "event": "trajectory_finished",
                "round": self.round_index,
                "index": self.index,
                "completion_tokens": record["completion_tokens"],
                "truncated": record["truncated"],
            }
        )
        return {"trajectories": [record]}

    def _cut(self, cut: TrajectoryCut) -> dict[str, Any]:
        record = TrajectoryData(round_index=self.round_index, index=self.index, cut=cut.reason)
        record = seen_references(record, self.seen)
        if self.exploration is not None:
            record = with_failed_tokens(record, self.exploration.failed_tokens)
        record["attempts"] = self.exploration.attempts if self.exploration is not None else 0
        self.barrier.finish(record, False)
        self.run.emit({"event": "trajectory_cut", "round": self.round_index, "index": self.index, "reason": cut.reason})
        return {"trajectories": [record]}

    async def _fail(self, exc: Exception) -> dict[str, Any]:
        exploration = self.exploration
        failure = exploration.failure(exc) if exploration else failure_data(exc, self.round_index, self.index)
        record = seen_references(failure, self.seen)
        self.control.finished(record)
        self.run.emit(
            {"event": "trajectory_failed", "round": self.round_index, "index": self.index, "error": record["error"]}
        )
        if self.rounds.reference_mode:  # the reference pipeline carries on whatever failed
            self.barrier.finish(record, False)
        elif await self.barrier.fail(record):
            failed = round_record(self.round_index, self.k, self.barrier.records.values())
            raise RoundFailedError(failed, self.run.finished_before(self.round_index)) from exc
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
