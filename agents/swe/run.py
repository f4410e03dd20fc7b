"""A SWE run: PaCoRe over repair episodes for many instances, written so that it can stop and resume.

Output folder:
    predictions.jsonl          swebench's format, one line per finished instance (appended atomically)
    trajectories/ID.json       every round and episode of an instance: messages, tool calls, outputs,
                               tokens, patches, notes, errors
    trajectories/ID.episodes.jsonl   the instance in flight: each episode's record as it finishes
                               (appended atomically; merged on restart, deleted once ID.json is final)
    checkpoints.sqlite         LangGraph checkpoints of the instances in flight (one thread each)
    run.json                   the settings of the run and its last summary

An instance whose episodes all crashed (no daemon, missing image, server down) gets a trajectory file
with the error but no prediction, so the next run into the same folder tries it again; finished
instances are skipped. A run killed mid-instance resumes it: episodes that had finished are neither
run nor lost (their records come back from the episode log, their conclusions from the checkpoint).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pacore_agents.swe.episodes import InstanceOutcome, SweSolver
from pacore_agents.swe.output_paths import folder_name, inside
from pacore_agents.swe.per_call import PerCallSolver
from pacore_benchmarks.results import ResultsFile

PREDICTIONS_FILE = "predictions.jsonl"
TRAJECTORY_DIR = "trajectories"


class RunSummary(BaseModel):
    total: int
    skipped: int = Field(description="already in predictions.jsonl from an earlier run")
    predicted: int = Field(description="instances with a non-empty patch in this run")
    empty: int = Field(description="instances that ran but ended without a patch")
    failed: int = Field(description="instances whose episodes all crashed: no prediction written")
    ttc: int = 0
    errors: dict[str, str] = Field(default_factory=dict)


def trajectory_path(output: Path, instance_id: str) -> Path:
    """Inside ``output`` whatever the id (``output_paths.folder_name``: distinct ids, distinct files)."""
    return inside(output, TRAJECTORY_DIR) / f"{folder_name(instance_id)}.json"


def episode_log_path(output: Path, instance_id: str) -> Path:
    path = trajectory_path(output, instance_id)
    return path.with_name(f"{path.stem}.episodes.jsonl")


class EpisodeLog(list):
    """The episode records of one instance, each also appended to a JSONL file the moment it arrives.

    Why: after a kill, the episodes that had finished are not run again (the checkpoint keeps their
    conclusions), so their records exist only here. Lines of another checkpoint thread (a run that sent
    something else) are ignored; an episode recorded twice (killed after its record, before its
    checkpoint write, then run again) keeps its last record.
    """

    def __init__(self, path: Path, thread: str):
        super().__init__()
        self.path, self.thread = path, thread
        self.file = ResultsFile(path, key=lambda row: row["seq"])
        for line in self.file.rows:
            if line.get("thread") == thread:
                self._keep(line["record"])

    def _keep(self, record: dict[str, Any]) -> None:
        key = (record.get("round_index"), record.get("index"))
        self[:] = [r for r in self if (r.get("round_index"), r.get("index")) != key]
        super().append(record)

    def append(self, record: dict[str, Any]) -> None:  # type: ignore[override]
        self.file.append({"seq": len(self.file.rows), "thread": self.thread, "record": record})
        self._keep(record)

    def remove_file(self) -> None:
        self.path.unlink(missing_ok=True)


def write_json_atomically(path: Path, data: Any) -> None:
    """Write to a temporary file, fsync, rename: a reader sees the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, ensure_ascii=False, default=str)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class EpisodeProgress:
    """Two bars on stderr: instances done, and episodes done over every instance of the run (model calls
    when ``episodes_per_instance`` is None: the per-call protocol, one episode of unknown length)."""

    def __init__(self, instances: int, episodes_per_instance: int | None, console: Console | None = None):
        self.per_instance = episodes_per_instance
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=console or Console(stderr=True),
        )
        self.instances = self.progress.add_task("instances", total=instances, info="")
        if episodes_per_instance is None:
            self.episodes = self.progress.add_task("model calls", total=None, info="")
        else:
            self.episodes = self.progress.add_task("episodes", total=instances * episodes_per_instance, info="")
        self.counts = {"patch": 0, "empty": 0, "failed": 0}

    def __enter__(self) -> EpisodeProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.progress.stop()

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("event") in ("trajectory_finished", "trajectory_failed", "model_call_finished"):
            self.progress.advance(self.episodes)

    def instance_done(self, outcome: InstanceOutcome) -> None:
        # A round that failed ends an instance early: count its unplanned episodes as done.
        missing = (self.per_instance or 0) - len(outcome.episodes)
        if missing > 0:
            self.progress.advance(self.episodes, missing)
        kind = "failed" if not outcome.completed else ("patch" if outcome.model_patch.strip() else "empty")
        self.counts[kind] += 1
        info = ", ".join(f"{n} {k}" for k, n in self.counts.items())
        self.progress.update(self.instances, advance=1, info=info)
        lines = outcome.model_patch.count("\n")
        why = f" ({outcome.error})" if outcome.error else ""
        status = {"patch": f"patch of {lines} lines", "empty": f"no patch{why}", "failed": f"failed{why}"}
        self.progress.console.print(f"{outcome.instance_id}: {status[kind]}"[:300])


