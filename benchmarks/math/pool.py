"""Pool replay, the paper's evaluation protocol.

First-round trajectories are the bulk of PaCoRe's compute and do not depend on the schedule. So they are
generated once per problem into a pool on disk (one JSONL row per trajectory, appended as each finishes,
so a killed run keeps every finished trajectory), and every schedule, vote size and sample draws its first
round from that pool. Only later rounds call the model.

A sample's draw depends on (seed, problem, k, sample) only: vote@k and a PaCoRe schedule whose first
round is k see the very same trajectories for the same sample, which makes the comparison paired.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage

from pacore_benchmarks.math.data import Problem
from pacore_benchmarks.math.grading import Verdict, grading_rules
from pacore_graph import EpisodeContext, PaCoReConfig, PaCoReError, RunFolder
from pacore_graph.extend import Exploration, Explorer, ModelRequestError, ResultsFile, Trajectory

Pools = dict[str, tuple[Problem, list[dict[str, Any]]]]  # problem id -> the problem and its graded pool


class PoolError(ValueError):
    """The pool cannot serve this run (too small, or made by another model or prompt)."""


class RunAborted(PaCoReError):
    """A failure every further call would repeat (wrong model name, bad API key): stop, keep what is done."""


def _refused(exc: BaseException) -> bool:
    return isinstance(exc, ModelRequestError) and exc.status in (401, 403, 404)


def prompt_digest(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]


class PoolStore:
    """First-round trajectories per problem, in a resumable JSONL file keyed by (problem, index).

    Each row records the model, max_tokens and a digest of the prompt it was generated with; rows made
    under other settings are never mixed in (a clear error names the mismatch instead).
    """

    def __init__(self, path: str | Path, *, model: str, max_tokens: int | None):
        self.path = Path(path)
        self.model = model
        self.max_tokens = max_tokens
        self.file = ResultsFile(self.path, key=lambda row: (row["problem_id"], row["index"]))
        self._by_problem: dict[str, dict[int, dict[str, Any]]] = {}
        for row in self.file.rows:
            self._by_problem.setdefault(row["problem_id"], {})[row["index"]] = row

    def check(self, problem_id: str, prompt: str) -> None:
        """Refuse a pool made for another model, token cap or prompt: replaying it would mix runs."""
        digest = prompt_digest(prompt)
        for row in self._by_problem.get(problem_id, {}).values():
            settings = {"model": self.model, "max_tokens": self.max_tokens, "prompt": digest}
            stored = {"model": row.get("model"), "max_tokens": row.get("max_tokens"), "prompt": row.get("prompt")}
            if stored != settings:
                differing = ", ".join(
                    f"{k}: pool has {stored[k]!r}, run has {settings[k]!r}"
                    for k in settings
                    if stored[k] != settings[k]
                )
                raise PoolError(
                    f"pool {self.path} holds trajectories of problem {problem_id!r} made with other settings "
                    f"({differing}); pass another --pool-file or delete it"
                )
            return

    def rows(self, problem_id: str) -> list[dict[str, Any]]:
        """The problem's trajectories in index order."""
        stored = self._by_problem.get(problem_id, {})
        return [stored[i] for i in sorted(stored)]

    def missing(self, problem_id: str, size: int) -> list[int]:
        stored = self._by_problem.get(problem_id, {})
        return [i for i in range(size) if i not in stored]

    def add(self, problem_id: str, index: int, prompt: str, trajectory: Trajectory, **extra: Any) -> dict[str, Any]:
        row = {
            "problem_id": problem_id,
            "index": index,
            "model": self.model,
            "max_tokens": self.max_tokens,
            "prompt": prompt_digest(prompt),
            "grading": grading_rules(),
            **trajectory.model_dump(exclude={"extra"}),
            **extra,
        }
        self.file.append(row)
        self._by_problem.setdefault(problem_id, {})[index] = row
        return row


def pool_identity(path: str | Path) -> tuple[str, int | None] | None:
    """The model and token cap a pool file was made with (its first row), None for no pool yet: what a run
    that only reads the pool should take as its own."""
    try:
        with Path(path).open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    row = json.loads(line)
                    return str(row["model"]), row.get("max_tokens")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise PoolError(f"{path} is not a pool file of this benchmark ({type(exc).__name__}: {exc})") from None
    return None


def draw(pool_size: int, k: int, *, problem_id: str, sample: int, seed: int = 0) -> list[int]:
    """Pool indices of one sample's first round: k distinct trajectories, reproducible across runs."""
    if k > pool_size:
        raise PoolError(f"a first round of {k} trajectories needs a pool of at least {k}; it has {pool_size}")
    rng = random.Random(f"{seed}:{problem_id}:{k}:{sample}")
    return rng.sample(range(pool_size), k)


def as_trajectory(row: dict[str, Any]) -> Trajectory:
    return Trajectory(
        content=row.get("content") or "",
        reasoning=row.get("reasoning"),
        prompt_tokens=row.get("prompt_tokens"),
        completion_tokens=row.get("completion_tokens"),
        finish_reason=row.get("finish_reason"),
        extra={"pool_index": row["index"]},
    )


