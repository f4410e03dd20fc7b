"""``pacore bench math export-train``: PaCoRe training data made from the model's own pool (paper Sec. 3).

PaCoRe trains one round as an RL episode: a problem, a message set M drawn from a cached pool of the
model's own first-round responses, and a sparse reward for the synthesis. The data is filtered twice:

- Stage 1 keeps a problem when the accuracy of its pooled messages is strictly between two bounds (the
  paper's math setting: 0 and 9/24), where naive aggregation of the messages does not already answer it;
- Stage 2 runs the synthesis itself over draws of M (|M| ~ U(16, 24), capped by the pool) and keeps a
  problem when that accuracy is strictly between two bounds (the paper's: 0 and 1).

Everything goes through the math benchmark's parts: the pool (``pool.py``: generated once, appended as it
finishes, replayed), the operator's own compaction of each trajectory (``passed_on``: exactly what its next
round would see; those it would drop are left out), MathArena grading, and the synthesis as a real PaCoRe
run of schedule [|M|] whose first round replays the drawn pool trajectories (the operator's template,
reference order and accounting). The run folder (lock, fingerprint, results, checkpoints, progress) makes
it resumable: pooled trajectories and synthesis runs are never redone, and the export, its summary and
its plot are made again from them on every run, so changing a filter costs no model call.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import pacore_graph
from pacore_benchmarks.math.data import Problem, load_problems
from pacore_benchmarks.math.export_report import ExportCounts, plot_accuracies, summary_json
from pacore_benchmarks.math.grading import MathGrader, Verdict
from pacore_benchmarks.math.pool import FirstRound, PoolReplayExplorer, Pools, PoolStore, as_trajectory, fill_pools
from pacore_benchmarks.math.settings import MESSAGE_SET_SIZES, ExportSettings, kept
from pacore_benchmarks.math.train_format import train_row
from pacore_graph import PaCoReError, RoundFailedError, RunFolder
from pacore_graph.extend import Explorer, ProblemOutcome, RunProgress, passed_on, write_json_atomically

EXPORT_FILE = "train.jsonl"


class ExportError(ValueError):
    """The export cannot go on as asked (no pool to read, a model needed and none given)."""


def draw_message_set(responses: int, *, problem_id: str, sample: int, seed: int = 0) -> list[int]:
    """One synthesis sample's message set: |M| ~ U(16, 24) as in the paper, capped by the responses there
    are; positions into the problem's ``responses``, reproducible from (seed, problem, sample)."""
    rng = random.Random(f"{seed}:{problem_id}:message-set:{sample}")
    size = min(rng.randint(*MESSAGE_SET_SIZES), responses)
    return sorted(rng.sample(range(responses), size))


def synthesis_unit(problem_id: str, sample: int, pool_indices: list[int]) -> str:
    """A synthesis run's id: its problem, sample and the pooled trajectories it was given (a pool that grew
    gives another draw, never a stale row)."""
    drawn = hashlib.sha256(",".join(map(str, pool_indices)).encode()).hexdigest()[:10]
    return f"synthesis|{problem_id}|{sample}|{drawn}"


@dataclass
class Candidate:
    """A pooled problem: the trajectories the operator passes on (pool rows) and their graded conclusions."""

    problem: Problem
    rows: list[dict[str, Any]]
    responses: list[str]
    correct: list[bool]

    @property
    def message_accuracy(self) -> float:
        return sum(self.correct) / len(self.correct) if self.correct else 0.0


class ExportReport(BaseModel):
    counts: ExportCounts
    export: Path
    summary: Path
    png: Path | None
    failures: dict[str, str]


def export_folder(settings: ExportSettings, model_name: str, progress: RunProgress | bool = True) -> RunFolder:
    """The export's run folder: claim it before starting a server, to refuse a folder in use or made with
    other settings at once."""
    return RunFolder(
        settings.output,
        fingerprint=settings.fingerprint(model_name),
        settings=settings.model_dump(mode="json"),
        key=lambda row: row["unit"],
        progress=progress,
        max_concurrency=settings.max_concurrency,
    )


