"""Majority vote: equivalent answers vote together, ties go to the earliest answer, no answer no vote."""

from __future__ import annotations

import pytest

from pacore_benchmarks.math.grading import MathGrader
from pacore_graph.coordination.vote import majority_vote


@pytest.fixture(scope="module")
def grader() -> MathGrader:
    return MathGrader()


def test_equivalent_forms_vote_together(grader: MathGrader) -> None:
    vote = majority_vote(["\\frac{1}{2}", "3", "0.5", "\\dfrac{2}{4}", "3"], grader.equivalent)
    assert vote.answer == "\\frac{1}{2}"
    assert vote.votes == 3 and vote.voters == 5
    assert vote.clusters == [("\\frac{1}{2}", 3), ("3", 2)]


def test_integers_with_leading_zeros_are_one_answer(grader: MathGrader) -> None:
    vote = majority_vote(["25", "025", "7", "7"], grader.equivalent)
    assert vote.clusters == [("25", 2), ("7", 2)]
    assert vote.answer == "25"  # a tie: the answer voted first wins


@pytest.mark.parametrize(
    ("answers", "winner"),
    [
        (["1", "2"], "1"),
        (["2", "1"], "2"),
        (["1", "2", "2", "1"], "1"),
        (["3", "1", "2", "2", "1"], "1"),  # 1 and 2 tie at two votes; 1 appeared first
        ([None, "5", None, "6", "6"], "6"),
    ],
)
def test_ties_break_to_the_earliest_answer(answers: list[str | None], winner: str) -> None:
    assert majority_vote(answers).answer == winner


def test_tie_rule_does_not_depend_on_input_permutation_of_other_clusters() -> None:
    """The winner of a tie is a function of first appearance only, not of how later votes interleave."""
    assert majority_vote(["a", "b", "b", "a"]).answer == majority_vote(["a", "b", "a", "b"]).answer == "a"


def test_no_answers_no_vote() -> None:
    vote = majority_vote([None, "", "  "])
    assert vote.answer is None and vote.votes == 0 and vote.voters == 0


def test_set_answers_in_any_order_vote_together(grader: MathGrader) -> None:
    vote = majority_vote(["\\{1,2\\}", "\\{2,1\\}", "3"], grader.equivalent)
    assert vote.votes == 2 and vote.answer == "\\{1,2\\}"