async def run_instances(
    rows: list[dict],
    solver: SweSolver | PerCallSolver,
    output: Path,
    *,
    model_name: str,
    workers: int = 1,
    settings: dict[str, Any] | None = None,
    progress: Callable[[int, int], EpisodeProgress] | None = None,
) -> RunSummary:
    """Solve every row not yet in ``output/predictions.jsonl``, ``workers`` instances at a time."""
    output.mkdir(parents=True, exist_ok=True)
    predictions = ResultsFile(output / PREDICTIONS_FILE, key=lambda row: row["instance_id"])
    done = predictions.done()
    todo = [row for row in rows if row["instance_id"] not in done]
    summary = RunSummary(total=len(rows), skipped=len(rows) - len(todo), predicted=0, empty=0, failed=0)
    write_json_atomically(output / "run.json", {"settings": settings or {}, "summary": summary.model_dump()})
    gate = asyncio.Semaphore(max(1, workers))
    make_progress = progress or (lambda n, per: EpisodeProgress(n, per))

    with make_progress(len(todo), solver.episodes_per_instance) as bars:

        async def one(row: dict) -> None:
            thread = solver.thread_for(row)
            log = EpisodeLog(episode_log_path(output, row["instance_id"]), thread) if thread else None
            async with gate:
                if log:
                    bars.progress.advance(bars.episodes, len(log))  # finished before a restart
                outcome = await solver.solve(row, on_event=bars.on_event, episodes=log)
            record = {"model_name_or_path": model_name, "settings": settings or {}, **outcome.model_dump()}
            write_json_atomically(trajectory_path(output, row["instance_id"]), record)
            if outcome.completed:
                predictions.append(
                    {
                        "instance_id": row["instance_id"],
                        "model_name_or_path": model_name,
                        "model_patch": outcome.model_patch,
                    }
                )
                # The row is on disk: the checkpoints and the log are spare now (a kill before this only
                # leaves them to be read back, never run again).
                await solver.forget(row)
                if log is not None:
                    log.remove_file()
                if outcome.model_patch.strip():
                    summary.predicted += 1
                else:
                    summary.empty += 1
            else:
                summary.failed += 1
            if outcome.error:
                summary.errors[row["instance_id"]] = outcome.error
            summary.ttc += outcome.ttc
            bars.instance_done(outcome)

        await asyncio.gather(*(one(row) for row in todo))
    write_json_atomically(output / "run.json", {"settings": settings or {}, "summary": summary.model_dump()})
    return summary
