"""The math benchmark: single trajectory, majority vote and PaCoRe side by side on the same problems.

Protocol (the paper's pool replay): per problem, a pool of first-round trajectories is generated once
(``pool.py``). Then
- single: every pooled trajectory is one sample of a single-trajectory run;
- vote@k: per sample, k pooled trajectories drawn reproducibly, majority vote over their answers;
- PaCoRe: per sample, the first round is the same draw as vote@k1, later rounds call the model through
  the real operator (``PaCoReRunner`` with a pool-replaying Explorer);
- PaCoRe with a coordination option (``pacore+early_stop``, ``+budget``, ``+subset``, ``+dedup``, ``+vote``,
  ``+verifier``: the settings of ``pacore bench coordination``), on the same draws.

Resume: result rows and pooled trajectories are appended atomically as they finish and are never redone;
a PaCoRe run in flight is checkpointed by LangGraph (SQLite, ``checkpoints.sqlite``), so a restarted
run redoes only its unfinished trajectories. Grading runs in the event loop's thread (the main one),
where math-verify's ``signal.alarm`` timeouts work.
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Literal

from langchain_core.messages import BaseMessage, HumanMessage
from pydantic import BaseModel, Field, field_validator, model_validator
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pacore_benchmarks.math.data import Problem, load_problems
from pacore_benchmarks.math.grading import MathGrader, Verdict
from pacore_benchmarks.math.plot import markdown_table, per_problem_table, plot_curve
from pacore_benchmarks.math.pool import PoolError, PoolReplayExplorer, PoolStore, as_trajectory, draw
from pacore_benchmarks.math.summary import Point, per_problem, schedule_label, summarize
from pacore_benchmarks.perf.coordination import VARIANTS, method_options
from pacore_benchmarks.results import ResultsFile
from pacore_graph.accounting import completion_tokens
from pacore_graph.config import PRESETS, PaCoReConfig
from pacore_graph.coordination.vote import majority_vote
from pacore_graph.episode import EpisodeContext
from pacore_graph.errors import ModelRequestError, PaCoReError
from pacore_graph.retry import with_retries
from pacore_graph.run import PaCoReRunner, build_result

Method = Literal["single", "vote", "pacore"]
METHODS: tuple[Method, ...] = ("single", "vote", "pacore")


class MathRunSettings(BaseModel):
    """Everything that decides what a math benchmark run computes."""

    data: str
    output: Path
    limit: int | None = Field(None, ge=1)
    methods: list[Method] = Field(default_factory=lambda: list(METHODS))
    schedules: list[list[int]] = Field(default_factory=lambda: [PRESETS["low"], PRESETS["medium"], PRESETS["high"]])
    vote_ks: list[int] | None = Field(None, description="vote sizes; default: the first round of each schedule")
    samples: int = Field(1, ge=1, description="samples per problem for vote and PaCoRe (pass@1 is their mean)")
    pool: int | None = Field(None, ge=1, description="pooled first-round trajectories per problem")
    pool_file: Path | None = Field(None, description="default: OUTPUT/pool.jsonl")
    seed: int = 0
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_inflight: int = Field(256, ge=1, description="model calls in flight across the whole benchmark")
    pacore_overrides: dict[str, Any] = Field(default_factory=dict, description="extra PaCoReConfig fields")
    coordination: list[str] = Field(
        default_factory=list, description=f"PaCoRe variants to run beside it: {', '.join(VARIANTS)}"
    )
    budget_tokens: int | None = Field(None, ge=1, description="token budget per problem of the budget variant")

    @field_validator("coordination")
    @classmethod
    def _known_variants(cls, variants: list[str]) -> list[str]:
        unknown = [variant for variant in variants if variant not in VARIANTS]
        if unknown:
            raise ValueError(f"unknown coordination variant {unknown[0]!r}: choose from {', '.join(VARIANTS)}")
        return list(dict.fromkeys(variants))

    @field_validator("methods")
    @classmethod
    def _unique_methods(cls, methods: list[Method]) -> list[Method]:
        return list(dict.fromkeys(methods))

    @field_validator("schedules")
    @classmethod
    def _valid_schedules(cls, schedules: list[list[int]]) -> list[list[int]]:
        for rounds in schedules:
            if not rounds:
                raise ValueError("an empty schedule is a single plain call: use --methods single for that")
            PaCoReConfig(rounds=rounds)  # the operator's own validation and message
        unique: list[list[int]] = []
        for rounds in schedules:
            if rounds not in unique:
                unique.append(list(rounds))
        return unique

    @model_validator(mode="after")
    def _something_to_run(self) -> MathRunSettings:
        if not self.methods and not self.coordination:
            raise ValueError("--methods needs at least one of single, vote, pacore, pacore+OPTION")
        if "budget" in self.coordination and self.budget_tokens is None:
            raise ValueError("pacore+budget needs --budget-tokens (completion tokens per problem)")
        return self

    @model_validator(mode="after")
    def _pool_is_big_enough(self) -> MathRunSettings:
        needed = self.pool_needed
        if self.pool is not None and self.pool < needed:
            raise ValueError(
                f"--pool {self.pool} is too small: the largest first round / vote here draws {needed} "
                f"distinct trajectories per problem (pass --pool {needed} or more)"
            )
        return self

    @property
    def effective_vote_ks(self) -> list[int]:
        if "vote" not in self.methods:
            return []
        ks = self.vote_ks if self.vote_ks is not None else [rounds[0] for rounds in self.schedules]
        return sorted({k for k in ks if k >= 2})

    @property
    def pacore_schedules(self) -> list[list[int]]:
        return self.schedules if "pacore" in self.methods or self.coordination else []

    @property
    def pacore_units(self) -> list[tuple[list[int], str]]:
        """(schedule, variant) of every PaCoRe setting; variant "" is the paper's."""
        variants = ([""] if "pacore" in self.methods else []) + self.coordination
        return [(rounds, variant) for rounds in self.schedules for variant in variants]

    @property
    def pool_needed(self) -> int:
        draws = [rounds[0] for rounds in self.pacore_schedules] + self.effective_vote_ks
        if "single" in self.methods:
            draws.append(self.samples)
        return max(draws + [1])

    @property
    def pool_size(self) -> int:
        return self.pool or self.pool_needed

    def pacore_config(self, rounds: list[int], sample: int, variant: str = "") -> PaCoReConfig:
        coordination = method_options(variant, budget_tokens=self.budget_tokens) if variant else {}
        return PaCoReConfig(
            rounds=rounds,
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_tokens,
            seed=shuffle_seed(self.seed, sample),
            **self.pacore_overrides,
            **coordination,
        )