class TrainExport:
    """One export; ``arun`` may be called again on the same output to resume (or to filter again).

    ``explorer`` makes the missing pool trajectories and the synthesis runs; None when :meth:`pending` says
    nothing is left to generate. ``model_name`` names the model the pool was (or is) made with.
    """

    def __init__(
        self,
        settings: ExportSettings,
        explorer: Explorer | None,
        *,
        model_name: str,
        folder: RunFolder | None = None,
        grader: MathGrader | None = None,
        progress: bool = True,
    ):
        self.settings = settings
        self.explorer = explorer
        self.model_name = model_name
        self.grader = grader or MathGrader()
        self.folder = folder or export_folder(settings, model_name, RunProgress(enabled=progress))
        self.progress = self.folder.progress
        self.problems = load_problems(settings.data, settings.limit)
        self.failures: dict[str, str] = {}  # problem id -> why it is not exported this time (rerun to retry)
        self.pool_failures: set[str] = set()
        self._pool: PoolStore | None = None
        self._graded: list[Candidate] | None = None  # made by pending() when the pool was complete then
        self._pending: tuple[int, int] | None = None

    @property
    def config(self) -> pacore_graph.PaCoReConfig:
        return self.settings.pacore_config([1], 0)  # the pool calls' retries, timeout, compaction rules

    def pool(self) -> PoolStore:
        """The pool file, checked against this model, token cap and each problem's prompt."""
        if self._pool is None:
            pool = PoolStore(self.settings.pool_path, model=self.model_name, max_tokens=self.settings.max_tokens)
            for problem in self.problems:
                pool.check(problem.id, problem.asked_text())
            if self.settings.pool is None and not any(pool.rows(p.id) for p in self.problems):
                raise ExportError(
                    f"{self.settings.pool_path} holds no pooled trajectories of these problems: pass --pool N to "
                    "generate N per problem (the paper pools 24), or --pool-file of a math run's pool.jsonl"
                )
            self._pool = pool
        return self._pool

    # -- what is left to generate (so a server starts only when needed) -----------------------------------
    def pending(self) -> tuple[int, int]:
        """(pool trajectories, synthesis runs) still to make; the folder must be claimed. Synthesis runs are
        counted only once the pool is complete (before that, stage 1 is not known yet)."""
        if self._pending is None:
            pool = self.pool()
            size = self.settings.pool
            missing = sum(len(pool.missing(p.id, size)) for p in self.problems) if size is not None else 0
            self._pending = (missing, 0)
            if not missing and self.settings.synthesis_samples:
                done = self.folder.results.done()
                rows = {p.id: [r for r in pool.rows(p.id) if size is None or r["index"] < size] for p in self.problems}
                self._graded = self._candidates({p.id: (p, rows[p.id]) for p in self.problems if rows[p.id]})
                units = self._units(self._stage1(self._graded))
                self._pending = (0, sum(1 for key in units if key not in done))
        return self._pending

    # -- the run ------------------------------------------------------------------------------------------
    async def arun(self) -> ExportReport:
        settings = self.settings
        async with self.folder as run:
            pool = self.pool()
            if self.explorer is None and self.pending() != (0, 0):
                raise ExportError("the pool or the synthesis runs need a model: give the export an explorer")
            pools = await fill_pools(
                self.problems,
                pool,
                settings.pool,
                self.explorer,
                self.config,
                self.grader.grade,
                run,
                on_failure=self._pool_failed,
            )
            candidates = self._graded if self._graded is not None else self._candidates(pools)
            stage1 = self._stage1(candidates)
            if settings.synthesis_samples:
                await self._synthesize(stage1, run)
            report = self._write(candidates, stage1, run)
        return report

    def _pool_failed(self, problem: Problem, error: BaseException) -> None:
        self.pool_failures.add(problem.id)
        self._fail(problem.id, error)

    def _fail(self, problem_id: str, error: BaseException) -> None:
        self.failures[problem_id] = f"{type(error).__name__}: {error}"[:2000]
        self.progress.print(f"[red]{problem_id}: {self.failures[problem_id][:300]}")

    def _candidates(self, pools: Pools) -> list[Candidate]:
        """Each pooled problem's responses as the operator passes them on, graded (MathArena's rules)."""
        self.progress.add("graded problems", len(pools))
        candidates = []
        for problem, rows in pools.values():
            seen = [(row, passed_on(as_trajectory(row), self.config)) for row in rows]
            passed = [(row, text) for row, text in seen if text is not None]
            candidates.append(
                Candidate(
                    problem=problem,
                    rows=[row for row, _ in passed],
                    responses=[text for _, text in passed],
                    correct=[self.grader.grade(text, problem.answer).correct for _, text in passed],
                )
            )
            self.progress.advance("graded problems")
        return candidates

    def _stage1(self, candidates: list[Candidate]) -> list[Candidate]:
        low, high = self.settings.min_message_accuracy, self.settings.max_message_accuracy
        return [c for c in candidates if c.responses and kept(c.message_accuracy, low, high)]

    def _units(self, stage1: list[Candidate]) -> dict[str, tuple[Candidate, int, list[int]]]:
        """Every synthesis run wanted: unit id -> (problem, sample, positions of its message set)."""
        units = {}
        for candidate in stage1:
            for sample in range(self.settings.synthesis_samples):
                positions = draw_message_set(
                    len(candidate.responses), problem_id=candidate.problem.id, sample=sample, seed=self.settings.seed
                )
                key = synthesis_unit(candidate.problem.id, sample, [candidate.rows[i]["index"] for i in positions])
                units[key] = (candidate, sample, positions)
        return units

    async def _synthesize(self, stage1: list[Candidate], run: RunFolder) -> None:
        """One PaCoRe run of schedule [|M|] per unit, its first round the drawn pool trajectories replayed:
        the model's only call is the synthesis, over the operator's own prompt."""
        groups: dict[tuple[int, int], list[pacore_graph.Problem]] = {}
        units = self._units(stage1)
        for key, (candidate, sample, positions) in units.items():
            first_round = FirstRound([as_trajectory(candidate.rows[i]) for i in positions])
            groups.setdefault((len(positions), sample), []).append(
                pacore_graph.Problem(key, candidate.problem.messages(), first_round)
            )
        replay = PoolReplayExplorer(self.explorer)
        await asyncio.gather(
            *(
                run.run(
                    replay,
                    self.settings.pacore_config([size], sample),
                    problems,
                    partial(self._row, units),
                    label="synthesis runs",
                )
                for (size, sample), problems in groups.items()
            )
        )

    def _row(
        self, units: dict[str, tuple[Candidate, int, list[int]]], outcome: ProblemOutcome
    ) -> dict[str, Any] | None:
        candidate, sample, positions = units[outcome.problem.id]
        problem = candidate.problem
        error = outcome.error
        if isinstance(error, RoundFailedError) and not any(t.failed for t in error.round.trajectories):
            # the synthesis finished without a conclusion (cut at the token cap, an unclosed <think>): a wrong
            # answer, as a reward would score it, not a failure to retry
            verdict, conclusion = Verdict(correct=False, flag="no_conclusion"), ""
            tokens = error.round.completion_tokens
        elif outcome.result is None:  # left for the next run, which resumes its checkpoint
            self._fail(problem.id, error or PaCoReError("no result"))
            return None
        else:
            conclusion, tokens = outcome.result.answer, outcome.result.rounds[-1].completion_tokens
            verdict = self.grader.grade(conclusion, problem.answer)
        return {
            "unit": outcome.problem.id,
            "label": "synthesis",
            "problem_id": problem.id,
            "sample": sample,
            "gold": problem.answer,
            "responses": positions,
            "pool_indices": [candidate.rows[i]["index"] for i in positions],
            "answer": verdict.extracted,
            "correct": verdict.correct,
            "flag": verdict.flag,
            "synthesis_tokens": tokens,
            "conclusion": conclusion,
        }

    # -- outputs -------------------------------------------------------------------------------------------
    def _write(self, candidates: list[Candidate], stage1: list[Candidate], run: RunFolder) -> ExportReport:
        settings = self.settings
        by_unit = {row["unit"]: row for row in run.results.rows}
        units = self._units(stage1) if settings.synthesis_samples else {}
        measured: dict[str, list[dict[str, Any] | None]] = {}  # None: a draw with no row yet
        for key, (candidate, _, _) in units.items():
            measured.setdefault(candidate.problem.id, []).append(by_unit.get(key))
        rows, synthesis_accuracies, synthesis_failed = [], [], 0
        for candidate in stage1:
            synthesis = None
            if settings.synthesis_samples:
                draws = measured.get(candidate.problem.id, [])
                finished = [draw for draw in draws if draw is not None]
                if len(finished) < len(draws):
                    synthesis_failed += 1  # reported as it failed; the next run retries it
                    continue
                synthesis = _synthesis(finished, settings.seed)
                synthesis_accuracies.append(synthesis["accuracy"])
                if not kept(synthesis["accuracy"], settings.min_synthesis_accuracy, settings.max_synthesis_accuracy):
                    continue
            rows.append(train_row(candidate.problem, candidate.responses, candidate.message_accuracy, synthesis))
        export = settings.output / EXPORT_FILE
        _write_lines(export, rows)
        counts = ExportCounts(
            problems=len(self.problems),
            pooled=len(candidates),
            pool_failed=len(self.pool_failures),
            no_responses=sum(1 for c in candidates if not c.responses),
            stage1=len(stage1),
            synthesized=len(synthesis_accuracies) if settings.synthesis_samples else None,
            synthesis_failed=synthesis_failed,
            exported=len(rows),
        )
        message_accuracies = [c.message_accuracy for c in candidates if c.responses]
        png = plot_accuracies(
            settings.output / "accuracy.png",
            message_accuracies,
            synthesis_accuracies,
            settings,
            counts,
            title=f"{Path(settings.data).stem} · {self.model_name}",
            pool_size=max((len(c.responses) for c in candidates), default=1),
        )
        summary = settings.output / "summary.json"
        write_json_atomically(summary, summary_json(counts, settings, message_accuracies, synthesis_accuracies))
        return ExportReport(counts=counts, export=export, summary=summary, png=png, failures=self.failures)


def _synthesis(draws: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    """What an exported row records of its synthesis runs: the accuracy and each seeded draw."""
    draws = sorted(draws, key=lambda row: row["sample"])
    return {
        "accuracy": sum(bool(row["correct"]) for row in draws) / len(draws),
        "seed": seed,
        "draws": [
            {"sample": row["sample"], "responses": row["responses"], "answer": row["answer"], "correct": row["correct"]}
            for row in draws
        ],
    }


def _write_lines(path: Path, rows: list[dict[str, Any]]) -> None:
    """The export, whole or not at all: written beside it, then renamed over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
