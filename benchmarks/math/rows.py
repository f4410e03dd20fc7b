"""The result rows of the math benchmark: one per (setting, problem, sample), keyed by ``row_key``.

single and vote rows are made from the pool without model calls; a PaCoRe row from the run's result.
"""

from __future__ import annotations

from typing import Any

from pacore_benchmarks.math.data import Problem
from pacore_benchmarks.math.grading import MathGrader, Verdict
from pacore_benchmarks.math.pool import draw
from pacore_benchmarks.math.settings import Method
from pacore_benchmarks.math.summary import schedule_label
from pacore_graph import PaCoReResult
from pacore_graph.coordination import majority_vote


def pacore_label(rounds: list[int], variant: str = "") -> str:
    """``pacore[32,4]``, or with a coordination variant ``pacore[32,4]+early_stop``."""
    return schedule_label(rounds) + (f"+{variant}" if variant else "")


def unit_key(label: str, problem_id: str, sample: int) -> str:
    """The id of one evaluation unit: its row's key, and its problem id in the batch engine."""
    return f"{label}|{problem_id}|{sample}"


def row_key(row: dict[str, Any]) -> str:
    return unit_key(row["label"], row["problem_id"], row["sample"])


def _base(problem: Problem, method: Method, label: str, sample: int) -> dict[str, Any]:
    return {"method": method, "label": label, "problem_id": problem.id, "sample": sample, "gold": problem.answer}


def single_row(problem: Problem, pooled: dict[str, Any]) -> dict[str, Any]:
    """One pooled trajectory as a single-trajectory sample."""
    return {
        **_base(problem, "single", "single", pooled["index"]),
        "answer": pooled.get("answer"),
        "correct": bool(pooled.get("correct")),
        "flag": pooled.get("flag"),
        "ttc": pooled.get("completion_tokens") or 0,
        "pool_indices": [pooled["index"]],
    }


def vote_row(
    problem: Problem, pool: list[dict[str, Any]], k: int, sample: int, seed: int, grader: MathGrader
) -> dict[str, Any]:
    """Majority vote over sample ``sample``'s draw of k pooled trajectories."""
    indices = draw(len(pool), k, problem_id=problem.id, sample=sample, seed=seed)
    chosen = [pool[i] for i in indices]
    vote = majority_vote([r.get("answer") for r in chosen], grader.equivalent)
    verdict = grader.grade_answer(vote.answer, problem.answer, None if vote.answer else "no_boxed")
    return {
        **_base(problem, "vote", f"vote@{k}", sample),
        "answer": vote.answer,
        "correct": verdict.correct,
        "flag": verdict.flag,
        "ttc": sum(r.get("completion_tokens") or 0 for r in chosen),
        "votes": vote.votes,
        "voters": vote.voters,
        "clusters": vote.clusters,
        "pool_indices": indices,
    }


def pacore_row(
    problem: Problem,
    rounds: list[int],
    variant: str,
    sample: int,
    indices: list[int],
    result: PaCoReResult,
    verdict: Verdict,
    cut_tokens: int = 0,
) -> dict[str, Any]:
    """A PaCoRe run whose first round was the pooled trajectories ``indices``; model calls are its later
    rounds'; ``cut_tokens``: what replayed trajectories cut partway (early stop, budget) had made."""
    return {
        **_base(problem, "pacore", pacore_label(rounds, variant), sample),
        "rounds": rounds,
        "answer": verdict.extracted,
        "correct": verdict.correct,
        "flag": verdict.flag,
        "ttc": result.ttc + cut_tokens,
        "ttc_approximate": result.ttc_approximate,
        "round_tokens": [r.completion_tokens for r in result.rounds],
        "failed_trajectories": len(result.failures),
        "model_calls": sum(t.attempts for r in result.rounds[1:] for t in r.trajectories),
        "pool_indices": indices,
        "conclusion": result.answer,
        "messages": problem.asked(),  # the conversation asked: later rounds' prompts are rebuilt over it
        "records": [r.model_dump() for r in result.rounds],  # every round's trajectories: conclusions, counts
        **({"outcome": result.outcome.model_dump(), "cut": len(result.cut)} if variant else {}),
    }