REFERENCE_SEED: int = PaCoReConfig.model_fields["seed"].default  # 42, the reference pipeline's Exp.random_seed


def shuffle_seed(seed: int, sample: int) -> int:
    """The reference shuffle's seed of one sample: the reference pipeline's 42 for the first sample of the
    default ``--seed 0``, then one apart per sample (so samples differ) and far apart per ``--seed``."""
    return REFERENCE_SEED + seed * 1_000_003 + sample


def pacore_label(rounds: list[int], variant: str = "") -> str:
    """``pacore[32,4]``, or with a coordination variant ``pacore[32,4]+early_stop``."""
    return schedule_label(rounds) + (f"+{variant}" if variant else "")


class RunAborted(PaCoReError):
    """A failure every further call would repeat (wrong model name, bad API key): stop, keep what is done."""


def _refused(exc: BaseException) -> bool:
    return isinstance(exc, ModelRequestError) and exc.status in (401, 403, 404)


class UnitFailure(BaseModel):
    problem_id: str
    label: str
    sample: int | None
    error: str


class MathReport(BaseModel):
    points: list[Point]
    failures: list[UnitFailure]
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


class _Board:
    """The rich progress display: pool trajectories, then evaluation units."""

    def __init__(self, console: Console, enabled: bool):
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[note]}"),
            console=console,
            disable=not enabled,
        )
        self.pool = self.progress.add_task("pool trajectories", total=0, note="")
        self.units = self.progress.add_task("evaluations", total=0, note="")
        self.failed = 0

    def grow(self, task: Any, amount: int) -> None:
        self.progress.update(task, total=(self.progress.tasks[task].total or 0) + amount)

    def advance(self, task: Any) -> None:
        self.progress.advance(task)

    def fail(self) -> None:
        self.failed += 1
        self.progress.update(self.units, note=f"[red]{self.failed} failed")


