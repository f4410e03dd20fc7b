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
import random
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage
from pydantic import BaseModel

from pacore_benchmarks.results import ResultsFile
from pacore_graph.episode import EpisodeContext
from pacore_graph.records import Trajectory


class PoolError(ValueError):
    """The pool cannot serve this run (too small, or made by another model or prompt)."""


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
            **trajectory.model_dump(exclude={"extra"}),
            **extra,
        }
        self.file.append(row)
        self._by_problem.setdefault(problem_id, {})[index] = row
        return row


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


PACE_SECONDS_PER_TOKEN = 1e-4  # a paced replay of 10,000 tokens takes 1 s


class PoolReplayExplorer:
    """An Explorer whose first round comes from the pool; later rounds call the real explorer.

    ``call_limit`` bounds model calls across every concurrent PaCoRe run of the benchmark (each run's own
    limiter bounds only that run). ``paced`` (for options that cut a round short: early stop, budgets): a
    replayed trajectory takes as long as generating its tokens at one fixed speed would, so trajectories
    finish shortest first as at a server, and one that is cut counts the tokens it had made by then
    (``cut_tokens``).
    """

    def __init__(
        self, pooled: list[Trajectory], delegate: Any, call_limit: asyncio.Semaphore | None = None, paced: bool = False
    ):
        self.pooled = pooled
        self.delegate = delegate
        self.call_limit = call_limit
        self.paced = paced
        self.model_calls = 0
        self.cut_tokens = 0

    async def explore(self, messages: list[BaseMessage], episode: EpisodeContext) -> Trajectory:
        round_index, index = episode.round_index, episode.index
        if round_index == 0:
            trajectory = self.pooled[index].model_copy(deep=True)
            if self.paced:
                await self._generate(trajectory.completion_tokens or 0)
            return trajectory
        self.model_calls += 1
        if self.call_limit is None:
            return await self.delegate.explore(messages, episode)
        async with self.call_limit:
            return await self.delegate.explore(messages, episode)

    async def _generate(self, tokens: int) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await asyncio.sleep(tokens * PACE_SECONDS_PER_TOKEN)
        except asyncio.CancelledError:
            self.cut_tokens += min(tokens, int((loop.time() - started) / PACE_SECONDS_PER_TOKEN))
            raise


class PoolStats(BaseModel):
    """What one problem's pool says on its own: the single-trajectory pass rate and its cost."""

    problem_id: str
    size: int
    correct: int
    pass_rate: float
    mean_completion_tokens: float
    distinct_answers: int
    no_answer: int


def pool_stats(
    problem_id: str,
    rows: Iterable[dict[str, Any]],
    equivalent: Callable[[str, str], bool] = lambda a, b: a == b,
) -> PoolStats:
    """Pass rate, mean tokens and answer diversity of a graded pool (rows carry ``answer`` and ``correct``)."""
    rows = list(rows)
    if not rows:
        raise PoolError(f"the pool of {problem_id!r} is empty")
    answers: list[str] = []
    no_answer = 0
    for row in rows:
        answer = row.get("answer")
        if answer is None:
            no_answer += 1
        elif not any(equivalent(seen, answer) for seen in answers):
            answers.append(answer)
    correct = sum(bool(row.get("correct")) for row in rows)
    return PoolStats(
        problem_id=problem_id,
        size=len(rows),
        correct=correct,
        pass_rate=correct / len(rows),
        mean_completion_tokens=sum(row.get("completion_tokens") or 0 for row in rows) / len(rows),
        distinct_answers=len(answers),
        no_answer=no_answer,
    )


def majority_probability(pool_size: int, correct: int, k: int) -> float:
    """Chance that the correct answers form a strict majority of k draws without replacement from a pool
    holding ``correct`` correct trajectories (hypergeometric).

    With a single wrong answer in the pool and k odd this is exactly the expected vote@k accuracy; with
    wrong answers that split it is a lower bound. Tests check replayed votes against it.
    """
    from math import comb  # noqa: PLC0415

    wrong = pool_size - correct
    total = comb(pool_size, k)
    return sum(comb(correct, j) * comb(wrong, k - j) for j in range(k // 2 + 1, k + 1)) / total
