"""Resume a benchmark run after a kill: finished problems are skipped, the problem in flight continues.

The per-problem part (checkpoint file, thread ids, resuming one thread) is the operator's own
(:mod:`pacore_graph.resume`); this module runs a whole benchmark's problems over it and appends each
finished problem's row to the results file.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from pacore_benchmarks.results import ResultsFile
from pacore_graph.records import PaCoReResult
from pacore_graph.resume import (
    CHECKPOINT_FILE,
    Status,
    checkpoint_serde,
    open_checkpointer,
    solve_resumable,
    thread_id,
)
from pacore_graph.run import PaCoReRunner, to_messages

__all__ = [
    "CHECKPOINT_FILE",
    "Problem",
    "RunSummary",
    "Status",
    "checkpoint_serde",
    "open_checkpointer",
    "run_resumable",
    "solve_resumable",
    "thread_id",
]


class Problem(BaseModel):
    """One item of a benchmark run: an id unique in the run and the messages PaCoRe answers."""

    model_config = {"arbitrary_types_allowed": True}

    id: str
    messages: Any = Field(description="a problem string or a message list")


class RunSummary(BaseModel):
    """What one (possibly resumed) run did."""

    total: int
    skipped: int = Field(0, description="already in the results file: not run again")
    fresh: int = 0
    resumed: int = Field(0, description="continued from a checkpoint (finished trajectories kept)")
    finished_from_checkpoint: int = Field(0, description="graph had finished, only the row was missing")
    retried: int = Field(0, description="a round that had failed entirely was tried again")
    failed: dict[str, str] = Field(default_factory=dict, description="problem id -> reason; rerun to retry")

    @property
    def written(self) -> int:
        return self.fresh + self.resumed + self.finished_from_checkpoint + self.retried


async def run_resumable(
    runner: PaCoReRunner,
    problems: Iterable[Problem],
    results: ResultsFile,
    row: Callable[[Problem, PaCoReResult], dict[str, Any] | Awaitable[dict[str, Any]]],
    *,
    salt: Sequence[str] = (),
    problems_in_flight: int = 64,
    on_event: Callable[[str, dict[str, Any]], None] | None = None,
    on_done: Callable[[Problem, str], None] | None = None,
) -> RunSummary:
    """Solve every problem not yet in ``results``; each finished problem is appended as one row at once.

    ``results`` must be keyed by the problem id. A problem that fails is reported in the summary, not
    written, so the next run tries it again; the other problems go on. Once its row is on disk a
    problem's checkpoints are deleted (the file stays small; a kill in between only leaves a spare).
    ``salt`` (e.g. the model name) separates checkpoints of runs that differ in what they send.
    """
    problems = list(problems)
    done = results.done()
    todo = [p for p in problems if p.id not in done]
    summary = RunSummary(total=len(problems), skipped=len(problems) - len(todo))
    gate = asyncio.Semaphore(problems_in_flight)
    counters = {"fresh": "fresh", "resumed": "resumed", "finished": "finished_from_checkpoint", "retried": "retried"}

    async def one(problem: Problem) -> None:
        async with gate:
            messages = to_messages(problem.messages)
            thread = thread_id(problem.id, messages, runner.config, *salt)
            events = None if on_event is None else (lambda event: on_event(problem.id, event))
            try:
                result, status = await solve_resumable(runner, messages, thread, on_event=events)
                made = row(problem, result)
                if asyncio.iscoroutine(made):
                    made = await made
                results.append(made)  # type: ignore[arg-type]
                await runner.graph.checkpointer.adelete_thread(thread)
            except Exception as exc:  # one bad problem must not cost the others
                summary.failed[problem.id] = f"{type(exc).__name__}: {exc}"[:1000]
                if on_done is not None:
                    on_done(problem, "failed")
                return
            setattr(summary, counters[status], getattr(summary, counters[status]) + 1)
            if on_done is not None:
                on_done(problem, status)

    await asyncio.gather(*(one(problem) for problem in todo))
    return summary
