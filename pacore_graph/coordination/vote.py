"""Majority vote over trajectories (self-consistency), counting answers that ``equivalent`` calls equal as one:
math-verify in the math benchmark, equal :func:`~pacore_graph.coordination.answers.answer_key` in the operator.

Tie rule (deterministic, independent of timing): among the answers with the most votes, the one whose
first vote came from the lowest trajectory index wins. Trajectories without an extractable answer do
not vote; when none has one, the vote has no answer (and is graded wrong).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import BaseModel


class VoteResult(BaseModel):
    answer: str | None
    votes: int
    clusters: list[tuple[str, int]]  # (representative answer, votes), in first-appearance order
    voters: int


def majority_vote(
    answers: Sequence[str | None], equivalent: Callable[[str, str], bool] = lambda a, b: a == b
) -> VoteResult:
    """Cluster the answers with ``equivalent(representative, candidate)`` and pick the biggest cluster.

    The representative of a cluster is its first answer, so the comparison (asymmetric in math-verify,
    gold first) always reads "does this candidate say the same as the earlier answer".
    """
    representatives: list[str] = []
    counts: list[int] = []
    voters = 0
    for answer in answers:
        if answer is None or not answer.strip():
            continue
        voters += 1
        for position, representative in enumerate(representatives):
            if equivalent(representative, answer):
                counts[position] += 1
                break
        else:
            representatives.append(answer)
            counts.append(1)
    if not representatives:
        return VoteResult(answer=None, votes=0, clusters=[], voters=0)
    best = max(range(len(counts)), key=lambda position: (counts[position], -position))
    return VoteResult(
        answer=representatives[best],
        votes=counts[best],
        clusters=list(zip(representatives, counts, strict=True)),
        voters=voters,
    )
