"""The math benchmark: single trajectory, majority vote and PaCoRe side by side on the same problems.

Protocol (the paper's pool replay): per problem, a pool of first-round trajectories is generated once
(``pool.py``). Then
- single: every pooled trajectory is one sample of a single-trajectory run;
- vote@k: per sample, k pooled trajectories drawn reproducibly, majority vote over their answers;
- PaCoRe: per sample, the first round is the same draw as vote@k1, later rounds call the model through
  the operator (the batch engine, with a pool-replaying Explorer);
- PaCoRe with a coordination option (``pacore+early_stop``, ``+budget``, ``+subset``, ``+dedup``, ``+vote``,
  ``+verifier``: the settings of ``pacore bench coordination``), on the same draws.

Everything happens in one run folder (``pacore_graph.RunFolder``): its lock, its settings fingerprint
(grading rules included), its results, checkpoints and progress display. Pooled trajectories and result
rows are appended as they finish and never redone; a PaCoRe run cut by a kill continues from its
checkpoint, redoing only its unfinished trajectories. Grading runs in the event loop's thread (the main
one), where math-verify's ``signal.alarm`` timeouts work.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from rich.console import Console

import pacore_graph
from pacore_benchmarks.math.data import Problem, load_problems
from pacore_benchmarks.math.grading import MathGrader, Verdict
from pacore_benchmarks.math.pool import (
    FirstRound,
    PoolReplayExplorer,
    Pools,
    PoolStore,
    RunAborted,
    as_trajectory,
    draw,
    fill_pools,
)
from pacore_benchmarks.math.report import write_outputs
from pacore_benchmarks.math.rows import pacore_label, pacore_row, row_key, single_row, unit_key, vote_row
from pacore_benchmarks.math.settings import MathRunSettings
from pacore_benchmarks.math.summary import Point
from pacore_graph import PaCoReError, RunFolder
from pacore_graph.extend import ProblemOutcome, ResultsFile, RunProgress


class UnitFailure(BaseModel):
    problem_id: str
    label: str
    sample: int | None
    error: str


class MathReport(BaseModel):
    points: list[Point]
    failures: list[UnitFailure]
    problems: int = 0
    rows: int
    output: Path
    png: Path | None
    table: Path | None


def _explorer_model_name(explorer: Any) -> str:
    model = getattr(explorer, "model", None)
    for attribute in ("model", "model_name"):
        name = getattr(model, attribute, None)
        if isinstance(name, str) and name:
            return name
    return type(model or explorer).__name__


def math_folder(settings: MathRunSettings, model_name: str, progress: RunProgress | bool = True) -> RunFolder:
    """The benchmark's run folder: claim it before starting a server to refuse a folder in use or made with
    other settings at once."""
    return RunFolder(
        settings.output,
        fingerprint=settings.fingerprint(model_name),
        settings=settings.model_dump(mode="json"),
        key=row_key,
        progress=progress,
        max_concurrency=settings.max_concurrency,
    )


class MathBenchmark:
    """One benchmark run over a dataset; ``arun`` may be called again on the same output to resume.

    ``folder``: the run folder (:func:`math_folder`), if the caller made (and claimed) it already.
    """

    def __init__(
        self,
        settings: MathRunSettings,
        explorer: Any,
        *,
        console: Console | None = None,
        progress: bool = True,
        grader: MathGrader | None = None,
        folder: RunFolder | None = None,
    ):
        self.settings = settings
        self.explorer = explorer  # pool generation and the calls of PaCoRe's later rounds go through it
        self.grader = grader or MathGrader()
        self.model_name = _explorer_model_name(explorer)
        self.folder = folder or math_folder(settings, self.model_name, RunProgress(console, enabled=progress))
        self.progress = self.folder.progress
        self.failures: list[UnitFailure] = []

    @property
    def output(self) -> Path:
        return self.settings.output

    def _grade(self, response: str, gold: str) -> Verdict:
        return self.grader.grade(response, gold)

    async def arun(self) -> MathReport:
        settings = self.settings
        problems = load_problems(settings.data, settings.limit)
        started = time.monotonic()
        async with self.folder as run:
            pool = PoolStore(settings.pool_path, model=self.model_name, max_tokens=settings.max_tokens)
            for problem in problems:
                pool.check(problem.id, problem.asked_text())
            pools = await self._fill_pools(problems, pool, run)
            self._pool_rows(pools, run.results)
            await self._pacore(pools, run)
            report = self._report(run.results, [p.id for p in problems])
        self.progress.print(
            f"math benchmark: {len(problems)} problems, {report.rows} result rows, "
            f"{len(self.failures)} failed unit(s), {time.monotonic() - started:.0f} s"
        )
        return report

    def _fail(self, problem_id: str, label: str, sample: int | None, exc: BaseException) -> None:
        error = f"{type(exc).__name__}: {exc}"
        self.failures.append(UnitFailure(problem_id=problem_id, label=label, sample=sample, error=error[:2000]))
        self.progress.print(f"[red]{problem_id} {label} sample {sample}: {error[:300]}")

    # -- the pool: one model call per trajectory, with the operator's retries and accounting ---------------
    async def _fill_pools(self, problems: list[Problem], pool: PoolStore, run: RunFolder) -> Pools:
        config = self.settings.pacore_config([1], 0)  # its retries and request timeout
        return await fill_pools(
            problems,
            pool,
            self.settings.pool_size,
            self.explorer,
            config,
            self._grade,
            run,
            on_failure=lambda problem, error: self._fail(problem.id, "pool", None, error),
        )

    # -- single and vote: no model calls ---------------------------------------------------------------
    def _pool_rows(self, pools: Pools, results: ResultsFile) -> None:
        settings = self.settings
        done = results.done()
        for problem, rows in pools.values():
            if "single" in settings.methods:
                for row in rows:
                    if unit_key("single", problem.id, row["index"]) not in done:
                        results.append(single_row(problem, row))
            for k in settings.effective_vote_ks:
                for sample in range(settings.samples):
                    if unit_key(f"vote@{k}", problem.id, sample) not in done:
                        results.append(vote_row(problem, rows, k, sample, settings.seed, self.grader))

    # -- PaCoRe through the batch engine -------------------------------------------------------------------
    async def _pacore(self, pools: Pools, run: RunFolder) -> None:
        """One engine run per (schedule, variant, sample): its problems are the problems with a full pool, each
        with its drawn first round as the payload the replaying explorer reads."""
        settings = self.settings
        replay = PoolReplayExplorer(self.explorer)
        runs = []
        for rounds, variant in settings.pacore_units:
            paced = variant in ("early_stop", "budget")  # they cut rounds short: finish order and partial tokens matter
            for sample in range(settings.samples):
                units: dict[str, tuple[Problem, list[int]]] = {}
                problems = []
                for problem, rows in pools.values():
                    indices = draw(len(rows), rounds[0], problem_id=problem.id, sample=sample, seed=settings.seed)
                    key = unit_key(pacore_label(rounds, variant), problem.id, sample)
                    units[key] = (problem, indices)
                    first_round = FirstRound([as_trajectory(rows[i]) for i in indices], paced)
                    problems.append(pacore_graph.Problem(key, problem.messages(), first_round))
                row = partial(self._pacore_row, rounds, variant, sample, units)
                config = settings.pacore_config(rounds, sample, variant)
                runs.append(run.run(replay, config, problems, row, label="evaluations"))
        await asyncio.gather(*runs)

    def _pacore_row(
        self,
        rounds: list[int],
        variant: str,
        sample: int,
        units: dict[str, tuple[Problem, list[int]]],
        outcome: ProblemOutcome,
    ) -> dict[str, Any] | None:
        problem, indices = units[outcome.problem.id]
        if outcome.result is None:  # left for the next run, which resumes its checkpoint
            self._fail(problem.id, pacore_label(rounds, variant), sample, outcome.error or PaCoReError("no result"))
            return None
        verdict = self._grade(outcome.result.answer, problem.answer)
        cut_tokens = outcome.problem.payload.cut_tokens
        return pacore_row(problem, rounds, variant, sample, indices, outcome.result, verdict, cut_tokens)

    # -- outputs ---------------------------------------------------------------------------------------
    def _report(self, results: ResultsFile, problem_ids: list[str]) -> MathReport:
        wanted = self._wanted_labels()
        rows = [row for row in results.rows if row["problem_id"] in set(problem_ids) and row["label"] in wanted]
        failed = {f.problem_id for f in self.failures}
        complete = [p for p in problem_ids if p not in failed]
        points, png, table = write_outputs(
            self.output,
            rows,
            problem_ids,
            complete,
            [f.model_dump() for f in self.failures],
            title=f"{Path(self.settings.data).stem} · {self.model_name}",
        )
        return MathReport(
            points=points,
            failures=self.failures,
            problems=len(problem_ids),
            rows=len(rows),
            output=self.output,
            png=png,
            table=table,
        )

    def _wanted_labels(self) -> set[str]:
        labels = {f"vote@{k}" for k in self.settings.effective_vote_ks}
        labels |= {pacore_label(rounds, variant) for rounds, variant in self.settings.pacore_units}
        if "single" in self.settings.methods:
            labels.add("single")
        return labels


__all__ = ["MathBenchmark", "MathReport", "MathRunSettings", "RunAborted", "UnitFailure"]