async def fill_pool(
    pool: PoolStore,
    problem: Problem,
    size: int,
    explorer: Any,
    config: PaCoReConfig,
    grade: Callable[[str, str], Verdict],
    *,
    slot: AbstractAsyncContextManager[Any] | None = None,
    on_added: Callable[[], None] | None = None,
) -> list[Exception]:
    """Generate the problem's missing pool trajectories (indices below ``size``), each one model call with the
    operator's retries, timeout and token accounting, graded and appended as it finishes; the errors of
    those that failed for good (the others are kept)."""
    messages: list[BaseMessage] = problem.messages()

    async def one(index: int) -> None:
        trajectory = Exploration(explorer, messages, EpisodeContext(round_index=0, index=index), config)
        outcome = await trajectory.explore(slot=slot)
        record = trajectory.record(outcome)
        verdict = grade(outcome.content, problem.answer)
        pool.add(
            problem.id,
            index,
            problem.asked_text(),
            outcome,
            completion_tokens=record["completion_tokens"],
            tokens_approximate=record["tokens_approximate"],
            attempts=record["attempts"],
            answer=verdict.extracted,
            correct=verdict.correct,
            flag=verdict.flag,
        )
        if on_added is not None:
            on_added()

    outcomes = await asyncio.gather(*(one(i) for i in pool.missing(problem.id, size)), return_exceptions=True)
    return [outcome for outcome in outcomes if isinstance(outcome, Exception)]


async def fill_pools(
    problems: list[Problem],
    pool: PoolStore,
    size: int | None,
    explorer: Any,
    config: PaCoReConfig,
    grade: Callable[[str, str], Verdict],
    run: RunFolder,
    on_failure: Callable[[Problem, Exception], None],
) -> Pools:
    """Every problem's pool of ``size`` trajectories, the missing ones generated in ``run`` (its limiter and
    progress), verdicts made by other grading rules made again; ``size`` None: the pool as it is, no calls.

    A problem whose trajectories still fail after retries goes to ``on_failure`` and is left out (rerun to
    retry them); a refusal every call would repeat (401, 403, 404) stops the run with :class:`RunAborted`.
    """
    wanted = {p.id: (pool.missing(p.id, size) if size is not None else []) for p in problems}
    run.progress.add("pool trajectories", sum(len(missing) for missing in wanted.values()))
    slot = run.limiter.semaphore() if run.limiter else None
    pools: Pools = {}

    async def one(problem: Problem) -> None:
        errors: list[Exception] = []
        if wanted[problem.id]:
            errors = await fill_pool(
                pool,
                problem,
                size or 0,
                explorer,
                config,
                grade,
                slot=slot,
                on_added=lambda: run.progress.advance("pool trajectories"),
            )
        fatal = next((error for error in errors if _refused(error)), None)
        if fatal is not None:
            raise RunAborted(
                f"the server refused the request, so every call would fail: {fatal} (check --model, "
                "--base-url and --api-key)"
            )
        if errors:
            on_failure(
                problem,
                PoolError(
                    f"{len(errors)} pool trajectories failed after retries (the others are kept; rerun to retry): "
                    f"{type(errors[0]).__name__}: {errors[0]}"
                ),
            )
            return
        rows = pool.rows(problem.id)
        rows = [row for row in rows if size is None or row["index"] < size]
        if rows:
            pools[problem.id] = (problem, [regraded(row, problem.answer, grade) for row in rows])

    try:
        async with asyncio.TaskGroup() as group:
            for problem in problems:
                group.create_task(one(problem))
    except* RunAborted as aborted:
        raise RunAborted(f"{aborted.exceptions[0]} (finished results are kept in {run.path})") from None
    return {p.id: pools[p.id] for p in problems if p.id in pools}  # in the data's order


def regraded(row: dict[str, Any], gold: str, grade: Callable[[str, str], Verdict]) -> dict[str, Any]:
    """A pool row whose verdict was made by other grading rules, graded again (in memory: the pool is kept)."""
    if row.get("grading") == grading_rules():
        return row
    verdict = grade(row.get("content") or "", gold)
    return {**row, "answer": verdict.extracted, "correct": verdict.correct, "flag": verdict.flag}


PACE_SECONDS_PER_TOKEN = 1e-4  # a paced replay of 10,000 tokens takes 1 s


@dataclass
class FirstRound:
    """The payload of one PaCoRe run of the benchmark: its drawn pooled trajectories, item ``index`` being
    trajectory ``index`` of round 1.

    ``paced`` (for options that cut a round short: early stop, budgets): a replayed trajectory takes as long
    as generating its tokens at one fixed speed would, so trajectories finish shortest first as at a server,
    and one that is cut counts the tokens it had made by then (``cut_tokens``).
    """

    trajectories: list[Trajectory]
    paced: bool = False
    cut_tokens: int = 0


class PoolReplayExplorer:
    """An Explorer whose first round replays the run's :class:`FirstRound` (its payload), later rounds call
    the real explorer (None: a run whose later rounds are all done already; one left to run is refused)."""

    def __init__(self, delegate: Explorer | None):
        self.delegate = delegate

    async def explore(self, messages: list[BaseMessage], episode: EpisodeContext) -> Trajectory:
        if episode.round_index > 0:
            if self.delegate is None:
                raise PoolError("a synthesis left to run needs a model: give the export an explorer")
            return await self.delegate.explore(messages, episode)
        first: FirstRound = episode.payload
        trajectory = first.trajectories[episode.index].model_copy(deep=True)
        if first.paced:
            await _generate(first, trajectory.completion_tokens or 0)
        return trajectory


async def _generate(first: FirstRound, tokens: int) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        await asyncio.sleep(tokens * PACE_SECONDS_PER_TOKEN)
    except asyncio.CancelledError:
        first.cut_tokens += min(tokens, int((loop.time() - started) / PACE_SECONDS_PER_TOKEN))
        raise