class MathBenchmark:
    """One benchmark run over a dataset; ``arun`` may be called again on the same output to resume."""

    def __init__(
        self,
        settings: MathRunSettings,
        explorer: Any,
        *,
        console: Console | None = None,
        progress: bool = True,
        grader: MathGrader | None = None,
    ):
        self.settings = settings
        self.explorer = explorer  # round >= 2 calls and pool generation go through it
        self.console = console or Console(stderr=True)
        self.show_progress = progress
        self.grader = grader or MathGrader()
        self.model_name = _explorer_model_name(explorer)
        self.failures: list[UnitFailure] = []

    # -- paths -------------------------------------------------------------------------------------
    @property
    def output(self) -> Path:
        return self.settings.output

    @property
    def pool_path(self) -> Path:
        return self.settings.pool_file or self.output / "pool.jsonl"

    # -- grading (always on the loop's thread: the main thread) -----------------------------------------
    def _grade(self, response: str, gold: str) -> Verdict:
        return self.grader.grade(response, gold)

    # -- the run ------------------------------------------------------------------------------------
    async def arun(self) -> MathReport:
        settings = self.settings
        problems = load_problems(settings.data, settings.limit)
        self.output.mkdir(parents=True, exist_ok=True)
        self._check_output_settings()
        results = ResultsFile(
            self.output / "results.jsonl", key=lambda row: (row["label"], row["problem_id"], row["sample"])
        )
        if results.torn_lines:
            self.console.print(f"[yellow]dropped {results.torn_lines} torn line(s) from {results.path}")
        pool = PoolStore(self.pool_path, model=self.model_name, max_tokens=settings.max_tokens)
        for problem in problems:
            pool.check(problem.id, problem.prompt())
        call_limit = asyncio.Semaphore(settings.max_inflight)
        board = _Board(self.console, self.show_progress)
        started = time.monotonic()
        async with AsyncExitStack() as stack:
            checkpointer = await self._checkpointer(stack)
            try:
                with board.progress:
                    async with asyncio.TaskGroup() as group:
                        for problem in problems:
                            group.create_task(self._problem(problem, pool, results, call_limit, checkpointer, board))
            except* RunAborted as aborted:
                first = aborted.exceptions[0]
                raise RunAborted(f"{first} (finished results are kept in {self.output})") from None
        report = self._report(results, [p.id for p in problems])
        elapsed = time.monotonic() - started
        self.console.print(
            f"math benchmark: {len(problems)} problems, {report.rows} result rows, "
            f"{len(self.failures)} failed unit(s), {elapsed:.0f} s"
        )
        return report

    def _fingerprint(self) -> dict[str, Any]:
        """What results in one folder must share: rows made under other values would not be comparable."""
        s = self.settings
        return {
            "model": self.model_name,
            "pool_size": s.pool_size,
            "seed": s.seed,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_tokens,
            "pacore_overrides": s.pacore_overrides,
            "budget_tokens": s.budget_tokens,
        }

    def _check_output_settings(self) -> None:
        path = self.output / "settings.json"
        fingerprint = self._fingerprint()
        if path.exists():
            try:
                stored = json.loads(path.read_text()).get("fingerprint", {})
            except (json.JSONDecodeError, AttributeError):
                stored = {}
            differing = [
                f"{k}: folder has {stored[k]!r}, this run {v!r}"
                for k, v in fingerprint.items()
                if k in stored and stored[k] != v
            ]
            if differing:
                raise ValueError(
                    f"{self.output} holds results made with other settings ({'; '.join(differing)}); "
                    "pass another --output to keep both"
                )
        payload = {"fingerprint": fingerprint, "settings": json.loads(self.settings.model_dump_json())}
        path.write_text(json.dumps(payload, indent=2) + "\n")

    async def _checkpointer(self, stack: AsyncExitStack) -> Any:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver  # noqa: PLC0415

        return await stack.enter_async_context(
            AsyncSqliteSaver.from_conn_string(str(self.output / "checkpoints.sqlite"))
        )

    def _fail(self, board: _Board, problem_id: str, label: str, sample: int | None, exc: BaseException) -> None:
        error = f"{type(exc).__name__}: {exc}"
        self.failures.append(UnitFailure(problem_id=problem_id, label=label, sample=sample, error=error[:2000]))
        board.fail()
        self.console.print(f"[red]{problem_id} {label} sample {sample}: {error[:300]}")

    async def _problem(
        self,
        problem: Problem,
        pool: PoolStore,
        results: ResultsFile,
        call_limit: asyncio.Semaphore,
        checkpointer: Any,
        board: _Board,
    ) -> None:
        settings = self.settings
        messages: list[BaseMessage] = [HumanMessage(content=problem.prompt())]
        try:
            rows = await self._fill_pool(problem, messages, pool, call_limit, board)
        except RunAborted:
            raise
        except Exception as exc:  # noqa: BLE001 - one problem's failure must not stop the others
            self._fail(board, problem.id, "pool", None, exc)
            return
        done = results.done()
        if "single" in settings.methods:
            for row in rows:
                if ("single", problem.id, row["index"]) not in done:
                    results.append(self._single_row(problem, row))
        for k in settings.effective_vote_ks:
            for sample in range(settings.samples):
                if (f"vote@{k}", problem.id, sample) not in done:
                    results.append(self._vote_row(problem, rows, k, sample))
        units = [
            (rounds, variant, sample)
            for rounds, variant in settings.pacore_units
            for sample in range(settings.samples)
            if (pacore_label(rounds, variant), problem.id, sample) not in done
        ]
        board.grow(board.units, len(units))
        await asyncio.gather(
            *(
                self._pacore_unit(problem, messages, rows, rounds, variant, sample, results, call_limit, checkpointer,
                                  board)
                for rounds, variant, sample in units
            )
        )  # fmt: skip

    # -- the pool -----------------------------------------------------------------------------------
    async def _fill_pool(
        self,
        problem: Problem,
        messages: list[BaseMessage],
        pool: PoolStore,
        call_limit: asyncio.Semaphore,
        board: _Board,
    ) -> list[dict[str, Any]]:
        size = self.settings.pool_size
        missing = pool.missing(problem.id, size)
        board.grow(board.pool, len(missing))
        config = self.settings.pacore_config([1], 0)

        async def one(index: int) -> None:
            async def attempt():
                return await self.explorer.explore(messages, EpisodeContext(round_index=0, index=index))

            trajectory, attempts = await with_retries(attempt, config.retry, config.request_timeout, slot=call_limit)
            tokens, approximate = completion_tokens(
                trajectory.completion_tokens, trajectory.content, trajectory.reasoning
            )
            trajectory.completion_tokens = tokens
            verdict = self._grade(trajectory.content, problem.answer)
            pool.add(
                problem.id,
                index,
                problem.prompt(),
                trajectory,
                tokens_approximate=approximate,
                attempts=attempts,
                answer=verdict.extracted,
                correct=verdict.correct,
                flag=verdict.flag,
            )
            board.advance(board.pool)

        outcomes = await asyncio.gather(*(one(i) for i in missing), return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        fatal = next((e for e in errors if _refused(e)), None)
        if fatal is not None:
            raise RunAborted(
                f"the server refused the request, so every call would fail: {fatal} (check --model, "
                "--base-url and --api-key)"
            )
        if errors:
            raise PoolError(
                f"{len(errors)} of {len(missing)} pool trajectories failed after retries (the others are kept; "
                f"rerun to retry): {type(errors[0]).__name__}: {errors[0]}"
            )
        return pool.rows(problem.id)[:size]

    # -- single and vote: no model calls ------------------------------------------------------------------
    def _base_row(self, problem: Problem, method: Method, label: str, sample: int) -> dict[str, Any]:
        return {"method": method, "label": label, "problem_id": problem.id, "sample": sample, "gold": problem.answer}

    def _single_row(self, problem: Problem, row: dict[str, Any]) -> dict[str, Any]:
        return {
            **self._base_row(problem, "single", "single", row["index"]),
            "answer": row.get("answer"),
            "correct": bool(row.get("correct")),
            "flag": row.get("flag"),
            "ttc": row.get("completion_tokens") or 0,
            "pool_indices": [row["index"]],
        }

    def _vote_row(self, problem: Problem, rows: list[dict[str, Any]], k: int, sample: int) -> dict[str, Any]:
        indices = draw(len(rows), k, problem_id=problem.id, sample=sample, seed=self.settings.seed)
        chosen = [rows[i] for i in indices]
        vote = majority_vote([r.get("answer") for r in chosen], self.grader.equivalent)
        verdict = self.grader.grade_answer(vote.answer, problem.answer, None if vote.answer else "no_boxed")
        return {
            **self._base_row(problem, "vote", f"vote@{k}", sample),
            "answer": vote.answer,
            "correct": verdict.correct,
            "flag": verdict.flag,
            "ttc": sum(r.get("completion_tokens") or 0 for r in chosen),
            "votes": vote.votes,
            "voters": vote.voters,
            "clusters": vote.clusters,
            "pool_indices": indices,
        }

    # -- PaCoRe through the operator ----------------------------------------------------------------------
    async def _pacore_unit(
        self,
        problem: Problem,
        messages: list[BaseMessage],
        rows: list[dict[str, Any]],
        rounds: list[int],
        variant: str,
        sample: int,
        results: ResultsFile,
        call_limit: asyncio.Semaphore,
        checkpointer: Any,
        board: _Board,
    ) -> None:
        label = pacore_label(rounds, variant)
        indices = draw(len(rows), rounds[0], problem_id=problem.id, sample=sample, seed=self.settings.seed)
        paced = variant in ("early_stop", "budget")  # they cut rounds short: finish order and partial tokens matter
        explorer = PoolReplayExplorer([as_trajectory(rows[i]) for i in indices], self.explorer, call_limit, paced)
        config = self.settings.pacore_config(rounds, sample, variant)
        runner = PaCoReRunner(explorer, config, checkpointer=checkpointer)
        thread = {"configurable": {"thread_id": f"math|{self.model_name}|{label}|{problem.id}|{sample}"}}
        try:
            snapshot = await runner.graph.aget_state(thread)
            if snapshot.values.get("answer") is not None:
                result = build_result(snapshot.values)  # finished before a kill, but its row was not written yet
            else:  # resume: finished trajectories are kept
                result = await runner.arun(messages, thread, resume=bool(snapshot.next))
        except Exception as exc:  # noqa: BLE001 - recorded and retried on the next run
            await checkpointer.adelete_thread(thread["configurable"]["thread_id"])
            self._fail(board, problem.id, label, sample, exc)
            return
        verdict = self._grade(result.answer, problem.answer)
        results.append(
            {
                **self._base_row(problem, "pacore", label, sample),
                "rounds": rounds,
                "answer": verdict.extracted,
                "correct": verdict.correct,
                "flag": verdict.flag,
                "ttc": result.ttc + explorer.cut_tokens,  # replayed trajectories cut after part of their tokens
                "ttc_approximate": result.ttc_approximate,
                "round_tokens": [r.completion_tokens for r in result.rounds],
                "failed_trajectories": len(result.failures),
                "model_calls": explorer.model_calls,
                "pool_indices": indices,
                "conclusion": result.answer,
                **({"outcome": result.outcome.model_dump(), "cut": len(result.cut)} if variant else {}),
            }
        )
        await checkpointer.adelete_thread(thread["configurable"]["thread_id"])
        board.advance(board.units)

    # -- outputs ---------------------------------------------------------------------------------------
    def _report(self, results: ResultsFile, problem_ids: list[str]) -> MathReport:
        rows = [row for row in results.rows if row["problem_id"] in set(problem_ids)]
        wanted = self._wanted_labels()
        rows = [row for row in rows if row["label"] in wanted]
        failed = {f.problem_id for f in self.failures}
        complete = [p for p in problem_ids if p not in failed]
        points = summarize(rows, complete) if complete else []
        png = table = None
        if points:
            png = plot_curve(
                points, self.output / "curve.png", title=f"{Path(self.settings.data).stem} · {self.model_name}"
            )
            table = self.output / "table.md"
            labels = [p.label for p in points]
            table.write_text(
                "## Accuracy against effective test-time compute\n\n"
                + markdown_table(points)
                + "\n## Per problem (pass@1 / mean effective tokens)\n\n"
                + per_problem_table(per_problem(rows), labels, problem_ids)
            )
        summary = {
            "points": [p.model_dump() for p in points],
            "failures": [f.model_dump() for f in self.failures],
            "problems": len(problem_ids),
            "complete_problems": len(complete),
        }
        (self.output / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return MathReport(
            points=points, failures=self.failures, rows=len(rows), output=self.output, png=png, table=table
        )

    def _wanted_labels(self) -> set[str]:
        labels = {f"vote@{k}" for k in self.settings.effective_vote_ks}
        labels |= {pacore_label(rounds, variant) for rounds, variant in self.settings.pacore_units}
        if "single" in self.settings.methods:
            labels.add("single")
        return labels


def grade_predictions(
    problems: list[Problem], predictions: list[dict[str, Any]], grader: MathGrader | None = None
) -> list[dict[str, Any]]:
    """One verdict row per prediction ({id, response}); unknown ids are refused by the caller."""
    grader = grader or MathGrader()
    gold = {p.id: p for p in problems}
    verdicts = []
    for prediction in predictions:
        problem = gold[prediction["id"]]
        verdict = grader.grade(prediction["response"], problem.answer)
        verdicts.append(
            {
                "id": problem.id,
                "correct": verdict.correct,
                "extracted": verdict.extracted,
                "gold": problem.answer,
                "flag": verdict.flag,
            }
        )
    return verdicts


__all__ = [
    "MathBenchmark",
    "MathReport",
    "MathRunSettings",
    "UnitFailure",
    "grade_predictions",
    "schedule_label",
]
